"""pymanopt front-ends of the JOBCD family (:mod:`orthoplug.solvers.jobcd`) on O(J) and the
indefinite Stiefel set."""

from __future__ import annotations

from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry, JOrthogonalGeometry
from orthoplug.solvers import jobcd

from ._pymanopt_base import SolverOptimizer

__all__ = ["GSJOBCD", "JJOBCD", "VRJJOBCD"]

_J_GEOMETRIES = (JOrthogonalGeometry, IndefiniteStiefelGeometry)


class GSJOBCD(SolverOptimizer):
    """GS-JOBCD as a pymanopt optimizer (:class:`orthoplug.solvers.jobcd.GSJOBCD`: the math
    and the rules of every option).

    For the quadratic fast path pass ``run(problem, oracle=QuadraticOracle(C, D, scale))``; on
    square O(J) with ``D = None`` that runs column J-Jacobi sweeps (one sweep per iteration).
    With ``curvature="scalar"`` and the same ``side``, ``sigma``/``sigma0``, ``theta`` and
    ``seed`` it takes the same steps as the torch
    :class:`orthoplug.adapters.geoopt.GSJOBCD` (one iteration per ``step``).

    Args:
        pairs: ``"random"``, ``"cyclic"`` or ``"greedy"`` (``None``: the solver's choice).
        curvature: ``"exact"`` or ``"scalar"``.
        refresh_every: recompute the row fast path's cached ``CX`` every this many
            iterations.
        side: ``"auto"``, ``"row"`` or ``"column"``.
        jacobi_tol: the column sweeps' rotation tolerance (``None``: the dtype's).
        max_boost: largest hyperbolic boost of one column-pair step.
        same_sign: include the same-sign column pairs in the sweeps.
        candidates: pairs compared per greedy choice.
        theta: proximal weight θ > 0.
        sigma: fixed scalar curvature σ ≥ the Lipschitz constant; ``None``: the ``sigma_rule``.
        sigma0: the first σ of the adaptive rule (``None``: the solver's estimate).
        sigma_shrink: factor < 1 on an accepted σ (adaptive σ), 1: σ never decreases.
        sigma_rule: ``"auto"``, ``"backtracking"`` or ``"fit"``.
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = jobcd.GSJOBCD
    geometries = _J_GEOMETRIES

    def __init__(self, *, pairs: str | None = None, curvature: str = "exact",
                 refresh_every: int = 10_000, side: str = "auto",
                 jacobi_tol: float | None = None, max_boost: float = 4.0, same_sign: bool = True,
                 candidates: int = 8, theta: float = 1e-6, sigma: float | None = None,
                 sigma0: float | None = None, sigma_shrink: float = 1.0, sigma_rule: str = "auto",
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
                         side=side, jacobi_tol=jacobi_tol, max_boost=max_boost,
                         same_sign=same_sign, candidates=candidates, theta=theta, sigma=sigma,
                         sigma0=sigma0, sigma_shrink=sigma_shrink, sigma_rule=sigma_rule)


class JJOBCD(SolverOptimizer):
    """J-JOBCD (Jacobi, ⌊n/2⌋ pairs per iteration) for pymanopt
    (:class:`orthoplug.solvers.jobcd.JJOBCD`: the math and the rules of every option).

    On square O(J) with a problem that has a Euclidean Hessian (an autodiff cost, or
    ``euclidean_hessian=``) the default is the second-order column model (one sweep of all
    column pairs per iteration, from one gradient and one Hessian-vector product); elsewhere,
    and with ``curvature="scalar"``, the same options and ``seed`` give the steps of the torch
    :class:`orthoplug.adapters.geoopt.JJOBCD`.

    Args:
        curvature: ``"auto"``, ``"scalar"`` or ``"hessian"``.
        side: ``"auto"``, ``"row"`` or ``"column"``.
        matchings: random matchings per iteration (an int, ``"all"`` or ``"auto"``).
        theta: proximal weight θ > 0.
        sigma: fixed scalar curvature σ ≥ the Lipschitz constant; ``None``: the ``sigma_rule``.
        sigma0: the first σ of the adaptive rule (``None``: the solver's estimate).
        sigma_shrink: factor < 1 on an accepted σ (adaptive σ), 1: σ never decreases.
        sigma_rule: ``"auto"``, ``"backtracking"`` or ``"fit"``.
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = jobcd.JJOBCD
    geometries = _J_GEOMETRIES

    def __init__(self, *, curvature: str = "auto", side: str = "auto",
                 matchings: int | str = "auto", theta: float = 1e-6, sigma: float | None = None,
                 sigma0: float | None = None, sigma_shrink: float = 1.0, sigma_rule: str = "auto",
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
                         sigma=sigma, sigma0=sigma0, sigma_shrink=sigma_shrink,
                         sigma_rule=sigma_rule)


class VRJJOBCD(SolverOptimizer):
    """VR-J-JOBCD for pymanopt (:class:`orthoplug.solvers.jobcd.VRJJOBCD`: the math and the
    rules of every option).

    pymanopt has no finite-sum interface: pass ``run(problem, oracle=FiniteSumOracle(...))`` with
    the component gradients (the problem's cost is still used for nothing else).

    Args:
        batch_size: the large (reset) batch of the PAGE estimator (``None``: all components).
        small_batch: the small batch of the variance-reduced update (``None``: the solver's).
        reset_probability: probability of a large batch (``None``: the solver's).
        theta: proximal weight θ > 0.
        sigma: fixed scalar curvature σ ≥ the Lipschitz constant; ``None``: the ``sigma_rule``.
        sigma0: the first σ of the adaptive rule (``None``: the solver's estimate).
        sigma_shrink: factor < 1 on an accepted σ (adaptive σ), 1: σ never decreases.
        sigma_rule: ``"auto"``, ``"backtracking"`` or ``"fit"``.
        side: ``"row"`` or ``"column"``.
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = jobcd.VRJJOBCD
    geometries = _J_GEOMETRIES

    def __init__(self, *, batch_size: int | None = None, small_batch: int | None = None,
                 reset_probability: float | None = None, theta: float = 1e-6,
                 sigma: float | None = None, sigma0: float | None = None, side: str = "row",
                 sigma_shrink: float = 1.0, sigma_rule: str = "auto",
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
                         batch_size=batch_size, small_batch=small_batch,
                         reset_probability=reset_probability, theta=theta, sigma=sigma,
                         sigma0=sigma0, side=side, sigma_shrink=sigma_shrink,
                         sigma_rule=sigma_rule)
