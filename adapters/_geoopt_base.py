"""The geometry-backed ``geoopt.Manifold`` shared by the geoopt front-ends.

Private: :mod:`orthoplug.adapters.geoopt` re-exports the public classes; the optimizer modules
(``_geoopt_*.py``) import from here, so the public module can import all of them statically.
"""

from __future__ import annotations

import geoopt
import torch
from geoopt.utils import size2shape

from orthoplug.geometry.manifolds import (
    IndefiniteStiefelGeometry,
    JOrthogonalGeometry,
    check_arguments,
)

__all__: list[str] = []


class _GeometryManifold(geoopt.Manifold):
    ndim = 2
    reversible = False
    geometry: JOrthogonalGeometry | IndefiniteStiefelGeometry

    def __init__(self, geometry, cond: float):
        super().__init__()
        self.geometry = geometry
        self.cond = float(cond)
        self.name = geometry.name

    # ---- geometry (arguments checked: one real dtype and device, shape (..., n, k)) ------
    def _args(self, *tensors):
        check_arguments(self.name, self.geometry.shape, *tensors)

    def inner(self, x, u, v=None, *, keepdim=False):
        v = u if v is None else v
        self._args(x, u, v)
        return self.geometry.inner(x, u, v, keepdim=keepdim)

    def proju(self, x, u):
        self._args(x, u)
        return self.geometry.proj(x, u)

    def egrad2rgrad(self, x, u):
        self._args(x, u)
        return self.geometry.egrad2rgrad(x, u)

    def projx(self, x):
        self._args(x)
        return self.geometry.projx(x)

    def retr(self, x, u):
        self._args(x, u)
        return self.geometry.retr(x, u)

    def expmap(self, x, u):
        self._args(x, u)
        return self.geometry.exp(x, u)

    def transp(self, x, y, v):
        self._args(x, y, v)
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
