r"""Compiled sweep of J-JOBCD's second-order column model over square O(J).

The model (:class:`~orthoplug.solvers.jjacobi.ColumnModel`) of ``V ↦ f(X V)`` near ``V = I`` is

    m(V) = ⟨M, W⟩ + ½ tr(Wᵀ S W),   W = V − I,

with ``M = Xᵀ∇f(X)`` and symmetric ``S``. :func:`model_sweep` takes the pairs of a list of rounds
in order; each pair B = (i, j) minimises the model exactly over ``V_B ∈ O(J_BB)`` (the one-pair
kernel :func:`~orthoplug.kernels.jorth2.solve_jorth2` with the 4×4 curvature
``I₂ ⊗ (S_BB)₊ + θ I₄``), then the model is moved to the new point in O(n):
``M ← V_Bᵀ(M + S W_B)``, ``S ← V_Bᵀ S V_B`` (only rows and columns i, j change), and the
accumulated step ``V ← V V_B``. Pairs of one round are disjoint, so taking them one after the
other is the same as the round's block-diagonal step.

A same-sign pair whose model is constant on O(2) (``‖M_BB − S_BB‖_F ≤ flat·‖S_BB‖_F``: on O(2)
the model is ``⟨M_BB − S_BB, V_B − I⟩``) takes the classical Jacobi rotation (``|φ| ≤ π/4``) that
diagonalises ``S_BB``: a gauge choice that costs nothing in the model and makes the sweeps
converge quadratically on ``f = tr(XᵀCX)``.

Plain functions over floats and NumPy arrays compiled with numba (``cache=True``); with
``NUMBA_DISABLE_JIT=1`` the same source runs as Python.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .jorth2 import SOLVED, solve_jorth2

__all__ = ["model_sweep", "psd2"]


@njit(cache=True)
def psd2(a: float, b: float, c: float) -> tuple[float, float, float]:
    """The PSD part of the symmetric 2×2 ``[[a, b], [b, c]]`` as ``(a', b', c')``: unchanged
    when both eigenvalues are ≥ 0, zero when none is, else
    ``λ_max u uᵀ = λ_max (A − λ_min I) / (λ_max − λ_min)``."""
    mid = 0.5 * (a + c)
    rad = math.hypot(0.5 * (a - c), b)
    lo, hi = mid - rad, mid + rad
    if lo >= 0.0:
        return a, b, c
    if hi <= 0.0:
        return 0.0, 0.0, 0.0
    f = hi / (2.0 * rad)
    return (a - lo) * f, b * f, (c - lo) * f


@njit(cache=True)
def _rotate_rows(a: np.ndarray, i: int, j: int, v11: float, v12: float, v21: float,
                 v22: float) -> None:
    """``A[(i, j), :] ← V_Bᵀ A[(i, j), :]`` in place; on ``Aᵀ`` it is
    ``A[:, (i, j)] ← A[:, (i, j)] V_B``."""
    for t in range(a.shape[1]):
        ai, aj = a[i, t], a[j, t]
        a[i, t] = v11 * ai + v21 * aj
        a[j, t] = v12 * ai + v22 * aj


@njit(cache=True)
def model_sweep(m: np.ndarray, s: np.ndarray, v: np.ndarray, jv: np.ndarray, rounds: np.ndarray,
                theta: float, flat: float) -> tuple[float, int]:
    """One pass over ``rounds`` (R, K, 2) of disjoint pairs on the model ``(m, s)``.

    Args:
        m: M (n×n float64), moved to the new point in place.
        s: S (n×n float64, symmetric), moved in place.
        v: the accumulated step (n×n float64; the caller starts it at I), updated in place.
        jv: the signature (length n, ±1).
        rounds: the pairs, taken in order.
        theta: damping θ > 0 added to each pair's curvature.
        flat: relative threshold of a constant same-sign model (see the module docstring).

    Returns:
        The model's predicted change ``Σ_B ⟨M_BB, W_B⟩ + ½ tr(W_Bᵀ((S_BB)₊ + θI)W_B)`` (each pair
        on the model moved by the pairs before it), and the number of pairs left at ``V_B = I``
        because the one-pair kernel could not solve them (``w± ≤ 0`` after rounding).
    """
    q = np.zeros((4, 4))
    predicted = 0.0
    skipped = 0
    for r in range(rounds.shape[0]):
        for k in range(rounds.shape[1]):
            i, j = rounds[r, k, 0], rounds[r, k, 1]
            m11, m12, m21, m22 = m[i, i], m[i, j], m[j, i], m[j, j]
            a, b, c = s[i, i], 0.5 * (s[i, j] + s[j, i]), s[j, j]
            off = math.sqrt((m11 - a) ** 2 + (m12 - b) ** 2 + (m21 - b) ** 2 + (m22 - c) ** 2)
            pa, pb, pc = psd2(a, b, c)
            if jv[i] == jv[j] and off <= flat * math.sqrt(a * a + 2 * b * b + c * c):
                d = a - c
                phi = 0.5 * math.atan2(2.0 * b * (-1.0 if d < 0 else 1.0), abs(d))
                v11, v12, v21, v22 = math.cos(phi), -math.sin(phi), math.sin(phi), math.cos(phi)
            else:
                q[:] = 0.0
                q[0, 0] = q[2, 2] = pa + theta
                q[0, 1] = q[1, 0] = q[2, 3] = q[3, 2] = pb
                q[1, 1] = q[3, 3] = pc + theta
                # P = M − mat(q vec I): q vec I = (pa + θ, pb, pb, pc + θ) (column-major)
                status, v11, v12, v21, v22 = solve_jorth2(
                    jv[i], jv[j], m11 - pa - theta, m12 - pb, m21 - pb, m22 - pc - theta, q)
                if status != SOLVED:
                    skipped += 1
                    continue
            w11, w12, w21, w22 = v11 - 1.0, v12, v21, v22 - 1.0
            if w11 == 0.0 and w12 == 0.0 and w21 == 0.0 and w22 == 0.0:
                continue
            predicted += (m11 * w11 + m12 * w12 + m21 * w21 + m22 * w22
                          + 0.5 * ((pa + theta) * (w11 * w11 + w12 * w12)
                                   + 2.0 * pb * (w11 * w21 + w12 * w22)
                                   + (pc + theta) * (w21 * w21 + w22 * w22)))
            for t in range(m.shape[0]):  # M ← M + S W_B (columns i, j), with the old S
                si, sj = s[t, i], s[t, j]
                m[t, i] += si * w11 + sj * w21
                m[t, j] += si * w12 + sj * w22
            _rotate_rows(m, i, j, v11, v12, v21, v22)
            _rotate_rows(s.T, i, j, v11, v12, v21, v22)
            _rotate_rows(s, i, j, v11, v12, v21, v22)
            _rotate_rows(v.T, i, j, v11, v12, v21, v22)
    return predicted, skipped
