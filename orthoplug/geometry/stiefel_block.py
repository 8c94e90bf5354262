r"""Column submanifold blocks of the Stiefel manifold (the geometry behind RSSM).

Fix ``X ∈ St(n, p)`` and a column subset ``C`` (``q = |C|``) with complement ``R`` (``r = p − q``).
The *submanifold block*

    M = {Y ∈ St(n, q) : X_Rᵀ Y = 0}

is the set of values the columns ``C`` can take while the columns ``R`` stay fixed and the whole
matrix stays on St(n, p). It is a Stiefel manifold St(n − r, q) living in the subspace
``range(X_R)^⊥``, an embedded submanifold of ℝⁿˣᑫ (Euclidean metric) of dimension
``(n − r) q − q(q + 1)/2``, with

* tangent space ``T_Y M = {ξ : Yᵀξ skew, X_Rᵀξ = 0}``;
* orthogonal projection (formula (15) of Cheung et al. 2024, written for ``Y = X_C``)::

      P_Y(G) = Y skew(YᵀG) + (I − XXᵀ) G = G − Y sym(YᵀG) − X_R (X_RᵀG),      X = [Y, X_R],

  computed without forming ``I − XXᵀ``: ``O(n p q)`` flops;
* projection onto M (Lemma 3.2): ``P_M(Ξ) = polar((I − X_R X_Rᵀ) Ξ)``. The retraction is
  ``R_Y(ξ) = P_M(Y + ξ)``. In exact arithmetic ``X_RᵀΞ = 0`` already for tangent ξ, so the
  factor ``I − X_R X_Rᵀ`` is redundant; in floating point it is the cheap (``O(n r q)``)
  re-orthogonalisation that keeps ``‖X_RᵀY⁺‖`` at the rounding level of one product instead of
  inheriting the error of earlier steps (tested in ``tests/geometry/test_stiefel_block.py``);
* Riemannian Hessian ``Hess f(Y)[ξ] = P_Y(∇²f(Y)[ξ] − ξ sym(Yᵀ∇f(Y)))`` (M is a Stiefel manifold
  inside a linear subspace, whose projector commutes with ``P_Y``).

Two interfaces:

* functions on a full point ``X`` and index tensors (:func:`block_tangent_projection`,
  :func:`block_update`, :func:`partition_columns`) used by the RSSM solver, where the block
  changes every iteration;
* :class:`StiefelBlockGeometry` — one fixed block as a manifold of ``n × q`` points, wrapped as
  ``StiefelBlock`` for pymanopt and geoopt so that any host solver can optimise one block with
  the other columns frozen.

No function forms an ``n × n`` matrix.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from orthoplug._random import randn

from ._linalg import fro_inner, sym
from .manifolds import InfeasiblePointError, feasibility_tol, require_feasible
from .stiefel import polar

__all__ = [
    "StiefelBlockGeometry",
    "take_columns",
    "put_columns",
    "block_tangent_projection",
    "block_update",
    "partition_columns",
    "polar_tall",
]

#: Gram condition number up to which :func:`polar_tall` uses the Gram eigen-decomposition.
_GRAM_COND_MAX = 16.0


def polar_tall(a: torch.Tensor) -> torch.Tensor:
    r"""Orthogonal polar factor ``A (AᵀA)^{-1/2}`` of a tall ``n × q`` matrix (batched).

    Fast path: ``eigh`` of the ``q × q`` Gram matrix ``AᵀA = V diag(w) Vᵀ`` and
    ``A V diag(w^{-1/2}) Vᵀ`` — ``O(n q² + q³)``, about twice as fast as an SVD. Its orthogonality
    error is ``≈ ε·cond(AᵀA)``, so it is used only when ``cond(AᵀA) ≤ 16`` (always the case for
    a subgradient step ``X_C − γξ`` with ``γ‖ξ‖₂ ≤ √15``, since then ``ΞᵀΞ = I + γ²ξᵀξ``);
    otherwise the thin SVD ``A = U Σ Wᵀ ↦ U Wᵀ`` is used (error ``≈ ε`` for any full-rank A).
    The result has the column space of ``A``.
    """
    w, v = torch.linalg.eigh(a.mT @ a)
    if a.ndim == 2:
        ws = w.tolist()
        lo, hi = ws[0], ws[-1]
        fast = lo > 0 and hi <= _GRAM_COND_MAX * lo  # False for NaN
    else:
        lo, hi = w[..., 0], w[..., -1]
        fast = bool(((lo > 0) & (hi <= _GRAM_COND_MAX * lo)).all())
    if fast:
        return a @ ((v * w.rsqrt()[..., None, :]) @ v.mT)
    return polar(a)


def _as_index(cols) -> torch.Tensor:
    if torch.is_tensor(cols):
        return cols.detach().to(torch.long).reshape(-1).cpu()
    return torch.as_tensor(list(cols) if not isinstance(cols, int) else [cols],
                           dtype=torch.long).reshape(-1)


def take_columns(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``x[..., idx]`` (a copy); a contiguous row gather when ``x`` is stored column-major."""
    if x.ndim >= 2 and x.stride(-2) == 1 and x.shape[-1] > 1:
        return torch.index_select(x.mT, -2, idx).mT
    return torch.index_select(x, -1, idx)


def put_columns(x: torch.Tensor, idx: torch.Tensor, new: torch.Tensor) -> None:
    """``x[..., idx] = new`` in place (contiguous row writes when ``x`` is column-major)."""
    if x.ndim >= 2 and x.stride(-2) == 1 and x.shape[-1] > 1:
        x.mT.index_copy_(-2, idx, new.mT.to(x.dtype))
    else:
        x[..., idx] = new


def partition_columns(p: int, num_blocks: int | None = None,
                      blocks: Sequence[Sequence[int]] | None = None) -> list[torch.Tensor]:
    """A partition of ``range(p)`` into ``ℓ ≥ 2`` blocks (uniform by default).

    Args:
        p: number of columns.
        num_blocks: ℓ, for the balanced contiguous partition (block sizes differ by at most one,
            as ``numpy.array_split``); ignored when ``blocks`` is given.
        blocks: an explicit partition (a sequence of index sequences).

    Raises:
        ValueError: ℓ < 2 or ℓ > p, or ``blocks`` is not a partition of ``range(p)`` into at
            least two non-empty blocks.
    """
    if blocks is not None:
        out = []
        for b in blocks:
            t = torch.as_tensor(list(b) if not torch.is_tensor(b) else b, dtype=torch.long)
            if t.ndim != 1 or t.numel() == 0:
                raise ValueError(f"each block must be a non-empty list of column indices, "
                                 f"got {b!r}")
            out.append(t)
        if len(out) < 2:
            raise ValueError(f"RSSM needs at least 2 blocks, got {len(out)}")
        allidx = torch.cat(out)
        if (allidx.numel() != p or bool((allidx < 0).any()) or bool((allidx >= p).any())
                or torch.unique(allidx).numel() != p):
            raise ValueError(f"blocks must partition the column indices 0..{p - 1} (each exactly "
                             f"once); got {[b.tolist() for b in out]}")
        return out
    if num_blocks is None or isinstance(num_blocks, bool) or not isinstance(num_blocks, int):
        raise ValueError(f"num_blocks must be an integer, got {num_blocks!r}")
    if num_blocks < 2:
        raise ValueError(f"num_blocks must be >= 2 (RSSM updates a pair of blocks), got "
                         f"{num_blocks}")
    if num_blocks > p:
        raise ValueError(f"num_blocks must be <= p = {p} (the number of columns), got "
                         f"{num_blocks}")
    return list(torch.tensor_split(torch.arange(p), num_blocks))


def block_tangent_projection(x: torch.Tensor, cols: torch.Tensor, g: torch.Tensor,
                             rest: torch.Tensor | None = None) -> torch.Tensor:
    r"""Formula (15): ``ξ = X_C skew(X_Cᵀ G) + (I − XXᵀ) G`` for ``G ∈ ℝⁿˣᑫ``, ``q = |C|``.

    Computed as ``G − X_C sym(X_CᵀG) − X_R(X_RᵀG)`` (no ``n × n`` matrix): ``O(n p q)`` flops.
    ``rest`` (the complement of ``cols``) is computed when omitted.
    """
    p = x.shape[-1]
    if rest is None:
        rest = complement(cols, p)
    xc, xr = x[..., cols], x[..., rest]
    return g - xc @ sym(xc.mT @ g) - xr @ (xr.mT @ g)


def complement(cols: torch.Tensor, p: int) -> torch.Tensor:
    """Indices of ``range(p)`` not in ``cols`` (ascending)."""
    mask = torch.ones(p, dtype=torch.bool, device=cols.device)
    mask[cols] = False
    return torch.nonzero(mask).reshape(-1)


def block_update(x: torch.Tensor, cols: torch.Tensor, g: torch.Tensor, step: float,
                 rest: torch.Tensor | None = None, *, project_step: bool = True
                 ) -> torch.Tensor:
    r"""New columns ``X_C⁺ = P_M(X_C − γ ξ)`` of one RSSM step (formulas (15)–(16)).

    ``ξ`` is the block tangent projection (15) of the partial (sub)gradient ``G`` (n × q). With
    ``project_step=True`` (default) the step is projected onto M by Lemma 3.2,
    ``polar((I − X_R X_Rᵀ)Ξ)``; since ``ξ`` and ``ξ_St = G − X_C sym(X_CᵀG)`` differ only by
    ``X_R(X_RᵀG)``, which that projector removes, the computation uses ``ξ_St`` and costs
    ``2 n q² + 2 n r q`` flops for the products plus ``O(n q² + q³)`` for the polar factor —
    ``O(n p q)`` in all, half of evaluating (15) and then re-orthogonalising. With
    ``project_step=False`` it is the paper's update ``polar(X_C − γ ξ)`` with ξ from (15)
    (orthogonality to ``X_R`` then holds up to the rounding of (15) and of earlier steps).

    Returns the ``n × q`` block; the caller writes it into columns ``cols`` (the other columns
    are not touched).
    """
    p = x.shape[-1]
    if rest is None:
        rest = complement(cols, p)
    xc = take_columns(x, cols)
    xr = take_columns(x, rest)
    if project_step and x.ndim == 2:  # fused BLAS calls for the common unbatched case
        h = xc.mT @ g  # y = X_C − γ ξ_St = X_C − γ G + γ X_C sym(X_CᵀG)
        y = torch.addmm(torch.add(xc, g, alpha=-step), xc, h + h.mT, alpha=0.5 * step)
        if rest.numel():
            y = torch.addmm(y, xr, xr.mT @ y, alpha=-1.0)  # (I − X_R X_Rᵀ)(·)
    elif project_step:
        y = xc - step * (g - xc @ sym(xc.mT @ g))
        if rest.numel():
            y = y - xr @ (xr.mT @ y)
    else:
        y = xc - step * (g - xc @ sym(xc.mT @ g) - xr @ (xr.mT @ g))
    return polar_tall(y)


class StiefelBlockGeometry:
    r"""One submanifold block ``M = {Y ∈ St(n, q) : X_Rᵀ Y = 0}`` as a manifold of n × q points.

    Args:
        x_full: a point of St(n, p) (torch tensor, or anything ``torch.as_tensor`` accepts);
            its columns ``R`` (the complement of ``columns``) are the fixed part, its columns
            ``C`` the initial value of the variable (:attr:`initial_point`).
        columns: the variable columns ``C`` (distinct indices in ``range(p)``, at least one).
        tol: feasibility tolerance of ``x_full`` (``‖XᵀX − I‖_F``; default
            :func:`~orthoplug.geometry.manifolds.feasibility_tol`).

    Points are ``n × q`` (with any leading batch dimensions; the fixed columns are shared).
    The metric is Euclidean; see the module docstring for the formulas.
    :meth:`assemble` writes a block back into the full matrix. ``exp`` is not implemented
    (use ``retr``, the polar projection onto M).

    Raises:
        ValueError: bad ``columns``; :class:`InfeasiblePointError` if ``x_full`` is not on
            St(n, p).
    """

    name = "StiefelBlock"

    def __init__(self, x_full, columns, *, tol: float | None = None):
        x = torch.as_tensor(x_full)
        if not x.is_floating_point():
            x = x.to(torch.float64)
        if x.ndim != 2:
            raise ValueError(f"{self.name}: x_full must be one n × p matrix, got shape "
                             f"{tuple(x.shape)}")
        n, p = x.shape
        if not 1 <= p <= n:
            raise ValueError(f"{self.name}: x_full must be n × p with 1 <= p <= n, got {n} × {p}")
        cols = _as_index(columns)
        if cols.numel() == 0:
            raise ValueError(f"{self.name}: columns must not be empty")
        if bool((cols < 0).any()) or bool((cols >= p).any()):
            raise ValueError(f"{self.name}: columns must lie in 0..{p - 1}, got {cols.tolist()}")
        if torch.unique(cols).numel() != cols.numel():
            raise ValueError(f"{self.name}: columns must be distinct, got {cols.tolist()}")
        if not torch.isfinite(x).all():
            raise InfeasiblePointError(f"{self.name}: x_full has non-finite entries")
        tol = feasibility_tol(x.dtype, n) if tol is None else tol
        gram = x.mT @ x - torch.eye(p, dtype=x.dtype, device=x.device)
        v = float(torch.linalg.matrix_norm(gram))
        if not v <= tol:
            raise InfeasiblePointError(
                f"{self.name}: x_full is not on St({n}, {p}): ‖XᵀX − I‖_F = {v:.3e} > {tol:.1e}; "
                "orthonormalise it first (e.g. orthoplug.geometry.stiefel.polar)")
        self.n, self.p = n, p
        self.columns = cols
        self.rest = complement(cols, p)
        self.q, self.r = int(cols.numel()), int(self.rest.numel())
        self.x_full = x.clone()
        self.fixed = x[:, self.rest].clone()
        self._fixed_cache: dict = {}

    # ---- shapes and bookkeeping ------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        """``(n, |C|)``: the shape of the variable columns."""
        return (self.n, self.q)

    @property
    def dim(self) -> int:
        """Manifold dimension ``(n − r)q − q(q + 1)/2`` (q = ``|C|`` variable, r fixed columns)."""
        return (self.n - self.r) * self.q - self.q * (self.q + 1) // 2

    @property
    def initial_point(self) -> torch.Tensor:
        """The columns ``C`` of ``x_full`` (a point of M)."""
        return self.x_full[:, self.columns].clone()

    def _xr(self, like: torch.Tensor) -> torch.Tensor:
        key = (like.dtype, like.device)
        t = self._fixed_cache.get(key)
        if t is None:
            t = self._fixed_cache[key] = self.fixed.to(dtype=like.dtype, device=like.device)
        return t

    def assemble(self, y: torch.Tensor) -> torch.Tensor:
        """The full ``n × p`` matrix with ``y`` in columns ``C`` and the fixed columns elsewhere.

        Differentiable in ``y`` (torch autograd), batched over leading dimensions of ``y``.
        """
        self.check_shape(y)
        xr = self._xr(y).expand(*y.shape[:-2], self.n, self.r)
        both = torch.cat([y, xr], dim=-1)
        order = torch.argsort(torch.cat([self.columns, self.rest])).to(y.device)
        return both[..., order]

    def check_shape(self, x: torch.Tensor, what: str = "point") -> None:
        """Raise ``ValueError`` naming the expected and the actual shape unless ``x`` is ``(..., n,
        |C|)``.
        """
        if x.ndim < 2 or tuple(x.shape[-2:]) != self.shape:
            raise ValueError(f"{self.name}: {what} must have shape (..., {self.n}, {self.q}), "
                             f"got {tuple(x.shape)}")

    # ---- feasibility ------------------------------------------------------------------------
    def gram_error(self, x: torch.Tensor) -> torch.Tensor:
        """``[YᵀY − I; X_RᵀY]`` ((q + r) × q): zero exactly on M."""
        e = x.mT @ x - torch.eye(self.q, dtype=x.dtype, device=x.device)
        return torch.cat([e, self._xr(x).mT @ x], dim=-2)

    def violation(self, x: torch.Tensor) -> torch.Tensor:
        r"""``(‖YᵀY − I‖_F² + 2‖X_RᵀY‖_F²)^{1/2}``: the part of ‖[Y, X_R]ᵀ[Y, X_R] − I‖_F that
        depends on Y."""
        e = x.mT @ x - torch.eye(self.q, dtype=x.dtype, device=x.device)
        c = self._xr(x).mT @ x
        return torch.sqrt(torch.linalg.matrix_norm(e) ** 2 + 2 * torch.linalg.matrix_norm(c) ** 2)

    relative_violation = violation

    def check_point(self, x: torch.Tensor, tol: float | None = None) -> None:
        """Raise :class:`InfeasiblePointError` unless the violation is ≤ ``tol``."""
        self.check_shape(x)
        require_feasible(self.name, x, self.violation, "(‖YᵀY − I‖² + 2‖X_RᵀY‖²)^½", tol)

    def tangent_residual(self, x: torch.Tensor, u: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(residual, reference)`` of the tangency conditions ``Yᵀu`` skew and ``X_Rᵀu = 0``.

        ``residual = [Yᵀu + uᵀY; X_Rᵀu]`` is zero exactly for tangent ``u``;
        ``reference = [Yᵀu; X_Rᵀu]`` gives its scale.
        """
        s = x.mT @ u
        c = self._xr(x).mT @ u
        return torch.cat([s + s.mT, c], dim=-2), torch.cat([s, c], dim=-2)

    # ---- Riemannian geometry ----------------------------------------------------------------
    def inner(self, x, u, v, keepdim=False):
        """Euclidean (Frobenius) metric ``tr(UᵀV)``."""
        return fro_inner(u, v, keepdim=keepdim)

    def proj(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """(15): ``u − Y sym(Yᵀu) − X_R(X_Rᵀu)``, ``O(n p q)``."""
        xr = self._xr(x)
        return u - x @ sym(x.mT @ u) - xr @ (xr.mT @ u)

    egrad2rgrad = proj

    def ehess2rhess(self, x, g, h, xi):
        """``P_Y(H − ξ sym(YᵀG))``."""
        return self.proj(x, h - xi @ sym(x.mT @ g))

    def _project_polar(self, x: torch.Tensor) -> torch.Tensor:
        xr = self._xr(x)
        return polar_tall(x - xr @ (xr.mT @ x))

    def projx(self, x: torch.Tensor) -> torch.Tensor:
        """Projection onto M (Lemma 3.2): ``polar((I − X_R X_Rᵀ) x)``, for any full-rank x.

        Applied twice: for an ill-conditioned ``(I − X_R X_Rᵀ) x`` the first polar factor can
        amplify the rounding left in ``X_Rᵀ(·)`` by the condition number; the second pass
        starts from an orthonormal matrix and leaves ``‖X_RᵀY‖ ≈ ε``.
        """
        return self._project_polar(self._project_polar(x))

    def retr(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """``P_M(Y + u)``: polar retraction with the re-orthogonalisation against ``X_R``.

        For tangent ``u``, ``(Y + u)ᵀ(Y + u) = I + uᵀu`` is well conditioned, so one pass of
        the projection suffices (``O(n p q)``).
        """
        return self._project_polar(x + u)

    def exp(self, x, u):
        """Not available: raises ``NotImplementedError`` (use :meth:`retr`)."""
        raise NotImplementedError(f"{self.name}: no exponential map implemented; use retr "
                                  "(the polar projection onto the block)")

    def transp(self, x, y, v):
        """Vector transport by projection onto ``T_y M``."""
        return self.proj(y, v)

    def random_point(self, batch=(), *, cond=None, dtype=torch.float64, device=None,
                     generator=None) -> torch.Tensor:
        """``P_M`` of a Gaussian matrix (``cond`` is accepted for interface parity, unused).

        ``device`` defaults to the generator's, else to that of the fixed columns.
        """
        if device is None:
            device = generator.device if generator is not None else self.fixed.device
        g = randn(*batch, self.n, self.q, dtype=dtype, device=device, generator=generator)
        xr = self.fixed.to(dtype=dtype, device=device)
        return self.projx(g - xr @ (xr.mT @ g))

    def random_tangent(self, x: torch.Tensor, generator=None) -> torch.Tensor:
        """A random unit tangent vector (projected Gaussian, normalised)."""
        u = self.proj(x, randn(*x.shape, dtype=x.dtype, device=x.device, generator=generator))
        return u / torch.linalg.matrix_norm(u, keepdim=True)

    def typical_dist(self) -> float:
        """``√|C|``, pymanopt's typical distance for trust-region radii."""
        return math.sqrt(self.q)

    def __repr__(self) -> str:
        return (f"StiefelBlock(n={self.n}, p={self.p}, columns={self.columns.tolist()})")
