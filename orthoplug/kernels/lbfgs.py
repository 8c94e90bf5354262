r"""The host side of a new L-BFGS secant pair, compiled: the pair's products and the middle
matrix ``M`` of the compact representation (:class:`orthoplug.solvers.lbfgs.LBFGSMemory`, whose
docstring states the formulas; this kernel is their only implementation).

The stored products live in buffers indexed by the pair's slot (the memory's window
``[a, a + k)``): ``sy[i, j] = ⟨s_i, y_j⟩`` for ``i ≤ j`` (R, with its strict lower triangle
kept zero), ``yy[b, i, j] = ⟨P_b y_i, P_b y_j⟩`` and ``syd[b, i] = ⟨s_i, P_b y_i⟩``. One call
writes the newest pair's products from its cross products with the window and returns ``M``
(rows and columns as the window's rows ``s_i, P_1 y_i, …, P_B y_i``, pair by pair) and the
ratios ``γ_b``: ``γ_b = Σ_i ⟨s_i, P_b y_i⟩ / Σ_i ‖P_b y_i‖²`` where both sums are positive,
else ``⟨s, y⟩/⟨y, y⟩`` of the newest pair; ``M_SS = R⁻ᵀ(Dg + Σ_b γ_b (P_b Y)(P_b Y)ᵀ)R⁻¹``,
``M_{S,b} = −γ_b R⁻ᵀ``, ``M_{b,S} = −γ_b R⁻¹``, zero between the ``P_b Y`` blocks.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["lbfgs_pair_update"]


@njit(cache=True)
def lbfgs_pair_update(sy: np.ndarray, yy: np.ndarray, syd: np.ndarray, a: int, k: int,
                      cross: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Store the newest pair's products and return ``(M, γ)``.

    Args:
        sy, yy, syd: the product buffers (updated in place), ``(S, S)``, ``(B, S, S)``,
            ``(B, S)`` for ``S`` slots and ``B`` blocks.
        a: slot of the oldest stored pair; the newest is slot ``a + k − 1``.
        k: pairs stored, the newest included.
        cross: ``(k, 1 + B, 1 + B)``: the products of each stored pair's rows
            ``s_j, P_1 y_j, …, P_B y_j`` with the newest pair's rows (oldest pair first).

    Returns:
        ``M`` as a ``(k(1 + B), k(1 + B))`` array and the ``B`` ratios ``γ_b``.
    """
    nb = yy.shape[0]
    w = nb + 1
    i = a + k - 1
    for j in range(k):  # column i of R, the row of the newest pair's ⟨P_b y, P_b y_j⟩
        acc = 0.0
        for b in range(nb):
            acc += cross[j, 0, 1 + b]
            yy[b, a + j, i] = cross[j, 1 + b, 1 + b]
            yy[b, i, a + j] = cross[j, 1 + b, 1 + b]
        sy[a + j, i] = acc
    for j in range(a, i):  # R's strict lower triangle stays zero
        sy[i, j] = 0.0
    for b in range(nb):
        syd[b, i] = cross[k - 1, 0, 1 + b]
    yy_new = 0.0
    for b in range(nb):
        yy_new += yy[b, i, i]
    newest = sy[i, i] / yy_new
    gammas = np.empty(nb)
    for b in range(nb):
        num = 0.0
        den = 0.0
        for j in range(a, a + k):
            num += syd[b, j]
            den += yy[b, j, j]
        gammas[b] = num / den if num > 0.0 and den > 0.0 else newest
    r_inv = np.zeros((k, k))  # R⁻¹ column by column (upper triangular)
    for c in range(k):
        r_inv[c, c] = 1.0 / sy[a + c, a + c]
        for r in range(c):
            acc = 0.0
            for l in range(r, c):
                acc += r_inv[r, l] * sy[a + l, a + c]
            r_inv[r, c] = -acc * r_inv[c, c]
    inner = np.zeros((k, k))  # Dg + Σ_b γ_b (P_b Y)(P_b Y)ᵀ
    for r in range(k):
        for c in range(k):
            acc = 0.0
            for b in range(nb):
                acc += gammas[b] * yy[b, a + r, a + c]
            inner[r, c] = acc
        inner[r, r] += sy[a + r, a + r]
    m_ss = r_inv.T @ (inner @ r_inv)
    mid = np.zeros((k * w, k * w))
    for r in range(k):
        for c in range(k):
            mid[r * w, c * w] = m_ss[r, c]
            for b in range(nb):
                mid[r * w, c * w + 1 + b] = -gammas[b] * r_inv[c, r]
                mid[r * w + 1 + b, c * w] = -gammas[b] * r_inv[r, c]
    return mid, gammas
