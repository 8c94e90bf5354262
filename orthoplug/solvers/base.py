"""The run loop shared by all solvers: stopping, periodic evaluation, logging, NaN handling.

A solver subclasses :class:`IterativeSolver` and implements :meth:`~IterativeSolver.setup`
(once per run) and :meth:`~IterativeSolver.step` (one iteration, working through a
:class:`~orthoplug.solvers.oracle.Tracker`). A step must only write a point it has checked to be
finite; if it meets a non-finite value it raises
:class:`~orthoplug.solvers.oracle.NonFiniteError`, and the run stops with that reason keeping the
last good point.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from orthoplug.distributed import all_reduce_any, check_replicas, shared_seed

from .oracle import NonFiniteError, Oracle, Tracker

__all__ = ["StoppingCriteria", "SolverResult", "IterativeSolver", "ScalarCurvature",
           "NonFiniteError"]

_log = logging.getLogger("orthoplug")


@dataclass
class StoppingCriteria:
    """When a run stops (the first criterion met wins).

    Attributes:
        max_iterations: iteration budget (one block update, or one Jacobi sweep, per iteration).
        max_time: wall-clock budget in seconds.
        min_gradient_norm: stop when the Riemannian gradient norm (in the manifold's metric,
            the measure pymanopt uses) falls below it; checked at evaluations.
        stall_evaluations: stop when the cost has improved by less than ``stall_tolerance``
            (relative) over this many consecutive evaluations; ``0`` disables it.
        stall_tolerance: relative improvement counted as a stall.
        target_cost: stop once the cost is at or below this value.
    """

    max_iterations: int = 10_000
    max_time: float = math.inf
    min_gradient_norm: float = 0.0
    stall_evaluations: int = 0
    stall_tolerance: float = 1e-15
    target_cost: float | None = None

    def __post_init__(self):
        if self.max_iterations < 0:
            raise ValueError(f"max_iterations must be >= 0, got {self.max_iterations}")
        if not self.max_time > 0:
            raise ValueError(f"max_time must be > 0, got {self.max_time}")


@dataclass
class SolverResult:
    """Outcome of a run: final point, cost, why it stopped, and the evaluation history."""

    point: torch.Tensor
    cost: float
    iterations: int
    stop_reason: str
    time: float
    gradient_norm: float
    violation: float
    gradient_evaluations: int
    history: dict[str, list] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-ready summary (the point itself is left out; see :meth:`save`)."""
        out = {k: v for k, v in asdict(self).items() if k != "point"}
        out["shape"] = list(self.point.shape)
        return out

    def save(self, path: str | Path) -> None:
        """Write ``path.json`` (summary and history) and ``path.npy`` (the point)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_suffix(".json").write_text(json.dumps(self.to_dict(), indent=1, default=float))
        np.save(path.with_suffix(".npy"), self.point.detach().cpu().numpy())


class IterativeSolver:
    """Base class of orthoplug's solvers.

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

    def __init__(self, *, stopping: StoppingCriteria | None = None, eval_every: int | None = None,
                 seed: int | None = None, log_verbosity: int = 1, verbosity: int = 0,
                 callback=None, **criteria):
        self.stopping = stopping or StoppingCriteria(**criteria)
        if stopping is not None and criteria:
            raise ValueError("give either stopping= or individual criteria, not both")
        if eval_every is not None and eval_every < 1:
            raise ValueError(f"eval_every must be >= 1, got {eval_every}")
        self.eval_every = eval_every
        self.seed = seed
        self.log_verbosity = log_verbosity
        self.verbosity = verbosity
        self.callback = callback

    # ---- to implement --------------------------------------------------------------
    def setup(self, tracker: Tracker, geometry, generator: torch.Generator) -> None:
        """Prepare per-run state (called once before the first step)."""

    def step(self, tracker: Tracker, geometry, generator: torch.Generator) -> None:
        """One iteration. A long one (e.g. a full sweep) may end early once
        ``time.perf_counter()`` passes ``self.deadline`` (the run's ``max_time``). A step that
        finds the method converged (further steps cannot change X) sets ``self.finished`` to
        the reason: the run then evaluates and stops."""
        raise NotImplementedError

    def steps(self, tracker: Tracker, geometry, generator: torch.Generator, count: int) -> int:
        """Up to ``count`` iterations (``count >= 1``, never past the next evaluation); returns
        how many were done (at least one). Default: one :meth:`step`. Solvers whose iterations
        run in a compiled loop override it to enter the loop once per evaluation interval; a
        :class:`~orthoplug.solvers.oracle.NonFiniteError` raised here carries the iterations
        completed before it in its ``iterations`` attribute (default 0)."""
        self.step(tracker, geometry, generator)
        return 1

    def default_eval_every(self, tracker: Tracker) -> int:
        """Iterations between evaluations when ``eval_every`` is not given (here 1; block methods
        override it with about one sweep)."""
        return 1

    def info(self) -> dict:
        """Solver parameters to store in the result."""
        return {}

    # ---- the loop --------------------------------------------------------------------
    def measure(self, tracker: Tracker, geometry) -> tuple[float, float, float]:
        """(cost, Riemannian gradient norm, constraint violation) at the current point."""
        x = tracker.x
        cost = float(tracker.value())
        rg = geometry.egrad2rgrad(x, tracker.gradient())
        gnorm = float(torch.sqrt(geometry.inner(x, rg, rg).clamp_min(0)).max())
        return cost, gnorm, float(geometry.violation(x).max())

    def run(self, oracle: Oracle, x0: torch.Tensor, geometry) -> SolverResult:
        """Minimise ``oracle`` over ``geometry`` from the feasible ``x0``.

        With a data-parallel oracle (``oracle.shard`` under ``torch.distributed``) every rank
        must call ``run`` alike: ``seed=None`` is drawn on rank 0 and broadcast (an explicit
        seed must be the same on every rank: checked, :class:`ReplicaDivergenceError`), and the
        ``max_time`` stop is agreed over the group before each iteration (so every rank stops
        after the same iteration).

        Raises:
            ValueError: if ``x0`` has the wrong shape or is infeasible (message gives the
                violation), or if the initial cost/gradient is not finite.
        """
        geometry.check_point(x0)
        shard = oracle.shard if oracle.shard is not None and oracle.shard.distributed else None
        if shard is not None:  # one stream on every rank (a mismatched seed would deadlock)
            seed = shared_seed(self.seed, shard.group)
            check_replicas([("seed", seed)], shard.group, context=f" at the start of {self.name}")
        else:
            seed = self.seed if self.seed is not None else int(torch.randint(2**62, (1,)).item())
        generator = torch.Generator(device=x0.device)
        generator.manual_seed(seed)
        tracker = oracle.track(x0)
        stop = self.stopping
        history: dict[str, list] = {k: [] for k in
                                    ("iteration", "time", "cost", "gradient_norm", "violation")}
        try:
            cost, gnorm, viol = self.measure(tracker, geometry)
        except NonFiniteError as err:
            raise ValueError(f"{self.name}: {err} at the initial point") from err
        self.finished: str | None = None
        self.setup(tracker, geometry, generator)
        every = self.eval_every or self.default_eval_every(tracker)
        start = time.perf_counter()
        self.deadline = start + stop.max_time if shard is None else math.inf
        best_recent = cost
        stalled = 0
        iteration = 0
        reason = None

        def record(it):
            elapsed = time.perf_counter() - start
            if self.log_verbosity >= 1:
                for key, val in zip(history, (it, elapsed, cost, gnorm, viol), strict=True):
                    history[key].append(val)
            if self.verbosity >= 1:
                _log.info("%s it=%d t=%.3fs cost=%.12g |grad|=%.3e viol=%.2e",
                          self.name, it, elapsed, cost, gnorm, viol)
            if self.callback is not None:
                self.callback(it, tracker)

        record(0)
        last_eval = 0
        while reason is None:
            if iteration >= stop.max_iterations:
                reason = f"max iterations ({stop.max_iterations}) reached"
                break
            late = time.perf_counter() - start >= stop.max_time
            if shard is not None and math.isfinite(stop.max_time):
                late = all_reduce_any(late, shard.group)
            if late:
                reason = f"max time ({stop.max_time:g} s) reached"
                break
            todo = min(every - iteration % every, stop.max_iterations - iteration)
            try:
                iteration += self.steps(tracker, geometry, generator, todo)
            except NonFiniteError as err:
                iteration += err.iterations
                reason = f"stopped on {err}; returning the last finite iterate"
                break
            if iteration % every and iteration < stop.max_iterations and not self.finished:
                continue
            try:
                cost, gnorm, viol = self.measure(tracker, geometry)
            except NonFiniteError as err:
                reason = f"stopped on {err}; returning the last finite iterate"
                break
            last_eval = iteration
            record(iteration)
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
            if reason is None and self.finished:
                reason = self.finished
        elapsed = time.perf_counter() - start
        if last_eval != iteration or reason.startswith("stopped on"):
            try:
                cost, gnorm, viol = self.measure(tracker, geometry)
            except NonFiniteError:  # the last finite point has a non-finite cost/gradient
                cost, gnorm = float("nan"), float("nan")
                viol = float(geometry.violation(tracker.x).max())
        return SolverResult(point=tracker.x, cost=cost, iterations=iteration, stop_reason=reason,
                            time=elapsed, gradient_norm=gnorm, violation=viol,
                            gradient_evaluations=tracker.gradient_evaluations, history=history,
                            info={"solver": self.name, "seed": self.seed, **self.info()})


class ScalarCurvature:
    """σ of the block methods' scalar majoriser ``f(X⁺) ≤ f(X) + ⟨W, M⟩ + σ‖Z‖₂²/2 ‖W‖²``.

    Mixed into JOBCD and OBCD. σ is the user's, else the known Lipschitz constant, else a local
    estimate that :meth:`accept_step` doubles until the majorisation holds at the proposed point
    (so no accepted step increases f).

    **Adaptive σ** (``sigma_shrink < 1``, set by the solver before :meth:`init_sigma`): every
    step is checked as above (also with a known σ), σ is multiplied by ``sigma_shrink`` after
    each accepted step and doubled on each rejection, never below ``1e-12`` times its start.
    Accepted steps satisfy ``f(X⁺) ≤ f(X) + predicted ≤ f(X)``, so the method stays monotone.
    Without a known σ it starts from the Barzilai–Borwein curvature of one secant pair,
    ``|⟨S, Y⟩| / ‖S‖²`` with ``S = −ε∇f(X)``, ``Y = ∇f(X + S) − ∇f(X)`` (:meth:`estimate_bb`),
    which is ≤ the Lipschitz estimate and so starts with longer steps.
    """

    max_backtracks = 200
    sigma_shrink = 1.0

    def init_sigma(self, tracker: Tracker, generator: torch.Generator,
                   known: float | None) -> None:
        """Set ``self.sigma`` (``known``, or estimated) and whether steps must be checked."""
        adaptive = self.sigma_shrink < 1.0
        self.sigma = known
        self.backtrack = known is None or adaptive
        if known is None:
            self.sigma = (self.estimate_bb(tracker) if adaptive
                          else self.estimate_lipschitz(tracker, generator))
        self.sigma_floor = 1e-12 * self.sigma
        self.backtracks = 0
        self._rejections = 0

    @staticmethod
    def estimate_lipschitz(tracker: Tracker, generator: torch.Generator) -> float:
        """A local estimate ``‖∇f(X + εE) − ∇f(X)‖ / ‖εE‖`` (backtracking corrects it upward)."""
        x = tracker.x
        e = torch.randn(x.shape, dtype=x.dtype, device=x.device, generator=generator)
        eps = 1e-4 * float(torch.linalg.norm(x)) / float(torch.linalg.norm(e))
        g1 = tracker.oracle.gradient(x + eps * e)
        est = float(torch.linalg.norm(g1 - tracker.gradient())) / (eps * float(
            torch.linalg.norm(e)))
        return max(est, 1e-12)

    @staticmethod
    def estimate_bb(tracker: Tracker) -> float:
        """Barzilai–Borwein curvature ``|⟨S, Y⟩| / ‖S‖²`` along ``S = −ε∇f(X)``,
        ``ε = 1e-4‖X‖/‖∇f(X)‖`` (the secant pair of a short gradient step; one extra gradient)."""
        x, g = tracker.x, tracker.gradient()
        gnorm = float(torch.linalg.norm(g))
        if not gnorm > 0:
            return 1.0
        step = -(1e-4 * float(torch.linalg.norm(x)) / gnorm) * g
        y = tracker.oracle.gradient(x + step) - g
        return max(abs(float((step * y).sum())) / float((step * step).sum()), 1e-12)

    def accept_step(self, tracker: Tracker, x_new: torch.Tensor, predicted: float) -> bool:
        """Whether ``X⁺ = x_new`` may be taken; if not, σ has been doubled for a new proposal.

        Always true with a known σ (unless adaptive). Otherwise true iff
        ``f(X⁺) ≤ f(X) + predicted`` (the scalar model's change, up to 1e-12 relative); the
        value ``f(X⁺)`` it computed is kept in ``self.trial_value`` (else ``None``). With
        adaptive σ an accepted step shrinks σ by ``sigma_shrink``.
        """
        self.trial_value = None
        if not self.backtrack:
            return True
        f0 = float(tracker.value())
        self.trial_value = tracker.oracle.value(x_new)
        if float(self.trial_value) <= f0 + predicted + 1e-12 * max(1.0, abs(f0)):
            if self.sigma_shrink < 1.0:
                self.sigma = max(self.sigma * self.sigma_shrink, self.sigma_floor)
            self._rejections = 0
            return True
        self.sigma *= 2.0
        self.backtracks += 1
        # (adaptive σ rejects routinely: only an unbroken run of rejections means divergence)
        self._rejections += 1
        if self._rejections > self.max_backtracks:
            raise NonFiniteError("curvature estimate diverged during backtracking")
        return False
