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
  (the fast path) — and ``ς I`` otherwise, ``ς = σ ‖X[B]‖₂²`` with σ the Lipschitz constant if
  known, else estimated and doubled until the majorisation holds (so no step increases f).
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
For ``f = s·tr(XᵀCX)`` (a :class:`~orthoplug.oracles.core.QuadraticOracle` without D) GS-JOBCD
instead runs column J-Jacobi sweeps (:mod:`orthoplug.solvers.jjacobi`): each pair minimises f
exactly, and one iteration is one sweep of ``n(n−1)/2`` pairs. Column steps keep the column space
of X, so they cannot solve problems on iSt(n, k < n); ``side="column"`` needs a square X.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import torch

from orthoplug.kernels.jobcd import (
    NEEDS_BATCHED_PAIR,
    NONFINITE_COST,
    NONFINITE_CURVATURE,
    NONFINITE_UPDATE,
    OK,
    gs_pairs,
)
from orthoplug.oracles import FiniteSumOracle, NonFiniteError, QuadraticTracker, host_array
from orthoplug.subproblems.jorth2 import solve_jorth2x2, solve_jorth2x2_single

from .base import IterativeSolver, ScalarCurvature

__all__ = ["GSJOBCD", "JJOBCD", "VRJJOBCD", "random_matching", "random_pairs"]

_EYE2 = ((1.0, 0.0), (0.0, 1.0))
#: GS-JOBCD draws its random pairs this many at a time (one generator call per batch).
PAIR_BATCH = 1024
_KERNEL_ERRORS = {NONFINITE_CURVATURE: "non-finite block curvature",
                  NONFINITE_UPDATE: "non-finite row update", NONFINITE_COST: "non-finite cost"}


def _spectral_sq(z: torch.Tensor) -> torch.Tensor:
    """``‖Z_i‖₂²`` for (..., m, k) row blocks; for m = 2 in closed form from the 2×2 Gram."""
    if z.shape[-2] != 2:
        return torch.linalg.matrix_norm(z, ord=2) ** 2
    g = z @ z.mT
    a, b, c = g[..., 0, 0], g[..., 0, 1], g[..., 1, 1]
    return 0.5 * (a + c) + torch.sqrt((0.5 * (a - c)) ** 2 + b * b)


def random_matching(n: int, generator: torch.Generator, device=None,
                    batch: tuple[int, ...] = (), pairs: int | None = None) -> torch.Tensor:
    """Uniformly random perfect matchings of ``range(n)``: ``(*batch, ⌊n/2⌋, 2)``; odd n: one idles.

    ``pairs`` keeps only the first pairs of each matching (``pairs=1``: one uniformly random
    pair). Drawn on the generator's device, returned on ``device``.
    """
    if not batch:
        perm = torch.randperm(n, generator=generator, device=generator.device)
    else:
        keys = torch.rand(*batch, n, generator=generator, device=generator.device)
        perm = keys.argsort(dim=-1)
    m = n // 2 if pairs is None else min(pairs, n // 2)
    return perm[..., : 2 * m].reshape(*batch, m, 2).to(device)


def random_pairs(n: int, count: int, generator: torch.Generator, device=None) -> torch.Tensor:
    """``count`` independent uniformly random pairs ``(i, j)``, ``i ≠ j``, of ``range(n)``:
    (count, 2), drawn on the generator's device (two ``randint`` calls), returned on ``device``."""
    i = torch.randint(n, (count,), generator=generator, device=generator.device)
    j = torch.randint(n - 1, (count,), generator=generator, device=generator.device)
    return torch.stack((i, j + (j >= i)), 1).to(device)


def _model_change(v: torch.Tensor, m: torch.Tensor, z: torch.Tensor, sigma: float) -> float:
    """Scalar majoriser's change ``Σ_i ⟨W_i, M_i⟩ + σ‖Z_i‖₂²/2 ‖W_i‖²_F``, ``W = V − I``."""
    w = v - torch.eye(2, dtype=v.dtype, device=v.device)
    quad = _spectral_sq(z) * (w * w).sum(dim=(-2, -1))
    return float((w * m).sum() + 0.5 * sigma * quad.sum())


def solve_pair(jb: list[float], m: list[list[float]], *, qd: list[list[float]] | None = None,
               s: float | None = None) -> tuple[tuple[float, float], tuple[float, float]]:
    """Exact 2×2 step ``V`` (nested tuple) for one pair in plain floats.

    ``m = G[B] Zᵀ`` (2×2), ``jb = (j_i, j_j)``; curvature ``qd`` (4×4, θ included) or the scalar
    ``s`` (θ included). ``P = M − mat(Qd vec I)`` as in :func:`solve_blocks`.
    """
    (m11, m12), (m21, m22) = m
    if qd is None:
        return solve_jorth2x2_single(jb, ((m11 - s, m12), (m21, m22 - s)), s=s)
    p = ((m11 - qd[0][0] - qd[0][3], m12 - qd[2][0] - qd[2][3]),
         (m21 - qd[1][0] - qd[1][3], m22 - qd[3][0] - qd[3][3]))
    return solve_jorth2x2_single(jb, p, Qd=qd)


def _with_theta(q: list[list[float]], theta: float) -> list[list[float]]:
    """``q + θ I4`` for a 4×4 nested list (modified in place and returned)."""
    for r in range(4):
        q[r][r] += theta
    return q


def solve_blocks(jvec: torch.Tensor, pairs: torch.Tensor, z: torch.Tensor, m: torch.Tensor,
                 theta: float, *, sigma: float | None = None,
                 q_exact: torch.Tensor | None = None) -> torch.Tensor:
    """Exact 2×2 steps ``V`` for row pairs (K, 2) with rows ``z`` (K, 2, k) and ``m = G[B] Zᵀ``.

    Curvature ``q_exact`` (K, 4, 4) if given, else the scalar ``σ‖Z‖₂² I``; θ is added. A single
    pair (K = 1) goes to the plain-float solver :func:`solve_pair`, many to the batched one.
    """
    jb = jvec[pairs]
    eye = torch.eye(2, dtype=z.dtype, device=z.device)
    if q_exact is not None:
        if pairs.shape[0] == 1:
            v = solve_pair(jb[0].tolist(), m[0].tolist(),
                           qd=_with_theta(q_exact[0].tolist(), theta))
            return torch.tensor([v], dtype=z.dtype, device=z.device)
        qd = q_exact + theta * torch.eye(4, dtype=z.dtype, device=z.device)
        p = m - (qd @ eye.reshape(4)).reshape(-1, 2, 2).mT  # mat(Qd vec I), column-major
        return solve_jorth2x2(jb, p, Qd=qd)
    s = sigma * _spectral_sq(z) + theta
    if not bool(torch.isfinite(s).all()):  # rows so large that ‖Z‖₂² overflows
        raise NonFiniteError("non-finite block curvature")
    if pairs.shape[0] == 1:
        v = solve_pair(jb[0].tolist(), m[0].tolist(), s=float(s[0]))
        return torch.tensor([v], dtype=z.dtype, device=z.device)
    return solve_jorth2x2(jb, m - s[:, None, None] * eye, s=s)


def jacobi_step(x: torch.Tensor, g: torch.Tensor, jvec: torch.Tensor, sigma: float,
                theta: float, generator: torch.Generator,
                pairs_per_matrix: int | None = None) -> tuple[torch.Tensor, float]:
    """One J-JOBCD update of every matrix in ``x`` (*batch, n, k) from the gradient ``g``.

    Each matrix gets its own random matching (or only its first ``pairs_per_matrix`` pairs;
    1 gives a Gauss–Seidel step per matrix); all pairs are solved in one batched call.
    Returns the new point and the scalar majoriser's predicted change
    ``Σ ⟨W_i, M_i⟩ + σ‖Z_i‖₂²/2 ‖W_i‖²`` (≤ 0), so ``f(X⁺) ≤ f(X) + predicted`` when σ ≥ L_f.
    """
    batch, (n, k) = x.shape[:-2], x.shape[-2:]
    xb, gb = x.reshape(-1, n, k), g.reshape(-1, n, k)
    nb = xb.shape[0]
    pairs = random_matching(n, generator, x.device, (nb,), pairs_per_matrix)  # (nb, m, 2)
    bidx = torch.arange(nb, device=x.device)[:, None, None]
    z = xb[bidx, pairs]  # (nb, m, 2, k)
    mlin = gb[bidx, pairs] @ z.mT
    flat = pairs.reshape(-1, 2)
    zf, mf = z.reshape(-1, 2, k), mlin.reshape(-1, 2, 2)
    v = solve_blocks(jvec, flat, zf, mf, theta, sigma=sigma)
    new = v @ zf
    if not bool(torch.isfinite(new).all()):
        raise NonFiniteError("non-finite block update")
    predicted = _model_change(v, mf, zf, sigma)
    out = xb.clone()
    out[bidx, pairs] = new.reshape(nb, -1, 2, k)
    return out.reshape(*batch, n, k), predicted


SIDES = ("row", "column")


class _JOBCDBase(ScalarCurvature, IterativeSolver):
    sides = SIDES

    def __init__(self, *, theta: float = 1e-6, sigma: float | None = None, side: str = "row",
                 sigma_shrink: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        if side not in self.sides:
            raise ValueError(f"side must be one of {self.sides}, got {side!r}")
        if not 0 < sigma_shrink <= 1:
            raise ValueError(f"sigma_shrink must be in (0, 1], got {sigma_shrink}")
        self.side, self.sigma_shrink = side, float(sigma_shrink)
        if not theta > 0:
            raise ValueError(f"theta must be > 0 (it makes the subproblem coercive), got {theta}")
        if sigma is not None and not sigma > 0:
            raise ValueError(f"sigma must be > 0, got {sigma}")
        self.theta = float(theta)
        self.sigma_user = sigma

    def setup(self, tracker, geometry, generator):
        if not hasattr(geometry, "j"):
            raise ValueError(f"{self.name} needs a J-orthogonal or indefinite Stiefel manifold")
        self.column = self.resolve_side(tracker, geometry) == "column"
        self.jvec = (geometry.jk if self.column else geometry.j).like(tracker.x)
        self.init_sigma(tracker, generator, self.sigma_user or tracker.oracle.lipschitz)

    def resolve_side(self, tracker, geometry) -> str:
        """The side used in this run (``"row"`` or ``"column"``, checked against X's shape)."""
        n, k = tracker.x.shape[-2:]
        if self.side == "column" and n != k:
            raise ValueError(f"{self.name}: side='column' needs a square X (O(J)), got {n}×{k}: "
                             "column steps keep the column space of X, so they cannot reach the "
                             "optimum over iSt(n, k < n)")
        return self.side

    def oriented(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` as the solver's row-step code sees it: ``t`` (row side) or its transpose (a
        view; column side), so that column pairs of X are row pairs of ``oriented(X)``."""
        return t.mT if self.column else t

    def pair_step(self, x, g, generator, pairs_per_matrix=None):
        """:func:`jacobi_step` on the solver's side (``X`` and ``∇f`` transposed for columns)."""
        new, predicted = jacobi_step(self.oriented(x), self.oriented(g), self.jvec, self.sigma,
                                     self.theta, generator, pairs_per_matrix)
        return (new.mT.contiguous() if self.column else new), predicted

    def _step_checked(self, tracker, make_step):
        """Take ``make_step(x) -> (x_new, predicted)``, re-proposed until :meth:`accept_step`."""
        while True:
            x_new, predicted = make_step(tracker.x)
            if self.accept_step(tracker, x_new, predicted):
                tracker.set_point(x_new, value=self.trial_value)
                return

    def info(self):
        return {"theta": self.theta, "sigma": self.sigma_user, "backtracks": self.backtracks,
                "side": "column" if getattr(self, "column", False) else "row",
                "sigma_shrink": self.sigma_shrink}


class GSJOBCD(_JOBCDBase):
    """Gauss–Seidel JOBCD: one row (or column) pair per iteration, solved exactly.

    On the quadratic fast path with float64 CPU tensors the pair loop runs compiled
    (:func:`orthoplug.kernels.jobcd.gs_pairs`): Python enters it once per chunk of iterations (up
    to the next evaluation, refresh or batch of random pairs) with the same pairs, hence the same
    iterates, as the per-pair path that other devices and dtypes take. Per iteration, with
    ``Z = X[B]`` (2×k), the model reads two rows of X and Y = CX and ``C_BB`` (O(k), O(k²) with a
    D), the 2×2 solve is O(1), and a step that moves writes the two rows of X and updates Y in one
    pass (O(nk): the memory floor of a row step, about one rank-1 update of an n×k array).

    Pair orders (``pairs=``), all deterministic given ``seed``:

    * ``"random"`` (default): uniform with replacement, ``i ≠ j``, drawn :data:`PAIR_BATCH` at a
      time from the run's generator. Cost: the model and solve of one pair plus the O(nk) update.
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
        sigma: scalar curvature constant (``Q = σ‖X[B]‖₂² I``) for non-quadratic costs;
            default: the oracle's Lipschitz constant, else estimated with backtracking.
        side: ``"auto"`` (default), ``"row"`` or ``"column"``. ``"auto"`` takes the column
            J-Jacobi sweeps when they apply — square X, ``QuadraticOracle`` without D,
            ``curvature="exact"`` — (measured fastest: ``benchmarks/jobcd_hevp.py``), else rows.
        pairs: ``"random"``, ``"cyclic"`` or ``"greedy"`` (above; for column J-Jacobi, greedy
            takes the best of ``candidates`` random pairs). Default ``None``: cyclic for column
            J-Jacobi, random otherwise.
        candidates: pairs compared per greedy iteration (default 8).
        curvature: ``"exact"`` (default; uses Q̲ when the cost is quadratic) or ``"scalar"``.
        refresh_every: recompute the row fast path's cached ``CX`` every this many iterations.
        sigma_shrink: adaptive σ for the scalar majoriser when < 1 (default 1: σ only doubles
            on rejection): every step is checked, σ shrinks by this factor after accepted steps
            and doubles on rejections; starts from a Barzilai–Borwein curvature when no σ is
            known (:class:`~orthoplug.solvers.base.ScalarCurvature`). Also for J-JOBCD.
        jacobi_tol, max_boost, same_sign, candidates: options of the column J-Jacobi sweeps
            (:class:`~orthoplug.solvers.jjacobi.ColumnJacobi`: ``tol``, ``max_boost``,
            ``same_sign``, ``candidates``).
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options (stopping criteria,
            ``seed``, ``eval_every`` — default one sweep of ``n(n−1)/2`` pairs capped at 1000;
            1 for column J-Jacobi, whose iteration is already a sweep).

    Iterations: one pair, except with column J-Jacobi, where one iteration is one sweep of
    ``n(n−1)/2`` pair rotations (which then stops by itself, with the reason "converged", once
    a cyclic sweep rotates no pair).

    Per-iteration cost: with a :class:`~orthoplug.oracles.core.QuadraticOracle` (the fast
    path) two rows of ``∇f`` read from the cached ``CX``, an ``O(nk)`` update of ``CX`` and one
    exact 2×2 subproblem; column J-Jacobi ``O(n)`` per pair rotation, ``O(n³)`` per sweep; with
    any other oracle one full gradient (the point changed), plus cost evaluations while σ is
    being estimated.
    """

    name = "GS-JOBCD"
    sides = ("auto", *SIDES)

    def __init__(self, *, pairs: str | None = None, curvature: str = "exact",
                 refresh_every: int = 10_000, side: str = "auto", jacobi_tol: float | None = None,
                 max_boost: float = 4.0, same_sign: bool = True, candidates: int = 8,
                 **kwargs):
        super().__init__(side=side, **kwargs)
        if pairs not in (None, "random", "cyclic", "greedy"):
            raise ValueError(f"pairs must be 'random', 'cyclic' or 'greedy', got {pairs!r}")
        if curvature not in ("exact", "scalar"):
            raise ValueError(f"curvature must be 'exact' or 'scalar', got {curvature!r}")
        if not (isinstance(candidates, int) and candidates >= 1):
            raise ValueError(f"candidates must be an int >= 1, got {candidates!r}")
        if not (isinstance(refresh_every, int) and refresh_every >= 1):
            raise ValueError(f"refresh_every must be an int >= 1, got {refresh_every!r}")
        self.pairs, self.curvature, self.refresh_every = pairs, curvature, refresh_every
        self.candidates = candidates if pairs == "greedy" else 1
        self.jacobi_options = dict(tol=jacobi_tol, max_boost=max_boost, same_sign=same_sign,
                                   candidates=candidates)

    def _column_jacobi_applies(self, tracker) -> bool:
        n, k = tracker.x.shape[-2:]
        quad = tracker.oracle.quadratic
        return (n == k and tracker.x.ndim == 2 and quad is not None and quad.d is None
                and self.curvature == "exact")

    def resolve_side(self, tracker, geometry):
        """``"auto"`` resolves to the column side when column J-Jacobi applies, else rows."""
        if self.side == "auto":
            return "column" if self._column_jacobi_applies(tracker) else "row"
        return super().resolve_side(tracker, geometry)

    def default_eval_every(self, tracker):
        """One sweep of the ``n(n − 1)/2`` pairs capped at 1000 iterations (1 for column
        J-Jacobi, whose iteration is a sweep)."""
        if self.jacobi is not None:
            return 1
        n = tracker.x.shape[-2]
        return max(1, min(1000, n * (n - 1) // 2))

    def setup(self, tracker, geometry, generator):
        super().setup(tracker, geometry, generator)
        n = tracker.x.shape[-1 if self.column else -2]
        if n < 2:
            raise ValueError("JOBCD needs n >= 2 rows (or columns on the column side)")
        self.jacobi = None
        if self.column and self._column_jacobi_applies(tracker):
            from .jjacobi import ColumnJacobi

            quad = tracker.oracle.quadratic
            self.jacobi = ColumnJacobi(quad._cd(tracker.x)[0].cpu().numpy(), quad.scale,
                                       self.jvec.cpu().numpy(),
                                       order=self.pairs or "cyclic", **self.jacobi_options)
            return
        self.exact = not self.column and self.curvature == "exact" and tracker.block_curvature(
            torch.zeros(1, 2, dtype=torch.long, device=tracker.x.device),
            tracker.x[:2][None]) is not None
        self.compiled = (self.exact and isinstance(tracker, QuadraticTracker) and tracker.on_host
                         and tracker.xa.dtype == np.float64)
        if self.pairs == "greedy" and not self.compiled:
            raise ValueError("pairs='greedy' runs in a compiled kernel only: column J-Jacobi "
                             "(square X, QuadraticOracle without D) or row pairs with a "
                             "QuadraticOracle cost, curvature='exact' and float64 CPU tensors "
                             f"(got {tracker.oracle.__class__.__name__}, "
                             f"curvature={self.curvature!r}, {tracker.x.dtype} on "
                             f"{tracker.x.device})")
        if self.compiled:
            self._jarr = host_array(self.jvec).astype(np.float64)
            self._d = tracker.da if tracker.da is not None else np.empty((0, 0))
            self._clip = not tracker.oracle.curvature_is_psd
        if self.exact:
            # the exact pair step on the tracker's arrays (NumPy views on the CPU, see
            # QuadraticTracker), else on its tensors
            if hasattr(tracker, "pair_model_array"):
                self._pair_model = partial(tracker.pair_model_array, prox=self.theta)
                self._set_pair, like = tracker.set_rows_array, tracker.xa
            else:
                self._pair_model = partial(self._tensor_pair_model, tracker)
                self._set_pair, like = partial(self._set_tensor_pair, tracker), tracker.x
            self._v_array = (partial(np.array, dtype=like.dtype) if isinstance(like, np.ndarray)
                             else partial(torch.tensor, dtype=like.dtype, device=like.device))
        self.jlist = self.jvec.tolist()
        self.count = 0
        if self.pairs == "cyclic":
            self._set_pairs(torch.triu_indices(n, n, 1, device=tracker.x.device).T)
        else:
            self._npairs = self._cursor = 0

    def _set_pairs(self, pairs: torch.Tensor) -> None:
        """Queue the pairs (m, 2) to use next: as index rows (NumPy on the CPU) and, for the
        per-pair path, Python ints."""
        self._pair_rows = host_array(pairs.contiguous())
        self._pair_list = None if self.compiled else pairs.tolist()
        self._npairs = pairs.shape[0]
        self._cursor = 0

    def _refill(self, tracker, generator) -> None:
        """Past the end of the queue: random pairs are drawn :data:`PAIR_BATCH` (× candidates)
        at a time (uniform, with replacement, i ≠ j; deterministic given the seed), cyclic ones
        repeat the list."""
        if self._cursor + self.candidates > self._npairs:
            if self.pairs == "cyclic":
                self._cursor = 0
            else:
                self._set_pairs(random_pairs(self.oriented(tracker.x).shape[-2],
                                             PAIR_BATCH * self.candidates, generator,
                                             tracker.x.device))

    def steps(self, tracker, geometry, generator, count):
        if self.jacobi is not None or not self.compiled:
            return super().steps(tracker, geometry, generator, count)
        self._refill(tracker, generator)
        return self._compiled_steps(tracker, count)

    def step(self, tracker, geometry, generator):
        if self.jacobi is not None:  # column J-Jacobi: one sweep
            x, f0 = tracker.x, float(tracker.value())
            new = self.jacobi.sweep(x.detach().cpu().numpy(), generator)
            tracker.set_point(torch.from_numpy(new).to(x.device))
            if self.jacobi.converged:
                self.finished = (f"converged: a cyclic sweep rotated no pair (off-diagonals "
                                 f"≤ {self.jacobi.tol:g} relative)")
            elif float(tracker.value()) > f0 + 1e-12 * max(1.0, abs(f0)):
                # every rotation decreases f in exact arithmetic; an increase means rounding
                # dominates (e.g. an infimum approached only as ‖X‖ → ∞): keep the old point
                tracker.set_point(x)
                self.finished = ("stopped: a sweep increased f (rounding dominates the "
                                 "remaining decrease); kept the point before it")
            return
        self._refill(tracker, generator)
        if self.compiled:
            self._compiled_steps(tracker, 1)
            return
        k = self._cursor
        self._cursor = k + 1
        rows = self._pair_rows[k]
        i, j = self._pair_list[k]
        if self.exact:
            self._exact_step(tracker, rows, i, j)
            return None
        pair = torch.as_tensor(rows)[None]
        g_rows = (self.oriented(tracker.gradient())[pair] if self.column
                  else tracker.gradient_rows(pair))

        def make_step(x):
            z = self.oriented(x)[pair]
            m = g_rows @ z.mT
            v = solve_blocks(self.jvec, pair, z, m, self.theta, sigma=self.sigma)
            new = v @ z
            if not bool(torch.isfinite(new).all()):
                raise NonFiniteError("non-finite block update")
            x_new = x.clone()
            self.oriented(x_new)[pair[0]] = new[0]
            return x_new, _model_change(v, m, z, self.sigma)

        self._step_checked(tracker, make_step)

    def _exact_step(self, tracker, rows, i, j) -> None:
        """One exact pair step outside the kernel (other devices and dtypes)."""
        self.count += 1
        z, m, qd = self._pair_model(rows)
        v = solve_pair([self.jlist[i], self.jlist[j]], m.tolist(), qd=qd.tolist())
        if v != _EYE2:  # V = I (a block already at its optimum) changes nothing
            # a non-finite V Z raises NonFiniteError: X stays the last finite point
            self._set_pair(rows, self._v_array(v) @ z)
        if self.count % self.refresh_every == 0:
            tracker.refresh()

    def _compiled_steps(self, tracker, count: int) -> int:
        """Up to ``count`` iterations in the kernel, stopping at the end of the queued
        pairs, at the next refresh and after :data:`PAIR_BATCH` (so the run's clock is read at
        least that often); returns how many it took."""
        cand = self.candidates
        steps = min(count, PAIR_BATCH, (self._npairs - self._cursor) // cand,
                    self.refresh_every - self.count % self.refresh_every)
        done, f, status = gs_pairs(tracker.xa, tracker.ya, tracker.ca, self._d, tracker.s,
                                   tracker._f, self._jarr, self.theta, self._clip,
                                   self._pair_rows, self._cursor, steps, cand)
        tracker._f = f
        self._cursor += done * cand
        self.count += done
        if status == NEEDS_BATCHED_PAIR:  # w± ≤ 0 after rounding: this pair on the per-pair
            rows = self._pair_rows[self._cursor]  # path, whose solver falls back to the batched one
            self._cursor += 1
            self._exact_step(tracker, rows, int(rows[0]), int(rows[1]))
            return done + 1
        if status != OK:
            if status == NONFINITE_COST:  # Y moved, X did not: recompute Y and f from X
                tracker.refresh()
            raise NonFiniteError(_KERNEL_ERRORS[status], iterations=done)
        if self.count % self.refresh_every == 0:
            tracker.refresh()
        return done

    def _tensor_pair_model(self, tracker, rows):
        """``(Z, M, Q̲ + θI₄)`` of one pair for a tracker with the exact curvature but without
        the array API (``QuadraticTracker.pair_model_array`` on its tensors)."""
        pair = torch.as_tensor(rows)[None]
        z = tracker.x[pair]  # (1, 2, k)
        q = tracker.block_curvature(pair, z)[0]
        m = tracker.gradient_rows(pair)[0] @ z[0].mT
        return z[0], m, q + self.theta * torch.eye(4, dtype=q.dtype, device=q.device)

    @staticmethod
    def _set_tensor_pair(tracker, rows, new):
        if not bool(torch.isfinite(new).all()):
            raise NonFiniteError("non-finite block update")
        tracker.set_rows(torch.as_tensor(rows), new)

    def info(self):
        out = {**super().info(), "pairs": self.pairs, "curvature": self.curvature,
               "candidates": self.candidates}
        jacobi = getattr(self, "jacobi", None)
        if jacobi is not None:
            out.update(pairs=jacobi.order, rotations=jacobi.rotations, **self.jacobi_options)
        return out


class JJOBCD(_JOBCDBase):
    """Jacobi JOBCD: ⌊n/2⌋ disjoint pairs per iteration in one batched exact solve.

    Args: as :class:`GSJOBCD` (without ``pairs``/``curvature``: the curvature is always scalar,
    ``Q_i = σ‖X[B_i]‖₂² I``, which majorises the joint change when σ ≥ L_f; ``side`` is
    ``"row"`` (default) or ``"column"``: a matching of the columns, square X only).

    Per-iteration cost: one full gradient, ⌊n/2⌋ exact 2×2 subproblems in one batched call and
    ``O(nk)`` for the row updates, plus cost evaluations while σ is being estimated.
    """

    name = "J-JOBCD"

    def default_eval_every(self, tracker):
        """1: one iteration already updates every row."""
        return 1

    def step(self, tracker, geometry, generator):
        g = tracker.gradient()
        self._step_checked(tracker, lambda x: self.pair_step(x, g, generator))


class VRJJOBCD(_JOBCDBase):
    """Variance-reduced J-JOBCD (PAGE estimator) for ``f = (1/N) Σ f_i``.

    The gradient estimate ``G̃`` starts at the full gradient; each later iteration, with
    probability ``p`` it is reset to a minibatch mean of size ``b`` (the full gradient when
    ``b = N``), otherwise updated as ``G̃ += mean_{i∈S'} (∇f_i(X) − ∇f_i(X_prev))`` with a fresh
    minibatch ``S'`` of size ``b'`` (without replacement). Defaults: ``b = N``,
    ``b' = ⌈√b⌉``, ``p = b'/(b + b')``. σ must be known (``sigma=`` or the oracle's Lipschitz
    constant): the estimator gives no cost values to backtrack with.

    ``component_gradients`` in the result's ``info`` counts ∇f_i evaluations.

    Per-iteration cost: ``2b'`` component gradients (``∇f_i`` at X and at the previous point),
    or with probability ``p`` a minibatch of ``b`` (``N``: a full gradient), plus the J-JOBCD
    step (⌊n/2⌋ batched 2×2 subproblems).
    """

    name = "VR-J-JOBCD"

    def __init__(self, *, batch_size: int | None = None, small_batch: int | None = None,
                 reset_probability: float | None = None, **kwargs):
        super().__init__(**kwargs)
        self.b, self.b_small, self.p = batch_size, small_batch, reset_probability

    def setup(self, tracker, geometry, generator):
        oracle = tracker.oracle
        if not isinstance(oracle, FiniteSumOracle):
            raise ValueError("VR-J-JOBCD needs a FiniteSumOracle (f = (1/N) Σ f_i)")
        if self.sigma_shrink < 1:
            raise ValueError("VR-J-JOBCD cannot adapt σ (sigma_shrink < 1): checking a step "
                             "needs full cost values, which the estimator avoids")
        super().setup(tracker, geometry, generator)
        if self.backtrack:
            raise ValueError("VR-J-JOBCD needs sigma= or an oracle with a known Lipschitz "
                             "constant (it cannot backtrack on estimated gradients)")
        n_comp = oracle.num_components
        self.b_eff = self.b or n_comp
        self.bs_eff = self.b_small or math.ceil(math.sqrt(self.b_eff))
        self.p_eff = self.p if self.p is not None else self.bs_eff / (self.b_eff + self.bs_eff)
        if not (1 <= self.b_eff <= n_comp and 1 <= self.bs_eff <= n_comp and
                0 <= self.p_eff <= 1):
            raise ValueError(f"invalid batch sizes b={self.b_eff}, b'={self.bs_eff} or "
                             f"probability p={self.p_eff} for N={n_comp}")
        self.g_est = tracker.gradient()
        self.component_gradients = n_comp
        self.x_prev = None
        self.iteration = 0

    def _sample(self, size, generator, device):
        n_comp = self.oracle_n
        return torch.randperm(n_comp, generator=generator, device=device)[:size]

    def step(self, tracker, geometry, generator):
        oracle: FiniteSumOracle = tracker.oracle
        self.oracle_n = oracle.num_components
        x = tracker.x
        if self.iteration > 0:
            u = float(torch.rand((), generator=generator, device=generator.device))
            if u < self.p_eff:
                idx = self._sample(self.b_eff, generator, x.device)
                self.g_est = oracle.component_gradient(x, idx)
                self.component_gradients += self.b_eff
            else:
                idx = self._sample(self.bs_eff, generator, x.device)
                self.g_est = self.g_est + oracle.component_gradient(x, idx) \
                    - oracle.component_gradient(self.x_prev, idx)
                self.component_gradients += 2 * self.bs_eff
        self.iteration += 1
        x_new, _ = self.pair_step(x, self.g_est, generator)
        self.x_prev = x
        tracker.set_point(x_new)

    def info(self):
        return {**super().info(), "batch_size": self.b_eff, "small_batch": self.bs_eff,
                "reset_probability": self.p_eff,
                "component_gradients": getattr(self, "component_gradients", 0)}
