"""Front-end-neutral manifold objects: one API that the pymanopt and geoopt adapters wrap.

Every method takes torch tensors with optional leading batch dimensions.

**Points off the manifold.** The maps (``proj``, ``egrad2rgrad``, ``retr``, ``exp``,
``transp``, ``inner``) are the formulas at a point X of the manifold, and X is not checked: a
check costs as much as the map and, on a GPU, a synchronisation per call. Points enter checked
through ``check_point``, the optimizers' start checks and ``projx`` (which raises
:class:`InfeasiblePointError` outside its range). At a rank-deficient X, such as X = 0, which
lies on neither manifold (``XᵀJX = J_k`` needs rank k), a map's value is its formula's: on O(J)
every map is a polynomial or rational function of X that is 0 at X = 0 (``proj``,
``egrad2rgrad``, ``transp``: ``X·(…)``; ``retr``, ``exp``: ``X·(a group element)``), and on
iSt the projection's Lyapunov system ``(XᵀX)S + S(XᵀX) = 2 sym(XᵀJU)`` is singular, so
``proj``, ``egrad2rgrad`` and ``transp`` return NaN. Neither is a tangent vector or a point of
the manifold.
"""

from __future__ import annotations

import math

import torch

from . import indefinite_stiefel as ist
from . import jorthogonal as jo
from ._linalg import fro_inner
from .signature import Signature, make_signature

__all__ = [
    "JOrthogonalGeometry",
    "IndefiniteStiefelGeometry",
    "InfeasiblePointError",
    "require_feasible",
    "feasibility_tol",
    "check_arguments",
]


class InfeasiblePointError(ValueError):
    """A point that should lie on the manifold does not (the message gives the violation)."""


def feasibility_tol(dtype: torch.dtype, n: int) -> float:
    """The feasibility tolerance of a point with ``n`` rows stored in ``dtype``:
    ``max(√ε, 64·n·ε)`` with ``ε`` the dtype's machine epsilon.

    This is the one rule every start check and ``projx`` uses, for the relative measures of the
    geometries (``‖XᵀJX − J_k‖_F/‖X‖_F²``; ``‖XᵀX − I‖_F`` on Stiefel, where ``‖X‖_F² = p``).
    A Gram matrix ``XᵀJX`` formed in ``dtype`` carries a rounding error up to about
    ``n·ε·‖X‖_F²`` (sums of ``n`` products), so ``64·n·ε`` accepts any point that is feasible to
    rounding, in particular a feasible float64 point rounded to float32; the floor ``√ε``
    (1.5e-8 in float64, 3.5e-4 in float32) leaves room for the drift that products of many
    exactly feasible factors accumulate in a long run.

    Raises:
        TypeError: ``dtype`` is not a real floating-point type.
    """
    if not (dtype.is_floating_point and not dtype.is_complex):
        raise TypeError(f"points must have a real floating-point dtype, got {dtype}")
    eps = torch.finfo(dtype).eps
    return max(math.sqrt(eps), 64.0 * n * eps)


def check_arguments(name: str, shape: tuple[int, int], *tensors: torch.Tensor) -> None:
    """Check the arguments of a manifold map before any arithmetic: tensors of one real
    floating-point dtype, float32 or float64 (torch.linalg has no half-precision CPU kernels,
    and a half-precision constraint would hold to 1e-3 at best), on one device, each of shape
    ``(..., *shape)``.

    Raises:
        TypeError: a non-tensor, an integer, complex or half-precision tensor, or mixed dtypes
            / devices.
        ValueError: a tensor whose last two dimensions are not ``shape``.
    """
    first = tensors[0]
    for i, t in enumerate(tensors):
        if not torch.is_tensor(t):
            raise TypeError(f"{name}: argument {i} must be a tensor, got {type(t).__name__}")
        if t.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"{name}: argument {i} must be real floating point (float32 or "
                            f"float64), got {t.dtype}")
        if t.dtype != first.dtype or t.device != first.device:
            raise TypeError(f"{name}: arguments must share one dtype and device, got "
                            f"{first.dtype} on {first.device} and {t.dtype} on {t.device}")
        if t.ndim < 2 or tuple(t.shape[-2:]) != tuple(shape):
            raise ValueError(f"{name}: argument {i} must have shape (..., {shape[0]}, "
                             f"{shape[1]}), got {tuple(t.shape)}")


def require_feasible(name: str, x: torch.Tensor, violation, label: str,
                     tol: float | None = None) -> None:
    """Raise :class:`InfeasiblePointError` unless ``x`` is finite and ``max violation(x) ≤ tol``.

    ``label`` names the measure in the message; ``tol`` defaults to
    :func:`feasibility_tol` of ``x``'s dtype and row count.

    Raises:
        TypeError: ``x`` is not a real floating-point tensor.
        InfeasiblePointError: non-finite entries, or a violation above ``tol``.
    """
    tol = feasibility_tol(x.dtype, x.shape[-2]) if tol is None else tol
    if not torch.isfinite(x).all():
        raise InfeasiblePointError(f"{name}: point has non-finite entries")
    v = violation(x).max().item()
    if not v <= tol:
        raise InfeasiblePointError(f"{name}: point is infeasible: {label} = {v:.3e} > {tol:.1e}")


class _JGeometry:
    """Shared parts of the two J-manifolds: constraint ``XᵀJ_nX = J_k``."""

    name = "J-manifold"
    j: Signature
    jk: Signature
    retractions: tuple[str, ...] = ("cayley",)

    def __init__(self, retraction: str):
        if retraction not in self.retractions:
            raise ValueError(f"{self.name}: unsupported retraction {retraction!r}; "
                             f"choose from {self.retractions}")
        self.retraction = retraction

    @property
    def shape(self) -> tuple[int, int]:
        return (self.j.n, self.jk.n)

    def typical_dist(self) -> float:
        """``√dim``: pymanopt's typical distance, the scale of TrustRegions' default radius (the
        set is unbounded)."""
        return math.sqrt(self.dim)

    # ---- feasibility -------------------------------------------------------------
    def gram_error(self, x: torch.Tensor) -> torch.Tensor:
        return jo.gram_error(self.j, x, self.jk)

    def violation(self, x: torch.Tensor) -> torch.Tensor:
        """Papers' measure: mean absolute entry of ``XᵀJX − J``."""
        return jo.violation(self.j, x, self.jk)

    def relative_violation(self, x: torch.Tensor) -> torch.Tensor:
        """``‖XᵀJX − J‖_F / ‖X‖_F²``."""
        return jo.relative_violation(self.j, x, self.jk)

    def check_shape(self, x: torch.Tensor, what: str = "point") -> None:
        if x.ndim < 2 or tuple(x.shape[-2:]) != self.shape:
            raise ValueError(
                f"{self.name}: {what} must have shape (..., {self.shape[0]}, {self.shape[1]}), "
                f"got {tuple(x.shape)}"
            )

    def check_point(self, x: torch.Tensor, tol: float | None = None) -> None:
        """Raise :class:`InfeasiblePointError` unless ``‖XᵀJX − J‖_F / ‖X‖_F² ≤ tol``."""
        self.check_shape(x)
        require_feasible(self.name, x, self.relative_violation, "‖XᵀJX − J‖_F/‖X‖_F²", tol)

    #: the largest ``‖J_k(XᵀJX − J_k)‖₂`` that :meth:`projx` restores
    projx_range = 0.5

    def projx(self, x: torch.Tensor) -> torch.Tensor:
        """Feasibility restoration for nearly feasible points (:func:`jorthogonal.refine`,
        quadratically convergent): defined for ``‖J_k(XᵀJX − J_k)‖₂ ≤ ½``, where it returns a
        point feasible to rounding. No projection onto the set is known in closed form, so a
        point farther away is refused rather than mapped to an infeasible one.

        Raises:
            InfeasiblePointError: ``x`` has non-finite entries or lies outside that range.
        """
        self.check_shape(x)
        if not bool(torch.isfinite(x).all()):
            raise InfeasiblePointError(f"{self.name}.projx: point has non-finite entries")
        size = float(torch.linalg.matrix_norm(self.gram_error(x), ord=2).max())
        if not size <= self.projx_range:
            raise InfeasiblePointError(
                f"{self.name}.projx restores points with ‖J_k(XᵀJX − J_k)‖₂ <= "
                f"{self.projx_range}; got {size:.3e}. No projection onto {self.name} is known "
                "in closed form: start from a point of the manifold (random or origin) and "
                "move along it (retr)")
        return jo.refine(self.j, x, self.jk)

    def random_point(
        self,
        batch: tuple[int, ...] = (),
        *,
        cond: float = 10.0,
        dtype: torch.dtype = torch.float64,
        device=None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        raise NotImplementedError


class JOrthogonalGeometry(_JGeometry):
    """O(J) with the left-invariant metric (see :mod:`orthoplug.geometry.jorthogonal`)."""

    name = "JOrthogonal"
    retractions = ("cayley", "exp")

    def __init__(self, n: int, p: int | None = None, *, signature=None, retraction="cayley"):
        if p is None and signature is None:
            raise ValueError("JOrthogonal: give p (number of +1 entries of J) or signature")
        self.j = make_signature(n, p, signature)
        self.jk = self.j
        super().__init__(retraction)

    @property
    def dim(self) -> int:
        """Manifold dimension ``n(n − 1)/2`` (that of o(J))."""
        n = self.j.n
        return n * (n - 1) // 2

    def inner(self, x, u, v, keepdim=False):
        """Left-invariant metric ``⟨XΩ₁, XΩ₂⟩ = tr(Ω₁ᵀΩ₂)`` with ``Ω = X⁻¹U`` (batched)."""
        return jo.inner(self.j, x, u, v, keepdim=keepdim)

    def proj(self, x, u):
        """Orthogonal projection of an ambient ``U`` onto ``T_X = {XΩ : ΩᵀJ + JΩ = 0}`` in this
        metric.
        """
        return jo.proj(self.j, x, u)

    def egrad2rgrad(self, x, g):
        """Riemannian gradient ``X J skew(J Xᵀ G)`` from the Euclidean gradient ``G`` (no Lyapunov
        solve).
        """
        return jo.egrad2rgrad(self.j, x, g)

    def ehess2rhess(self, x, g, h, xi):
        """Riemannian Hessian applied to ``xi``, from the Euclidean gradient ``g`` and
        Hessian-vector product ``h`` (Levi-Civita connection of the left-invariant metric).
        """
        return jo.ehess2rhess(self.j, x, g, h, xi)

    def retr(self, x, u):
        """The configured retraction: Cayley (default) or the exponential map."""
        if self.retraction == "exp":
            return jo.expmap(self.j, x, u)
        return jo.retr_cayley(self.j, x, u)

    def exp(self, x, u):
        """Exact Riemannian exponential ``X exp(Ωᵀ) exp(Ω − Ωᵀ)`` for ``U = XΩ``."""
        return jo.expmap(self.j, x, u)

    def transp(self, x, y, v):
        """Vector transport by left translation ``XΩ ↦ YΩ`` (an isometry of this metric)."""
        return jo.transp(self.j, x, y, v)

    def random_point(self, batch=(), *, cond=10.0, component=(1, 1), dtype=torch.float64,
                     device=None, generator=None):
        """Random points ``U Σ Wᵀ`` of condition number ``cond`` in the connected component
        ``component`` = (sign det X₊₊, sign det X₋₋), shape ``batch + (n, n)``.
        """
        return jo.random_point(self.j, tuple(batch), cond=cond, component=component,
                               dtype=dtype, device=device, generator=generator)

    def random_tangent(self, x, generator=None):
        """A random unit tangent vector ``X J S`` (S Gaussian skew), normalised in the metric."""
        return jo.random_tangent(self.j, x, generator)

    def __repr__(self) -> str:
        return f"JOrthogonal(n={self.j.n}, {self.j!r})"


class IndefiniteStiefelGeometry(_JGeometry):
    """iSt(n, k) with the Euclidean metric (see :mod:`orthoplug.geometry.indefinite_stiefel`)."""

    name = "IndefiniteStiefel"

    def __init__(self, n: int, k: int, p: int | None = None, k_plus: int | None = None, *,
                 signature=None, k_signature=None, retraction="cayley"):
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"IndefiniteStiefel: k must be an integer >= 1, got {k!r}")
        if isinstance(n, int) and k > n:
            raise ValueError(f"IndefiniteStiefel: need k <= n, got k={k}, n={n}")
        self.j = make_signature(n, p, signature, name="J_n")
        self.jk = make_signature(k, k_plus, k_signature, name="J_k")
        ist.column_selection(self.j, self.jk)  # raises if J_k does not fit
        super().__init__(retraction)

    @property
    def dim(self) -> int:
        """Manifold dimension ``nk − k(k + 1)/2``."""
        n, k = self.shape
        return n * k - k * (k + 1) // 2

    def inner(self, x, u, v, keepdim=False):
        """Euclidean (Frobenius) metric ``tr(UᵀV)``."""
        return fro_inner(u, v, keepdim=keepdim)

    def proj(self, x, u):
        """Orthogonal projection ``U − J X S`` onto the tangent space (S from a k×k Lyapunov
        equation); also the Riemannian gradient of a Euclidean gradient.
        """
        return ist.proj(self.j, x, u)

    egrad2rgrad = proj

    def ehess2rhess(self, x, g, h, xi):
        """Riemannian Hessian applied to ``xi`` by the Weingarten formula."""
        return ist.ehess2rhess(self.j, x, g, h, xi)

    def retr(self, x, u):
        """Cayley retraction of a rank-2k element of o(Jₙ), evaluated with the Woodbury identity in
        O(nk²).
        """
        return ist.retr_cayley(self.j, self.jk, x, u)

    def exp(self, x, u):
        """Not available: raises ``NotImplementedError`` (use :meth:`retr`)."""
        raise NotImplementedError(
            "IndefiniteStiefel has no closed-form exponential map; use retr (low-rank Cayley)"
        )

    def transp(self, x, y, v):
        """Vector transport by projection onto the tangent space at ``y``."""
        return ist.proj(self.j, y, v)

    def random_point(self, batch=(), *, cond=10.0, dtype=torch.float64, device=None,
                     generator=None):
        """k columns of random O(Jₙ) points of condition number ``cond``, shape ``batch + (n, k)``.
        """
        return ist.random_point(self.j, self.jk, tuple(batch), cond=cond, dtype=dtype,
                                device=device, generator=generator)

    def random_tangent(self, x, generator=None):
        """A random unit (Frobenius) tangent vector: the projection of a Gaussian."""
        return ist.random_tangent(self.j, x, generator)

    def __repr__(self) -> str:
        return f"IndefiniteStiefel(J_n={self.j!r}, J_k={self.jk!r})"
