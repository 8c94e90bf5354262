"""Adapter-neutral views of a manifold for the conformance battery.

A *case* builds the same manifold in both adapters. A *view* exposes one adapter's manifold
through a common torch API, so every check in ``test_conformance.py`` runs unchanged against
pymanopt (numpy, float64) and geoopt (torch, float32/float64, with batch dimensions).
Later manifolds join the battery by appending a :class:`Case` to :data:`CASES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from orthoplug.adapters import geoopt as go_adapters
from orthoplug.adapters import pymanopt as pm_adapters


@dataclass
class Case:
    name: str
    make_pymanopt: Callable
    make_geoopt: Callable
    has_exp: bool
    extra: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return self.name


RNG_SIG = [1, -1, -1, 1, 1, -1, 1]
CASES = [
    Case("JOrthogonal-sorted", lambda: pm_adapters.JOrthogonal(6, 3),
         lambda: go_adapters.JOrthogonal(6, 3), True),
    Case("JOrthogonal-unsorted", lambda: pm_adapters.JOrthogonal(7, signature=RNG_SIG),
         lambda: go_adapters.JOrthogonal(7, signature=RNG_SIG), True),
    Case("JOrthogonal-definite", lambda: pm_adapters.JOrthogonal(4, 4),
         lambda: go_adapters.JOrthogonal(4, 4), True),
    Case("IndefiniteStiefel-sorted", lambda: pm_adapters.IndefiniteStiefel(7, 4, 3, 2),
         lambda: go_adapters.IndefiniteStiefel(7, 4, 3, 2), False),
    Case("IndefiniteStiefel-unsorted",
         lambda: pm_adapters.IndefiniteStiefel(7, 3, signature=RNG_SIG, k_signature=[-1, 1, -1]),
         lambda: go_adapters.IndefiniteStiefel(7, 3, signature=RNG_SIG, k_signature=[-1, 1, -1]),
         False),
]


def _stiefel_point(n: int, p: int, seed: int) -> torch.Tensor:
    from orthoplug.geometry.stiefel import qf

    return qf(torch.randn(n, p, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)))


# Submanifold blocks of St(n, p) (RSSM): columns C variable, the others fixed.
_BLOCK_X = _stiefel_point(8, 5, 11)
_BLOCK_SQUARE = _stiefel_point(6, 6, 12)
CASES += [
    Case("StiefelBlock-8x5-C13",
         lambda: pm_adapters.StiefelBlock(_BLOCK_X.numpy(), [1, 3]),
         lambda: go_adapters.StiefelBlock(_BLOCK_X, [1, 3]), False),
    Case("StiefelBlock-square-6x6-C025",
         lambda: pm_adapters.StiefelBlock(_BLOCK_SQUARE.numpy(), [0, 2, 5]),
         lambda: go_adapters.StiefelBlock(_BLOCK_SQUARE, [0, 2, 5]), False),
]


def smooth_cost(x: torch.Tensor) -> torch.Tensor:
    """A smooth non-quadratic cost, summed over batch dimensions."""
    n = x.shape[-2]
    c = torch.arange(1, n + 1, dtype=x.dtype, device=x.device)
    return (c[:, None] * x * x).sum() + 0.3 * torch.sin(x).sum() + 0.1 * (x[..., 0, :] ** 3).sum()


def egrad(x: torch.Tensor) -> torch.Tensor:
    x = x.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(smooth_cost(x), x)
    return g


def ehess(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    x = x.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(smooth_cost(x), x, create_graph=True)
    (h,) = torch.autograd.grad((g * v).sum(), x)
    return h


class PymanoptView:
    """numpy float64 manifold; returns torch tensors."""

    frontend = "pymanopt"

    def __init__(self, case: Case, dtype=torch.float64, batch=()):
        assert dtype == torch.float64 and batch == ()
        self.m = case.make_pymanopt()
        self.has_exp = case.has_exp
        self.dtype, self.batch = dtype, batch

    @staticmethod
    def _t(a):
        return torch.from_numpy(np.asarray(a, dtype=np.float64))

    @staticmethod
    def _n(t):
        return t.detach().numpy()

    @property
    def geometry(self):
        return self.m.geometry

    def point(self):
        return self._t(self.m.random_point())

    def tangent(self, x):
        return self._t(self.m.random_tangent_vector(self._n(x)))

    def proj(self, x, u):
        return self._t(self.m.projection(self._n(x), self._n(u)))

    def inner(self, x, u, v):
        return torch.tensor(self.m.inner_product(self._n(x), self._n(u), self._n(v)),
                            dtype=torch.float64)

    def norm(self, x, u):
        return torch.tensor(self.m.norm(self._n(x), self._n(u)), dtype=torch.float64)

    def rgrad(self, x, g):
        return self._t(self.m.euclidean_to_riemannian_gradient(self._n(x), self._n(g)))

    def rhess(self, x, g, h, xi):
        return self._t(self.m.euclidean_to_riemannian_hessian(*map(self._n, (x, g, h, xi))))

    def retr(self, x, u):
        return self._t(self.m.retraction(self._n(x), self._n(u)))

    def exp(self, x, u):
        return self._t(self.m.exp(self._n(x), self._n(u)))

    def transp(self, x, y, v):
        return self._t(self.m.transport(self._n(x), self._n(y), self._n(v)))


class GeooptView:
    """geoopt manifold in a given dtype, with leading batch dimensions."""

    frontend = "geoopt"

    def __init__(self, case: Case, dtype=torch.float64, batch=()):
        self.m = case.make_geoopt()
        self.has_exp = case.has_exp
        self.dtype, self.batch = dtype, batch
        self.gen = torch.Generator().manual_seed(1234)

    @property
    def geometry(self):
        return self.m.geometry

    def point(self):
        shape = (*self.batch, *self.m.geometry.shape)
        return self.m.random(*shape, dtype=self.dtype, generator=self.gen).as_subclass(
            torch.Tensor)

    def tangent(self, x):
        return self.m.geometry.random_tangent(x, generator=self.gen)

    def proj(self, x, u):
        return self.m.proju(x, u)

    def inner(self, x, u, v):
        return self.m.inner(x, u, v)

    def norm(self, x, u):
        return self.m.norm(x, u)

    def rgrad(self, x, g):
        return self.m.egrad2rgrad(x, g)

    def rhess(self, x, g, h, xi):
        return self.m.geometry.ehess2rhess(x, g, h, xi)

    def retr(self, x, u):
        return self.m.retr(x, u)

    def exp(self, x, u):
        return self.m.expmap(x, u)

    def transp(self, x, y, v):
        return self.m.transp(x, y, v)


def taylor_slope(values_at: Callable[[float], float], f0: float, df0: float,
                 d2f0: float | None = None) -> float:
    """Slope of ``log|f(h) − model(h)|`` against ``log h`` over a range where rounding is small.

    The model is first order (slope 2 expected) or, with ``d2f0``, second order (slope 3).
    """
    hs = np.logspace(-4, -1, 13)
    errs = []
    for h in hs:
        model = f0 + h * df0 + (0.5 * h * h * d2f0 if d2f0 is not None else 0.0)
        errs.append(abs(values_at(h) - model))
    errs = np.asarray(errs)
    keep = errs > 1e-12 * max(1.0, abs(f0))
    lh, le = np.log10(hs[keep]), np.log10(errs[keep])
    # median of successive slopes: robust to an isolated sign-change dip of the remainder
    return float(np.median(np.diff(le) / np.diff(lh)))


def identify_linear_piece_numpy2(x, y, window_length):
    """pymanopt 2.2.1's ``identify_linear_piece`` with its NumPy ≥ 2.4 incompatibility fixed.

    pymanopt assigns ``np.sqrt(residuals)`` (a 1-element array) to a scalar slot, which NumPy
    2.4 rejects; this version takes the scalar. Same algorithm otherwise.
    """
    residues = np.zeros(len(x) - window_length)
    polys = np.zeros((2, len(residues)))
    for k in range(len(residues)):
        segment = np.arange(k, k + window_length + 1)
        poly, residuals, *_ = np.polyfit(x[segment], y[segment], deg=1, full=True)
        residues[k] = np.sqrt(residuals[0]) if residuals.size else 0.0
        polys[:, k] = poly
    best = int(np.argmin(residues))
    return np.arange(best, best + window_length + 1), polys[:, best]
