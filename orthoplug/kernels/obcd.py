r"""The OBCD sequential ``k = 2`` loop with the exact curvature, on the quadratic tracker's arrays.

For ``f(X) = s tr(X^T C X D)`` (``C`` symmetric) with ``Y = C X`` kept current, one pair step on
rows ``B = (i, j)`` is (see :mod:`orthoplug.solvers.obcd`):

* the model ``(M, Q = Q̲ + alpha I_4)`` (:func:`~orthoplug.kernels.quadratic.pair_model`: the exact
  block curvature, any inertia) and ``P = M - mat(Q vec I)``;
* ``V``: the global minimiser over O(2) (:func:`orthoplug.kernels.o2.o2_search`);
* if ``V != I``: the new rows ``U = V Z`` (entries below 1e-14 in modulus set to 0 when ``h != 0``)
  and the update of ``X``, ``Y`` and ``f`` (:func:`~orthoplug.kernels.quadratic.update_rows`).

Nothing is written when the model, ``U`` or the new cost is not finite: the loop stops and reports
it (:mod:`~orthoplug.kernels.quadratic`'s status vocabulary), so the caller keeps the last finite
point.

Pair orders: the caller passes the pairs. With ``ncand = 1`` they are taken in order (random or
cyclic); with ``ncand > 1`` each step reads the next ``ncand`` pairs, solves every candidate's
subproblem and applies the one with the largest predicted decrease ``K(I) - K(V)`` of the model
(Gauss-Southwell type); a step in which no candidate moves leaves ``X`` unchanged.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from . import quadratic
from .o2 import SNAP, o2_search
from .quadratic import pair_model, rotate_pair, update_rows


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
        (steps done, status): :data:`~orthoplug.kernels.quadratic.OK`, or the status of the step
        that stopped the loop (nothing of that step was written).
    """
    r = X.shape[1]
    hasd = D.shape[0] > 0
    steps = pairs.shape[0] // ncand
    Z = np.empty((2, r))
    W = np.empty((2, r))
    P = np.empty((2, 2))
    Q = np.empty((4, 4))
    V = np.empty((2, 2))
    Vb = np.empty((2, 2))
    U = np.empty((2, r))
    dl = np.empty((2, r))
    dd = np.empty((2, r)) if hasd else dl
    cut = SNAP if snap else 0.0
    for t in range(steps):
        bi = -1
        bdec = 0.0
        for cnd in range(ncand):
            i = pairs[t * ncand + cnd, 0]
            j = pairs[t * ncand + cnd, 1]
            ok, m11, m12, m21, m22 = pair_model(X, Y, C, D, s, alpha, False, i, j, Z, W, Q)
            if not ok:
                return t, quadratic.NONFINITE_CURVATURE
            # P = M - mat(Q vec I), vec column-major: vec I = (1, 0, 0, 1)
            P[0, 0] = m11 - (Q[0, 0] + Q[0, 3])
            P[1, 0] = m21 - (Q[1, 0] + Q[1, 3])
            P[0, 1] = m12 - (Q[2, 0] + Q[2, 3])
            P[1, 1] = m22 - (Q[3, 0] + Q[3, 3])
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
        if not rotate_pair(Z, Vb[0, 0], Vb[0, 1], Vb[1, 0], Vb[1, 1], cut, U, dl):
            return t, quadratic.NONFINITE_UPDATE
        if hasd:
            for c in range(r):
                e0 = 0.0
                e1 = 0.0
                for k in range(r):
                    e0 += dl[0, k] * D[k, c]
                    e1 += dl[1, k] * D[k, c]
                dd[0, c] = e0
                dd[1, c] = e1
        status, value = update_rows(X, Y, C, s, fval[0], i, j, U, dl, dd)
        if status != quadratic.OK:
            return t, status
        fval[0] = value
    return steps, quadratic.OK


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


# ---- row partitions of {X >= 0, X^T X = I} (SparseOBCD's partition search) --------------------
# X (n, r) nonnegative with orthonormal columns has disjoint column supports; A = -s C (the form
# tr(X^T A X) is maximised), G = A X kept current. own[i]: the column holding row i (-1: none),
# cnt[b]: rows in column b, q[b] = x_b^T A x_b.


@njit(cache=True)
def _partition_state(X, G, own, cnt, q):
    """Fill ``own``, ``cnt`` and ``q`` from ``X`` and ``G``."""
    n, r = X.shape
    for b in range(r):
        cnt[b] = 0
        q[b] = 0.0
    for i in range(n):
        own[i] = -1
        for b in range(r):
            if X[i, b] > 0.0:
                own[i] = b
                q[b] += X[i, b] * G[i, b]
        if own[i] >= 0:
            cnt[own[i]] += 1


@njit(cache=True)
def _join_form(qb, gib, aii):
    """The best form of ``alpha x_b + beta e_i`` (alpha, beta >= 0, unit): the top eigenvalue of
    ``[[qb, gib], [gib, aii]]`` when ``gib > 0``, else the better end of the quarter circle."""
    if gib > 0.0:
        half = 0.5 * (qb + aii)
        return half + math.sqrt(max(half * half - qb * aii + gib * gib, 0.0))
    return max(qb, aii)


@njit(cache=True)
def _leave_loss(X, diag, G, own, cnt, q, i):
    """What column ``own[i]`` loses when row ``i`` leaves it (the rest renormalised; see
    :func:`orthoplug.solvers.row_partition.row_move_gains`): 0 for a row outside every support,
    ``inf`` where not allowed (the column's only row, or all but 1e-8 of its mass)."""
    a = own[i]
    if a < 0:
        return 0.0
    xi = X[i, a]
    if cnt[a] <= 1 or 1.0 - xi * xi <= 1e-8:
        return np.inf
    return q[a] - (q[a] - 2.0 * xi * G[i, a] + xi * xi * diag[i]) / (1.0 - xi * xi)


@njit(cache=True)
def _support_form(x, g):
    """``Σ x_k g_k`` over ``x_k > 0``, in the order :func:`_partition_state` sums a column's
    ``q``."""
    total = 0.0
    for k in range(x.shape[0]):
        if x[k] > 0.0:
            total += x[k] * g[k]
    return total


@njit(cache=True)
def _row_joins(G, diag, q, i, out):
    """``out[i, b]``: what joining column ``b`` adds to its form, ``join − q[b]``
    (:func:`_join_form`; ``diag``: the diagonal of A), for every column, its own included."""
    for b in range(G.shape[1]):
        out[i, b] = _join_form(q[b], G[i, b], diag[i]) - q[b]


@njit(cache=True)
def _row_best(joins, loss, own, i, best, col):
    """``best[i]``, ``col[i]``: the largest gain ``joins[i, b] − loss[i]`` of row ``i`` over the
    columns it may join (not its own; none if it may not leave) and its first column (-1:
    none)."""
    top = -np.inf
    at = -1
    if loss[i] != np.inf:
        for b in range(joins.shape[1]):
            if b != own[i]:
                gain = joins[i, b] - loss[i]
                if gain > top:
                    top = gain
                    at = b
    best[i] = top
    col[i] = at


@njit(cache=True)
def move_gains(X, A, G, out):
    """``out[i, b]``: the gain of every single-row move (``-inf`` where not allowed)."""
    n, r = X.shape
    own = np.empty(n, np.int64)
    cnt = np.empty(r, np.int64)
    q = np.empty(r)
    _partition_state(X, G, own, cnt, q)
    diag = np.diag(A).copy()
    for i in range(n):
        _row_joins(G, diag, q, i, out)
        loss = _leave_loss(X, diag, G, own, cnt, q, i)
        for b in range(r):
            out[i, b] = -np.inf if b == own[i] or loss == np.inf else out[i, b] - loss


@njit(cache=True)
def partition_row_moves(X, A, G, max_moves, rtol):
    """Up to ``max_moves`` best single-row moves, in place on ``X`` and ``G``.

    Each step applies the move of largest gain (:func:`move_gains`; the first in row-major
    order on ties) if it exceeds ``rtol`` times the total form: row i leaves its column a
    (``x_a <- (x_a - x_ia e_i)/sqrt(1 - x_ia^2)``) and joins column b with the best nonnegative
    weight (``x_b <- alpha x_b + beta e_i``, the top eigenvector of the 2 x 2 form); ``G`` is
    updated in the two columns (``A`` symmetric: its row i is read). A move whose recomputed
    gain is not positive (rounding) is undone and ends the call. Returns the number of moves.

    A gain is a join term less a leave loss; both are kept between moves. A move changes
    columns a and b only: every row's join terms into a and b (2n square roots) and the leave
    losses of the rows of a and b, each row's best move rescanned where it may have changed.
    The gains are the same expressions on the same values as a fresh :func:`move_gains`, so
    the moves are the same, bit for bit, at ``O(n + (|a| + |b|) r)`` per move instead of ``O(n r)``
    square roots. A move works on contiguous copies of its two columns.
    """
    n, r = X.shape
    own = np.empty(n, np.int64)
    cnt = np.empty(r, np.int64)
    q = np.empty(r)
    xa, ga, xb, gb = np.zeros(n), np.zeros(n), np.empty(n), np.empty(n)
    joins = np.empty((n, r))
    loss = np.empty(n)
    best = np.empty(n)
    col = np.empty(n, np.int64)
    diag = np.diag(A).copy()  # read once per row and move: A's diagonal is n cache lines apart
    _partition_state(X, G, own, cnt, q)
    for i in range(n):
        _row_joins(G, diag, q, i, joins)
        loss[i] = _leave_loss(X, diag, G, own, cnt, q, i)
        _row_best(joins, loss, own, i, best, col)
    moves = 0
    while moves < max_moves:
        total = 0.0
        for b in range(r):
            total += q[b]
        top = -np.inf
        bi = -1
        for i in range(n):
            if best[i] > top:
                top = best[i]
                bi = i
        if not top > rtol * abs(total):
            break
        bb = col[bi]
        a = own[bi]
        before = q[bb] + (q[a] if a >= 0 else 0.0)
        for k in range(n):
            xb[k] = X[k, bb]
            gb[k] = G[k, bb]
        if a >= 0:
            for k in range(n):
                xa[k] = X[k, a]
                ga[k] = G[k, a]
            xi = xa[bi]
            rest = math.sqrt(max(1.0 - xi * xi, 0.0))
            xa[bi] = 0.0
            for k in range(n):
                ga[k] = (ga[k] - xi * A[bi, k]) / rest
                xa[k] /= rest
        qb = 0.0
        for k in range(n):
            qb += xb[k] * gb[k]
        gib = gb[bi]
        aii = diag[bi]
        if gib > 0.0:  # the top eigenvector (gib, top - qb), nonnegative
            al = gib
            be = _join_form(qb, gib, aii) - qb
            nrm = math.sqrt(al * al + be * be)
            al /= nrm
            be /= nrm
        elif aii > qb:
            al, be = 0.0, 1.0
        else:
            al, be = 1.0, 0.0
        for k in range(n):
            xb[k] *= al
            gb[k] = al * gb[k] + be * A[bi, k]
        xb[bi] = be
        after = 0.0
        for k in range(n):
            after += xb[k] * gb[k]
            if a >= 0:
                after += xa[k] * ga[k]
        if not after > before:  # rounding: X and G were not written; stop
            break
        moves += 1
        for k in range(n):
            X[k, bb] = xb[k]
            G[k, bb] = gb[k]
        q[bb] = _support_form(xb, gb)
        if a >= 0:
            for k in range(n):
                X[k, a] = xa[k]
                G[k, a] = ga[k]
            q[a] = _support_form(xa, ga)
        # the state after the move, as _partition_state would find it: the rows of columns a
        # and b (and row i) may have changed column, and their leave losses changed
        for k in range(n):
            if k == bi or own[k] == bb or (a >= 0 and own[k] == a):
                own[k] = -1
                for b in range(r):
                    if X[k, b] > 0.0:
                        own[k] = b
                col[k] = -2  # a marker: its leave loss and best move are recomputed below
        for b in range(r):
            cnt[b] = 0
        for k in range(n):
            if own[k] >= 0:
                cnt[own[k]] += 1
        for k in range(n):
            joins[k, bb] = _join_form(q[bb], gb[k], diag[k]) - q[bb]
            if a >= 0:
                joins[k, a] = _join_form(q[a], ga[k], diag[k]) - q[a]
            if col[k] == -2:
                loss[k] = _leave_loss(X, diag, G, own, cnt, q, k)
                _row_best(joins, loss, own, k, best, col)
            elif loss[k] != np.inf and (
                    col[k] == bb or joins[k, bb] - loss[k] >= best[k]
                    or (a >= 0 and (col[k] == a or joins[k, a] - loss[k] >= best[k]))):
                _row_best(joins, loss, own, k, best, col)
    return moves


@njit(cache=True)
def partition_polish(X, A, G, steps):
    """Up to ``steps`` restricted power steps per column, in place: ``x_b <- (A x_b)^+ / ||.||``
    on the support of ``x_b``, kept only if ``x_b^T A x_b`` does not decrease (for a PSD ``A``
    it never does); stops early once no column's form grows by more than 1e-14 relative.
    Cost per step ``O(n * nnz(X))``."""
    n, r = X.shape
    y = np.empty(n)
    gy = np.empty(n)
    for _ in range(steps):
        grew = False
        for b in range(r):
            nrm = 0.0
            for k in range(n):
                v = G[k, b] if X[k, b] > 0.0 and G[k, b] > 0.0 else 0.0
                y[k] = v
                nrm += v * v
            if nrm <= 0.0:
                continue
            nrm = math.sqrt(nrm)
            for k in range(n):
                y[k] /= nrm
                gy[k] = 0.0
            for i in range(n):
                yi = y[i]
                if yi != 0.0:
                    for k in range(n):
                        gy[k] += A[i, k] * yi
            new = 0.0
            cur = 0.0
            for k in range(n):
                new += y[k] * gy[k]
                cur += X[k, b] * G[k, b]
            if new >= cur:
                grew = grew or new > cur + 1e-14 * abs(cur)
                for k in range(n):
                    X[k, b] = y[k]
                    G[k, b] = gy[k]
        if not grew:
            break
