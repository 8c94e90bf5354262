r"""The indefinite Stiefel set ``iSt(n, k) = {X ∈ ℝⁿˣᵏ : Xᵀ J_n X = J_k}``.

Geometry (documented contract)
------------------------------
* Embedded submanifold of ``ℝⁿˣᵏ`` of dimension ``nk − k(k+1)/2`` (``J_k``'s signature must fit
  into ``J_n``'s). Tangent space ``{ξ : Xᵀ J ξ skew}``; normal space ``{J X S : S symmetric}``.
* **Metric**: Euclidean (Frobenius). Unlike the square group there is no group structure to make
  a left-invariant metric natural, and the orthogonal projection is cheap: it needs one
  ``k × k`` Lyapunov solve ``(XᵀX) S + S (XᵀX) = 2 sym(XᵀJU)``, done by an eigendecomposition of
  the SPD ``XᵀX`` in ``O(n k² + k³)``.
* **Riemannian gradient** = projection of the Euclidean gradient; **Hessian** by the Weingarten
  formula ``Hess f[ξ] = P_X(∇²f[ξ] − J ξ S(X, ∇f))``.
* **Retraction** (``O(n k²)``, never an ``n × n`` matrix): the Cayley transform of a rank-``2k``
  element ``W = J K`` of the Lie algebra ``o(J_n)`` (``K`` skew) with ``W X = ξ``:
  ``B = J X J_k``, ``A = Jξ − ½ B (XᵀJξ)``, ``K = A Bᵀ − B Aᵀ``, ``Y = (I − W/2)⁻¹(I + W/2) X``,
  evaluated by the Woodbury identity with a ``2k × 2k`` solve. ``Cayley(W) ∈ O(J_n)``, so
  ``YᵀJY = XᵀJX`` for any step length.
* **Transport**: projection onto the new tangent space.
"""

from __future__ import annotations

import torch

from orthoplug._random import randn

from . import jorthogonal as jo
from ._linalg import skew, sym
from .signature import Signature

__all__ = [
    "normal_coefficients",
    "proj",
    "ehess2rhess",
    "retr_cayley",
    "random_point",
    "random_tangent",
    "column_selection",
]


def _lyapunov_sym(m: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Solve ``M S + S M = R`` for symmetric ``R`` with ``M`` SPD (k × k, batched)."""
    lam, v = torch.linalg.eigh(m)
    rt = v.mT @ r @ v
    st = rt / (lam[..., :, None] + lam[..., None, :])
    return v @ st @ v.mT


def normal_coefficients(j: Signature, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The symmetric ``S`` with ``U − J X S`` tangent at X."""
    return _lyapunov_sym(x.mT @ x, 2.0 * sym(x.mT @ j.left(u)))


def proj(j: Signature, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Orthogonal (Frobenius) projection ``U − J X S`` onto the tangent space at X."""
    return u - j.left(x @ normal_coefficients(j, x, u))


def ehess2rhess(
    j: Signature, x: torch.Tensor, g: torch.Tensor, h: torch.Tensor, xi: torch.Tensor
) -> torch.Tensor:
    """Riemannian Hessian ``P_X(H − J ξ S(X, G))`` of the embedded submanifold."""
    return proj(j, x, h - j.left(xi @ normal_coefficients(j, x, g)))


def retr_cayley(j: Signature, jk: Signature, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Low-rank Cayley retraction (see the module docstring), ``O(n k²)``."""
    b = j.left(jk.right(x))  # B = J X J_k, so Bᵀ X = I_k on the manifold
    ju = j.left(u)
    a = ju - 0.5 * b @ skew(x.mT @ ju)  # XᵀJξ is skew for tangent ξ
    # W = J K = L Rᵀ with L = J [A, B], R = [B, −A]
    left = j.left(torch.cat([a, b], dim=-1))
    right = torch.cat([b, -a], dim=-1)
    z = x + 0.5 * left @ (right.mT @ x)
    k2 = left.shape[-1]
    small = torch.eye(k2, dtype=x.dtype, device=x.device) - 0.5 * right.mT @ left
    return z + 0.5 * left @ torch.linalg.solve(small, right.mT @ z)


def column_selection(j: Signature, jk: Signature) -> list[int]:
    """Columns of an O(J_n) element whose sub-signature is ``J_k`` (in ``J_k``'s order)."""
    if not jk.fits_into(j):
        raise ValueError(
            f"J_k {jk!r} does not fit into J_n {j!r}: need k_plus <= p and k_minus <= n - p"
        )
    pos = list(j.positive_indices())
    neg = list(j.negative_indices())
    return [int(pos.pop(0)) if v > 0 else int(neg.pop(0)) for v in jk.values]


def random_point(
    j: Signature, jk: Signature, batch: tuple[int, ...] = (), **kwargs
) -> torch.Tensor:
    """``k`` columns of a random O(J_n) element (see :func:`jorthogonal.random_point`)."""
    cols = column_selection(j, jk)
    return jo.random_point(j, batch, **kwargs)[..., cols]


def random_tangent(
    j: Signature, x: torch.Tensor, generator: torch.Generator | None = None
) -> torch.Tensor:
    """A random unit (Frobenius) tangent vector: projection of a Gaussian."""
    u = proj(j, x, randn(*x.shape, dtype=x.dtype, device=x.device, generator=generator))
    return u / torch.linalg.matrix_norm(u, keepdim=True)
