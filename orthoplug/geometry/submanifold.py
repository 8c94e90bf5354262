r"""Random r-dimensional submanifolds of O(n) acting on St(n, p) (the RSDM building blocks).

RSDM writes the next iterate as a rotation of the current one restricted to a random slice of O(n):

    U(Y) = Pᵀ · blockdiag(Y, I_{n−r}) · P,   P ∈ O(n) random,  Y ∈ O(r),
    U(Y) X = X + P(r)ᵀ (Y − I_r) P(r) X,

where ``P(r) ∈ ℝ^{r×n}`` are the first r rows of P — nothing else of P is ever needed, and no
n×n matrix is formed here. Two samplers:

* **permutation** (:func:`sample_rows`): ``P(r)`` picks r distinct rows, so ``P(r) A = A[idx]``
  and ``U(Y) X`` replaces ``X[idx]`` by ``Y X[idx]``. Sampling O(n) (a random permutation),
  restriction O(rp), update O(r²p).
* **orthogonal / Haar** (:func:`sample_haar_rows`): ``P(r) = Qᵀ`` with ``Q`` the sign-fixed
  thin-QR factor of an n×r Gaussian, i.e. r rows of a Haar-distributed element of O(n).
  Sampling O(nr²), restriction O(npr), update O(npr).

The gradient of ``Ỹ ↦ F(U(Y)X)`` on O(r) at ``I_r`` (Frobenius metric) is
``Γ = skew(B Cᵀ)`` with ``B = P(r) ∇F(X)`` and ``C = P(r) X`` (:func:`submanifold_gradient`,
O(r²p)); it equals ``P(r) skew(∇F Xᵀ) P(r)ᵀ`` without forming the n×n matrix in the middle.

Retractions on O(r) at the identity (:func:`retract_identity`), for a skew ``Ω = −ηΓ``, all O(r³):

==========  ==========================================  ==========================================
``qr``      ``qf(I + Ω)``                               Q of the QR with ``diag(R) > 0``
``polar``   ``(I + Ω)(I − Ω²)^{-1/2}``                  ``I − Ω² = I + ΩᵀΩ`` is SPD (eigh)
``cayley``  ``(I − Ω/2)^{-1}(I + Ω/2)``                 the ½ makes ``D Retr(0) = id``
``exp``     ``expm(Ω)``                                 the Riemannian exponential
==========  ==========================================  ==========================================

For skew Ω all four return a matrix of SO(r) (``det = +1``), so RSDM also stays on SO(n) when
``p = n``. Everything broadcasts over leading batch dimensions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from orthoplug._random import rand, randn, randperm

from ._linalg import skew
from .stiefel import qf

__all__ = [
    "RETRACTIONS",
    "SAMPLINGS",
    "retract_identity",
    "sample_rows",
    "sample_haar_rows",
    "submanifold_gradient",
    "Submanifold",
    "sample_submanifold",
]

RETRACTIONS = ("qr", "polar", "cayley", "exp")
SAMPLINGS = ("permutation", "orthogonal")


_EYES: dict = {}


def _eye(r: int, like: torch.Tensor) -> torch.Tensor:
    """``I_r`` (cached per size, dtype and device: RSDM asks for it every iteration)."""
    key = (r, like.dtype, like.device)
    eye = _EYES.get(key)
    if eye is None:
        if len(_EYES) > 64:
            _EYES.clear()
        eye = _EYES[key] = torch.eye(r, dtype=like.dtype, device=like.device)
    return eye


def retract_identity(omega: torch.Tensor, method: str = "qr") -> torch.Tensor:
    """``Retr_{I_r}(Ω)`` on O(r) for a skew ``Ω`` of shape (..., r, r); see the module table.

    Below float64 the r×r work is done in float64 and rounded once: Y is then orthogonal to
    the working precision, instead of carrying LAPACK's O(r·ε) orthogonality error into every
    step (RSDM never re-orthonormalises X, so those errors would add up linearly).
    """
    if omega.dtype in (torch.float32, torch.float16, torch.bfloat16):
        return _retract(omega.double(), method).to(omega.dtype)
    return _retract(omega, method)


def _retract(omega: torch.Tensor, method: str) -> torch.Tensor:
    r = omega.shape[-1]
    eye = _eye(r, omega)
    if method == "qr":
        # I + Ω is invertible (singular values ≥ 1), so diag(R) has no zeros to special-case
        q, rr = torch.linalg.qr(eye + omega)
        return q * torch.sign(torch.diagonal(rr, dim1=-2, dim2=-1)).unsqueeze(-2)
    if method == "polar":
        lam, v = torch.linalg.eigh(eye - omega @ omega)
        inv_sqrt = (v * lam.rsqrt()[..., None, :]) @ v.mT
        return (eye + omega) @ inv_sqrt
    if method == "cayley":
        return torch.linalg.solve(eye - 0.5 * omega, eye + 0.5 * omega)
    if method == "exp":
        return torch.linalg.matrix_exp(omega)
    raise ValueError(f"unknown retraction {method!r}; choose from {RETRACTIONS}")


def sample_rows(n: int, r: int, *, batch: tuple[int, ...] = (),
                generator: torch.Generator | None = None, device=None) -> torch.Tensor:
    """r distinct row indices, uniform (the first r entries of a random permutation of n).

    Returns a LongTensor of shape ``batch + (r,)``; independent draws per batch element. O(n).
    """
    if not batch:
        return randperm(n, generator=generator, device=device)[:r]
    keys = rand(*batch, n, generator=generator, device=device)
    return keys.topk(r, dim=-1).indices  # the r largest keys, in random order


def sample_haar_rows(n: int, r: int, *, batch: tuple[int, ...] = (), dtype=torch.float64,
                     device=None, generator: torch.Generator | None = None) -> torch.Tensor:
    """r orthonormal rows ``P(r)`` (shape ``batch + (r, n)``) of a Haar-distributed O(n) element.

    ``Q = qf(Z)``, ``Z ∈ ℝ^{n×r}`` i.i.d. N(0, 1): with ``diag(R) > 0`` the QR factorisation is
    unique, hence ``Q`` is exactly Haar on St(n, r) (LAPACK's Householder signs alone are not).
    O(nr²).
    """
    z = randn(*batch, n, r, dtype=dtype, device=device, generator=generator)
    return qf(z).mT


def submanifold_gradient(b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``Γ = skew(B Cᵀ)``: the Riemannian gradient of ``Y ↦ F(U(Y)X)`` at ``I_r``. O(r²p)."""
    return skew(b @ c.mT)


def _gather_rows(a: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    if idx.ndim == 1:
        return a.index_select(-2, idx)
    return a.gather(-2, idx[..., None].expand(*idx.shape, a.shape[-1]))


@dataclass
class Submanifold:
    """One sampled slice ``{U(Y) : Y ∈ O(r)}`` of O(n), given by ``P(r)``.

    Exactly one of ``rows`` (permutation sampling: indices, shape (..., r)) and ``basis``
    (orthogonal sampling: orthonormal rows, shape (..., r, n)) is set.
    """

    rows: torch.Tensor | None = None
    basis: torch.Tensor | None = None

    @property
    def r(self) -> int:
        """The slice dimension r."""
        return self.rows.shape[-1] if self.rows is not None else self.basis.shape[-2]

    def restrict(self, a: torch.Tensor) -> torch.Tensor:
        """``P(r) A`` for an n×p matrix A (rows gathered, or O(npr) product)."""
        if self.rows is not None:
            return _gather_rows(a, self.rows)
        return self.basis @ a

    def apply_(self, x: torch.Tensor, y: torch.Tensor, c: torch.Tensor | None = None
               ) -> torch.Tensor:
        """``X ← U(Y) X = X + P(r)ᵀ (Y − I) C`` in place, ``C = P(r) X`` (recomputed if None).

        Permutation: ``X[idx] ← Y C`` (O(r²p)); orthogonal: a rank-r update (O(npr)).
        """
        c = self.restrict(x) if c is None else c
        if self.rows is not None:
            new = y @ c
            if self.rows.ndim == 1:
                x.index_copy_(-2, self.rows, new)
            else:
                x.scatter_(-2, self.rows[..., None].expand(*self.rows.shape, x.shape[-1]), new)
            return x
        return x.add_(self.basis.mT @ (y @ c - c))


def sample_submanifold(sampling: str, n: int, r: int, *, batch: tuple[int, ...] = (),
                       dtype=torch.float64, device=None,
                       generator: torch.Generator | None = None) -> Submanifold:
    """Draw ``P(r)`` with ``sampling`` in :data:`SAMPLINGS`."""
    if sampling == "permutation":
        return Submanifold(rows=sample_rows(n, r, batch=batch, generator=generator,
                                            device=device))
    if sampling == "orthogonal":
        return Submanifold(basis=sample_haar_rows(n, r, batch=batch, dtype=dtype, device=device,
                                                  generator=generator))
    raise ValueError(f"unknown sampling {sampling!r}; choose from {SAMPLINGS}")
