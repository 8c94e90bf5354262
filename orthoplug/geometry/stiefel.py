"""Stiefel ``St(n, p) = {X : XᵀX = I_p}`` and Grassmann (orthonormal representatives) geometry.

Same API as :mod:`orthoplug.geometry.manifolds` so the shared run loop can measure stationarity
and feasibility for OBCD, RSDM and RSSM. The metric is Euclidean (as pymanopt's ``Stiefel`` and
geoopt's ``EuclideanStiefel``): ``grad f = G − X sym(XᵀG)``. For Grassmann the representative is
an orthonormal basis, the cost must satisfy ``f(XQ) = f(X)`` for orthogonal Q, and the
(horizontal) gradient is ``G − X XᵀG``.
"""

from __future__ import annotations

import torch

from orthoplug._random import randn

from ._linalg import fro_inner, sym
from .manifolds import require_feasible

__all__ = ["StiefelGeometry", "GrassmannGeometry", "polar", "qf"]


def qf(a: torch.Tensor) -> torch.Tensor:
    """Q factor of the thin QR with ``diag(R) > 0``."""
    q, r = torch.linalg.qr(a)
    d = torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))
    return q * torch.where(d == 0, torch.ones_like(d), d)[..., None, :]


def polar(a: torch.Tensor) -> torch.Tensor:
    """Orthogonal polar factor ``U Wᵀ`` of the thin SVD ``A = U Σ Wᵀ``.

    LAPACK's divide-and-conquer SVD can fail to converge on a single-precision matrix whose
    singular values are nearly all equal (a nearly orthonormal A, as a retraction sees); the
    SVD is then taken in float64 and the factor returned in A's dtype.

    Raises:
        FloatingPointError: A has a non-finite entry (its SVD does not exist).
    """
    try:
        u, _, wt = torch.linalg.svd(a, full_matrices=False)
    except torch.linalg.LinAlgError:
        if not bool(torch.isfinite(a).all()):
            raise FloatingPointError("polar factor of a matrix with a non-finite entry") from None
        if a.dtype == torch.float64:
            raise
        u, _, wt = torch.linalg.svd(a.double(), full_matrices=False)
        return (u @ wt).to(a.dtype)
    return u @ wt


class StiefelGeometry:
    """St(n, p) with the Euclidean metric and a QR (default) or polar retraction."""

    name = "Stiefel"
    retractions = ("qr", "polar")

    def __init__(self, n: int, p: int, *, retraction: str = "qr"):
        if not (isinstance(n, int) and isinstance(p, int) and 1 <= p <= n):
            raise ValueError(f"{self.name}: need integers 1 <= p <= n, got n={n!r}, p={p!r}")
        if retraction not in self.retractions:
            raise ValueError(f"{self.name}: unsupported retraction {retraction!r}; "
                             f"choose from {self.retractions}")
        self.n, self.p, self.retraction = n, p, retraction

    @property
    def shape(self) -> tuple[int, int]:
        """``(n, p)``."""
        return (self.n, self.p)

    @property
    def dim(self) -> int:
        """Manifold dimension ``np − p(p + 1)/2``."""
        return self.n * self.p - self.p * (self.p + 1) // 2

    def gram_error(self, x: torch.Tensor) -> torch.Tensor:
        """``XᵀX − I`` (batched)."""
        g = x.mT @ x
        return g - torch.eye(self.p, dtype=x.dtype, device=x.device)

    def violation(self, x: torch.Tensor) -> torch.Tensor:
        """``‖XᵀX − I‖_F``."""
        return torch.linalg.matrix_norm(self.gram_error(x))

    relative_violation = violation

    def check_shape(self, x: torch.Tensor, what: str = "point") -> None:
        """Raise ``ValueError`` naming the expected and the actual shape unless ``x`` is ``(..., n,
        p)``.
        """
        if x.ndim < 2 or tuple(x.shape[-2:]) != self.shape:
            raise ValueError(f"{self.name}: {what} must have shape (..., {self.n}, {self.p}), "
                             f"got {tuple(x.shape)}")

    def check_point(self, x: torch.Tensor, tol: float | None = None) -> None:
        """Raise ``ValueError`` on a wrong shape or a point with ``‖XᵀX − I‖_F`` above ``tol``."""
        self.check_shape(x)
        require_feasible(self.name, x, self.violation, "‖XᵀX − I‖_F", tol)

    def inner(self, x, u, v, keepdim=False):
        """Euclidean (Frobenius) metric ``tr(UᵀV)``."""
        return fro_inner(u, v, keepdim=keepdim)

    def proj(self, x, u):
        """Tangent projection ``U − X sym(XᵀU)``; also the Riemannian gradient."""
        return u - x @ sym(x.mT @ u)

    egrad2rgrad = proj

    def retr(self, x, u):
        """QR (Q factor with ``diag(R) > 0``) or polar retraction of ``X + U``."""
        return qf(x + u) if self.retraction == "qr" else polar(x + u)

    def projx(self, x):
        """Nearest point on St(n, p): the polar factor of ``x``."""
        return polar(x)

    def random_point(self, batch=(), *, dtype=torch.float64, device=None, generator=None):
        """Haar-distributed points (Q factor of a Gaussian), shape ``batch + (n, p)``."""
        g = randn(*batch, self.n, self.p, dtype=dtype, device=device, generator=generator)
        return qf(g)

    def __repr__(self) -> str:
        return f"{self.name}(n={self.n}, p={self.p})"


class GrassmannGeometry(StiefelGeometry):
    """Gr(n, p) through orthonormal representatives; horizontal gradient ``G − X XᵀG``."""

    name = "Grassmann"

    @property
    def dim(self) -> int:
        """Manifold dimension ``p(n − p)``."""
        return self.p * (self.n - self.p)

    def proj(self, x, u):
        """Horizontal projection ``U − X XᵀU``; also the Riemannian gradient."""
        return u - x @ (x.mT @ u)

    egrad2rgrad = proj

    def distance(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Largest principal angle between the column spaces of X and Y."""
        s = torch.linalg.svdvals(x.mT @ y).clamp(-1.0, 1.0)
        return torch.arccos(s.min(dim=-1).values)
