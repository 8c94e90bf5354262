r"""Compiled GS-JOBCD pair loop on the quadratic fast path ``f(X) = s·tr(Xᵀ C X D)``.

One call runs many Gauss–Seidel pair steps on the arrays of a
:class:`~orthoplug.oracles.core.QuadraticTracker` — ``x`` (n×k), ``y = C x`` (n×k), ``c``
(n×n, symmetric), ``d`` (k×k, symmetric; a 0×0 array for D = I) — updating x, y and the cost in
place. For a pair ``B = (i, j)``: the exact model ``(M, Q̲ + θI₄)``
(:func:`~orthoplug.kernels.quadratic.pair_model`, Q̲'s PSD part when ``clip``), the exact 2×2
step ``V`` (:func:`~orthoplug.kernels.jorth2.solve_jorth2`) of ``P = M − mat(Q vec I)``, and if
``V ≠ I`` the row update ``X[B] = V Z`` with Y and f
(:func:`~orthoplug.kernels.quadratic.update_rows`, ``Δ D = (V − I) W`` with ``W = Z D``).
A step whose model, new rows or cost is not finite stops the loop before anything of it is
written; the status says which (:mod:`~orthoplug.kernels.quadratic`'s vocabulary), and the
number of completed steps says where.

Pair orders: step t uses the ``candidates`` consecutive pairs ``pairs[start + t·candidates + c]``.
With one candidate that pair is taken (random and cyclic orders); with several, each candidate's
exact model decrease ``⟨V − I, M⟩ + ½ vec(V − I)ᵀ Q vec(V − I)`` is computed and the best one is
taken (the greedy, Gauss–Southwell-type order).

:func:`jacobi_pairs` is J-JOBCD's step on CPU float64: disjoint row pairs of a batch of matrices,
each with the scalar curvature ``ς = σ‖Z‖₂² + θ`` from the gradient rows given (any cost).

:func:`linear_sweep` is J-JOBCD with several matchings per gradient (``matchings > 1``,
:func:`orthoplug.solvers.jobcd_steps.jacobi_step`): the pairs of each matrix are applied one
after the other, every pair minimising the model of ``f`` linearised at the point ``X₀`` where
the gradient ``G = ∇f(X₀)`` was taken,

    ⟨G, X⁺ − X₀⟩ + Σ_t σ‖Z_t‖₂²/2 ‖W_t‖²_F,   W_t = V_t − I,  Z_t = X_t[B_t] (the rows when
    pair t is solved),

so pair ``B`` sees ``M = G[B] Z_tᵀ`` (current rows, stale gradient rows). Since the rows of one
matching are disjoint, ``‖X⁺ − X₀‖²_F ≤ R Σ_t ‖Z_t‖₂² ‖W_t‖²`` for R matchings, so the predicted
change bounds ``f(X⁺) − f(X₀)`` once σ ≥ R·L_f; the solver checks every such step against the
true cost instead (σ adaptive), which keeps it monotone. One matching of it is
:func:`jacobi_pairs`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .jorth2 import (
    _HYP,
    _MU_MAX,
    _ORTH,
    _TOL,
    NEEDS_BATCHED,
    chosen,
    form_point_jit,
    largest_root,
    solve_jorth2,
)
from .quadratic import (
    NEEDS_BATCHED_PAIR,
    NONFINITE_CURVATURE,
    NONFINITE_UPDATE,
    OK,
    column_pair_model,
    pair_model,
    rotate_pair,
    update_columns,
    update_rows,
)

__all__ = ["gs_pairs", "gs_columns", "jacobi_pairs", "linear_sweep"]


@njit(cache=True)
def _solve(q, j1, j2, m11, m12, m21, m22):
    """The exact 2×2 step of the model ``(M, q)``: ``P = M − mat(q vec I)`` (column-major)."""
    return solve_jorth2(j1, j2, m11 - q[0, 0] - q[0, 3], m12 - q[2, 0] - q[2, 3],
                        m21 - q[1, 0] - q[1, 3], m22 - q[3, 0] - q[3, 3], q)


@njit(cache=True)
def _decrease(q, m11, m12, m21, m22, v11, v12, v21, v22) -> float:
    """Model change ``⟨W, M⟩ + ½ vec(W)ᵀ q vec(W)``, ``W = V − I`` (≤ 0 at the exact step)."""
    wv = (v11 - 1.0, v21, v12, v22 - 1.0)
    quad = 0.0
    for m in range(4):
        for l in range(4):
            quad += wv[m] * q[m, l] * wv[l]
    return wv[0] * m11 + wv[1] * m21 + wv[2] * m12 + wv[3] * m22 + 0.5 * quad


@njit(cache=True)
def gs_pairs(x: np.ndarray, y: np.ndarray, c: np.ndarray, d: np.ndarray, s: float, f: float,
             jvec: np.ndarray, theta: float, clip: bool, pairs: np.ndarray, start: int,
             steps: int, candidates: int) -> tuple[int, float, int]:
    """Run ``steps`` GS-JOBCD pair steps in place (see the module docstring).

    Args:
        x, y: (n, k) float64, the iterate and ``C x``; updated in place.
        c: (n, n) symmetric C. d: (k, k) symmetric D, or a (0, 0) array for D = I.
        s: the cost's scale. f: the cost at x.
        jvec: (n,) signature, entries ±1. theta: proximal weight θ > 0.
        clip: take the PSD part of the block curvature (``s·C`` and D not both PSD/NSD).
        pairs: (m, 2) int64 row pairs (i ≠ j); step t reads ``pairs[start + t·candidates + c]``,
            ``c < candidates``.

    Returns:
        ``(done, f, status)``: steps completed, the cost after them, and
        :data:`~orthoplug.kernels.quadratic.OK` or the reason the loop stopped before step
        ``done``.
    """
    k = x.shape[1]
    has_d = d.shape[0] > 0
    z = np.empty((2, k))
    w = np.empty((2, k))
    zb = np.empty((2, k))
    wb = np.empty((2, k))
    u = np.empty((2, k))
    dz = np.empty((2, k))
    dd = np.empty((2, k)) if has_d else dz
    q = np.empty((4, 4))
    for t in range(steps):
        best = 0.0
        bi = bj = -1
        b11, b12, b21, b22 = 1.0, 0.0, 0.0, 1.0
        for cand in range(candidates):
            idx = start + t * candidates + cand
            i, j = pairs[idx, 0], pairs[idx, 1]
            ok, m11, m12, m21, m22 = pair_model(x, y, c, d, s, theta, clip, i, j, z, w, q)
            if not ok:
                return t, f, NONFINITE_CURVATURE
            status, v11, v12, v21, v22 = _solve(q, jvec[i], jvec[j], m11, m12, m21, m22)
            if status == NEEDS_BATCHED:
                if candidates == 1:
                    return t, f, NEEDS_BATCHED_PAIR
                continue  # greedy: a candidate the kernel cannot solve is not taken
            if candidates == 1:
                bi, bj = i, j
                b11, b12, b21, b22 = v11, v12, v21, v22
                break
            gain = _decrease(q, m11, m12, m21, m22, v11, v12, v21, v22)
            if gain < best:
                best, bi, bj = gain, i, j
                b11, b12, b21, b22 = v11, v12, v21, v22
                for col in range(k):
                    zb[0, col], zb[1, col] = z[0, col], z[1, col]
                    wb[0, col], wb[1, col] = w[0, col], w[1, col]
        if bi < 0 or (b11 == 1.0 and b12 == 0.0 and b21 == 0.0 and b22 == 1.0):
            continue  # V = I (a block already at its optimum) changes nothing
        zz, ww = (z, w) if candidates == 1 else (zb, wb)
        if not rotate_pair(zz, b11, b12, b21, b22, 0.0, u, dz):
            return t, f, NONFINITE_UPDATE
        if has_d:  # Δ D = (V − I) W: O(k) instead of O(k²)
            for col in range(k):
                w0, w1 = ww[0, col], ww[1, col]
                dd[0, col] = (b11 - 1.0) * w0 + b12 * w1
                dd[1, col] = b21 * w0 + (b22 - 1.0) * w1
        status, f = update_rows(x, y, c, s, f, bi, bj, u, dz, dd)
        if status != OK:
            return t, f, status
    return steps, f, OK


@njit(cache=True)
def gs_columns(x: np.ndarray, y: np.ndarray, d: np.ndarray, s: float, f: float,
               jk: np.ndarray, theta: float, clip: bool, pairs: np.ndarray, start: int,
               steps: int) -> tuple[int, float, int]:
    """Run ``steps`` exact column pair steps ``X[:, B] ← X[:, B] V̂`` in place, ``V̂ ∈ O(J_BB)``
    for the signature ``jk`` of ``XᵀJX = J_k``, on the pairs ``pairs[(start + t) mod m]``.

    Each step minimises ``f`` over ``O(J_BB)`` acting on two columns exactly (the model of
    :func:`~orthoplug.kernels.quadratic.column_pair_model` plus ``θI₄``, solved by the same 2×2
    solver as the row pairs). A pair whose subproblem needs the batched solver (rounding) is
    skipped: ``V = I``.

    Args:
        x, y: (n, k) float64, the iterate and ``C x``; updated in place.
        d: (k, k) symmetric D. s: the cost's scale. f: the cost at x.
        jk: (k,) signature of ``J_k``, entries ±1. theta: proximal weight θ > 0.
        clip: take the PSD part of the block curvature ``2s A_BB ⊗ D_BB``.
        pairs: (m, 2) int64 column pairs (a ≠ b), taken cyclically from ``start``.

    Returns:
        ``(done, f, status)`` as :func:`gs_pairs`.
    """
    k = x.shape[1]
    acol = np.empty((k, 2))
    q = np.empty((4, 4))
    m = pairs.shape[0]
    for t in range(steps):
        a, b = pairs[(start + t) % m, 0], pairs[(start + t) % m, 1]
        ok, m11, m12, m21, m22 = column_pair_model(x, y, d, s, theta, clip, a, b, acol, q)
        if not ok:
            return t, f, NONFINITE_CURVATURE
        status, v11, v12, v21, v22 = _solve(q, jk[a], jk[b], m11, m12, m21, m22)
        if status == NEEDS_BATCHED or (v11 == 1.0 and v12 == 0.0 and v21 == 0.0
                                       and v22 == 1.0):
            continue
        status, f = update_columns(x, y, d, s, f, a, b, acol, (m11, m12, m21, m22),
                                   (v11, v12, v21, v22))
        if status != OK:
            return t, f, status
    return steps, f, OK


#: ``sinh`` of the clamp of μ in :func:`~orthoplug.kernels.jorth2.hyperbolic_point`: the
#: largest ``|sinh μ|`` of a hyperbolic step
_SINH_MAX = math.sinh(_MU_MAX)
#: a bound on ``|V|·|Z|`` entries below which the new rows of a pair step are surely finite
_SAFE_ROW = 1e300


@njit(cache=True)
def _scalar_solve(j1, j2, curv, m11, m12, m21, m22):
    """:func:`~orthoplug.kernels.jorth2.solve_jorth2` for the scalar curvature ``q = ς I₄``.

    With ``q = ς I₄`` every form has ``cq = e = ς``, ``d = 0``, so the 4×4 products drop out:
    on O(1,1) ``w± = 2ς``, ``μ₀ = 0``, ``ρ = 1`` and ``(C, S) = (sgn √(1 + t²), y)``
    (``cosh asinh``, μ clamped as there), and the second form is skipped when the bound
    ``min_{|C|≥1}(ςC² + aC) + min_S(ςS² + bS)`` of its value exceeds the first form's; on O(2)
    ``R = 0`` and the minimiser of ``aC + bS`` on the circle is ``−(a, b)/‖(a, b)‖`` (``(0, 1)``
    for ``a = b = 0``, as there). The forms, :func:`~orthoplug.kernels.jorth2.largest_root` and
    the tie rule are jorth2's; the result equals its to rounding. ``ς ≤ 0`` on O(1,1) gives
    :data:`~orthoplug.kernels.jorth2.NEEDS_BATCHED` and V = I, as there.
    """
    pv = (m11 - curv, m21, m12, m22 - curv)
    hyp = j1 != j2
    if hyp and not curv > 0.0:
        return NEEDS_BATCHED, 1.0, 0.0, 0.0, 1.0
    forms = _HYP if hyp else _ORTH
    b11, b12, b21, b22 = 1.0, 0.0, 0.0, 1.0
    f_best, f_eye = math.inf, 0.0
    for f in range(2):
        a = b = 0.0
        for r in range(4):
            a += forms[f, 0, r] * pv[r]
            b += forms[f, 1, r] * pv[r]
        if f == 0:  # V = I is c = 1, s = 0 of the first form
            f_eye = a + curv
        if hyp:
            # F ≥ min_{|C| ≥ 1} (ςC² + aC) + min_S (ςS² + bS) on the form: skip it if that
            # bound already exceeds the best value (the second form, for ς ≫ ‖M‖)
            low = (curv - abs(a) if abs(a) <= 2.0 * curv else -a * a / (4.0 * curv)) \
                - b * b / (4.0 * curv)
            if f_best < low - _TOL * max(1.0, abs(low)):
                continue
            pc, ps = 0.5 * ((a + b) + (a - b)), 0.5 * ((a + b) - (a - b))
            t = min(largest_root(2.0 * curv, abs(pc), abs(ps), 1.0), _SINH_MAX)
            C = -math.hypot(1.0, t) if pc > 0.0 else math.hypot(1.0, t)
            S = -t if ps > 0.0 else t
        else:
            h = math.hypot(a, b)
            C, S = (-a / h, -b / h) if h > 0.0 else (0.0, 1.0)
        val = C * (a + curv * C) + S * (b + curv * S)
        if val < f_best:
            f_best = val
            b11, b12, b21, b22 = form_point_jit(forms, f, C, S)
    return chosen(f_eye, f_best, b11, b12, b21, b22)


@njit(cache=True)
def _scalar_pair(x, b, i, j, gi, gj, j1, j2, sigma, theta) -> tuple[int, float]:
    """One scalar-majoriser pair step in place on rows ``i, j`` of matrix ``b`` of ``x``.

    ``gi, gj`` are the gradient rows, ``M = G_B Zᵀ`` with ``Z = X[B]``, ``ς = σ‖Z‖₂² + θ``
    (``‖Z‖₂²`` the larger eigenvalue of the 2×2 Gram ``Z Zᵀ``), and ``V`` is the exact 2×2 step of
    the model ``(M, ς I₄)`` (:func:`_scalar_solve`; a scalar curvature has ``w± = 2ς > 0``, so no
    instance needs the batched solver: such a pair would be left as is).
    Nothing is written unless every new entry is finite (checked only when the bound
    ``Σ|V_ab|·√ρ`` on them is not). Returns the status and the model change
    ``⟨W, M⟩ + σ‖Z‖₂²/2 ‖W‖²_F``, ``W = V − I``.
    """
    k = x.shape[2]
    m11 = m12 = m21 = m22 = 0.0
    aa = ab = cc = 0.0
    for col in range(k):
        zi, zj = x[b, i, col], x[b, j, col]
        m11 += gi[col] * zi
        m12 += gi[col] * zj
        m21 += gj[col] * zi
        m22 += gj[col] * zj
        aa += zi * zi
        ab += zi * zj
        cc += zj * zj
    rho = 0.5 * (aa + cc) + math.sqrt((0.5 * (aa - cc)) ** 2 + ab * ab)
    curv = sigma * rho + theta
    if not math.isfinite(curv):
        return NONFINITE_CURVATURE, 0.0
    status, v11, v12, v21, v22 = _scalar_solve(j1, j2, curv, m11, m12, m21, m22)
    if status == NEEDS_BATCHED or (v11 == 1.0 and v12 == 0.0 and v21 == 0.0 and v22 == 1.0):
        return OK, 0.0
    # every |entry| of Z is ≤ √ρ, so the new rows are finite when this bound is; else check them
    if not (abs(v11) + abs(v12) + abs(v21) + abs(v22)) * math.sqrt(rho) < _SAFE_ROW:
        for col in range(k):
            zi, zj = x[b, i, col], x[b, j, col]
            if not (math.isfinite(v11 * zi + v12 * zj) and math.isfinite(v21 * zi + v22 * zj)):
                return NONFINITE_UPDATE, 0.0
    for col in range(k):
        zi, zj = x[b, i, col], x[b, j, col]
        x[b, i, col] = v11 * zi + v12 * zj
        x[b, j, col] = v21 * zi + v22 * zj
    w11, w22 = v11 - 1.0, v22 - 1.0
    return OK, (w11 * m11 + v12 * m12 + v21 * m21 + w22 * m22
                + 0.5 * sigma * rho * (w11 * w11 + v12 * v12 + v21 * v21 + w22 * w22))


@njit(cache=True)
def jacobi_pairs(x: np.ndarray, g_rows: np.ndarray, pairs: np.ndarray, jvec: np.ndarray,
                 sigma: float, theta: float) -> tuple[int, float]:
    """J-JOBCD's step: the scalar-majoriser step of disjoint row pairs of every matrix, in place.

    Args:
        x: (nb, n, k) float64, C-contiguous, the matrices; their pair rows are overwritten.
        g_rows: (nb, m, 2, k) float64, the gradient's rows at the pairs.
        pairs: (nb, m, 2) int64, row pairs, disjoint within each matrix.
        jvec: (n,) float64 signature of the rows.
        sigma: σ; theta: proximal weight θ (in the solve, not in the prediction).

    Returns:
        ``(status, predicted)``: :data:`~orthoplug.kernels.quadratic.OK`, or
        :data:`~orthoplug.kernels.quadratic.NONFINITE_CURVATURE` /
        :data:`~orthoplug.kernels.quadratic.NONFINITE_UPDATE` (the pairs before it are written:
        discard ``x``), and the summed model change of the pairs (:func:`_scalar_pair`).
    """
    predicted = 0.0
    for b in range(pairs.shape[0]):
        for t in range(pairs.shape[1]):
            i, j = pairs[b, t, 0], pairs[b, t, 1]
            status, change = _scalar_pair(x, b, i, j, g_rows[b, t, 0], g_rows[b, t, 1], jvec[i],
                                          jvec[j], sigma, theta)
            if status != OK:
                return status, predicted
            predicted += change
    return OK, predicted


@njit(cache=True)
def linear_sweep(x: np.ndarray, g: np.ndarray, jvec: np.ndarray, pairs: np.ndarray,
                 sigma: float, theta: float) -> tuple[int, float]:
    """J-JOBCD with several matchings per gradient: pair steps in the given order, in place, on
    the stale gradient (see the module docstring).

    Args:
        x: (nb, n, k) float64, C-contiguous; rows of each matrix are updated in place.
        g: (nb, n, k) float64, the gradient taken at the sweep's start point.
        jvec: (n,) float64 signature of the rows.
        pairs: (nb, P, 2) int64 row pairs of each matrix, processed in this order.
        sigma: σ; theta: proximal weight θ (in the solve, not in the prediction).

    Returns:
        ``(status, predicted)`` as :func:`jacobi_pairs`.
    """
    predicted = 0.0
    for b in range(pairs.shape[0]):
        for t in range(pairs.shape[1]):
            i, j = pairs[b, t, 0], pairs[b, t, 1]
            status, change = _scalar_pair(x, b, i, j, g[b, i], g[b, j], jvec[i], jvec[j], sigma,
                                          theta)
            if status != OK:
                return status, predicted
            predicted += change
    return OK, predicted
