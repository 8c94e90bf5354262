r"""Step-size rules of the subgradient methods (RSSM, RSubGrad), shared by the solvers and their
torch optimizers.

One option picks the rule: ``step_size`` (core solvers and pymanopt) or ``lr`` (geoopt, where
``lr`` also multiplies the rule's step, so torch's schedulers work). It takes a rule object or a
shorthand (:func:`step_rule`):

* :class:`Polyak` (the default, ``"polyak"``; patience 2) — ``γ_k = (f(X_k) − f̂_k)/‖ξ_k‖²`` with an
  estimated optimum (level adjustment) that keeps its level while the descent goes on (a path
  condition); scale-free, no ``γ₀`` to choose; ``Polyak(path=None)`` halves the level readily,
  faster on sharp objectives (DPCP) but frozen above the optimum on non-sharp ones;
* :class:`Diminishing` (``"diminishing"``; a number ``γ₀`` is ``Diminishing(γ₀)``) —
  ``γ₀/√(k+1)`` (Thm 4.9b of Cheung et al. 2024);
* :class:`Constant` (``"constant"``) — ``γ₀``;
* :class:`Geometric` (``"geometric"``) — ``γ₀ β^{k/E}``, β per epoch;
* :class:`GeometricOnStall` (``"geometric-on-stall"``) — geometric decay that returns to the
  best epoch-end point and shrinks the step after ``patience`` epochs without a new best.

The rules count *updates*: RSubGrad's iterations, RSSM's block steps (the paper's iterations;
one step of the geoopt optimizer), whatever the solver's iteration is made of, so the steps do not
depend on it. An *epoch* is the run of updates after which every column has moved once in
expectation: 1 update of RSubGrad, ``ℓ/2`` block steps of RSSM with ℓ blocks
(:class:`SubgradientSteps` gets both the integer epoch length ``⌈ℓ/2⌉`` and the per-update share
``ω = 2/ℓ``); with a column oracle an RSSM iteration is one epoch. ``γ₀ = "auto"``
is ``0.5/‖grad f(X₀)‖_F`` (:func:`~orthoplug.solvers.rssm.auto_step_size`): a first full step
moves X by about 0.5 in Frobenius norm. The theory of the fixed schedules needs ``γ_k < 1/L``.

A rule object is a template: each run (and each parameter of a torch optimizer) starts a copy
(:meth:`StepRule.started`), whose state travels in ``state_dict`` / ``load_state_dict``. The σ
rules of the majoriser methods are in :mod:`orthoplug.solvers.sigma_rules`, RSDM's step rules in
:mod:`orthoplug.solvers.steps`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch

__all__ = ["StepRule", "Polyak", "Diminishing", "Constant", "Geometric", "GeometricOnStall",
           "SubgradientSteps", "step_rule", "RULE_NAMES"]


def _check_step(step) -> float | str:
    if step == "auto":
        return step
    if isinstance(step, bool) or not isinstance(step, int | float) or not (
            math.isfinite(step) and step > 0):
        raise ValueError(f"step must be a finite number > 0 or 'auto', got {step!r}")
    return float(step)


def _check_patience(patience) -> int:
    if isinstance(patience, bool) or not (isinstance(patience, int) and patience >= 1):
        raise ValueError(f"patience must be an integer >= 1, got {patience!r}")
    return patience


class StepRule:
    """Base class of the step rules: a template with its options, started per run.

    Subclasses set :attr:`name`, implement :meth:`start` (reset the state at the start point)
    and :meth:`length`; :attr:`reads_values` says whether ``length`` needs ``f(X_k)``.
    """

    name = ""
    #: whether the rule reads ``f`` at the current point (a torch optimizer then needs a closure)
    reads_values = False

    def started(self, *, f0: Callable[[], float], auto_step: Callable[[], float],
                epoch_length: int, share: float) -> StepRule:
        """A fresh copy of this template started at ``X₀``: ``f0()`` gives ``f(X₀)``,
        ``auto_step()`` the automatic ``γ₀``, ``epoch_length`` the updates per epoch and
        ``share`` the share of the columns one update moves."""
        rule = copy.deepcopy(self)
        rule.start(f0, auto_step, int(epoch_length), float(share))
        return rule

    def start(self, f0: Callable[[], float], auto_step: Callable[[], float],
              epoch_length: int, share: float) -> None:
        """Reset the state at the start point (see :meth:`started`)."""
        raise NotImplementedError

    def length(self, k: int, f: Callable[[], float], xi_sq: Callable[[], float],
               share: float) -> float:
        """``γ_k``; ``f()`` gives ``f(X_k)``, ``xi_sq()`` the squared norm of the (partial)
        Riemannian subgradient, ``share`` the share of the columns this update moves."""
        raise NotImplementedError

    def epoch_end(self, k: int, f: float, x: torch.Tensor) -> torch.Tensor | None:
        """Called after update ``k`` ends an epoch (only for rules with
        :attr:`watches_epochs`); returns a point to restart from, or ``None``."""
        return None

    #: whether :meth:`epoch_end` is called (it reads ``f`` at the new point)
    watches_epochs = False

    def options(self) -> dict:
        """The rule's options (its constructor's arguments)."""
        raise NotImplementedError

    def info(self) -> dict:
        """The rule's name, options and counters, stored in the run's result."""
        return {"rule": self.name, **self.options()}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.options().items())
        return f"{type(self).__name__}({args})"

    def state_dict(self) -> dict:
        """The rule's state (numbers and tensors; tensors copied)."""
        return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in vars(self).items()}

    def load_state_dict(self, state: dict) -> None:
        """Restore a state from :meth:`state_dict`."""
        self.__dict__.update({k: v.clone() if isinstance(v, torch.Tensor) else v
                              for k, v in state.items()})


class _Scheduled(StepRule):
    """A fixed schedule ``γ_k = γ₀ s(k)`` from ``step = γ₀`` (or ``"auto"``)."""

    def __init__(self, step: float | str = "auto"):
        self.step = _check_step(step)
        self.gamma0 = math.nan

    def start(self, f0, auto_step, epoch_length, share):
        self.gamma0 = auto_step() if self.step == "auto" else self.step
        self.share = share

    def length(self, k, f, xi_sq, share):
        return self.gamma0 * self.factor(k)

    def factor(self, k: int) -> float:
        """``s(k)``."""
        raise NotImplementedError

    def options(self):
        return {"step": self.step}

    def info(self):
        return {**super().info(), "gamma0": self.gamma0}


class Constant(_Scheduled):
    """``γ_k = γ₀``.

    Args:
        step: ``γ₀ > 0`` or ``"auto"``.

    Raises:
        ValueError: ``step`` not a finite number > 0 nor ``"auto"``.
    """

    name = "constant"

    def factor(self, k):
        return 1.0


class Diminishing(_Scheduled):
    r"""``γ_k = γ₀/√(k+1)`` (Thm 4.9b of Cheung et al. 2024; k counts updates: RSSM's
    block steps, the paper's iterations).

    Args:
        step: ``γ₀ > 0`` or ``"auto"``.

    Raises:
        ValueError: ``step`` not a finite number > 0 nor ``"auto"``.
    """

    name = "diminishing"

    def factor(self, k):
        return 1.0 / math.sqrt(k + 1)


class Geometric(_Scheduled):
    r"""``γ_k = γ₀ β^{ωk}``: β per epoch, ``β^ω`` per update (ω the share of the columns one
    update moves: 1 for RSubGrad, ``2/ℓ`` for RSSM), so the decay per column update is the
    same for every block count. For sharp problems such as DPCP (outside the RSSM theory).

    Args:
        step: ``γ₀ > 0`` or ``"auto"``.
        decay: β ∈ (0, 1) per epoch.

    Raises:
        ValueError: invalid ``step`` or ``decay``.
    """

    name = "geometric"

    def __init__(self, step: float | str = "auto", decay: float = 0.98):
        super().__init__(step)
        if not (isinstance(decay, int | float) and 0 < decay < 1):
            raise ValueError(f"decay must lie in (0, 1), got {decay!r}")
        self.decay = float(decay)

    def factor(self, k):
        return self.decay ** (self.share * k)

    def options(self):
        return {"step": self.step, "decay": self.decay}


class GeometricOnStall(Geometric):
    r"""Geometric decay with restarts: ``γ_k = γ_s β^{ω(k − k_s)}`` from the last restart ``k_s``.

    At the end of every epoch the rule compares ``f(X)`` with the best epoch-end value. A new
    best is stored (point and value); after ``patience`` epochs in a row without one, the
    iterate returns to the stored point and ``γ_s`` becomes ``shrink · γ_k`` (a step that
    overshoots is cut at once, so a slow decay β can be used without the risk of a long stall
    at a large step).

    Args:
        step: ``γ₀ > 0`` or ``"auto"``.
        decay: β ∈ (0, 1] per epoch (1: constant between restarts).
        patience: epochs without a new best before a restart (≥ 1).
        shrink: factor ∈ (0, 1) applied to the step at a restart.

    Raises:
        ValueError: invalid ``step``, ``decay``, ``patience`` or ``shrink``.
    """

    name = "geometric-on-stall"
    reads_values = watches_epochs = True

    def __init__(self, step: float | str = "auto", decay: float = 0.98, patience: int = 3,
                 shrink: float = 0.5):
        _Scheduled.__init__(self, step)
        if not (isinstance(decay, int | float) and 0 < decay <= 1):
            raise ValueError(f"decay must lie in (0, 1], got {decay!r}")
        if not (isinstance(shrink, int | float) and 0 < shrink < 1):
            raise ValueError(f"shrink must lie in (0, 1), got {shrink!r}")
        self.decay, self.shrink = float(decay), float(shrink)
        self.patience = _check_patience(patience)
        self.fails, self.k0, self.restarts = 0, 0, 0
        self.best_value, self.best_point = math.inf, None

    def start(self, f0, auto_step, epoch_length, share):
        super().start(f0, auto_step, epoch_length, share)
        self.base, self.k0, self.fails, self.restarts = self.gamma0, 0, 0, 0
        self.best_value, self.best_point = math.inf, None

    def length(self, k, f, xi_sq, share):
        return self.base * self.factor(k - self.k0)

    def epoch_end(self, k, f, x):
        if f < self.best_value:
            self.best_value, self.best_point, self.fails = f, x.clone(), 0
            return None
        self.fails += 1
        if self.fails < self.patience:
            return None
        self.base, self.k0, self.fails = self.shrink * self.length(k, None, None, 1.0), k, 0
        self.restarts += 1
        return self.best_point.clone()

    def options(self):
        return {"step": self.step, "decay": self.decay, "patience": self.patience,
                "shrink": self.shrink}

    def info(self):
        return {**super().info(), "restarts": self.restarts}


class Polyak(StepRule):
    r"""Polyak steps with an estimated optimum (level adjustment, optionally with a path
    condition).

    ``γ_k = (f(X_k) − f̂_k)/N_k`` with ``f̂_k = f_best − δ`` (``f_best`` the lowest value seen)
    and ``N_k`` the squared norm of the full Riemannian subgradient: ``‖ξ_k‖²`` for RSubGrad;
    for RSSM, whose block step sees only the block part ``ξ_C``, a running average of
    ``‖ξ_C‖²/ω`` (``ω = |C|/p``, weight ω per block step). A block step of that length lowers
    the linear model by ``(f − f̂)‖ξ_C‖²/‖ξ‖²``, the block's share of the gap; dividing by
    ``‖ξ_C‖²`` itself would blow up whenever the drawn block is nearly stationary.

    **The level δ.** ``δ₀ = level·|f(X₀)|`` (``level`` if ``f(X₀) = 0``). A *sufficient drop*
    — ``f_best`` at least ``drop·δ`` below its value at the last change of the level — keeps
    the level: δ is multiplied by ``grow^(1/E)`` (at most δ₀; E the updates per epoch, so δ's
    growth per epoch is the same for every block count) and the path is reset. After
    ``patience`` epochs without one, the rule looks at every epoch end whether to halve δ:

    * ``path = c`` (default 30): if the path travelled since the last change of the level
      reached ``B = c·s₀``, or if the descent slowed down: the last epoch lowered ``f_best``
      by at most ``stall`` (default 0.5) times the level's mean decrease per epoch
      (``stall = 0``: only an epoch without a new best); otherwise δ is kept (the values still
      fall at their pace: the target may be within reach);
    * ``path=None``: always.

    **Why the path condition is the default.** A default has to converge on every objective
    the solvers take (weakly convex f plus a separable h). With ``path=None`` the level halves
    after every ``patience`` epochs whose decrease falls short of ``drop·δ``; on a non-sharp
    objective (ℓ1-SPCA) that is every second epoch near the minimiser, the steps become
    summable and the iterates stop above the optimum. The path condition cannot stall that
    way (see below). On a sharp objective ``path=None`` follows the linearly falling gap one
    halving sooner and needs fewer epochs (DPCP: docs/results/rssm.md), so pass
    ``Polyak(path=None)`` where f is known to be sharp.

    The path is the sum of the step lengths, a block step's ``γ‖ξ_C‖`` counted with weight
    ``√ω`` (an epoch of ``1/ω`` block steps along orthogonal column blocks moves ``X`` about
    ``γ‖ξ‖``, as one full step does), and ``s₀`` is the first step's length counted the same
    way (``γ₀‖ξ_C‖/√ω``), so ``B`` does not depend on the scale of f nor on the block count.
    The path condition is the Goffin–Kiwiel / Nedić–Bertsekas rule: a target out of reach
    (``f̂ < f*``) is never attained, the iterates keep travelling and δ halves after every
    path ``B``; a target within reach is attained, so δ need not shrink geometrically while
    the method still descends. The second condition lets δ shrink where it must follow a gap
    that falls linearly (a sharp f); it fires later than ``path=None``'s halving. With
    ``f̂ ≤ f*`` and a sharp f the steps are at least Polyak's.

    The defaults ``drop = 0.7``, ``grow = 1.2`` keep the target closer to ``f_best`` than the
    classical ``drop = 0.5``, ``grow = 1.5`` (with which the Polyak steps were too long on DPCP,
    the target sitting about one gap below f*). ``patience`` is the least number of epochs a
    level is kept; ``path=None`` needs ``patience ≥ 2`` (with 1, a δ that halves readily can
    outrun the progress).

    Args:
        level: ``δ₀/|f(X₀)|`` > 0.
        patience: epochs without a sufficient drop before δ may be halved (≥ 1).
        grow: δ's growth factor per epoch of sufficient drops (≥ 1).
        drop: the sufficient drop of ``f_best``, as a fraction of δ (in (0, 1]).
        path: ``B/s₀`` of the path condition (> 0, default 30; ``math.inf``: halve only when
            the descent slows down), or ``None`` (halve after every ``patience`` epochs
            without a sufficient drop).
        stall: the slow-down that halves δ (in [0, 1]): the last epoch's decrease of
            ``f_best`` as a fraction of the level's mean decrease per epoch.
        optimum: a known optimal value f*: then ``f̂_k = f*`` (Polyak's own step
            ``(f(X_k) − f*)/N_k``, 0 where ``f(X_k) ≤ f*``) and δ is not used.

    Raises:
        ValueError: ``level ≤ 0``, ``patience < 1``, ``grow < 1``, ``drop ∉ (0, 1]``,
            ``path ≤ 0``, ``stall ∉ [0, 1]`` or ``optimum`` not a finite number.
    """

    name = "polyak"
    reads_values = True

    def __init__(self, level: float = 0.5, patience: int = 2, *, grow: float = 1.2,
                 drop: float = 0.7, path: float | None = 30.0, stall: float = 0.5,
                 optimum: float | None = None):
        if not (isinstance(level, int | float) and math.isfinite(level) and level > 0):
            raise ValueError(f"level must be a finite number > 0, got {level!r}")
        if not (isinstance(grow, int | float) and math.isfinite(grow) and grow >= 1):
            raise ValueError(f"grow must be a finite number >= 1, got {grow!r}")
        if not (isinstance(drop, int | float) and 0 < drop <= 1):
            raise ValueError(f"drop must lie in (0, 1], got {drop!r}")
        if path is not None and (isinstance(path, bool) or not isinstance(path, int | float)
                                 or not path > 0):
            raise ValueError(f"path must be a number > 0 or None, got {path!r}")
        if not (isinstance(stall, int | float) and 0 <= stall <= 1):
            raise ValueError(f"stall must lie in [0, 1], got {stall!r}")
        if optimum is not None and (isinstance(optimum, bool) or not isinstance(
                optimum, int | float) or not math.isfinite(optimum)):
            raise ValueError(f"optimum must be a finite number or None, got {optimum!r}")
        self.level, self.patience = float(level), _check_patience(patience)
        self.grow, self.drop = float(grow), float(drop)
        self.path, self.stall = None if path is None else float(path), float(stall)
        self.optimum = None if optimum is None else float(optimum)
        self.best = self.ref = self.mark = self.delta = self.delta0 = self.norm_sq = math.nan
        self.unit, self.travelled = math.nan, 0.0
        self.since, self.halvings, self.window, self.epoch, self.growth = 0, 0, 1, 1, self.grow

    def start(self, f0, auto_step, epoch_length, share):
        value = float(f0())
        self.best = self.ref = self.mark = value
        self.delta = self.delta0 = self.level * (abs(value) if value != 0 else 1.0)
        self.since, self.halvings, self.norm_sq = 0, 0, math.nan
        self.unit, self.travelled = math.nan, 0.0
        self.epoch = max(1, epoch_length)
        self.window = self.patience * self.epoch
        self.growth = self.grow ** (1.0 / self.epoch)

    def observe(self, f: float) -> None:
        """Record ``f(X_k)`` (once per update, before the step) and adjust δ."""
        if f < self.best:
            self.best = f
        if self.best <= self.ref - self.drop * self.delta:
            self.delta = min(self.growth * self.delta, self.delta0)
            self.changed()
            return
        self.since += 1
        if self.since % self.epoch:
            return
        last, self.mark = self.mark - self.best, self.best
        if self.since >= self.window and (
                self.path is None or self.travelled >= self.path * self.unit
                or last * self.since <= self.stall * self.epoch * (self.ref - self.best)):
            self.delta *= 0.5
            self.halvings += 1
            self.changed()

    def changed(self) -> None:
        """Start a new level at ``f_best``: reset the window, the epoch mark and the path."""
        self.ref = self.mark = self.best
        self.since, self.travelled = 0, 0.0

    def polyak_length(self, f: float, xi_sq: float, share: float = 1.0) -> float:
        """``γ = (f − f̂)/N`` with ``N`` the running estimate of the full ``‖ξ‖²`` (see the class
        notes); 0 while ``N = 0`` or ``f ≤ f̂``. Adds the step's length to the path."""
        est = xi_sq / share
        w = min(1.0, share)
        self.norm_sq = est if not self.norm_sq > 0 else (1 - w) * self.norm_sq + w * est
        if not self.norm_sq > 0:
            return 0.0
        gamma = max(f - self.target(), 0.0) / self.norm_sq
        if not self.unit > 0:
            self.unit = gamma * math.sqrt(est)
        self.travelled += gamma * math.sqrt(xi_sq * share)
        return gamma

    def target(self) -> float:
        """``f̂ = f_best − δ``, or the known optimum."""
        return self.best - self.delta if self.optimum is None else self.optimum

    def length(self, k, f, xi_sq, share):
        value = f()
        self.observe(value)
        return self.polyak_length(value, xi_sq(), share)

    def options(self):
        return {"level": self.level, "patience": self.patience, "grow": self.grow,
                "drop": self.drop, "path": self.path, "stall": self.stall, "optimum": self.optimum}

    def info(self):
        return {**super().info(), "delta": self.delta, "halvings": self.halvings}


#: The shorthand names of :func:`step_rule`.
RULE_NAMES = {"polyak": Polyak, "diminishing": Diminishing, "constant": Constant,
              "geometric": Geometric, "geometric-on-stall": GeometricOnStall}


def step_rule(spec: StepRule | float | str, option: str = "step_size") -> StepRule:
    """The rule named by a ``step_size`` / ``lr`` option: a :class:`StepRule` as given, a number
    ``γ₀`` as ``Diminishing(γ₀)``, a name of :data:`RULE_NAMES` as that rule with its defaults.

    Raises:
        ValueError: anything else, naming ``option`` and the accepted forms.
    """
    if isinstance(spec, StepRule):
        return spec
    if isinstance(spec, str) and spec in RULE_NAMES:
        return RULE_NAMES[spec]()
    if (isinstance(spec, int | float) and not isinstance(spec, bool) and math.isfinite(spec)
            and spec > 0):
        return Diminishing(spec)
    raise ValueError(f"{option} must be a step rule object (orthoplug.solvers.step_rules), a "
                     f"finite number > 0 or one of {sorted(RULE_NAMES)}, got {spec!r}")


class SubgradientSteps:
    r"""The step sizes of a (block) subgradient method over a run: a started rule and its counter.

    One object per run (:class:`~orthoplug.solvers.rssm.SubgradientSolver` keeps it in
    ``run.steps``) or per parameter (the torch RSSM keeps its :meth:`state_dict`), so both
    front-ends take the same steps. Per update: :meth:`length` gives ``scale · γ_k``
    (``scale`` is geoopt's ``lr``, 1 elsewhere), then :meth:`finish` counts the update and,
    for rules that watch epochs, ends an epoch every ``epoch_length`` updates (it may return
    a point to restart from).

    Args:
        rule: a started :class:`StepRule`.
        epoch_length: updates per epoch (every column moved once in expectation).
    """

    def __init__(self, rule: StepRule, epoch_length: int):
        self.rule, self.epoch, self.k, self.scale = rule, max(1, int(epoch_length)), 0, 1.0

    @classmethod
    def build(cls, spec: StepRule | float | str, *, f0: Callable[[], float],
              auto_step: Callable[[], float], epoch_length: int,
              share: float) -> SubgradientSteps:
        """A fresh run's steps (see :meth:`StepRule.started`)."""
        rule = step_rule(spec).started(f0=f0, auto_step=auto_step, epoch_length=epoch_length,
                                       share=share)
        return cls(rule, epoch_length)

    def length(self, f: Callable[[], float], xi_sq: Callable[[], float],
               share: float = 1.0) -> float:
        """``scale · γ_k``; ``f()`` gives ``f(X_k)`` and ``xi_sq()`` ``‖ξ_k‖²`` (only the rules
        that read them call them), ``share`` is the share of the columns this update moves."""
        return self.scale * self.rule.length(self.k, f, xi_sq, share)

    @property
    def ends_epoch(self) -> bool:
        """Whether the next :meth:`finish` ends an epoch of a rule that watches epochs (and so
        calls its ``f``)."""
        return self.rule.watches_epochs and (self.k + 1) % self.epoch == 0

    def finish(self, f: Callable[[], float], x: torch.Tensor) -> torch.Tensor | None:
        """Count the update that moved to ``x``; at an epoch end of a rule that watches
        epochs return the point to restart from (else ``None``)."""
        ends = self.ends_epoch
        self.k += 1
        return self.rule.epoch_end(self.k, f(), x) if ends else None

    def info(self) -> dict:
        """The rule's name, options and counters (stored in the run's result)."""
        return self.rule.info()

    def state_dict(self) -> dict:
        """The counter and the rule's state."""
        return {"k": self.k, "epoch": self.epoch, "rule": self.rule.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore a state from :meth:`state_dict` (into steps built with the same options)."""
        self.k, self.epoch = int(state["k"]), int(state["epoch"])
        self.rule.load_state_dict(state["rule"])
