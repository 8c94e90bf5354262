r"""RSSM: randomized submanifold subgradient method on St(n, p) (Cheung, Wang, Yue, So 2024).

Problem: ``min f(X)`` over ``X ∈ St(n, p)``, ``f`` weakly convex and Lipschitz, possibly
nonsmooth (robust subspace recovery, orthogonal dictionary learning, ℓ1 sparse PCA), or
``f + h`` with a smooth ``f`` and a separable nonsmooth term ``h`` from
:mod:`orthoplug.nonsmooth`.

Fix a partition ``C_1, …, C_ℓ`` of the p columns (``ℓ ≥ 2``; balanced by default). Iteration k:

1. draw an unordered pair ``{i, j}`` uniformly from the ``ℓ(ℓ−1)/2`` pairs; ``C = C_i ∪ C_j``,
   ``R`` the other columns;
2. ``G = ∂^C f(X)``: columns C of one Euclidean (Clarke) subgradient — only those columns when
   the oracle can give them (``gradient_columns``), otherwise the full subgradient is sliced;
3. ``ξ = X_C skew(X_CᵀG) + (I − XXᵀ) G`` (formula (15), the partial Riemannian subgradient);
4. ``X_C ← P_M(X_C − γ_k ξ) = polar((I − X_R X_Rᵀ)(X_C − γ_k ξ))`` (formula (16) with the
   re-orthogonalisation of Lemma 3.2, see :func:`~orthoplug.geometry.stiefel_block.block_update`);
   ``X_R`` is not touched (bit for bit).

Cost per iteration ``O(n p p_C)`` flops with ``p_C = |C| ≈ 2p/ℓ`` plus the partial
subgradient; memory ``O(n p)``; no ``n × n`` matrix. ``ℓ = 2`` is the full polar Riemannian
subgradient method (:class:`orthoplug.baselines.rsubgrad.RSubGrad`).

Step sizes (``step_size = γ₀``): ``"constant"`` ``γ₀``; ``"diminishing"`` ``γ₀/√(k+1)``
(Thm 4.9b); ``"geometric"`` ``γ₀ βᵏ`` (for sharp problems such as DPCP; outside the RSSM
theory). The theory needs ``γ_k < 1/L`` (L the Lipschitz constant of f). Two adaptive rules
outside the paper (:class:`PolyakStep`, :class:`RestartedGeometric`): ``"polyak"``
``γ_k = (f(X_k) − f̂_k)/‖ξ‖²`` with an estimated optimum ``f̂_k`` (level adjustment; for RSSM
``‖ξ‖²`` is a running estimate from the block parts), and ``"geometric-restart"``
(geometric decay; after ``patience`` epochs that end without a new best value the iterate
returns to the best epoch-end point and the step is multiplied by ``shrink``).

Subgradient methods are not monotone: every evaluation also records the best cost so far
(``history["best_cost"]``, ``info["best_cost"]``, ``result.best_point``); ``return_best=True``
returns the best evaluated point instead of the last iterate.

Oracles with column access
--------------------------
A tracker may provide ``gradient_columns(cols)`` (columns ``cols`` of the subgradient at its
point) and ``set_columns(cols, new)`` (write ``X[:, cols] = new`` and update its caches).
:class:`ColumnOracle` (callables) and :class:`CompositeOracle` (``f + h``) provide them; so do the
problems in :mod:`orthoplug.problems.nonsmooth_problems`, whose trackers cache ``YᵀX`` and
refresh only the changed columns. Any other :class:`~orthoplug.oracles.core.Oracle` works too
(full subgradient per iteration, sliced).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.geometry.stiefel_block import (
    block_update,
    complement,
    partition_columns,
    take_columns,
)
from orthoplug.oracles import (
    CompositeOracle,
    NonFiniteError,
    Oracle,
    all_finite,
    partial_subgradient,
    write_columns,
)

from .base import IterativeSolver

__all__ = [
    "RSSM",
    "StepSchedule",
    "block_subgradient_sq",
    "PolyakStep",
    "RestartedGeometric",
]

SCHEDULES = ("constant", "diminishing", "geometric")


# ---------------------------------------------------------------------------------------------
# Step sizes
# ---------------------------------------------------------------------------------------------


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

    def to_state(self) -> dict:
        return dict(vars(self))

    @classmethod
    def from_state(cls, state: dict):
        rule = cls.__new__(cls)
        rule.__dict__.update(state)
        return rule


class PolyakStep(_RuleState):
    r"""Polyak steps with an estimated optimum (level adjustment), for sharp problems.

    ``γ_k = (f(X_k) − f̂_k)/N_k`` with ``f̂_k = f_best − δ`` (``f_best`` the lowest value seen)
    and ``N_k`` the squared norm of the full Riemannian subgradient: ``‖ξ_k‖²`` for RSubGrad;
    for RSSM, whose iteration sees only the block part ``ξ_C``, a running average of
    ``‖ξ_C‖²/ω`` (``ω = |C|/p``, weight ω per iteration). A block step of that length lowers
    the linear model by ``(f − f̂)‖ξ_C‖²/‖ξ‖²``, the block's share of the gap; dividing by
    ``‖ξ_C‖²`` itself would blow up whenever the drawn block is nearly stationary.
    ``δ₀ = level·|f(X₀)|`` (``level`` if ``f(X₀) = 0``); δ is halved when ``patience`` epochs
    pass without ``f_best`` dropping by ``δ/2`` below its value at the last change (the target
    was too low), and multiplied by ``grow`` = 1.5 (at most δ₀) after each such drop (so that a
    δ cut too far early does not leave the method with tiny steps). With ``f̂ ≤ f*`` and a sharp
    f the steps are at least Polyak's; once ``f̂ > f*`` the iterates reach ``f̂`` and δ shrinks.

    Args:
        level: ``δ₀/|f(X₀)|`` > 0.
        patience: epochs without sufficient descent before δ is halved (≥ 1).

    Raises:
        ValueError: ``level ≤ 0`` or ``patience < 1``.
    """

    name = "polyak"
    #: factor applied to δ after a sufficient descent (capped at δ₀)
    grow = 1.5

    def __init__(self, level: float = 0.5, patience: int = 3):
        if not (math.isfinite(level) and level > 0):
            raise ValueError(f"level must be a finite number > 0, got {level!r}")
        if not (isinstance(patience, int) and patience >= 1):
            raise ValueError(f"patience must be an integer >= 1, got {patience!r}")
        self.level, self.patience = float(level), patience
        self.best = self.ref = self.delta = self.delta0 = self.norm_sq = math.nan
        self.since, self.halvings, self.window = 0, 0, 1

    def start(self, f0: float, epoch_length: int) -> None:
        """Reset at ``f(X₀) = f0``; ``epoch_length`` iterations make an epoch."""
        self.best = self.ref = float(f0)
        self.delta = self.delta0 = self.level * (abs(f0) if f0 != 0 else 1.0)
        self.since, self.halvings, self.norm_sq = 0, 0, math.nan
        self.window = self.patience * max(1, int(epoch_length))

    def observe(self, f: float) -> None:
        """Record ``f(X_k)`` (called once per iteration, before the step)."""
        if f < self.best:
            self.best = f
        if self.best <= self.ref - 0.5 * self.delta:
            self.ref, self.since = self.best, 0
            self.delta = min(self.grow * self.delta, self.delta0)
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
                "delta": self.delta, "halvings": self.halvings}


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


def block_subgradient_sq(x: torch.Tensor, cols: torch.Tensor, rest: torch.Tensor,
                        g: torch.Tensor) -> float:
    r"""``‖ξ‖²_F`` of the partial Riemannian subgradient (15),
    ``ξ = X_C skew(X_CᵀG) + (I − XXᵀ)G``: since the two terms are orthogonal and X has
    orthonormal columns, ``‖ξ‖² = ‖skew(X_CᵀG)‖² + ‖G‖² − ‖X_CᵀG‖² − ‖X_RᵀG‖²``
    (``O(n p |C|)``, no n × n matrix; clamped at 0 against rounding)."""
    a = take_columns(x, cols).mT @ g
    skew = 0.5 * (a - a.mT)
    b = take_columns(x, rest).mT @ g if rest.numel() else a.new_zeros(0)
    val = float((skew * skew).sum() + (g * g).sum() - (a * a).sum() - (b * b).sum())
    return max(val, 0.0)


# ---------------------------------------------------------------------------------------------
# Solvers
# ---------------------------------------------------------------------------------------------


class SubgradientSolver(IterativeSolver):
    """Shared parts of RSSM and RSubGrad: step schedule, ``f + h``, best-so-far tracking.

    Args:
        step_size: ``γ₀ > 0``, or ``"auto"`` (default): ``γ₀ = 0.5 / ‖grad f(X₀)‖_F`` with
            ``grad f(X₀)`` the Riemannian subgradient at the start, i.e. a first full step
            moves X by about 0.5 in Frobenius norm. Scale-free, so it works on normalized and
            unnormalized data alike (on DPCP with unit-norm points it gives γ₀ ≈ 10); for a
            smooth problem started near a critical point give ``step_size`` explicitly.
        schedule: ``"constant"``, ``"diminishing"`` (default, ``γ₀/√(k+1)``),
            ``"geometric"`` (``γ₀βᵏ``), a callable ``k -> γ_k``, or one of the adaptive rules
            ``"polyak"`` (:class:`PolyakStep`; ``step_size`` unused) and
            ``"geometric-restart"`` (:class:`RestartedGeometric`).
        decay: β of the geometric schedules (default: 0.98 per full-subgradient step; RSSM
            converts it per iteration, see :class:`RSSM`).
        level: :class:`PolyakStep`'s ``δ₀/|f(X₀)|``.
        patience: epochs without progress before :class:`PolyakStep` halves δ or
            :class:`RestartedGeometric` restarts.
        shrink: :class:`RestartedGeometric`'s step factor at a restart.
        nonsmooth: optional separable term h (``orthoplug.nonsmooth.L1(lam)`` etc.); the
            objective becomes ``f + h`` with subgradient ``∇f + ∂h``.
        return_best: return the best evaluated point (and its cost) instead of the last one.
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options.
    """

    default_decay = 0.98
    #: Frobenius length of the first step under ``step_size="auto"``.
    auto_move = 0.5

    def __init__(self, *, step_size: float | str = "auto",
                 schedule: str | Callable = "diminishing", decay: float | None = None,
                 level: float = 0.5, patience: int = 3, shrink: float = 0.5,
                 nonsmooth=None, return_best: bool = False, **kwargs):
        super().__init__(**kwargs)
        if isinstance(step_size, str) and step_size != "auto":
            raise ValueError(f"step_size must be a number > 0 or 'auto', got {step_size!r}")
        self.schedule_spec = (step_size, schedule, decay)
        self.rule_options = {"level": level, "patience": patience, "shrink": shrink}
        gamma0 = 1.0 if step_size == "auto" else step_size
        if schedule == "polyak":
            PolyakStep(level, patience)
        elif schedule == "geometric-restart":
            RestartedGeometric(gamma0, self.default_decay if decay is None else decay, shrink,
                               patience)
        else:
            StepSchedule(gamma0, schedule, self.default_decay if decay is None else decay)
        if nonsmooth is not None and not (hasattr(nonsmooth, "value")
                                          and hasattr(nonsmooth, "subgradient")):
            raise ValueError("nonsmooth must have value(X) and subgradient(X) (e.g. "
                             "orthoplug.nonsmooth.L1)")
        self.nonsmooth = nonsmooth
        self.return_best = bool(return_best)

    def make_schedule(self, tracker, geometry) -> StepSchedule:
        step_size, schedule, decay = self.schedule_spec
        if step_size == "auto":
            x = tracker.x
            xi = geometry.egrad2rgrad(x, tracker.gradient())
            norm = float(torch.linalg.matrix_norm(xi))
            step_size = self.auto_move / norm if norm > 0 else 1.0
        decay = self.resolve_decay(tracker) if decay is None else decay
        self._epoch = self.epoch_length(tracker)
        opts = self.rule_options
        if schedule == "polyak":
            rule = PolyakStep(opts["level"], opts["patience"])
            rule.start(float(tracker.value()), self._epoch)
            return rule
        if schedule == "geometric-restart":
            return RestartedGeometric(step_size, decay, opts["shrink"], opts["patience"])
        return StepSchedule(step_size, schedule, decay)

    def epoch_length(self, tracker) -> int:
        """Iterations per epoch (every column moved once in expectation): 1 here."""
        return 1

    def step_length(self, tracker, xi_sq: Callable[[], float], share: float) -> float:
        """γ_k of the current rule; ``xi_sq()`` gives ``‖ξ_k‖²`` (only Polyak calls it) and
        ``share`` the share of the columns this iteration moves."""
        rule = self.schedule
        if isinstance(rule, PolyakStep):
            f = float(tracker.value())
            rule.observe(f)
            return rule(f, xi_sq(), share)
        return rule(self.k)

    def resolve_decay(self, tracker) -> float:
        """The geometric schedule's ``β`` when ``decay`` is not given (``default_decay``)."""
        return self.default_decay

    def check_geometry(self, geometry) -> None:
        """Raise ``ValueError`` unless the geometry is Stiefel (or Grassmann representatives)."""
        if not isinstance(geometry, StiefelGeometry):
            raise ValueError(f"{self.name} runs on the Stiefel manifold (or Grassmann "
                             f"representatives); got {geometry!r}")

    def measure(self, tracker, geometry):
        cost, gnorm, viol = super().measure(tracker, geometry)
        if cost < self._best_cost:
            self._best_cost = cost
            self._best_point = tracker.x.clone()
            self._best_iteration = self._iteration
        return cost, gnorm, viol

    def run(self, oracle: Oracle, x0: torch.Tensor, geometry):
        """Minimise ``oracle`` (``+ nonsmooth``) over ``geometry`` from the feasible ``x0``.

        Raises:
            ValueError: unsupported geometry, bad options for this problem size, infeasible or
                misshapen ``x0`` (the message gives the violation), non-finite initial cost.
        """
        self.check_geometry(geometry)
        if self.nonsmooth is not None:
            oracle = CompositeOracle(oracle, self.nonsmooth)
        self._best_cost, self._best_point, self._best_iteration = math.inf, None, 0
        self._iteration = 0
        res = super().run(oracle, x0, geometry)
        res.point = res.point.contiguous()
        hist = res.history
        if hist.get("cost"):
            hist["best_cost"] = np.minimum.accumulate(np.asarray(hist["cost"])).tolist()
        if self._best_point is None or not res.cost > self._best_cost:
            best, best_cost, best_it = res.point, res.cost, res.iterations
        else:
            best, best_cost, best_it = self._best_point, self._best_cost, self._best_iteration
        res.best_point = best = best.contiguous()
        res.info.update(best_cost=best_cost, best_iteration=best_it)
        if self.return_best and best_it != res.iterations:
            tracker = oracle.track(best)
            res.cost, res.gradient_norm, res.violation = IterativeSolver.measure(
                self, tracker, geometry)
            res.point = best
            res.stop_reason += f"; returning the best point (iteration {best_it})"
        self._best_point = None
        return res

    def iterate(self, oracle: Oracle, x0: torch.Tensor, geometry):
        """Yield the tracker after every iteration, forever: no stopping test, evaluation or
        logging (for benchmarks that time the iterations alone, and custom loops).

        ``tracker.x`` is the current iterate (do not modify it). Same validation, seeding and
        step sizes as :meth:`run`.
        """
        self.check_geometry(geometry)
        if self.nonsmooth is not None:
            oracle = CompositeOracle(oracle, self.nonsmooth)
        geometry.check_point(x0)
        generator = torch.Generator(device=x0.device)
        generator.manual_seed(self.seed if self.seed is not None
                              else int(torch.randint(2**62, (1,)).item()))
        tracker = oracle.track(x0)
        self._best_cost, self._best_point, self._best_iteration = math.inf, None, 0
        self._iteration = 0
        self.setup(tracker, geometry, generator)
        while True:
            self.step(tracker, geometry, generator)
            yield tracker

    def step(self, tracker, geometry, generator):
        self._iteration += 1
        self.update(tracker, geometry, generator)
        rule = self.schedule
        if isinstance(rule, RestartedGeometric) and self.k % self._epoch == 0:
            back = rule.epoch_end(self.k, float(tracker.value()), tracker.x)
            if back is not None:
                tracker.set_point(back)

    def update(self, tracker, geometry, generator):
        """One subgradient update of the tracker's point (the method-specific part of a step)."""
        raise NotImplementedError

    def info(self) -> dict:
        sched = getattr(self, "schedule", None)
        if sched is None:
            step_size, schedule, decay = self.schedule_spec
            return {"step_size": step_size, "schedule": str(schedule), "decay": decay}
        return {**sched.info(), "nonsmooth": repr(self.nonsmooth) if self.nonsmooth else None}


class RSSM(SubgradientSolver):
    r"""Randomized submanifold subgradient method (Algorithm 1 of Cheung et al. 2024).

    Args:
        num_blocks: ℓ ∈ [2, p], the number of column blocks of the balanced partition
            (default ``min(4, p)``); ignored when ``blocks`` is given.
        blocks: an explicit partition of ``range(p)`` (list of index lists, ≥ 2 blocks).
        step_size, schedule, decay: step sizes (see :class:`StepSchedule`); the geometric
            default β is ``0.98^(2/ℓ)`` per iteration, i.e. 0.98 per ``ℓ/2`` iterations (after
            which every column has been updated once in expectation) — the same decay per
            column update as RSubGrad's default.
        reorthogonalize: project the step onto the block, ``(I − X_R X_Rᵀ)Ξ``, before the
            polar factor (default True; keeps ``‖X_RᵀX_C‖`` at round-off every step).
        refresh_every: re-orthonormalise the whole iterate (``polar(X)``) every this many
            iterations (0, the default, never; useful in float32 with large ℓ).
        nonsmooth, return_best: see :class:`SubgradientSolver`.
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options (stopping criteria,
            ``seed``, ``eval_every`` — default ``max(10, ℓ(ℓ−1)/2)`` iterations).

    ``info()`` reports the partition sizes and the number of partial-subgradient columns
    computed (``gradient_columns``; divide by p for full-subgradient equivalents).

    Per-iteration cost: ``O(n p p_C)`` flops with ``p_C = |C| ≈ 2p/ℓ`` (the two blocks'
    columns) plus the partial subgradient of those columns; no ``n × n`` matrix.
    """

    name = "RSSM"

    def __init__(self, *, num_blocks: int | None = None, blocks=None,
                 reorthogonalize: bool = True, refresh_every: int = 0, **kwargs):
        super().__init__(**kwargs)
        if num_blocks is not None and (isinstance(num_blocks, bool)
                                       or not isinstance(num_blocks, int) or num_blocks < 2):
            raise ValueError(f"num_blocks must be an integer >= 2, got {num_blocks!r}")
        if refresh_every < 0:
            raise ValueError(f"refresh_every must be >= 0, got {refresh_every}")
        if blocks is not None:
            partition_columns(sum(len(b) for b in blocks), blocks=blocks)  # validate now
        self.num_blocks, self.blocks_user = num_blocks, blocks
        self.reorthogonalize, self.refresh_every = bool(reorthogonalize), int(refresh_every)
        self.blocks: list[torch.Tensor] | None = None
        self._pair_list: list[tuple[int, int]] | None = None

    def _partition(self, p: int) -> list[torch.Tensor]:
        if self.blocks_user is not None:
            return partition_columns(p, blocks=self.blocks_user)
        if p < 2:
            raise ValueError("RSSM needs p >= 2 columns (it updates a pair of column blocks)")
        return partition_columns(p, self.num_blocks if self.num_blocks is not None
                                 else min(4, p))

    def resolve_decay(self, tracker) -> float:
        ell = len(self._partition(tracker.x.shape[-1]))
        return self.default_decay ** (2.0 / ell)

    def default_eval_every(self, tracker):
        """One sweep of the ``ℓ(ℓ − 1)/2`` column-block pairs, at least 10 iterations."""
        ell = len(self._partition(tracker.x.shape[-1]))
        return max(10, ell * (ell - 1) // 2)

    def epoch_length(self, tracker) -> int:
        """``⌈ℓ/2⌉`` iterations: a pair of blocks moves about 2/ℓ of the columns."""
        return max(1, math.ceil(len(self._partition(tracker.x.shape[-1])) / 2))

    def check_geometry(self, geometry):
        super().check_geometry(geometry)
        self._partition(geometry.p)  # raises on bad num_blocks / blocks for this p

    def setup(self, tracker, geometry, generator):
        x = tracker.x
        if x.ndim != 2:
            raise ValueError(f"RSSM optimises one n × p matrix, got shape {tuple(x.shape)}")
        self.blocks = [b.to(x.device) for b in self._partition(x.shape[-1])]
        if x.stride(-2) != 1:  # column-major storage: gathering/writing columns is contiguous
            tracker.set_point(x.mT.contiguous().mT)
        self.schedule = self.make_schedule(tracker, geometry)
        self.k = 0
        self._pairs: dict = {}
        self._tracker = tracker

    def _pair(self, i: int, j: int, p: int):
        key = (min(i, j), max(i, j))
        hit = self._pairs.get(key)
        if hit is None:
            cols = torch.cat([self.blocks[key[0]], self.blocks[key[1]]])
            hit = self._pairs[key] = (cols, complement(cols, p))
        return hit

    def draw_pair(self, generator) -> tuple[int, int]:
        """A uniformly random unordered pair ``i < j`` of block indices (one of ℓ(ℓ−1)/2)."""
        ell = len(self.blocks)
        pairs = self._pair_list
        if pairs is None or len(pairs) != ell * (ell - 1) // 2:
            pairs = self._pair_list = [(i, j) for i in range(ell) for j in range(i + 1, ell)]
        return pairs[int(torch.randint(len(pairs), (1,), generator=generator,
                                        device=generator.device))]

    def update(self, tracker, geometry, generator):
        x = tracker.x
        i, j = self.draw_pair(generator)
        cols, rest = self._pair(i, j, x.shape[-1])
        g = partial_subgradient(tracker, cols)
        gamma = self.step_length(tracker, lambda: block_subgradient_sq(x, cols, rest, g),
                                 cols.numel() / x.shape[-1])
        new = block_update(x, cols, g, gamma, rest, reorthogonalize=self.reorthogonalize)
        if not all_finite(new):
            raise NonFiniteError("non-finite block update")
        write_columns(tracker, cols, new)
        self.k += 1
        if self.refresh_every and self.k % self.refresh_every == 0:
            from orthoplug.geometry.stiefel_block import polar_tall

            tracker.set_point(polar_tall(tracker.x))

    def info(self):
        blocks = self.blocks if self.blocks is not None else []
        tracker = getattr(self, "_tracker", None)
        return {**super().info(), "num_blocks": len(blocks),
                "gradient_columns": getattr(tracker, "column_evaluations", None),
                "block_sizes": [int(b.numel()) for b in blocks],
                "reorthogonalize": self.reorthogonalize, "refresh_every": self.refresh_every}
