r"""RSDM: Riemannian random submanifold descent on St(n, p) and Gr(n, p).

Each iteration moves the iterate by a rotation restricted to a random r-dimensional slice of O(n)
(:mod:`orthoplug.geometry.submanifold`):

    X⁺ = U(Y) X = X + P(r)ᵀ (Y − I_r) P(r) X,     Y = Retr_{I_r}(−η Γ),
    Γ = skew(B Cᵀ),  B = P(r) ∇F(X),  C = P(r) X     (formula (4): Γ = P(r) skew(∇F Xᵀ) P(r)ᵀ).

``U(Y)`` is orthogonal, so ``XᵀX`` is preserved exactly up to round-off (never corrected: start
from an orthonormal ``X0``; in float32/16 the iterate is re-orthonormalised every
``reorthonormalize_every`` iterations). For Grassmann (``F(XQ) = F(X)``) nothing changes but the
representation (any orthonormal basis) and the stationarity measure the run loop reports (the
horizontal gradient ``G − XXᵀG``); the same holds for SO(n) = St(n, n) with ``det = +1``, which
every retraction here preserves.

Host synchronisation (torch on a GPU; no GPU was available to measure it). The slice
sampling, the products and the retraction stay on the device; each iteration still reads
back to the host: the finiteness check of the new rows before they are written (one scalar,
``_all_finite``; fixed step: the only sync with a :class:`RowGradientOracle`); with a
:class:`~orthoplug.oracles.core.QuadraticTracker`, the finiteness of Δ and the cost change it
adds to its host-side running value (two scalars); with Armijo or ``"polar"``, ``‖Γ‖²``, the
current cost and one cost per trial, which decide the step (inherent to a line search); the
``"polar"`` step's determinant sign. The geoopt front-end's fixed-``lr`` step has none (it does
not check finiteness); its ``lr=None`` step reads the closure's loss per trial. The run loop's
evaluations (every ``eval_every`` iterations) read the cost, gradient norm and violation.

Per-iteration cost, for ``X ∈ ℝ^{n×p}`` and slice dimension r (``T_g`` = a full gradient,
``T_rows`` = r rows of it):

=============  ==============================================================================
RSDM-P         sampling O(n); ``B`` = r gradient rows (``T_rows``; a tracker without row
               access computes ``T_g`` and gathers); ``Γ`` O(r²p); retraction O(r³);
               update O(r²p).  Total O(pr² + r³) + ``T_rows``. Quadratic ``s·tr(XᵀCXD)``
               (:class:`~orthoplug.oracles.core.QuadraticOracle`): ``T_rows`` = O(rp) from the
               cached ``CX``, whose update costs O(nrp); Procrustes: O(rp²) or O(rp) (linear
               form), see :mod:`orthoplug.problems.stiefel_problems`.
RSDM-O         sampling O(nr²) (QR); ``B, C`` O(npr) + ``T_g``; retraction O(r³); update
               O(npr) (rank-r).  Total O(npr + nr²) + ``T_g`` (quadratic: the cached ``CX``
               is updated in O(n²r + npr)).
stochastic     as above with ``T_g`` = one minibatch gradient.
Armijo         + one cost evaluation per trial step (quadratic trackers: O(nrp) per trial).
=============  ==============================================================================

Step size. The default (no ``step_size`` given) needs no tuning: Armijo backtracking on the
slice with memory, accepting ``η`` when ``F(X⁺) ≤ F(X) − c·η‖Γ‖²`` (``−‖Γ‖²`` is the slope of
``F(U(Retr(−tΓ))X)`` at ``t = 0``) and shrinking ``η ← βη`` otherwise; the first trial of the
next iteration is ``2η`` after a first-trial acceptance, else the accepted ``η`` (so the step
grows or shrinks geometrically to the cost's scale within a few iterations, from a first trial
of 1). For a quadratic cost (:class:`~orthoplug.oracles.core.QuadraticTracker`) a trial is
priced on the slice alone, ``F(X⁺) − F(X) = s⟨Δ, (2(CX)[B] + C_BB Δ)D⟩`` in O(r²p), and only the
accepted one updates the cached ``CX``. A fixed η (``step_size=η``, the paper's choice; RSDM
tolerates much larger η than Riemannian gradient descent since only a slice moves) is watched
at the run's evaluations: if the cost has not decreased over :data:`STALL_WINDOW` evaluations
while the gradient is not small, a :class:`RuntimeWarning` names the step and the stagnation.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.geometry.submanifold import (
    RETRACTIONS,
    SAMPLINGS,
    Submanifold,
    retract_identity,
    sample_submanifold,
    submanifold_gradient,
)
from orthoplug.oracles.core import (
    FiniteSumOracle,
    NonFiniteError,
    QuadraticTracker,
    host_array,
)

from .base import IterativeSolver

__all__ = ["RSDM", "StochasticRSDM", "STALL_WINDOW"]

#: first trial step of the default (Armijo) rule when no ``step_size`` is given
DEFAULT_FIRST_TRIAL = 1.0
#: evaluations without a decrease of the cost after which a fixed step warns
STALL_WINDOW = 5
#: largest η of the polar step (on a linear cost it doubles at every iteration)
_ETA_MAX = 1e15


# ---------------------------------------------------------------------------------------------
# Solvers
# ---------------------------------------------------------------------------------------------


def _all_finite(a: torch.Tensor) -> bool:
    """No NaN/inf in ``a`` (one reduction: a sum of finite, bounded rows of X is finite)."""
    return math.isfinite(float(a.sum()))


def _check_positive(name, value):
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


class RSDM(IterativeSolver):
    r"""Riemannian random submanifold descent (RSDM-P / RSDM-O) on Stiefel and Grassmann.

    Args:
        r: slice dimension, ``2 ≤ r ≤ n`` (r = 2 with permutation sampling is Riemannian
            coordinate descent with Givens rotations; r = n with orthogonal sampling is a
            full rotation step).
        sampling: ``"permutation"`` (RSDM-P, default: r random rows, all by indexing) or
            ``"orthogonal"`` (RSDM-O: Haar-distributed r×n orthonormal rows).
        step_size: a fixed step η > 0 (the paper's rule), or ``None`` (default): Armijo
            backtracking with memory from a first trial of 1 (see the module docstring). With
            ``line_search="armijo"``, the first trial step.
        retraction: on O(r) at ``I_r``: ``"qr"`` (default), ``"polar"``, ``"cayley"``, ``"exp"``.
        line_search: ``"armijo"`` (backtracking on the slice; the default when no
            ``step_size`` is given), ``None`` (the fixed ``step_size``), or ``"polar"``: the
            proximal-linear slice step ``Y = polar(CCᵀ/η − S)``, ``S = BCᵀ``, the exact
            minimiser over SO(r) of ``⟨B, YC − C⟩ + ‖YC − C‖²/(2η)`` (over O(r) too when
            ``p < r``), with ``1/η`` a Lipschitz
            estimate (accepted when ``F(X⁺)`` is below that model, halved otherwise, doubled
            after a first-trial acceptance; ``step_size`` is the first η). On a linear cost
            (Procrustes on St) every trial is accepted and the step tends to the exact block
            minimiser ``polar(−S)``. Costs one r×r SVD per trial besides the O(r²p) products.
        contraction: Armijo's β ∈ (0, 1) (default 0.5).
        sufficient_decrease: Armijo's c ∈ (0, 1) (default 1e-4).
        max_backtracks: trials per iteration before the step is skipped (default 30).
        reorthonormalize_every: replace X by its polar factor every this many iterations
            (O(np²)); default: never in float64, every 1000 iterations in lower precision.
        refresh_every: recompute a quadratic oracle's cached ``CX`` every this many iterations
            (drift control, O(n²p)); default 10 000.
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options (stopping criteria,
            ``seed``, ``eval_every`` — default ``⌈1/ρ⌉`` iterations clamped to [10, 1000],
            ``ρ = r(r−1)/(n(n−1))`` the fraction of the O(n) gradient one slice sees).

    The run's ``info`` holds the options, ``step_rule`` (``"armijo"`` or ``"fixed"``),
    ``backtracks`` and ``skipped_steps`` (Armijo), and ``row_gradient_evaluations`` (RSDM-P reads
    of r gradient rows).

    Per-iteration cost (X is n×p): the slice gradient ``skew(B Cᵀ)`` with ``B = P(r)∇F(X)``,
    ``C = P(r)X`` in ``O(r²p)``; the retraction on O(r) in ``O(r³)``; the update
    ``X ← U(Y)X`` in ``O(r²p)`` for RSDM-P (r rows change) and ``O(npr)`` for RSDM-O (plus
    ``O(nr²)`` to sample ``P(r)``). ``∇F``: r rows from a row-gradient or quadratic oracle
    (the quadratic tracker keeps ``CX`` current in ``O(nrp)``), else one full gradient.

    Warns:
        RuntimeWarning: a fixed step made no progress (see :data:`STALL_WINDOW`).
    """

    def __init__(self, r: int, *, sampling: str = "permutation", step_size: float | None = None,
                 retraction: str = "qr", line_search: str | None = None,
                 contraction: float = 0.5, sufficient_decrease: float = 1e-4,
                 max_backtracks: int = 30, reorthonormalize_every: int | None = None,
                 refresh_every: int = 10_000, **kwargs):
        super().__init__(**kwargs)
        if isinstance(r, bool) or not isinstance(r, int) or r < 2:
            raise ValueError(f"r must be an integer >= 2 (for r = 1 the step is identically "
                             f"zero), got {r!r}")
        if sampling not in SAMPLINGS:
            raise ValueError(f"unknown sampling {sampling!r}; choose from {SAMPLINGS}")
        if retraction not in RETRACTIONS:
            raise ValueError(f"unknown retraction {retraction!r}; choose from {RETRACTIONS}")
        if line_search not in (None, "armijo", "polar"):
            raise ValueError(f"line_search must be None, 'armijo' or 'polar', got "
                             f"{line_search!r}")
        if step_size is None:  # no step given: a rule that needs no tuning
            step_size, line_search = DEFAULT_FIRST_TRIAL, line_search or "armijo"
        _check_positive("step_size", step_size)
        if not 0 < contraction < 1:
            raise ValueError(f"contraction must be in (0, 1), got {contraction!r}")
        if not 0 < sufficient_decrease < 1:
            raise ValueError(f"sufficient_decrease must be in (0, 1), got {sufficient_decrease!r}")
        if not (isinstance(max_backtracks, int) and max_backtracks >= 0):
            raise ValueError(f"max_backtracks must be an integer >= 0, got {max_backtracks!r}")
        for key, val in (("reorthonormalize_every", reorthonormalize_every),
                         ("refresh_every", refresh_every)):
            if val is not None and not (isinstance(val, int) and val >= 0):
                raise ValueError(f"{key} must be an integer >= 0 (0 = never), got {val!r}")
        self.r, self.sampling, self.retraction = r, sampling, retraction
        self.step_size, self.line_search = float(step_size), line_search
        self.contraction, self.sufficient_decrease = float(contraction), float(sufficient_decrease)
        self.max_backtracks = max_backtracks
        self.reorthonormalize_every, self.refresh_every = reorthonormalize_every, refresh_every
        self.name = "RSDM-P" if sampling == "permutation" else "RSDM-O"

    # ---- run hooks ---------------------------------------------------------------------------
    def default_eval_every(self, tracker):
        """``⌈1/ρ⌉`` iterations clamped to [10, 1000], ``ρ = r(r − 1)/(n(n − 1))``."""
        n = tracker.x.shape[-2]
        rho = self.r * (self.r - 1) / (n * (n - 1))
        return int(min(1000, max(10, math.ceil(1.0 / rho))))

    def setup(self, tracker, geometry, generator):
        if not isinstance(geometry, StiefelGeometry):
            raise ValueError(f"{self.name} supports Stiefel and Grassmann manifolds (and SO(n) "
                             f"as St(n, n)), got {geometry!r}")
        x = tracker.x
        if x.ndim != 2:
            raise ValueError(f"{self.name}: the solver takes one n×p matrix, got shape "
                             f"{tuple(x.shape)} (use the geoopt optimizer for batches)")
        n = x.shape[-2]
        if self.r > n:
            raise ValueError(f"r = {self.r} exceeds n = {n}: choose 2 <= r <= n")
        reorth = self.reorthonormalize_every
        self._reorth = (0 if x.dtype == torch.float64 else 1000) if reorth is None else reorth
        self._refresh = self.refresh_every if hasattr(tracker, "refresh") else 0
        self._eta_trial = self.step_size
        self.count = 0
        self.backtracks = 0
        self.skipped_steps = 0
        self.row_reads = 0
        self._watch = [] if self.line_search is None else None  # (iteration, cost, gnorm)
        self._warned = False

    def info(self):
        out = {"r": self.r, "sampling": self.sampling, "step_size": self.step_size,
               "retraction": self.retraction, "line_search": self.line_search,
               "step_rule": "fixed" if self.line_search is None else self.line_search}
        if hasattr(self, "count"):
            out.update(backtracks=self.backtracks, skipped_steps=self.skipped_steps,
                       row_gradient_evaluations=self.row_reads)
        return out

    def measure(self, tracker, geometry):
        cost, gnorm, viol = super().measure(tracker, geometry)
        if getattr(self, "_watch", None) is not None and not self._warned:
            self._check_progress(cost, gnorm)
        return cost, gnorm, viol

    def _check_progress(self, cost: float, gnorm: float) -> None:
        """Warn once if a fixed step has not decreased the cost over :data:`STALL_WINDOW`
        evaluations while the gradient norm is above 1e-6 of its first measured value."""
        watch = self._watch
        watch.append((self.count, cost, gnorm))
        if len(watch) <= STALL_WINDOW:
            return
        it0, f0, _ = watch[-1 - STALL_WINDOW]
        best = min(f for _, f, _ in watch[-STALL_WINDOW:])
        if not (math.isfinite(best) and math.isfinite(f0)):
            return
        stalled = best >= f0 - 1e-12 * max(1.0, abs(f0))
        if stalled and gnorm > 1e-6 * watch[0][2]:
            self._warned = True
            warnings.warn(
                f"{self.name} with the fixed step_size={self.step_size:g} made no progress: over "
                f"the last {self.count - it0} iterations the cost went from {f0:.10g} to at "
                f"best {best:.10g} while the Riemannian gradient norm is {gnorm:.3e} "
                f"({gnorm / watch[0][2]:.2e} of its initial value). The step is likely too large "
                f"for this cost's scale: leave step_size unset (Armijo with memory, no tuning) "
                f"or use a smaller step.", RuntimeWarning, stacklevel=2)

    # ---- one iteration -----------------------------------------------------------------------
    def _sample(self, x, generator) -> Submanifold:
        return sample_submanifold(self.sampling, x.shape[-2], self.r, dtype=x.dtype,
                                  device=x.device, generator=generator)

    def _restricted_gradient(self, tracker, sub: Submanifold) -> torch.Tensor:
        """``B = P(r) ∇F(X)``: r gradient rows (RSDM-P) or a projection of the full gradient."""
        if sub.rows is not None:
            self.row_reads += 1
            return tracker.gradient_rows(sub.rows)
        return sub.restrict(tracker.gradient())

    def _step_size(self) -> float:
        return self.step_size

    def step(self, tracker, geometry, generator):
        sub = self._sample(tracker.x, generator)
        c = sub.restrict(tracker.x)
        b = self._restricted_gradient(tracker, sub)
        if self.line_search == "polar":
            self._polar_step(tracker, sub, c, b)
        elif self.line_search == "armijo":
            self._armijo(tracker, sub, c, submanifold_gradient(b, c))
        else:
            self._commit(tracker, sub, c, retract_identity(
                -self._step_size() * submanifold_gradient(b, c), self.retraction))
        self.count += 1
        if self._refresh and self.count % self._refresh == 0:
            tracker.refresh()
        if self._reorth and self.count % self._reorth == 0:
            tracker.set_point(geometry.projx(tracker.x))

    def _commit(self, tracker, sub: Submanifold, c, y) -> None:
        """``X ← U(Y) X`` through the tracker (rows: ``set_rows``; Haar: a rank-r update)."""
        if sub.rows is not None:
            new = y @ c
            if not _all_finite(new):
                raise NonFiniteError("non-finite RSDM update")
            tracker.set_rows(sub.rows, new)
        else:
            w = y @ c - c
            if not _all_finite(w):
                raise NonFiniteError("non-finite RSDM update")
            tracker.add_low_rank(sub.basis.mT, w)

    def _armijo(self, tracker, sub: Submanifold, c, gamma) -> None:
        f0 = float(tracker.value())
        slope = float((gamma * gamma).sum())
        if slope == 0.0:
            return
        eta = self._eta_trial
        for trial in range(self.max_backtracks + 1):
            y = retract_identity(-eta * gamma, self.retraction)
            if self._try(tracker, sub, c, y, f0 - self.sufficient_decrease * eta * slope):
                self._eta_trial = 2.0 * eta if trial == 0 else eta
                return
            self.backtracks += 1
            eta *= self.contraction
        self.skipped_steps += 1
        self._eta_trial = eta

    def _polar_step(self, tracker, sub: Submanifold, c, b) -> None:
        """``Y = polar(CCᵀ/η − BCᵀ)`` with backtracking on the majorisation ``F(X⁺) ≤ F(X) +
        ⟨B, Δ⟩ + ‖Δ‖²/(2η)``, ``Δ = (Y − I)C``."""
        f0 = float(tracker.value())
        s_mat, k_mat = b @ c.mT, c @ c.mT
        eta = self._eta_trial
        for trial in range(self.max_backtracks + 1):
            y = _polar(k_mat / eta - s_mat)
            delta = y @ c - c
            model = float((b * delta).sum()) + float((delta * delta).sum()) / (2.0 * eta)
            if not model < 0.0:  # the slice is stationary to round-off: nothing to gain
                return
            if self._try(tracker, sub, c, y, f0 + model):
                self._eta_trial = min(2.0 * eta if trial == 0 else eta, _ETA_MAX)
                return
            self.backtracks += 1
            eta *= self.contraction
        self.skipped_steps += 1
        self._eta_trial = eta

    def _try(self, tracker, sub: Submanifold, c, y, bound: float) -> bool:
        """Move to ``U(Y)X`` if its cost is ≤ bound (and finite); else leave X unchanged."""
        if sub.rows is not None:
            new = y @ c
            if not _all_finite(new):
                return False
            if isinstance(tracker, QuadraticTracker):  # price the trial on the slice first
                if not _row_change_value(tracker, sub.rows, new) <= bound:
                    return False
                tracker.set_rows(sub.rows, new)
                return True
            tracker.set_rows(sub.rows, new)
            try:
                ok = float(tracker.value()) <= bound
            except NonFiniteError:
                ok = False
            if not ok:
                tracker.set_rows(sub.rows, c)
            return ok
        w = y @ c - c
        if not _all_finite(w):
            return False
        try:
            ok = float(tracker.oracle.value(tracker.x + sub.basis.mT @ w)) <= bound
        except NonFiniteError:
            ok = False
        if ok:
            tracker.add_low_rank(sub.basis.mT, w)
        return ok


def _polar(w: torch.Tensor) -> torch.Tensor:
    """``argmax_{Y ∈ SO(r)} ⟨Y, w⟩ = U diag(1, …, 1, det UVᵀ) Vᵀ`` for ``w = UΣVᵀ`` (float64).

    The polar factor ``UVᵀ`` itself when its determinant is +1; otherwise the direction of the
    smallest singular value is flipped, so that RSDM's steps stay rotations (SO(n) stays SO(n)).
    """
    u, _, vh = torch.linalg.svd(w.double() if w.dtype != torch.float64 else w)
    if float(torch.linalg.det(u) * torch.linalg.det(vh)) < 0:
        u[..., -1] = -u[..., -1]
    return (u @ vh).to(w.dtype)


def _row_change_value(tracker: QuadraticTracker, rows: torch.Tensor, new: torch.Tensor) -> float:
    """``f`` after ``X[rows] ← new`` for ``f = s·tr(XᵀCXD)``, without changing the tracker:
    ``f + s⟨Δ, (2(CX)[B] + C_BB Δ) D⟩``, O(r²p) (NaN if not finite)."""
    idx = tracker._index(rows)
    new_a = host_array(new.to(tracker.x.dtype))
    delta = new_a - tracker.xa[idx]
    c_bb = tracker.ca[idx[:, None], idx[None, :]]
    w = 2.0 * tracker.ya[idx] + c_bb @ delta
    if tracker.da is not None:
        w = w @ tracker.da
    change = float(np.vdot(delta, w) if isinstance(delta, np.ndarray) else (delta * w).sum())
    value = float(tracker.value()) + tracker.s * change
    return value if math.isfinite(value) else math.nan


class StochasticRSDM(RSDM):
    r"""Stochastic / mini-batch RSDM for ``F = E f(X; ξ)`` or ``F = (1/N) Σ f_i``.

    Each iteration replaces ∇F by a minibatch mean: ``oracle.sample_gradient(X, B, gen)`` for a
    :class:`StochasticOracle` (fresh streamed samples), or ``component_gradient(X, idx)`` with
    ``idx`` B indices drawn without replacement for a
    :class:`~orthoplug.oracles.core.FiniteSumOracle`. Everything else is RSDM (the variance σ²
    of the gradient becomes σ²/B in the bounds). The step is ``η_k = η·s(k)``:

    * ``schedule="constant"``: ``s = 1`` (theory: ``η = min{1/L, √(Δ0/L)/(σ√K)}`` for K steps);
    * ``"inverse"``: ``s = 1/(1 + k/t0)``; ``"inverse_sqrt"``: ``s = 1/√(1 + k/t0)``;
    * or a callable ``k -> s``.

    Defaults: ``η = 1``, ``schedule="constant"`` (it converges to a neighbourhood whose size
    scales with ``η σ²/B``; ``"inverse"`` or ``"inverse_sqrt"`` converge; there is no line search
    on estimated costs, so η must suit the cost's scale).

    Args:
        r, sampling, retraction, reorthonormalize_every: as :class:`RSDM`.
        step_size: η > 0 (default 1).
        batch_size: B ≥ 1 (default 1).
        schedule: as above; ``decay_time``: t0 > 0 (default 1000).

    Cost per iteration: one minibatch gradient plus the RSDM step of the chosen sampling. No
    line search (it would need exact costs). ``info["samples"]`` counts the samples drawn.
    """

    _SCHEDULES = ("constant", "inverse", "inverse_sqrt")

    def __init__(self, r: int, *, step_size: float | None = 1.0, batch_size: int = 1,
                 schedule="constant", decay_time: float = 1000.0, **kwargs):
        if kwargs.get("line_search") is not None:
            raise ValueError("StochasticRSDM has no line search (costs are only estimated)")
        super().__init__(r, step_size=1.0 if step_size is None else step_size, **kwargs)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        if not (callable(schedule) or schedule in self._SCHEDULES):
            raise ValueError(f"schedule must be a callable or one of {self._SCHEDULES}, "
                             f"got {schedule!r}")
        _check_positive("decay_time", decay_time)
        self.batch_size, self.schedule, self.decay_time = batch_size, schedule, float(decay_time)
        self.name = "S" + self.name

    def setup(self, tracker, geometry, generator):
        oracle = tracker.oracle
        if isinstance(oracle, FiniteSumOracle):
            if self.batch_size > oracle.num_components:
                raise ValueError(f"batch_size = {self.batch_size} exceeds the number of "
                                 f"components N = {oracle.num_components}")
        elif not hasattr(oracle, "sample_gradient"):
            raise ValueError("StochasticRSDM needs a StochasticOracle or a FiniteSumOracle")
        super().setup(tracker, geometry, generator)
        self._watch = None  # estimated gradients: the cost need not decrease at every evaluation
        self.samples = 0
        self._generator = generator

    def measure(self, tracker, geometry):
        try:
            return super().measure(tracker, geometry)
        except NotImplementedError:
            return math.nan, math.nan, float(geometry.violation(tracker.x).max())

    def info(self):
        out = {**super().info(), "batch_size": self.batch_size,
               "schedule": self.schedule if isinstance(self.schedule, str) else "callable",
               "decay_time": self.decay_time}
        if hasattr(self, "samples"):
            out["samples"] = self.samples
        return out

    def _step_size(self) -> float:
        k = self.count
        if callable(self.schedule):
            return self.step_size * float(self.schedule(k))
        if self.schedule == "inverse":
            return self.step_size / (1.0 + k / self.decay_time)
        if self.schedule == "inverse_sqrt":
            return self.step_size / math.sqrt(1.0 + k / self.decay_time)
        return self.step_size

    def _restricted_gradient(self, tracker, sub):
        oracle, x = tracker.oracle, tracker.x
        if isinstance(oracle, FiniteSumOracle):
            idx = torch.randperm(oracle.num_components, generator=self._generator,
                                 device=x.device)[: self.batch_size]
            g = oracle.component_gradient(x, idx)
        else:
            g = oracle.sample_gradient(x, self.batch_size, self._generator)
        self.samples += self.batch_size
        return sub.restrict(g)
