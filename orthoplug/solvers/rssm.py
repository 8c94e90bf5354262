r"""RSSM: randomized submanifold subgradient method on St(n, p) (Cheung, Wang, Yue, So 2024).

Problem: ``min f(X)`` over ``X ∈ St(n, p)``, ``f`` weakly convex and Lipschitz, possibly
nonsmooth (robust subspace recovery, orthogonal dictionary learning, ℓ1 sparse PCA), or
``f + h`` with a smooth ``f`` and a separable nonsmooth term ``h`` from
:mod:`orthoplug.nonsmooth`.

Fix a partition ``C_1, …, C_ℓ`` of the p columns (``ℓ ≥ 2``; balanced by default). Block step k
(the paper's iteration):

1. draw an unordered pair ``{i, j}`` uniformly from the ``ℓ(ℓ−1)/2`` pairs; ``C = C_i ∪ C_j``,
   ``R`` the other columns;
2. ``G = ∂^C f(X)``: columns C of one Euclidean (Clarke) subgradient — only those columns when
   the oracle can give them (``gradient_columns``), otherwise the full subgradient is sliced;
3. ``ξ = X_C skew(X_CᵀG) + (I − XXᵀ) G`` (formula (15), the partial Riemannian subgradient);
4. ``X_C ← P_M(X_C − γ_k ξ) = polar((I − X_R X_Rᵀ)(X_C − γ_k ξ))`` (formula (16) with the
   re-orthogonalisation of Lemma 3.2, see :func:`~orthoplug.geometry.stiefel_block.block_update`);
   ``X_R`` is not touched (bit for bit).

Cost per block step ``O(n p p_C)`` flops with ``p_C = |C| ≈ 2p/ℓ`` plus the partial
subgradient; memory ``O(n p)``; no ``n × n`` matrix. ``ℓ = 2`` is the full polar Riemannian
subgradient method (:class:`orthoplug.baselines.rsubgrad.RSubGrad`).

**Iterations.** One iteration is one pass over the columns in expectation, about the work of
one full subgradient (``docs/guide/options.md``, "What one iteration is"): ``⌈ℓ/2⌉`` block steps
(each moves ``2/ℓ`` of the columns) when the oracle computes gradient columns alone
(:attr:`~orthoplug.oracles.core.Oracle.column_gradients`: the column oracles below), else one
block step (each then pays a full subgradient). The step rules count block steps — the paper's
k in ``γ₀/√(k+1)`` — and epochs of ``⌈ℓ/2⌉`` block steps (Geometric's β, Polyak's patience),
so the iterates do not depend on which oracle path ran. ``info`` reports ``block_steps`` and
``updates_per_iteration``.

Step sizes: one option, ``step_size``, takes a rule of :mod:`orthoplug.solvers.step_rules`
or its shorthand (a number ``γ₀`` is ``Diminishing(γ₀)``, a name the rule with its defaults).
The default :class:`~orthoplug.solvers.step_rules.Polyak` (``γ_k = (f(X_k) − f̂_k)/‖ξ‖²`` with
an estimated optimum and a path condition on its level; outside the paper) needs no ``γ₀``;
the paper's rules are :class:`~orthoplug.solvers.step_rules.Diminishing` (``γ₀/√(k+1)``, Thm 4.9b),
:class:`~orthoplug.solvers.step_rules.Constant` and, for sharp problems,
:class:`~orthoplug.solvers.step_rules.Geometric`; the theory needs ``γ_k < 1/L`` (L the
Lipschitz constant of f).

Subgradient methods are not monotone: every evaluation also records the best cost so far
(``history["best_cost"]``, ``info["best_cost"]``, ``result.best_point``); ``return_best=True``
returns the best evaluated point instead of the last iterate.

Oracles with column access
--------------------------
A tracker may provide ``gradient_columns(cols)`` (columns ``cols`` of the subgradient at its
point) and ``set_columns(cols, new)`` (write ``X[:, cols] = new`` and update its caches).
:class:`~orthoplug.oracles.columns.ColumnOracle` (callables) and
:class:`~orthoplug.oracles.columns.CompositeOracle` (``f + h``) provide them; so do the
problems in :mod:`orthoplug.problems.nonsmooth_problems`, whose trackers cache ``YᵀX`` and
refresh only the changed columns. Any other :class:`~orthoplug.oracles.core.Oracle` works too
(full subgradient per block step, sliced).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from orthoplug._random import randint
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.geometry.stiefel_block import (
    block_update,
    complement,
    partition_columns,
    polar_tall,
    take_columns,
)
from orthoplug.nonsmooth import SeparableTerm
from orthoplug.oracles import (
    ColumnTracker,
    CompositeOracle,
    NonFiniteError,
    Oracle,
    SubgradientTerm,
    all_finite,
    partial_subgradient,
    write_columns,
)

from .base import IterativeSolver, Run, SolverResult
from .obcd import OBCD, require_compiled_search
from .pairs import draw_block_pair, matching_pairs
from .step_rules import StepRule, SubgradientSteps, step_rule

__all__ = [
    "RSSM",
    "SubgradientSolver",
    "block_subgradient_sq",
    "auto_step_size",
    "column_pair",
]

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


def column_pair(blocks: list[torch.Tensor], i: int, j: int,
                p: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(C, R)``: the columns of blocks ``i`` and ``j`` (in block order) and the others."""
    cols = torch.cat([blocks[min(i, j)], blocks[max(i, j)]])
    return cols, complement(cols, p)


def auto_step_size(rgrad: torch.Tensor, move: float = 0.5) -> float:
    """``γ₀ = move/‖ξ‖`` for the Riemannian (sub)gradient ``ξ`` at the start (RMS of the
    Frobenius norms over a batch of matrices), so that a first full step moves X by about
    ``move``; 1 when ``ξ = 0``."""
    count = max(1, rgrad.numel() // (rgrad.shape[-1] * rgrad.shape[-2]))
    norm = float(torch.linalg.vector_norm(rgrad)) / math.sqrt(count)
    return move / norm if norm > 0 else 1.0


def block_step(x: torch.Tensor, cols: torch.Tensor, rest: torch.Tensor, g: torch.Tensor,
               steps: SubgradientSteps, f: Callable[[], float], *,
               project_step: bool = True) -> torch.Tensor:
    """One RSSM step of the columns ``C = cols`` of ``X`` (not written): ``γ_k`` from ``steps``
    (``f()`` gives ``f(X)`` to the adaptive rules), then
    :func:`~orthoplug.geometry.stiefel_block.block_update` with the partial subgradient ``g``.

    Raises:
        NonFiniteError: if the new block is not finite.
    """
    gamma = steps.length(f, lambda: block_subgradient_sq(x, cols, rest, g),
                         cols.numel() / x.shape[-1])
    new = block_update(x, cols, g, gamma, rest, project_step=project_step)
    if not all_finite(new):
        raise NonFiniteError("non-finite block update")
    return new


# ---------------------------------------------------------------------------------------------
# Solvers
# ---------------------------------------------------------------------------------------------


class SubgradientSolver(IterativeSolver):
    """Shared parts of RSSM and RSubGrad: step rules, ``f + h``, best-so-far tracking, the
    final proximal pass.

    A subclass implements :meth:`update` (one subgradient update of ``run.tracker``, with the
    step length from :meth:`step_length`); :meth:`step` then counts the iteration in
    ``run.steps`` (a :class:`~orthoplug.solvers.step_rules.SubgradientSteps`) and applies a
    restart of :class:`~orthoplug.solvers.step_rules.GeometricOnStall`. Subclasses that need more
    per-run state extend :meth:`setup` (calling ``super().setup(run)`` last, so that
    ``run.steps`` sees the final point).

    Args:
        step_size: the step rule: an object of :mod:`orthoplug.solvers.step_rules`
            (``Polyak(level, patience)``, ``Diminishing(step)``, ``Constant(step)``,
            ``Geometric(step, decay)``, ``GeometricOnStall(step, decay, patience, shrink)``), a
            number ``γ₀`` (``Diminishing(γ₀)``) or a rule name (that rule with its defaults).
            Default ``"polyak"``: scale-free, no ``γ₀`` to choose. ``step="auto"`` in the
            fixed schedules is ``γ₀ = 0.5/‖grad f(X₀)‖_F``. The rules count updates (RSSM's
            block steps, RSubGrad's iterations) and epochs (:meth:`epoch_length` updates).
        h: optional separable term h (``orthoplug.nonsmooth.L1(lam)`` etc.); the objective
            becomes ``f + h`` with subgradient ``∇f + ∂h``.
        return_best: return the best evaluated point (and its cost) instead of the last one.
        final_prox: with a separable ``h`` (:class:`~orthoplug.nonsmooth.SeparableTerm`), end
            with a proximal pass that gives the point exact zeros (see :meth:`final_prox_pass`);
            default True.
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options.

    The result's ``best_point``, ``best_cost``, ``best_iteration`` are the lowest-cost evaluated
    point (or the final one), also in ``info["best_cost"]``, ``info["best_iteration"]``;
    ``history["best_cost"]`` is the best cost so far at each evaluation.
    """

    #: Frobenius length of the first step under ``step="auto"``.
    auto_move = 0.5
    history_fields = ("best_cost",)

    def __init__(self, *, step_size: StepRule | float | str = "polyak", h=None,
                 return_best: bool = False, final_prox: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.step_rule = step_rule(step_size)
        if h is not None and not isinstance(h, SubgradientTerm):
            raise ValueError("h must have value(X) and subgradient(X) (e.g. "
                             "orthoplug.nonsmooth.L1)")
        self.h = h
        self.return_best = bool(return_best)
        self.final_prox = bool(final_prox)

    def prepare(self, oracle: Oracle, x0: torch.Tensor, geometry) -> Oracle:
        """Check the geometry (:meth:`check_geometry`) and the shape of ``x0``; wrap the oracle
        in a :class:`~orthoplug.oracles.columns.CompositeOracle` when ``h`` is given."""
        self.check_geometry(geometry)
        if x0.ndim != 2:
            raise ValueError(f"{self.name} optimises one n × p matrix, got shape "
                             f"{tuple(x0.shape)}")
        if self.final_prox and isinstance(self.h, SeparableTerm):  # before any work, not at the end
            require_compiled_search(x0, f"{self.name} (final_prox=True; final_prox=False runs "
                                        "anywhere)")
        return oracle if self.h is None else CompositeOracle(oracle, self.h)

    def check_geometry(self, geometry) -> None:
        """Raise ``ValueError`` unless the geometry is Stiefel (or Grassmann representatives)."""
        if not isinstance(geometry, StiefelGeometry):
            raise ValueError(f"{self.name} runs on the Stiefel manifold (or Grassmann "
                             f"representatives); got {geometry!r}")

    def setup(self, run: Run) -> None:
        run.best_cost, run.best_point, run.best_iteration = math.inf, None, 0
        tracker = run.tracker
        run.steps = SubgradientSteps.build(
            self.step_rule, f0=lambda: float(tracker.value()),
            auto_step=lambda: auto_step_size(
                run.geometry.egrad2rgrad(tracker.x, tracker.gradient()), self.auto_move),
            epoch_length=self.epoch_length(run), share=self.epoch_share(run))

    def epoch_length(self, run: Run) -> int:
        """Updates per epoch (every column moved once in expectation): 1 here."""
        return 1

    def epoch_share(self, run: Run) -> float:
        """The share of the columns one update moves: 1 here."""
        return 1.0

    def step_length(self, run: Run, xi_sq: Callable[[], float], share: float) -> float:
        """γ_k of the run's rule; ``xi_sq()`` gives ``‖ξ_k‖²`` (only Polyak calls it) and
        ``share`` the share of the columns this update moves."""
        return run.steps.length(lambda: float(run.tracker.value()), xi_sq, share)

    def step(self, run: Run) -> None:
        """One update (:meth:`update`), counted by the step rule (it may restart the point)."""
        self.update(run)
        tracker = run.tracker
        back = run.steps.finish(lambda: float(tracker.value()), tracker.x)
        if back is not None:
            tracker.set_point(back)

    def update(self, run: Run) -> None:
        """One subgradient update of ``run.tracker``'s point (the method-specific part)."""
        raise NotImplementedError

    def on_evaluation(self, run: Run, cost: float, gradient_norm: float,
                      violation: float) -> dict[str, float]:
        """Keep the best evaluated point on the run; the history's ``best_cost``."""
        if cost < run.best_cost:
            run.best_cost, run.best_iteration = cost, run.iteration
            run.best_point = run.tracker.x.clone()
        return {"best_cost": run.best_cost}

    def finalize(self, run: Run, result: SolverResult) -> None:
        """Fill ``best_point``/``best_cost``/``best_iteration``; with ``return_best`` return the
        best point."""
        result.point = result.point.contiguous()
        if run.best_point is None or not result.cost > run.best_cost:
            best, best_cost, best_it = result.point, result.cost, result.iterations
        else:
            best, best_cost, best_it = run.best_point, run.best_cost, run.best_iteration
        result.best_point, result.best_cost, result.best_iteration = (
            best.contiguous(), best_cost, best_it)
        result.info.update(best_cost=best_cost, best_iteration=best_it)
        if self.return_best and best_it != result.iterations:
            at_best = Run(run.oracle, run.oracle.track(result.best_point), run.geometry,
                          run.generator)
            result.cost, result.gradient_norm, result.violation = self.measure(at_best)
            result.point = result.best_point
            result.stop_reason += f"; returning the best point (iteration {best_it})"
        if self.final_prox and isinstance(self.h, SeparableTerm):
            self.final_prox_pass(run, result)

    def final_prox_pass(self, run: Run, result: SolverResult) -> None:
        r"""End with exact zeros: about ``n`` row-pair steps of
        :class:`~orthoplug.solvers.obcd.OBCD` on ``F = f + h`` from the returned point.

        A subgradient method's iterates oscillate around the zeros of a sparse optimum (they
        step along ``∂h``, never onto its kinks). An OBCD step ``X[B] ← V X[B]`` (rows ``B``,
        ``V ∈ O(2)``) keeps ``XᵀX`` exactly and minimises a majoriser of ``F`` with the prox of
        h exactly (breakpoint search), so it lands on zeros and never increases F. The pass
        is accepted only if F does not increase (it cannot in exact arithmetic); the result's
        point, cost, gradient norm and violation are then those of the new point, and
        ``info["final_prox"]`` records ``F`` and the count of zero entries before and after
        (and whether the pass was accepted). The random pairs are drawn from the run's
        generator (deterministic for a seeded run).
        """
        x = result.point
        seed = int(randint(2**31 - 1, (1,), generator=run.generator))
        n = x.shape[-2]
        # about n pair steps: two OBCD iterations when each is a pass over the rows (⌈n/2⌉ pair
        # steps, row-gradient oracles), else n iterations of one pair step each
        iterations = 2 if run.oracle.smooth.track(x).row_gradients else n
        polish = OBCD(self.h, pairs="random", max_iterations=iterations, eval_every=iterations,
                      log_verbosity=0, seed=seed)
        res = polish.run(run.oracle.smooth, x, run.geometry)
        before, after = result.cost, res.cost
        accepted = after <= before
        record = {"cost_before": before, "cost_after": after,
                  "pair_steps": res.info["block_updates"],
                  "zeros_before": int((x == 0).sum()), "zeros_after": int((res.point == 0).sum()),
                  "accepted": accepted}
        result.info["final_prox"] = record
        if accepted:
            result.point = res.point.contiguous()
            result.cost, result.gradient_norm, result.violation = self.measure(
                Run(run.oracle, run.oracle.track(result.point), run.geometry, run.generator))

    def iterate(self, oracle: Oracle, x0: torch.Tensor, geometry):
        """Yield the tracker after every iteration (:meth:`updates_per_iteration` updates),
        forever: no stopping test, evaluation or logging (for benchmarks that time the
        iterations alone, and custom loops).

        ``tracker.x`` is the current iterate (do not modify it). Same validation, seeding and
        step sizes as :meth:`run` (:meth:`start`).
        """
        run = self.start(oracle, x0, geometry)
        while True:
            run.iteration += self.steps(run, 1)
            yield run.tracker

    def info(self, run: Run | None = None) -> dict:
        if run is None:
            return {"step_rule": repr(self.step_rule)}
        return {**run.steps.info(), "h_term": repr(self.h) if self.h else None}


class RSSM(SubgradientSolver):
    r"""Randomized submanifold subgradient method (Algorithm 1 of Cheung et al. 2024).

    Args:
        num_blocks: ℓ ∈ [2, p], the number of column blocks of the balanced partition
            (default ``min(4, p)``); ignored when ``blocks`` is given.
        blocks: an explicit partition of ``range(p)`` (list of index lists, ≥ 2 blocks).
        step_size: the step rule (see :class:`SubgradientSolver`); it counts block steps,
            and an epoch is ``⌈ℓ/2⌉`` block steps (every column updated once in expectation),
            so a geometric β per epoch is the same decay per column update as RSubGrad's.
        project_step: project the step onto the block, ``(I − X_R X_Rᵀ)Ξ``, before the
            polar factor (default True; keeps ``‖X_RᵀX_C‖`` at round-off every step).
        refresh_every: re-orthonormalise the whole iterate (``polar(X)``) every this many
            block steps (0, the default, never; useful in float32 with large ℓ).
        pairs: how the block pairs are drawn: ``"uniform"`` (default, the paper's: independent
            uniform pairs) or ``"matching"`` (a random perfect matching of the blocks, its
            ``⌊ℓ/2⌋`` pairs used one per block step, then a fresh matching: every block moves
            once per epoch; each pair is still uniform on its own; outside the paper). On
            DPCP with Polyak steps and ℓ = 4 it needed 10–30% fewer epochs, with no gain at
            ℓ = 10 (docs/results.md, ``benchmarks/rssm_dpcp.py --pairs``); the DPCP benchmark
            suite uses it. The default stays the paper's uniform draw, which the geoopt
            optimizer also uses.
        h, return_best, final_prox: see :class:`SubgradientSolver`.
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options (stopping criteria,
            ``seed``, ``eval_every`` — default about ``max(10, ℓ(ℓ−1)/2)`` block steps).

    One iteration is ``⌈ℓ/2⌉`` block steps when the oracle computes gradient columns alone
    (:attr:`~orthoplug.oracles.core.Oracle.column_gradients`), else one block step (see the
    module notes). ``info`` reports the partition sizes, ``block_steps``,
    ``updates_per_iteration`` and the number of partial-subgradient columns computed
    (``gradient_columns``; divide by p for full-subgradient equivalents).

    Cost per block step: ``O(n p p_C)`` flops with ``p_C = |C| ≈ 2p/ℓ`` (the two blocks'
    columns) plus the partial subgradient of those columns; no ``n × n`` matrix.
    """

    name = "RSSM"

    pair_rules = ("uniform", "matching")

    def __init__(self, *, num_blocks: int | None = None, blocks=None,
                 project_step: bool = True, refresh_every: int = 0, pairs: str = "uniform",
                 **kwargs):
        super().__init__(**kwargs)
        if pairs not in self.pair_rules:
            raise ValueError(f"pairs must be one of {self.pair_rules}, got {pairs!r}")
        self.pairs = pairs
        if num_blocks is not None and (isinstance(num_blocks, bool)
                                       or not isinstance(num_blocks, int) or num_blocks < 2):
            raise ValueError(f"num_blocks must be an integer >= 2, got {num_blocks!r}")
        if refresh_every < 0:
            raise ValueError(f"refresh_every must be >= 0, got {refresh_every}")
        if blocks is not None:
            partition_columns(sum(len(b) for b in blocks), blocks=blocks)  # validate now
        self.num_blocks, self.blocks_user = num_blocks, blocks
        self.project_step, self.refresh_every = bool(project_step), int(refresh_every)

    def partition(self, p: int) -> list[torch.Tensor]:
        """The column blocks for ``p`` columns (``ValueError`` if the options do not fit p)."""
        if self.blocks_user is not None:
            return partition_columns(p, blocks=self.blocks_user)
        if p < 2:
            raise ValueError("RSSM needs p >= 2 columns (it updates a pair of column blocks)")
        return partition_columns(p, self.num_blocks if self.num_blocks is not None
                                 else min(4, p))

    def _ell(self, run: Run) -> int:
        return len(self.partition(run.tracker.x.shape[-1]))

    def default_eval_every(self, run: Run) -> int:
        """The iterations of one sweep of the ``ℓ(ℓ − 1)/2`` column-block pairs, at least 10
        block steps (at least 1 iteration)."""
        ell = self._ell(run)
        return max(1, max(10, ell * (ell - 1) // 2) // run.updates)

    def updates_per_iteration(self, run: Run) -> int:
        """One pass over the columns: ``⌈ℓ/2⌉`` block steps when the tracker computes gradient
        columns alone (:attr:`~orthoplug.oracles.core.Tracker.column_gradients`), else 1 (each
        block step then reads a full subgradient)."""
        return self.epoch_length(run) if run.tracker.column_gradients else 1

    def epoch_length(self, run: Run) -> int:
        """``⌈ℓ/2⌉`` block steps: a pair of blocks moves about 2/ℓ of the columns."""
        return max(1, math.ceil(self._ell(run) / 2))

    def epoch_share(self, run: Run) -> float:
        """``2/ℓ``: the share of the columns a pair of blocks moves (balanced blocks)."""
        return 2.0 / self._ell(run)

    def check_geometry(self, geometry) -> None:
        super().check_geometry(geometry)
        self.partition(geometry.p)  # raises on bad num_blocks / blocks for this p

    def setup(self, run: Run) -> None:
        x = run.tracker.x
        run.blocks = [b.to(x.device) for b in self.partition(x.shape[-1])]
        run.column_pairs = {}
        run.pair_queue = []
        if x.stride(-2) != 1:  # column-major storage: gathering/writing columns is contiguous
            run.tracker.set_point(x.mT.contiguous().mT)
        super().setup(run)

    def update(self, run: Run) -> None:
        tracker = run.tracker
        x = tracker.x
        key = self.next_pair(run)
        pair = run.column_pairs.get(key)
        if pair is None:
            pair = run.column_pairs[key] = column_pair(run.blocks, *key, x.shape[-1])
        cols, rest = pair
        g = partial_subgradient(tracker, cols)
        new = block_step(x, cols, rest, g, run.steps, lambda: float(tracker.value()),
                         project_step=self.project_step)
        write_columns(tracker, cols, new)
        if self.refresh_every and (run.steps.k + 1) % self.refresh_every == 0:
            tracker.set_point(polar_tall(tracker.x))

    def next_pair(self, run: Run) -> tuple[int, int]:
        """The block pair of this iteration (the ``pairs`` rule, on ``run.generator``)."""
        if self.pairs == "uniform":
            return draw_block_pair(len(run.blocks), run.generator)
        if not run.pair_queue:
            run.pair_queue = matching_pairs(len(run.blocks), run.generator)[::-1]
        return run.pair_queue.pop()

    def info(self, run: Run | None = None) -> dict:
        blocks = run.blocks if run is not None else []
        columns = (run.tracker.column_evaluations
                   if run is not None and isinstance(run.tracker, ColumnTracker) else None)
        return {**super().info(run), "num_blocks": len(blocks), "gradient_columns": columns,
                "block_steps": run.steps.k if run is not None else 0,
                "updates_per_iteration": run.updates if run is not None else None,
                "block_sizes": [int(b.numel()) for b in blocks],
                "project_step": self.project_step, "refresh_every": self.refresh_every,
                "pairs": self.pairs}
