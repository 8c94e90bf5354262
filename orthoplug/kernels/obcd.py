r"""The OBCD sequential ``k = 2`` loop with the exact curvature, on the quadratic tracker's arrays.

For ``f(X) = s tr(X^T C X D)`` (``C`` symmetric) with ``Y = C X`` kept current, one pair step on
rows ``B = (i, j)`` is (see :mod:`orthoplug.solvers.obcd`):

* the model: ``Z = X[B]`` (2 x r), ``M = 2s Y[B] D Z^T``, ``Q = 2s (Z D Z^T) (x) C_BB + alpha I_4``
  (the exact block curvature, any inertia) and ``P = M - mat(Q vec I)``;
* ``V``: the global minimiser over O(2) (:func:`orthoplug.kernels.o2.o2_search`);
* if ``V != I``: the new rows ``U = V Z`` (entries below 1e-14 in modulus set to 0 when ``h != 0``),
  ``Delta = U - Z``, the cost change ``s <Delta, (Y[B] + Y+[B]) D>`` with
  ``Y+[B] = Y[B] + C_BB Delta``, then ONE pass over ``Y`` (``Y[k] += C[i, k] Delta_0 + C[j, k]
  Delta_1``, each entry read and written once; ``C`` symmetric, so its rows ``i, j`` are read) and
  ``X[B] = U``.

Nothing is written when the model, ``U`` or the new cost is not finite: the loop stops and reports
it, so the caller keeps the last finite point.

Pair orders: the caller passes the pairs. With ``ncand = 1`` they are taken in order (random or
cyclic); with ``ncand > 1`` each step reads the next ``ncand`` pairs, solves every candidate's
subproblem and applies the one with the largest predicted decrease ``K(I) - K(V)`` of the model
(Gauss-Southwell type); a step in which no candidate moves leaves ``X`` unchanged.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .o2 import SNAP, o2_search

OK, BAD_MODEL, BAD_UPDATE, BAD_COST = 0, 1, 2, 3
#: what each status means (for the caller's error message)
STATUS = {BAD_MODEL: "non-finite pair model", BAD_UPDATE: "non-finite block update",
          BAD_COST: "non-finite cost"}


@njit(cache=True)
def _model(X, Y, C, D, s, alpha, i, j, Z, P, Q):
    """Fill ``Z``, ``P``, ``Q`` of pair ``(i, j)``; False if they are not finite."""
    r = X.shape[1]
    hasd = D.shape[0] > 0
    for c in range(r):
        Z[0, c] = X[i, c]
        Z[1, c] = X[j, c]
    # W = Y[B] D, then M = 2s W Z^T; ZDZ^T with DZ^T = (Z D)^T
    m00 = m01 = m10 = m11 = 0.0
    z00 = z01 = z11 = 0.0
    for c in range(r):
        if hasd:
            w0 = 0.0
            w1 = 0.0
            d0 = 0.0
            d1 = 0.0
            for k in range(r):
                w0 += Y[i, k] * D[k, c]
                w1 += Y[j, k] * D[k, c]
                d0 += Z[0, k] * D[k, c]
                d1 += Z[1, k] * D[k, c]
        else:
            w0 = Y[i, c]
            w1 = Y[j, c]
            d0 = Z[0, c]
            d1 = Z[1, c]
        m00 += w0 * Z[0, c]
        m01 += w0 * Z[1, c]
        m10 += w1 * Z[0, c]
        m11 += w1 * Z[1, c]
        z00 += d0 * Z[0, c]
        z01 += d0 * Z[1, c]
        z11 += d1 * Z[1, c]
    s2 = 2.0 * s
    a, b, b2, d = s2 * z00, s2 * z01, s2 * z01, s2 * z11
    p, q, q2, rr = C[i, i], C[i, j], C[j, i], C[j, j]
    A = ((a, b), (b2, d))
    CB = ((p, q), (q2, rr))
    for u in range(2):
        for v in range(2):
            for x in range(2):
                for y in range(2):
                    Q[2 * u + x, 2 * v + y] = A[u][v] * CB[x][y]
    for k in range(4):
        Q[k, k] += alpha
    # P = M - mat(Q vec I), vec column-major: vec I = (1, 0, 0, 1)
    P[0, 0] = s2 * m00 - (Q[0, 0] + Q[0, 3])
    P[1, 0] = s2 * m10 - (Q[1, 0] + Q[1, 3])
    P[0, 1] = s2 * m01 - (Q[2, 0] + Q[2, 3])
    P[1, 1] = s2 * m11 - (Q[3, 0] + Q[3, 3])
    tot = P[0, 0] + P[0, 1] + P[1, 0] + P[1, 1]
    for k in range(4):
        for m in range(4):
            tot += Q[k, m]
    return math.isfinite(tot)


@njit(cache=True)
def obcd_pairs(X, Y, C, D, s, alpha, pairs, ncand, snap, th, g, kk, inf, pval, knot, h0,
               shared, continuous, fval):
    """Run ``pairs.shape[0] // ncand`` OBCD pair steps on ``X``, ``Y = C X`` and ``f`` in place.

    Args:
        X, Y: (n, r) float64, C-contiguous, updated in place.
        C: (n, n) symmetric; D: (r, r), or (0, 0) for ``D = I``; s: scale of f; alpha: prox weight.
        pairs: (m, 2) int64 row pairs (distinct rows in each).
        ncand: pairs per step (1: in order; > 1: greedy among each group of ``ncand``).
        snap: set entries of the new rows below :data:`~orthoplug.kernels.o2.SNAP` to 0.
        th, g, kk, inf, pval, knot, h0, shared, continuous: the term's tables
            (:func:`orthoplug.kernels.o2.o2_search`).
        fval: (1,) the current f, updated in place.

    Returns:
        (steps done, status): status 0, or the :data:`STATUS` code of the step that stopped the
        loop (nothing of that step was written).
    """
    n, r = X.shape
    hasd = D.shape[0] > 0
    steps = pairs.shape[0] // ncand
    Z = np.empty((2, r))
    P = np.empty((2, 2))
    Q = np.empty((4, 4))
    V = np.empty((2, 2))
    Vb = np.empty((2, 2))
    U = np.empty((2, r))
    dl = np.empty((2, r))
    yo = np.empty((2, r))
    yn = np.empty((2, r))
    for t in range(steps):
        bi = -1
        bdec = 0.0
        for cnd in range(ncand):
            i = pairs[t * ncand + cnd, 0]
            j = pairs[t * ncand + cnd, 1]
            if not _model(X, Y, C, D, s, alpha, i, j, Z, P, Q):
                return t, BAD_MODEL
            dec = o2_search(P, Z, Q, th, g, kk, inf, pval, knot, h0, shared, continuous, V)
            if dec > bdec:
                bdec = dec
                bi = t * ncand + cnd
                Vb[:, :] = V
        if bi < 0:
            continue  # no candidate moves: V = I
        i = pairs[bi, 0]
        j = pairs[bi, 1]
        if ncand > 1:
            for c in range(r):
                Z[0, c] = X[i, c]
                Z[1, c] = X[j, c]
        tot = 0.0
        for c in range(r):
            u0 = Vb[0, 0] * Z[0, c] + Vb[0, 1] * Z[1, c]
            u1 = Vb[1, 0] * Z[0, c] + Vb[1, 1] * Z[1, c]
            if snap:
                if abs(u0) < SNAP:
                    u0 = 0.0
                if abs(u1) < SNAP:
                    u1 = 0.0
            U[0, c] = u0
            U[1, c] = u1
            dl[0, c] = u0 - Z[0, c]
            dl[1, c] = u1 - Z[1, c]
            tot += u0 + u1
        if not math.isfinite(tot):
            return t, BAD_UPDATE
        # Y+[B] = Y[B] + C_BB Delta (C symmetric: Y += C[B]^T Delta), then the cost change
        cii, cij, cji, cjj = C[i, i], C[i, j], C[j, i], C[j, j]
        for c in range(r):
            yo[0, c] = Y[i, c]
            yo[1, c] = Y[j, c]
            yn[0, c] = Y[i, c] + cii * dl[0, c] + cji * dl[1, c]
            yn[1, c] = Y[j, c] + cij * dl[0, c] + cjj * dl[1, c]
        change = 0.0
        for c in range(r):
            if hasd:
                e0 = 0.0
                e1 = 0.0
                for k in range(r):
                    e0 += (yo[0, k] + yn[0, k]) * D[k, c]
                    e1 += (yo[1, k] + yn[1, k]) * D[k, c]
            else:
                e0 = yo[0, c] + yn[0, c]
                e1 = yo[1, c] + yn[1, c]
            change += dl[0, c] * e0 + dl[1, c] * e1
        value = fval[0] + s * change
        if not math.isfinite(value):
            return t, BAD_COST
        # one pass over Y: each entry read and written once
        d0 = dl[0]
        d1 = dl[1]
        ci = C[i]
        cj = C[j]
        for k in range(n):
            a = ci[k]
            b = cj[k]
            yk = Y[k]
            for c in range(r):
                yk[c] += a * d0[c] + b * d1[c]
        for c in range(r):
            X[i, c] = U[0, c]
            X[j, c] = U[1, c]
        fval[0] = value
    return steps, OK


@njit(cache=True)
def column_pairs(X, Y, pairs, th, g, kk, inf, pval, knot, h0, shared, continuous):
    """Exact column-pair rotations ``X[:, (a, b)] <- X[:, (a, b)] V^T`` minimising ``h``, in place.

    For each pair ``(a, b)`` of ``pairs`` in order, ``V`` is the global minimiser over O(2) of
    ``h(V W)``, ``W = X[:, (a, b)]^T`` (:func:`orthoplug.kernels.o2.o2_search` with ``P = 0``,
    ``Q = 0``; ``V = I`` on ties), and the new columns' entries below
    :data:`~orthoplug.kernels.o2.SNAP` in modulus are set to 0. ``XX^T`` is unchanged, so is
    ``f = s tr(X^T C X)``; ``Y = C X`` (skipped when ``Y`` has no rows) gets the same rotation.

    Args:
        X: (n, r) float64, C-contiguous; Y: (n, r) or (0, r).
        pairs: (m, 2) int64 column pairs (distinct columns in each).
        th, g, kk, inf, pval, knot, h0, shared, continuous: the term's tables.

    Returns:
        The total decrease of ``h`` predicted by the searches (``>= 0``; ``inf`` if ``h`` was
        infinite before a move).
    """
    n = X.shape[0]
    W = np.empty((2, n))
    P = np.zeros((2, 2))
    Q = np.zeros((4, 4))
    V = np.empty((2, 2))
    total = 0.0
    for t in range(pairs.shape[0]):
        a = pairs[t, 0]
        b = pairs[t, 1]
        for i in range(n):
            W[0, i] = X[i, a]
            W[1, i] = X[i, b]
        dec = o2_search(P, W, Q, th, g, kk, inf, pval, knot, h0, shared, continuous, V)
        if dec <= 0.0:
            continue
        total += dec
        for i in range(n):
            u0 = V[0, 0] * W[0, i] + V[0, 1] * W[1, i]
            u1 = V[1, 0] * W[0, i] + V[1, 1] * W[1, i]
            X[i, a] = 0.0 if abs(u0) < SNAP else u0
            X[i, b] = 0.0 if abs(u1) < SNAP else u1
        if Y.shape[0] > 0:
            for i in range(n):
                y0 = Y[i, a]
                y1 = Y[i, b]
                Y[i, a] = V[0, 0] * y0 + V[0, 1] * y1
                Y[i, b] = V[1, 0] * y0 + V[1, 1] * y1
    return total
