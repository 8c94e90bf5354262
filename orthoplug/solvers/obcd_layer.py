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
  optimum), for the nonnegativity indicator rounded by :func:`nonneg_rounding`;
* :func:`splitting_iterates` — a start phase for ℓ0 and the nonnegativity indicator: linearised
  ADMM on ``f(X) + h(Y)``, ``X = Y``, whose feasible points are formed by
  :func:`sparse_orthonormal` (X made orthonormal on the support of the sparse Y by Gauss–Newton
  steps; the support never grows) or by :func:`nonneg_rounding`;
* :func:`partition_moves` — for NN-PCA: single-row moves between the columns of a nonnegative
  orthonormal X (a row partition), each of exact gain (:func:`row_move_gains`), with
  restricted power steps per column (compiled: :mod:`orthoplug.kernels.obcd`); the splitting
  phase refines its rounded points by it;
* :class:`SparseOBCD` — OBCD whose first iteration replaces the start by the lowest-``F``
  of ``x0`` and the candidates (each after column sweeps), which picks each pair as the best of
  ``candidates`` random pairs by the first-order score ``|⟨Ĝ_j, X_i⟩ − ⟨Ĝ_i, X_j⟩|``
  (``Ĝ = ∇f + s_h``, the derivative of F along the rotation of rows i, j at angle 0), and which
  runs a column sweep every ``column_every`` pair steps, with the start phases above interleaved
  with its pair steps (for NN-PCA most of the time goes to them). All of this runs inside the
  timed loop.

Every step keeps OBCD's guarantees: pair steps are OBCD's exact steps (F decreases by at least
``α/2‖V − I‖²``), column sweeps never increase F, and the start replacement and the start
phases only replace the point by one of lower F (feasible to ``‖XᵀX − I‖_F ≤ 1e-13``; exactly
nonnegative for the indicator).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterator

import numpy as np
import torch
from scipy.sparse.linalg import eigsh

from orthoplug.geometry._linalg import sym
from orthoplug.geometry.stiefel import polar
from orthoplug.kernels.obcd import column_pairs, move_gains, partition_polish, partition_row_moves
from orthoplug.nonsmooth import SeparableTerm, Zero
from orthoplug.oracles import host_array
from orthoplug.subproblems.o2 import SNAP, _tables, solve_o2

from .jobcd import random_matching, random_pairs
from .obcd import OBCD

__all__ = ["column_rotations", "column_invariant", "start_candidates", "nonneg_rounding",
           "prox_polar", "sparse_orthonormal", "splitting_start", "splitting_iterates",
           "row_move_gains", "partition_search", "partition_moves", "linearised_x_step",
           "linearised_admm_step", "pair_scores", "SparseOBCD"]

#: Pair steps per item of SparseOBCD's start phase off the compiled path (on it: one item per
#: evaluation interval).
PHASE_EVERY = 100

#: The most of the splitting phase's time that refining its feasible points may take (on Gaussian
#: NN-PCA, n = 300, seeds 0–2, one run each: with 0.25 RADMM's final F was reached 1.15–1.66×
#: sooner than with 0.5; with the float32 iterates, 0.15 reached it at 0.46–0.95 s, 0.25 at
#: 0.60–1.12 s).
REFINE_SHARE = 0.15


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
    tab = _tables(h)
    return column_pairs(xa, ya, np.ascontiguousarray(pairs, dtype=np.int64), tab.th, tab.g,
                        tab.k, tab.inf, tab.pval, tab.knot, tab.h0, tab.shared, tab.continuous)


def nonneg_rounding(x: torch.Tensor) -> torch.Tensor:
    """A point of ``{X ≥ 0, XᵀX = I}`` near ``x`` (n × r, n ≥ r): each row keeps only its largest
    positive entry (rows without one are dropped), each column is normalised; a column left
    empty takes the row with its largest entry among the rows of columns holding two or more.

    Raises:
        ValueError: ``n < r`` (no such point exists).
    """
    n, r = x.shape
    if n < r:
        raise ValueError(f"nonnegative orthonormal n × r matrices need n >= r, got {n} × {r}")
    pos = x.clamp_min(0.0)
    owner = torch.argmax(pos, dim=1)
    keep = pos.max(dim=1).values > 0
    counts = torch.bincount(owner[keep], minlength=r)
    for j in torch.nonzero(counts == 0).flatten().tolist():
        donors = keep & (counts[owner] >= 2) | ~keep
        score = torch.where(donors, x[:, j], torch.full_like(x[:, j], -math.inf))
        i = int(torch.argmax(score))
        if keep[i]:
            counts[owner[i]] -= 1
        owner[i], keep[i] = j, True
        counts[j] += 1
    out = torch.zeros_like(x)
    rows = torch.nonzero(keep).flatten()
    vals = pos[rows, owner[rows]]
    vals = torch.where(vals > 0, vals, torch.ones_like(vals))  # a donated row with x_ij <= 0
    out[rows, owner[rows]] = vals
    return out / torch.linalg.norm(out, dim=0)


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
               patience: int = 5, momentum: bool = False, deadline: float | None = None,
               gradient: Callable[[torch.Tensor], torch.Tensor] | None = None
               ) -> tuple[torch.Tensor, float, int]:
    """Up to ``steps`` iterations ``X ← polar(prox_{t h}(X − t ∇f(X)))``, ``t = 1/L``; the best.

    A cheap start heuristic (a projected proximal-gradient step with the polar factor as the
    projection; not a descent method, so the lowest-F iterate is kept). With ``momentum`` the
    step is taken from ``Y = X_k + (k − 1)/(k + 2)·(X_k − X_{k−1})`` (Nesterov's extrapolation;
    k restarts at 0, and the step is redone from ``X_k``, whenever F would rise): on Gaussian
    ℓ1-SPCA (n = 300) it reached in 1000 steps a lower F (−0.1162) than 3000 plain steps
    (−0.1156). It stops after
    ``patience`` iterations without a new best, or at ``deadline`` (``time.perf_counter()``).
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
    while done < steps and since < patience and (deadline is None
                                                  or time.perf_counter() < deadline):
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
                       dtype: torch.dtype | None = None, tangent: bool = False
                       ) -> Iterator[tuple[torch.Tensor, float, int]]:
    """The splitting phase of :func:`splitting_start`, one check at a time: yields
    ``(best point, its F, iterations done)`` at every check, so that a run can record its
    progress (and stop it) between checks. Arguments as
    :func:`splitting_start`, which this validates first, and ``refine``: a local search that
    maps a feasible point to ``(a point, its F)`` no higher (e.g. :func:`partition_search`).
    With ``refine``, a check forms its feasible point only while the time spent refining is
    at most :data:`REFINE_SHARE` of the phase's time so far, and refines it (no unrefined point
    is scored) unless its support is the last refined one's; the patience then counts refined
    points only. ``dtype``: the iterates'
    dtype (default ``x``'s; ``gradient`` must accept and return it); the feasible points are
    formed and scored in ``x``'s dtype (a heuristic phase in float32 costs about half as much
    per iteration at n = 1000). ``tangent``: Riemannian X-steps (:func:`linearised_x_step`)."""
    if steps < 0 or smoothing < 0 or penalty <= 0 or check_every < 1:
        raise ValueError(f"need steps >= 0, smoothing >= 0, penalty > 0, check_every >= 1; got "
                         f"{steps}, {smoothing}, {penalty}, {check_every}")
    lip = getattr(oracle, "lipschitz", None)
    if not lip:
        raise ValueError("the splitting phase needs an oracle with a Lipschitz constant")
    return _splitting(x, oracle, h, steps, smoothing, penalty * lip, float(lip), check_every,
                      patience, min_decrease, oracle.gradient if gradient is None else gradient,
                      refine, x.dtype if dtype is None else dtype, tangent)


def linearised_x_step(x: torch.Tensor, y: torch.Tensor, lam: torch.Tensor, g: torch.Tensor,
                      beta: float, lip: float, tangent: bool = False) -> torch.Tensor:
    """``polar(X − D/(L + β))``, ``D = ∇f + Λ + β(X − Y)``: one linearised step on the augmented
    Lagrangian of ``f(X) + h(Y)``, ``X = Y``, projected onto St(n, r) (``g = ∇f(X)``; ``Λ = 0``
    for a penalty method). ``tangent``: ``D`` replaced by its tangent part
    ``D − X sym(XᵀD)`` (a Riemannian gradient step, as RADMM takes)."""
    d = g + lam + beta * (x - y)
    if tangent:
        d = d - x @ sym(x.mT @ d)
    return polar(x - d / (lip + beta))


def linearised_admm_step(x: torch.Tensor, y: torch.Tensor, lam: torch.Tensor, g: torch.Tensor,
                         h: SeparableTerm, beta: float, lip: float, mu: float = 0.0,
                         tangent: bool = False
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One iteration ``(X, Y, Λ) ↦ (X⁺, Y⁺, Λ⁺)`` of linearised ADMM with a Moreau-smoothed h
    (μ = 0: plain; see :func:`splitting_start` for the formulas), ``g = ∇f(X)``; ``tangent``
    as :func:`linearised_x_step`."""
    x = linearised_x_step(x, y, lam, g, beta, lip, tangent)
    w = x + lam / beta
    y = h.prox(w, 1.0 / beta + mu)
    if mu:
        y = (y + mu * beta * w) / (1.0 + mu * beta)
    return x, y, lam + beta * (x - y)


def _splitting(x, oracle, h, steps, smoothing, beta, lip, check_every, patience, min_decrease,
               gradient, refine, dtype, tangent):
    """The generator behind :func:`splitting_iterates` (arguments checked there)."""
    mu = smoothing / beta
    best_x, best_f = x, float(oracle.value(x)) + float(h.value(x))
    out, x = x.dtype, x.to(dtype)
    y, lam = h.prox(x, 1.0 / beta), torch.zeros_like(x)
    since, done = 0, 0
    began, refining, refined = time.perf_counter(), 0.0, None
    while done < steps and since < patience:
        x, y, lam = linearised_admm_step(x, y, lam, gradient(x), h, beta, lip, mu, tangent)
        done += 1
        if done % check_every and done & (done - 1) and done < steps:
            continue
        if refine is not None and refining > REFINE_SHARE * (time.perf_counter() - began):
            yield best_x, best_f, done  # only refined points count: none is due yet
            continue
        cand = _feasible_candidate(x.to(out), y.to(out), h)
        if cand is not None and refine is not None:
            support = cand != 0
            if refined is not None and torch.equal(support, refined):
                cand = None
            else:
                now = time.perf_counter()
                cand, fc = refine(cand)
                refined = support
                refining += time.perf_counter() - now
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
                    deadline: float | None = None,
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
    ``steps`` iterations or at the first check past ``deadline`` (``time.perf_counter()``).
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
        if deadline is not None and time.perf_counter() >= deadline:
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
                    chunk: int = 200) -> Iterator[tuple[torch.Tensor, float, int]]:
    """The local search of :func:`partition_search`, yielding ``(point, its F, moves done)``
    after every ``chunk`` moves and after every polish, so that a run can record its progress
    (and stop it) in between. Arguments as :func:`partition_search`, checked first."""
    q = getattr(oracle, "quadratic", None)
    if q is None:
        raise ValueError("partition search needs a quadratic oracle s·tr(XᵀCX)")
    xa = host_array(x).astype(np.float64, copy=True)
    if (xa < 0).any() or ((xa > 0).sum(axis=1) > 1).any():
        raise ValueError("partition search needs a nonnegative X with disjoint column supports")
    a = np.ascontiguousarray(-float(q.scale) * host_array(q.c).astype(np.float64))
    return _partition_moves(xa, a, oracle, x, max_moves, polish, chunk)


def _partition_moves(xa, a, oracle, x, max_moves, polish, chunk):
    """The generator behind :func:`partition_moves` (arguments checked there)."""

    def point():
        out = torch.from_numpy(xa.copy()).to(dtype=x.dtype, device=x.device)
        return out, float(oracle.value(out)), moves

    moves = 0
    g = a @ xa
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
        partition_polish(xa, a, g, polish)
        form = float(np.einsum("ib,ib->", xa, g))
        yield point()
        if form <= start + 1e-10 * abs(start):
            break


def partition_search(x: torch.Tensor, oracle, *, max_moves: int = 100000, polish: int = 20,
                     chunk: int = 200, deadline: float | None = None
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
    polish lowers F by less than 1e-10 relative, after ``max_moves`` moves, or at the first
    ``chunk`` of moves past ``deadline`` (``time.perf_counter()``). Every move and every kept
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
    for item in partition_moves(x, oracle, max_moves=max_moves, polish=polish, chunk=chunk):
        out = item
        if deadline is not None and time.perf_counter() >= deadline:
            break
    return out


def _low_precision_gradient(oracle, x: torch.Tensor):
    """``(∇f in float32, torch.float32)`` for a quadratic ``f = s·tr(XᵀCX)`` and a float64 CPU
    ``x`` (``2s·C`` is copied to float32 once; numpy's float32 product took 0.3 ms against
    the oracle's 0.45 ms at n = 300 and 1.3 against 3.3 ms at n = 1000, single-threaded);
    ``(None, None)`` otherwise (the oracle's gradient in ``x``'s dtype)."""
    q = getattr(oracle, "quadratic", None)
    if q is None or q.d is not None or x.dtype != torch.float64 or x.device.type != "cpu":
        return None, None
    c32 = (2.0 * float(q.scale) * host_array(q.c)).astype(np.float32)

    def gradient(y: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(c32 @ y.numpy())

    return gradient, torch.float32


@functools.cache
def _load_partition_kernels() -> None:
    """Compile (or load from numba's cache) the partition search's kernels once per process, on
    a 3 × 2 partition, so that a timed run does not pay for it (a cached load takes about a
    second)."""
    a = np.array([[2.0, 1.0, 0.0], [1.0, 2.0, 1.0], [0.0, 1.0, 2.0]])
    x = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    g = a @ x
    row_move_gains(x, a, g)
    partition_row_moves(x, a, g, 1, 1e-12)
    partition_polish(x, a, g, 1)


def pair_scores(x: torch.Tensor, g_rows: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """``⟨Ĝ_j, X_i⟩ − ⟨Ĝ_i, X_j⟩`` per pair ``(i, j)``: the derivative at θ = 0 of
    ``F(X(θ))``, rows i, j of X rotated by ``[[cos θ, −sin θ], [sin θ, cos θ]]``, when
    ``g_rows`` (m, 2, r) holds rows i and j of a (sub)gradient Ĝ of F."""
    xi, xj = x[pairs[:, 0]], x[pairs[:, 1]]
    return (g_rows[:, 1] * xi).sum(-1) - (g_rows[:, 0] * xj).sum(-1)


class SparseOBCD(OBCD):
    """OBCD (k = 2, exact curvature) with a chosen start, greedy pairs and column sweeps.

    Args:
        h: the separable term (as :class:`~orthoplug.solvers.obcd.OBCD`).
        starts: candidate starts tried at the first iteration besides ``x0``: any of
            ``"diagonal"``, ``"pca"`` (:func:`start_candidates`); the lowest F wins (``x0`` on
            ties). ``()`` keeps ``x0``.
        candidates: random pairs scored per pair step (1: OBCD's uniform pairs).
        column_every: pair steps between two column sweeps (0: none); ``"auto"`` (default):
            one sweep per n pair steps when f is column-invariant, else 0.
        start_sweeps: column sweeps applied to each start candidate before comparing them
            (default 1: on dense n = 1000 columns a sweep costs tens of ms; in the issue #19
            runs one sweep reached the competitors' objective sooner than 3 or 10, with final F
            within 1 % of theirs).
        prox_steps: :func:`prox_polar` iterations (with momentum, patience 20) from the
            chosen start (0: none); kept only if they lower F, and cut off at
            ``prox_fraction`` of ``max_time``. ``"auto"``
            (default): 1000 when h is finite and continuous (ℓ1, capped ℓ1), else 0 — the polar
            factor of a thresholded matrix is dense, so for ℓ0 the phase trades a sparse start
            for a dense one that pair steps cannot thin out in time, and under the
            nonnegativity indicator its iterates are infeasible.
        prox_fraction: the share of the time budget the prox phase may use, in (0, 1] (default
            0.5).
        split_steps: :func:`splitting_iterates` iterations from the chosen start (0: none);
            cut off at ``split_fraction`` of ``max_time``. ``"auto"``
            (default): 10000 when h is not continuous (ℓ0, the nonnegativity indicator), else 0.
            Its X-iterates are orthonormal and its Y-iterates sparse (or nonnegative), and the
            feasible points it forms from them have the sparsity pattern of Y, which pair
            steps from a dense start do not reach in time.
        split_smoothing: μβ of :func:`splitting_start`; ``"auto"`` (default): 0.1 for an
            indicator h (the hard projection alone stalled on Gaussian NN-PCA), else 0.
        split_fraction: the share of the time budget the splitting phase may use, in (0, 1];
            ``"auto"`` (default): 1 with the partition search (its refined points kept
            improving on Gaussian NN-PCA after half of the budget, and pair steps gain little
            there), else 0.5; a partition search after it runs until no move gains. The start
            phase runs interleaved with the pair steps: items (a check of
            :func:`splitting_iterates`, or a chunk of :func:`partition_moves`) up to
            ``phase_share`` of the time per evaluation interval on the compiled path, per
            ``PHASE_EVERY`` pair steps elsewhere; an item's point replaces the run's when its
            F is lower. Pair steps thus keep their progress where the phase is slow (large n),
            and the run records the phase's progress as it goes.
        partition: :func:`partition_moves` from the chosen start, on the rounded points of
            the splitting phase and after it; ``"auto"`` (default): for the nonnegativity
            indicator (its feasible points are row partitions, whose local minima pair steps
            cannot leave).
        split_from: where the splitting phase starts: ``"start"`` (the chosen start) or
            ``"x0"`` (the run's initial point); ``"auto"`` (default): ``"x0"`` with the
            partition search, else ``"start"``. On Gaussian NN-PCA (n = 300, seeds 0–2; 1200
            iterations and a partition search) the splitting from the rounded PCA start ended
            at −0.03042 to −0.03077, from a random partition at −0.03068 to −0.03077. With the
            partition search its X-steps are also Riemannian (``tangent`` of
            :func:`linearised_x_step`): on seeds 0, 1, 3, 4 they reached RADMM's final F at
            0.35–0.76 s against 0.58–0.89 s (one run each), with the same final F.
        phase_share: the share of the time since the start phase began that its items may use
            before the next pair steps, in [0, 1) (at least one item per evaluation interval);
            ``"auto"`` (default): 0.9 with the partition search (pair steps gain little on a
            row partition), else 0 (one item per interval).
        **kwargs: :class:`~orthoplug.solvers.obcd.OBCD` options except ``k`` and
            ``working_set`` (pairs are this class's choice).

    Raises:
        ValueError: unknown start, ``candidates < 1``, negative ``column_every``; at run time,
            column sweeps or starts requested on a cost they do not apply to (not a quadratic
            ``s·tr(XᵀCX)`` without ``D``).
    """

    name = "SparseOBCD"
    start_names = ("diagonal", "pca")

    def __init__(self, h: SeparableTerm | None = None, *, starts=("diagonal", "pca"),
                 candidates: int = 16, column_every: int | str = "auto", start_sweeps: int = 1,
                 prox_steps: int | str = "auto", prox_fraction: float = 0.5,
                 split_steps: int | str = "auto", split_smoothing: float | str = "auto",
                 split_fraction: float | str = "auto", partition: bool | str = "auto",
                 split_from: str = "auto", phase_share: float | str = "auto", **kwargs):
        for key in ("k", "working_set"):
            if key in kwargs:
                raise ValueError(f"SparseOBCD uses k = 2 and its own pairs; {key}= is not "
                                 f"an option here")
        super().__init__(h, **kwargs)
        bad = [s for s in starts if s not in self.start_names]
        if bad:
            raise ValueError(f"unknown start(s) {bad}; choose from {self.start_names}")
        if not (isinstance(candidates, int) and candidates >= 1):
            raise ValueError(f"candidates must be an integer >= 1, got {candidates!r}")
        if column_every != "auto" and not (isinstance(column_every, int) and column_every >= 0):
            raise ValueError(f"column_every must be 'auto' or an integer >= 0, got "
                             f"{column_every!r}")
        if start_sweeps < 0:
            raise ValueError(f"start_sweeps must be >= 0, got {start_sweeps}")
        if prox_steps == "auto":
            prox_steps = 1000 if self.h.piecewise.continuous else 0
        if not (isinstance(prox_steps, int) and prox_steps >= 0):
            raise ValueError(f"prox_steps must be 'auto' or an integer >= 0, got {prox_steps!r}")
        if split_steps == "auto":
            split_steps = 0 if self.h.piecewise.continuous else 10000
        if not (isinstance(split_steps, int) and split_steps >= 0):
            raise ValueError(f"split_steps must be 'auto' or an integer >= 0, got "
                             f"{split_steps!r}")
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
        if split_fraction == "auto":
            split_fraction = 1.0 if self.partition else 0.5
        for key, frac in (("prox_fraction", prox_fraction), ("split_fraction", split_fraction)):
            if not (isinstance(frac, (int, float)) and 0 < frac <= 1):
                raise ValueError(f"{key} must lie in (0, 1], got {frac}")
        self.prox_steps, self.prox_fraction = prox_steps, float(prox_fraction)
        self.split_steps, self.split_smoothing = split_steps, float(split_smoothing)
        self.split_fraction = float(split_fraction)
        if split_from == "auto":
            split_from = "x0" if self.partition else "start"
        if split_from not in ("x0", "start"):
            raise ValueError(f"split_from must be 'auto', 'x0' or 'start', got {split_from!r}")
        self.split_from = split_from
        if phase_share == "auto":
            phase_share = 0.9 if self.partition else 0.0
        if not (isinstance(phase_share, (int, float)) and 0 <= phase_share < 1):
            raise ValueError(f"phase_share must be 'auto' or a number in [0, 1), got "
                             f"{phase_share!r}")
        self.phase_share = float(phase_share)
        self.starts, self.candidates = tuple(starts), candidates
        self.column_every_user, self.start_sweeps = column_every, start_sweeps

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
        run.started = not (self.starts or self.prox_steps or self.split_steps or self.partition)
        run.prox_done = run.split_done = run.moves_done = 0
        run.part_counts = {}
        run.phase, run.phase_deadline = None, None
        run.phase_began, run.phase_time, run.phase_best = None, 0.0, math.inf
        if self.partition:
            _load_partition_kernels()
        run.start_chosen = "x0"
        run.column_sweeps_done = 0

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

    def _choose_start(self, run) -> None:
        """The lowest-F start among ``x0`` and ``starts`` (then the prox phase, if on). With a
        start phase the PCA candidate is left to it (:meth:`_phases`): its eigenvectors cost
        0.15 s at n = 1000, and the run records the cheap start's point first."""
        tracker = run.tracker
        x0 = run.x0 = tracker.x.clone()
        phases = bool(self.split_steps or self.partition)
        run.deferred = ("pca",) if phases and "pca" in self.starts else ()
        now = [name for name in self.starts if name not in run.deferred]
        best_name, best_x, best_f = "x0", None, self._objective(run, x0)
        for name, x in start_candidates(tracker.oracle, x0.shape[1], now).items():
            x, fx = self._prepared(run, x)
            if math.isfinite(fx) and fx < best_f:
                best_name, best_x, best_f = name, x, fx
        if self.prox_steps:
            x, fx, run.prox_done = prox_polar(x0 if best_x is None else best_x,
                                              tracker.oracle, self.h, self.prox_steps,
                                              momentum=True, patience=20,
                                              deadline=self._deadline(self.prox_fraction),
                                              gradient=tracker.gradient_at)
            if fx < best_f:
                best_name, best_x, best_f = f"{best_name} + prox", x, fx
        if best_x is not None:
            tracker.set_point(best_x.contiguous())
        run.start_x, run.start_f = x0 if best_x is None else best_x, best_f
        run.start_chosen = best_name
        if phases:
            run.phase = self._phases(run)
            run.phase_deadline = self._deadline(self.split_fraction)

    def _phases(self, run) -> Iterator[tuple[int, str, torch.Tensor, float, int]]:
        """The start phase as ``(part, name, point, F, count so far in the part)`` items: the
        deferred PCA start (:meth:`_choose_start`; it becomes the start if its F is lower than
        the chosen one's) and the splitting phase, the latter first when it starts from ``x0``
        (``split_from``; for NN-PCA its refined points came first: on Gaussian NN-PCA the PCA
        start and its partition search took 0.35 s before it under load and ended higher),
        else from the start; for the nonnegativity indicator then a partition search from the
        start and one from the run's point. The start is not the run's point: pair steps
        from the cheap start may have gone below the PCA start, which the splitting phase
        still starts from (on Gaussian ℓ0 at n = 300 from the diagonal start it ended at
        −0.099, from PCA at −0.117)."""
        tracker = run.tracker
        split = ["splitting"] if self.split_steps else []
        if self.split_from == "x0":  # it needs no start: the splitting first
            parts = split + list(run.deferred)
        else:
            parts = list(run.deferred) + split
        parts += ["partition search"] * (self.partition * (1 + bool(self.split_steps)))
        for part, name in enumerate(parts):
            if name in self.start_names:
                x, fx = self._prepared(run, start_candidates(tracker.oracle, run.x0.shape[1],
                                                             (name,))[name])
                if math.isfinite(fx) and fx < run.start_f:
                    run.start_x, run.start_f = x, fx
                yield part, name, x, fx, 1
                continue
            if name == "splitting":
                start = run.x0 if self.split_from == "x0" else run.start_x
                refine = None
                if self.partition:
                    def refine(x):
                        return partition_search(x, tracker.oracle, polish=5,
                                                deadline=run.deadline)[:2]
                gradient, dtype = _low_precision_gradient(tracker.oracle, start)
                items = splitting_iterates(start.clone(), tracker.oracle, self.h,
                                           self.split_steps, smoothing=self.split_smoothing,
                                           gradient=gradient or tracker.gradient_at,
                                           refine=refine, dtype=dtype,
                                           tangent=self.partition)
            else:
                first = part == parts.index("partition search")  # from the start
                # rounded: a point with tiny overlapping entries is no partition (an exact one
                # is its own rounding up to rounding errors; a point no lower is never taken)
                items = partition_moves(nonneg_rounding(run.start_x if first else tracker.x),
                                        tracker.oracle)
            for x, fx, count in items:
                yield part, name, x, fx, count
                if name == "splitting" and run.phase_deadline is not None \
                        and time.perf_counter() >= run.phase_deadline:
                    break

    def _advance_phase(self, run) -> None:
        """Items of the start phase, if it runs, each point replacing the run's if lower: at
        least one, and more while the phase has used less than ``phase_share`` of the time since
        it began. The phase ends when its last part ends (the splitting part at
        ``split_fraction`` of the budget at the latest; a partition search ends by itself)."""
        while run.phase is not None:
            began = time.perf_counter()
            if run.phase_began is None:
                run.phase_began = began
            item = next(run.phase, None)
            if item is None:
                run.phase = None
            else:
                part, name, x, fx, count = item
                run.part_counts[part] = (name, count)
                run.split_done = sum(c for n, c in run.part_counts.values() if n == "splitting")
                run.moves_done = sum(c for n, c in run.part_counts.values()
                                     if n == "partition search")
                # F never rises in a run, so an item no lower than an earlier one cannot be lower
                if fx < run.phase_best and fx < self._objective(run, run.tracker.x):
                    if not run.start_chosen.endswith(name):
                        run.start_chosen += f" + {name}"
                    run.tracker.set_point(x.contiguous())
                run.phase_best = min(run.phase_best, fx)
            now = time.perf_counter()
            run.phase_time += now - began
            if (run.phase_time >= self.phase_share * (now - run.phase_began)
                    or now >= run.deadline):
                return

    def _deadline(self, fraction: float) -> float | None:
        """``time.perf_counter()`` plus ``fraction`` of the time budget (None: no budget)."""
        budget = self.stopping.max_time * fraction
        return None if math.isinf(budget) else time.perf_counter() + budget

    def _start_once(self, run) -> None:
        if not run.started:
            run.started = True
            self._choose_start(run)

    def _sweep_if_due(self, run) -> None:
        """A column sweep after every ``column_every`` pair steps (kept if it lowers h); on the
        compiled path in place on the tracker's ``X`` and ``CX`` (f is unchanged)."""
        if run.column_every and run.count % run.column_every == 0:
            tracker = run.tracker
            if run.kernel:
                _column_sweep(tracker.xa, tracker.ya, self.h, run.generator)
                run.column_sweeps_done += 1
                return
            before = float(self.h.value(tracker.x))
            x = column_rotations(tracker.x, self.h, run.generator)
            if float(self.h.value(x)) < before:
                tracker.set_point(x.contiguous())
            run.column_sweeps_done += 1

    def steps(self, run, count):
        """On OBCD's compiled pair loop (quadratic f, float64 CPU): the start first, then up to
        ``count`` pair steps in the kernel, cut at the next column sweep; the greedy candidates
        are then ranked by their exact model decrease (computed in the kernel) rather than by
        :func:`pair_scores`. Elsewhere one :meth:`step`."""
        if not run.kernel:
            return super().steps(run, count)
        if run.started:  # the interval that chooses the start records it before any phase item
            self._advance_phase(run)
        self._start_once(run)
        if run.column_every:
            count = min(count, run.column_every - run.count % run.column_every)
        done = super().steps(run, count)
        self._sweep_if_due(run)
        return done

    def step(self, run):
        self._start_once(run)
        if run.count % PHASE_EVERY == 0:
            self._advance_phase(run)
        super().step(run)
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

    def info(self, run=None):
        return {**super().info(run), "working_set": f"greedy (best of {self.candidates})",
                "start": getattr(run, "start_chosen", None),
                "prox_steps": getattr(run, "prox_done", 0),
                "split_steps": getattr(run, "split_done", 0),
                "partition_moves": getattr(run, "moves_done", 0),
                "column_sweeps": getattr(run, "column_sweeps_done", 0)}
