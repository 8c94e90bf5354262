r"""The J-orthogonal (indefinite orthogonal) group ``O(J) = {X ∈ ℝⁿˣⁿ : XᵀJX = J}``.

All functions take torch tensors with any number of leading batch dimensions and work in the
input's dtype and on its device.

Geometry (documented contract)
------------------------------
* Lie algebra ``o(J) = {Ω : ΩᵀJ + JΩ = 0} = {J S : S skew}``; tangent space ``T_X = {X Ω}``.
  For a tangent vector ``ξ`` the algebra element is ``Ω = X⁻¹ξ = J Xᵀ J ξ`` and ``S = Xᵀ J ξ``.
* **Metric**: the left-invariant metric ``⟨XΩ₁, XΩ₂⟩_X = tr(Ω₁ᵀΩ₂) = ⟨Xᵀ J ξ₁, Xᵀ J ξ₂⟩_F``.
  We chose it over the Euclidean metric because everything is then explicit: the Riemannian
  gradient is ``X J skew(J Xᵀ ∇f)`` (no Lyapunov solve), left translation is an isometric
  vector transport, and the geodesics have a closed form. Reason: ``o(J)`` is closed under
  transposition, the automorphism ``X ↦ J X⁻ᵀ J`` of ``GL(n)`` is an isometry of the
  left-invariant Frobenius metric of ``GL(n)``, and ``O(J)`` is its fixed-point set, hence
  totally geodesic. The geodesics of ``GL(n)`` with that metric are
  ``γ(t) = X exp(tΩᵀ) exp(t(Ω − Ωᵀ))``, so this is the **exact exponential map** here too.
* **Projection** of an ambient ``U`` onto ``T_X``: ``X J skew(Xᵀ J U)``, the orthogonal
  projection for the ambient inner product ``⟨XᵀJA, XᵀJB⟩_F`` (which extends the metric).
* **Levi-Civita connection** on left-invariant fields ``a, b ∈ o(J)``:
  ``∇_a b = ½([a, b] − [aᵀ, b] − [bᵀ, a])`` (Koszul formula with ``ad*_a c = [aᵀ, c]``), which
  gives the exact Riemannian Hessian in :func:`ehess2rhess`.
* **Retractions**: Cayley ``X (I − Ω/2)⁻¹(I + Ω/2)`` (first order) and the exponential map,
  with ``Ω = J skew(XᵀJU)`` so the factor multiplying X is an exact group element.
* **Transport**: left translation ``ξ = XΩ ↦ YΩ`` (isometric).
"""

from __future__ import annotations

import math

import torch

from orthoplug._random import rand, randn

from ._linalg import eye_like, fro_inner, haar_orthogonal, skew
from .signature import Signature

__all__ = [
    "gram_error",
    "violation",
    "relative_violation",
    "algebra",
    "inner",
    "proj",
    "algebra_gradient",
    "egrad2rgrad",
    "ehess2rhess",
    "cayley_step",
    "retr_cayley",
    "expmap",
    "transp",
    "refine",
    "random_point",
    "random_tangent",
    "component",
]


def gram_error(j: Signature, x: torch.Tensor, jk: Signature | None = None) -> torch.Tensor:
    """``XᵀJX − J_k`` (``J_k = J`` for square X)."""
    jk = j if jk is None else jk
    e = x.mT @ j.left(x)
    return e - torch.diag_embed(jk.like(x).expand(e.shape[:-1]))


def violation(j: Signature, x: torch.Tensor, jk: Signature | None = None) -> torch.Tensor:
    """The papers' measure ``(1/k²) Σ_ij |XᵀJX − J|_ij`` (mean absolute entry)."""
    return gram_error(j, x, jk).abs().mean(dim=(-2, -1))


def relative_violation(j: Signature, x: torch.Tensor, jk: Signature | None = None) -> torch.Tensor:
    """``‖XᵀJX − J‖_F / ‖X‖_F²``: the error relative to the size of ``X``.

    Rounding errors in ``XᵀJX`` scale like ``‖X‖²``, and ``‖X‖_F² ≥ k`` on the feasible set,
    so this is the scale-free companion of :func:`violation`.
    """
    err = torch.linalg.matrix_norm(gram_error(j, x, jk))
    return err / (x * x).sum(dim=(-2, -1))


def algebra(j: Signature, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """``Ω = J skew(Xᵀ J U)`` ∈ o(J): equals ``X⁻¹U`` for tangent ``U``.

    Taking the skew part makes Ω an exact algebra element even when ``U`` carries round-off
    outside the tangent space (momentum buffers, transported vectors). Without it, optimisers
    that feed such vectors back (RiemannianAdam) drift off the group exponentially.
    """
    return j.left(skew(x.mT @ j.left(u)))


def inner(j: Signature, x: torch.Tensor, u: torch.Tensor, v: torch.Tensor, keepdim=False):
    """Left-invariant metric ``⟨XᵀJU, XᵀJV⟩_F``."""
    xt = x.mT
    return fro_inner(xt @ j.left(u), xt @ j.left(v), keepdim=keepdim)


def proj(j: Signature, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Tangent projection ``X J skew(Xᵀ J U)``."""
    return x @ algebra(j, x, u)


def algebra_gradient(j: Signature, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """``A = J skew(J Xᵀ G)`` ∈ o(J): the Riemannian gradient ``X A`` left-translated to the
    identity, so ``d/dt f(X exp(tΩ))|₀ = ⟨A, Ω⟩_F`` for every Ω ∈ o(J)."""
    return j.left(skew(j.left(x.mT @ g)))


def egrad2rgrad(j: Signature, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Riemannian gradient ``X J skew(J Xᵀ G)`` for the left-invariant metric."""
    return x @ algebra_gradient(j, x, g)


def _bracket(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b - b @ a


def ehess2rhess(
    j: Signature, x: torch.Tensor, g: torch.Tensor, h: torch.Tensor, xi: torch.Tensor
) -> torch.Tensor:
    """Exact Riemannian Hessian ``∇_ξ grad f`` for the left-invariant metric.

    With ``grad f(X) = X A(X)``, ``A = J skew(J Xᵀ G)`` and ``ξ = XΩ``:
    ``Hess f[ξ] = X (DA[ξ] + ½([Ω, A] − [Ωᵀ, A] − [Aᵀ, Ω]))``, where
    ``DA[ξ] = J skew(J ξᵀ G + J Xᵀ H)`` and ``H = ∇²f(X)[ξ]``.
    """
    a = algebra_gradient(j, x, g)
    da = j.left(skew(j.left(xi.mT @ g + x.mT @ h)))
    om = algebra(j, x, xi)
    conn = 0.5 * (_bracket(om, a) - _bracket(om.mT, a) - _bracket(a.mT, om))
    return x @ (da + conn)


def retr_cayley(j: Signature, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Cayley retraction ``X (I − Ω/2)⁻¹ (I + Ω/2)``, ``Ω = J skew(XᵀJU)``.

    The factor is an exact group element for every step. Unlike on O(n), Ω ∈ o(p, q) can have
    real eigenvalues (boosts): the map is singular when Ω has the eigenvalue 2 and, past it,
    jumps to another connected component. Line-search steps that far out are rejected by the
    cost anyway; use :func:`expmap` when very long steps are intended.
    """
    return cayley_step(x, algebra(j, x, u))


def cayley_step(x: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
    """``X (I − Ω/2)⁻¹ (I + Ω/2)`` for an algebra element ``Ω`` ∈ o(J) (one n×n solve).

    For ``Ω = J S`` with S exactly skew the factor lies in O(J) up to the solve's rounding, so
    the product stays on the group to rounding (no projection). :func:`retr_cayley` is this map
    with ``Ω`` taken from a tangent vector.
    """
    half = 0.5 * omega
    eye = eye_like(x)
    return x @ torch.linalg.solve(eye - half, eye + half)


def expmap(j: Signature, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Riemannian exponential ``X exp(Ωᵀ) exp(Ω − Ωᵀ)`` of the left-invariant metric."""
    om = algebra(j, x, u)
    return x @ torch.linalg.matrix_exp(om.mT) @ torch.linalg.matrix_exp(om - om.mT)


def transp(j: Signature, x: torch.Tensor, y: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Left-translation transport ``XΩ ↦ YΩ`` (an isometry of the metric)."""
    return y @ algebra(j, x, v)


def refine(
    j: Signature, x: torch.Tensor, jk: Signature | None = None, steps: int = 6
) -> torch.Tensor:
    """Pull a nearly feasible X back to ``XᵀJX = J_k`` by the iteration ``X ← X(I − ½ J_k E)``.

    ``E = XᵀJX − J_k``. With ``F = J_k E`` the new Gram matrix is ``J_k(I + F)(I − ½F)²``, so
    ``F ← −¾F² + ¼F³``: from ``‖F‖₂ ≤ ½`` six steps take ``‖F‖₂`` below 1e-24 (0.22, 0.039,
    1.1e-3, 9.6e-7, 6.9e-13, …). It is **not** a nearest-point map and is only meant for points
    with ``‖J_k E‖₂ ≤ ½`` (:meth:`~orthoplug.geometry.manifolds._JGeometry.projx` checks that);
    it costs ``O(n k²)`` per step.
    """
    jk = j if jk is None else jk
    for _ in range(steps):
        e = gram_error(j, x, jk)
        x = x - 0.5 * x @ jk.left(e)
    return x


def component(j: Signature, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Connected component of X ∈ O(p, q): signs of ``det X[+,+]`` and ``det X[−,−]``."""
    pos = torch.as_tensor(j.positive_indices(), device=x.device)
    neg = torch.as_tensor(j.negative_indices(), device=x.device)

    def sgn(idx):
        if idx.numel() == 0:
            return torch.ones(x.shape[:-2], dtype=x.dtype, device=x.device)
        return torch.sign(torch.linalg.det(x[..., idx[:, None], idx[None, :]]))

    return sgn(pos), sgn(neg)


def random_point(
    j: Signature,
    batch: tuple[int, ...] = (),
    *,
    cond: float = 10.0,
    component: tuple[int, int] = (1, 1),
    dtype: torch.dtype = torch.float64,
    device=None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """A random X ∈ O(J) with 2-norm condition number ``cond`` in a chosen component.

    Construction ``X = U Σ Wᵀ``: ``U, W`` are Haar-orthogonal on the +1 and the −1 index blocks
    (never mixing signs) and ``Σ`` is a product of hyperbolic rotations on ``r = min(p, q)``
    disjoint (+, −) index pairs with angles ``μ₁ = ½ ln cond`` and ``μ_i ~ U[−μ₁, μ₁]``, so
    ``cond₂(X) = e^{2μ₁} = cond``. ``component = (s₊, s₋)`` fixes the signs of
    ``det X[+,+]`` and ``det X[−,−]`` (the four components of O(p, q) for p, q ≥ 1).

    Raises:
        ValueError: ``cond`` outside ``[1, 1/(n·ε)]`` (ε of ``dtype``) or a bad ``component``.
    """
    limit = 1.0 / (j.n * torch.finfo(dtype).eps)
    if isinstance(cond, bool) or not isinstance(cond, (int, float)) or not 1 <= cond <= limit:
        raise ValueError(f"cond must be >= 1 and <= 1/(n·ε) = {limit:.3g} for {dtype} (beyond "
                         f"it rounding leaves XᵀJX − J of order 1), got {cond!r}")
    if any(s not in (1, -1) for s in component):
        raise ValueError(f"component must be a pair of ±1, got {component}")
    n = j.n
    pos = torch.as_tensor(j.positive_indices(), device=device)
    neg = torch.as_tensor(j.negative_indices(), device=device)
    for idx, s, name in ((pos, component[0], "+1"), (neg, component[1], "-1")):
        if idx.numel() == 0 and s != 1:
            raise ValueError(f"component sign for the empty {name} block must be +1")
    kw = dict(dtype=dtype, device=device, generator=generator)
    u = torch.zeros(*batch, n, n, dtype=dtype, device=device)
    w = torch.zeros_like(u)
    for idx, s in ((pos, component[0]), (neg, component[1])):
        m = idx.numel()
        if m == 0:
            continue
        qu = haar_orthogonal(batch, m, **kw)
        qw = haar_orthogonal(batch, m, **kw)
        flip = torch.sign(torch.linalg.det(qu) * torch.linalg.det(qw)) != s
        qu[..., :, 0] = torch.where(flip[..., None], -qu[..., :, 0], qu[..., :, 0])
        u[..., idx[:, None], idx[None, :]] = qu
        w[..., idx[:, None], idx[None, :]] = qw
    r = min(pos.numel(), neg.numel())
    sigma = torch.eye(n, dtype=dtype, device=device).expand(*batch, n, n).clone()
    if r > 0 and cond > 1:
        mu_max = 0.5 * math.log(cond)
        mu = (2 * rand(*batch, r, **kw) - 1) * mu_max
        mu[..., 0] = mu_max
        a, b = pos[:r], neg[:r]
        ch, sh = torch.cosh(mu), torch.sinh(mu)
        sigma[..., a, a] = ch
        sigma[..., b, b] = ch
        sigma[..., a, b] = sh
        sigma[..., b, a] = sh
    return u @ sigma @ w.mT


def random_tangent(
    j: Signature, x: torch.Tensor, generator: torch.Generator | None = None
) -> torch.Tensor:
    """A random unit tangent vector ``X J S`` with S Gaussian skew, normalised in the metric."""
    s = skew(randn(*x.shape, dtype=x.dtype, device=x.device, generator=generator))
    s = s / torch.linalg.matrix_norm(s, keepdim=True)
    return x @ j.left(s)
