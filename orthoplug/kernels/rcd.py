r"""Compiled Givens-rotation rounds of the RCD baseline's linearised sweep.

:class:`~orthoplug.baselines.rcd.RCD` with ``gradient="sweep"`` rotates every row pair once per
sweep against a gradient G evaluated at the sweep's start: for the pair (i, j),
``θ = −η (g_i·x_j − g_j·x_i)`` and ``x_i ← cos θ x_i + sin θ x_j``,
``x_j ← cos θ x_j − sin θ x_i`` (rows of the current X). The pairs of one round are disjoint, so
running them one after the other, as here, gives the round's vectorised update exactly.
Plain function over NumPy arrays compiled with numba (``cache=True``); with
``NUMBA_DISABLE_JIT=1`` the same source runs as Python.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["givens_rounds"]


@njit(cache=True)
def givens_rounds(x: np.ndarray, g: np.ndarray, rounds: np.ndarray, first: int, last: int,
                  step_size: float) -> None:
    """Rotate the rows of ``x`` (n×p, in place) for rounds ``first ≤ r < last``.

    Args:
        x: (n, p) float64 iterate, updated in place.
        g: (n, p) float64 gradient, fixed for the sweep.
        rounds: (R, m, 2) int64 row pairs, disjoint within a round.
        first, last: the rounds to run.
        step_size: η > 0.
    """
    p = x.shape[1]
    for r in range(first, last):
        for q in range(rounds.shape[1]):
            i, j = rounds[r, q, 0], rounds[r, q, 1]
            gx = xg = 0.0
            for col in range(p):
                gx += g[i, col] * x[j, col]
                xg += g[j, col] * x[i, col]
            theta = -step_size * (gx - xg)
            c, s = math.cos(theta), math.sin(theta)
            for col in range(p):
                xi, xj = x[i, col], x[j, col]
                x[i, col] = c * xi + s * xj
                x[j, col] = c * xj - s * xi
