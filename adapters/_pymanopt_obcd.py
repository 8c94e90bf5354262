"""pymanopt front-end for OBCD (:class:`orthoplug.solvers.obcd.OBCD`).

The pymanopt ``Problem``'s cost is the smooth part ``f``; the nonsmooth part is the optimizer's
``h`` (a term of :mod:`orthoplug.nonsmooth`)::

    import autograd.numpy as anp, pymanopt
    from orthoplug.adapters.pymanopt import OBCD
    from orthoplug.nonsmooth import L1

    manifold = pymanopt.manifolds.Stiefel(n, r)
    @pymanopt.function.autograd(manifold)
    def cost(X):
        return -anp.trace(X.T @ C @ X)
    result = OBCD(h=L1(1e-3), max_iterations=20_000).run(pymanopt.Problem(manifold, cost))
    result.cost, result.h_value, result.f_value     # F = f + h, and its parts

With the problem's autodiff oracle every iteration evaluates the full gradient (and, without a
known Lipschitz constant, the cost for backtracking); for ``f = s·tr(XᵀCXD)`` pass
``run(problem, oracle=QuadraticOracle(C, D, s))`` for the fast path (two gradient rows per
iteration and the exact block curvature).
"""

from __future__ import annotations

from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.solvers import obcd as _obcd

from ._pymanopt_base import SolverOptimizer

__all__ = ["OBCD"]


class OBCD(SolverOptimizer):
    """OBCD as a pymanopt optimizer on ``Stiefel``, ``SpecialOrthogonalGroup`` (as St(n, n)).

    Options (see :class:`orthoplug.solvers.obcd.OBCD`): ``h`` (default zero), ``k`` (2),
    ``working_set="random"|"cyclic"|"jacobi"``, ``curvature="exact"|"scalar"``, ``alpha``
    (1e-5), ``sigma``, ``sweeps``, ``refresh_every``. The result's ``cost`` (and the log's
    ``cost`` column) is ``f + h``; ``result.h_value``/``result.f_value`` hold the parts and the
    log's ``iterations["h"]`` the h column. ``result.violation`` is ``‖XᵀX − I‖_F``.

    Note: on ``SpecialOrthogonalGroup`` OBCD's reflections leave SO(n) for O(n) (same ``f``
    values on a square Stiefel manifold); use ``h`` and ``f`` that are defined on O(n).
    """

    solver_class = _obcd.OBCD
    geometries = (StiefelGeometry,)

    def run(self, problem, *, initial_point=None, oracle=None):
        result = super().run(problem, initial_point=initial_point, oracle=oracle)
        info = result.solver_result.info
        result.h_value, result.f_value = info["h"], info["f"]
        return result
