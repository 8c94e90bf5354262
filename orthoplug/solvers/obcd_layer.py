r"""Starts, column rotations and greedy pairs around OBCD (:mod:`orthoplug.solvers.obcd`).

OBCD's step ``X[B] ← V X[B]`` rotates two *rows*. For ``f = s·tr(XᵀCX)`` (no ``D``) the cost
is also invariant under *column* rotations ``X ← X Q``, ``Q ∈ O(r)``, which only change the
separable term h. A row-pair method reaches such a change only through many pair steps, each of
which also moves f. This layer adds, without touching OBCD's step:

* :func:`column_rotations` — Jacobi sweeps over ⌊r/2⌋ disjoint column pairs ``(a, b)``, each set
  to ``X[:, (a, b)] Rᵀ`` with ``R = argmin_{R ∈ O(2)} h(R X[:, (a, b)]ᵀ)``: the exact O(2)
  search of :func:`~orthoplug.subproblems.o2.solve_o2` with ``P = 0`` and no curvature. f is
  unchanged, h never increases (``R = I`` on ties), feasibility is kept exactly (an orthogonal
  map of two columns). On float64 CPU tensors the sweep is compiled
  (:func:`~orthoplug.kernels.obcd.column_pairs`, one search per pair; SparseOBCD's pair loop
  runs it in place on the tracker's X and CX);
* :func:`start_candidates` — ``I(n, r)`` on the r largest ``|s| C_ii`` (the form of every ℓ0
  optimum once λ is large) and the PCA solution (top-r eigenvectors of ``−s C``, the h = 0
  optimum), for the nonnegativity indicator rounded by
  :func:`~orthoplug.solvers.splitting.nonneg_rounding`;
* :func:`splitting_iterates` — a start stage for ℓ0 and the nonnegativity indicator: linearised
  ADMM on ``f(X) + h(Y)``, ``X = Y`` (the step of :mod:`orthoplug.solvers.splitting`, shared with
  the splitting baselines), whose feasible points are formed by :func:`sparse_orthonormal` (X
  made orthonormal on the support of the sparse Y by Gauss–Newton steps; the support never
  grows) or by :func:`~orthoplug.solvers.splitting.nonneg_rounding`;
* :func:`partition_moves` — for NN-PCA: single-row moves between the columns of a nonnegative
  orthonormal X (a row partition), each of exact gain (:func:`row_move_gains`), with
  restricted power steps per column (compiled: :mod:`orthoplug.kernels.obcd`); the splitting
  stage refines its rounded points by it;
* :class:`SparseOBCD` — a pipeline of named stages, each budgeted in iterations and reported
  in the result: the lowest-``F`` of ``x0`` and the start candidates (each after column
  sweeps), then the prox or splitting stage and the partition search, then OBCD's exact pair
  steps, each on the best of ``candidates`` random pairs, with a column sweep every
  ``column_every`` pair steps. All of this runs inside the timed loop; no stage reads a clock
  other than the run's ``max_time`` stop.

Every step keeps OBCD's guarantees: pair steps are OBCD's exact steps (F decreases by at least
``α/2‖V − I‖²``), column sweeps never increase F, and the start stages only replace the point
by one of lower F (feasible to ``‖XᵀX − I‖_F ≤ 1e-13``; exactly nonnegative for the
indicator).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np
import torch
from scipy.sparse.linalg import eigsh

from orthoplug.geometry.stiefel import polar
from orthoplug.kernels.obcd import column_pairs, move_gains, partition_polish, partition_row_moves
from orthoplug.nonsmooth import SeparableTerm, Zero
from orthoplug.oracles import host_array
from orthoplug.subproblems.o2 import SNAP, breakpoint_tables, solve_o2

from .obcd import OBCD
from .pairs import random_matching, random_pairs
from .splitting import linearised_admm_step, nonneg_rounding

__all__ = ["column_rotations", "column_invariant", "start_candidates", "prox_polar",
           "sparse_orthonormal", "splitting_start", "splitting_iterates", "row_move_gains",
           "partition_search", "partition_moves", "pair_scores", "SparseOBCD"]

def column_invariant(oracle) -> bool:
    """Whether ``f(XQ) = f(X)`` for every ``Q ∈ O(r)``: a quadratic ``s·tr(XᵀCX)`` with no
    ``D`` (or ``D = d·I``)."""
    q = getattr(oracle, "quadratic", None)
    if q is None:
        return False
    if q.d is None:
        return True
    d = torch.as_tensor(q.d)
    return bool(torch.equal(d, d[0, 0] * torch.eye(d.shape[0], dtype=d.dtype, device=d.device)))


def column_rotations(x: torch.Tensor, h: SeparableTerm, generator: torch.Generator,
                     sweeps: int = 1) -> torch.Tensor:
    """``sweeps`` Jacobi sweeps of exact column-pair rotations minimising ``h(X Q)``.

    Each sweep draws a random perfect matching of the r columns and solves the ⌊r/2⌋
    independent problems ``min_{R ∈ O(2)} h(R W)``, ``W = X[:, (a, b)]ᵀ`` (2 × n), in one batched
    call; pairs are disjoint and h is separable, so the sweep's decrease of h is the sum of
    theirs. Cost ``O(r n log n)`` per sweep; no n × n matrix.

    Returns a new n × r matrix with ``h`` no larger than at ``x`` and the same ``XXᵀ``. Entries
    below the O(2) search's tolerance (1e-14) are set to 0, as OBCD does after its row updates.

    Raises:
        ValueError: ``x`` is not a 2-D matrix with at least 2 columns, or ``sweeps < 1``.
    """
    if x.ndim != 2 or x.shape[1] < 2:
        raise ValueError(f"column rotations need an n × r matrix with r >= 2, got shape "
                         f"{tuple(x.shape)}")
    if sweeps < 1:
        raise ValueError(f"sweeps must be >= 1, got {sweeps}")
    x = x.clone()
    if isinstance(h, Zero):
        return x
    if x.dtype == torch.float64 and x.device.type == "cpu":  # the compiled sweep, in place
        xa = x.contiguous().numpy()
        for _ in range(sweeps):
            _column_sweep(xa, np.empty((0, xa.shape[1])), h, generator)
        return torch.from_numpy(xa)
    for _ in range(sweeps):
        pairs = random_matching(x.shape[1], generator, x.device)  # (m, 2)
        w = x.mT[pairs]  # (m, 2, n)
        v = solve_o2(torch.zeros(pairs.shape[0], 2, 2, dtype=x.dtype, device=x.device), w, h,
                     s=0.0)
        new = v @ w
        new[new.abs() < SNAP] = 0.0
        x.mT[pairs.reshape(-1)] = new.reshape(-1, x.shape[0])
    return x


def _column_sweep(xa: np.ndarray, ya: np.ndarray, h: SeparableTerm,
                  generator: torch.Generator) -> float:
    """One compiled sweep (:func:`~orthoplug.kernels.obcd.column_pairs`) over a random
    matching of the columns of the float64 array ``xa``, in place (``ya = C xa`` rotated too,
    unless it has no rows); returns the predicted decrease of h."""
    pairs = host_array(random_matching(xa.shape[1], generator, torch.device("cpu")))
    tab = breakpoint_tables(h)
    return column_pairs(xa, ya, np.ascontiguousarray(pairs, dtype=np.int64), tab.th, tab.g,
                        tab.k, tab.inf, tab.pval, tab.knot, tab.h0, tab.shared, tab.continuous)


def start_candidates(oracle, r: int, names=("diagonal", "pca")) -> dict[str, torch.Tensor]:
    """Data-driven starts for ``f = s·tr(XᵀCX)`` on St(n, r), those of ``names``:
    ``"diagonal"`` (the unit vectors of the r entries of ``s·diag(C)`` that are lowest) and
    ``"pca"`` (the r eigenvectors of ``s·C`` with the lowest eigenvalues: the minimiser of f
    alone). For ``n > max(200, 4r)`` the r eigenvectors come from Lanczos
    (``scipy.sparse.linalg.eigsh``, fixed start vector, full precision) rather than a full
    ``eigh``: 3–12× less time at n = 768–1000, r = 20.

    Raises:
        ValueError: the oracle is not a quadratic oracle (no ``C`` to read), or an unknown
            name.
    """
    bad = sorted(set(names) - {"diagonal", "pca"})
    if bad:
        raise ValueError(f"unknown start(s) {bad}; choose from ('diagonal', 'pca')")
    q = getattr(oracle, "quadratic", None)
    if q is None:
        raise ValueError("start candidates need a quadratic oracle s·tr(XᵀCX) (QuadraticOracle)")
    c = q.scale * q.c
    n = c.shape[0]
    out = {}
    if "diagonal" in names:
        out["diagonal"] = torch.zeros(n, r, dtype=c.dtype, device=c.device)
        idx = torch.argsort(torch.diagonal(c))[:r]
        out["diagonal"][idx, torch.arange(r, device=c.device)] = 1.0
    if "pca" not in names:
        return out
    if n > max(200, 4 * r):
        ca = c.detach().cpu().numpy()
        v0 = np.random.default_rng(0).standard_normal(n)
        _, vecs = eigsh(ca, k=r, which="SA", v0=v0)  # ascending, as eigh
        out["pca"] = torch.from_numpy(np.ascontiguousarray(vecs)).to(dtype=c.dtype,
                                                                     device=c.device)
    else:
        out["pca"] = torch.linalg.eigh(c)[1][:, :r].contiguous()
    return out


def prox_polar(x: torch.Tensor, oracle, h: SeparableTerm, steps: int, *,
               patience: int = 5, momentum: bool = False,
               stop: Callable[[], bool] | None = None,
               gradient: Callable[[torch.Tensor], torch.Tensor] | None = None
               ) -> tuple[torch.Tensor, float, int]:
    """Up to ``steps`` iterations ``X ← polar(prox_{t h}(X − t ∇f(X)))``, ``t = 1/L``; the best.

    A cheap start heuristic (a projected proximal-gradient step with the polar factor as the
    projection; not a descent method, so the lowest-F iterate is kept). With ``momentum`` the
    step is taken from ``Y = X_k + (k − 1)/(k + 2)·(X_k − X_{k−1})`` (Nesterov's extrapolation;
    k restarts at 0, and the step is redone from ``X_k``, whenever F would rise): on Gaussian
    ℓ1-SPCA (n = 300) it reached in 1000 steps a lower F (−0.1162) than 3000 plain steps
    (−0.1156). It stops after
    ``patience`` iterations without a new best, or once ``stop()`` is true (checked after
    each iteration; e.g. :meth:`~orthoplug.solvers.base.Run.out_of_time`).
    Iterates where F is infinite (e.g. a negative entry under the nonnegativity indicator) are
    never kept. Cost per iteration: one full gradient (``gradient``, default the oracle's; a
    run passes its tracker's counted ``gradient_at``) and an n × r SVD.

    Returns:
        ``(best point, its F, iterations done)``; the point is ``x`` itself if nothing was
        better.

    Raises:
        ValueError: the oracle has no Lipschitz constant, or ``steps < 0``.
    """
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    lip = getattr(oracle, "lipschitz", None)
    if not lip:
        raise ValueError("prox_polar needs an oracle with a Lipschitz constant (t = 1/L)")
    t = 1.0 / lip
    gradient = oracle.gradient if gradient is None else gradient
    best_x, best_f = x, float(oracle.value(x)) + float(h.value(x))
    y, prev, fy, k, since, done = x, x, best_f, 0, 0, 0
    while done < steps and since < patience and not (stop is not None and done and stop()):
        z = y + (k - 1) / (k + 2) * (y - prev) if momentum and k > 1 else y
        new = polar(h.prox(z - t * gradient(z), t))
        done += 1
        fn = float(oracle.value(new)) + float(h.value(new))
        if momentum and k > 1 and not fn <= fy:  # restart: the plain step from y
            new = polar(h.prox(y - t * gradient(y), t))
            fn, k = float(oracle.value(new)) + float(h.value(new)), 0
        prev, y, fy, k = y, new, fn, k + 1
        if math.isfinite(fy) and fy < best_f:
            best_x, best_f, since = y, fy, 0
        else:
            since += 1
    return best_x, best_f, done


def sparse_orthonormal(x: torch.Tensor, mask: torch.Tensor, *, iterations: int = 6,
                       tol: float | None = None) -> torch.Tensor | None:
    """An orthonormal matrix with support in ``mask`` near ``x`` (Gauss–Newton on ``XᵀX = I``).

    Each iteration solves ``XᵀD + DᵀX = I − XᵀX`` for the correction ``D = mask ⊙ (X Λ)``
    (``Λ`` symmetric r × r: a square system of r(r+1)/2 equations; without a mask and at an
    orthonormal X it is ``Λ = (I − XᵀX)/2``, the Newton–Schulz step of the polar factor) and
    sets ``X ← X + D``.
    Entries outside ``mask`` are zero throughout, so the support never grows. Convergence is
    quadratic from an ``x`` that is nearly orthonormal on its mask (e.g. a splitting iterate
    restricted to the support of its sparse copy); cost per iteration ``O(n r³ + r⁶)``.

    Returns:
        The matrix, once ``‖XᵀX − I‖_F ≤ tol`` (default 1e-13 in float64, 100 ε in other
        dtypes); ``None`` if ``iterations`` do not get there or the system is singular (e.g.
        a column whose mask is empty).

    Raises:
        ValueError: ``mask`` and ``x`` differ in shape.
    """
    if mask.shape != x.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} differs from x's {tuple(x.shape)}")
    n, r = x.shape
    if tol is None:
        tol = 1e-13 if x.dtype == torch.float64 else 100 * torch.finfo(x.dtype).eps
    m = mask.to(x.dtype)
    x = x * m
    eye = torch.eye(r, dtype=x.dtype, device=x.device)
    idx = torch.arange(r, device=x.device)
    iu, ju = torch.triu_indices(r, r, device=x.device)
    for _ in range(iterations + 1):
        e = eye - x.mT @ x
        if float(torch.linalg.norm(e)) <= tol:
            return x
        # (XᵀD)_cb = Σ_a G[b, c, a] Λ_ab with G[b] = Xᵀ diag(mask_:b) X; T is the map
        # Λ ↦ XᵀD + DᵀX as an r² × r² matrix, restricted to symmetric Λ and the upper triangle
        g = (m.mT @ (x[:, :, None] * x[:, None, :]).reshape(n, r * r)).reshape(r, r, r)
        t = torch.zeros(r, r, r, r, dtype=x.dtype, device=x.device)  # [c, b, a, b']
        t[:, idx, :, idx] = g
        t = t + t.permute(1, 0, 2, 3)
        t = t[iu, ju]  # rows (c, b) with c <= b
        a = t[:, iu, ju] + torch.where(iu != ju, 1.0, 0.0).to(x.dtype) * t[:, ju, iu]
        try:
            sol = torch.linalg.solve(a, e[iu, ju])
        except RuntimeError:  # singular (e.g. an empty column of the mask)
            return None
        lam = torch.zeros(r, r, dtype=x.dtype, device=x.device)
        lam[iu, ju] = sol
        lam[ju, iu] = sol
        x = x + m * (x @ lam)
    return None


def _feasible_candidate(x: torch.Tensor, y: torch.Tensor, h: SeparableTerm
                        ) -> torch.Tensor | None:
    """A point of the feasible set from a splitting pair ``(X, Y)``: the nonnegative rounding of
    X for an indicator h, else X restored to orthonormality on the support of the sparse Y
    (:func:`sparse_orthonormal`), tried only where X on that support is within 0.1 of
    orthonormal (``‖XₛᵀXₛ − I‖_F``: the Gauss–Newton steps converge from there); ``None`` if
    not tried or if the restoration fails."""
    if h.is_indicator:
        return nonneg_rounding(x)
    mask = y != 0
    xs = x * mask
    eye = torch.eye(x.shape[1], dtype=x.dtype, device=x.device)
    if float(torch.linalg.norm(xs.mT @ xs - eye)) > 0.1:
        return None
    return sparse_orthonormal(xs, mask)


def splitting_iterates(x: torch.Tensor, oracle, h: SeparableTerm, steps: int, *,
                       smoothing: float = 0.0, penalty: float = 2.0, check_every: int = 10,
                       patience: int = 10, min_decrease: float = 1e-4,
                       gradient: Callable[[torch.Tensor], torch.Tensor] | None = None,
                       refine: Callable[[torch.Tensor], tuple[torch.Tensor, float]] | None = None,
                       refine_every: int | None = None, dtype: torch.dtype | None = None,
                       tangent: bool = False) -> Iterator[tuple[torch.Tensor, float, int]]:
    """The splitting phase of :func:`splitting_start`, one check at a time: yields
    ``(best point, its F, iterations done)`` at every check, so that a run can record its
    progress (and stop it) between checks. Arguments as
    :func:`splitting_start`, which this validates first, and ``refine``: a local search that
    maps a feasible point to ``(a point, its F)`` no higher (e.g. :func:`partition_search`).
    With ``refine``, a check forms and refines a feasible point (no unrefined point is scored)
    only if no refinement ran in the last ``refine_every`` iterations (default n: at Gaussian
    NN-PCA sizes a partition search from a rounded point costs about n/7 iterations, so the
    refinements take about an eighth of the phase) and its support is not the last refined
    one's; the patience then counts refined points only. ``dtype``: the iterates'
    dtype (default ``x``'s; ``gradient`` must accept and return it); the feasible points are
    formed and scored in ``x``'s dtype (a heuristic phase in float32 costs about half as much
    per iteration at n = 1000). ``tangent``: Riemannian X-steps (:func:`linearised_x_step`)."""
    refine_every = x.shape[0] if refine_every is None else refine_every
    if steps < 0 or smoothing < 0 or penalty <= 0 or check_every < 1 or refine_every < 1:
        raise ValueError(f"need steps >= 0, smoothing >= 0, penalty > 0, check_every >= 1, "
                         f"refine_every >= 1; got {steps}, {smoothing}, {penalty}, "
                         f"{check_every}, {refine_every}")
    lip = getattr(oracle, "lipschitz", None)
    if not lip:
        raise ValueError("the splitting phase needs an oracle with a Lipschitz constant")
    return _splitting(x, oracle, h, steps, smoothing, penalty * lip, float(lip), check_every,
                      patience, min_decrease, oracle.gradient if gradient is None else gradient,
                      refine, refine_every, x.dtype if dtype is None else dtype, tangent)


def _splitting(x, oracle, h, steps, smoothing, beta, lip, check_every, patience, min_decrease,
               gradient, refine, refine_every, dtype, tangent):
    """The generator behind :func:`splitting_iterates` (arguments checked there)."""
    mu = smoothing / beta
    best_x, best_f = x, float(oracle.value(x)) + float(h.value(x))
    out, x = x.dtype, x.to(dtype)
    y, lam = h.prox(x, 1.0 / beta), torch.zeros_like(x)
    since, done = 0, 0
    last_refine, refined = None, None
    while done < steps and since < patience:
        x, y, lam = linearised_admm_step(x, y, lam, gradient(x), h, beta, lip, mu, tangent)
        done += 1
        if done % check_every and done & (done - 1) and done < steps:
            continue
        if refine is not None and last_refine is not None and done - last_refine < refine_every:
            yield best_x, best_f, done  # only refined points count: none is due yet
            continue
        cand = _feasible_candidate(x.to(out), y.to(out), h)
        if cand is not None and refine is not None:
            support = cand != 0
            if refined is not None and torch.equal(support, refined):
                cand = None
            else:
                cand, fc = refine(cand)
                refined, last_refine = support, done
        elif cand is not None:
            fc = float(oracle.value(cand)) + float(h.value(cand))
        if cand is not None:
            since = 0 if fc < best_f - min_decrease * abs(best_f) else since + 1
            if fc < best_f:
                best_x, best_f = cand, fc
        yield best_x, best_f, done


def splitting_start(x: torch.Tensor, oracle, h: SeparableTerm, steps: int, *,
                    smoothing: float = 0.0, penalty: float = 2.0, check_every: int = 10,
                    patience: int = 10, min_decrease: float = 1e-4,
                    stop: Callable[[], bool] | None = None,
                    gradient: Callable[[torch.Tensor], torch.Tensor] | None = None
                    ) -> tuple[torch.Tensor, float, int]:
    """Up to ``steps`` iterations of a splitting of ``f(X) + h(Y)``, ``X = Y``; the best point.

    The iteration is linearised ADMM with a Moreau-smoothed h (β = ``penalty``·L,
    μ = ``smoothing``/β; μ = 0 is plain linearised ADMM):

        X ← polar(X − (∇f(X) + Λ + β(X − Y))/(L + β)),
        W = X + Λ/β,   Z = prox_{(1/β + μ) h}(W),   Y ← (Z + μβ W)/(1 + μβ),
        Λ ← Λ + β(X − Y).

    Its iterates are feasible for neither constraint alone, so at every check (after iterations
    1, 2, 4, 8, … below ``check_every``, then every ``check_every`` iterations, and at the last)
    a feasible point is formed (:func:`nonneg_rounding` of X for an indicator h, else
    :func:`sparse_orthonormal` of X on the support of Y) and the lowest-F one is kept. The
    phase stops after ``patience`` such points in a row that lower the best F by less than
    ``min_decrease`` relative (it then gains less per iteration than pair steps do), after
    ``steps`` iterations or at the first check where ``stop()`` is true (e.g.
    :meth:`~orthoplug.solvers.base.Run.out_of_time`).
    Cost per iteration: one full gradient and an n × r polar factor.

    Returns:
        ``(best point, its F, iterations done)``; the point is ``x`` itself if nothing was
        better.

    Raises:
        ValueError: the oracle has no Lipschitz constant, ``steps < 0``, ``smoothing < 0``,
            ``penalty <= 0`` or ``check_every < 1``.
    """
    out = (x, float(oracle.value(x)) + float(h.value(x)), 0)
    for item in splitting_iterates(x, oracle, h, steps, smoothing=smoothing, penalty=penalty,
                                   check_every=check_every, patience=patience,
                                   min_decrease=min_decrease, gradient=gradient):
        out = item
        if stop is not None and stop():
            break
    return out


def row_move_gains(x: np.ndarray, a: np.ndarray, g: np.ndarray) -> np.ndarray:
    """``gain[i, b]``: the increase of ``tr(XᵀAX)`` when row i leaves its column (rescaled) and
    joins column b with the best nonnegative weight, at a nonnegative orthonormal ``x`` (n × r,
    disjoint column supports), ``g = A x``, ``A`` symmetric.

    Leaving column a: ``x_a ← (x_a − x_ia e_i)/√(1 − x_ia²)``, whose form is
    ``(q_a − 2 x_ia g_ia + x_ia² A_ii)/(1 − x_ia²)`` (``q_a = x_aᵀ A x_a``); ``−∞`` if row i
    is the column's only row or carries all but 1e-8 of its mass. Joining column b:
    ``x_b ← α x_b + β e_i``, ``α² + β² = 1``, ``α, β ≥ 0``, whose best form is the top
    eigenvalue of ``[[q_b, g_ib], [g_ib, A_ii]]`` when ``g_ib > 0`` (its eigenvector is then
    nonnegative) and ``max(q_b, A_ii)`` otherwise (an end of the quarter circle: x_b kept, row
    i dropped, or x_b replaced by e_i, its rows dropped). A row outside every
    support only joins; ``gain[i, own column] = −∞``. Compiled
    (:func:`~orthoplug.kernels.obcd.move_gains`; the partition search's moves use the same
    gain).
    """
    out = np.empty(x.shape)
    move_gains(*(np.ascontiguousarray(v, dtype=np.float64) for v in (x, a, g)), out)
    return out


def partition_moves(x: torch.Tensor, oracle, *, max_moves: int = 100000, polish: int = 20,
                    chunk: int = 200, count_gradients: Callable[[float], None] | None = None
                    ) -> Iterator[tuple[torch.Tensor, float, int]]:
    """The local search of :func:`partition_search`, yielding ``(point, its F, moves done)``
    after every ``chunk`` moves and after every polish, so that a run can record its progress
    (and stop it) in between. Arguments as :func:`partition_search`, checked first;
    ``count_gradients(1)`` is called for every full product ``A X`` (a gradient of f, e.g.
    :meth:`~orthoplug.oracles.core.Tracker.count_gradients`)."""
    q = getattr(oracle, "quadratic", None)
    if q is None:
        raise ValueError("partition search needs a quadratic oracle s·tr(XᵀCX)")
    xa = host_array(x).astype(np.float64, copy=True)
    if (xa < 0).any() or ((xa > 0).sum(axis=1) > 1).any():
        raise ValueError("partition search needs a nonnegative X with disjoint column supports")
    a = np.ascontiguousarray(-float(q.scale) * host_array(q.c).astype(np.float64))
    return _partition_moves(xa, a, oracle, x, max_moves, polish, chunk,
                            count_gradients or (lambda amount: None))


def _partition_moves(xa, a, oracle, x, max_moves, polish, chunk, count_gradients):
    """The generator behind :func:`partition_moves` (arguments checked there)."""

    def point():
        out = torch.from_numpy(xa.copy()).to(dtype=x.dtype, device=x.device)
        return out, float(oracle.value(out)), moves

    moves = 0
    g = a @ xa
    count_gradients(1)
    form = float(np.einsum("ib,ib->", xa, g))
    while moves < max_moves:
        start = form
        while moves < max_moves:
            done = partition_row_moves(xa, a, g, min(chunk, max_moves - moves), 1e-12)
            moves += done
            if done < chunk:
                break
            yield point()
        g = a @ xa  # exact again after the updates
        count_gradients(1)
        partition_polish(xa, a, g, polish)
        form = float(np.einsum("ib,ib->", xa, g))
        yield point()
        if form <= start + 1e-10 * abs(start):
            break


def partition_search(x: torch.Tensor, oracle, *, max_moves: int = 100000, polish: int = 20,
                     chunk: int = 200, stop: Callable[[], bool] | None = None,
                     count_gradients: Callable[[float], None] | None = None
                     ) -> tuple[torch.Tensor, float, int]:
    """Local search over the row partitions of ``{X ≥ 0, XᵀX = I}`` for ``f = s·tr(XᵀCX)``.

    Nonnegative orthonormal columns have disjoint supports, so X is a partition of (some of) the
    rows into r columns, each column a nonnegative unit vector on its rows. Pair steps of OBCD
    only swap rows or rotate inside a column; this search moves one row at a time to another
    column, the move of largest exact gain (:func:`row_move_gains`, ``A = −s·C``), with the
    two columns rescaled as there, until no move gains more than 1e-12 relative (or a move's
    gain, recomputed after it, is not positive: it is then undone); then ``polish`` restricted
    power steps per column (:func:`~orthoplug.kernels.obcd.partition_polish`, ending early
    once no column gains), and again, until a round of moves and
    polish lowers F by less than 1e-10 relative, after ``max_moves`` moves, or after the first
    ``chunk`` of moves or polish where ``stop()`` is true (e.g.
    :meth:`~orthoplug.solvers.base.Run.out_of_time`; ``count_gradients`` as
    :func:`partition_moves`). Every move and every kept
    power step lowers F, and the point stays exactly nonnegative with disjoint supports.
    Cost per move ``O(n r)`` (``A X`` is updated in the two changed columns and recomputed
    after each round); per power step ``O(n · nnz(X))``.

    Returns:
        ``(point, its F, moves done)``.

    Raises:
        ValueError: no quadratic oracle, or ``x`` is not nonnegative with disjoint column
            supports.
    """
    out = (x, float(oracle.value(x)), 0)
    for item in partition_moves(x, oracle, max_moves=max_moves, polish=polish, chunk=chunk,
                                count_gradients=count_gradients):
        out = item
        if stop is not None and stop():
            break
    return out


def _low_precision_gradient(tracker, x: torch.Tensor):
    """``(∇f in float32, torch.float32)`` for a quadratic ``f = s·tr(XᵀCX)`` and a float64 CPU
    ``x`` (``2s·C`` is copied to float32 once; numpy's float32 product took 0.3 ms against
    the oracle's 0.45 ms at n = 300 and 1.3 against 3.3 ms at n = 1000, single-threaded), each
    call counted as one gradient on ``tracker``; ``(None, None)`` otherwise (then use the
    tracker's ``gradient_at`` in ``x``'s dtype)."""
    q = getattr(tracker.oracle, "quadratic", None)
    if q is None or q.d is not None or x.dtype != torch.float64 or x.device.type != "cpu":
        return None, None
    c32 = (2.0 * float(q.scale) * host_array(q.c)).astype(np.float32)

    def gradient(y: torch.Tensor) -> torch.Tensor:
        tracker.count_gradients(1)
        return torch.from_numpy(c32 @ y.numpy())

    return gradient, torch.float32


def pair_scores(x: torch.Tensor, g_rows: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """``⟨Ĝ_j, X_i⟩ − ⟨Ĝ_i, X_j⟩`` per pair ``(i, j)``: the derivative at θ = 0 of
    ``F(X(θ))``, rows i, j of X rotated by ``[[cos θ, −sin θ], [sin θ, cos θ]]``, when
    ``g_rows`` (m, 2, r) holds rows i and j of a (sub)gradient Ĝ of F."""
    xi, xj = x[pairs[:, 0]], x[pairs[:, 1]]
    return (g_rows[:, 1] * xi).sum(-1) - (g_rows[:, 0] * xj).sum(-1)



#: The unit of each stage's ``iterations`` in ``result.info["stages"]``.
STAGE_UNITS = {"start": "candidates", "prox": "prox-polar steps", "splitting": "ADMM iterations",
               "partition search": "row moves", "pair steps": "pair steps",
               "column sweeps": "sweeps"}


class SparseOBCD(OBCD):
    """OBCD (k = 2, exact curvature) after a pipeline of start stages, with greedy pairs and
    column sweeps.

    A run is a pipeline of named stages. The first iteration runs the start stages in order, and
    each stage's point replaces the run's whenever its F is lower (so F never rises):

    1. ``"start"`` — the lowest-F of ``x0`` and the ``starts`` candidates
       (:func:`start_candidates`; rounded by :func:`nonneg_rounding` for the nonnegativity
       indicator, then ``start_sweeps`` column sweeps); ``x0`` on ties.
    2. ``"prox"`` — up to ``prox_steps`` :func:`prox_polar` steps (momentum, patience 20) from the
       chosen start.
    3. ``"splitting"`` — up to ``split_steps`` iterations of :func:`splitting_iterates` (linearised
       ADMM, RADMM's Riemannian X-step with the partition search) from ``split_from``; its
       iterates are float32 for a quadratic f on float64 CPU tensors (each of their gradients
       counted as one); with the partition search its rounded points are refined by
       :func:`partition_search` (at most once per n iterations).
    4. ``"partition search"`` — :func:`partition_moves` (at most 100 n row moves) from the
       rounded start, then from the run's point.
    5. ``"pair steps"`` — OBCD's exact pair steps, each on the best of ``candidates`` random
       pairs (ranked by the model decrease in the compiled loop, else by :func:`pair_scores`),
       for the rest of the run's ``max_iterations``.
    6. ``"column sweeps"`` — a :func:`column_rotations` sweep after every ``column_every`` pair
       steps.

    The run's iterations count pair steps; the start stages have their own budgets, counted in
    their own iterations (defaults below: rules of n, the rows, never of the instance), and
    each ends early once the run's ``max_time`` has run out
    (:meth:`~orthoplug.solvers.base.Run.out_of_time`). Nothing else reads a clock: the same
    seed and budgets give the same bits on any machine and under any load.

    ``result.info["stages"]`` lists every stage that ran: ``name``, ``unit`` (of
    ``iterations``), ``iterations``, ``gradient_evaluations`` (full-gradient equivalents
    counted by the run's tracker during the stage, float32 ones and the partition search's
    ``A X`` products included; the run loop's evaluations are not in any stage), ``decrease``
    (of F = f + h during the stage; for the pair steps the run's total less the other stages')
    and ``decrease_share`` (of the run's total decrease F(x0) − F). ``info["start"]`` names the
    stages whose points were taken, e.g. ``"diagonal + splitting + partition search"``.

    Front-ends: pymanopt (:class:`orthoplug.adapters.pymanopt.SparseOBCD`). There is no geoopt
    optimizer: the start stages are not step methods on a parameter (they read the quadratic's
    C and replace the point by jumps); its pair steps alone are geoopt's OBCD.

    Args:
        h: the separable term (as :class:`~orthoplug.solvers.obcd.OBCD`).
        starts: candidate starts besides ``x0``: any of ``"diagonal"``, ``"pca"``; ``()`` keeps
            ``x0``.
        candidates: random pairs compared per pair step (1: OBCD's uniform pairs).
        column_every: pair steps between two column sweeps (0: none); ``"auto"``: n when f is
            column-invariant (:func:`column_invariant`), else 0.
        start_sweeps: column sweeps applied to each start candidate before comparing them.
        prox_steps: the prox stage's budget; ``"auto"``: n when h is finite and continuous (ℓ1,
            capped ℓ1), else 0 — the polar factor of a thresholded matrix is dense, so for ℓ0
            the stage trades a sparse start for a dense one, and under the nonnegativity
            indicator its iterates are infeasible.
        split_steps: the splitting stage's budget; ``"auto"``: 10 n when h is not continuous
            (ℓ0, the nonnegativity indicator), else 0. Its feasible points have the sparsity
            pattern of its Y-iterates, which pair steps from a dense start do not reach.
        split_smoothing: μβ of :func:`splitting_start`; ``"auto"``: 0.1 for an indicator h (the
            hard projection alone stalls on NN-PCA), else 0.
        split_from: where the splitting starts: ``"start"`` (the run's point after the start
            and prox stages) or ``"x0"``; ``"auto"``: ``"x0"`` with the partition search, else
            ``"start"``.
        partition: the partition search stage and the refinement of the splitting's points;
            ``"auto"``: for the nonnegativity indicator (its feasible points are row
            partitions, whose local minima pair steps cannot leave).
        alpha: OBCD's proximal weight α > 0.
        refresh_every: pair steps between recomputations of ``CX`` (OBCD's fast path).
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options (stopping criteria,
            ``seed``, ``eval_every``, ...).

    Raises:
        ValueError: an unknown start, ``candidates < 1``, a negative budget, an OBCD option
            that fixes the pairs (``k``, ``working_set``, ``curvature``); at run time, column
            sweeps or starts requested on a cost they do not apply to (not a quadratic
            ``s·tr(XᵀCX)`` without ``D``).
    """

    name = "SparseOBCD"
    start_names = ("diagonal", "pca")

    def __init__(self, h: SeparableTerm | None = None, *, starts=("diagonal", "pca"),
                 candidates: int = 16, column_every: int | str = "auto", start_sweeps: int = 1,
                 prox_steps: int | str = "auto", split_steps: int | str = "auto",
                 split_smoothing: float | str = "auto", split_from: str = "auto",
                 partition: bool | str = "auto", alpha: float = 1e-5,
                 refresh_every: int = 10_000, **kwargs):
        for key in ("k", "working_set", "curvature", "sigma", "sweeps"):
            if key in kwargs:
                raise ValueError(f"SparseOBCD uses k = 2, the exact curvature and its own "
                                 f"pairs; {key}= is not an option here")
        super().__init__(h, alpha=alpha, refresh_every=refresh_every, **kwargs)
        bad = [s for s in starts if s not in self.start_names]
        if bad:
            raise ValueError(f"unknown start(s) {bad}; choose from {self.start_names}")
        if not (isinstance(candidates, int) and candidates >= 1):
            raise ValueError(f"candidates must be an integer >= 1, got {candidates!r}")
        if column_every != "auto" and not (isinstance(column_every, int) and column_every >= 0):
            raise ValueError(f"column_every must be 'auto' or an integer >= 0, got "
                             f"{column_every!r}")
        if not (isinstance(start_sweeps, int) and start_sweeps >= 0):
            raise ValueError(f"start_sweeps must be an integer >= 0, got {start_sweeps!r}")
        for key, value in (("prox_steps", prox_steps), ("split_steps", split_steps)):
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
        self.split_smoothing, self.split_from = float(split_smoothing), split_from
        self.starts, self.candidates = tuple(starts), candidates
        self.column_every_user, self.start_sweeps = column_every, start_sweeps

    def budgets(self, n: int) -> dict[str, int]:
        """The stage budgets for n rows: ``prox_steps`` and ``split_steps`` (the class
        docstring's rules where ``"auto"``) and ``partition_moves`` (100 n)."""
        continuous = self.h.piecewise.continuous
        prox, split = self.prox_steps_user, self.split_steps_user
        return {"prox_steps": (n if continuous else 0) if prox == "auto" else prox,
                "split_steps": (0 if continuous else 10 * n) if split == "auto" else split,
                "partition_moves": 100 * n if self.partition else 0}

    def setup(self, run):
        super().setup(run)
        tracker = run.tracker
        invariant = column_invariant(tracker.oracle)
        asked = self.starts or self.column_every_user not in ("auto", 0)
        if asked and not invariant:
            raise ValueError("data starts and column sweeps need f = s·tr(XᵀCX) without D (a "
                             "QuadraticOracle, so that f(XQ) = f(X)); pass starts=() and "
                             "column_every=0 for other costs")
        every = self.column_every_user
        run.column_every = (tracker.x.shape[0] if invariant else 0) if every == "auto" else every
        run.budgets = self.budgets(tracker.x.shape[0])
        run.started = False
        run.stages, run.start_chosen = [], "x0"
        run.column_sweeps_done, run.sweep_decrease, run.pair_gradients = 0, 0.0, 0.0

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

    def _stage(self, run, name: str, items) -> None:
        """Run one stage: ``items`` yields ``(point, its F, iterations so far)``; a point of
        lower F than the run's replaces it; the stage ends when ``items`` does or the run is
        out of time; its record goes to ``run.stages``."""
        tracker = run.tracker
        before, gradients, done = run.f, tracker.gradient_evaluations, 0
        for x, fx, count in items:
            done = count
            if fx < run.f:  # F never rises in a run (and an infinite F is never taken)
                tracker.set_point(x.contiguous())
                run.f = fx
                if name != "start" and not run.start_chosen.endswith(name):
                    run.start_chosen += f" + {name}"
            if run.out_of_time():
                break
        run.stages.append({"name": name, "unit": STAGE_UNITS[name], "iterations": done,
                           "gradient_evaluations": tracker.gradient_evaluations - gradients,
                           "decrease": before - run.f})

    def _candidates(self, run):
        """The start stage's items: each start candidate, prepared, with its F (the lowest
        names the start in ``run.start_chosen``)."""
        found = start_candidates(run.tracker.oracle, run.x0.shape[1], self.starts)
        for count, (name, x) in enumerate(found.items(), start=1):
            x, fx = self._prepared(run, x)
            if math.isfinite(fx) and fx < run.f:
                run.start_chosen = name
            yield x, fx, count

    def _prox(self, run, start: torch.Tensor):
        """The prox stage's item (:func:`prox_polar` from ``start``)."""
        yield prox_polar(start, run.tracker.oracle, self.h, run.budgets["prox_steps"],
                         momentum=True, patience=20, stop=run.out_of_time,
                         gradient=run.tracker.gradient_at)

    def _splitting(self, run):
        """The splitting stage's items (:func:`splitting_iterates`)."""
        tracker = run.tracker
        start = run.x0 if self.split_from == "x0" else tracker.x.clone()
        refine = None
        if self.partition:
            def refine(x):
                return partition_search(x, tracker.oracle, polish=5,
                                        max_moves=run.budgets["partition_moves"],
                                        stop=run.out_of_time,
                                        count_gradients=tracker.count_gradients)[:2]
        gradient, dtype = _low_precision_gradient(tracker, start)
        return splitting_iterates(start, tracker.oracle, self.h, run.budgets["split_steps"],
                                  smoothing=self.split_smoothing,
                                  gradient=gradient or tracker.gradient_at, refine=refine,
                                  dtype=dtype, tangent=self.partition)

    def _pipeline(self, run) -> None:
        """The start stages (class docstring), in order; then ``run.f_stages``, F after them."""
        tracker = run.tracker
        run.x0 = tracker.x.clone()
        run.f = run.f0 = self._objective(run, run.x0)
        budgets = run.budgets
        self._stage(run, "start", self._candidates(run) if self.starts else ())
        start = tracker.x.clone()
        if budgets["prox_steps"] and not run.out_of_time():
            self._stage(run, "prox", self._prox(run, start))
        if budgets["split_steps"] and not run.out_of_time():
            self._stage(run, "splitting", self._splitting(run))
        if self.partition:
            # rounded: a point with tiny overlapping entries is no partition (an exact one is
            # its own rounding up to rounding errors; a point no lower is never taken)
            for x in (start, None):
                if run.out_of_time():
                    break
                x = nonneg_rounding(tracker.x if x is None else x)
                self._stage(run, "partition search",
                            partition_moves(x, tracker.oracle,
                                            max_moves=budgets["partition_moves"],
                                            count_gradients=tracker.count_gradients))
        run.f_stages = run.f

    def _start_once(self, run) -> None:
        if not run.started:
            run.started = True
            self._pipeline(run)

    def _sweep_if_due(self, run) -> None:
        """A column sweep after every ``column_every`` pair steps (kept if it lowers h); on the
        compiled path in place on the tracker's ``X`` and ``CX`` (f is unchanged)."""
        if run.column_every and run.count % run.column_every == 0:
            tracker = run.tracker
            run.column_sweeps_done += 1
            if run.kernel:
                run.sweep_decrease += _column_sweep(tracker.xa, tracker.ya, self.h,
                                                    run.generator)
                return
            before = float(self.h.value(tracker.x))
            x = column_rotations(tracker.x, self.h, run.generator)
            after = float(self.h.value(x))
            if after < before:
                tracker.set_point(x.contiguous())
                run.sweep_decrease += before - after

    def steps(self, run, count):
        """The start stages first (in the first call); then on OBCD's compiled pair loop
        (quadratic f, float64 CPU) up to ``count`` pair steps in the kernel, cut at the next
        column sweep, the greedy candidates ranked by their exact model decrease (computed in
        the kernel); elsewhere one :meth:`step`."""
        if not run.kernel:
            return super().steps(run, count)
        self._start_once(run)
        if run.column_every:
            count = min(count, run.column_every - run.count % run.column_every)
        gradients = run.tracker.gradient_evaluations
        done = super().steps(run, count)
        run.pair_gradients += run.tracker.gradient_evaluations - gradients
        self._sweep_if_due(run)
        return done

    def step(self, run):
        self._start_once(run)
        gradients = run.tracker.gradient_evaluations
        super().step(run)
        run.pair_gradients += run.tracker.gradient_evaluations - gradients
        self._sweep_if_due(run)

    def _pair(self, run):
        if self.candidates == 1:
            return super()._pair(run)
        tr = run.tracker
        x = tr.x
        pairs = random_pairs(x.shape[0], self.candidates, run.generator, run.device)
        g = tr.gradient_rows(pairs.reshape(-1)).reshape(-1, 2, x.shape[1])
        g = g + self.h.subgradient(x[pairs])
        best = pairs[int(torch.argmax(pair_scores(x, g, pairs).abs()))]
        return host_array(best)

    def finalize(self, run, result) -> None:
        """OBCD's ``info["f"]``, ``info["h"]``, and ``info["stages"]`` (class docstring)."""
        super().finalize(run, result)
        if not run.started:
            result.info["stages"] = []
            return
        pairs = run.f_stages - result.cost - run.sweep_decrease
        stages = [*run.stages,
                  {"name": "pair steps", "unit": STAGE_UNITS["pair steps"],
                   "iterations": run.count, "gradient_evaluations": run.pair_gradients,
                   "decrease": pairs}]
        if run.column_every:
            stages.append({"name": "column sweeps", "unit": STAGE_UNITS["column sweeps"],
                           "iterations": run.column_sweeps_done, "gradient_evaluations": 0.0,
                           "decrease": run.sweep_decrease})
        total = run.f0 - result.cost
        for stage in stages:
            stage["decrease_share"] = stage["decrease"] / total if total > 0 else 0.0
        result.info["stages"] = stages

    def info(self, run=None):
        return {**super().info(run), "working_set": f"greedy (best of {self.candidates})",
                "start": getattr(run, "start_chosen", None),
                "budgets": getattr(run, "budgets", None)}
