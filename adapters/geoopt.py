"""geoopt front-end: :class:`geoopt.Manifold` subclasses for ``ManifoldParameter``\\ s.

All maps broadcast over leading batch dimensions (for example one J-orthogonal relation matrix
per knowledge-graph relation, shape ``(R, n, n)``), and ``J`` is built on each tensor's own
device and dtype, so ``model.to(device)`` needs nothing from the manifold::

    import geoopt, torch
    from orthoplug.adapters.geoopt import JOrthogonal

    manifold = JOrthogonal(6, p=3)
    X = geoopt.ManifoldParameter(manifold.random(5, 6, 6), manifold=manifold)
    opt = geoopt.optim.RiemannianAdam([X], lr=1e-2)

``inner`` is positive definite on tangent vectors (RiemannianAdam takes its square root).
``projx`` is not a nearest-point map (none is known in closed form): it restores feasibility of
a nearly feasible point (``‖J_k(XᵀJX − J_k)‖₂ ≤ ½``) by six quadratically convergent steps
``X ← X(I − ½ J_k (XᵀJX − J_k))``, which is what geoopt's ``stabilize`` option needs after
round-off drift, and raises ``InfeasiblePointError`` (a ``ValueError``) for a point farther
away. The maps check their arguments (one dtype, float32 or float64, one device, shape
``(..., n, k)``) before any arithmetic; they do not check that X lies on the manifold (their
values at X = 0 and other rank-deficient points are stated in
:mod:`orthoplug.geometry.manifolds`).

The optimizers follow torch.optim's conventions: an ``lr`` in every parameter group, read at
every step (schedulers work; ``lr = 0`` never moves a parameter), ``stabilize``, validated
``add_param_group``, float32 and float64 parameters, and a start check at the first step
(tolerance :func:`~orthoplug.geometry.manifolds.feasibility_tol` of the parameter's dtype).
"""

from __future__ import annotations

import geoopt
import torch
from geoopt.utils import size2shape

from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry, JOrthogonalGeometry

from ._geoopt_base import _GeometryManifold

# shared base so that a ``from .geoopt import _GeometryManifold`` there also resolves.
from ._geoopt_jobcd import GSJOBCD, JJOBCD, VRJJOBCD, ColumnJJacobi
from ._geoopt_lbfgs import CayleyLBFGS
from ._geoopt_obcd import OBCD
from ._geoopt_rsdm import RSDM
from ._geoopt_rssm import RSSM, StiefelBlock

__all__ = ["JOrthogonal", "IndefiniteStiefel", "StiefelBlock", "GSJOBCD", "JJOBCD", "VRJJOBCD",
           "ColumnJJacobi", "CayleyLBFGS", "OBCD", "RSDM", "RSSM"]


class JOrthogonal(_GeometryManifold):
    """The J-orthogonal group ``{X : XᵀJX = J}`` (left-invariant metric, exact ``expmap``).

    Same constructor as :class:`orthoplug.adapters.pymanopt.JOrthogonal`.
    """

    def __init__(self, n: int, p: int | None = None, *, signature=None, retraction="cayley",
                 cond: float = 10.0):
        super().__init__(JOrthogonalGeometry(n, p, signature=signature, retraction=retraction),
                         cond)

    def origin(self, *size, dtype=None, device=None, seed=42):
        """The identity (batched)."""
        shape = size2shape(*size)
        self._assert_check_shape(shape, "x")
        eye = torch.eye(shape[-1], dtype=dtype, device=device).expand(shape).clone()
        return geoopt.ManifoldTensor(eye, manifold=self)


class IndefiniteStiefel(_GeometryManifold):
    """The indefinite Stiefel set ``{X : Xᵀ J_n X = J_k}`` (Euclidean metric).

    Same constructor as :class:`orthoplug.adapters.pymanopt.IndefiniteStiefel`; ``expmap``
    raises ``NotImplementedError`` (use ``retr``).
    """

    def __init__(self, n: int, k: int, p: int | None = None, k_plus: int | None = None, *,
                 signature=None, k_signature=None, cond: float = 10.0):
        super().__init__(
            IndefiniteStiefelGeometry(n, k, p, k_plus, signature=signature,
                                      k_signature=k_signature),
            cond,
        )

