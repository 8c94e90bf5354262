"""Step-size rules of RSDM (line search, stochastic schedules, stall watch), shared by the
solvers and their torch optimizers.

A rule is a small object with its own state (``state_dict`` / ``load_state_dict``), so the
pymanopt/orthoplug front-end keeps one in its :class:`~orthoplug.solvers.base.Run` and a torch
optimizer one per parameter, and both take the same decisions from the same numbers. The σ
rules of the majoriser methods are in :mod:`orthoplug.solvers.sigma_rules`, the step rules of
the subgradient methods (RSSM, RSubGrad) in :mod:`orthoplug.solvers.step_rules`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["ArmijoBacktracking", "LineSearch", "Armijo", "PolarSearch", "as_line_search",
           "LINE_SEARCH_NAMES", "ARMIJO_GROWTH", "POLAR_ETA_MAX", "DecaySchedule", "StallWatch"]

#: :class:`Armijo`'s default factor on η after a first-trial acceptance
ARMIJO_GROWTH = 1.25
#: the largest η of :class:`PolarSearch` (η is an inverse Lipschitz estimate)
POLAR_ETA_MAX = 1e15


class ArmijoBacktracking:
    """Backtracking with memory on a step size η (RSDM's default rule, both front-ends).

    :meth:`search` offers η, βη, β²η, … to a trial function until one is accepted; the first
    trial of the next search is ``γη`` (γ = ``growth``) after a first-trial acceptance, else the
    accepted η (so the step grows or shrinks geometrically to the cost's scale), capped at
    ``max_step``. After
    ``max_backtracks`` rejections the step is skipped and the next search starts from the last
    (smallest) η. The sufficient-decrease bound of a step along a direction with slope
    ``−slope`` is :meth:`bound`.

    Args:
        first_trial: the first η (> 0).
        contraction: β ∈ (0, 1).
        sufficient_decrease: Armijo's c ∈ (0, 1).
        max_backtracks: rejections per search before the step is skipped (≥ 0).
        max_step: largest first trial.
        growth: γ ≥ 1, the factor on η after a first-trial acceptance (default 2).
    """

    def __init__(self, first_trial: float = 1.0, *, contraction: float = 0.5,
                 sufficient_decrease: float = 1e-4, max_backtracks: int = 30,
                 max_step: float = math.inf, growth: float = 2.0):
        if not (isinstance(first_trial, (int, float)) and math.isfinite(first_trial)
                and first_trial > 0):
            raise ValueError(f"step_size must be a finite number > 0, got {first_trial!r}")
        if not 0 < contraction < 1:
            raise ValueError(f"contraction must be in (0, 1), got {contraction!r}")
        if not 0 < sufficient_decrease < 1:
            raise ValueError(f"sufficient_decrease must be in (0, 1), got {sufficient_decrease!r}")
        if isinstance(max_backtracks, bool) or not (isinstance(max_backtracks, int)
                                                    and max_backtracks >= 0):
            raise ValueError(f"max_backtracks must be an integer >= 0, got {max_backtracks!r}")
        if not (isinstance(growth, (int, float)) and math.isfinite(growth) and growth >= 1):
            raise ValueError(f"growth must be a finite number >= 1, got {growth!r}")
        self.step = float(first_trial)
        self.growth = float(growth)
        self.contraction = float(contraction)
        self.sufficient_decrease = float(sufficient_decrease)
        self.max_backtracks = max_backtracks
        self.max_step = float(max_step)
        self.backtracks = 0
        self.skipped = 0

    def bound(self, f0: float, eta: float, slope: float) -> float:
        """The largest acceptable cost ``f0 − c·η·slope`` of a trial η."""
        return f0 - self.sufficient_decrease * eta * slope

    def search(self, attempt: Callable[[float], bool | None]) -> bool:
        """Offer step sizes to ``attempt(η)`` until it accepts one (returns ``True``, having
        taken the step); ``None`` from ``attempt`` ends the search without a step and without
        changing the memory (nothing to gain). Returns whether a step was taken."""
        eta = self.step
        for trial in range(self.max_backtracks + 1):
            taken = attempt(eta)
            if taken is None:
                return False
            if taken:
                self.step = min(self.growth * eta if trial == 0 else eta, self.max_step)
                return True
            self.backtracks += 1
            eta *= self.contraction
        self.skipped += 1
        self.step = eta
        return False

    def state_dict(self) -> dict:
        """The rule's state (plain numbers)."""
        return {"step": self.step, "backtracks": self.backtracks, "skipped": self.skipped}

    def load_state_dict(self, state: dict) -> None:
        """Restore a state from :meth:`state_dict`."""
        self.step = float(state["step"])
        self.backtracks, self.skipped = int(state["backtracks"]), int(state["skipped"])


class LineSearch:
    """A line search of RSDM as an option value (both front-ends): a template that makes each
    run's (each torch parameter group's) :class:`ArmijoBacktracking`, which keeps the state.

    Subclasses: :class:`Armijo` and :class:`PolarSearch`; the strings ``"armijo"`` and
    ``"polar"`` are shorthands for them with their defaults (:func:`as_line_search`).

    Args:
        contraction: β ∈ (0, 1), the factor on η after a rejected trial.
        max_backtracks: rejections per step before the step is skipped (≥ 0).
    """

    name = ""

    def __init__(self, *, contraction: float = 0.5, max_backtracks: int = 30):
        if not (isinstance(contraction, (int, float)) and 0 < contraction < 1):
            raise ValueError(f"contraction must be in (0, 1), got {contraction!r}")
        if isinstance(max_backtracks, bool) or not (isinstance(max_backtracks, int)
                                                    and max_backtracks >= 0):
            raise ValueError(f"max_backtracks must be an integer >= 0, got {max_backtracks!r}")
        self.contraction, self.max_backtracks = float(contraction), max_backtracks

    def backtracking(self, first_trial: float) -> ArmijoBacktracking:
        """A fresh backtracking state from the first η ``first_trial``."""
        raise NotImplementedError

    def options(self) -> dict:
        """The options, as given to the constructor."""
        return {"contraction": self.contraction, "max_backtracks": self.max_backtracks}

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other.options() == self.options()

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(sorted(self.options().items()))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.options().items())
        return f"{type(self).__name__}({args})"


class Armijo(LineSearch):
    """Backtracking along ``−Γ`` with memory: accept η when ``F(X⁺) ≤ F(X) − c·η‖Γ‖²``,
    else ``η ← βη``; the next step's first trial is ``γη`` after a first-trial acceptance,
    else the accepted η (:class:`ArmijoBacktracking`).

    ``growth`` γ = 1.25 (default): a slow growth keeps the first trial near the largest
    acceptable step; γ = 2 overshoots it on about every other step once η has reached the
    cost's scale, and is the classical choice that explores more on a nonconvex cost.

    Args:
        contraction: β ∈ (0, 1) (default 0.5).
        sufficient_decrease: Armijo's c ∈ (0, 1) (default 1e-4).
        max_backtracks: rejections per step before the step is skipped (default 30).
        growth: γ ≥ 1 (default :data:`ARMIJO_GROWTH`).
    """

    name = "armijo"

    def __init__(self, *, contraction: float = 0.5, sufficient_decrease: float = 1e-4,
                 max_backtracks: int = 30, growth: float = ARMIJO_GROWTH):
        super().__init__(contraction=contraction, max_backtracks=max_backtracks)
        self.sufficient_decrease, self.growth = sufficient_decrease, growth
        self.backtracking(1.0)  # validates c and γ

    def backtracking(self, first_trial: float) -> ArmijoBacktracking:
        return ArmijoBacktracking(first_trial, contraction=self.contraction,
                                  sufficient_decrease=self.sufficient_decrease,
                                  max_backtracks=self.max_backtracks, growth=self.growth)

    def options(self) -> dict:
        return {"contraction": self.contraction,
                "sufficient_decrease": self.sufficient_decrease,
                "max_backtracks": self.max_backtracks, "growth": self.growth}


class PolarSearch(LineSearch):
    """RSDM's proximal-linear slice step (``"polar"``): η is an inverse Lipschitz estimate,
    accepted when the cost is below the model (a majorisation test), multiplied by β
    otherwise and doubled after a first-trial acceptance, capped at :data:`POLAR_ETA_MAX`
    (:func:`~orthoplug.solvers.rsdm.polar_search`).

    Args:
        contraction: β ∈ (0, 1) (default 0.5).
        max_backtracks: rejections per step before the step is skipped (default 30).
    """

    name = "polar"

    def backtracking(self, first_trial: float) -> ArmijoBacktracking:
        return ArmijoBacktracking(first_trial, contraction=self.contraction,
                                  max_backtracks=self.max_backtracks, max_step=POLAR_ETA_MAX,
                                  growth=2.0)


#: the shorthand names of :func:`as_line_search`
LINE_SEARCH_NAMES = {"armijo": Armijo, "polar": PolarSearch}


def as_line_search(spec: LineSearch | str | None) -> LineSearch | str | None:
    """The line search named by a ``line_search`` option: a :class:`LineSearch` as given, a
    name of :data:`LINE_SEARCH_NAMES` as that rule with its defaults, ``"auto"`` and ``None``
    as they are (the solver resolves them).

    Raises:
        ValueError: anything else, naming the accepted forms.
    """
    if spec is None or spec == "auto" or isinstance(spec, LineSearch):
        return spec
    if isinstance(spec, str) and spec in LINE_SEARCH_NAMES:
        return LINE_SEARCH_NAMES[spec]()
    raise ValueError(f"line_search must be None, 'auto', one of {sorted(LINE_SEARCH_NAMES)} or "
                     f"a LineSearch object (orthoplug.solvers.steps.Armijo, PolarSearch), got "
                     f"{spec!r}")


class DecaySchedule:
    """A step-size schedule ``η_k = η·s(k)`` for stochastic steps (no line search).

    ``"constant"``: ``s = 1``; ``"inverse"``: ``s = 1/(1 + k/t0)``; ``"inverse_sqrt"``:
    ``s = 1/√(1 + k/t0)``; or a callable ``k -> s``. The schedule counts its own steps
    (:meth:`next`), so a resumed run continues the decay where it stopped.

    Args:
        schedule: a name of :attr:`NAMES` or a callable.
        decay_time: t0 > 0.
    """

    NAMES = ("constant", "inverse", "inverse_sqrt")

    def __init__(self, schedule: str | Callable[[int], float] = "constant",
                 decay_time: float = 1000.0):
        if not (callable(schedule) or schedule in self.NAMES):
            raise ValueError(f"schedule must be a callable or one of {self.NAMES}, "
                             f"got {schedule!r}")
        if not (isinstance(decay_time, (int, float)) and math.isfinite(decay_time)
                and decay_time > 0):
            raise ValueError(f"decay_time must be a finite number > 0, got {decay_time!r}")
        self.schedule, self.decay_time = schedule, float(decay_time)
        self.k = 0

    @property
    def name(self) -> str:
        """The schedule's name (``"callable"`` for a function)."""
        return self.schedule if isinstance(self.schedule, str) else "callable"

    def factor(self, k: int) -> float:
        """``s(k)``."""
        if callable(self.schedule):
            return float(self.schedule(k))
        if self.schedule == "inverse":
            return 1.0 / (1.0 + k / self.decay_time)
        if self.schedule == "inverse_sqrt":
            return 1.0 / math.sqrt(1.0 + k / self.decay_time)
        return 1.0

    def next(self, eta: float) -> float:
        """The step of the current step number for the base step ``eta``; counts the step."""
        k, self.k = self.k, self.k + 1
        return eta if self.schedule == "constant" else eta * self.factor(k)

    def state_dict(self) -> dict:
        """The rule's state (the step count)."""
        return {"k": self.k}

    def load_state_dict(self, state: dict) -> None:
        """Restore a state from :meth:`state_dict`."""
        self.k = int(state["k"])


class StallWatch:
    """Watches a fixed step at a run's evaluations: did the cost stop decreasing?

    :meth:`observe` returns a description (once) when the cost has not decreased over the last
    ``window`` evaluations while the gradient norm is above ``1e-6`` of its first value.

    Args:
        window: evaluations without a decrease that count as a stall.
    """

    def __init__(self, window: int = 5):
        self.window = window
        self.seen: list[tuple[int, float, float]] = []  # (iteration, cost, gradient norm)
        self.warned = False

    def observe(self, iteration: int, cost: float, gnorm: float) -> str | None:
        """Record one evaluation; the stall's description the first time one is seen."""
        if self.warned:
            return None
        seen = self.seen
        seen.append((iteration, cost, gnorm))
        if len(seen) <= self.window:
            return None
        it0, f0, _ = seen[-1 - self.window]
        best = min(f for _, f, _ in seen[-self.window:])
        if not (math.isfinite(best) and math.isfinite(f0)):
            return None
        stalled = best >= f0 - 1e-12 * max(1.0, abs(f0))
        if not (stalled and gnorm > 1e-6 * seen[0][2]):
            return None
        self.warned = True
        return (f"over the last {iteration - it0} iterations the cost went from {f0:.10g} to "
                f"at best {best:.10g} while the Riemannian gradient norm is {gnorm:.3e} "
                f"({gnorm / seen[0][2]:.2e} of its initial value)")

    def state_dict(self) -> dict:
        """The watch's state (plain numbers)."""
        return {"seen": [list(s) for s in self.seen], "warned": self.warned}

    def load_state_dict(self, state: dict) -> None:
        """Restore a state from :meth:`state_dict`."""
        self.seen = [tuple(s) for s in state["seen"]]
        self.warned = bool(state["warned"])
