"""Step-size rules of the subgradient methods (RSSM, RSubGrad) and of RSDM, shared by the
solvers and their torch optimizers.

A rule is a small object with its own state (``state_dict`` / ``load_state_dict``), so the
pymanopt/orthoplug front-end keeps one in its :class:`~orthoplug.solvers.base.Run` and a torch
optimizer one per parameter, and both take the same decisions from the same numbers. The σ
rules of the majoriser methods are in :mod:`orthoplug.solvers.sigma_rules`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

__all__ = ["StepSchedule", "PolyakStep", "RestartedGeometric", "SubgradientSteps",
           "ArmijoBacktracking", "DecaySchedule", "StallWatch"]


# ---- subgradient methods (RSSM, RSubGrad) ----------------------------------------------------

SCHEDULES = ("constant", "diminishing", "geometric")


class StepSchedule:
    r"""Step sizes ``γ_k`` (k = 0, 1, …) of a subgradient method.

    Args:
        step_size: ``γ₀ > 0``.
        schedule: ``"constant"`` (``γ₀``), ``"diminishing"`` (``γ₀/√(k+1)``), ``"geometric"``
            (``γ₀ βᵏ``), or a callable ``k -> γ_k`` (then ``step_size`` is ignored).
        decay: ``β ∈ (0, 1)`` of the geometric schedule.

    Raises:
        ValueError: unknown schedule, ``step_size ≤ 0`` or not finite, ``decay ∉ (0, 1)``.
    """

    def __init__(self, step_size: float, schedule: str | Callable = "diminishing",
                 decay: float = 0.99):
        if callable(schedule):
            self.kind, self.fn = "callable", schedule
        elif schedule in SCHEDULES:
            self.kind, self.fn = schedule, None
        else:
            raise ValueError(f"unknown step-size schedule {schedule!r}; choose from {SCHEDULES} "
                             "or pass a callable k -> step")
        if self.fn is None:
            if isinstance(step_size, bool) or not isinstance(step_size, int | float) or not (
                    math.isfinite(step_size) and step_size > 0):
                raise ValueError(f"step_size must be a finite number > 0, got {step_size!r}")
            if self.kind == "geometric" and not 0 < decay < 1:
                raise ValueError(f"decay must lie in (0, 1) for the geometric schedule, got "
                                 f"{decay!r}")
        self.step_size, self.decay = float(step_size), float(decay)

    def __call__(self, k: int) -> float:
        if self.fn is not None:
            g = float(self.fn(k))
            if not (math.isfinite(g) and g > 0):
                raise ValueError(f"the step-size callable returned {g!r} at k = {k}; need > 0")
            return g
        if self.kind == "constant":
            return self.step_size
        if self.kind == "diminishing":
            return self.step_size / math.sqrt(k + 1)
        return self.step_size * self.decay ** k

    def info(self) -> dict:
        """The schedule's parameters, stored in the run's result."""
        return {"step_size": self.step_size, "schedule": self.kind,
                "decay": self.decay if self.kind == "geometric" else None}


class _RuleState:
    """Plain-data state of an adaptive rule (floats, ints, tensors), for optimizer state dicts."""

    def state_dict(self) -> dict:
        """The rule's state (numbers and tensors; tensors copied)."""
        return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in vars(self).items()}

    def load_state_dict(self, state: dict) -> None:
        """Restore a state from :meth:`state_dict`."""
        self.__dict__.update({k: v.clone() if isinstance(v, torch.Tensor) else v
                              for k, v in state.items()})


class PolyakStep(_RuleState):
    r"""Polyak steps with an estimated optimum (level adjustment), for sharp problems.

    ``γ_k = (f(X_k) − f̂_k)/N_k`` with ``f̂_k = f_best − δ`` (``f_best`` the lowest value seen)
    and ``N_k`` the squared norm of the full Riemannian subgradient: ``‖ξ_k‖²`` for RSubGrad;
    for RSSM, whose iteration sees only the block part ``ξ_C``, a running average of
    ``‖ξ_C‖²/ω`` (``ω = |C|/p``, weight ω per iteration). A block step of that length lowers
    the linear model by ``(f − f̂)‖ξ_C‖²/‖ξ‖²``, the block's share of the gap; dividing by
    ``‖ξ_C‖²`` itself would blow up whenever the drawn block is nearly stationary.
    ``δ₀ = level·|f(X₀)|`` (``level`` if ``f(X₀) = 0``); δ is halved when ``patience`` epochs
    pass without ``f_best`` dropping by ``drop·δ`` below its value at the last change (the
    target was too low), and multiplied by ``grow^(1/E)`` (at most δ₀; E the iterations per
    epoch) after each such drop (so that a δ cut too far early does not leave the method with
    tiny steps). The root makes δ's growth per epoch the same for every block count: a block
    method tests for the drop every iteration, E times per epoch. With ``f̂ ≤ f*`` and a sharp f
    the steps are at least Polyak's; once ``f̂ > f*`` the iterates reach ``f̂`` and δ shrinks.

    The defaults ``drop = 0.7``, ``grow = 1.2`` keep the target closer to ``f_best`` than the
    classical ``drop = 0.5``, ``grow = 1.5`` (Polyak steps too long on DPCP, where the estimated
    target sat about one gap below f*). On DPCP to a 1e-4 principal angle (patience 2, spectral
    start, docs/results.md) RSSM-4 with matching pairs needed 35.75 epochs on average over
    seeds 0–7 at n = 500 against 42.1 with the classical values, and 35 against 44 at the issue
    size (n = 1000, seed 0); RSubGrad 30.75 against 37.6 at n = 500. The cost is a δ that halves
    more readily: with ``patience = 1`` the halvings can outrun the progress (δ summable, the
    iterates stall above f*): 5 of those 8 DPCP seeds did not reach the angle in 400 epochs
    (2 with ``drop = 0.5``, ``grow = 1.2``; the classical values took 33, 90 and 144 epochs on
    seeds 0, 1, 7). Use ``patience ≥ 2``.

    Args:
        level: ``δ₀/|f(X₀)|`` > 0.
        patience: epochs without sufficient descent before δ is halved (≥ 1).
        grow: δ's growth factor per epoch of sufficient drops (≥ 1).
        drop: the sufficient drop of ``f_best``, as a fraction of δ (in (0, 1]).

    Raises:
        ValueError: ``level ≤ 0``, ``patience < 1``, ``grow < 1`` or ``drop ∉ (0, 1]``.
    """

    name = "polyak"

    def __init__(self, level: float = 0.5, patience: int = 3, *, grow: float = 1.2,
                 drop: float = 0.7):
        if not (math.isfinite(level) and level > 0):
            raise ValueError(f"level must be a finite number > 0, got {level!r}")
        if not (isinstance(patience, int) and patience >= 1):
            raise ValueError(f"patience must be an integer >= 1, got {patience!r}")
        if not (math.isfinite(grow) and grow >= 1):
            raise ValueError(f"grow must be a finite number >= 1, got {grow!r}")
        if not 0 < drop <= 1:
            raise ValueError(f"drop must lie in (0, 1], got {drop!r}")
        self.level, self.patience = float(level), patience
        self.grow, self.drop = float(grow), float(drop)
        self.best = self.ref = self.delta = self.delta0 = self.norm_sq = math.nan
        self.since, self.halvings, self.window, self.growth = 0, 0, 1, self.grow

    def start(self, f0: float, epoch_length: int) -> None:
        """Reset at ``f(X₀) = f0``; ``epoch_length`` iterations make an epoch."""
        self.best = self.ref = float(f0)
        self.delta = self.delta0 = self.level * (abs(f0) if f0 != 0 else 1.0)
        self.since, self.halvings, self.norm_sq = 0, 0, math.nan
        self.window = self.patience * max(1, int(epoch_length))
        self.growth = self.grow ** (1.0 / max(1, int(epoch_length)))

    def observe(self, f: float) -> None:
        """Record ``f(X_k)`` (called once per iteration, before the step)."""
        if f < self.best:
            self.best = f
        if self.best <= self.ref - self.drop * self.delta:
            self.ref, self.since = self.best, 0
            self.delta = min(self.growth * self.delta, self.delta0)
            return
        self.since += 1
        if self.since >= self.window:
            self.delta *= 0.5
            self.halvings += 1
            self.ref, self.since = self.best, 0

    def __call__(self, f: float, xi_sq: float, share: float = 1.0) -> float:
        """``γ = (f − f̂)/N`` with ``N`` the running estimate of the full ``‖ξ‖²`` (see the class
        notes); 0 while ``N = 0``."""
        est = xi_sq / share
        w = min(1.0, share)
        self.norm_sq = est if not self.norm_sq > 0 else (1 - w) * self.norm_sq + w * est
        if not self.norm_sq > 0:
            return 0.0
        return (f - (self.best - self.delta)) / self.norm_sq

    def info(self) -> dict:
        """The rule's parameters and its level halvings, stored in the run's result."""
        return {"schedule": self.name, "level": self.level, "patience": self.patience,
                "grow": self.grow, "drop": self.drop, "delta": self.delta,
                "halvings": self.halvings}


class RestartedGeometric(_RuleState):
    r"""Geometric decay with restarts: ``γ_k = γ_s β^{k − k_s}`` from the last restart ``k_s``.

    At the end of every epoch the rule compares ``f(X)`` with the best epoch-end value. A new
    best is stored (point and value); after ``patience`` epochs in a row without one, the
    iterate returns to the stored point and ``γ_s`` becomes ``shrink · γ_k`` (a step that
    overshoots is cut at once, so a slow decay β can be used without the risk of a long stall
    at a large step).

    Args:
        step_size: ``γ₀ > 0``.
        decay: β ∈ (0, 1] per iteration (1: constant between restarts).
        shrink: factor ∈ (0, 1) applied to the step at a restart.
        patience: epochs without a new best before a restart (≥ 1).

    Raises:
        ValueError: invalid ``step_size``, ``decay``, ``shrink`` or ``patience``.
    """

    name = "geometric-restart"

    def __init__(self, step_size: float, decay: float, shrink: float = 0.5, patience: int = 3):
        if not (math.isfinite(step_size) and step_size > 0):
            raise ValueError(f"step_size must be a finite number > 0, got {step_size!r}")
        if not 0 < decay <= 1:
            raise ValueError(f"decay must lie in (0, 1], got {decay!r}")
        if not 0 < shrink < 1:
            raise ValueError(f"shrink must lie in (0, 1), got {shrink!r}")
        if not (isinstance(patience, int) and patience >= 1):
            raise ValueError(f"patience must be an integer >= 1, got {patience!r}")
        self.step_size, self.decay, self.shrink = float(step_size), float(decay), float(shrink)
        self.patience, self.fails = patience, 0
        self.base, self.k0, self.restarts = self.step_size, 0, 0
        self.best_value, self.best_point = math.inf, None

    def __call__(self, k: int) -> float:
        return self.base * self.decay ** (k - self.k0)

    def epoch_end(self, k: int, f: float, x: torch.Tensor) -> torch.Tensor | None:
        """Called after iteration ``k`` ends an epoch at value ``f``, point ``x``; returns the
        point to restart from (a copy of the best), or ``None`` to go on."""
        if f < self.best_value:
            self.best_value, self.best_point, self.fails = f, x.clone(), 0
            return None
        self.fails += 1
        if self.fails < self.patience:
            return None
        self.base, self.k0, self.fails = self.shrink * self(k), k, 0
        self.restarts += 1
        return self.best_point.clone()

    def info(self) -> dict:
        """The rule's parameters and its restart count, stored in the run's result."""
        return {"schedule": self.name, "step_size": self.step_size, "decay": self.decay,
                "shrink": self.shrink, "patience": self.patience, "restarts": self.restarts}


class SubgradientSteps:
    r"""The step sizes of a (block) subgradient method over a run: a rule and its counter k.

    One object per run (:class:`~orthoplug.solvers.rssm.SubgradientSolver` keeps it in
    ``run.steps``) or per parameter (the torch RSSM keeps its :meth:`state_dict`), so both
    front-ends take the same steps. Per iteration: :meth:`length` gives ``γ_k``, then
    :meth:`finish` counts the iteration and, for :class:`RestartedGeometric`, ends an epoch every
    ``epoch_length`` iterations (it may return a point to restart from).

    Args:
        rule: a :class:`StepSchedule`, :class:`PolyakStep` (started) or
            :class:`RestartedGeometric`.
        epoch_length: iterations per epoch (every column moved once in expectation).
    """

    def __init__(self, rule, epoch_length: int):
        self.rule, self.epoch, self.k = rule, max(1, int(epoch_length)), 0

    @staticmethod
    def make_rule(step_size: float, schedule: str | Callable, decay: float, *,
                  level: float = 0.5, patience: int = 3, shrink: float = 0.5):
        """The rule named by ``schedule`` (``"polyak"``: not yet started).

        Raises:
            ValueError: invalid options (see the rules).
        """
        if schedule == "polyak":
            return PolyakStep(level, patience)
        if schedule == "geometric-restart":
            return RestartedGeometric(step_size, decay, shrink, patience)
        return StepSchedule(step_size, schedule, decay)

    @classmethod
    def build(cls, step_size: float, schedule: str | Callable, decay: float, *, f0: float,
              epoch_length: int, level: float = 0.5, patience: int = 3,
              shrink: float = 0.5) -> SubgradientSteps:
        """A fresh run's steps at ``f(X₀) = f0`` (see :meth:`make_rule`)."""
        rule = cls.make_rule(step_size, schedule, decay, level=level, patience=patience,
                             shrink=shrink)
        if isinstance(rule, PolyakStep):
            rule.start(f0, epoch_length)
        return cls(rule, epoch_length)

    @property
    def reads_values(self) -> bool:
        """Whether the rule needs ``f`` at the current point (the adaptive rules)."""
        return isinstance(self.rule, PolyakStep | RestartedGeometric)

    def length(self, f: Callable[[], float], xi_sq: Callable[[], float],
               share: float = 1.0) -> float:
        """``γ_k``; ``f()`` gives ``f(X_k)`` and ``xi_sq()`` ``‖ξ_k‖²`` (only Polyak calls them),
        ``share`` is the share of the columns this iteration moves."""
        rule = self.rule
        if isinstance(rule, PolyakStep):
            value = f()
            rule.observe(value)
            return rule(value, xi_sq(), share)
        return rule(self.k)

    @property
    def ends_epoch(self) -> bool:
        """Whether the next :meth:`finish` ends an epoch of :class:`RestartedGeometric` (and so
        calls its ``f``)."""
        return isinstance(self.rule, RestartedGeometric) and (self.k + 1) % self.epoch == 0

    def finish(self, f: Callable[[], float], x: torch.Tensor) -> torch.Tensor | None:
        """Count the iteration that moved to ``x``; at an epoch end of
        :class:`RestartedGeometric` return the point to restart from (else ``None``)."""
        ends = self.ends_epoch
        self.k += 1
        return self.rule.epoch_end(self.k, f(), x) if ends else None

    def info(self) -> dict:
        """The rule's parameters (stored in the run's result)."""
        return self.rule.info()

    def state_dict(self) -> dict:
        """The counter and the rule's state (a :class:`StepSchedule` has none)."""
        rule = self.rule
        return {"k": self.k, "epoch": self.epoch,
                "rule": rule.state_dict() if isinstance(rule, _RuleState) else {}}

    def load_state_dict(self, state: dict) -> None:
        """Restore a state from :meth:`state_dict` (into steps built with the same options)."""
        self.k, self.epoch = int(state["k"]), int(state["epoch"])
        if isinstance(self.rule, _RuleState):
            self.rule.load_state_dict(state["rule"])


class ArmijoBacktracking:
    """Backtracking with memory on a step size η (RSDM's default rule, both front-ends).

    :meth:`search` offers η, βη, β²η, … to a trial function until one is accepted; the first
    trial of the next search is ``2η`` after a first-trial acceptance, else the accepted η (so
    the step grows or shrinks geometrically to the cost's scale), capped at ``max_step``. After
    ``max_backtracks`` rejections the step is skipped and the next search starts from the last
    (smallest) η. The sufficient-decrease bound of a step along a direction with slope
    ``−slope`` is :meth:`bound`.

    Args:
        first_trial: the first η (> 0).
        contraction: β ∈ (0, 1).
        sufficient_decrease: Armijo's c ∈ (0, 1).
        max_backtracks: rejections per search before the step is skipped (≥ 0).
        max_step: largest first trial.
    """

    def __init__(self, first_trial: float = 1.0, *, contraction: float = 0.5,
                 sufficient_decrease: float = 1e-4, max_backtracks: int = 30,
                 max_step: float = math.inf):
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
        self.step = float(first_trial)
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
                self.step = min(2.0 * eta if trial == 0 else eta, self.max_step)
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
