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

The optimizers — orthoplug's solvers (``GSJOBCD``, ``JJOBCD``, ``VRJJOBCD``, ``ColumnJJacobi``,
``CayleyLBFGS``, ``OBCD``, ``SparseOBCD``, ``RSDM``, ``RSSM``) and the comparison methods of
:mod:`orthoplug.baselines` (``ManPG``, ``RSubGrad``, ``Landing``, ``PCAL``, ``RCD``, ``LADMM``,
``RADMM``, ``PSM``, ``ADMM``, ``UMCM``, ``CSDM``) — are
subclasses of :class:`SolverOptimizer`: ``Optimizer(...).run(problem)`` on a user's
``pymanopt.Problem``. ``HyperbolicEig`` solves ``min tr(XᵀCXD)`` (``C ≻ 0``) over ``JOrthogonal``
and ``IndefiniteStiefel`` directly, from ``run(problem, oracle=QuadraticOracle(C, D))``.
"""

from __future__ import annotations

from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry, JOrthogonalGeometry

from ._pymanopt_base import SolverOptimizer, _GeometryManifold, _n, _t, geometry_of

# shared base so that their ``from .pymanopt import ...`` of the base names also resolves.
from ._pymanopt_baselines import (
    ADMM,
    CSDM,
    LADMM,
    PCAL,
    PSM,
    RADMM,
    RCD,
    UMCM,
    Landing,
    ManPG,
    RSubGrad,
)
from ._pymanopt_jobcd import GSJOBCD, JJOBCD, VRJJOBCD, ColumnJJacobi
from ._pymanopt_lbfgs import CayleyLBFGS
from ._pymanopt_obcd import OBCD, SparseOBCD
from ._pymanopt_quadratic import HyperbolicEig
from ._pymanopt_rsdm import RSDM
from ._pymanopt_rssm import RSSM, StiefelBlock

__all__ = ["JOrthogonal", "IndefiniteStiefel", "StiefelBlock", "SolverOptimizer", "geometry_of",
           "GSJOBCD", "JJOBCD", "VRJJOBCD", "ColumnJJacobi", "OBCD", "SparseOBCD", "RSDM", "RSSM",
           "HyperbolicEig", "CayleyLBFGS",
           "ManPG", "RSubGrad", "Landing", "PCAL", "RCD", "UMCM", "ADMM", "CSDM", "LADMM",
           "RADMM", "PSM"]


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

