"""pymanopt front-end of :class:`orthoplug.solvers.lbfgs.CayleyLBFGS` on O(J)."""

from __future__ import annotations

from orthoplug.geometry.manifolds import JOrthogonalGeometry
from orthoplug.solvers import lbfgs

from ._pymanopt_base import SolverOptimizer

__all__ = ["CayleyLBFGS"]


class CayleyLBFGS(SolverOptimizer):
    """Cayley L-BFGS on ``JOrthogonal`` as a pymanopt optimizer
    (:class:`orthoplug.solvers.lbfgs.CayleyLBFGS`: the math and the rules of every option).

    It reads the problem's cost and Euclidean gradient only (any pymanopt backend).

    Args:
        memory: number of secant pairs kept.
        max_step: largest Frobenius norm of an iteration's first trial step in o(J).
        sufficient_decrease: sufficient-decrease constant in (0, 1/2).
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = lbfgs.CayleyLBFGS
    geometries = (JOrthogonalGeometry,)

    def __init__(self, *, memory: int = 10, max_step: float = 1.0,
                 sufficient_decrease: float = 1e-4, max_time: float = 1000,
                 max_iterations: int = 1000,
                 min_gradient_norm: float = 1e-6, verbosity: int = 0, log_verbosity: int = 0,
                 seed: int | None = None, eval_every: int | None = None,
                 stall_evaluations: int = 0, stall_tolerance: float = 1e-15,
                 target_cost: float | None = None):
        super().__init__(max_time=max_time, max_iterations=max_iterations,
                         min_gradient_norm=min_gradient_norm, verbosity=verbosity,
                         log_verbosity=log_verbosity, seed=seed, eval_every=eval_every,
                         stall_evaluations=stall_evaluations, stall_tolerance=stall_tolerance,
                         target_cost=target_cost,
                         memory=memory, max_step=max_step, sufficient_decrease=sufficient_decrease)
