"""The benchmark's vocabulary: experiments, instances, methods, and one record per run.

An :class:`Experiment` (one table of a paper) yields :class:`Instance`\\ s (one dataset at one
size) and :class:`Method`\\ s (one solver with its options). :func:`run_method` runs a method on
an instance under a time limit and returns a :class:`Record`, the unit written as one JSON line.

Three generic method kinds cover most solvers, so a suite only says *what* to run:

* :func:`pymanopt_method` — any pymanopt ``Optimizer`` class (pymanopt's built-ins, orthoplug's
  pymanopt front-end, third-party solvers from the registry) on the experiment's
  ``pymanopt_problem``;
* :func:`torch_method` — any torch optimizer (geoopt's, orthoplug's geoopt front-end) on the
  experiment's ``torch_problem`` (a ``ManifoldParameter`` and a loss);
* :func:`custom_method` — a function ``(instance, seed, time_limit, **options) -> Outcome`` for
  solvers with their own interface (orthoplug's structured oracles, the papers' baselines).

Every run is scored by the experiment's :meth:`Experiment.evaluate` on the returned point, the
same function for every solver, so objective and violation columns are comparable.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from orthoplug.problems import relative_gap

__all__ = ["Instance", "Outcome", "Method", "Experiment", "Record", "run_method", "budget",
           "pymanopt_method", "torch_method", "custom_method", "solver_history",
           "SCHEMA_VERSION", "SCALES"]

SCHEMA_VERSION = 1
SCALES = ("quick", "paper")


@dataclass
class Instance:
    """One dataset at one size, with the data built and, where known, the certified optimum.

    Attributes:
        dataset: short name shown as a table column ("digits", "gauss-500x300", ...).
        sizes: the sizes that define it ({"n": 64, "p": 32}); written to every record.
        data: whatever the experiment's hooks need (matrices, a problem object).
        optimum: a certified optimal objective (closed form), or ``None``.
        note: one line for the table footnote (data source, unboundedness, ...).
    """

    dataset: str
    sizes: dict[str, Any]
    data: Any
    optimum: float | None = None
    note: str = ""


@dataclass
class Outcome:
    """What a method hands back: the final point and its (time, objective) trace."""

    point: Any
    iterations: int
    history: list[tuple[float, float]] = field(default_factory=list)
    status: str = "ok"
    message: str = ""


@dataclass
class Method:
    """A solver with fixed options; ``runner(instance, seed, time_limit) -> Outcome``.

    ``grid`` lists alternative option sets (a paper's step-size or β grid); with tuning on,
    every setting runs and the table keeps the best final objective per instance and seed.
    ``applies`` (``None``: every instance) names the instances the solver is defined on (a
    square-only solver in an experiment with rectangular instances); the others are not run.
    """

    name: str
    family: str
    runner: Callable[..., Outcome]
    options: dict[str, Any] = field(default_factory=dict)
    grid: list[dict[str, Any]] = field(default_factory=list)
    applies: Callable[[Instance], bool] | None = None

    def runs_on(self, instance: Instance) -> bool:
        """Whether this method is defined on ``instance``."""
        return self.applies is None or self.applies(instance)

    def settings(self, tune: bool) -> list[dict[str, Any]]:
        """The option settings to run: the grid merged into the defaults when ``tune``, else the
        defaults alone.
        """
        if tune and self.grid:
            return [{**self.options, **g} for g in self.grid]
        return [dict(self.options)]


class Experiment:
    """One experiment of a paper: instances, methods and a common scoring rule.

    Subclasses set the class attributes and implement :meth:`instances`, :meth:`methods` and
    :meth:`evaluate`; :meth:`pymanopt_problem` / :meth:`torch_problem` enable the generic
    pymanopt / torch methods (and with the first, third-party registry solvers).
    """

    name: str = ""
    suite: str = ""
    title: str = ""
    objective_label: str = "objective"
    #: extra per-run metrics (keys of :meth:`evaluate`'s dict) shown as table columns
    metrics: tuple[str, ...] = ()
    #: relative gap to the certified optimum counted as "reached" for time-to-target
    target_gap: float = 1e-6
    #: default time limit per run (seconds), per scale
    time_limits: dict[str, float] = {"quick": 2.0, "paper": 30.0}
    #: violation up to which a final point counts as feasible (only those can be "best")
    feasibility_tol: float = 1e-6

    def instances(self, scale: str, seed: int) -> list[Instance]:
        """The problem instances (data, sizes, optimum) at ``scale``, data drawn with ``seed``."""
        raise NotImplementedError

    def methods(self, scale: str) -> list[Method]:
        """The solvers compared at ``scale``, each with its default options and tuning grid."""
        raise NotImplementedError

    def evaluate(self, instance: Instance, point) -> dict[str, float]:
        """``{"objective": ..., "violation": ..., **metrics}`` of a final point."""
        raise NotImplementedError

    def initial_point(self, instance: Instance, seed: int) -> np.ndarray:
        """The start shared by every method (numpy), seeded."""
        raise NotImplementedError

    def pymanopt_problem(self, instance: Instance):
        """A ``pymanopt.Problem`` for generic pymanopt optimizers (``None``: not offered)."""
        return None

    def torch_problem(self, instance: Instance):
        """``(manifold, loss)`` with a geoopt manifold and ``loss(x) -> scalar tensor``."""
        return None


@dataclass
class Record:
    """One run: the line written to ``results.jsonl`` (see ``docs/results.md`` for the schema)."""

    suite: str
    experiment: str
    dataset: str
    sizes: dict[str, Any]
    solver: str
    family: str
    options: dict[str, Any]
    seed: int
    scale: str
    time_limit: float
    status: str
    objective: float | None = None
    optimum: float | None = None
    gap: float | None = None
    violation: float | None = None
    iterations: int = 0
    time: float = 0.0
    target_gap: float | None = None
    time_to_target: float | None = None
    feasible: bool | None = None
    note: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    history: dict[str, list[float]] = field(default_factory=lambda: {"time": [], "objective": []})
    message: str = ""
    schema: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-ready dict (NaN and inf become ``None``)."""
        return _finite_or_none(asdict(self))


def _finite_or_none(obj):
    """JSON has no NaN/inf: map them to ``None`` recursively; an option value that is an object
    (a step rule) becomes its ``repr``."""
    if isinstance(obj, dict):
        return {k: _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite_or_none(v) for v in obj]
    if isinstance(obj, float | np.floating):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if obj is None or isinstance(obj, str | int | float | bool):
        return obj
    return repr(obj)


def run_method(experiment: Experiment, instance: Instance, method: Method,
               options: dict[str, Any], *, seed: int, scale: str,
               time_limit: float, max_iterations: int | None = None) -> Record:
    """Run one method setting on one instance; never raises (errors become the record).

    ``max_iterations`` (tests) budgets the run in iterations; the time limit still applies, as
    a cap. Benchmarks budget time alone.
    """
    if max_iterations is not None:
        options = {**options, "max_iterations": max_iterations}
    record = Record(suite=experiment.suite, experiment=experiment.name,
                    dataset=instance.dataset, sizes=dict(instance.sizes), solver=method.name,
                    family=method.family, options=dict(options), seed=seed, scale=scale,
                    time_limit=time_limit, status="ok", optimum=instance.optimum,
                    note=instance.note,
                    target_gap=experiment.target_gap if instance.optimum is not None else None)
    start = time.perf_counter()
    try:
        outcome = method.runner(experiment, instance, seed=seed, time_limit=time_limit,
                                **options)
        record.time = time.perf_counter() - start
        scores = experiment.evaluate(instance, outcome.point)
    except Exception as err:  # a failing solver is a result, not a crash of the benchmark
        record.status = "error"
        record.message = f"{type(err).__name__}: {err}"
        record.time = time.perf_counter() - start
        record.history = {"time": [], "objective": [], "traceback": [traceback.format_exc()]}
        return record
    record.iterations = int(outcome.iterations)
    record.status, record.message = outcome.status, outcome.message
    record.objective = float(scores.pop("objective"))
    record.violation = float(scores.pop("violation"))
    record.feasible = bool(record.violation <= experiment.feasibility_tol)
    record.metrics = {k: float(v) for k, v in scores.items()}
    record.gap = relative_gap(record.objective, instance.optimum)
    times = [float(t) for t, _ in outcome.history]
    values = [float(f) for _, f in outcome.history]
    record.history = {"time": times, "objective": values}
    if instance.optimum is not None and record.target_gap is not None:
        hit = [t for t, f in zip(times, values, strict=True)
               if (g := relative_gap(f, instance.optimum)) is not None and g <= record.target_gap]
        record.time_to_target = hit[0] if hit else None
    return record


# ---- generic methods --------------------------------------------------------------------------

#: the iteration cap of a timed run: large enough that the time limit stops it first
UNBOUNDED_ITERATIONS = 10**12


def budget(time_limit: float, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with a run's stopping rule: ``max_time=time_limit`` and an iteration cap that
    never binds, unless ``options`` sets ``max_iterations`` (a test's iteration budget)."""
    return {"max_time": time_limit, "max_iterations": UNBOUNDED_ITERATIONS, **options}


class _CostRecorder:
    """Wraps a pymanopt problem's cost to log (time, cost) of every evaluation.

    Used for optimizers without their own history (pymanopt's built-ins evaluate the cost at
    every accepted and trial point; all are feasible, so the running minimum is an honest
    anytime objective).
    """

    def __init__(self, problem):
        self.t0 = time.perf_counter()
        self.trace: list[tuple[float, float]] = []
        inner = problem._cost

        def cost(point):
            value = float(inner(point))
            elapsed = time.perf_counter() - self.t0
            best = min(value, self.trace[-1][1]) if self.trace else value
            self.trace.append((elapsed, best))
            return value

        problem._cost = cost


def pymanopt_method(name: str, family: str, optimizer_class: Callable | str,
                    options: dict | None = None, grid: Iterable[dict] = ()) -> Method:
    """A pymanopt ``Optimizer`` class (or ``"module:attr"``) run on ``pymanopt_problem``."""

    def runner(experiment, instance, *, seed, time_limit, **opts):
        from orthoplug.adapters.pymanopt import SolverOptimizer

        cls = resolve(optimizer_class)
        problem = experiment.pymanopt_problem(instance)
        if problem is None:
            raise NotImplementedError(f"{experiment.name} offers no pymanopt problem")
        x0 = experiment.initial_point(instance, seed)
        kwargs = {"verbosity": 0, **budget(time_limit, opts)}
        ours = issubclass(cls, SolverOptimizer)
        if ours:
            kwargs.update(log_verbosity=1, seed=seed)
        optimizer = cls(**kwargs)
        recorder = None if ours else _CostRecorder(problem)
        result = optimizer.run(problem, initial_point=x0)
        if ours:
            hist = result.solver_result.history
            trace = list(zip(hist.get("time", []), hist.get("cost", []), strict=True))
        else:
            trace = recorder.trace
        return Outcome(point=np.asarray(result.point), iterations=int(result.iterations),
                       history=trace, message=str(result.stopping_criterion))

    return Method(name, family, runner, dict(options or {}), list(grid))


def torch_method(name: str, family: str, optimizer_factory: Callable,
                 options: dict | None = None, grid: Iterable[dict] = (),
                 record_every: int = 10) -> Method:
    """``optimizer_factory(params, **options)`` (a torch optimizer) on ``torch_problem``.

    The closure form ``step(closure)`` is used, so closure-based optimizers (orthoplug's
    JOBCD) and plain ones (geoopt's RiemannianSGD/Adam) run through the same loop.
    """

    def runner(experiment, instance, *, seed, time_limit, max_iterations=None, **opts):
        import geoopt
        import torch

        spec = experiment.torch_problem(instance)
        if spec is None:
            raise NotImplementedError(f"{experiment.name} offers no torch problem")
        manifold, loss_fn = spec
        torch.manual_seed(seed)
        x0 = torch.as_tensor(experiment.initial_point(instance, seed), dtype=torch.float64)
        param = geoopt.ManifoldParameter(x0.clone(), manifold=manifold)
        optimizer = resolve(optimizer_factory)([param], **opts)

        def closure():
            optimizer.zero_grad()
            loss = loss_fn(param)
            loss.backward()
            return loss

        trace, it, status, message = [], 0, "ok", "time or iteration limit"
        t0 = time.perf_counter()
        limit = UNBOUNDED_ITERATIONS if max_iterations is None else max_iterations
        while (elapsed := time.perf_counter() - t0) < time_limit and it < limit:
            loss = optimizer.step(closure)
            value = float(loss.detach())
            if not math.isfinite(value):
                status, message = "diverged", f"non-finite loss at iteration {it}"
                break
            if it % record_every == 0:
                trace.append((elapsed, value))
            it += 1
        return Outcome(point=param.detach().numpy().copy(), iterations=it, history=trace,
                       status=status, message=message)

    return Method(name, family, runner, dict(options or {}), list(grid))


def custom_method(name: str, family: str, fn: Callable[..., Outcome],
                  options: dict | None = None, grid: Iterable[dict] = (),
                  applies: Callable[[Instance], bool] | None = None) -> Method:
    """A function ``fn(experiment, instance, *, seed, time_limit, **options) -> Outcome``."""
    return Method(name, family, fn, dict(options or {}), list(grid), applies)


def resolve(ref):
    """A class or ``"module:attr"`` reference, resolved."""
    if isinstance(ref, str):
        import importlib

        module, _, attr = ref.partition(":")
        return getattr(importlib.import_module(module), attr)
    return ref


def solver_history(result) -> list[tuple[float, float]]:
    """(time, cost) pairs of an orthoplug :class:`~orthoplug.solvers.base.SolverResult`."""
    return list(zip(result.history.get("time", []), result.history.get("cost", []),
                    strict=True))
