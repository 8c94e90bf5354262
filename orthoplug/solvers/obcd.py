r"""OBCD: row-block coordinate descent for ``min f(X) + h(X)`` over St(n, r).

Each iteration picks ``k`` distinct rows ``B``, ``Z = X[B]`` (k×r), and sets ``X[B] ← V Z`` with
``V ∈ O(k)``, which keeps ``XᵀX`` unchanged. ``V`` minimises the surrogate

    K(V) = ½ vec(V − I)ᵀ (Q + αI) vec(V − I) + ⟨V, G⟩ + h(V Z),   G = ∇f(X)[B] Zᵀ,

which majorises ``F(X⁺(V)) = f(X⁺) + h(X⁺)`` up to a constant with equality at ``V = I``
whenever ``Q ⪰ Q̲`` (the exact block curvature). Hence ``F(X⁺) ≤ F(X) − α/2 ‖V − I‖²_F``: the
objective never increases (α > 0, default 1e-5 as in the paper).

* ``Q``: ``curvature="exact"`` uses ``Q = Q̲ = 2s (Z D Zᵀ) ⊗ C_BB`` for quadratic
  ``f = s·tr(XᵀCXD)`` (:class:`~orthoplug.oracles.core.QuadraticOracle`; any inertia, so for
  SPCA the step is an exact block minimisation of ``F`` plus the tiny prox) when ``k = 2``;
  otherwise ``Q = ς I`` with ``ς = σ ‖Z‖₂²`` and σ ≥ max(0, λ_max(∇²f)) — 0 for concave quadratic
  ``f``, the oracle's Lipschitz constant otherwise, or (unknown) a local estimate doubled until
  ``f(X⁺) ≤ f(X) + ⟨V − I, G⟩ + ς/2‖V − I‖²`` holds.
* Subproblem: ``k = 2`` — the exact global solver :func:`~orthoplug.subproblems.o2.solve_o2`
  (``O(r log r)``); ``k > 2, h = 0`` (scalar Q) — the closed form ``V = −polar(G − (ς+α)I)``;
  ``k > 2, h ≠ 0`` — a local method: sweeps of exact 2×2 rotations/reflections of pairs of the
  ``k`` rows inside the block, each the global minimiser of ``K`` over its pair, started from
  ``V = I``, so ``K(V̄) ≤ K(I)`` (the paper's fallback requirement) holds by construction.
* Working sets: ``"random"`` (uniform k-subset each iteration, the theory's choice), ``"cyclic"``
  (all k-subsets in lexicographic order) or ``"jacobi"`` (``k = 2``: a fresh random perfect
  matching, ⌊n/2⌋ disjoint pairs updated from the same X in one batched solve). Jacobi needs the
  scalar curvature and separable ``h``: with ``ς_j = σ‖Z_j‖₂²`` and σ ≥ max(0, λ_max(∇²f)) the
  joint surrogate separates over the pairs and majorises ``F`` (per-pair exact curvatures do not:
  ``∇²f`` couples pairs). Not in the paper. ``"greedy"`` (``k = 2``, exact curvature, quadratic
  f on float64 CPU tensors): Gauss–Southwell type, each iteration solves the subproblems of
  ``candidates`` random pairs and applies the one with the largest model decrease
  ``K(I) − K(V)``. Not in the paper.
* Fast path (quadratic f): only the k gradient rows ``2s(CX)[B]D`` are read and ``CX`` is updated
  in ``O(n k r)`` after each change (:class:`~orthoplug.oracles.core.QuadraticTracker`),
  recomputed every ``refresh_every`` iterations against drift. Per iteration (k = 2):
  ``O(n r)`` + ``O(r log r)`` for the subproblem, versus ``O(n² r)`` for a full gradient. A
  Jacobi iteration costs one full gradient plus ⌊n/2⌋ batched subproblems.
* Compiled loop: with ``k = 2``, the exact curvature and float64 CPU tensors the random, cyclic
  and greedy iterations run in :func:`~orthoplug.kernels.obcd.obcd_pairs` (numba), entered once
  per evaluation interval (split at random-pair batches, the end of a cyclic sweep and the
  refresh of ``CX``); pairs are drawn exactly as in the Python path, so the iterates are the
  same. Other devices and dtypes run the same steps through the tracker's arrays in Python.

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

from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.kernels.obcd import STATUS, obcd_pairs
from orthoplug.nonsmooth import SeparableTerm, Zero
from orthoplug.oracles import NonFiniteError, Tracker, host_array
from orthoplug.subproblems.o2 import SNAP, _tables, solve_o2, solve_o2_single, solve_polar

from .base import IterativeSolver, ScalarCurvature
from .jobcd import _spectral_sq, random_matching, random_pairs

__all__ = ["OBCD", "safe_sigma", "local_block_solve"]

_PAIR_BATCH = 1024  # random pairs drawn per generator call


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


def _snap(u):
    """Set entries of modulus ``< SNAP`` (the O(2) search's tolerance, 1e-14) to 0, in place
    (a NumPy array or a torch tensor)."""
    u[abs(u) < SNAP] = 0.0
    return u


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
    """OBCD for ``f + h`` on St(n, r) (see the module docstring for the method).

    Args:
        h: separable nonsmooth term (:mod:`orthoplug.nonsmooth`; default :class:`Zero`).
        k: block size, ``2 ≤ k ≤ n`` (default 2: exact subproblems for every h).
        working_set: the pair / block order, deterministic given ``seed``. Per iteration
            (k = 2, fast path): ``"random"`` (default; uniform pairs, drawn 1024 at a time from
            the run's generator) and ``"cyclic"`` (all pairs in lexicographic order) cost one
            model (``O(r)``), one O(2) search (``O(r log r)``) and one row update of X and
            ``CX`` (``O(n r)``); ``"greedy"`` (k = 2, exact curvature, quadratic f, float64 CPU)
            costs ``candidates`` models and searches plus one row update — worth it when the
            ``O(n r)`` update dominates, i.e. n ≫ candidates · log r; ``"jacobi"`` (k = 2) one
            full gradient plus ⌊n/2⌋ batched searches.
        candidates: pairs compared per greedy iteration (default 8; ignored otherwise).
        curvature: ``"exact"`` (default: ``Q̲`` when f is quadratic and k = 2) or ``"scalar"``.
        alpha: proximal weight α > 0 (default 1e-5).
        sigma: σ of the scalar curvature ``ς = σ‖Z‖₂²``; default :func:`safe_sigma`, else
            estimated with backtracking.
        sweeps: pair sweeps of the local method (k > 2, h ≠ 0).
        refresh_every: recompute the fast path's ``CX`` every this many iterations.
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options (stopping criteria,
            ``seed``, ``eval_every`` — default min(1000, C(n, 2)) block steps, 1 for Jacobi).

    Raises:
        ValueError: invalid options; at run time: a manifold other than St(n, r), ``k > n``, an
            initial point where ``h`` is infinite (e.g. negative entries for NonNegative).

    Per-iteration cost (k = 2): with a :class:`~orthoplug.oracles.core.QuadraticOracle` two
    gradient rows, an ``O(nr)`` update of ``CX`` and the ``O(r log r)`` breakpoint search of the
    exact O(2) subproblem; with any other oracle one full gradient instead of the two rows. A
    Jacobi iteration costs one full gradient plus ⌊n/2⌋ batched subproblems.
    """

    name = "OBCD"
    working_sets = ("random", "cyclic", "jacobi", "greedy")

    def __init__(self, h: SeparableTerm | None = None, *, k: int = 2,
                 working_set: str = "random", curvature: str = "exact", alpha: float = 1e-5,
                 sigma: float | None = None, sweeps: int = 2, refresh_every: int = 10_000,
                 candidates: int = 8, **kwargs):
        super().__init__(**kwargs)
        h = Zero() if h is None else h
        if not isinstance(h, SeparableTerm):
            raise ValueError(f"OBCD needs a separable term from orthoplug.nonsmooth (the exact "
                             f"subproblem and the Jacobi variant rely on it), got {h!r}")
        if not (isinstance(k, int) and k >= 2):
            raise ValueError(f"block size k must be an integer >= 2, got {k!r}")
        if working_set not in self.working_sets:
            raise ValueError(f"unknown working_set {working_set!r}; choose from "
                             f"{self.working_sets}")
        if working_set == "jacobi" and k != 2:
            raise ValueError("the Jacobi working set updates disjoint pairs: it needs k = 2")
        if curvature not in ("exact", "scalar"):
            raise ValueError(f"curvature must be 'exact' or 'scalar', got {curvature!r}")
        if not (isinstance(alpha, (int, float)) and alpha > 0):
            raise ValueError(f"alpha must be > 0 (it makes F decrease strictly), got {alpha!r}")
        if sigma is not None and not sigma >= 0:
            raise ValueError(f"sigma must be >= 0, got {sigma}")
        if sweeps < 1:
            raise ValueError(f"sweeps must be >= 1, got {sweeps}")
        if not (isinstance(candidates, int) and 1 <= candidates <= _PAIR_BATCH):
            raise ValueError(f"candidates must be an integer in [1, {_PAIR_BATCH}], got "
                             f"{candidates!r}")
        if working_set == "greedy" and k != 2:
            raise ValueError("the greedy working set picks row pairs: it needs k = 2")
        self.h, self.k, self.working_set = h, k, working_set
        self.curvature, self.alpha, self.sigma_user = curvature, float(alpha), sigma
        self.sweeps, self.refresh_every = sweeps, refresh_every
        self.candidates = candidates if working_set == "greedy" else 1
        self._h_log: list[float] = []

    # ---- the run ------------------------------------------------------------------------
    def run(self, oracle, x0, geometry):
        """As :meth:`IterativeSolver.run`; ``history["h"]`` and ``info["f"], info["h"]`` added."""
        if not isinstance(geometry, StiefelGeometry):
            raise ValueError(f"OBCD runs on the Stiefel manifold St(n, r) (or O(n)), got "
                             f"{getattr(geometry, 'name', type(geometry).__name__)}")
        x0 = torch.as_tensor(x0)
        geometry.check_point(x0)
        if x0.ndim != 2:
            raise ValueError(f"OBCD optimises one n × r matrix, got shape {tuple(x0.shape)}")
        if self.k > x0.shape[0]:
            raise ValueError(f"block size k = {self.k} exceeds n = {x0.shape[0]}")
        h0 = float(self.h.value(x0))
        if not math.isfinite(h0):
            what = ("has negative entries" if self.h.is_indicator else "gives h = inf")
            raise ValueError(f"infeasible initial point for {self.h!r}: it {what}")
        self._h_log = []
        res = super().run(oracle, x0, geometry)
        if self.log_verbosity >= 1:
            res.history["h"] = self._h_log[: len(res.history["cost"])]
        hv = float(self.h.value(res.point))
        res.info.update(h=hv, f=res.cost - hv)
        return res

    def measure(self, tracker: Tracker, geometry):
        x = tracker.x
        hv = float(self.h.value(x))
        cost = float(tracker.value()) + hv
        g = tracker.gradient()
        if not isinstance(self.h, Zero):
            g = g + self.h.subgradient(x)
        rg = geometry.egrad2rgrad(x, g)
        self._h_log.append(hv)
        return cost, float(torch.linalg.norm(rg)), float(geometry.violation(x).max())

    def default_eval_every(self, tracker):
        """1 for the Jacobi working set, else one sweep of the ``C(n, k)`` row blocks capped at
        1000 iterations."""
        if self.working_set == "jacobi":
            return 1
        n = tracker.x.shape[-2]
        return max(1, min(1000, math.comb(n, self.k)))

    def setup(self, tracker, geometry, generator):
        x = tracker.x
        n = x.shape[0]
        self.dev, self.dtype = x.device, x.dtype
        try:
            quadratic = tracker.block_curvature(
                torch.zeros(1, 2, dtype=torch.long, device=self.dev), x[:2][None], psd=False
            ) is not None
        except TypeError:  # a tracker without the exact (indefinite) curvature
            quadratic = False
        self.exact = (self.curvature == "exact" and self.k == 2 and quadratic
                      and self.working_set != "jacobi")
        if self.exact:  # the exact curvature needs no σ
            self.sigma, self.backtrack, self.backtracks = self.sigma_user, False, 0
        else:
            self.init_sigma(tracker, generator, self.sigma_user if self.sigma_user is not None
                            else safe_sigma(tracker.oracle))
        self.snap = not isinstance(self.h, Zero)
        self.eye2 = torch.eye(2, dtype=self.dtype, device=self.dev)
        self.eyek = torch.eye(self.k, dtype=self.dtype, device=self.dev)
        # exact pair steps on the tracker's arrays (NumPy views on the CPU, see QuadraticTracker)
        self.arrays = self.exact and hasattr(tracker, "pair_model_array")
        if self.arrays:
            self.vec_eye2 = host_array(self.eye2.reshape(4))
            on_host = isinstance(self.vec_eye2, np.ndarray)
            self.solve_pair = solve_o2_single if on_host else solve_o2
        # the compiled pair loop: float64 NumPy views of CPU tensors, in C order
        xa = getattr(tracker, "xa", None)
        self.kernel = self.arrays and isinstance(xa, np.ndarray) and xa.dtype == np.float64
        if self.kernel and not (xa.flags.c_contiguous and tracker.ya.flags.c_contiguous):
            tracker.set_point(tracker.x.contiguous())
        if self.working_set == "greedy" and not self.kernel:
            raise ValueError("the greedy working set runs in the compiled pair loop: it needs "
                             "k = 2, curvature='exact', a quadratic f (QuadraticOracle) and "
                             "float64 CPU tensors")
        if self.kernel:
            tab = _tables(self.h)
            self.h_tables = (tab.th, tab.g, tab.k, tab.inf, tab.pval, tab.knot, tab.h0,
                             tab.shared, tab.continuous)
            self.ca = np.ascontiguousarray(tracker.ca)
            self.da = (np.empty((0, 0)) if tracker.da is None
                       else np.ascontiguousarray(tracker.da, dtype=np.float64))
            self.fval = np.empty(1)
        self.count = 0
        self.pairs, self.pair_pos = None, 0
        if self.working_set == "cyclic":
            if self.k == 2:
                self.pairs = host_array(torch.triu_indices(n, n, 1, device=self.dev).T.contiguous())
            else:
                self._combos = itertools.cycle(itertools.combinations(range(n), self.k))

    def _pair(self, n, generator):
        """The next pair (k = 2) as a NumPy index array on the CPU, else a tensor: cyclic order,
        or uniform random pairs drawn ``_PAIR_BATCH`` at a time."""
        if self.working_set == "random":
            if self.pairs is None or self.pair_pos == self.pairs.shape[0]:
                self.pairs = host_array(random_pairs(n, _PAIR_BATCH, generator, self.dev))
                self.pair_pos = 0
            self.pair_pos += 1
            return self.pairs[self.pair_pos - 1]
        return self.pairs[self.count % self.pairs.shape[0]]

    def _pair_block(self, n, generator, count):
        """The next at most ``count`` pairs (at least ``self.candidates``) as one NumPy array:
        the same stream as :meth:`_pair` (random batches of ``_PAIR_BATCH`` pairs, rounded down to
        a multiple of ``candidates`` for greedy; cyclic: the next slice of the sweep)."""
        if self.working_set == "cyclic":
            pos = self.count % self.pairs.shape[0]
            return self.pairs[pos: pos + count]
        if self.pairs is None or self.pair_pos == self.pairs.shape[0]:
            size = _PAIR_BATCH - _PAIR_BATCH % self.candidates
            self.pairs = host_array(random_pairs(n, size, generator, self.dev))
            self.pair_pos = 0
        block = self.pairs[self.pair_pos: self.pair_pos + count]
        self.pair_pos += block.shape[0]
        return block

    def steps(self, tracker, geometry, generator, count):
        """``count`` pair steps in the compiled loop (:func:`~orthoplug.kernels.obcd.obcd_pairs`),
        entered once per block of pairs (a random batch, a cyclic sweep's end and the refresh
        of ``CX`` split an interval); other paths: one :meth:`step`."""
        if not self.kernel:
            return super().steps(tracker, geometry, generator, count)
        n = tracker.xa.shape[0]
        nc = self.candidates
        done = 0
        while done < count:
            take = min(count - done, self.refresh_every - self.count % self.refresh_every)
            block = self._pair_block(n, generator, take * nc)
            self.fval[0] = tracker._f
            k, status = obcd_pairs(tracker.xa, tracker.ya, self.ca, self.da, float(tracker.s),
                                   self.alpha, block, nc, self.snap, *self.h_tables, self.fval)
            tracker._f = float(self.fval[0])
            done += k
            self.count += k
            if status:
                raise NonFiniteError(STATUS[status], iterations=done)
            if self.count % self.refresh_every == 0:
                tracker.refresh()
        return done

    def _block(self, n, generator) -> torch.Tensor:
        if self.k == 2:
            rows = self._pair(n, generator)
            return torch.from_numpy(rows) if isinstance(rows, np.ndarray) else rows
        if self.working_set == "cyclic":
            return torch.tensor(next(self._combos), device=self.dev)
        return torch.randperm(n, generator=generator, device=generator.device)[: self.k].to(
            self.dev)

    # ---- steps --------------------------------------------------------------------------
    def step(self, tracker, geometry, generator):
        if self.working_set == "jacobi":
            self._jacobi_step(tracker, generator)
        elif self.arrays:
            self._exact_pair_step(tracker, generator)
        else:
            self._block_step(tracker, generator)
        self.count += 1
        if self.count % self.refresh_every == 0 and hasattr(tracker, "refresh"):
            tracker.refresh()

    def _solve_scalar(self, g, z, sig):
        """(V, V Z) for the scalar curvature ``ς = sig`` (one block, k rows)."""
        s = sig + self.alpha
        p = g - s * self.eyek
        if self.k == 2:
            v = solve_o2(p, z, self.h, s=s)
            return v, v @ z
        if isinstance(self.h, Zero):
            v = solve_polar(p)
            return v, v @ z
        return local_block_solve(p, z, self.h, self.sweeps)

    def _exact_pair_step(self, tracker, generator):
        """k = 2 with the exact curvature, on the tracker's arrays (the fast path's hot loop)."""
        rows = self._pair(tracker.xa.shape[0], generator)
        z, g, qt = tracker.pair_model_array(rows, self.alpha, psd=False)
        p = g - (qt @ self.vec_eye2).reshape(2, 2).T  # G − mat(Qt vec I)
        new = self.solve_pair(p, z, self.h, Qt=qt) @ z
        tracker.set_rows_array(rows, self._checked(new))

    def _block_step(self, tracker, generator):
        x = tracker.x
        rows = self._block(x.shape[0], generator)
        z = x[rows]
        g = tracker.gradient_rows(rows) @ z.mT
        zz = float(_spectral_sq(z))
        while True:
            v, new = self._solve_scalar(g, z, self.sigma * zz)
            if not self.backtrack:
                break
            w = v - self.eyek
            pred = float((w * g).sum()) + 0.5 * self.sigma * zz * float((w * w).sum())
            trial = x.clone()
            trial[rows] = new
            if self.accept_step(tracker, trial, pred):
                break
        tracker.set_rows(rows.reshape(-1), self._checked(new).reshape(-1, new.shape[-1]))

    def _checked(self, new):
        """The new rows ``V Z``, snapped (h ≠ 0); :class:`NonFiniteError` if not finite."""
        if self.snap:
            new = _snap(new)
        if not math.isfinite(float(new.sum())):  # NaN / inf in any entry (|entries| <= 1)
            raise NonFiniteError("non-finite block update")
        return new

    def _jacobi_step(self, tracker, generator):
        x = tracker.x
        n = x.shape[0]
        pairs = random_matching(n, generator, self.dev)  # (m, 2)
        z = x[pairs]  # (m, 2, r)
        g = tracker.gradient()[pairs] @ z.mT
        zz = _spectral_sq(z)
        while True:
            s = self.sigma * zz + self.alpha
            v = solve_o2(g - s[:, None, None] * self.eye2, z, self.h, s=s)
            new = self._checked(v @ z)
            trial = x.clone()
            trial[pairs.reshape(-1)] = new.reshape(-1, x.shape[1])
            w = v - self.eye2
            pred = float((w * g).sum() + 0.5 * self.sigma * (zz * (w * w).sum((-2, -1))).sum())
            if self.accept_step(tracker, trial, pred):
                break
        tracker.set_point(trial, value=self.trial_value)

    def info(self):
        return {"h_term": repr(self.h), "k": self.k, "working_set": self.working_set,
                "curvature": "exact" if getattr(self, "exact", False) else "scalar",
                "alpha": self.alpha, "sigma": getattr(self, "sigma", self.sigma_user),
                "backtracks": getattr(self, "backtracks", 0)}
