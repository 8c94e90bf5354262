"""pymanopt front-ends for OBCD (:class:`orthoplug.solvers.obcd.OBCD`) and SparseOBCD
(:class:`orthoplug.solvers.sparse_obcd.SparseOBCD`).

The pymanopt ``Problem``'s cost is the smooth part ``f``; the nonsmooth part is the optimizer's
``h`` (a term of :mod:`orthoplug.nonsmooth`)::

    import autograd.numpy as anp, pymanopt
    from orthoplug.adapters.pymanopt import OBCD
    from orthoplug.nonsmooth import L1

    manifold = pymanopt.manifolds.Stiefel(n, r)
    @pymanopt.function.autograd(manifold)
    def cost(X):
        return -anp.trace(X.T @ C @ X)
    result = OBCD(h=L1(1e-3), max_iterations=2000).run(pymanopt.Problem(manifold, cost))
    result.cost, result.h_value, result.f_value     # F = f + h, and its parts

With the problem's autodiff oracle every update evaluates the full gradient (and, without a
known Lipschitz constant, the cost to check σ), so the default pair order is the Jacobi
matching (⌊n/2⌋ disjoint pairs per gradient, one iteration), the order the geoopt optimizer
takes too; for ``f = s·tr(XᵀCXD)`` pass ``run(problem, oracle=QuadraticOracle(C, D, s))`` for
the fast path (random pairs of two gradient rows each, the exact block curvature, and ``⌈n/k⌉``
updates, one pass over the rows, per iteration: ``docs/guide/options.md``, "What one iteration
is").
"""

from __future__ import annotations

from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.nonsmooth import SeparableTerm
from orthoplug.solvers import obcd as _obcd
from orthoplug.solvers import sparse_obcd
from orthoplug.solvers.sigma_rules import SigmaRule

from ._pymanopt_base import SolverOptimizer

__all__ = ["OBCD", "SparseOBCD"]


class OBCD(SolverOptimizer):
    """OBCD as a pymanopt optimizer on ``Stiefel``, ``SpecialOrthogonalGroup`` (as St(n, n))
    (:class:`orthoplug.solvers.obcd.OBCD`: the math and the rules of every option).

    The result's ``cost`` (and the log's ``cost`` column) is ``f + h``;
    ``result.h_value``/``result.f_value`` hold the parts and the log's ``iterations["h"]`` the h
    column. ``result.violation`` is ``‖XᵀX − I‖_F``.

    Note: on ``SpecialOrthogonalGroup`` OBCD's reflections leave SO(n) for O(n) (same ``f``
    values on a square Stiefel manifold); use ``h`` and ``f`` that are defined on O(n).

    Args:
        h: the separable nonsmooth term (default zero).
        k: block size, ``2 ≤ k ≤ n``.
        pairs: ``None`` (default: ``"random"`` with a row-gradient oracle such as
            ``QuadraticOracle``, ``"jacobi"`` with the problem's autodiff cost;
            ``result.solver_result.info["pairs"]``), ``"random"``, ``"cyclic"``, ``"jacobi"``
            or ``"greedy"``.
        curvature: ``"exact"`` or ``"scalar"``.
        theta: proximal weight θ > 0.
        sigma_rule: the σ rule of the scalar curvature (:mod:`orthoplug.solvers.sigma_rules`):
            ``"backtracking"`` (default), ``"fit"``, a rule object or a number (a fixed σ).
        sweeps: pair sweeps of the local method (k > 2, h ≠ 0).
        refresh_every: recompute the fast path's ``CX`` every this many block updates.
        candidates: pairs compared per greedy update.
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = _obcd.OBCD
    geometries = (StiefelGeometry,)

    def __init__(self, h: SeparableTerm | None = None, *, k: int = 2,
                 pairs: str | None = None, curvature: str = "exact", theta: float = 1e-5,
                 sigma_rule: SigmaRule = "backtracking", sweeps: int = 2,
                 refresh_every: int = 10_000, candidates: int = 8,
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
                         h=h, k=k, pairs=pairs, curvature=curvature, theta=theta,
                         sigma_rule=sigma_rule, sweeps=sweeps, refresh_every=refresh_every,
                         candidates=candidates)

    def run(self, problem, *, initial_point=None, oracle=None):
        result = super().run(problem, initial_point=initial_point, oracle=oracle)
        info = result.solver_result.info
        result.h_value, result.f_value = info["h"], info["f"]
        return result


class SparseOBCD(OBCD):
    """SparseOBCD as a pymanopt optimizer on ``Stiefel`` (and ``SpecialOrthogonalGroup`` as
    St(n, n)): the start stages (candidates, prox or splitting, partition search), then OBCD's
    exact pair steps on greedy pairs with column sweeps — the pipeline of
    :class:`orthoplug.solvers.sparse_obcd.SparseOBCD`, whose docstring gives each stage and its
    budget.

    Its data starts, column sweeps, greedy pairs and the fast pair loop need
    ``f = s·tr(XᵀCX)``: pass ``run(problem, oracle=QuadraticOracle(C, scale=s))`` (with
    ``starts=()``, ``column_every=0`` and ``candidates=1`` it also runs on the problem's
    autodiff cost). The result's ``cost`` is ``f + h`` (``result.h_value``,
    ``result.f_value``: the parts); ``result.stages`` lists each stage's iterations, gradient
    evaluations and share of the decrease of F.

    The stage options are those of :class:`orthoplug.solvers.sparse_obcd.SparseOBCD`.

    Args:
        h: the separable term (default zero).
        starts: candidate starts besides the initial point (``"diagonal"``, ``"pca"``).
        candidates: random pairs compared per pair step by their exact model (quadratic f
            only; 1: uniform pairs, any f).
        column_every: pair steps between column sweeps (``"auto"``: n for a column-invariant
            f).
        start_sweeps: column sweeps applied to each start candidate.
        prox_steps: the prox stage's budget (``"auto"``: n for a continuous h).
        split_steps: the splitting stage's budget (``"auto"``: 10 n for ℓ0 and the
            nonnegativity indicator).
        split_smoothing: μβ of the splitting stage (``"auto"``: 0.1 for an indicator h).
        split_from: ``"start"`` or ``"x0"`` (``"auto"``: ``"x0"`` with the partition search).
        partition: the partition search stage (``"auto"``: for the nonnegativity indicator).
        restarts: the most restarts of the splitting stage once the pair steps stall
            (``"auto"``: no limit for ℓ0 with the splitting stage, else 0).
        branch_steps: the most ManPG steps of each branch, from the initial point, each
            start candidate and each prox-stage end, the lowest end kept (``"auto"``: 100 n
            for a continuous h at r ≤ 10, else 0).
        theta: OBCD's proximal weight θ > 0.
        refresh_every: pair steps between recomputations of ``CX``.
        max_time: wall-clock limit in seconds (the only clock the run reads).
        max_iterations: iterations of the whole run: the start stages' work in gradients,
            then iterations of ``⌈n/2⌉`` pair steps (each stage also has its own budget).
        min_gradient_norm: stop when OBCD's gradient norm (``‖P_X(∇f + s_h)‖_F``) falls below
            it.
        verbosity, log_verbosity: as in pymanopt.
        seed: seed of the pairs, column matchings and start sweeps.
        eval_every: iterations between evaluations, in the stages too (default: OBCD's).
        stall_evaluations: stop after this many evaluations without relative progress.
        stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = sparse_obcd.SparseOBCD

    def __init__(self, h: SeparableTerm | None = None, *,
                 starts: tuple[str, ...] = ("diagonal", "pca"),
                 candidates: int = 16, column_every: int | str = "auto", start_sweeps: int = 1,
                 prox_steps: int | str = "auto", split_steps: int | str = "auto",
                 split_smoothing: float | str = "auto", split_from: str = "auto",
                 partition: bool | str = "auto", restarts: int | str = "auto",
                 branch_steps: int | str = "auto", theta: float = 1e-5,
                 refresh_every: int = 10_000, max_time: float = 1000,
                 max_iterations: int = 1000, min_gradient_norm: float = 1e-6,
                 verbosity: int = 0, log_verbosity: int = 0, seed: int | None = None,
                 eval_every: int | None = None, stall_evaluations: int = 0,
                 stall_tolerance: float = 1e-15, target_cost: float | None = None):
        # OBCD's options are not SparseOBCD's: the base takes them all by name
        SolverOptimizer.__init__(
            self, max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity,
            seed=seed, eval_every=eval_every, stall_evaluations=stall_evaluations,
            stall_tolerance=stall_tolerance, target_cost=target_cost, h=h, starts=starts,
            candidates=candidates, column_every=column_every, start_sweeps=start_sweeps,
            prox_steps=prox_steps, split_steps=split_steps, split_smoothing=split_smoothing,
            split_from=split_from, partition=partition, restarts=restarts,
            branch_steps=branch_steps, theta=theta, refresh_every=refresh_every)

    def run(self, problem, *, initial_point=None, oracle=None):
        result = super().run(problem, initial_point=initial_point, oracle=oracle)
        result.stages = result.solver_result.info["stages"]
        return result
