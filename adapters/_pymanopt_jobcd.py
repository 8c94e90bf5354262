"""pymanopt front-ends of the JOBCD family (:mod:`orthoplug.solvers.jobcd`,
:mod:`orthoplug.solvers.jjacobi`) on O(J) and the indefinite Stiefel set.

Every option has the default of the core solver and of the geoopt optimizer of the same name
(:mod:`orthoplug.adapters.geoopt`): built with the same options and ``seed`` from the same
start, the two take the same steps (see the class docstrings for what a host cannot do).
"""

from __future__ import annotations

from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry, JOrthogonalGeometry
from orthoplug.solvers import jjacobi, jobcd
from orthoplug.solvers.sigma_rules import SigmaFixed, SigmaRule

from ._pymanopt_base import SolverOptimizer

__all__ = ["GSJOBCD", "JJOBCD", "VRJJOBCD", "ColumnJJacobi"]

_J_GEOMETRIES = (JOrthogonalGeometry, IndefiniteStiefelGeometry)


class GSJOBCD(SolverOptimizer):
    """GS-JOBCD as a pymanopt optimizer (:class:`orthoplug.solvers.jobcd.GSJOBCD`: the problem,
    the iteration, its cost, when to pick it, and the rules of every option).

    For the quadratic fast path pass ``run(problem, oracle=QuadraticOracle(C, D, scale))``. For
    ``tr(XᵀCX)`` on square O(J) see :class:`ColumnJJacobi`. One iteration is ⌊n/2⌋ pair
    updates. With ``curvature="scalar"`` (or a non-quadratic cost, or the column side) and the
    same options and ``seed`` it takes the steps of the torch
    :class:`orthoplug.adapters.geoopt.GSJOBCD` (one iteration per ``step``).

    Args:
        pairs: ``"random"`` (default), ``"cyclic"`` or ``"greedy"``.
        curvature: ``"exact"`` or ``"scalar"``.
        refresh_every: recompute the row fast path's cached ``CX`` every this many pair
            updates.
        side: ``"row"`` (default) or ``"column"``.
        candidates: pairs compared per greedy choice.
        theta: proximal weight θ > 0.
        sigma_rule: the σ rule (:mod:`orthoplug.solvers.sigma_rules`): an object, ``"fit"``
            (default), ``"backtracking"`` or a number (a fixed σ).
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = jobcd.GSJOBCD
    geometries = _J_GEOMETRIES

    def __init__(self, *, pairs: str = "random", curvature: str = "exact",
                 refresh_every: int = 10_000, side: str = "row", candidates: int = 8,
                 theta: float = 1e-6, sigma_rule: SigmaRule = "fit",
                 max_time: float = 1000, max_iterations: int = 1000,
                 min_gradient_norm: float = 1e-6, verbosity: int = 0, log_verbosity: int = 0,
                 seed: int | None = None, eval_every: int | None = None,
                 stall_evaluations: int = 0, stall_tolerance: float = 1e-15,
                 target_cost: float | None = None):
        super().__init__(max_time=max_time, max_iterations=max_iterations,
                         min_gradient_norm=min_gradient_norm, verbosity=verbosity,
                         log_verbosity=log_verbosity, seed=seed, eval_every=eval_every,
                         stall_evaluations=stall_evaluations, stall_tolerance=stall_tolerance,
                         target_cost=target_cost,
                         pairs=pairs, curvature=curvature, refresh_every=refresh_every,
                         side=side, candidates=candidates, theta=theta, sigma_rule=sigma_rule)


class JJOBCD(SolverOptimizer):
    """J-JOBCD (Jacobi, ⌊n/2⌋ pairs per iteration) for pymanopt
    (:class:`orthoplug.solvers.jobcd.JJOBCD`: the problem, the iteration, its cost, when to
    pick it, and the rules of every option).

    The defaults (scalar model, rows, one matching, ``sigma_rule="fit"``) are those of the
    torch :class:`orthoplug.adapters.geoopt.JJOBCD`, whose steps it takes with the same options
    and ``seed``. ``curvature="hessian"`` (with ``side="column"``) uses the problem's Euclidean
    Hessian (an autodiff cost, or ``euclidean_hessian=``); the geoopt optimizer has no such
    model. The resolved choices are in ``result.solver_result.info``.

    Args:
        curvature: ``"scalar"`` (default) or ``"hessian"``.
        side: ``"row"`` (default) or ``"column"``.
        matchings: random matchings per iteration (1, the default, an int or ``"all"``).
        theta: proximal weight θ > 0.
        sigma_rule: the σ rule (:mod:`orthoplug.solvers.sigma_rules`): an object, ``"fit"``
            (default), ``"backtracking"`` or a number (a fixed σ).
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = jobcd.JJOBCD
    geometries = _J_GEOMETRIES

    def __init__(self, *, curvature: str = "scalar", side: str = "row",
                 matchings: int | str = 1, theta: float = 1e-6, sigma_rule: SigmaRule = "fit",
                 max_time: float = 1000, max_iterations: int = 1000,
                 min_gradient_norm: float = 1e-6, verbosity: int = 0, log_verbosity: int = 0,
                 seed: int | None = None, eval_every: int | None = None,
                 stall_evaluations: int = 0, stall_tolerance: float = 1e-15,
                 target_cost: float | None = None):
        super().__init__(max_time=max_time, max_iterations=max_iterations,
                         min_gradient_norm=min_gradient_norm, verbosity=verbosity,
                         log_verbosity=log_verbosity, seed=seed, eval_every=eval_every,
                         stall_evaluations=stall_evaluations, stall_tolerance=stall_tolerance,
                         target_cost=target_cost,
                         curvature=curvature, side=side, matchings=matchings, theta=theta,
                         sigma_rule=sigma_rule)


class VRJJOBCD(SolverOptimizer):
    """VR-J-JOBCD for pymanopt (:class:`orthoplug.solvers.jobcd.VRJJOBCD`: the problem, the
    iteration, its cost, when to pick it, and the rules of every option).

    pymanopt has no finite-sum interface: pass ``run(problem, oracle=FiniteSumOracle(...))`` with
    the component gradients (the problem's cost is still used for nothing else).

    Args:
        sigma_rule: the fixed σ: a number or a :class:`~orthoplug.solvers.sigma_rules.SigmaFixed`
            (``None``, the default: the oracle's declared Lipschitz constant).
        batch_size: the large (reset) batch of the PAGE estimator (``None``: all components).
        small_batch: the small batch of the variance-reduced update (``None``: the solver's).
        reset_probability: probability of a large batch (``None``: the solver's).
        theta: proximal weight θ > 0.
        side: ``"row"`` or ``"column"``.
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = jobcd.VRJJOBCD
    geometries = _J_GEOMETRIES

    def __init__(self, *, sigma_rule: SigmaFixed | float | None = None,
                 batch_size: int | None = None, small_batch: int | None = None,
                 reset_probability: float | None = None, theta: float = 1e-6,
                 side: str = "row",
                 max_time: float = 1000, max_iterations: int = 1000,
                 min_gradient_norm: float = 1e-6, verbosity: int = 0, log_verbosity: int = 0,
                 seed: int | None = None, eval_every: int | None = None,
                 stall_evaluations: int = 0, stall_tolerance: float = 1e-15,
                 target_cost: float | None = None):
        super().__init__(max_time=max_time, max_iterations=max_iterations,
                         min_gradient_norm=min_gradient_norm, verbosity=verbosity,
                         log_verbosity=log_verbosity, seed=seed, eval_every=eval_every,
                         stall_evaluations=stall_evaluations, stall_tolerance=stall_tolerance,
                         target_cost=target_cost,
                         sigma_rule=sigma_rule, batch_size=batch_size, small_batch=small_batch,
                         reset_probability=reset_probability, theta=theta, side=side)


class ColumnJJacobi(SolverOptimizer):
    """Column J-Jacobi sweeps for ``s·tr(XᵀCX)`` on square O(J) as a pymanopt optimizer
    (:class:`orthoplug.solvers.jjacobi.ColumnJJacobi`: the problem, the iteration — one sweep
    of all column pairs —, its cost, when to pick it).

    Pass the quadratic: ``run(problem, oracle=QuadraticOracle(C, scale=s))`` (the sweeps read C;
    the problem's cost is used for nothing else). With the same options and ``seed`` it takes
    the steps of the torch :class:`orthoplug.adapters.geoopt.ColumnJJacobi` (one sweep per
    ``step``).

    Args:
        pairs: the sweep order, ``"cyclic"`` (default), ``"random"`` or ``"greedy"``.
        tol: the rotation tolerance (``None``: the dtype's).
        max_boost: largest hyperbolic boost of one column-pair step.
        same_sign: include the same-sign column pairs in the sweeps.
        candidates: pairs compared per greedy choice.
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = jjacobi.ColumnJJacobi
    geometries = (JOrthogonalGeometry,)

    def __init__(self, *, pairs: str = "cyclic", tol: float | None = None,
                 max_boost: float = 4.0, same_sign: bool = True, candidates: int = 8,
                 max_time: float = 1000, max_iterations: int = 1000,
                 min_gradient_norm: float = 1e-6, verbosity: int = 0, log_verbosity: int = 0,
                 seed: int | None = None, eval_every: int | None = None,
                 stall_evaluations: int = 0, stall_tolerance: float = 1e-15,
                 target_cost: float | None = None):
        super().__init__(max_time=max_time, max_iterations=max_iterations,
                         min_gradient_norm=min_gradient_norm, verbosity=verbosity,
                         log_verbosity=log_verbosity, seed=seed, eval_every=eval_every,
                         stall_evaluations=stall_evaluations, stall_tolerance=stall_tolerance,
                         target_cost=target_cost,
                         pairs=pairs, tol=tol, max_boost=max_boost, same_sign=same_sign,
                         candidates=candidates)
