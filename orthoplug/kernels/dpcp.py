r"""Compiled column-block pass of the DPCP objectives (RSSM's partial subgradients).

DPCP on data ``Y = [y_1 … y_m]`` (n × m) over St(n, p) caches ``Z = YᵀX`` (m × p). An RSSM step
writes new columns ``X_A`` (the previous block) and then needs the partial subgradient of the
next block B at the new point. :func:`dpcp_block_pass` does both in one pass over the data, one
point ``y_j`` at a time (four at a time in the inner loops):

1. ``z_{j,A} ← y_jᵀ X_A`` (the cache update);
2. the weights ``w_{j,B}`` at the new point: ``z_{j,B}/‖z_j‖₂`` for ``f = (1/m) Σ_j ‖z_j‖₂``
   (zero rows give 0), ``sign(z_{j,B})`` for ``f = (1/m) ‖Z‖₁``, and the value's term;
3. ``G_B += y_j w_{j,B}ᵀ / m``.

So the two products with the data (``n m |A|`` and ``n m |B|`` multiply-adds) read each
``y_j`` once, and no ``m × |B|`` weight matrix is formed. Plain function over NumPy arrays
compiled with numba (``cache=True``, ``fastmath``: the dot products are reassociated, so results
agree with the torch path to rounding); with ``NUMBA_DISABLE_JIT=1`` the same source runs as
Python.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["dpcp_block_pass"]


@njit(cache=True, fastmath=True)
def _dot(u: np.ndarray, v: np.ndarray) -> float:
    """``u · v`` (a plain loop)."""
    s = 0.0
    for i in range(u.shape[0]):
        s += u[i] * v[i]
    return s


@njit(cache=True, fastmath=True)
def _refresh4(yt: np.ndarray, z: np.ndarray, xct: np.ndarray, cols: np.ndarray,
              j: int) -> None:
    """``z[j + t, cols[a]] = yt[j + t] · xct[a]`` for ``t < 4``, two columns at a time."""
    n = yt.shape[1]
    y0, y1, y2, y3 = yt[j], yt[j + 1], yt[j + 2], yt[j + 3]
    a = 0
    while a < cols.shape[0]:
        two = a + 1 < cols.shape[0]
        xa = xct[a]
        xb = xct[a + 1] if two else xct[a]
        s0 = s1 = s2 = s3 = r0 = r1 = r2 = r3 = 0.0
        for i in range(n):
            u, v = xa[i], xb[i]
            s0 += y0[i] * u
            s1 += y1[i] * u
            s2 += y2[i] * u
            s3 += y3[i] * u
            r0 += y0[i] * v
            r1 += y1[i] * v
            r2 += y2[i] * v
            r3 += y3[i] * v
        ca = cols[a]
        z[j, ca], z[j + 1, ca], z[j + 2, ca], z[j + 3, ca] = s0, s1, s2, s3
        if two:
            cb = cols[a + 1]
            z[j, cb], z[j + 1, cb], z[j + 2, cb], z[j + 3, cb] = r0, r1, r2, r3
        a += 2


@njit(cache=True, fastmath=True)
def _accumulate4(yt: np.ndarray, g: np.ndarray, w: np.ndarray, j: int) -> None:
    """``g[b] += Σ_{t<4} w[b, t] yt[j + t]``, two rows of g at a time."""
    n = yt.shape[1]
    y0, y1, y2, y3 = yt[j], yt[j + 1], yt[j + 2], yt[j + 3]
    b = 0
    while b < g.shape[0]:
        two = b + 1 < g.shape[0]
        ga = g[b]
        gb = g[b + 1] if two else g[b]
        a0, a1, a2, a3 = w[b, 0], w[b, 1], w[b, 2], w[b, 3]
        if two:
            b0, b1, b2, b3 = w[b + 1, 0], w[b + 1, 1], w[b + 1, 2], w[b + 1, 3]
            for i in range(n):
                u0, u1, u2, u3 = y0[i], y1[i], y2[i], y3[i]
                ga[i] += a0 * u0 + a1 * u1 + a2 * u2 + a3 * u3
                gb[i] += b0 * u0 + b1 * u1 + b2 * u2 + b3 * u3
        else:
            for i in range(n):
                ga[i] += a0 * y0[i] + a1 * y1[i] + a2 * y2[i] + a3 * y3[i]
        b += 2


@njit(cache=True, fastmath=True)
def dpcp_block_pass(yt: np.ndarray, z: np.ndarray, xct: np.ndarray, cols_old: np.ndarray,
                    cols_new: np.ndarray, g: np.ndarray, row_norms: bool) -> float:
    """Refresh ``Z[:, cols_old]``, then the value and the columns ``cols_new`` of the subgradient.

    Args:
        yt: (m, n) float64 ``Yᵀ`` (C order: point ``y_j`` is row j).
        z: (m, p) float64 ``Z = YᵀX`` (C order), columns ``cols_old`` stale; updated in place.
        xct: (``len(cols_old)``, n) float64 new columns ``X[:, cols_old]ᵀ`` (C order).
        cols_old: int64 indices of the columns to refresh (may be empty).
        cols_new: int64 indices of the subgradient columns wanted (may be empty).
        g: (``len(cols_new)``, n) float64 output, ``G[:, cols_new]ᵀ``; overwritten.
        row_norms: True for ``f = (1/m) Σ_j ‖z_j‖₂`` (weights ``z_j/‖z_j‖``), False for
            ``f = (1/m) ‖Z‖₁`` (weights ``sign(z_j)``).

    Returns:
        ``f(X)`` at the refreshed ``Z``.
    """
    m = yt.shape[0]
    p = z.shape[1]
    nnew = cols_new.shape[0]
    g[:, :] = 0.0
    w = np.zeros((nnew, 4))
    total = 0.0
    scale = 1.0 / m
    for j in range(0, m, 4):
        rows = min(4, m - j)
        if rows == 4:
            _refresh4(yt, z, xct, cols_old, j)
        else:
            for t in range(rows):
                for a in range(cols_old.shape[0]):
                    z[j + t, cols_old[a]] = _dot(yt[j + t], xct[a])
        for t in range(rows):
            zj = z[j + t]
            if row_norms:
                sq = 0.0
                for c in range(p):
                    sq += zj[c] * zj[c]
                norm = math.sqrt(sq)
                total += norm
                inv = scale / norm if norm > 0 else 0.0
                for b in range(nnew):
                    w[b, t] = zj[cols_new[b]] * inv
            else:
                for c in range(p):
                    total += abs(zj[c])
                for b in range(nnew):
                    w[b, t] = scale * np.sign(zj[cols_new[b]])
        if rows == 4:
            _accumulate4(yt, g, w, j)
        else:
            for t in range(rows):
                yj = yt[j + t]
                for b in range(nnew):
                    wb = w[b, t]
                    for i in range(yj.shape[0]):
                        g[b, i] += wb * yj[i]
    return total * scale
