"""RSDM as a pymanopt optimizer (re-exported as ``orthoplug.adapters.pymanopt.RSDM``).

::

    import autograd.numpy as anp, pymanopt
    from pymanopt.manifolds import Stiefel
    from orthoplug.adapters.pymanopt import RSDM

    manifold = Stiefel(200, 20)
    @pymanopt.function.autograd(manifold)
    def cost(X):
        return -0.5 * anp.trace(X.T @ A @ X)
    result = RSDM(r=100, max_iterations=5000).run(pymanopt.Problem(manifold, cost))

Works on pymanopt's ``Stiefel``, ``Grassmann`` and ``SpecialOrthogonalGroup`` (as St(n, n): every
RSDM step has determinant +1). pymanopt's problems give full gradients; for RSDM-P's partial
gradients pass a structured oracle, ``run(problem, oracle=QuadraticOracle(A, scale=-0.5))`` or a
:class:`~orthoplug.oracles.rows.RowGradientOracle`. With ``batch_size=B`` the optimizer runs
:class:`~orthoplug.solvers.rsdm.StochasticRSDM` and needs ``oracle=`` a
:class:`~orthoplug.oracles.rows.StochasticOracle` or a
:class:`~orthoplug.oracles.core.FiniteSumOracle`.

The optimizer runs the core solver, whose step the geoopt optimizer
(:mod:`orthoplug.adapters.geoopt`) runs too: with the same seed, start and options (``step_size``
as ``lr``, no step as ``lr=None``, the same ``schedule``; for the stochastic variant a closure
that draws its minibatch as ``torch.randperm(N, generator=opt.generator())[:B]``), the
same slice steps give the same iterates. A ``step(closure)`` there is one slice step; an
iteration here is one pass over the rows (``docs/guide/options.md``, "What one iteration is"):
``⌈n/r⌉`` slice steps for RSDM-P with an oracle that reads gradient rows, else one.
"""

from __future__ import annotations

from collections.abc import Callable

from orthoplug.geometry.stiefel import GrassmannGeometry, StiefelGeometry
from orthoplug.solvers import rsdm
from orthoplug.solvers.steps import LineSearch

from ._pymanopt_base import SolverOptimizer

__all__ = ["RSDM"]


class RSDM(SolverOptimizer):
    """Riemannian random submanifold descent (RSDM-P / RSDM-O) for pymanopt problems
    (:class:`~orthoplug.solvers.rsdm.RSDM`, and :class:`~orthoplug.solvers.rsdm.StochasticRSDM`
    with ``batch_size``: the math and the rules of every option).

    Args:
        r: slice dimension, ``2 ≤ r ≤ n``; default ``max(2, round(√(np)/2))``
            (:func:`~orthoplug.solvers.rsdm.default_slice_dimension`, as the geoopt optimizer).
        sampling: ``"permutation"`` (RSDM-P) or ``"orthogonal"`` (RSDM-O).
        step_size: fixed step η, or ``None`` (default): ``line_search="auto"`` with memory, no
            tuning (for the stochastic variant: η = 1 with the ``schedule``, default constant).
        retraction: on O(r): ``"qr"``, ``"polar"``, ``"cayley"``, ``"exp"``.
        line_search: ``None`` (``"auto"`` when no ``step_size`` is given, else the fixed
            step), ``"auto"`` (``"polar"`` when ``r ≤ p``, else ``"armijo"``:
            :func:`~orthoplug.solvers.rsdm.default_line_search`), or a rule object of
            :mod:`orthoplug.solvers.steps` — ``PolarSearch(contraction, max_backtracks)``,
            ``Armijo(contraction, sufficient_decrease, max_backtracks, growth)`` — or its name
            (``"polar"``, ``"armijo"``: the rule with its defaults).
        stabilize: replace X by its polar factor every this many slice steps (``None``:
            never).
        refresh_every: slice steps between recomputations of a quadratic oracle's ``CX``.
        batch_size: minibatch size for the stochastic variant (``None``: deterministic).
        schedule: the stochastic variant's step decay ``s(k)`` (``batch_size`` only).
        decay_time: the stochastic variant's t0 > 0 (``batch_size`` only).
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.

    Raises:
        ValueError: ``schedule`` or ``decay_time`` changed without a ``batch_size``.
    """

    solver_class = rsdm.RSDM
    geometries = (StiefelGeometry, GrassmannGeometry)

    def __init__(self, r: int | None = None, sampling: str = "permutation", *,
                 step_size: float | None = None, retraction: str = "qr",
                 line_search: LineSearch | str | None = None,
                 stabilize: int | None = 1000, refresh_every: int = 10_000,
                 batch_size: int | None = None,
                 schedule: str | Callable[[int], float] = "constant", decay_time: float = 1000.0,
                 max_time: float = 1000, max_iterations: int = 1000,
                 min_gradient_norm: float = 1e-6, verbosity: int = 0, log_verbosity: int = 0,
                 seed: int | None = None, eval_every: int | None = None,
                 stall_evaluations: int = 0, stall_tolerance: float = 1e-15,
                 target_cost: float | None = None):
        stochastic = {}
        if batch_size is not None:
            self.solver_class = rsdm.StochasticRSDM
            stochastic = dict(batch_size=batch_size, schedule=schedule, decay_time=decay_time)
        elif schedule != "constant" or decay_time != 1000.0:
            raise ValueError("schedule and decay_time are options of the stochastic variant: "
                             "give a batch_size")
        super().__init__(max_time=max_time, max_iterations=max_iterations,
                         min_gradient_norm=min_gradient_norm, verbosity=verbosity,
                         log_verbosity=log_verbosity, seed=seed, eval_every=eval_every,
                         stall_evaluations=stall_evaluations, stall_tolerance=stall_tolerance,
                         target_cost=target_cost,
                         r=r, sampling=sampling, step_size=step_size, retraction=retraction,
                         line_search=line_search, stabilize=stabilize,
                         refresh_every=refresh_every, **stochastic)
