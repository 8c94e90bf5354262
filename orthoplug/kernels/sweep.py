r"""Compiled Gauss–Seidel sweep of scalar-majoriser pair steps on one stale gradient.

J-JOBCD with several matchings per gradient (``matchings > 1``,
:func:`orthoplug.solvers.jobcd.jacobi_step`) applies the pairs of each matrix one after the
other, every pair minimising the model of ``f`` linearised at the point ``X₀`` where the gradient
``G = ∇f(X₀)`` was taken:

    ⟨G, X⁺ − X₀⟩ + Σ_t σ‖Z_t‖₂²/2 ‖W_t‖²_F,   W_t = V_t − I,  Z_t = X_t[B_t] (the rows when
    pair t is solved),

so pair ``B = (i, j)`` sees ``M = G[B] Z_tᵀ`` (the current rows, the stale gradient rows), the
scalar curvature ``s = σ‖Z_t‖₂² + θ`` and is solved exactly
(:func:`~orthoplug.kernels.jorth2.solve_jorth2` with ``q = s I₄``). The predicted change is the
sum of the pairs' ``⟨W_t, M_t⟩ + σ‖Z_t‖₂²/2 ‖W_t‖²`` (each ≤ 0). Since the rows of one matching are
disjoint, ``‖X⁺ − X₀‖²_F ≤ R Σ_t ‖Z_t‖₂² ‖W_t‖²`` for R matchings, so the predicted change bounds
``f(X⁺) − f(X₀)`` once σ ≥ R·L_f; the solver checks every such step against the true cost instead
(σ adaptive), which keeps it monotone.

A pair whose scalar 2×2 problem is too badly rounded for the compiled solver
(:data:`~orthoplug.kernels.jorth2.NEEDS_BATCHED`) is left unchanged (``V = I``: no change, no
predicted decrease). A non-finite curvature or new row stops the sweep before that pair is
written; the status says which.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .jorth2 import NEEDS_BATCHED, solve_jorth2

__all__ = ["linear_sweep", "OK", "NONFINITE_CURVATURE", "NONFINITE_UPDATE"]

#: every pair was processed
OK = 0
#: the scalar curvature of the next pair is not finite (nothing of it written)
NONFINITE_CURVATURE = 1
#: the next pair's new rows are not finite (nothing of it written)
NONFINITE_UPDATE = 2


@njit(cache=True)
def linear_sweep(x: np.ndarray, g: np.ndarray, jvec: np.ndarray, pairs: np.ndarray,
                 sigma: float, theta: float) -> tuple[int, float]:
    """Pair steps in the given order on every matrix, in place (see the module docstring).

    Args:
        x: the matrices (nb, n, k), float64, C-contiguous; rows of each are updated in place.
        g: the stale gradient (nb, n, k), float64.
        jvec: signature of the rows (n,), ±1.0.
        pairs: (nb, P, 2) int64 row pairs of each matrix, processed in this order.
        sigma: σ of the scalar curvature ``σ‖Z‖₂² I``.
        theta: proximal weight θ (added to the curvature of the solve, not to the prediction).

    Returns:
        ``(status, predicted)``: :data:`OK` or the error status, and the summed model change of
        the pairs taken (≤ 0).
    """
    nb, n, k = x.shape
    q = np.zeros((4, 4))
    predicted = 0.0
    for b in range(nb):
        for t in range(pairs.shape[1]):
            i, j = pairs[b, t, 0], pairs[b, t, 1]
            m11 = m12 = m21 = m22 = 0.0
            aa = ab = cc = 0.0
            for col in range(k):
                xi, xj, gi, gj = x[b, i, col], x[b, j, col], g[b, i, col], g[b, j, col]
                m11 += gi * xi
                m12 += gi * xj
                m21 += gj * xi
                m22 += gj * xj
                aa += xi * xi
                ab += xi * xj
                cc += xj * xj
            nz = 0.5 * (aa + cc) + math.sqrt((0.5 * (aa - cc)) ** 2 + ab * ab)
            curv = sigma * nz
            s = curv + theta
            if not math.isfinite(s):
                return NONFINITE_CURVATURE, predicted
            for r in range(4):
                q[r, r] = s
            status, v11, v12, v21, v22 = solve_jorth2(jvec[i], jvec[j], m11 - s, m12, m21,
                                                      m22 - s, q)
            if status == NEEDS_BATCHED or (v11 == 1.0 and v12 == 0.0 and v21 == 0.0
                                           and v22 == 1.0):
                continue
            finite = True
            for col in range(k):
                xi, xj = x[b, i, col], x[b, j, col]
                if not (math.isfinite(v11 * xi + v12 * xj) and math.isfinite(v21 * xi + v22 * xj)):
                    finite = False
                    break
            if not finite:
                return NONFINITE_UPDATE, predicted
            for col in range(k):
                xi, xj = x[b, i, col], x[b, j, col]
                x[b, i, col] = v11 * xi + v12 * xj
                x[b, j, col] = v21 * xi + v22 * xj
            w11, w12, w21, w22 = v11 - 1.0, v12, v21, v22 - 1.0
            predicted += (w11 * m11 + w12 * m12 + w21 * m21 + w22 * m22
                          + 0.5 * curv * (w11 * w11 + w12 * w12 + w21 * w21 + w22 * w22))
    return OK, predicted
