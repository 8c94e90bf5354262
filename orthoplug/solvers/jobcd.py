r"""JOBCD: block coordinate descent under J-orthogonality ``XᵀJX = J_k``.

Each iteration changes two rows ``B = (i, j)`` by ``X[B] ← V X[B]`` with ``Vᵀ J_BB V = J_BB``,
which keeps ``XᵀJX`` unchanged for any number of columns (so square O(J) and rectangular
iSt(n, k) alike). ``V`` minimises a majoriser of ``f`` over the 2×2 group exactly
(:func:`~orthoplug.subproblems.jorth2.solve_jorth2x2`):

    f(X⁺) ≤ f(X) + ⟨W, M⟩ + ½ vec(W)ᵀ Q vec(W),   W = V − I,  M = ∇f(X)[B] X[B]ᵀ,

plus the proximal term ``θ/2 ‖W‖²`` (``θ > 0`` makes the subproblem coercive).

* **GS-JOBCD** (:class:`GSJOBCD`): one pair per iteration (uniform with replacement, or cyclic).
  ``Q`` is the exact block curvature ``Q̲ = 2s (Z D Zᵀ) ⊗ C_BB`` for quadratic costs
  ``s·tr(XᵀCXD)`` — then only two gradient rows are read and ``CX`` is updated in ``O(nk)``
  (the fast path) — and ``ς I`` otherwise, ``ς = σ ‖X[B]‖₂²`` with σ from the solver's σ rule
  (:mod:`orthoplug.solvers.sigma_rules`: checked steps, so no step increases f, or a fixed σ).
* **J-JOBCD** (:class:`JJOBCD`): a uniformly random perfect matching of the rows per iteration
  (for odd n one random row idles), all ``⌊n/2⌋`` pairs solved in one batched call. Scalar
  ``Q_i = ς_i I`` with ``ς_i = σ ‖X[B_i]‖₂²`` is required: per-block exact curvatures are not a
  joint majoriser (cross terms between blocks).
* **VR-J-JOBCD** (:class:`VRJJOBCD`): J-JOBCD driven by the PAGE estimator of the gradient of
  ``f = (1/N) Σ f_i`` (:class:`~orthoplug.oracles.core.FiniteSumOracle`).

**Column side** (``side="column"``, square X only). ``X ← X V̂`` with ``V ∈ O(J_BB)`` on a column
pair keeps ``XᵀJX = J`` as well. Its linear term is ``⟨Xᵀ∇f, V̂ − I⟩ = ⟨(Xᵀ∇f)_BB, W⟩`` and
``‖X(V̂ − I)‖_F ≤ ‖X[:, B]‖₂ ‖W‖_F``, so a column step is exactly a row step on ``Xᵀ`` with the
gradient ``∇fᵀ`` (and ``Vᵀ ∈ O(J_BB)`` iff ``V`` is): the generic steps run on transposed views.
For ``f = s·tr(XᵀCX)`` the column J-Jacobi sweeps, where each pair minimises f exactly, are a
solver of their own (:class:`~orthoplug.solvers.jjacobi.ColumnJJacobi`). Column steps keep the
column space of X, so they cannot solve problems on iSt(n, k < n); ``side="column"`` needs a
square X.

The step rules (2×2 solves, the batched pair update, the Jacobi step, the PAGE schedule) live in
:mod:`orthoplug.solvers.jobcd_steps`. This module is over 500 lines because it holds the three
solvers on their shared base (:class:`GSJOBCD`, :class:`JJOBCD` and :class:`VRJJOBCD` all
extend one ``_JOBCDBase``), and the pymanopt front-end names them by this module.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import torch

from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry, JOrthogonalGeometry
from orthoplug.kernels import runs_compiled
from orthoplug.kernels.jobcd import gs_columns, gs_pairs
from orthoplug.kernels.quadratic import MESSAGES, NEEDS_BATCHED_PAIR, OK
from orthoplug.oracles import NonFiniteError, host_array
from orthoplug.oracles.abilities import FiniteSum, HessianVector, PairModel, QuadraticArrays

from .base import IterativeSolver, ScalarCurvature
from .jjacobi import ColumnModel
from .jobcd_steps import PageSchedule, jacobi_step, solve_blocks, solve_pair, update_pairs
from .pairs import (
    PAIR_BATCH,
    PairQueue,
    check_matchings,
    cyclic_pairs,
    max_matchings,
    resolve_matchings,
    round_robin,
)
from .sigma_rules import ModelDamping, SigmaFixed, SigmaRule, as_sigma_rule

__all__ = ["GSJOBCD", "JJOBCD", "VRJJOBCD"]

_EYE2 = ((1.0, 0.0), (0.0, 1.0))


SIDES = ("row", "column")


class _JOBCDBase(ScalarCurvature, IterativeSolver):
    sides = SIDES

    def __init__(self, *, theta: float = 1e-6, sigma_rule: SigmaRule = "fit", side: str = "row",
                 **kwargs):
        super().__init__(**kwargs)
        if side not in self.sides:
            raise ValueError(f"side must be one of {self.sides}, got {side!r}")
        if not theta > 0:
            raise ValueError(f"theta must be > 0 (it makes the subproblem coercive), got {theta}")
        self.side, self.theta = side, float(theta)
        self.sigma_rule = as_sigma_rule(sigma_rule)

    def prepare(self, oracle, x0, geometry):
        if not isinstance(geometry, (JOrthogonalGeometry, IndefiniteStiefelGeometry)):
            raise ValueError(f"{self.name} needs a J-orthogonal or indefinite Stiefel manifold")
        return oracle

    def setup(self, run):
        run.column = self.resolve_side(run) == "column"
        run.jvec = (run.geometry.jk if run.column else run.geometry.j).like(run.tracker.x)
        self.init_sigma(run, run.tracker.oracle.lipschitz)

    def resolve_side(self, run) -> str:
        """The side used in this run (``"row"`` or ``"column"``, checked against X's shape)."""
        n, k = run.tracker.x.shape[-2:]
        if self.side == "column" and n != k:
            raise ValueError(f"{self.name}: side='column' needs a square X (O(J)), got {n}×{k}: "
                             "column steps keep the column space of X, so they cannot reach the "
                             "optimum over iSt(n, k < n)")
        return self.side

    @staticmethod
    def oriented(run, t: torch.Tensor) -> torch.Tensor:
        """``t`` as the solver's row-step code sees it: ``t`` (row side) or its transpose (a
        view; column side), so that column pairs of X are row pairs of ``oriented(X)``."""
        return t.mT if run.column else t

    def pair_step(self, run, x, g, matchings: int = 1):
        """:func:`~orthoplug.solvers.jobcd_steps.jacobi_step` on the run's side (``X`` and ``∇f``
        transposed for columns)."""
        new, predicted = jacobi_step(self.oriented(run, x), self.oriented(run, g), run.jvec,
                                     run.curvature.sigma, self.theta, run.generator,
                                     matchings=matchings)
        return (new.mT.contiguous() if run.column else new), predicted

    def _step_checked(self, run, make_step):
        """Take ``make_step(x) -> (x_new, predicted)``, re-proposed until :meth:`accept_step`
        (a fused check: the gradient at an accepted trial point, if computed, is kept)."""
        tracker = run.tracker
        while True:
            x_new, predicted = make_step(tracker.x)
            if self.accept_step(run, x_new, predicted, fuse=True):
                tracker.set_point(x_new, value=run.trial_value, gradient=run.trial_gradient)
                return

    def info(self, run=None):
        """The options and, given a run, the resolved side and σ rule (the rule started at
        the run's first σ) and the σ counters."""
        rule = self.sigma_rule if run is None else run.curvature
        return {"theta": self.theta, "side": self.side if run is None else
                ("column" if run.column else "row"),
                "sigma_rule": repr(rule), "sigma_start": None if run is None else
                run.curvature_start,
                "backtracks": run.curvature.backtracks if run is not None else 0,
                "final_sigma": run.curvature.sigma if run is not None else None}


class GSJOBCD(_JOBCDBase):
    """Gauss–Seidel JOBCD: pair updates one pair at a time, each solved exactly; ⌊n/2⌋ of them
    per iteration where a pair's gradient rows are cheap, else one.

    Problem: ``min f(X)`` over O(J) or iSt(n, k) (``XᵀJX = J_k``) for a smooth f. A pair update
    changes one pair ``B`` of rows (``side="row"``, the default, any shape) or of columns
    (``side="column"``, square X) by the exact minimiser over ``O(J_BB)`` of a majoriser of f
    (module docstring), at the point the previous update left. One iteration is about one
    gradient's work: ``max(1, ⌊n/2⌋)`` pair updates (one pass over the rows in expectation, as
    one matching is J-JOBCD's) on the row side when the tracker reads a pair's gradient rows
    without a full gradient (:attr:`~orthoplug.oracles.core.Tracker.row_gradients`: a
    :class:`~orthoplug.oracles.core.QuadraticOracle`), else one pair update (each then reads a
    full gradient) — the rule of OBCD's iterations. On the exact quadratic path on the CPU with
    a D that is not a multiple of I, each iteration then also takes ``max(1, ⌊k/2⌋)`` column pair
    steps ``X[:, B] ← X[:, B] V̂``, ``V̂ ∈ O((J_k)_BB)`` (they keep ``XᵀJX = J_k`` too), cyclic
    over the ``k(k−1)/2`` column pairs, each the exact minimiser of f over its pair's group
    (:func:`orthoplug.kernels.jobcd.gs_columns`). The reason is the curvature of f along
    ``X ← X exp(tΩ)``, Ω in the compact part of the Lie algebra of O(J_k): it is a
    difference of D's entries times one of ``XᵀCX``'s, so it vanishes as D tends to a multiple
    of I while the row pairs reach these directions only as combinations of many pair
    generators; row pairs alone then converge at a rate set by that small curvature. A column
    pair step costs O(n) for a diagonal D (``(XᵀY)_BB`` and the two columns of X and Y), O(nk)
    for a dense one, so the columns add at most the cost of the row pairs. Pick it for
    quadratic costs ``s·tr(XᵀCXD)`` given as a
    :class:`~orthoplug.oracles.core.QuadraticOracle`: there one iteration costs ``O(nk)`` (the
    fast path), so it does many cheap exact steps per gradient's worth of work. For
    ``s·tr(XᵀCX)`` on square O(J), :class:`~orthoplug.solvers.jjacobi.ColumnJJacobi` (column
    J-Jacobi sweeps) converges much faster; for a general f, :class:`JJOBCD` moves ⌊n/2⌋ pairs
    per gradient.

    On the quadratic fast path with float64 CPU tensors the pair loop runs compiled
    (:func:`orthoplug.kernels.jobcd.gs_pairs`): Python enters it once per chunk of iterations (up
    to the next evaluation, refresh or batch of random pairs) with the same pairs, hence the same
    iterates, as the per-pair path that other devices and dtypes take. Per iteration, with
    ``Z = X[B]`` (2×k), the model reads two rows of X and Y = CX and ``C_BB`` (O(k), O(k²) with a
    D), the 2×2 solve is O(1), and a step that moves writes the two rows of X and updates Y in one
    pass (O(nk): the memory floor of a row step, about one rank-1 update of an n×k array).

    Pair orders (``pairs=``), all deterministic given ``seed``:

    * ``"random"`` (default): uniform with replacement, ``i ≠ j``, drawn
      :data:`~orthoplug.solvers.pairs.PAIR_BATCH` at a time from the run's generator. Cost: the
      model and solve of one pair plus the O(nk) update.
    * ``"cyclic"``: the pairs ``(0, 1), (0, 2), …, (n−2, n−1)`` in that order, repeated. Same
      cost, no draws.
    * ``"greedy"`` (Gauss–Southwell type): each iteration draws ``candidates`` random pairs,
      computes every candidate's exact model decrease ``⟨W, M⟩ + ½ vec(W)ᵀ Q vec(W)``
      (``W = V − I``, Q = Q̲ + θI, an upper bound on the true change) and takes the best one.
      Cost: ``candidates`` models and 2×2 solves (O(candidates·k)) plus one O(nk) update — for
      ``candidates ≪ n`` about one random step — and ``candidates`` times the draws. Compiled
      path only (quadratic cost, exact curvature, float64 CPU tensors).

    Args:
        theta: proximal weight θ > 0 (default 1e-6).
        sigma_rule: the σ rule of the scalar curvature ``Q = σ‖X[B]‖₂² I`` (non-quadratic
            costs, ``curvature="scalar"`` and the column side): a
            :class:`~orthoplug.solvers.sigma_rules.SigmaFit` (default ``"fit"``: every step
            checked, σ refitted from the ratio of actual to predicted decrease; monotone),
            :class:`~orthoplug.solvers.sigma_rules.SigmaBacktracking` (``"backtracking"``: σ
            doubled until the majorisation holds, optionally shrunk after acceptances) or
            :class:`~orthoplug.solvers.sigma_rules.SigmaFixed` (a number σ: no checks). Without
            a ``sigma0`` in the rule σ starts at the oracle's Lipschitz constant if it declares
            one, else at a local estimate (:func:`~orthoplug.solvers.sigma_rules.start_sigma_rule`).
        side: ``"row"`` (default) or ``"column"`` (square X only: the same step on Xᵀ with
            ∇fᵀ, scalar curvature).
        pairs: ``"random"`` (default), ``"cyclic"`` or ``"greedy"`` (above).
        candidates: pairs compared per greedy iteration (default 8).
        curvature: ``"exact"`` (default; uses Q̲ when the cost is quadratic and the side is
            rows) or ``"scalar"``.
        refresh_every: recompute the row fast path's cached ``CX`` every this many pair
            updates.
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options (stopping criteria,
            ``seed``, ``eval_every`` — default about one sweep of ``n(n−1)/2`` pairs, at most
            1000 pair updates).

    Per-iteration cost: with a :class:`~orthoplug.oracles.core.QuadraticOracle` (the fast path,
    ⌊n/2⌋ pair updates) per pair two rows of ``∇f`` read from the cached ``CX``, an ``O(nk)``
    update of ``CX`` and one exact 2×2 subproblem — ``O(n²k)`` per iteration, about one gradient
    ``CX``; with any other oracle (or the column side) one pair update, one full gradient (plus
    one cost evaluation per checked step), so :class:`JJOBCD`, which moves ⌊n/2⌋ pairs per
    gradient, is the better pick there unless gradients are cheap.
    """

    name = "GS-JOBCD"

    def __init__(self, *, pairs: str = "random", curvature: str = "exact",
                 refresh_every: int = 10_000, candidates: int = 8, **kwargs):
        super().__init__(**kwargs)
        if pairs not in ("random", "cyclic", "greedy"):
            raise ValueError(f"pairs must be 'random', 'cyclic' or 'greedy', got {pairs!r}")
        if curvature not in ("exact", "scalar"):
            raise ValueError(f"curvature must be 'exact' or 'scalar', got {curvature!r}")
        if not (isinstance(candidates, int) and candidates >= 1):
            raise ValueError(f"candidates must be an int >= 1, got {candidates!r}")
        if not (isinstance(refresh_every, int) and refresh_every >= 1):
            raise ValueError(f"refresh_every must be an int >= 1, got {refresh_every!r}")
        self.pairs, self.curvature, self.refresh_every = pairs, curvature, refresh_every
        self.candidates = candidates if pairs == "greedy" else 1

    @staticmethod
    def pairs_per_iteration(n: int, row_gradients: bool = True) -> int:
        """Pair updates per iteration for ``n`` rows (or columns): ``max(1, ⌊n/2⌋)``, one pass
        over the rows in expectation, when a pair's gradient rows cost only those rows
        (``row_gradients``); else 1 (a pair update then reads a full gradient)."""
        return max(1, n // 2) if row_gradients else 1

    def default_eval_every(self, run):
        """About one sweep of the ``n(n − 1)/2`` pairs (capped at 1000 pairs), in iterations."""
        n = run.tracker.x.shape[-1 if run.column else -2]
        return max(1, min(1000, n * (n - 1) // 2) // run.pairs_per_iteration)

    def setup(self, run):
        super().setup(run)
        tracker = run.tracker
        n = tracker.x.shape[-1 if run.column else -2]
        if n < 2:
            raise ValueError("JOBCD needs n >= 2 rows (or columns on the column side)")
        run.exact = (not run.column and self.curvature == "exact"
                     and isinstance(tracker, PairModel))
        run.compiled = (run.exact and isinstance(tracker, QuadraticArrays)
                        and runs_compiled(tracker.x) and tracker.xa.dtype == np.float64)
        if self.pairs == "greedy" and not run.compiled:
            raise ValueError("pairs='greedy' runs in a compiled kernel only: row pairs with a "
                             "QuadraticOracle cost, curvature='exact' and float64 CPU tensors "
                             f"(got {tracker.oracle.__class__.__name__}, "
                             f"curvature={self.curvature!r}, side={self.side!r}, "
                             f"{tracker.x.dtype} on {tracker.x.device})")
        if run.compiled:
            run.jarr = host_array(run.jvec).astype(np.float64)
            run.d = tracker.da if tracker.da is not None else np.empty((0, 0))
        if run.exact and isinstance(tracker, QuadraticArrays):
            run.clip = not tracker.curvature_is_psd
        if run.exact:
            # the exact pair step on the tracker's arrays (NumPy views on the CPU, see
            # QuadraticTracker)
            run.pair_model = partial(tracker.pair_model_array, prox=self.theta)
            run.set_pair, like = tracker.set_rows_array, tracker.xa
            run.v_array = (partial(np.array, dtype=like.dtype) if isinstance(like, np.ndarray)
                           else partial(torch.tensor, dtype=like.dtype, device=like.device))
        run.jlist = run.jvec.tolist()
        run.count = 0
        run.pairs_per_iteration = self.pairs_per_iteration(
            n, tracker.row_gradients and not run.column)
        run.queue = PairQueue(self.pairs, n, tracker.x.device, self.candidates)
        k = tracker.x.shape[-1]
        run.columns = (run.exact and isinstance(tracker, QuadraticArrays) and tracker.on_host
                       and tracker.x.ndim == 2 and k >= 2 and tracker.da is not None
                       and not np.array_equal(tracker.da, tracker.da[0, 0] * np.eye(k)))
        if run.columns:
            run.column_pairs = cyclic_pairs(k).numpy()
            run.column_cursor = 0
            run.jk = host_array(run.geometry.jk.like(tracker.x)).astype(np.float64)

    def steps(self, run, count):
        if not run.compiled:
            return super().steps(run, count)
        m = run.pairs_per_iteration
        target, done = count * m, 0
        while done < target:
            run.queue.ensure(run.generator)
            try:
                # with column steps, one iteration at a time: its row pairs, then its columns
                done += self._compiled_steps(run, m - done % m if run.columns else target - done)
            except NonFiniteError as err:
                err.iterations = (done + err.iterations) // m
                raise
            if run.columns and done % m == 0:
                self._column_steps(run, done // m - 1)
            if done % m == 0 and done >= PAIR_BATCH:  # back to the run loop (its clock)
                break
        return done // m

    def step(self, run):
        """One iteration: :attr:`pairs_per_iteration` pair updates."""
        if run.compiled:
            self.steps(run, 1)
            return
        for _ in range(run.pairs_per_iteration):
            self._pair_step(run)
        if run.columns:
            self._column_steps(run, 0)

    def _pair_step(self, run) -> None:
        """One pair update outside the kernel (the exact or the scalar model)."""
        tracker = run.tracker
        run.queue.ensure(run.generator)
        rows, i, j = run.queue.take()
        if run.exact:
            self._exact_step(run, rows, i, j)
            return
        pair = torch.as_tensor(rows)[None]
        g_rows = (self.oriented(run, tracker.gradient())[pair] if run.column
                  else tracker.gradient_rows(pair))

        def make_step(x):
            new, predicted = update_pairs(self.oriented(run, x)[None], g_rows[None], pair[None],
                                          run.jvec, run.curvature.sigma, self.theta)
            return (new[0].mT.contiguous() if run.column else new[0]), predicted

        self._step_checked(run, make_step)

    def _exact_step(self, run, rows, i, j) -> None:
        """One exact pair step outside the kernel (other devices and dtypes)."""
        run.count += 1
        z, m, qd = run.pair_model(rows)
        if not runs_compiled(run.tracker.x):  # on the device: the batched solve of one pair
            pair = torch.tensor([[i, j]], device=run.jvec.device)
            zt, mt, qt = (torch.as_tensor(a)[None] for a in (z, m, qd))
            v = solve_blocks(run.jvec, pair, zt, mt, 0.0, q_exact=qt)[0]
            run.set_pair(rows, host_array(v) @ z)
        else:
            v = solve_pair([run.jlist[i], run.jlist[j]], m.tolist(), qd=qd.tolist())
            if v != _EYE2:  # V = I (a block already at its optimum) changes nothing
                # a non-finite V Z raises NonFiniteError: X stays the last finite point
                run.set_pair(rows, run.v_array(v) @ z)
        if run.count % self.refresh_every == 0:
            run.tracker.refresh()

    def _column_steps(self, run, iterations: int) -> None:
        """The column half of an iteration (:attr:`pairs_per_iteration` of the k columns, in
        the cyclic order), in the kernel; ``iterations`` completed before it (for an error)."""
        tracker, k = run.tracker, run.tracker.x.shape[-1]
        steps = self.pairs_per_iteration(k)
        done, f, status = gs_columns(tracker.xa, tracker.ya, tracker.da, tracker.s,
                                     tracker.cost, run.jk, self.theta, run.clip,
                                     run.column_pairs, run.column_cursor, steps)
        tracker.cost = f
        run.column_cursor = (run.column_cursor + done) % len(run.column_pairs)
        if status != OK:  # nothing of the failing step was written
            raise NonFiniteError(MESSAGES[status], iterations=iterations)

    def _compiled_steps(self, run, count: int) -> int:
        """Up to ``count`` pair updates in the kernel, stopping at the end of the queued
        pairs, at the next refresh and after :data:`~orthoplug.solvers.pairs.PAIR_BATCH` (so
        the run's clock is read at least that often); returns how many it took."""
        tracker, queue, cand = run.tracker, run.queue, self.candidates
        steps = min(count, PAIR_BATCH, queue.available(),
                    self.refresh_every - run.count % self.refresh_every)
        done, f, status = gs_pairs(tracker.xa, tracker.ya, tracker.ca, run.d, tracker.s,
                                   tracker.cost, run.jarr, self.theta, run.clip,
                                   queue.rows, queue.cursor, steps, cand)
        tracker.cost = f
        queue.advance(done)
        run.count += done
        if status == NEEDS_BATCHED_PAIR:  # w± ≤ 0 after rounding: this pair on the per-pair
            self._exact_step(run, *queue.take())  # path, whose solver falls back to the batch
            return done + 1
        if status != OK:  # nothing of the failing step was written
            raise NonFiniteError(MESSAGES[status], iterations=done)
        if run.count % self.refresh_every == 0:
            tracker.refresh()
        return done

    def info(self, run=None):
        out = {**super().info(run), "pairs": self.pairs, "curvature": self.curvature,
               "candidates": self.candidates}
        if run is not None:
            out["compiled"] = bool(run.compiled)
        return out


class JJOBCD(_JOBCDBase):
    """Jacobi JOBCD: ⌊n/2⌋ disjoint pairs per iteration in one batched exact solve.

    Problem: ``min f(X)`` over O(J) or iSt(n, k) for a smooth f given by value and gradient.
    One iteration takes one full gradient and moves every row (or column) once: a uniformly
    random perfect matching of the rows (for odd n one random row idles), each pair by the
    exact minimiser over ``O(J_BB)`` of the scalar majoriser (σ from ``sigma_rule``). Pick it
    for a general smooth f over O(J) or iSt (GS-JOBCD would need a gradient per pair); for
    ``s·tr(XᵀCX)`` on square O(J) pick :class:`~orthoplug.solvers.jjacobi.ColumnJJacobi`, for
    a finite sum with a known Lipschitz constant :class:`VRJJOBCD`.

    Two pair models (``curvature=``):

    * ``"scalar"`` (default): random matchings of the rows (or columns) with the scalar
      curvature ``Q_i = σ‖X[B_i]‖₂² I``, which majorises the joint change of one matching when
      σ ≥ L_f (per-block exact curvatures are not a joint majoriser in general: cross terms).
    * ``"hessian"`` (``side="column"``, square O(J), an oracle that has the
      :class:`~orthoplug.oracles.abilities.HessianVector` ability, e.g. a pymanopt autodiff
      ``Problem``): column steps ``X ← X V`` from the second-order model of
      :class:`~orthoplug.solvers.jjacobi.ColumnModel` (one gradient and one Hessian-vector
      product ``∇²f(X)[X]`` per iteration). One iteration is one sweep of round-robin rounds
      (:func:`~orthoplug.solvers.pairs.round_robin`: all pairs in n−1 rounds of disjoint
      pairs, n rounds for odd n); each pair minimises the model exactly (4×4 curvature
      ``I₂ ⊗ (S_BB)₊`` plus θ) and the model is carried along in O(n) per pair (compiled). The
      sweep's step is tested on f (:class:`~orthoplug.solvers.sigma_rules.ModelDamping`: monotone; a
      rejection raises the Levenberg–Marquardt damping and re-sweeps the same model). For
      ``f = tr(XᵀCX)`` the model is exact and separable over disjoint column pairs, so the
      sweeps are the parallel column J-Jacobi method (quadratic convergence: 4-5 sweeps to
      1e-8 at n ≤ 30). Core solver and pymanopt front-end only (the geoopt optimizer has no
      Hessian products).

    The defaults are the paper's J-JOBCD — scalar model, rows, one matching — in both
    front-ends: the one configuration that applies to every problem, σ rule and host (a
    minibatch closure, a fixed σ); the resolved side, σ rule and matchings are in
    ``result.info``.

    Args:
        curvature: ``"scalar"`` (default) or ``"hessian"`` (an error where it does not apply).
        side: ``"row"`` (default) or ``"column"`` (a matching of the columns, square X only).
        matchings: scalar model only — matchings per gradient evaluation: 1 (default, the
            paper's J-JOBCD), an int, or ``"all"``. With more than one, each iteration
            applies that many rounds of a random round robin of the rows (or columns), pair after
            pair, each pair minimising the scalar model of f linearised at the iteration's point
            (:func:`~orthoplug.kernels.jobcd.linear_sweep`); ``"all"`` takes every pair once
            (:func:`~orthoplug.solvers.pairs.max_matchings` rounds). One gradient then moves all
            ``n(n − 1)/2`` pairs instead of ``⌊n/2⌋``, which pays off when the gradient
            dominates the cost (HSPP: see ``docs/results.md``). The steps must be checked (a
            σ rule other than :class:`~orthoplug.solvers.sigma_rules.SigmaFixed`): the
            predicted change bounds the true one only for σ ≥ matchings·L_f. Compiled on
            float64 host copies of X and ∇f (any device).
        theta, sigma_rule: as :class:`GSJOBCD` (the σ rule concerns the scalar model; θ is
            the proximal weight of both).
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options (default
            ``eval_every``: 1).

    Iterations: one matching (⌊n/2⌋ pair updates: every row once), or one sweep of the
    Hessian model; either way one full gradient.

    Per-iteration cost: scalar — one full gradient, ⌊n/2⌋ exact 2×2 subproblems (compiled on
    CPU float64, one batched call elsewhere) and ``O(nk)`` for the row updates (with more
    matchings: ``O(k)`` per pair, compiled, and two host copies), plus one cost evaluation per
    checked step; Hessian model — one gradient, one Hessian-vector product, one cost
    evaluation (the test; one more per rejection), ``O(n³)`` for the model and the sweep's
    ``n(n−1)/2`` compiled pair steps.
    """

    name = "J-JOBCD"
    curvatures = ("scalar", "hessian")

    def __init__(self, *, curvature: str = "scalar", side: str = "row",
                 matchings: int | str = 1, **kwargs):
        super().__init__(side=side, **kwargs)
        if curvature not in self.curvatures:
            raise ValueError(f"curvature must be one of {self.curvatures}, got {curvature!r}")
        check_matchings(matchings)
        if curvature == "hessian" and side != "column":
            raise ValueError("curvature='hessian' takes column steps X ← X V: pass "
                             "side='column' with it")
        if matchings != 1 and not self.sigma_rule.checked:
            raise ValueError(f"{self.name}: matchings > 1 needs checked steps (a σ rule other "
                             "than a fixed σ): a σ ≥ L_f majorises one matching on a stale "
                             "gradient, not several")
        self.curvature, self.matchings = curvature, matchings

    def _uses_hessian(self, run) -> bool:
        """Whether this run takes the Hessian model (an error if it was asked for and cannot)."""
        if self.curvature == "scalar":
            return False
        x, oracle = run.tracker.x, run.tracker.oracle
        square = x.ndim == 2 and x.shape[0] == x.shape[1]
        if not (square and isinstance(oracle, HessianVector) and runs_compiled(x)):
            raise ValueError(f"{self.name}: curvature='hessian' needs a single square X (O(J)), "
                             "an oracle with Hessian-vector products (HessianVector: "
                             "hessian_vector(x, u)) and a float32 or float64 CPU tensor (the "
                             f"model sweep is compiled); got X of shape {tuple(x.shape)} "
                             f"({x.dtype} on {x.device}), {type(oracle).__name__}")
        return True

    def setup(self, run):
        run.hessian = self._uses_hessian(run)
        if not run.hessian:
            super().setup(run)
            n = run.tracker.x.shape[-1 if run.column else -2]
            run.matchings = resolve_matchings(self.matchings, n)
            if run.matchings > max_matchings(n):
                raise ValueError(f"{self.name}: matchings={run.matchings} exceeds the "
                                 f"{max_matchings(n)} rounds of a round robin of n = {n}")
            if run.matchings > 1 and not run.curvature.checked:
                raise ValueError(f"{self.name}: matchings > 1 needs checked steps, but the "
                                 f"oracle's Lipschitz constant fixed σ ({run.curvature!r}): "
                                 "pass sigma_rule='fit'")
            return
        run.column = True
        run.jarr = np.asarray(run.geometry.jk.values, dtype=np.float64)
        run.rounds = round_robin(run.tracker.x.shape[-1]).numpy()
        run.hessian_products, run.skipped = 0, 0
        run.damping = ModelDamping(rtol=100 * torch.finfo(run.tracker.x.dtype).eps)

    def default_eval_every(self, run):
        """1: one iteration already updates every row (every column pair, Hessian model)."""
        return 1

    def step(self, run):
        if run.hessian:
            self._model_step(run)
            return
        g = run.tracker.gradient()
        self._step_checked(run, lambda x: self.pair_step(run, x, g, run.matchings))

    def _model_step(self, run) -> None:
        """One sweep on the model built at X, re-swept with more damping until
        :class:`~orthoplug.solvers.sigma_rules.ModelDamping` accepts it."""
        tracker, damping = run.tracker, run.damping
        x = tracker.x
        model = ColumnModel(x, tracker.gradient(), tracker.oracle.hessian_vector(x, x))
        run.hessian_products += 1
        f0 = float(tracker.value())
        while True:
            v, predicted, skipped = model.sweep(run.rounds, run.jarr,
                                                self.theta + damping.weight * model.scale)
            x_new = x @ torch.from_numpy(v).to(x)
            try:
                f1 = tracker.oracle.value(x_new)
            except NonFiniteError:
                f1 = torch.tensor(math.inf, dtype=x.dtype)
            if damping.accepts(f0, float(f1), predicted):
                tracker.set_point(x_new, value=f1)
                run.skipped += skipped
                return

    def info(self, run=None):
        if run is not None and run.hessian:
            return {"theta": self.theta, "curvature": "hessian", "side": "column",
                    "hessian_vector_products": run.hessian_products,
                    "skipped_pairs": run.skipped,
                    "rejections": run.damping.rejected, "final_damping": run.damping.weight}
        return {**super().info(run), "curvature": "scalar",
                "matchings": self.matchings if run is None else run.matchings}


class VRJJOBCD(_JOBCDBase):
    """Variance-reduced J-JOBCD (PAGE estimator) for ``f = (1/N) Σ f_i``.

    The gradient estimate ``G̃`` starts at the full gradient; each later iteration, with
    probability ``p`` it is reset to a minibatch mean of size ``b`` (the full gradient when
    ``b = N``), otherwise updated as ``G̃ += mean_{i∈S'} (∇f_i(X) − ∇f_i(X_prev))`` with a fresh
    minibatch ``S'`` of size ``b'`` (without replacement;
    :class:`~orthoplug.solvers.jobcd_steps.PageSchedule`). Defaults: ``b = N``, ``b' = ⌈√b⌉``,
    ``p = b'/(b + b')``. One iteration: one gradient estimate and one J-JOBCD matching step
    (⌊n/2⌋ pairs: every row once). Pick it for a finite sum whose full gradient is expensive
    and whose Lipschitz constant is known; otherwise :class:`JJOBCD`.

    σ is fixed (the estimator gives no cost values to test a step on): ``sigma_rule`` is a
    number σ or a :class:`~orthoplug.solvers.sigma_rules.SigmaFixed`; ``None`` (default) takes
    the Lipschitz constant the oracle declares (an error before any work if it declares none).

    ``component_gradients`` in the result's ``info`` counts ∇f_i evaluations.

    Args:
        sigma_rule: the fixed σ (above).
        batch_size: b, the reset minibatch (``None``: all N components).
        small_batch: b', the difference minibatch (``None``: ``⌈√b⌉``).
        reset_probability: p (``None``: ``b'/(b + b')``).
        theta, side: as :class:`JJOBCD`.
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options.

    Per-iteration cost: ``2b'`` component gradients (``∇f_i`` at X and at the previous point),
    or with probability ``p`` a minibatch of ``b`` (``N``: a full gradient), plus the J-JOBCD
    step (⌊n/2⌋ batched 2×2 subproblems).
    """

    name = "VR-J-JOBCD"

    def __init__(self, *, sigma_rule: SigmaFixed | float | None = None,
                 batch_size: int | None = None, small_batch: int | None = None,
                 reset_probability: float | None = None, **kwargs):
        super().__init__(**kwargs)
        self.sigma_rule = None if sigma_rule is None else as_sigma_rule(sigma_rule)
        if self.sigma_rule is not None and self.sigma_rule.checked:
            raise ValueError(f"VR-J-JOBCD takes a fixed σ (a number or SigmaFixed), got "
                             f"{self.sigma_rule!r}: checking a step needs full cost values, "
                             "which the estimator avoids")
        self.b, self.b_small, self.p = batch_size, small_batch, reset_probability

    def prepare(self, oracle, x0, geometry):
        if not isinstance(oracle, FiniteSum):
            raise ValueError("VR-J-JOBCD needs a FiniteSumOracle (f = (1/N) Σ f_i)")
        if self.sigma_rule is None and oracle.lipschitz is None:
            raise ValueError("VR-J-JOBCD needs a fixed σ: pass sigma_rule=σ (≥ the Lipschitz "
                             "constant) or an oracle that declares its Lipschitz constant (it "
                             "cannot backtrack on estimated gradients)")
        return super().prepare(oracle, x0, geometry)

    def init_sigma(self, run, known):
        """The fixed σ: the rule's, else the oracle's Lipschitz constant ``known``."""
        run.curvature = SigmaFixed(self.sigma_rule.sigma0 if self.sigma_rule else known)
        run.curvature_start = run.curvature.sigma
        return run.curvature

    def setup(self, run):
        super().setup(run)
        n_comp = run.tracker.oracle.num_components
        run.page = PageSchedule(n_comp, self.b, self.b_small, self.p)
        run.g_est = run.tracker.gradient()
        run.component_gradients = n_comp
        run.x_prev = None

    def step(self, run):
        x = run.tracker.x
        if run.x_prev is not None:
            reset, idx = run.page.draw(run.generator, x.device)
            if reset:
                run.g_est = run.tracker.component_gradient(x, idx)
                run.component_gradients += idx.numel()
            else:
                run.g_est = run.g_est + run.tracker.component_gradient(x, idx) \
                    - run.tracker.component_gradient(run.x_prev, idx)
                run.component_gradients += 2 * idx.numel()
        x_new, _ = self.pair_step(run, x, run.g_est)
        run.x_prev = x
        run.tracker.set_point(x_new)

    def info(self, run=None):
        page = run.page if run is not None else None
        return {**super().info(run),
                "batch_size": page.b if page else self.b,
                "small_batch": page.b_small if page else self.b_small,
                "reset_probability": page.p if page else self.p,
                "component_gradients": run.component_gradients if run is not None else 0}
