r"""SparseOBCD: OBCD (:mod:`orthoplug.solvers.obcd`) after a pipeline of start stages, with
greedy pairs and column sweeps.

:class:`SparseOBCD` is a pipeline of named stages, each budgeted in iterations and reported in
the result: the lowest-``F`` of ``x0`` and the start candidates (each after column sweeps), then
the prox or splitting stage, ManPG trajectories from each start and prox end (continuous h: the
lowest end kept) and the partition search, then OBCD's exact pair steps, each on the
best of ``candidates`` random pairs, with a column sweep every ``column_every`` pair steps. All
of this runs inside the timed loop; no stage reads a clock other than the run's ``max_time``
stop. The stages live in :mod:`orthoplug.solvers.sparse_starts` (start candidates, prox,
splitting, sparse orthonormal restoration), :mod:`orthoplug.solvers.row_partition` (partition
search) and :mod:`orthoplug.solvers.column_sweeps` (column rotations); this module holds the
class, its stage bookkeeping and the float32 gradients of the splitting stage; the greedy pairs
are OBCD's ``pairs="greedy"`` order.

Every step keeps OBCD's guarantees: pair steps are OBCD's exact steps (F decreases by at least
``θ/2‖V − I‖²``), column sweeps never increase F, and the start stages only replace the point
by one of lower F (feasible to ``‖XᵀX − I‖_F ≤ 1e-13``; exactly nonnegative for the
indicator).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from orthoplug.baselines.manpg import ManPG
from orthoplug.kernels import runs_compiled
from orthoplug.nonsmooth import SeparableTerm
from orthoplug.oracles import host_array

from .base import Run
from .column_sweeps import _column_sweep, column_invariant, column_rotations
from .obcd import OBCD
from .row_partition import partition_moves, partition_search
from .sparse_starts import prox_polar, splitting_iterates, start_candidates
from .splitting import nonneg_rounding

__all__ = ["SparseOBCD"]


def _low_precision_gradient(tracker, x: torch.Tensor):
    """``(∇f in float32, torch.float32)`` for a quadratic ``f = s·tr(XᵀCX)`` and a float64 CPU
    ``x`` (``2s·C`` is copied to float32 once; the float32 product costs about half the
    float64 one, ``docs/guide/defaults.md``), each
    call counted as one gradient on ``tracker``; ``(None, None)`` otherwise (then use the
    tracker's ``gradient_at`` in ``x``'s dtype)."""
    q = tracker.oracle.quadratic
    if q is None or q.d is not None or x.dtype != torch.float64 or not runs_compiled(x):
        return None, None
    c32 = (2.0 * float(q.scale) * host_array(q.c)).astype(np.float32)

    def gradient(y: torch.Tensor) -> torch.Tensor:
        tracker.count_gradients(1)
        return torch.from_numpy(c32 @ y.numpy())

    return gradient, torch.float32


#: The unit of each stage's ``iterations`` in ``result.info["stages"]``.
STAGE_UNITS = {"start": "candidates", "prox": "prox-polar steps", "splitting": "ADMM iterations",
               "partition search": "row moves", "pair steps": "pair steps",
               "column sweeps": "sweeps", "prox-gradient steps": "ManPG steps",
               "restarts": "ADMM iterations", "branches": "ManPG steps"}

#: Pair-step iterations between two stall checks of the restart rule, and the relative decrease
#: of F below which such a window counts as stalled.
RESTART_WINDOW, RESTART_TOLERANCE = 2, 1e-6

#: ManPG steps between two stall checks of a branch (stage ``"branches"``), and the relative
#: decrease of F below which such a window ends ``x0``'s trajectory and the kept one's (the other
#: branches end at ``RESTART_TOLERANCE``).
BRANCH_WINDOW, BRANCH_TOLERANCE = 10, 1e-9

#: The largest r at which ``branch_steps="auto"`` runs the branches: a ManPG step solves a dense
#: Newton system of r(r+1)/2 unknowns (55 at r = 10, 210 at r = 20), so its cost grows as r⁶
#: against the pair steps' r.
BRANCH_MAX_RANK = 10

#: The splitting stage with the partition search (NN-PCA), in units of n ADMM iterations: its
#: rounded point is refined every ``SPLIT_REFINE_EVERY`` n iterations (when its support is new),
#: and the stage ends once ``SPLIT_STALL`` n iterations lower the best refined F by less than
#: 1e-4 relative, or after ``SPLIT_CAP`` n. Its ADMM iterates converge slowly (their rounded
#: supports keep changing for tens of n iterations), so a stall rule ends the stage, not a count.
SPLIT_REFINE_EVERY, SPLIT_STALL, SPLIT_CAP = 0.5, 20, 100


def _stalled(before: float, after: float, tolerance: float) -> bool:
    """Whether a window took F from ``before`` to ``after`` by at most ``tolerance·|F|`` (the
    stall test of the restarts and the branches)."""
    return before - after <= tolerance * abs(after)


class SparseOBCD(OBCD):
    """OBCD (k = 2, exact curvature) after a pipeline of start stages, with greedy pairs and
    column sweeps.

    A run is a pipeline of named stages, run in order; each stage's point replaces the run's
    whenever its F is lower (so F never rises):

    1. ``"start"`` — the lowest-F of ``x0`` and the ``starts`` candidates
       (:func:`~orthoplug.solvers.sparse_starts.start_candidates`; rounded by
       :func:`~orthoplug.solvers.splitting.nonneg_rounding` for the nonnegativity indicator,
       then ``start_sweeps`` column sweeps); ``x0`` on ties.
    2. ``"prox"`` — up to ``prox_steps`` :func:`~orthoplug.solvers.sparse_starts.prox_polar`
       steps (momentum, patience 20) from each of ``x0`` and the prepared candidates, the best
       end kept (its ends stall above the basins' minima; the branches compare them).
    3. ``"branches"`` — for a continuous h (ℓ1, capped ℓ1) with the ManPG steps of stage 8:
       :class:`~orthoplug.baselines.manpg.ManPG`'s trajectory from each of ``x0``, the
       prepared candidates and the prox stage's ends (``"x0 + prox"``, …), each on a tracker
       of its own. ``x0``'s runs first, until a window of ``BRANCH_WINDOW`` steps lowers F
       by at most ``BRANCH_TOLERANCE·|F|`` (or ``branch_steps`` steps); each other start's then
       runs for at most as many steps, until a window lowers F by at most
       ``RESTART_TOLERANCE·|F|``. The lowest end is kept (``x0``'s on ties); one that is not
       ``x0``'s goes on to the ``BRANCH_TOLERANCE`` stall, and the later ManPG steps (stage 8)
       start from the kept trajectory's step t and multiplier Λ.
       Each trajectory is an item every ``BRANCH_WINDOW`` steps, so ``max_iterations`` ends the
       stage within one window.
       So the run ends at or below ManPG's own end from ``x0`` (to the stall tolerance), and
       the starts are compared at their trajectories' ends rather than by their own F: the
       start of lowest F need not lead to the lowest basin.
    4. ``"splitting"`` — up to ``split_steps`` iterations of
       :func:`~orthoplug.solvers.sparse_starts.splitting_iterates` (linearised ADMM, RADMM's
       Riemannian X-step with the partition search) from ``split_from``; its
       iterates are float32 for a quadratic f on float64 CPU tensors (each of their gradients
       counted as one); with the partition search its rounded points are refined by
       :func:`~orthoplug.solvers.row_partition.partition_search` (every ``SPLIT_REFINE_EVERY``
       n iterations, when the support is new, and at the stage's last iteration) and the stage
       ends once ``SPLIT_STALL`` n iterations lower the best refined F by less than 1e-4
       relative; without it, once 10 checks (every 10 iterations) in a row do.
    5. ``"partition search"`` — :func:`~orthoplug.solvers.row_partition.partition_moves` (at
       most 100 n row moves) from the rounded start, then from the run's point.
    6. ``"pair steps"`` — OBCD's exact pair steps, each on the best of ``candidates`` random
       pairs by the model decrease (OBCD's ``pairs="greedy"``; ``candidates=1``: its uniform
       ``"random"`` pairs), for the rest of the run's ``max_iterations``; the same pairs on
       every path (the compiled loop, float32 in Python).
    7. ``"column sweeps"`` — a :func:`~orthoplug.solvers.column_sweeps.column_rotations` sweep
       after every ``column_every`` pair steps.
    8. ``"prox-gradient steps"`` — for a continuous h (ℓ1, capped ℓ1) and an oracle with a
       Lipschitz constant, :class:`~orthoplug.baselines.manpg.ManPG` steps (the tangent-space
       prox direction with its sufficient-decrease backtracking, so F does not rise), one after
       each column sweep, on a run sharing the tracker. Pair steps change two rows at a time,
       and under a nonsmooth h
       a point where no pair step lowers F need not be stationary for moves of all rows; the
       full-direction step leaves such points (ℓ1-SPCA: SparseOBCD's pair steps stopped up to
       1e-3 above ManPG from the PCA start, ``benchmarks/l1_any_start.py``).
    9. ``"restarts"`` — the rest of a converged run's budget: once a window of
       ``RESTART_WINDOW`` pair-step iterations (with their column sweeps and ManPG steps) lowers
       F by at most ``RESTART_TOLERANCE·|F|``, the splitting stage runs again (up to
       ``split_steps`` iterations, its own patience) from the start stages' point (where
       the splitting starts with ``split_from="start"``) after ``max(1, start_sweeps)`` fresh
       column sweeps (new random pair orders; f is unchanged, so each restart starts at the same f
       and lands in another basin of the splitting); its best point replaces the run's when
       its F is lower. After a restart whose point is taken the pair steps go on from it until
       a stalled window; after one whose point is not taken the next restart follows at once
       (the run's point is still the stalled one). Restarts end for good once one ends at
       its own start's F (its splitting formed no lower feasible point, e.g. X on the support
       of Y never came near orthonormal: more of them would only take the pair steps' time),
       after ``restarts`` of them, or with the run's budget.

    **Iterations** (``docs/guide/options.md``, "What one iteration is": about one full gradient
    of work each). The start stages count their work in full-gradient equivalents, ``⌈work⌉``
    iterations (a prox or splitting iteration is one, a partition move a fraction, a start
    candidate none); the pair steps count as OBCD's iterations, ``⌈n/2⌉`` pair steps each.
    ``max_iterations`` bounds the whole run, so a budget smaller than the stages' ends the run
    inside a stage; the run loop evaluates and records its history every ``eval_every``
    iterations in every stage (``info["stage_iterations"]``: the stages' share). Each stage also
    has its own budget in its own unit (defaults below: rules of n, the rows, never of the
    instance) and ends early once the run's ``max_time`` has run out
    (:meth:`~orthoplug.solvers.base.Run.out_of_time`). Nothing else reads a clock: the same
    seed and budgets give the same bits on any machine and under any load.

    ``result.info["stages"]`` lists every stage that ran: ``name``, ``unit`` (of
    ``iterations``), ``iterations``, ``gradient_evaluations`` (full-gradient equivalents
    counted by the run's tracker during the stage, float32 ones and the partition search's
    ``A X`` products included; the run loop's evaluations are not in any stage), ``decrease``
    (of F = f + h during the stage; for the pair steps the run's total less the other stages')
    and ``decrease_share`` (of the run's total decrease F(x0) − F); the restarts are one record
    (their ADMM iterations summed) with ``count``, the restarts run. ``info["start"]`` names the
    stages whose points were taken, e.g. ``"diagonal + splitting + partition search"``;
    ``info["point_from"]`` the stage whose point the returned one descends from: the last stage
    whose point was taken (``"x0"`` if none; ``"restart k"`` for the k-th restart), the later
    pair steps, column sweeps and ManPG steps (which only lower F) included.

    Front-ends: pymanopt (:class:`orthoplug.adapters.pymanopt.SparseOBCD`). There is no geoopt
    optimizer: the start stages are not step methods on a parameter (they read the quadratic's
    C and replace the point by jumps); its pair steps alone are geoopt's OBCD.

    Args:
        h: the separable term (as :class:`~orthoplug.solvers.obcd.OBCD`).
        starts: candidate starts besides ``x0``: any of ``"diagonal"``, ``"pca"``; ``()`` keeps
            ``x0``.
        candidates: random pairs compared per pair step, ranked by the exact model, so for a
            quadratic f only (``QuadraticOracle``); 1: OBCD's uniform pairs, on any f.
        column_every: pair steps between two column sweeps (0: none); ``"auto"``: n when f is
            column-invariant (:func:`~orthoplug.solvers.column_sweeps.column_invariant`), else 0.
        start_sweeps: column sweeps applied to each start candidate before comparing them.
        prox_steps: the prox stage's budget; ``"auto"``: n when h is finite and continuous (ℓ1,
            capped ℓ1), else 0 — the polar factor of a thresholded matrix is dense, so for ℓ0
            the stage trades a sparse start for a dense one, and under the nonnegativity
            indicator its iterates are infeasible.
        split_steps: the splitting stage's budget; ``"auto"``: when h is not continuous, 10 n
            (ℓ0) or ``SPLIT_CAP`` n with the partition search (NN-PCA, where the stage's stall
            rule ends it), else 0. Its feasible points have the sparsity pattern of its
            Y-iterates, which pair steps from a dense start do not reach.
        split_smoothing: μβ of :func:`~orthoplug.solvers.sparse_starts.splitting_start`;
            ``"auto"``: 0.1 for an indicator h (the hard projection alone stalls on NN-PCA),
            else 0.
        split_from: where the splitting starts: ``"start"`` (the run's point after the start,
            prox and branch stages) or ``"x0"``; ``"auto"``: ``"x0"`` with the partition
            search, else ``"start"``.
        partition: the partition search stage and the refinement of the splitting's points;
            ``"auto"``: for the nonnegativity indicator (its feasible points are row
            partitions, whose local minima pair steps cannot leave).
        branch_steps: the most ManPG steps of each branch (stage 3; 0: no branches);
            ``"auto"``: 100 n when h is finite and continuous, the run has the ManPG steps of
            stage 8 and ``r ≤ BRANCH_MAX_RANK`` (a ManPG step solves a dense system of
            r(r+1)/2 unknowns, a pair step's cost grows as r), else 0.
        restarts: the most restarts of the splitting stage (stage 9); ``"auto"``: no limit
            (the run's budget ends them) when h is neither continuous nor an indicator (ℓ0:
            the splitting's end point, where pair steps stall, depends on the column rotation
            of its start), else 0. Needs the splitting stage (``split_steps`` > 0) and a
            column-invariant f.
        theta: OBCD's proximal weight θ > 0.
        refresh_every: pair steps between recomputations of ``CX`` (OBCD's fast path).
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options (stopping criteria,
            ``seed``, ``eval_every``, ...).

    Raises:
        ValueError: an unknown start, ``candidates`` outside ``[1, 1024]``, a negative
            budget, an OBCD option that fixes the pairs (``k``, ``pairs``, ``curvature``); at
            run time, column sweeps, starts or restarts requested on a cost they do not apply
            to (not a quadratic ``s·tr(XᵀCX)`` without ``D``), restarts without the splitting
            stage, ``branch_steps > 0`` without the ManPG steps, or ``candidates > 1`` on a cost
            without the exact pair model (not a ``QuadraticOracle``).
    """

    name = "SparseOBCD"
    start_names = ("diagonal", "pca")

    def __init__(self, h: SeparableTerm | None = None, *, starts=("diagonal", "pca"),
                 candidates: int = 16, column_every: int | str = "auto", start_sweeps: int = 1,
                 prox_steps: int | str = "auto", split_steps: int | str = "auto",
                 split_smoothing: float | str = "auto", split_from: str = "auto",
                 partition: bool | str = "auto", restarts: int | str = "auto",
                 branch_steps: int | str = "auto", theta: float = 1e-5,
                 refresh_every: int = 10_000, **kwargs):
        for key in ("k", "pairs", "curvature", "sigma_rule", "sweeps"):
            if key in kwargs:
                raise ValueError(f"SparseOBCD uses k = 2, the exact curvature and its own "
                                 f"pairs; {key}= is not an option here")
        super().__init__(h, pairs="random" if candidates == 1 else "greedy",
                         candidates=candidates, theta=theta, refresh_every=refresh_every,
                         **kwargs)
        bad = [s for s in starts if s not in self.start_names]
        if bad:
            raise ValueError(f"unknown start(s) {bad}; choose from {self.start_names}")
        if column_every != "auto" and not (isinstance(column_every, int) and column_every >= 0):
            raise ValueError(f"column_every must be 'auto' or an integer >= 0, got "
                             f"{column_every!r}")
        if not (isinstance(start_sweeps, int) and start_sweeps >= 0):
            raise ValueError(f"start_sweeps must be an integer >= 0, got {start_sweeps!r}")
        for key, value in (("prox_steps", prox_steps), ("split_steps", split_steps),
                           ("restarts", restarts), ("branch_steps", branch_steps)):
            if value != "auto" and not (isinstance(value, int) and value >= 0):
                raise ValueError(f"{key} must be 'auto' or an integer >= 0, got {value!r}")
        if split_smoothing == "auto":
            split_smoothing = 0.1 if self.h.is_indicator else 0.0
        if not (isinstance(split_smoothing, (int, float)) and split_smoothing >= 0):
            raise ValueError(f"split_smoothing must be 'auto' or a number >= 0, got "
                             f"{split_smoothing!r}")
        if partition == "auto":
            partition = self.h.is_indicator
        if partition and not self.h.is_indicator:
            raise ValueError("partition search applies to the nonnegativity indicator only")
        self.partition = bool(partition)
        if split_from == "auto":
            split_from = "x0" if self.partition else "start"
        if split_from not in ("x0", "start"):
            raise ValueError(f"split_from must be 'auto', 'x0' or 'start', got {split_from!r}")
        self.prox_steps_user, self.split_steps_user = prox_steps, split_steps
        self.restarts_user, self.branch_steps_user = restarts, branch_steps
        self.split_smoothing, self.split_from = float(split_smoothing), split_from
        self.starts = tuple(starts)
        self.column_every_user, self.start_sweeps = column_every, start_sweeps

    def budgets(self, n: int, r: int) -> dict[str, int]:
        """The stage budgets for St(n, r): ``prox_steps``, ``split_steps`` and ``branch_steps``
        (the class docstring's rules where ``"auto"``; ``branch_steps`` before the check that
        the run has ManPG steps) and ``partition_moves`` (100 n)."""
        continuous = self.h.piecewise.continuous
        prox, split = self.prox_steps_user, self.split_steps_user
        branch = self.branch_steps_user
        return {"prox_steps": (n if continuous else 0) if prox == "auto" else prox,
                "split_steps": (0 if continuous else SPLIT_CAP * n if self.partition else 10 * n)
                if split == "auto" else split,
                "branch_steps": (100 * n if continuous and not self.h.is_indicator
                                 and r <= BRANCH_MAX_RANK else 0)
                if branch == "auto" else branch,
                "partition_moves": 100 * n if self.partition else 0}

    def setup(self, run):
        super().setup(run)
        tracker = run.tracker
        invariant = column_invariant(tracker.oracle)
        restarts = self.restarts_user
        asked = (self.starts or self.column_every_user not in ("auto", 0)
                 or restarts not in ("auto", 0))
        if asked and not invariant:
            raise ValueError("data starts, column sweeps and restarts need f = s·tr(XᵀCX) "
                             "without D (a QuadraticOracle, so that f(XQ) = f(X)); pass "
                             "starts=(), column_every=0 and restarts=0 for other costs")
        every = self.column_every_user
        run.column_every = (tracker.x.shape[0] if invariant else 0) if every == "auto" else every
        run.budgets = self.budgets(*tracker.x.shape[-2:])
        if restarts == "auto":
            l0_like = not (self.h.piecewise.continuous or self.h.is_indicator)
            restarts = math.inf if l0_like and run.budgets["split_steps"] and invariant else 0
        elif restarts and not run.budgets["split_steps"]:
            raise ValueError("restarts rerun the splitting stage: they need split_steps > 0 "
                             "(pass restarts=0 without it)")
        run.restarts = restarts
        run.pipeline = None
        run.stages, run.start_chosen, run.point_from = [], "x0", "x0"
        run.stage_work, run.stage_iterations, run.stages_done = 0.0, 0, False
        run.split_start, run.restarts_done, run.window = None, 0, None
        run.restarts_futile = False
        run.column_sweeps_done, run.sweep_decrease, run.pair_gradients = 0, 0.0, 0.0
        run.manpg_steps, run.manpg_decrease, run.manpg_gradients = 0, 0.0, 0.0
        run.manpg_solver = run.manpg = None
        if (self.h.piecewise.continuous and not self.h.is_indicator and run.column_every
                and tracker.oracle.lipschitz):
            run.manpg_solver = ManPG(self.h)
            run.manpg = Run(run.oracle, tracker, run.geometry, run.generator)
            run.manpg_solver.setup(run.manpg)
        elif self.branch_steps_user == "auto":
            run.budgets["branch_steps"] = 0
        elif self.branch_steps_user:
            raise ValueError("branches are ManPG trajectories: they need a continuous h (ℓ1, "
                             "capped ℓ1), an oracle with a Lipschitz constant and column "
                             "sweeps (pass branch_steps=0 otherwise)")
        run.branch_ends = []

    def _objective(self, run, x: torch.Tensor) -> float:
        return float(run.tracker.oracle.value(x)) + float(self.h.value(x))

    def _prepared(self, run, x: torch.Tensor) -> tuple[torch.Tensor, float]:
        """A start candidate in the run's dtype, rounded to the feasible set for an indicator h
        and after ``start_sweeps`` column sweeps; with its F."""
        x = x.to(dtype=run.x0.dtype, device=run.x0.device)
        if self.h.is_indicator:  # e.g. PCA has negative entries: its nearest feasible point
            x = nonneg_rounding(x)
        if self.start_sweeps:
            x = column_rotations(x, self.h, run.generator, self.start_sweeps)
        return x, self._objective(run, x)

    def _stage(self, run, name: str, items):
        """Run one stage, yielding after each of its items: ``items`` yields ``(point, its F,
        iterations so far)``; a point of lower F than the run's replaces it; the work of each
        item (its gradients) is added to ``run.stage_work``; the stage ends when ``items`` does
        or the run is out of time (or closed: the run's budget ended); its record goes to
        ``run.stages``."""
        tracker = run.tracker
        before, gradients, done = run.f, 0.0, 0
        items = iter(items)
        try:
            while not run.out_of_time():
                start = tracker.gradient_evaluations
                item = next(items, None)
                work = tracker.gradient_evaluations - start
                gradients += work
                run.stage_work += work
                if item is None:
                    break
                x, fx, done = item
                if fx < run.f:  # F never rises in a run (and an infinite F is never taken)
                    tracker.set_point(x.contiguous())
                    run.f = fx
                    if name == "restarts":
                        run.point_from = f"restart {run.restarts_done}"
                    elif name == "start":
                        run.point_from = run.start_chosen
                    else:
                        run.point_from = name
                        if not run.start_chosen.endswith(name):
                            run.start_chosen += f" + {name}"
                yield
        finally:
            run.stages.append({"name": name, "unit": STAGE_UNITS[name], "iterations": done,
                               "gradient_evaluations": gradients, "decrease": before - run.f})

    def _candidates(self, run):
        """The start stage's items: each start candidate, prepared, with its F (the lowest
        names the start in ``run.start_chosen``); the prepared points are kept in
        ``run.start_points`` (after ``x0``) for the prox stage."""
        found = start_candidates(run.tracker.oracle, run.x0.shape[1], self.starts)
        for count, (name, x) in enumerate(found.items(), start=1):
            x, fx = self._prepared(run, x)
            run.start_points[name] = x
            if math.isfinite(fx) and fx < run.f:
                run.start_chosen = name
            yield x, fx, count

    def _prox(self, run):
        """The prox stage's items: :func:`~orthoplug.solvers.sparse_starts.prox_polar` from
        each of ``run.start_points`` (the lowest end names its start in
        ``run.start_chosen``); the ends are kept in ``run.prox_ends`` for the branches."""
        done = 0
        for name, start in run.start_points.items():
            if done and run.out_of_time():
                return
            x, fx, steps = prox_polar(start, run.tracker.oracle, self.h,
                                      run.budgets["prox_steps"], momentum=True, patience=20,
                                      stop=run.out_of_time, gradient=run.tracker.gradient_at)
            done += steps
            run.prox_ends[f"{name} + prox"] = x
            if fx < run.f:
                run.start_chosen = name
            yield x, fx, done

    def _branches(self, run):
        """The branches stage's items (class docstring, stage 3): ManPG's trajectory from
        ``x0`` to its stall at ``BRANCH_TOLERANCE``, then from each other of
        ``run.start_points`` and ``run.prox_ends`` for at most as many steps, to its stall at
        ``RESTART_TOLERANCE``; the lowest of those, if lower than ``x0``'s end, on to its stall at
        ``BRANCH_TOLERANCE``. An item every ``BRANCH_WINDOW`` steps (its point is taken when
        lower than the run's, naming its start in ``run.start_chosen``)."""
        done, kept, most = 0, None, run.budgets["branch_steps"]

        def trajectory(name, branch, tolerance, most):
            steps = fx = 0
            for steps, fx in self._branch_steps(run, branch, tolerance, most):
                if fx < run.f:
                    run.start_chosen = name
                yield branch.tracker.x, fx, done + steps
            run.branch_ends.append({"start": name, "steps": steps, "F": fx})

        for name, start in {**run.start_points, **run.prox_ends}.items():
            if done and run.out_of_time():
                break
            branch = Run(run.oracle, run.oracle.track(start), run.geometry, run.generator)
            run.manpg_solver.setup(branch)
            own = name == "x0"  # x0's own trajectory: the others get as many steps
            yield from trajectory(name, branch,
                                  BRANCH_TOLERANCE if own else RESTART_TOLERANCE, most)
            end = run.branch_ends[-1]
            if own:
                most = end["steps"]
            done += end["steps"]
            if kept is None or end["F"] < kept[2]:
                kept = (name, branch, end["F"])
        if kept is None:
            return
        name, branch, _ = kept
        if name != "x0" and not run.out_of_time():
            yield from trajectory(name, branch, BRANCH_TOLERANCE, run.budgets["branch_steps"])
            run.branch_ends[-1]["continued"] = True
        if run.point_from == "branches":  # the later ManPG steps go on with its step and Λ
            run.manpg.t, run.manpg.lam = branch.t, branch.lam

    def _branch_steps(self, run, branch, tolerance: float, most: int):
        """ManPG steps on a branch (a :class:`~orthoplug.solvers.base.Run` with a tracker of
        its own; its gradients counted on the run's) until a window of ``BRANCH_WINDOW`` steps
        lowers F by at most ``tolerance·|F|``, after ``most`` steps, or once the run is out of
        time; yields ``(steps, F)`` after each window and at the end."""
        tracker = branch.tracker
        counted = tracker.gradient_evaluations

        def objective() -> float:
            return float(tracker.value()) + float(self.h.value(tracker.x))

        window, steps, stalled = objective(), 0, False
        while not stalled and steps < most and not (steps and run.out_of_time()):
            run.manpg_solver.step(branch)
            steps += 1
            if steps % BRANCH_WINDOW and steps < most:
                continue
            f = objective()
            stalled, window = _stalled(window, f, tolerance), f
            run.tracker.count_gradients(tracker.gradient_evaluations - counted)
            counted = tracker.gradient_evaluations
            yield steps, f
        if steps % BRANCH_WINDOW and steps < most:  # out of time inside a window
            run.tracker.count_gradients(tracker.gradient_evaluations - counted)
            yield steps, objective()

    def _splitting(self, run, start: torch.Tensor):
        """The splitting stage's items
        (:func:`~orthoplug.solvers.sparse_starts.splitting_iterates`) from ``start``."""
        tracker = run.tracker
        refine = None
        if self.partition:
            def refine(x):
                return partition_search(x, tracker.oracle, polish=5,
                                        max_moves=run.budgets["partition_moves"],
                                        stop=run.out_of_time,
                                        count_gradients=tracker.count_gradients)[:2]
        gradient, dtype = _low_precision_gradient(tracker, start)
        pace = {}
        if self.partition:
            every = max(1, round(SPLIT_REFINE_EVERY * start.shape[0]))
            pace = {"refine_every": every,
                    "patience": max(1, round(SPLIT_STALL * start.shape[0] / every))}
        return splitting_iterates(start, tracker.oracle, self.h, run.budgets["split_steps"],
                                  smoothing=self.split_smoothing,
                                  gradient=gradient or tracker.gradient_at, refine=refine,
                                  dtype=dtype, tangent=self.partition, **pace)

    def _pipeline(self, run):
        """The start stages (class docstring), in order, yielding after each item of each."""
        tracker = run.tracker
        run.start_points = {"x0": run.x0}
        budgets = run.budgets
        yield from self._stage(run, "start", self._candidates(run) if self.starts else ())
        start = tracker.x.clone()
        run.prox_ends = {}
        if budgets["prox_steps"] and not run.out_of_time():
            yield from self._stage(run, "prox", self._prox(run))
        if budgets["branch_steps"] and not run.out_of_time():
            yield from self._stage(run, "branches", self._branches(run))
        run.split_start = tracker.x.clone()
        if budgets["split_steps"] and not run.out_of_time():
            split_start = run.x0 if self.split_from == "x0" else run.split_start
            yield from self._stage(run, "splitting", self._splitting(run, split_start))
        if self.partition:
            # rounded: a point with tiny overlapping entries is no partition (an exact one is
            # its own rounding up to rounding errors; a point no lower is never taken)
            for x in (start, None):
                if run.out_of_time():
                    break
                x = nonneg_rounding(tracker.x if x is None else x)
                yield from self._stage(run, "partition search",
                                       partition_moves(x, tracker.oracle,
                                                       max_moves=budgets["partition_moves"],
                                                       count_gradients=tracker.count_gradients))

    def _restart(self, run):
        """One restart (class docstring, stage 9): the splitting stage from the start stages'
        point after fresh column sweeps, as a ``"restarts"`` stage."""
        run.restarts_done += 1
        x = column_rotations(run.split_start, self.h, run.generator, max(1, self.start_sweeps))
        best = [self._objective(run, x)]
        start = best[0]

        def items():
            for item in self._splitting(run, x):
                best[0] = item[1]
                yield item

        yield from self._stage(run, "restarts", items())
        run.restarts_futile = best[0] >= start

    def _restart_due(self, run) -> bool:
        """Whether to begin a restart now (class docstring, stage 9): restarts remain, none
        has ended at its own start, and either the last stage was a restart whose point was not
        taken or the window of ``RESTART_WINDOW`` pair-step iterations since the last check
        lowered F by at most ``RESTART_TOLERANCE·|F|`` (checked when the window is full; a new
        window begins at each check and when the stages end)."""
        if run.restarts_done >= run.restarts or run.restarts_futile or run.out_of_time():
            return False
        if run.window is None:  # the stages just ended
            last = run.stages[-1]
            if last["name"] == "restarts" and last["decrease"] <= 0:
                return True
            run.window = [RESTART_WINDOW, run.f]
            return False
        if run.window[0] > 0:
            return False
        f = self._objective(run, run.tracker.x)
        stalled = _stalled(run.window[1], f, RESTART_TOLERANCE)
        run.window = [RESTART_WINDOW, f]
        if stalled:
            run.f = f
        return stalled

    def _stage_steps(self, run, count: int) -> int:
        """Up to ``count`` iterations of the start stages: their items run until their work
        (gradients, ``run.stage_work``) reaches the iterations counted so far plus ``count``;
        returns the iterations counted now, ``⌈work⌉`` less those counted before, between 1 and
        ``count`` (an item of more work is counted over the next calls), or 0 once the stages
        have ended with no work left to count."""
        if run.pipeline is None:
            run.x0 = run.tracker.x.clone()
            run.f = run.f0 = self._objective(run, run.x0)
            run.pipeline = self._pipeline(run)
        while not run.stages_done and run.stage_work < run.stage_iterations + count:
            if next(run.pipeline, StopIteration) is StopIteration:
                run.stages_done = True
        owed = math.ceil(run.stage_work) - run.stage_iterations
        if run.stages_done and owed <= 0:
            return 0
        done = min(count, max(1, owed))
        run.stage_iterations += done
        return done

    @staticmethod
    def _in_stages(run) -> bool:
        """Whether the next iteration belongs to the start stages (running, or owed to the work
        of their last item)."""
        return not run.stages_done or run.stage_iterations < math.ceil(run.stage_work)

    def _sweep_if_due(self, run) -> None:
        """A column sweep after every ``column_every`` pair steps (kept if it lowers h); on the
        compiled path in place on the tracker's ``X`` and ``CX`` (f is unchanged)."""
        if run.column_every and run.count % run.column_every == 0:
            tracker = run.tracker
            run.column_sweeps_done += 1
            if run.kernel:
                run.sweep_decrease += _column_sweep(tracker.xa, tracker.ya, self.h,
                                                    run.generator)
            else:
                before = float(self.h.value(tracker.x))
                x = column_rotations(tracker.x, self.h, run.generator)
                after = float(self.h.value(x))
                if after < before:
                    tracker.set_point(x.contiguous())
                    run.sweep_decrease += before - after
            self._prox_gradient_step(run)

    def _prox_gradient_step(self, run) -> None:
        """One ManPG step on the run's tracker (class docstring, stage 8; continuous h with a
        Lipschitz oracle only; ManPG's state — step t, multiplier Λ — lives on
        ``run.manpg``)."""
        if run.manpg is None:
            return
        tracker = run.tracker
        before, gradients = self._objective(run, tracker.x), tracker.gradient_evaluations
        run.manpg_solver.step(run.manpg)
        run.manpg_steps += 1
        run.manpg_decrease += before - self._objective(run, tracker.x)
        run.manpg_gradients += tracker.gradient_evaluations - gradients

    def steps(self, run, count):
        """The start stages' iterations first (:meth:`_stage_steps`); then on OBCD's compiled
        pair loop (quadratic f, float64 CPU) the ``count × run.updates`` pair steps of ``count``
        iterations in the kernel, cut at each column sweep; elsewhere OBCD's steps (the same
        pairs, the greedy candidates ranked by the same model decrease). The compiled loop
        ends with the iteration under way at a column sweep once the run's ``max_time`` has run
        out (one call can span many sweeps; the run loop reads the clock between calls
        only). With restarts, the pair steps stop at each stall check (:meth:`_restart_due`),
        and a due restart's iterations follow as the stages' do."""
        if self._in_stages(run):
            done = self._stage_steps(run, count)
            if done:
                return done
        if run.restarts and self._restart_due(run):
            run.window, run.stages_done = None, False
            run.pipeline = self._restart(run)
            done = self._stage_steps(run, count)
            if done:
                return done
        if run.window is not None:
            count = min(count, run.window[0])
        done = self._pair_iterations(run, count)
        if run.window is not None:
            run.window[0] -= done
        return done

    def _pair_iterations(self, run, count: int) -> int:
        """``count`` iterations of pair steps (and their column sweeps): :meth:`steps` after the
        stages."""
        if not run.kernel:
            return super().steps(run, count)
        todo, done = count * run.updates, 0
        while done < todo:
            take = todo - done
            if run.column_every:
                take = min(take, run.column_every - run.count % run.column_every)
            gradients = run.tracker.gradient_evaluations
            self.pair_steps(run, take)
            run.pair_gradients += run.tracker.gradient_evaluations - gradients
            self._sweep_if_due(run)
            done += take
            if done < todo and run.out_of_time():  # end with the iteration under way
                todo = min(todo, math.ceil(done / run.updates) * run.updates)
        return todo // run.updates

    def greedy_refusal(self, tracker) -> str:
        """The error of ``candidates > 1`` on a cost without the exact pair model."""
        return (f"SparseOBCD: candidates={self.candidates} ranks pairs by their exact model, "
                f"which needs a quadratic f (QuadraticOracle), got "
                f"{tracker.oracle.__class__.__name__}; pass candidates=1 (with starts=() and "
                f"column_every=0) for other costs")

    def step(self, run):
        gradients = run.tracker.gradient_evaluations
        super().step(run)
        run.pair_gradients += run.tracker.gradient_evaluations - gradients
        self._sweep_if_due(run)

    def finalize(self, run, result) -> None:
        """OBCD's ``info["f"]``, ``info["h"]``, and ``info["stages"]`` (class docstring)."""
        super().finalize(run, result)
        if run.pipeline is None:
            result.info.update(stages=[], stage_iterations=0)
            return
        if not run.stages_done:  # the run's budget ended during a stage: record it
            run.pipeline.close()
        restarts = [s for s in run.stages if s["name"] == "restarts"]
        stages = [s for s in run.stages if s["name"] != "restarts"]
        for stage in stages:
            if stage["name"] == "branches":
                stage["ends"] = run.branch_ends
        if restarts:
            stages.append({"name": "restarts", "unit": STAGE_UNITS["restarts"],
                           "iterations": sum(s["iterations"] for s in restarts),
                           "gradient_evaluations": sum(s["gradient_evaluations"]
                                                       for s in restarts),
                           "decrease": sum(s["decrease"] for s in restarts),
                           "count": len(restarts)})
        pairs = (run.f0 - result.cost - sum(s["decrease"] for s in stages) - run.sweep_decrease
                 - run.manpg_decrease)
        stages = [*stages,
                  {"name": "pair steps", "unit": STAGE_UNITS["pair steps"],
                   "iterations": run.count, "gradient_evaluations": run.pair_gradients,
                   "decrease": pairs}]
        if run.column_every:
            stages.append({"name": "column sweeps", "unit": STAGE_UNITS["column sweeps"],
                           "iterations": run.column_sweeps_done, "gradient_evaluations": 0.0,
                           "decrease": run.sweep_decrease})
        if run.manpg is not None:
            stages.append({"name": "prox-gradient steps",
                           "unit": STAGE_UNITS["prox-gradient steps"],
                           "iterations": run.manpg_steps,
                           "gradient_evaluations": run.manpg_gradients,
                           "decrease": run.manpg_decrease})
        total = run.f0 - result.cost
        for stage in stages:
            stage["decrease_share"] = stage["decrease"] / total if total > 0 else 0.0
        result.info["stages"] = stages
        result.info["stage_iterations"] = run.stage_iterations

    def info(self, run=None):
        return {**super().info(run),
                "start": None if run is None else run.start_chosen,
                "point_from": None if run is None else run.point_from,
                "budgets": None if run is None else run.budgets}
