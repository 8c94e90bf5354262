r"""OBCD: row-block coordinate descent for ``min f(X) + h(X)`` over St(n, r).

Each block update picks ``k`` distinct rows ``B``, ``Z = X[B]`` (k×r), and sets ``X[B] ← V Z`` with
``V ∈ O(k)``, which keeps ``XᵀX`` unchanged. ``V`` minimises the surrogate

    K(V) = ½ vec(V − I)ᵀ (Q + θI) vec(V − I) + ⟨V, G⟩ + h(V Z),   G = ∇f(X)[B] Zᵀ,

which majorises ``F(X⁺(V)) = f(X⁺) + h(X⁺)`` up to a constant with equality at ``V = I``
whenever ``Q ⪰ Q̲`` (the exact block curvature). Hence ``F(X⁺) ≤ F(X) − θ/2 ‖V − I‖²_F``: the
objective never increases (θ > 0, default 1e-5 as in the paper).

**Iterations.** One iteration is one pass over the rows in expectation, about the work of one
full gradient (``docs/guide/options.md``, "What one iteration is"): ``⌈n/k⌉`` block updates when
the tracker reads gradient rows without a full gradient (a quadratic f, the fast path), else one
block update (each reads a full gradient); one matching for the Jacobi order. ``info`` reports
``block_updates`` and ``updates_per_iteration``.

* ``Q``: ``curvature="exact"`` uses ``Q = Q̲ = 2s (Z D Zᵀ) ⊗ C_BB`` for quadratic
  ``f = s·tr(XᵀCXD)`` (:class:`~orthoplug.oracles.core.QuadraticOracle`; any inertia, so for
  SPCA the step is an exact block minimisation of ``F`` plus the tiny prox) when ``k = 2``;
  otherwise ``Q = ς I`` with ``ς = σ ‖Z‖₂²`` and σ from ``sigma_rule`` (below): a majoriser
  when σ ≥ max(0, λ_max(∇²f)), and a checked rule tests
  ``f(X⁺) ≤ f(X) + ⟨V − I, G⟩ + ς/2‖V − I‖²`` (up to rounding, ``cost_rounding``) otherwise.
* Subproblem: ``k = 2`` — the exact global solver :func:`~orthoplug.subproblems.o2.solve_o2`
  (``O(r log r)``); ``k > 2, h = 0`` (scalar Q) — the closed form ``V = −polar(G − (ς+θ)I)``;
  ``k > 2, h ≠ 0`` — a local method: sweeps of exact 2×2 rotations/reflections of pairs of the
  ``k`` rows inside the block, each the global minimiser of ``K`` over its pair, started from
  ``V = I``, so ``K(V̄) ≤ K(I)`` (the paper's fallback requirement) holds by construction.
* Pair orders (``pairs``): ``"random"`` (uniform k-subset each update, the theory's choice),
  ``"cyclic"``
  (all k-subsets in lexicographic order) or ``"jacobi"`` (``k = 2``: a fresh random perfect
  matching, ⌊n/2⌋ disjoint pairs updated from the same X in one batched solve). Jacobi needs the
  scalar curvature and separable ``h``: with ``ς_j = σ‖Z_j‖₂²`` and σ ≥ max(0, λ_max(∇²f)) the
  joint surrogate separates over the pairs and majorises ``F`` (per-pair exact curvatures do not:
  ``∇²f`` couples pairs). Not in the paper. ``"greedy"`` (``k = 2``, the exact curvature, so a
  quadratic f): Gauss–Southwell type, each update solves the subproblems of the next
  ``candidates`` queued random pairs and applies the one with the largest model decrease
  ``K(I) − K(V)`` (the first on ties; none when no candidate moves), on every path. Not in the
  paper. The default ``pairs=None`` is resolved once per run from
  what an update costs (:func:`default_pair_order`): ``"random"`` when the tracker reads
  gradient rows without a full gradient (the fast path) or ``k > 2``, else ``"jacobi"`` (every
  update pays a full gradient, so one matching moves all rows for it). ``info["pairs"]``
  reports the order taken; the geoopt optimizer, whose every step pays a full gradient (the
  closure), resolves the same rule to ``"jacobi"``.
* σ (``sigma_rule``, the rule objects of :mod:`orthoplug.solvers.sigma_rules`; default
  ``"backtracking"``): started by :func:`~orthoplug.solvers.sigma_rules.start_sigma_rule` with
  the known σ of :func:`safe_sigma` — 0 for concave quadratic f, else the oracle's Lipschitz
  constant (then σ is fixed and no step is checked) — else at a local estimate at ``X₀``,
  doubled until the sufficient-decrease test holds. The geoopt optimizer starts the same rule
  the same way (a closure declares no σ: the estimate, from the same generator), so the two
  front-ends take the same steps from the same seed and start.
* Fast path (quadratic f): only the k gradient rows ``2s(CX)[B]D`` are read and ``CX`` is updated
  in ``O(n k r)`` after each change (:class:`~orthoplug.oracles.core.QuadraticTracker`),
  recomputed every ``refresh_every`` block updates against drift. Per update (k = 2):
  ``O(n r)`` + ``O(r log r)`` for the subproblem, versus ``O(n² r)`` for a full gradient. A
  Jacobi iteration costs one full gradient plus ⌊n/2⌋ batched subproblems.
* Compiled loop: with ``k = 2``, the exact curvature and float64 CPU tensors the random, cyclic
  and greedy updates run in :func:`~orthoplug.kernels.obcd.obcd_pairs` (numba), entered once
  per evaluation interval (split at random-pair batches, the end of a cyclic sweep and the
  refresh of ``CX``); pairs are drawn exactly as in the Python path, so the iterates are the
  same. float32 CPU tensors run the same steps (random, cyclic and greedy, the same model and
  search) through the tracker's arrays in Python.
* Devices: the O(2) search is compiled only, so k = 2 or h ≠ 0 needs float32/float64 CPU
  tensors (:func:`require_compiled_search`, at setup); k > 2 with h = 0 (polar steps) runs in
  torch on any device.

After each update, entries of the new rows with modulus ``< 1e-14`` are set to 0 (for h ≠ 0): the
subproblem solver merges knots at that size and a negative residue would make ``V = I``
infeasible for the nonnegativity indicator.

The run's cost is ``F = f + h``; the history records ``h`` separately (``history["h"]``) and
``info`` holds the final ``f`` and ``h``. The reported gradient norm is
``‖Ĝ − X sym(XᵀĜ)‖_F`` for ``Ĝ = ∇f(X) + s_h(X)``, ``s_h`` the term's fixed subgradient rule —
for ``h = 0`` the Riemannian gradient norm, otherwise an upper bound on the distance of
``∂F`` from criticality, not a convergence test.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch

from orthoplug._random import randperm
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.kernels import runs_compiled
from orthoplug.kernels.obcd import obcd_pairs
from orthoplug.kernels.quadratic import MESSAGES
from orthoplug.nonsmooth import SeparableTerm, Zero
from orthoplug.oracles import (
    NonFiniteError,
    PairModel,
    QuadraticArrays,
    Refreshable,
    all_finite,
    host_array,
)
from orthoplug.subproblems.o2 import (
    SNAP,
    breakpoint_tables,
    search_o2_single,
    solve_o2,
    solve_polar,
)
from orthoplug.subproblems.scalar import scalar_model_change, spectral_norm_sq

from .base import IterativeSolver, Run, ScalarCurvature, SolverResult
from .pairs import PAIR_BATCH, PairQueue, random_matching
from .sigma_rules import SigmaRule, as_sigma_rule

__all__ = ["OBCD", "default_pair_order", "safe_sigma", "local_block_solve", "scalar_pair_step",
           "require_compiled_search"]


def safe_sigma(oracle) -> float | None:
    """A σ with ``σ ≥ max(0, λ_max(∇²f))``: 0 for concave quadratic f, else the Lipschitz constant.

    ``None`` when nothing is known (the solver then estimates σ and backtracks).
    """
    q = oracle.quadratic
    if q is not None:
        lam_c = torch.linalg.eigvalsh(q.c)
        lam_d = torch.ones(1, dtype=q.c.dtype) if q.d is None else torch.linalg.eigvalsh(q.d)
        if float(lam_d.min()) >= 0 and q.scale * float(lam_c.max() if q.scale >= 0
                                                       else lam_c.min()) <= 0:
            return 0.0  # s·C ⪯ 0 and D ⪰ 0: f is concave
    return oracle.lipschitz


def default_pair_order(k: int, row_gradients: bool) -> str:
    """The pair order of ``pairs=None``, chosen from what a block update costs.

    ``"random"`` when the gradient rows of a block cost only those rows (``row_gradients``:
    :attr:`~orthoplug.oracles.core.Tracker.row_gradients`, a quadratic f) or ``k > 2``;
    otherwise ``"jacobi"``: every update pays a full gradient, and a random perfect matching
    moves all ⌊n/2⌋ pairs for it (one pair would use 2 of its n rows).
    """
    return "random" if row_gradients or k != 2 else "jacobi"


def require_compiled_search(x: torch.Tensor, who: str) -> None:
    """Refuse ``x`` unless the compiled O(2) search takes it (the dispatch rule
    :func:`~orthoplug.kernels.runs_compiled`: float32/float64 CPU tensors).

    The breakpoint search (:func:`~orthoplug.subproblems.o2.solve_o2`) is sequential per pair and
    exists only compiled; a tensor on another device would be copied to the host in every step.

    Raises:
        ValueError: naming ``who``, the tensor's dtype and device.
    """
    if not runs_compiled(x):
        raise ValueError(f"{who}: the O(2) breakpoint search runs compiled on float32/float64 "
                         f"CPU tensors only; got {x.dtype} on {x.device} (move it to the CPU)")


def _snap(u):
    """Set entries of modulus ``< SNAP`` (the O(2) search's tolerance, 1e-14) to 0, in place
    (a NumPy array or a torch tensor)."""
    u[abs(u) < SNAP] = 0.0
    return u


def scalar_pair_step(z: torch.Tensor, m: torch.Tensor, sigma: float, theta: float,
                     h: SeparableTerm) -> tuple[torch.Tensor, float]:
    """OBCD's step of row pairs with the scalar curvature, for both front-ends.

    For pairs ``Z`` (..., 2, r) with ``M = ∇f(X)[B] Zᵀ`` (..., 2, 2): ``V`` from the exact O(2)
    subproblem with ``ς = σ‖Z‖₂²`` (batched :func:`~orthoplug.subproblems.o2.solve_o2`). Returns
    the new rows ``V Z`` (snapped for ``h ≠ 0``, see the module notes) and the majoriser's
    predicted change of f, ``Σ ⟨W, M⟩ + ς/2 ‖W‖²`` with ``W = V − I``.

    Raises:
        NonFiniteError: if the new rows are not finite.
    """
    zz = spectral_norm_sq(z)
    s = sigma * zz + theta
    v = solve_o2(m - s[..., None, None] * torch.eye(2, dtype=z.dtype, device=z.device), z, h, s=s)
    new = v @ z
    if not isinstance(h, Zero):
        new = _snap(new)
    if not all_finite(new):
        raise NonFiniteError("non-finite block update")
    return new, scalar_model_change(v, m, zz, sigma)


def local_block_solve(p: torch.Tensor, z: torch.Tensor, h: SeparableTerm,
                      sweeps: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """Approximate ``argmin_{V ∈ O(k)} ⟨V, P⟩ + h(V Z)`` with ``K(V) ≤ K(I)`` guaranteed.

    Starting at ``V = I``, each of ``sweeps`` sweeps visits every pair ``(i, j)`` of the k rows
    and replaces ``V`` by ``R V`` with ``R`` the exact global minimiser over O(2) acting on rows
    ``(i, j)``: ``⟨R V, P⟩ = ⟨R, P Vᵀ⟩`` and ``h(R V Z)`` only changes on those rows, so each pair
    subproblem is a :func:`~orthoplug.subproblems.o2.solve_o2` instance with ``Qt = 0`` and never
    increases K. Cost: ``sweeps · k(k−1)/2`` 2×2 solves, ``O(k² r log r)``. Returns
    ``(V, V Z)`` (the latter snapped, see the module notes).
    """
    k = p.shape[-1]
    v = torch.eye(k, dtype=p.dtype, device=p.device)
    u = z.clone()
    for _ in range(sweeps):
        for i, j in itertools.combinations(range(k), 2):
            b = torch.tensor([i, j], device=p.device)
            m = (p @ v.mT)[b][:, b]
            r2 = solve_o2(m, u[b], h, s=0.0)
            if torch.equal(r2, torch.eye(2, dtype=r2.dtype, device=r2.device)):
                continue
            v[b] = r2 @ v[b]
            u[b] = _snap(r2 @ u[b])
    return v, u


class OBCD(ScalarCurvature, IterativeSolver):
    """OBCD: row-block coordinate descent for ``min f(X) + h(X)`` over St(n, r), h separable
    (the module docstring gives the surrogate and its guarantees).

    **One iteration** is one pass over the rows, about one full gradient's work: ``⌈n/k⌉``
    block updates ``X[B] ← V X[B]`` (``V ∈ O(k)``, each never increasing ``F = f + h``) when the
    tracker reads gradient rows without a full gradient (a
    :class:`~orthoplug.oracles.core.QuadraticOracle`), else one update, or one matching of
    ⌊n/2⌋ disjoint pairs for the Jacobi order.

    **Cost per iteration:** fast path (quadratic f, k = 2) ``⌈n/2⌉ ×`` (two gradient rows, the
    ``O(r log r)`` O(2) search and an ``O(n r)`` update of ``CX``) = ``O(n² r)``; any other
    oracle one full gradient plus the subproblems (Jacobi: ⌊n/2⌋ of them in one batched search),
    and for a checked σ rule one cost value per trial.

    **When to pick it:** a nonsmooth separable h (ℓ0, ℓ1, capped ℓ1, ``X ≥ 0``) on St(n, r),
    where each pair step is the exact global minimiser of its majoriser (it lands on zeros and
    keeps feasibility exactly); for quadratic f (sparse / nonnegative PCA) the fast path makes
    an iteration as cheap as one gradient. For smooth costs without h a Riemannian gradient
    method (RSDM, pymanopt's CG) moves all entries per gradient instead.

    Args:
        h: separable nonsmooth term (:mod:`orthoplug.nonsmooth`; default :class:`Zero`).
        k: block size, ``2 ≤ k ≤ n`` (default 2: exact subproblems for every h).
        pairs: the pair / block order, deterministic given ``seed``. ``None`` (default): by
            what an update costs (:func:`default_pair_order`, resolved at the start of a run and
            reported in ``info["pairs"]``): ``"random"`` when the tracker reads gradient rows
            without a full gradient or k > 2, else ``"jacobi"``. Per block update (k = 2, fast
            path): ``"random"`` (uniform pairs, drawn 1024 at a time from the run's generator)
            and ``"cyclic"`` (all pairs in lexicographic order) cost one model (``O(r)``), one
            O(2) search (``O(r log r)``) and one row update of X and ``CX`` (``O(n r)``);
            ``"greedy"`` (k = 2, exact curvature, quadratic f) costs
            ``candidates`` models and searches plus one row update — worth it when the
            ``O(n r)`` update dominates, i.e. n ≫ candidates · log r; ``"jacobi"`` (k = 2,
            scalar curvature) one full gradient plus ⌊n/2⌋ batched searches.
        candidates: pairs compared per greedy update (default 8; ignored otherwise).
        curvature: ``"exact"`` (default: ``Q̲`` when f is quadratic, k = 2 and the order is not
            Jacobi) or ``"scalar"``.
        theta: proximal weight θ > 0 (default 1e-5).
        sigma_rule: the σ of the scalar curvature ``ς = σ‖Z‖₂²`` (not used by the exact
            curvature): a rule object of :mod:`orthoplug.solvers.sigma_rules`, ``"backtracking"``
            (default), ``"fit"`` or a number (a fixed σ, never checked). Without a ``sigma0`` in
            the rule σ starts at :func:`safe_sigma` if the oracle gives one (0 for concave
            quadratic f, else its Lipschitz constant; fixed unless the rule is adaptive), else
            at a local estimate at ``X₀`` (:func:`~orthoplug.solvers.sigma_rules.start_sigma_rule`),
            and a checked rule doubles or refits σ until the sufficient-decrease test holds.
        sweeps: pair sweeps of the local method (k > 2, h ≠ 0).
        refresh_every: recompute the fast path's ``CX`` every this many block updates.
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options (stopping criteria,
            ``seed``, ``eval_every`` — default the iterations of min(1000, C(n, 2)) block
            updates, 1 for Jacobi).

    Raises:
        ValueError: invalid options; at run time: a manifold other than St(n, r), ``k > n``, an
            initial point where ``h`` is infinite (e.g. negative entries for NonNegative), the
            greedy order on a cost without the exact pair model (not a quadratic f).
    """

    name = "OBCD"
    history_fields = ("h",)
    pair_orders = ("random", "cyclic", "jacobi", "greedy")

    def __init__(self, h: SeparableTerm | None = None, *, k: int = 2,
                 pairs: str | None = None, curvature: str = "exact", theta: float = 1e-5,
                 sigma_rule: SigmaRule = "backtracking", sweeps: int = 2,
                 refresh_every: int = 10_000, candidates: int = 8, **kwargs):
        super().__init__(**kwargs)
        h = Zero() if h is None else h
        if not isinstance(h, SeparableTerm):
            raise ValueError(f"OBCD needs a separable term from orthoplug.nonsmooth (the exact "
                             f"subproblem and the Jacobi variant rely on it), got {h!r}")
        if not (isinstance(k, int) and k >= 2):
            raise ValueError(f"block size k must be an integer >= 2, got {k!r}")
        if pairs is not None and pairs not in self.pair_orders:
            raise ValueError(f"unknown pairs {pairs!r}; choose from None (by the cost of an "
                             f"update) or {self.pair_orders}")
        if pairs == "jacobi" and k != 2:
            raise ValueError("the Jacobi pair order updates disjoint pairs: it needs k = 2")
        if curvature not in ("exact", "scalar"):
            raise ValueError(f"curvature must be 'exact' or 'scalar', got {curvature!r}")
        if not (isinstance(theta, (int, float)) and theta > 0):
            raise ValueError(f"theta must be > 0 (it makes F decrease strictly), got {theta!r}")
        self.sigma_rule = as_sigma_rule(sigma_rule)
        if sweeps < 1:
            raise ValueError(f"sweeps must be >= 1, got {sweeps}")
        if not (isinstance(candidates, int) and 1 <= candidates <= PAIR_BATCH):
            raise ValueError(f"candidates must be an integer in [1, {PAIR_BATCH}], got "
                             f"{candidates!r}")
        if pairs == "greedy" and (k != 2 or curvature != "exact"):
            raise ValueError("the greedy pair order ranks row pairs by their exact model: it "
                             "needs k = 2 and curvature='exact'")
        self.h, self.k, self.pairs = h, k, pairs
        self.curvature, self.theta = curvature, float(theta)
        self.sweeps, self.refresh_every = sweeps, refresh_every
        self.candidates = candidates if pairs == "greedy" else 1

    # ---- the run ------------------------------------------------------------------------
    def prepare(self, oracle, x0, geometry):
        """Check the manifold (St(n, r)), the shape, ``k ≤ n`` and ``h(X₀) < ∞``."""
        if not isinstance(geometry, StiefelGeometry):
            raise ValueError(f"OBCD runs on the Stiefel manifold St(n, r) (or O(n)), got "
                             f"{type(geometry).__name__}")
        if x0.ndim != 2:
            raise ValueError(f"OBCD optimises one n × r matrix, got shape {tuple(x0.shape)}")
        if self.k > x0.shape[0]:
            raise ValueError(f"block size k = {self.k} exceeds n = {x0.shape[0]}")
        if not math.isfinite(float(self.h.value(x0))):
            what = ("has negative entries" if self.h.is_indicator else "gives h = inf")
            raise ValueError(f"infeasible initial point for {self.h!r}: it {what}")
        return oracle

    def measure(self, run: Run):
        tracker, geometry = run.tracker, run.geometry
        x = tracker.x
        cost = float(tracker.value()) + float(self.h.value(x))
        g = tracker.gradient()
        if not isinstance(self.h, Zero):
            g = g + self.h.subgradient(x)
        rg = geometry.egrad2rgrad(x, g)
        return cost, float(torch.linalg.norm(rg)), float(geometry.violation(x).max())

    def on_evaluation(self, run: Run, cost, gradient_norm, violation):
        """``history["h"]``: the value of ``h`` at each evaluation."""
        return {"h": float(self.h.value(run.tracker.x))}

    def finalize(self, run: Run, result: SolverResult) -> None:
        """``info["f"]``, ``info["h"]``: the parts of the final cost."""
        hv = float(self.h.value(result.point))
        result.info.update(h=hv, f=result.cost - hv)

    def default_eval_every(self, run: Run):
        """1 for the Jacobi pair order, else the iterations of one sweep of the ``C(n, k)`` row
        blocks capped at 1000 block updates (at least 1)."""
        if run.pairs == "jacobi":
            return 1
        n = run.tracker.x.shape[-2]
        return max(1, min(1000, math.comb(n, self.k)) // run.updates)

    def updates_per_iteration(self, run: Run) -> int:
        """One pass over the rows: ``⌈n/k⌉`` block updates when the tracker reads gradient rows
        without a full gradient (:attr:`~orthoplug.oracles.core.Tracker.row_gradients`), else 1
        (each update then reads a full gradient); 1 for the Jacobi order (a matching moves every
        row)."""
        if run.pairs == "jacobi" or not run.tracker.row_gradients:
            return 1
        return math.ceil(run.tracker.x.shape[-2] / self.k)

    def setup(self, run: Run):
        tracker = run.tracker
        x = tracker.x
        n = x.shape[0]
        run.device, run.dtype = x.device, x.dtype
        run.pairs = self.pairs or default_pair_order(self.k, tracker.row_gradients)
        if self.k == 2 or not isinstance(self.h, Zero):
            require_compiled_search(x, self.name)
        # the exact curvature on the tracker's arrays (NumPy views on the CPU, QuadraticTracker)
        run.exact = (self.curvature == "exact" and self.k == 2 and run.pairs != "jacobi"
                     and isinstance(tracker, PairModel))
        if run.pairs == "greedy" and not run.exact:
            raise ValueError(self.greedy_refusal(tracker))
        if run.exact:
            run.curvature = None  # no σ: the exact curvature majorises by itself
        else:
            self.init_sigma(run, safe_sigma(tracker.oracle))
        if run.exact:
            run.vec_eye2 = host_array(torch.eye(2, dtype=run.dtype).reshape(4))
        # the compiled pair loop: float64 NumPy views of CPU tensors, in C order
        run.kernel = (run.exact and isinstance(tracker, QuadraticArrays)
                      and runs_compiled(tracker.x) and tracker.xa.dtype == np.float64)
        if run.kernel and not (tracker.xa.flags.c_contiguous and tracker.ya.flags.c_contiguous):
            tracker.set_point(tracker.x.contiguous())
        if run.kernel:
            tab = breakpoint_tables(self.h)
            run.h_tables = (tab.th, tab.g, tab.k, tab.inf, tab.pval, tab.knot, tab.h0,
                            tab.shared, tab.continuous)
            run.ca = np.ascontiguousarray(tracker.ca)
            run.da = (np.empty((0, 0)) if tracker.da is None
                      else np.ascontiguousarray(tracker.da, dtype=np.float64))
            run.fval = np.empty(1)
        run.count = 0
        if self.k == 2 and run.pairs != "jacobi":
            # greedy: whole iterations per draw of PAIR_BATCH pairs (random: PAIR_BATCH of them)
            run.queue = PairQueue(run.pairs, n, run.device, self.candidates,
                                  draw_steps=PAIR_BATCH // self.candidates)
        elif run.pairs == "cyclic":
            run.combos = itertools.cycle(itertools.combinations(range(n), self.k))

    def greedy_refusal(self, tracker) -> str:
        """The error of the greedy order on a tracker without the exact pair model."""
        return (f"the greedy pair order ranks pairs by their exact model: it needs a quadratic f "
                f"(QuadraticOracle), got {tracker.oracle.__class__.__name__}")

    def steps(self, run: Run, count: int) -> int:
        """``count`` iterations; on the compiled path their pair steps in
        :meth:`pair_steps`, other paths: ``run.updates`` calls of :meth:`step`."""
        if not run.kernel:
            return super().steps(run, count)
        self.pair_steps(run, count * run.updates)
        return count

    def pair_steps(self, run: Run, count: int) -> None:
        """``count`` pair steps in the compiled loop (:func:`~orthoplug.kernels.obcd.obcd_pairs`),
        entered once per block of pairs (a random batch, a cyclic sweep's end and the refresh
        of ``CX`` split it).

        Raises:
            NonFiniteError: a non-finite update; its ``iterations`` are the whole iterations
                done before it in this call.
        """
        tracker = run.tracker
        nc = self.candidates
        done = 0
        while done < count:
            take = min(count - done, self.refresh_every - run.count % self.refresh_every)
            run.queue.ensure(run.generator)
            block = run.queue.block(min(take, run.queue.available()))
            run.fval[0] = tracker.cost
            k, status = obcd_pairs(tracker.xa, tracker.ya, run.ca, run.da, float(tracker.s),
                                   self.theta, block, nc, not isinstance(self.h, Zero),
                                   *run.h_tables, run.fval)
            tracker.cost = run.fval[0]
            run.queue.advance(k)
            done += k
            run.count += k
            if status:
                raise NonFiniteError(MESSAGES[status], iterations=done // run.updates)
            if run.count % self.refresh_every == 0:
                tracker.refresh()

    def _block(self, run: Run) -> torch.Tensor:
        if self.k == 2:
            run.queue.ensure(run.generator)
            rows = run.queue.next_rows()
            return torch.from_numpy(rows) if isinstance(rows, np.ndarray) else rows
        if run.pairs == "cyclic":
            return torch.tensor(next(run.combos), device=run.device)
        return randperm(run.tracker.x.shape[0], generator=run.generator)[: self.k].to(run.device)

    # ---- steps --------------------------------------------------------------------------
    def step(self, run: Run):
        if run.pairs == "jacobi":
            self._jacobi_step(run)
        elif run.exact:
            self._exact_pair_step(run)
        else:
            self._block_step(run)
        run.count += 1
        if run.count % self.refresh_every == 0 and isinstance(run.tracker, Refreshable):
            run.tracker.refresh()

    def _exact_pair_step(self, run: Run):
        """k = 2 with the exact curvature, on the tracker's arrays: the compiled loop's step
        (:func:`~orthoplug.kernels.obcd.obcd_pairs`) outside it. Reads the next ``candidates``
        queued pairs and applies the first of largest model decrease ``K(I) − K(V)``; nothing
        when none is positive (every ``V = I``)."""
        tracker = run.tracker
        run.queue.ensure(run.generator)
        best, most = None, 0.0
        for _ in range(self.candidates):
            rows = run.queue.next_rows()
            z, g, qt = tracker.pair_model_array(rows, self.theta, psd=False)
            p = g - (qt @ run.vec_eye2).reshape(2, 2).T  # G − mat(Qt vec I)
            v, dec = search_o2_single(p, z, self.h, Qt=qt)
            if dec > most:
                best, most = (rows, v, z), dec
        if best is None:
            return
        rows, v, z = best
        new = v @ z
        if not isinstance(self.h, Zero):
            new = _snap(new)
        if not math.isfinite(float(new.sum())):  # NaN / inf in any entry (|entries| <= 1)
            raise NonFiniteError("non-finite block update")
        tracker.set_rows_array(rows, new)

    def _block_step(self, run: Run):
        """One block of k rows with the scalar curvature (σ checked by ``run.curvature``)."""
        tracker = run.tracker
        x = tracker.x
        rows = self._block(run)
        z = x[rows]
        g = tracker.gradient_rows(rows) @ z.mT
        while True:
            new, pred = self._scalar_block(g, z, run.curvature.sigma)
            trial = x.clone()
            trial[rows] = new
            if self.accept_step(run, trial, pred):
                break
        tracker.set_rows(rows.reshape(-1), new.reshape(-1, new.shape[-1]))

    def _scalar_block(self, g, z, sigma):
        """(V Z, predicted change) for one block with ``ς = σ‖Z‖₂²``: the pair step for k = 2,
        else the closed form (h = 0) or the local method."""
        if self.k == 2:
            return scalar_pair_step(z, g, sigma, self.theta, self.h)
        zz = float(spectral_norm_sq(z))
        s = sigma * zz + self.theta
        p = g - s * torch.eye(self.k, dtype=g.dtype, device=g.device)
        if isinstance(self.h, Zero):
            v = solve_polar(p)
            new = v @ z
        else:
            v, new = local_block_solve(p, z, self.h, self.sweeps)
        if not all_finite(new):
            raise NonFiniteError("non-finite block update")
        w = v - torch.eye(self.k, dtype=g.dtype, device=g.device)
        return new, float((w * g).sum()) + 0.5 * sigma * zz * float((w * w).sum())

    def _jacobi_step(self, run: Run):
        tracker = run.tracker
        x = tracker.x
        pairs = random_matching(x.shape[0], run.generator, run.device)  # (m, 2)
        z = x[pairs]  # (m, 2, r)
        g = tracker.gradient()[pairs] @ z.mT
        while True:
            new, pred = scalar_pair_step(z, g, run.curvature.sigma, self.theta, self.h)
            trial = x.clone()
            trial[pairs.reshape(-1)] = new.reshape(-1, x.shape[1])
            if self.accept_step(run, trial, pred):
                break
        tracker.set_point(trial, value=run.trial_value)

    def info(self, run: Run | None = None):
        """The options (``candidates``: pairs per greedy update, else 1) and, given a run, the
        choices resolved at its start (``pairs``, the curvature, the first σ as
        ``sigma_start``) and its counters (the current ``sigma``, ``backtracks``,
        ``block_updates``)."""
        exact = run is not None and run.exact
        rule = run.curvature if run is not None else None
        return {"h_term": repr(self.h), "k": self.k,
                "pairs": self.pairs if run is None else run.pairs,
                "candidates": self.candidates,
                "curvature": "exact" if exact else "scalar", "theta": self.theta,
                "sigma_rule": repr(self.sigma_rule),
                "sigma_start": None if rule is None else run.curvature_start,
                "sigma": None if rule is None else rule.sigma,
                "backtracks": rule.backtracks if rule is not None else 0,
                "block_updates": run.count if run is not None else 0,
                "updates_per_iteration": run.updates if run is not None else None}
