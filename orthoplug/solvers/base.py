"""The run loop shared by all solvers: stopping, periodic evaluation, logging, NaN handling.

A solver subclasses :class:`IterativeSolver` and implements :meth:`~IterativeSolver.setup`
(once per run) and :meth:`~IterativeSolver.step` (one iteration, working through a
:class:`~orthoplug.oracles.core.Tracker`). A step must only write a point it has checked to be
finite; if it meets a non-finite value it raises
:class:`~orthoplug.oracles.core.NonFiniteError`, and the run stops with that reason keeping the
last good point.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from orthoplug.distributed import all_reduce_any, check_replicas, check_seed, shared_seed
from orthoplug.oracles import NonFiniteError, Oracle, Tracker

from .clock import RunClock
from .sigma_rules import (
    SigmaBacktracking,
    SigmaFit,
    estimate_bb,
    estimate_lipschitz,
    start_sigma_rule,
)

__all__ = ["StoppingCriteria", "SolverResult", "Run", "IterativeSolver", "ScalarCurvature"]

_log = logging.getLogger("orthoplug")


@dataclass
class StoppingCriteria:
    """When a run stops (the first criterion met wins).

    Attributes:
        max_iterations: iteration budget; one iteration is about the work of one full gradient
            (block methods: :meth:`IterativeSolver.updates_per_iteration` block updates;
            ``docs/guide/options.md``, "What one iteration is"); ``None``: no limit.
        max_time: wall-clock budget in seconds.
        min_gradient_norm: stop when the Riemannian gradient norm (in the manifold's metric,
            the measure pymanopt uses) falls below it; checked at evaluations.
        stall_evaluations: stop when the cost has improved by less than ``stall_tolerance``
            (relative) over this many consecutive evaluations; ``0`` disables it.
        stall_tolerance: relative improvement counted as a stall.
        target_cost: stop once the cost is at or below this value.
    """

    max_iterations: int | None = 10_000
    max_time: float = math.inf
    min_gradient_norm: float = 0.0
    stall_evaluations: int = 0
    stall_tolerance: float = 1e-15
    target_cost: float | None = None

    def __post_init__(self):
        if self.max_iterations is not None and self.max_iterations < 0:
            raise ValueError(f"max_iterations must be >= 0, got {self.max_iterations}")
        if not self.max_time > 0:
            raise ValueError(f"max_time must be > 0, got {self.max_time}")


@dataclass
class SolverResult:
    """Outcome of a run: final point, cost, why it stopped, and the evaluation history.

    ``time`` is the run's own time in seconds; the seconds numba spent compiling (or loading
    cached) kernels during the run are left out of it and reported as ``compile_time``.
    """

    point: torch.Tensor
    cost: float
    iterations: int
    stop_reason: str
    time: float
    gradient_norm: float
    violation: float
    gradient_evaluations: float
    history: dict[str, list] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    compile_time: float = 0.0
    #: the lowest-cost evaluated point of methods that are not monotone (subgradient methods),
    #: its cost and iteration; ``None`` for the others.
    best_point: torch.Tensor | None = None
    best_cost: float | None = None
    best_iteration: int | None = None

    def to_dict(self) -> dict:
        """JSON-ready summary (the point itself is left out; see :meth:`save`)."""
        out = {k: v for k, v in asdict(self).items() if k not in ("point", "best_point")}
        out["shape"] = list(self.point.shape)
        return out

    def save(self, path: str | Path) -> None:
        """Write ``path.json`` (summary and history) and ``path.npy`` (the point)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_suffix(".json").write_text(json.dumps(self.to_dict(), indent=1, default=float))
        np.save(path.with_suffix(".npy"), self.point.detach().cpu().numpy())


class Run:
    """The state of one :meth:`IterativeSolver.run`: everything that lives as long as the run.

    A solver object holds only its options, so it can be run any number of times (also
    concurrently); whatever a run accumulates — step sizes, pair queues, counters, the best point
    — a solver keeps as attributes of its :class:`Run` (set in
    :meth:`~IterativeSolver.setup`).

    Attributes:
        oracle: the (possibly wrapped, see :meth:`~IterativeSolver.prepare`) oracle.
        tracker: the tracker of the current point (``tracker.x``).
        geometry: the manifold's geometry.
        generator: the run's random generator (seeded from the solver's ``seed``).
        clock: the run's :class:`~orthoplug.solvers.clock.RunClock`, or ``None`` before the
            timed loop starts; read it only through :meth:`out_of_time`.
        timed: whether the run has a time limit that steps may check (false in a distributed
            run, whose replicas agree on the stop in the run loop).
        iteration: iterations completed so far.
        updates: block updates per iteration (:meth:`IterativeSolver.updates_per_iteration`,
            set after :meth:`~IterativeSolver.setup`).
        finished: set by a step that finds the method converged (a stop reason), else ``None``.
    """

    def __init__(self, oracle: Oracle, tracker: Tracker, geometry, generator: torch.Generator):
        self.oracle = oracle
        self.tracker = tracker
        self.geometry = geometry
        self.generator = generator
        self.timed = False
        self.clock: RunClock | None = None
        self.iteration = 0
        self.updates = 1
        self.finished: str | None = None

    def out_of_time(self) -> bool:
        """Whether the run's ``max_time`` has run out: the only clock a solver may read, for a
        long step (a sweep, a stage of a composite method) to end early at the time limit.
        JIT compilation does not count (see :class:`~orthoplug.solvers.clock.RunClock`).
        Always false without a time limit, so runs with an iteration budget do not depend on
        the machine or its load."""
        return self.timed and self.clock is not None and self.clock.out_of_time()


class IterativeSolver:
    """Base class of orthoplug's solvers.

    A subclass implements :meth:`step` (and usually :meth:`setup`); optional hooks:
    :meth:`prepare` (validate the input, wrap the oracle), :meth:`steps` (several iterations in
    one compiled call), :meth:`measure`, :meth:`on_evaluation` (extra history columns, named in
    :attr:`history_fields`), :meth:`finalize` (extra result fields and info). Per-run state goes
    on the :class:`Run`, never on the solver.

    Args:
        stopping: a :class:`StoppingCriteria` (or keyword overrides of its fields, below).
        eval_every: evaluate cost, gradient norm and violation every this many iterations
            (default: chosen by the solver, e.g. one sweep over the rows for block methods).
        seed: seed of the solver's random generator (pairs, matchings, minibatches).
        log_verbosity: 0 keeps only the final values; 1 records a history row per evaluation.
        verbosity: 0 silent; 1 logs each evaluation at INFO level on the ``orthoplug`` logger.
        callback: ``callback(iteration, tracker)`` called at every evaluation.
    """

    name = "solver"
    #: names of the extra history columns :meth:`on_evaluation` returns.
    history_fields: tuple[str, ...] = ()

    def __init__(self, *, stopping: StoppingCriteria | None = None, eval_every: int | None = None,
                 seed: int | None = None, log_verbosity: int = 1, verbosity: int = 0,
                 callback=None, **criteria):
        unknown = sorted(set(criteria) - {f.name for f in fields(StoppingCriteria)})
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown option(s) {unknown}; see "
                            f"help({type(self).__name__}) for its options")
        self.stopping = stopping or StoppingCriteria(**criteria)
        if stopping is not None and criteria:
            raise ValueError("give either stopping= or individual criteria, not both")
        if eval_every is not None and eval_every < 1:
            raise ValueError(f"eval_every must be >= 1, got {eval_every}")
        self.eval_every = eval_every
        self.seed = check_seed(seed)
        self.log_verbosity = log_verbosity
        self.verbosity = verbosity
        self.callback = callback

    # ---- to implement --------------------------------------------------------------
    def prepare(self, oracle: Oracle, x0: torch.Tensor, geometry) -> Oracle:
        """Validate the problem before a run and return the oracle to run on (default: as
        given). Raise ``ValueError`` naming the cause for unsupported input."""
        return oracle

    def setup(self, run: Run) -> None:
        """Prepare the run's state (called once before the first step)."""

    def step(self, run: Run) -> None:
        """One iteration. A long one (e.g. a full sweep) may end early once
        :meth:`Run.out_of_time` (the run's ``max_time``); no other clock may decide what a step
        does. A step that
        finds the method converged (further steps cannot change X) sets ``run.finished`` to
        the reason: the run then evaluates and stops."""
        raise NotImplementedError

    def steps(self, run: Run, count: int) -> int:
        """Up to ``count`` iterations (``count >= 1``, never past the next evaluation); returns
        how many were done (at least one). Default: one iteration of ``run.updates``
        :meth:`step` calls. Solvers whose iterations run in a compiled loop override it to enter
        the loop once per evaluation interval; a
        :class:`~orthoplug.oracles.core.NonFiniteError` raised here carries the iterations
        completed before it in its ``iterations`` attribute (default 0)."""
        for _ in range(run.updates):
            self.step(run)
        return 1

    def updates_per_iteration(self, run: Run) -> int:
        """Calls of :meth:`step` that make one iteration, about the work of one full gradient
        (here 1). Block methods whose tracker reads gradient rows without a full gradient
        (:attr:`~orthoplug.oracles.core.Tracker.row_gradients`) override it with one pass over
        the rows, ``⌈n/k⌉`` updates of k rows."""
        return 1

    def default_eval_every(self, run: Run) -> int:
        """Iterations between evaluations when ``eval_every`` is not given (here 1; block methods
        override it with about one sweep)."""
        return 1

    def measure(self, run: Run) -> tuple[float, float, float]:
        """(cost, Riemannian gradient norm, constraint violation) at the current point.

        Must not change the run's state (it is also called on demand, e.g. for the result)."""
        tracker, geometry = run.tracker, run.geometry
        x = tracker.x
        cost = float(tracker.value())
        rg = geometry.egrad2rgrad(x, tracker.gradient())
        gnorm = float(torch.sqrt(geometry.inner(x, rg, rg).clamp_min(0)).max())
        return cost, gnorm, float(geometry.violation(x).max())

    def on_evaluation(self, run: Run, cost: float, gradient_norm: float,
                      violation: float) -> dict[str, float]:
        """Called after every evaluation (``run.iteration`` is current); returns the values of
        :attr:`history_fields` to record (default none)."""
        return {}

    def finalize(self, run: Run, result: SolverResult) -> None:
        """Complete the result after the loop (extra fields, ``info`` entries)."""

    def info(self, run: Run | None = None) -> dict:
        """Solver parameters (and, given a run, its counters) to store in the result."""
        return {}

    # ---- the loop --------------------------------------------------------------------
    def start(self, oracle: Oracle, x0: torch.Tensor, geometry) -> Run:
        """A new :class:`Run` at the feasible ``x0``: input checked (:meth:`prepare`, the
        geometry's feasibility check), generator seeded, :meth:`setup` done.

        With a data-parallel oracle (``oracle.shard`` under ``torch.distributed``) every rank
        must call it alike: ``seed=None`` is drawn on rank 0 and broadcast (an explicit seed must
        be the same on every rank: checked, :class:`ReplicaDivergenceError`).

        Raises:
            ValueError: if ``x0`` has the wrong shape or is infeasible (message gives the
                violation), if :meth:`prepare` rejects the input, or if the initial
                cost/gradient is not finite.
        """
        oracle = self.prepare(oracle, x0, geometry)
        geometry.check_point(x0)
        shard = oracle.shard if oracle.shard is not None and oracle.shard.distributed else None
        if shard is not None:  # one stream on every rank (a mismatched seed would deadlock)
            seed = shared_seed(self.seed, shard.group)
            check_replicas([("seed", seed)], shard.group, context=f" at the start of {self.name}")
        else:
            seed = self.seed if self.seed is not None else int(torch.randint(2**62, (1,)).item())
        generator = torch.Generator()  # on the CPU: the same draws on every device
        generator.manual_seed(seed)
        run = Run(oracle, oracle.track(x0), geometry, generator)
        run.seed = seed
        try:
            self.setup(run)
        except NonFiniteError as err:
            raise ValueError(f"{self.name}: {err} at the initial point") from err
        run.updates = self.updates_per_iteration(run)
        if self.verbosity >= 1:  # the choices resolved at setup (side, σ rule, first σ, ...)
            _log.info("%s: %s", self.name, self.info(run))
        return run

    def run(self, oracle: Oracle, x0: torch.Tensor, geometry) -> SolverResult:
        """Minimise ``oracle`` over ``geometry`` from the feasible ``x0``.

        Under ``torch.distributed`` with a data-parallel oracle see :meth:`start`; the
        ``max_time`` stop is agreed over the group before each iteration (so every rank stops
        after the same iteration). ``max_time`` counts from after :meth:`setup`.

        Raises:
            ValueError: as :meth:`start`.
        """
        run = self.start(oracle, x0, geometry)
        oracle, tracker, geometry = run.oracle, run.tracker, run.geometry
        shard = oracle.shard if oracle.shard is not None and oracle.shard.distributed else None
        stop = self.stopping
        limit = math.inf if stop.max_iterations is None else stop.max_iterations
        history: dict[str, list] = {k: [] for k in ("iteration", "time", "cost", "gradient_norm",
                                                    "violation", *self.history_fields)}
        try:
            cost, gnorm, viol = self.measure(run)
        except NonFiniteError as err:
            raise ValueError(f"{self.name}: {err} at the initial point") from err
        every = self.eval_every or self.default_eval_every(run)
        # the clock starts here: after setup and the initial measurement, and it leaves out
        # the time numba spends compiling or loading kernels
        clock = run.clock = RunClock(stop.max_time)
        run.timed = shard is None and math.isfinite(stop.max_time)
        best_recent = cost
        stalled = 0
        reason = None

        def record():
            extra = self.on_evaluation(run, cost, gnorm, viol)
            elapsed = clock.elapsed()
            if self.log_verbosity >= 1:
                row = {"iteration": run.iteration, "time": elapsed, "cost": cost,
                       "gradient_norm": gnorm, "violation": viol, **extra}
                for key, values in history.items():
                    values.append(row[key])
            if self.verbosity >= 1:
                _log.info("%s it=%d t=%.3fs cost=%.12g |grad|=%.3e viol=%.2e",
                          self.name, run.iteration, elapsed, cost, gnorm, viol)
            if self.callback is not None:
                self.callback(run.iteration, tracker)

        record()
        last_eval = 0
        while reason is None:
            if run.iteration >= limit:
                reason = f"max iterations ({stop.max_iterations}) reached"
                break
            late = clock.out_of_time()
            if shard is not None and math.isfinite(stop.max_time):
                late = all_reduce_any(late, shard.group)
            if late:
                reason = f"max time ({stop.max_time:g} s) reached"
                break
            todo = int(min(every - run.iteration % every, limit - run.iteration))
            try:
                run.iteration += self.steps(run, todo)
            except NonFiniteError as err:
                run.iteration += err.iterations
                reason = f"stopped on {err}; returning the last finite iterate"
                break
            if run.iteration % every and run.iteration < limit and not run.finished:
                continue
            try:
                cost, gnorm, viol = self.measure(run)
            except NonFiniteError as err:
                reason = f"stopped on {err}; returning the last finite iterate"
                break
            last_eval = run.iteration
            record()
            if gnorm <= stop.min_gradient_norm:
                reason = f"gradient norm {gnorm:.3e} <= {stop.min_gradient_norm:g}"
            elif stop.target_cost is not None and cost <= stop.target_cost:
                reason = f"target cost {stop.target_cost:g} reached"
            elif stop.stall_evaluations:
                if best_recent - cost > stop.stall_tolerance * max(1.0, abs(cost)):
                    best_recent, stalled = cost, 0
                else:
                    stalled += 1
                    if stalled >= stop.stall_evaluations:
                        reason = f"stalled: no progress over {stalled} evaluations"
            if reason is None and run.finished:
                reason = run.finished
        elapsed = clock.elapsed()
        if last_eval != run.iteration or reason.startswith("stopped on"):
            try:
                cost, gnorm, viol = self.measure(run)
            except NonFiniteError:  # the last finite point has a non-finite cost/gradient
                cost, gnorm = float("nan"), float("nan")
                viol = float(geometry.violation(tracker.x).max())
        result = SolverResult(point=tracker.x, cost=cost, iterations=run.iteration,
                              stop_reason=reason, time=elapsed, gradient_norm=gnorm,
                              violation=viol, gradient_evaluations=tracker.gradient_evaluations,
                              history=history,
                              compile_time=clock.compile_time,
                              info={"solver": self.name, "seed": self.seed, **self.info(run)})
        self.finalize(run, result)
        return result


class ScalarCurvature:
    """σ of the block methods' scalar majoriser ``f(X⁺) ≤ f(X) + ⟨W, M⟩ + σ‖Z‖₂²/2 ‖W‖²``.

    Mixed into JOBCD and OBCD; the solver's σ rule (:attr:`sigma_rule`, a
    :class:`~orthoplug.solvers.sigma_rules.SigmaBacktracking`,
    :class:`~orthoplug.solvers.sigma_rules.SigmaFit` or
    :class:`~orthoplug.solvers.sigma_rules.SigmaFixed`) is started for each run in
    ``run.curvature`` (:func:`~orthoplug.solvers.sigma_rules.start_sigma_rule`: σ₀ of the rule,
    else a known Lipschitz constant, else a local estimate at the start point), and the torch
    optimizers start the same rule the same way, so both take the same decisions from the same
    numbers. A checked rule's :meth:`accept_step` raises σ until the majorisation holds at the
    proposed point (so no accepted step increases f).
    """

    #: the σ rule of the solver (a rule object; its copy in ``run.curvature`` holds the state)
    sigma_rule: SigmaBacktracking = SigmaBacktracking()

    def init_sigma(self, run: Run, known: float | None) -> SigmaBacktracking:
        """Set ``run.curvature`` to :attr:`sigma_rule` started for this run (``known``: a
        Lipschitz constant of ∇f, if one is known) and return it."""
        tracker = run.tracker

        def gradient_at(points):
            return [tracker.gradient_at(points[0])]

        def estimate(adaptive: bool) -> float:
            x, g = [tracker.x], [tracker.gradient()]
            if adaptive:
                return estimate_bb(x, g, gradient_at)
            return estimate_lipschitz(x, g, gradient_at, run.generator)

        run.curvature = start_sigma_rule(self.sigma_rule, known, estimate, tracker.x.dtype)
        run.curvature_start = run.curvature.sigma
        return run.curvature

    @staticmethod
    def accept_step(run: Run, x_new: torch.Tensor, predicted: float, *,
                    fuse: bool = False) -> bool:
        """Whether ``X⁺ = x_new`` may be taken; if not, σ has been raised for a new proposal.

        Always true when ``run.curvature`` is not checked (a known σ, not adaptive). Otherwise
        the test of :meth:`SigmaBacktracking.accepts` on ``f(X⁺)``, which is kept in
        ``run.trial_value`` (else ``None``) for the caller to pass to ``set_point``.

        **Fused check** (``fuse``: the caller passes ``run.trial_gradient`` to ``set_point``
        as well): when the oracle's ``value_and_gradient`` comes at the price of a gradient
        (:attr:`~orthoplug.oracles.core.Oracle.fused_value_gradient`) and the rule is a
        :class:`~orthoplug.solvers.sigma_rules.SigmaFit` that expects this trial to be accepted
        (:meth:`~orthoplug.solvers.sigma_rules.SigmaFit.likely_accepted`: running acceptance rate
        above 0.7 after the previous trial's outcome), ``f(X⁺)`` comes from
        ``tracker.value_and_gradient_at(X⁺)`` (counted as one gradient) and ``∇f(X⁺)`` is
        kept in ``run.trial_gradient`` if the step is accepted (else ``None``; that gradient is
        lost). An accepted step then costs one oracle call instead of a value and, at the next
        iteration, a gradient; a rejected one costs a gradient instead of a value, so fusing
        pays when the chance of acceptance exceeds 1 − (cost of a value / cost of a gradient)
        (0.45–0.75 on HSPP). With SigmaFit's optimistic σ the trial after an acceptance is
        accepted in 0.16–0.39 of the cases on HSPP (mild failures keep the boldness) and the
        one after a rejection in 0.48–0.65 (J-JOBCD, quick scale, seeds 0–2, 1 s;
        ``docs/results.md``), so there it seldom fuses. The iterates do not depend
        on it.
        """
        run.trial_value = run.trial_gradient = None
        rule = run.curvature
        if not rule.checked:
            return True
        tracker = run.tracker
        if (fuse and tracker.oracle.fused_value_gradient and isinstance(rule, SigmaFit)
                and rule.likely_accepted()):
            run.trial_value, run.trial_gradient = tracker.value_and_gradient_at(x_new)
        else:
            run.trial_value = tracker.oracle.value(x_new)
        if rule.accepts(float(tracker.value()), float(run.trial_value), predicted):
            return True
        run.trial_gradient = None
        return False
