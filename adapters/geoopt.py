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
a nearly feasible point by a few quadratically convergent steps ``X ← X(I − ½ J_k (XᵀJX − J_k))``,
which is what geoopt's ``stabilize`` option needs after round-off drift.
"""

from __future__ import annotations

import geoopt
import torch
from geoopt.utils import size2shape

from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry, JOrthogonalGeometry

__all__ = ["JOrthogonal", "IndefiniteStiefel"]  # solver front-ends: see _FRONTENDS below


class _GeometryManifold(geoopt.Manifold):
    ndim = 2
    reversible = False
    geometry: JOrthogonalGeometry | IndefiniteStiefelGeometry

    def __init__(self, geometry, cond: float):
        super().__init__()
        self.geometry = geometry
        self.cond = float(cond)
        self.name = geometry.name

    # ---- geometry ----------------------------------------------------------------
    def inner(self, x, u, v=None, *, keepdim=False):
        return self.geometry.inner(x, u, u if v is None else v, keepdim=keepdim)

    def proju(self, x, u):
        return self.geometry.proj(x, u)

    def egrad2rgrad(self, x, u):
        return self.geometry.egrad2rgrad(x, u)

    def projx(self, x):
        return self.geometry.projx(x)

    def retr(self, x, u):
        return self.geometry.retr(x, u)

    def expmap(self, x, u):
        return self.geometry.exp(x, u)

    def transp(self, x, y, v):
        return self.geometry.transp(x, y, v)

    # ---- checks ------------------------------------------------------------------
    def _check_shape(self, shape, name):
        ok, reason = super()._check_shape(shape, name)
        if not ok:
            return False, reason
        if tuple(shape[-2:]) != self.geometry.shape:
            return False, f"`{name}` should have shape (..., {self.geometry.shape}), got {shape}"
        return True, None

    def _check_point_on_manifold(self, x, *, atol=1e-5, rtol=1e-5):
        err = self.geometry.gram_error(x)
        ok = torch.allclose(err, torch.zeros_like(err), atol=atol, rtol=rtol)
        if not ok:
            return False, f"`XᵀJX != J_k`: max |error| = {err.abs().max().item():.3e}"
        return True, None

    def _check_vector_on_tangent(self, x, u, *, atol=1e-5, rtol=1e-5):
        s = x.mT @ self.geometry.j.left(u)
        err = s + s.mT
        ok = torch.allclose(err, torch.zeros_like(err), atol=atol, rtol=rtol)
        if not ok:
            return False, f"`XᵀJU + UᵀJX != 0`: max |error| = {err.abs().max().item():.3e}"
        return True, None

    # ---- sampling ----------------------------------------------------------------
    def random(self, *size, dtype=None, device=None, generator=None, cond=None):
        """Random points of shape ``size = (..., n, k)`` (see the geometry's ``random_point``)."""
        shape = size2shape(*size)
        self._assert_check_shape(shape, "x")
        x = self.geometry.random_point(
            tuple(shape[:-2]),
            cond=self.cond if cond is None else cond,
            dtype=dtype or torch.get_default_dtype(),
            device=device,
            generator=generator,
        )
        return geoopt.ManifoldTensor(x, manifold=self)

    def extra_repr(self):
        return repr(self.geometry)


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



# Solver front-ends live in private modules (one per solver family) and are re-exported here.
_FRONTENDS = {
    "GSJOBCD": "_geoopt_jobcd",
    "JJOBCD": "_geoopt_jobcd",
    "VRJJOBCD": "_geoopt_jobcd",
    "ColumnJJacobi": "_geoopt_jobcd",
    "OBCD": "_geoopt_obcd",
    "RSDM": "_geoopt_rsdm",
    "RSSM": "_geoopt_rssm",
    "StiefelBlock": "_geoopt_rssm",
}


def __getattr__(name):
    if name in _FRONTENDS:
        import importlib

        return getattr(importlib.import_module(f"{__package__}.{_FRONTENDS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
