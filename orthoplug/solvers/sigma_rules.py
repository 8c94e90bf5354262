"""σ rules of the scalar majorisers and the damping of second-order model steps, shared by the
solvers and their torch optimizers.

* :class:`SigmaBacktracking` — σ of ``ς = σ‖Z‖₂²``, doubled on a failed sufficient-decrease test
  (and optionally shrunk on success); :class:`SigmaFit` — σ refitted from each step's ratio of
  actual to predicted decrease; :class:`SigmaFixed` — a fixed σ, never checked;
  :func:`as_sigma_rule` reads a solver's ``sigma_rule`` option (an object or a shorthand),
  :func:`start_sigma_rule` starts it for one run (the first σ: :func:`estimate_lipschitz`,
  :func:`estimate_bb`); :func:`cost_rounding` is the rounding level their tests allow;
* :class:`ModelDamping` — Levenberg–Marquardt damping of steps from a model that need not
  majorise f.

Each rule gives up after ``max_backtracks`` (default :data:`MAX_REJECTIONS`) consecutive
rejections. A rule is a small object, the solver's option, and a started copy of it has its own
state (``state_dict`` / ``load_state_dict``), so the pymanopt/orthoplug front-end
keeps one in its :class:`~orthoplug.solvers.base.Run` and a torch optimizer one per parameter,
and both take the same decisions from the same numbers. The step-size rules of the
subgradient and Riemannian gradient methods are in :mod:`orthoplug.solvers.steps`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch

from orthoplug._random import randn
from orthoplug.oracles import NonFiniteError

__all__ = ["MAX_REJECTIONS", "SIGMA_RULES", "cost_rounding", "SigmaBacktracking", "SigmaFit",
           "SigmaFixed", "as_sigma_rule", "estimate_bb", "estimate_lipschitz", "start_sigma_rule",
           "ModelDamping"]

#: Consecutive rejections after which a σ or damping rule gives up (raises): σ has grown by at
#: least 2⁶⁰ ≈ 1e18 by then. The default of every such rule in both front-ends.
MAX_REJECTIONS = 60


def cost_rounding(dtype: torch.dtype = torch.float64) -> float:
    """The relative rounding level of a cost evaluated in ``dtype``: ``max(1e-12, 64·ε)``.

    The sufficient-decrease tests of the σ rules accept ``f(X⁺) ≤ f(X) + (model change) +
    cost_rounding·max(1, |f(X)|)``: a trial whose predicted decrease is below what rounding of
    f can show is then accepted unless f rose by more than rounding, instead of being taken
    for a failed majoriser (which would double σ for ever: the float32 stall). float64 keeps
    the historical ``1e-12`` (≈ 4500ε, room for costs summed over many terms); float32 gets
    ``64ε ≈ 7.6e-6``.
    """
    return max(1e-12, 64.0 * torch.finfo(dtype).eps)


class SigmaBacktracking:
    """σ of a scalar majoriser with the sufficient-decrease test of majoriser steps.

    A step proposed with the current σ predicts the change ``predicted`` (the model's, ≤ 0). It
    is accepted iff ``f(X⁺) ≤ f(X) + predicted + rtol·max(1, |f(X)|)``, so accepted steps
    never increase f beyond its rounding (``rtol``, :func:`cost_rounding` of the dtype). On
    acceptance σ is multiplied by ``shrink`` (adaptive σ when ``< 1``,
    never below ``1e-12`` times its start); on rejection σ doubles. A non-finite trial value is a
    rejection (a step may overshoot into a region where f is undefined); after more than
    ``max_backtracks`` rejections in a row the rule raises
    :class:`~orthoplug.oracles.core.NonFiniteError` naming the last trial value.

    A rule object is both the option a solver takes (``sigma_rule=SigmaBacktracking(...)``)
    and, once started (:meth:`start`: a copy at a given σ), the state of one run or one
    parameter. The first σ of a run is ``sigma0`` if given, else — the solver's choice, the same
    in both front-ends — a declared Lipschitz constant L of the cost (then, with
    ``shrink == 1``, σ = L is a majoriser and the steps are not checked at all), else a local
    estimate at the start point: :func:`estimate_lipschitz` (``shrink == 1``), the
    Barzilai–Borwein :func:`estimate_bb` (adaptive rules).

    Args:
        sigma0: the first σ (> 0; 0 allowed when not ``checked``, e.g. a concave f); ``None``:
            chosen at the start of a run (above).
        shrink: factor applied to σ after an accepted step, in (0, 1].
        max_backtracks: consecutive rejections (doublings of σ) before giving up.
        checked: whether steps are tested at all (``False``: a known σ ≥ the Lipschitz constant
            and no adaptation, :class:`SigmaFixed`; :meth:`accepts` is then never needed).
        rtol: the relative rounding level of f (default that of float64; a run sets that of
            its dtype).
    """

    def __init__(self, sigma0: float | None = None, *, shrink: float = 1.0,
                 max_backtracks: int = MAX_REJECTIONS, checked: bool = True,
                 rtol: float = 1e-12):
        if not 0 < shrink <= 1:
            raise ValueError(f"shrink must be in (0, 1], got {shrink}")
        if isinstance(max_backtracks, bool) or not isinstance(max_backtracks, int) \
                or max_backtracks < 0:
            raise ValueError(f"max_backtracks must be an int >= 0, got {max_backtracks!r}")
        self.checked = bool(checked)
        self.shrink = float(shrink)
        self.max_backtracks = max_backtracks
        self.sigma0 = None if sigma0 is None else self._checked_sigma(sigma0)
        self._begin(self.sigma0, rtol)

    def _checked_sigma(self, sigma: float) -> float:
        if not (math.isfinite(sigma) and (sigma > 0 or (sigma == 0 and not self.checked))):
            raise ValueError(f"sigma must be finite and > 0 (or 0 when not checked), got {sigma}")
        return float(sigma)

    def _begin(self, sigma: float | None, rtol: float) -> None:
        """Reset the state to σ = ``sigma`` (``None``: not started)."""
        self.sigma = sigma
        self.floor = None if sigma is None else 1e-12 * sigma
        self.rtol = float(rtol)
        self.backtracks = 0
        self.rejections = 0

    @property
    def adaptive(self) -> bool:
        """Whether σ may decrease (so a known Lipschitz constant does not make the test moot)."""
        return self.shrink < 1.0

    def start(self, sigma: float, *, rtol: float = 1e-12) -> SigmaBacktracking:
        """A fresh copy of this rule (its state reset) at σ = ``sigma``, testing with ``rtol``
        (:func:`cost_rounding` of the run's dtype); this object is left unchanged."""
        rule = copy.copy(self)
        rule._begin(self._checked_sigma(sigma), rtol)
        return rule

    def options(self) -> dict:
        """The rule's options (what ``repr`` shows and ``result.info`` reports)."""
        return {"sigma0": self.sigma0, "shrink": self.shrink,
                "max_backtracks": self.max_backtracks}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.options().items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self.options() == other.options()

    def __hash__(self) -> int:
        return hash((type(self).__name__, *self.options().values()))

    def accepts(self, f0: float, f1: float, predicted: float) -> bool:
        """Test ``f(X⁺) = f1`` against ``f(X) = f0`` and the model's change; update σ."""
        if f1 <= f0 + predicted + self.rtol * max(1.0, abs(f0)):
            if self.shrink < 1.0:
                self.sigma = max(self.sigma * self.shrink, self.floor)
            self.rejections = 0
            return True
        self.sigma *= 2.0
        self.backtracks += 1
        # (adaptive σ rejects routinely: only an unbroken run of rejections means divergence)
        self.rejections += 1
        if self.rejections > self.max_backtracks:
            cause = ("the loss at every trial point was not finite (last: "
                     f"{f1})" if not math.isfinite(f1) else
                     f"the curvature estimate diverged (σ = {self.sigma:.3g})")
            raise NonFiniteError(f"no acceptable step after {self.rejections} doublings of "
                                 f"sigma: {cause}")
        return False

    def state_dict(self) -> dict:
        """The rule's state (plain numbers)."""
        return {"sigma": self.sigma, "floor": self.floor, "backtracks": self.backtracks,
                "rejections": self.rejections}

    def load_state_dict(self, state: dict) -> None:
        """Restore a state from :meth:`state_dict`."""
        self.sigma, self.floor = float(state["sigma"]), float(state["floor"])
        self.backtracks, self.rejections = int(state["backtracks"]), int(state["rejections"])


class SigmaFixed(SigmaBacktracking):
    """A fixed σ: no step is checked and σ never changes. Every step then decreases f when σ is
    at least the Lipschitz constant of ∇f (the majoriser holds); with a smaller σ nothing is
    guaranteed. The rule VR-J-JOBCD needs (its gradient estimates give no cost values to test a
    step on).

    Args:
        sigma: the σ (finite, ≥ 0).
    """

    def __init__(self, sigma: float):
        super().__init__(sigma, checked=False)

    def options(self) -> dict:
        return {"sigma": self.sigma0}


class SigmaFit(SigmaBacktracking):
    """Adaptive σ of a scalar majoriser, refitted from each step's ratio of actual to predicted
    decrease (a trust-region-type rule that stays monotone).

    With ``ρ = (f(X) − f(X⁺)) / (−predicted)``, a step is accepted iff ``ρ ≥ fraction`` (so
    ``f(X⁺) ≤ f(X) + fraction·predicted ≤ f(X)``: accepted steps never increase f; up to
    ``1e-12`` relative, and a step that predicts no change is accepted iff f did not rise). Along
    a step of a quadratic model, ``ρ = 2 − L/σ`` where L is the curvature met, so σ is set to
    that fit, ``σ ← σ·(2 − ρ)``: clipped to ``[min_factor, 2 − fraction]`` and divided by
    the current ``boldness`` after an acceptance (the next step is longer than the fitted
    model's, as pymanopt's line search tries twice the last decrease), to ``[2, 10]`` after a
    rejection (×2 when ``f(X⁺)`` is not finite), and rounded to a power
    of ``2^(1/4)`` (so rounding noise in f does not reach σ). σ never falls below
    ``1e-12`` times its start, and as σ grows the steps shrink until ``ρ → 2``, so a rejection
    streak ends unless f is not finite near X (then, after ``max_backtracks``, the error of
    :class:`SigmaBacktracking`). The boldness starts at ``optimism``, doubles (up to
    ``optimism``) when the trial after an acceptance is accepted and halves (down to 1) when
    it is rejected with ``ρ ≤ 2 − boldness/2``: a failure the optimism explains (a quadratic
    with the fitted curvature gives ``ρ = 2 − boldness`` for the step ``boldness`` times
    longer). Where the fit is exact (a quadratic) every rejected optimistic trial is such a
    failure, and one trial in three settles into one (the pattern accept, accept, reject).
    A milder failure (``2 − boldness/2 < ρ < fraction``: f flattens along the long step, as
    on HSPP, where the rejected optimistic trials of J-JOBCD have a median ``ρ`` of −0.4 to
    −1.7 and 39–100 % of them are mild, quick scale, seeds 0–2, 1 s) keeps the boldness, so
    the long steps go on.

    The defaults (evidence in ``docs/results.md``): ``fraction`` is Armijo's 1e-4 (pymanopt's
    line search uses the same), ``optimism`` 8. With ``fraction = 0.5, optimism = 1`` J-JOBCD
    rejected a third of its steps on HSPP, and its accepted steps, fitted to ``σ = L``, led it
    into worse local minima than SD's and CG's longer steps (quick scale, 1 s: up to +7.5 %
    above the better of them, on 7 of 8 instances); with the new defaults it ends below
    pymanopt's SD/CG and geoopt's RSGD/RAdam on 9 of the 10 quick instances of seeds 0–4
    (both data sets; the 10th +0.3 %). A fixed
    optimism of 8 did as well at quick scale but wasted a cost value per iteration at paper
    scale, where only 6–25 iterations fit in 15 s; the adaptive boldness does not. At the
    paper's 90 s J-JOBCD ends 1.4–4.9 % below pymanopt's CG on HSPP's four instances of seeds
    0–1 (the old constants: 1.2–6.0 %; neither set wins on all of them). Keeping the
    boldness after mild failures (round 3) raised J-JOBCD's quick-scale hits against the
    better of SD and CG at 1 s from 57 to 59 of the 60 instances of seeds 0–29 (mean gap
    −3.0 → −4.2 % on gaussian, −9.9 → −12.0 % on digits). At 90 s (seeds 0–1, under a
    load that left CG 24–96 iterations) it ended on the same side of CG as halving after
    every rejection on all four instances, but behind it on three: by 0.07–0.16 point, and
    by 2.4 points on digits 1 (117 iterations against 149).

    Args:
        sigma0: the first σ (> 0; ``None``: chosen at the start of a run, as for
            :class:`SigmaBacktracking`).
        fraction: the share of the predicted decrease a step must achieve, in (0, 1].
        min_factor: the largest shrink of σ by the fit after one step, in (0, 1].
        optimism: the largest boldness (the divisor of the fitted σ after an acceptance),
            ``>= 1`` (1: no optimism).
        max_backtracks: consecutive rejections before giving up.
        rtol: the relative rounding level of f (:func:`cost_rounding`).

    Attributes:
        acceptance: running acceptance rates of the trials that follow a rejection (entry 0)
            and an acceptance (entry 1): exponential means with weight 0.1, from 0.5
            (:meth:`likely_accepted`).
        boldness: the current divisor of the fitted σ after an acceptance, in
            ``[1, optimism]``.
    """

    #: a next trial counts as likely accepted above this rate (:meth:`likely_accepted`)
    likely = 0.7

    def __init__(self, sigma0: float | None = None, *, fraction: float = 1e-4,
                 min_factor: float = 0.1, optimism: float = 8.0,
                 max_backtracks: int = MAX_REJECTIONS, rtol: float = 1e-12):
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        if not 0 < min_factor <= 1:
            raise ValueError(f"min_factor must be in (0, 1], got {min_factor}")
        if not optimism >= 1:
            raise ValueError(f"optimism must be >= 1, got {optimism}")
        self.fraction, self.min_factor = float(fraction), float(min_factor)
        self.optimism = float(optimism)
        super().__init__(sigma0, max_backtracks=max_backtracks, rtol=rtol)

    def _begin(self, sigma: float | None, rtol: float) -> None:
        super()._begin(sigma, rtol)
        self.boldness = self.optimism
        self.acceptance = [0.5, 0.5]
        self._last = 1  # outcome of the previous trial (1: accepted; a run starts accepted)

    @property
    def adaptive(self) -> bool:
        """Always: σ is refitted after every step."""
        return True

    def options(self) -> dict:
        return {"sigma0": self.sigma0, "fraction": self.fraction,
                "min_factor": self.min_factor, "optimism": self.optimism,
                "max_backtracks": self.max_backtracks}

    def likely_accepted(self) -> bool:
        """Whether the next trial is likely to be accepted: the running acceptance rate after
        the previous trial's outcome exceeds :attr:`likely` (J-JOBCD then checks it by a fused
        value and gradient, :meth:`~orthoplug.solvers.base.ScalarCurvature.accept_step`)."""
        return self.acceptance[self._last] > self.likely

    def _observe(self, accepted: bool, rho: float = -math.inf) -> None:
        """Update the acceptance rates and, after an optimistic trial (one that followed an
        acceptance), the boldness; ``rho`` is a rejected trial's ratio (−∞: not finite)."""
        rate = self.acceptance[self._last]
        self.acceptance[self._last] = rate + 0.1 * (float(accepted) - rate)
        if self._last:  # the trial after an acceptance: an optimistic one
            if accepted:
                self.boldness = min(2.0 * self.boldness, self.optimism)
            elif rho <= 2.0 - self.boldness / 2.0:  # a failure the optimism explains
                self.boldness = max(self.boldness / 2.0, 1.0)
        self._last = int(accepted)

    def state_dict(self) -> dict:
        """The rule's state (plain numbers), with the acceptance rates and the boldness."""
        return {**super().state_dict(), "acceptance_after_rejection": self.acceptance[0],
                "acceptance_after_acceptance": self.acceptance[1],
                "last_accepted": self._last, "boldness": self.boldness}

    def load_state_dict(self, state: dict) -> None:
        """Restore a state from :meth:`state_dict`."""
        super().load_state_dict(state)
        self.acceptance = [float(state["acceptance_after_rejection"]),
                           float(state["acceptance_after_acceptance"])]
        self._last, self.boldness = int(state["last_accepted"]), float(state["boldness"])

    def accepts(self, f0: float, f1: float, predicted: float) -> bool:
        """Test ``f(X⁺) = f1`` against ``f(X) = f0`` and the model's change; refit σ."""
        tol = self.rtol * max(1.0, abs(f0))
        if f1 <= f0 + self.fraction * predicted + tol:
            if predicted < 0:
                rho = (f0 - f1) / -predicted
                factor = min(max(2.0 - rho, self.min_factor), 2.0 - self.fraction)
            self._observe(True)
            if predicted < 0:
                self.sigma = max(self.sigma * self._grid(factor) / self.boldness, self.floor)
            self.rejections = 0
            return True
        factor, rho = 2.0, -math.inf
        if math.isfinite(f1) and predicted < 0:
            rho = (f0 - f1) / -predicted
            factor = min(max(2.0 - rho, 2.0), 10.0)
        # f1 > f0 + fraction·predicted ≥ f0 + predicted: the parent's test rejects too; it
        # doubles σ (σ·factor in all), counts the rejection and gives up after a long streak
        self.sigma *= self._grid(factor) / 2.0
        self._observe(False, rho)
        return super().accepts(f0, f1, predicted)

    @staticmethod
    def _grid(factor: float) -> float:
        """``factor`` rounded to a power of ``2^(1/4)``: the last bits of f (which differ between
        front-ends and platforms) then cannot change σ, so equal inputs give equal iterates."""
        return 2.0 ** (round(4.0 * math.log2(factor)) / 4.0)


#: the string shorthands of :func:`as_sigma_rule`
SIGMA_RULES = ("backtracking", "fit")

SigmaRule = SigmaBacktracking | str | float


def as_sigma_rule(rule: SigmaRule) -> SigmaBacktracking:
    """The σ rule named by a solver's ``sigma_rule`` option: a rule object as it is,
    ``"backtracking"`` → ``SigmaBacktracking()``, ``"fit"`` → ``SigmaFit()`` (σ₀ chosen at the
    start of a run), a number σ → ``SigmaFixed(σ)``.

    Raises:
        ValueError: another string, or a number that is not a finite σ ≥ 0.
        TypeError: anything else.
    """
    if isinstance(rule, SigmaBacktracking):
        return rule
    if isinstance(rule, str):
        if rule not in SIGMA_RULES:
            raise ValueError(f"sigma_rule must be a σ rule object, a number (a fixed σ) or one "
                             f"of {SIGMA_RULES}, got {rule!r}")
        return SigmaFit() if rule == "fit" else SigmaBacktracking()
    if isinstance(rule, (int, float)) and not isinstance(rule, bool):
        if not (math.isfinite(rule) and rule >= 0):
            raise ValueError(f"sigma_rule: a fixed σ must be a finite number >= 0, got {rule}")
        return SigmaFixed(float(rule))
    raise TypeError(f"sigma_rule must be a SigmaBacktracking / SigmaFit / SigmaFixed, a number "
                    f"or one of {SIGMA_RULES}, got {type(rule).__name__}")


def _joint_norm(tensors: list[torch.Tensor]) -> float:
    """``(Σ ‖T‖_F²)^{1/2}`` over a list of tensors (one point split into parameters)."""
    return math.sqrt(sum(float(torch.linalg.norm(t)) ** 2 for t in tensors))


def estimate_lipschitz(x: list[torch.Tensor], g: list[torch.Tensor],
                       gradient_at: Callable[[list[torch.Tensor]], list[torch.Tensor]],
                       generator: torch.Generator) -> float:
    """A local estimate ``‖∇f(X + εE) − ∇f(X)‖ / ‖εE‖`` of the Lipschitz constant along a
    Gaussian direction E (drawn from ``generator``, tensor after tensor), ``ε = 1e-4‖X‖/‖E‖``; one
    extra gradient. ``x`` and ``g`` are the point and gradient as lists of tensors (the
    parameters of a torch optimizer; one tensor in the core solvers). Backtracking corrects it
    upward."""
    e = [randn(*t.shape, dtype=t.dtype, device=t.device, generator=generator) for t in x]
    eps = 1e-4 * _joint_norm(x) / _joint_norm(e)
    g1 = gradient_at([t + eps * d for t, d in zip(x, e, strict=True)])
    change = _joint_norm([a - b for a, b in zip(g1, g, strict=True)])
    return max(change / (eps * _joint_norm(e)), 1e-12)


def estimate_bb(x: list[torch.Tensor], g: list[torch.Tensor],
                gradient_at: Callable[[list[torch.Tensor]], list[torch.Tensor]]) -> float:
    """Barzilai–Borwein curvature ``|⟨S, Y⟩| / ‖S‖²`` along ``S = −ε∇f(X)``,
    ``ε = 1e-4‖X‖/‖∇f(X)‖`` (the secant pair of a short gradient step; one extra gradient), with
    ``x`` and ``g`` as in :func:`estimate_lipschitz`; 1 when ∇f(X) = 0."""
    gnorm = _joint_norm(g)
    if not gnorm > 0:
        return 1.0
    eps = 1e-4 * _joint_norm(x) / gnorm
    step = [-eps * t for t in g]
    g1 = gradient_at([t + s for t, s in zip(x, step, strict=True)])
    sy = sum(float((s * (a - b)).sum()) for s, a, b in zip(step, g1, g, strict=True))
    ss = sum(float((s * s).sum()) for s in step)
    return max(abs(sy) / ss, 1e-12)


def start_sigma_rule(rule: SigmaBacktracking, known: float | None,
                     estimate: Callable[[bool], float], dtype: torch.dtype) -> SigmaBacktracking:
    """``rule`` started for one run (:meth:`SigmaBacktracking.start`) by the rule of its class
    docstring: a fixed rule at its σ, else at ``sigma0``, else at a ``known`` Lipschitz constant
    (unchecked unless the rule is adaptive; a known σ = 0, a concave f whose linear model
    majorises it, is fixed for every rule: no σ is smaller and a multiplicative rule cannot
    leave 0), else at ``estimate(adaptive)`` (the caller's :func:`estimate_bb` when
    ``adaptive``, else :func:`estimate_lipschitz`); tested with the rounding level
    :func:`cost_rounding` of ``dtype``. Both front-ends start their rules here."""
    rtol = cost_rounding(dtype)
    if not rule.checked:
        return rule.start(rule.sigma0, rtol=rtol)
    if rule.sigma0 is not None:
        return rule.start(rule.sigma0, rtol=rtol)
    if known is not None:
        if not rule.adaptive or known == 0:
            return SigmaFixed(known)
        return rule.start(known, rtol=rtol)
    return rule.start(estimate(rule.adaptive), rtol=rtol)


# ---- second-order model steps (J-JOBCD with curvature="hessian") ----------------------------


class ModelDamping:
    """Levenberg–Marquardt damping of steps from a second-order model that need not majorise f.

    A step predicts the change ``predicted`` (the damped model's). It is accepted iff
    ``f(X⁺) ≤ f(X) + η·predicted`` up to ``rtol·max(1, |f(X)|)`` (rounding of f), so accepted
    steps never increase f beyond rounding; a model that is exact (a quadratic f) always
    passes. The damping weight λ (the caller adds
    ``λ·scale`` to the model's curvature) is multiplied by ``shrink`` after an accepted step
    (below ``start·1e-6`` it drops to 0) and becomes ``max(grow·λ, start)`` after a rejection. A
    non-finite trial value is a rejection; after more than ``max_rejections`` rejections in a row
    the rule raises :class:`~orthoplug.oracles.core.NonFiniteError`.

    Args:
        eta: fraction of the predicted decrease a step must achieve, in (0, 1).
        start: λ after the first rejection (> 0).
        grow: factor on λ per rejection (> 1).
        shrink: factor on λ per accepted step, in (0, 1).
        rtol: relative rounding tolerance of f (default ``100·eps`` of float64).
        max_rejections: consecutive rejections before giving up.
    """

    def __init__(self, *, eta: float = 0.1, start: float = 1e-4, grow: float = 10.0,
                 shrink: float = 0.25, rtol: float = 100 * 2.0**-52,
                 max_rejections: int = MAX_REJECTIONS):
        if not (0 < eta < 1 and start > 0 and grow > 1 and 0 < shrink < 1 and rtol >= 0):
            raise ValueError(f"need 0 < eta < 1, start > 0, grow > 1, 0 < shrink < 1, "
                             f"rtol >= 0; got {eta}, {start}, {grow}, {shrink}, {rtol}")
        self.eta, self.start, self.grow, self.shrink = eta, start, grow, shrink
        self.rtol = rtol
        self.max_rejections = int(max_rejections)
        self.weight = 0.0
        self.rejected = 0
        self.rejections = 0

    def accepts(self, f0: float, f1: float, predicted: float) -> bool:
        """Test ``f(X⁺) = f1`` against ``f(X) = f0`` and the model's change; update λ."""
        if f1 <= f0 + self.eta * predicted + self.rtol * max(1.0, abs(f0)):
            self.weight *= self.shrink
            if self.weight < self.start * 1e-6:
                self.weight = 0.0
            self.rejections = 0
            return True
        self.weight = max(self.weight * self.grow, self.start)
        self.rejected += 1
        self.rejections += 1
        if self.rejections > self.max_rejections:
            cause = (f"the cost at every trial point was not finite (last: {f1})"
                     if not math.isfinite(f1) else f"the damping diverged (λ = {self.weight:.3g})")
            raise NonFiniteError(f"no acceptable step after {self.rejections} rejections of "
                                 f"the model step: {cause}")
        return False
