r"""Compiled GS-JOBCD pair loop on the quadratic fast path ``f(X) = s·tr(Xᵀ C X D)``.

One call runs many Gauss–Seidel pair steps on the arrays of a
:class:`~orthoplug.oracles.core.QuadraticTracker` — ``x`` (n×k), ``y = C x`` (n×k), ``c``
(n×n, symmetric), ``d`` (k×k, symmetric; a 0×0 array for D = I) — updating x, y and the cost in
place. For a pair ``B = (i, j)`` with ``Z = X[B]`` and ``W = Z D``:

* gradient rows ``G_B = 2s Y[B] D``, so ``M = G_B Zᵀ = 2s Y[B] Wᵀ`` (D symmetric);
* curvature ``Q̲ = 2s (Z D Zᵀ) ⊗ C_BB`` (its PSD part when ``clip``: the eigenpairs of a
  Kronecker product of two symmetric 2×2 factors are the products of theirs, so the negative
  part is removed in closed form) ``+ θ I₄``;
* the exact 2×2 step ``V`` (:func:`~orthoplug.kernels.jorth2.solve_jorth2`) of
  ``P = M − mat(Q vec I)``;
* if ``V ≠ I``: ``Δ = (V − I) Z``; ``Y += C[B]ᵀ Δ`` in ONE pass over Y (each entry read and
  written once, rows of C since C is symmetric); ``f += s⟨Δ D, Y_old[B] + Y_new[B]⟩`` with
  ``Δ D = (V − I) W``; ``X[B] = V Z``.

A non-finite curvature bound or update stops the loop before anything of that step is written;
a cost that overflows stops it after Y moved (the caller recomputes Y). The status says which
(:data:`NONFINITE_CURVATURE`, :data:`NONFINITE_UPDATE`, :data:`NONFINITE_COST`), and the
number of completed steps says where.

Pair orders: step t uses the ``candidates`` consecutive pairs ``pairs[start + t·candidates + c]``.
With one candidate that pair is taken (random and cyclic orders); with several, each candidate's
exact model decrease ``⟨V − I, M⟩ + ½ vec(V − I)ᵀ Q vec(V − I)`` is computed and the best one is
taken (the greedy, Gauss–Southwell-type order).

:func:`jacobi_pairs` is J-JOBCD's step on CPU float64: disjoint row pairs of a batch of matrices,
each with the scalar curvature ``ς = σ‖Z‖₂² + θ`` from the gradient rows given (any cost).

:func:`linear_sweep` is J-JOBCD with several matchings per gradient (``matchings > 1``,
:func:`orthoplug.solvers.jobcd.jacobi_step`): the pairs of each matrix are applied one after the
other, every pair minimising the model of ``f`` linearised at the point ``X₀`` where the gradient
``G = ∇f(X₀)`` was taken,

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
    form_point,
    largest_root,
    solve_jorth2,
)

__all__ = ["gs_pairs", "jacobi_pairs", "linear_sweep", "OK", "NONFINITE_CURVATURE",
           "NONFINITE_UPDATE", "NONFINITE_COST", "NEEDS_BATCHED_PAIR"]

#: every requested step was taken
OK = 0
#: the block curvature of the next pair is not finite (nothing written)
NONFINITE_CURVATURE = 1
#: the next step's ``V Z`` is not finite (nothing written)
NONFINITE_UPDATE = 2
#: the next step's cost overflows (Y was updated, X was not: recompute Y from X)
NONFINITE_COST = 3
#: the next pair's 2×2 subproblem needs the batched solver (nothing written; one candidate only)
NEEDS_BATCHED_PAIR = 4


@njit(cache=True)
def _sym2_eig(a: float, b: float, d: float) -> tuple[float, float, float, float]:
    """Eigenpairs of ``[[a, b], [b, d]]``: ``(λ1, λ2, c, s)`` with eigenvectors ``(c, s)`` for λ1
    and ``(−s, c)`` for λ2 (the rotation ``2φ = atan2(2b, a − d)`` diagonalises it)."""
    phi = 0.5 * math.atan2(2.0 * b, a - d)
    c, s = math.cos(phi), math.sin(phi)
    l1 = a * c * c + 2.0 * b * c * s + d * s * s
    l2 = a * s * s - 2.0 * b * c * s + d * c * c
    return l1, l2, c, s


@njit(cache=True)
def _clip_kron(q: np.ndarray, a: float, b: float, d: float, p: float, r: float,
               t: float) -> None:
    """``q ← q − (negative part of [[a, b], [b, d]] ⊗ [[p, r], [r, t]])`` (q holds the product):
    eigenvectors ``u ⊗ v`` with eigenvalues ``λ μ``, the negative ones removed."""
    la1, la2, ca, sa = _sym2_eig(a, b, d)
    lb1, lb2, cb, sb = _sym2_eig(p, r, t)
    for ka in range(2):
        lam_a = la1 if ka == 0 else la2
        u0, u1 = (ca, sa) if ka == 0 else (-sa, ca)
        for kb in range(2):
            lam = lam_a * (lb1 if kb == 0 else lb2)
            if lam >= 0.0:
                continue
            v0, v1 = (cb, sb) if kb == 0 else (-sb, cb)
            w = (u0 * v0, u0 * v1, u1 * v0, u1 * v1)  # kron index 2i + k
            for m in range(4):
                for l in range(4):
                    q[m, l] -= lam * w[m] * w[l]


@njit(cache=True)
def _pair_model(x, y, c, d, s, theta, clip, i, j, z, w, q):
    """Fill ``z = X[B]``, ``w = Z D`` and ``q = Q̲ (+PSD clip) + θI``; return
    ``(ok, M11, M12, M21, M22)`` (``ok`` False: the curvature bound is not finite)."""
    k = x.shape[1]
    for col in range(k):
        z[0, col] = x[i, col]
        z[1, col] = x[j, col]
    if d.shape[0] == 0:
        for col in range(k):
            w[0, col] = z[0, col]
            w[1, col] = z[1, col]
    else:
        for col in range(k):
            a0 = a1 = 0.0
            for l in range(k):
                a0 += z[0, l] * d[l, col]
                a1 += z[1, l] * d[l, col]
            w[0, col] = a0
            w[1, col] = a1
    m11 = m12 = m21 = m22 = 0.0
    g00 = g01 = g10 = g11 = 0.0
    for col in range(k):
        yi, yj, w0, w1 = y[i, col], y[j, col], w[0, col], w[1, col]
        m11 += yi * w0
        m12 += yi * w1
        m21 += yj * w0
        m22 += yj * w1
        g00 += z[0, col] * w0
        g01 += z[0, col] * w1
        g10 += z[1, col] * w0
        g11 += z[1, col] * w1
    s2 = 2.0 * s
    # 2s Z D Zᵀ = [[a, b], [b2, e]] ⊗ C_BB = [[p, r], [r2, t]]
    a, b, b2, e = s2 * g00, s2 * g01, s2 * g10, s2 * g11
    p, r, r2, t = c[i, i], c[i, j], c[j, i], c[j, j]
    bound = (abs(a) + abs(b) + abs(b2) + abs(e)) * (abs(p) + abs(r) + abs(r2) + abs(t))
    if not math.isfinite(bound):
        return False, 0.0, 0.0, 0.0, 0.0
    f1 = (a, b, b2, e)
    f2 = (p, r, r2, t)
    for m in range(4):
        for l in range(4):
            # row (ia, ib) = divmod(m, 2), column (ja, jb) = divmod(l, 2)
            q[m, l] = f1[2 * (m // 2) + l // 2] * f2[2 * (m % 2) + l % 2]
    if clip:
        _clip_kron(q, a, 0.5 * (b + b2), e, p, 0.5 * (r + r2), t)
    for m in range(4):
        q[m, m] += theta
    return True, s2 * m11, s2 * m12, s2 * m21, s2 * m22


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
def _apply(x, y, c, s, f, i, j, z, w, has_d, v11, v12, v21, v22, dz, yold):
    """``X[B] = V Z`` with Y and f updated; returns ``(status, f)``."""
    n, k = x.shape
    total = 0.0
    for col in range(k):
        z0, z1 = z[0, col], z[1, col]
        d0 = (v11 * z0 + v12 * z1) - z0
        d1 = (v21 * z0 + v22 * z1) - z1
        dz[0, col], dz[1, col] = d0, d1
        total += d0 + d1
    if not math.isfinite(total):
        return NONFINITE_UPDATE, f
    for col in range(k):
        yold[0, col] = y[i, col]
        yold[1, col] = y[j, col]
    # Y += C[B]ᵀ Δ: one pass over Y
    for row in range(n):
        ci, cj = c[i, row], c[j, row]
        for col in range(k):
            y[row, col] += ci * dz[0, col] + cj * dz[1, col]
    # f(X + Δ) − f(X) = s⟨Δ D, Y[B] + Y⁺[B]⟩, Δ D = (V − I) W
    acc = 0.0
    if has_d:
        for col in range(k):
            w0, w1 = w[0, col], w[1, col]
            acc += ((v11 - 1.0) * w0 + v12 * w1) * (yold[0, col] + y[i, col])
            acc += (v21 * w0 + (v22 - 1.0) * w1) * (yold[1, col] + y[j, col])
    else:
        for col in range(k):
            acc += dz[0, col] * (yold[0, col] + y[i, col]) + dz[1, col] * (yold[1, col] + y[j, col])
    f_new = f + s * acc
    if not math.isfinite(f_new):
        return NONFINITE_COST, f
    for col in range(k):
        z0, z1 = z[0, col], z[1, col]
        x[i, col] = v11 * z0 + v12 * z1
        x[j, col] = v21 * z0 + v22 * z1
    return OK, f_new


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
        ``(done, f, status)``: steps completed, the cost after them, and :data:`OK` or the
        reason the loop stopped before step ``done``.
    """
    k = x.shape[1]
    has_d = d.shape[0] > 0
    z = np.empty((2, k))
    w = np.empty((2, k))
    zb = np.empty((2, k))
    wb = np.empty((2, k))
    dz = np.empty((2, k))
    yold = np.empty((2, k))
    q = np.empty((4, 4))
    for t in range(steps):
        best = 0.0
        bi = bj = -1
        b11, b12, b21, b22 = 1.0, 0.0, 0.0, 1.0
        for cand in range(candidates):
            idx = start + t * candidates + cand
            i, j = pairs[idx, 0], pairs[idx, 1]
            ok, m11, m12, m21, m22 = _pair_model(x, y, c, d, s, theta, clip, i, j, z, w, q)
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
        status, f = _apply(x, y, c, s, f, bi, bj, zz, ww, has_d, b11, b12, b21, b22, dz, yold)
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
            b11, b12, b21, b22 = form_point(forms, f, C, S)
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
        ``(status, predicted)``: :data:`OK`, or :data:`NONFINITE_CURVATURE` /
        :data:`NONFINITE_UPDATE` (the pairs before it are written: discard ``x``), and the
        summed model change of the pairs (:func:`_scalar_pair`).
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
