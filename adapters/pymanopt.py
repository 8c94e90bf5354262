"""pymanopt front-end: manifolds (numpy points) backed by :mod:`orthoplug.geometry`.

The classes subclass :class:`pymanopt.manifolds.manifold.Manifold`, so pymanopt's
SteepestDescent, ConjugateGradient and TrustRegions run on them unchanged::

    import autograd.numpy as anp, pymanopt
    from orthoplug.adapters.pymanopt import JOrthogonal

    manifold = JOrthogonal(6, p=3)
    @pymanopt.function.autograd(manifold)
    def cost(X):
        return anp.trace(X.T @ C @ X)
    result = pymanopt.optimizers.TrustRegions().run(pymanopt.Problem(manifold, cost))

Random points are drawn with a seed taken from numpy's global generator, so
``np.random.seed`` makes pymanopt runs reproducible as with pymanopt's own manifolds.
"""

from __future__ import annotations

import numpy as np
import torch
from pymanopt.manifolds.manifold import Manifold

from orthoplug.geometry.manifolds import (
    IndefiniteStiefelGeometry,
    JOrthogonalGeometry,
    typical_dist,
)

__all__ = ["JOrthogonal", "IndefiniteStiefel"]


def _t(a) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def _n(t: torch.Tensor) -> np.ndarray:
    return t.numpy()


class _GeometryManifold(Manifold):
    """Wraps a torch geometry object; converts numpy ↔ torch (zero-copy on CPU)."""

    geometry: JOrthogonalGeometry | IndefiniteStiefelGeometry

    def __init__(self, geometry, cond: float):
        self.geometry = geometry
        self.cond = float(cond)
        super().__init__(repr(geometry), geometry.dim)

    @property
    def signature(self) -> np.ndarray:
        return np.asarray(self.geometry.j.values, dtype=float)

    @property
    def typical_dist(self) -> float:
        return typical_dist(self.dim)

    def inner_product(self, point, tangent_vector_a, tangent_vector_b) -> float:
        return float(self.geometry.inner(_t(point), _t(tangent_vector_a), _t(tangent_vector_b)))

    def norm(self, point, tangent_vector) -> float:
        return float(np.sqrt(max(self.inner_product(point, tangent_vector, tangent_vector), 0.0)))

    def projection(self, point, vector):
        return _n(self.geometry.proj(_t(point), _t(vector)))

    to_tangent_space = projection

    def euclidean_to_riemannian_gradient(self, point, euclidean_gradient):
        return _n(self.geometry.egrad2rgrad(_t(point), _t(euclidean_gradient)))

    def euclidean_to_riemannian_hessian(
        self, point, euclidean_gradient, euclidean_hessian, tangent_vector
    ):
        return _n(
            self.geometry.ehess2rhess(
                _t(point), _t(euclidean_gradient), _t(euclidean_hessian), _t(tangent_vector)
            )
        )

    def retraction(self, point, tangent_vector):
        return _n(self.geometry.retr(_t(point), _t(tangent_vector)))

    def transport(self, point_a, point_b, tangent_vector_a):
        return _n(self.geometry.transp(_t(point_a), _t(point_b), _t(tangent_vector_a)))

    def random_point(self):
        gen = torch.Generator().manual_seed(int(np.random.randint(2**31 - 1)))
        return _n(self.geometry.random_point(cond=self.cond, generator=gen))

    def random_tangent_vector(self, point):
        gen = torch.Generator().manual_seed(int(np.random.randint(2**31 - 1)))
        return _n(self.geometry.random_tangent(_t(point), generator=gen))

    def zero_vector(self, point):
        return np.zeros(self.geometry.shape)

    def dist(self, point_a, point_b):
        raise NotImplementedError(f"{self.geometry.name}: no closed-form geodesic distance")

    def log(self, point_a, point_b):
        raise NotImplementedError(f"{self.geometry.name}: no closed-form logarithm")

    def check_point(self, point, tol: float | None = None) -> None:
        """Raise ``ValueError`` naming the violation if ``point`` is not on the manifold."""
        self.geometry.check_point(_t(point), tol)

    def violation(self, point) -> float:
        """The papers' constraint violation, mean ``|XᵀJX − J|``."""
        return float(self.geometry.violation(_t(point)))


class JOrthogonal(_GeometryManifold):
    """The J-orthogonal group ``O(J) = {X : XᵀJX = J}``, J = diag(±1).

    Args:
        n: matrix size.
        p: number of +1 entries, ``J = diag(I_p, −I_{n−p})``; or
        signature: an explicit ±1 vector of length n (any order), instead of ``p``.
        retraction: ``"cayley"`` (default) or ``"exp"`` (the Riemannian exponential).
        cond: condition number of :meth:`random_point` draws (default 10).

    Metric: left-invariant, ``⟨XΩ₁, XΩ₂⟩ = tr(Ω₁ᵀΩ₂)``; :meth:`exp` is its exact exponential map.
    """

    def __init__(self, n: int, p: int | None = None, *, signature=None, retraction="cayley",
                 cond: float = 10.0):
        super().__init__(JOrthogonalGeometry(n, p, signature=signature, retraction=retraction),
                         cond)

    def exp(self, point, tangent_vector):
        return _n(self.geometry.exp(_t(point), _t(tangent_vector)))


class IndefiniteStiefel(_GeometryManifold):
    """The indefinite Stiefel set ``{X ∈ ℝⁿˣᵏ : Xᵀ J_n X = J_k}`` with the Euclidean metric.

    Args:
        n, k: matrix shape (k ≤ n).
        p: number of +1 entries of ``J_n = diag(I_p, −I_{n−p})``.
        k_plus: number of +1 entries of ``J_k = diag(I_{k_plus}, −I_{k−k_plus})``.
        signature, k_signature: explicit ±1 vectors instead of ``p`` / ``k_plus`` (unsorted J).
        cond: condition number of :meth:`random_point` draws.
    """

    def __init__(self, n: int, k: int, p: int | None = None, k_plus: int | None = None, *,
                 signature=None, k_signature=None, cond: float = 10.0):
        super().__init__(
            IndefiniteStiefelGeometry(n, k, p, k_plus, signature=signature,
                                      k_signature=k_signature),
            cond,
        )
