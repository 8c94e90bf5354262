r"""Column (right-action) hyperbolic J-Jacobi rotations for ``f = s·tr(XᵀCX)`` over square O(J).

A column step ``X ← X V̂`` with ``V̂ = I`` except ``V̂_BB = V ∈ O(J_BB)`` on a column pair
``B = (i, j)`` keeps ``XᵀJX = J`` (``V̂ᵀ J V̂ = J``). With ``A = XᵀCX`` the cost becomes
``s·tr(V̂ᵀAV̂) = s·(tr A − tr A_BB + tr(A_BB V Vᵀ))``: only the 2×2 block ``A_BB`` matters.

* **Same-sign pair** (``j_i = j_j``): ``V`` is orthogonal, ``V Vᵀ = I`` and f does not change; the
  classical Jacobi rotation that makes ``(VᵀA_BB V)_ij = 0`` is applied (it diagonalises ``A``
  further, which is what makes cyclic sweeps converge fast).
* **Mixed pair**: ``V = [[cosh μ, sinh μ], [sinh μ, cosh μ]]`` (the other three components of
  O(1,1) give the same ``V Vᵀ`` up to μ → −μ), ``tr(A_BB V Vᵀ) = α cosh t + β sinh t`` with
  ``t = 2μ``, ``α = a_ii + a_jj``, ``β = 2 a_ij``. With ``α' = sα``, ``β' = sβ``: if
  ``α' > |β'|`` the cost is strictly convex and coercive in t and its minimiser
  ``tanh t = −β'/α'`` also zeroes ``(VᵀA_BB V)_ij``; ``cosh t = α'/r``, ``sinh t = −β'/r``,
  ``r = √((α'−β')(α'+β'))`` (no cancellation in ``1 − tanh² t``). If ``α' ≤ |β'|`` (an indefinite
  or non-positive block, e.g. ``s < 0`` or C not positive definite) the infimum is not attained:
  it is −∞ for ``α' < |β'|`` and is approached as ``|t| → ∞`` for ``α' = |β'|``; then the
  kernel takes the bounded step ``t = −sign(β')·t_max`` (``t_max`` for ``β' = 0``, ``α' < 0``),
  which decreases f (``α' cosh t − |β'| sinh t < α'`` for t > 0 whenever ``α' ≤ |β'|``, not both
  zero). Every hyperbolic step is capped at ``|t| ≤ t_max``; since the cost is convex in t, a
  capped step still decreases f.

``A`` is never stored: with a factor ``C = Gᵀ Σ G`` (Cholesky, Σ = I, when C ≻ 0; else an
eigendecomposition, Σ = sign Λ), ``A = Wᵀ Σ W`` for ``W = G X``, so ``A_BB`` is three (weighted)
dot products of two columns of W, and a step changes two columns of W and of X: ``O(n)`` per
pair with contiguous memory access — the kernels hold ``[Wᵀ, Xᵀ]`` side by side (row i = column i
of W, then column i of X), so one loop rotates both. This is
the one-sided form of the hyperbolic Jacobi method (Veselić; Slapničar) and has no drift in A:
W and X receive the same rotations, and the caller rebuilds ``W = G X`` every sweep.

A pair is skipped when ``|a_ij| ≤ tol·√|a_ii a_jj|`` (relative threshold) or, with
``same_sign=False``, when it is a same-sign pair.
"""

from __future__ import annotations

import math

from numba import njit

__all__ = ["pair_rotation", "rotate_pair", "sweep_cyclic", "rotate_pairs"]


@njit(cache=True, fastmath=True)
def _block(yt, m, sig, weighted, i, j):
    """``(a_ii, a_jj, a_ij)`` of ``A = Wᵀ Σ W`` from rows i, j of ``Wᵀ`` (the first m entries
    of rows i, j of ``yt``)."""
    aii = 0.0
    ajj = 0.0
    aij = 0.0
    wi = yt[i]
    wj = yt[j]
    if weighted:
        for k in range(m):
            a = wi[k]
            b = wj[k]
            sk = sig[k]
            aii += sk * a * a
            ajj += sk * b * b
            aij += sk * a * b
    else:
        for k in range(m):
            a = wi[k]
            b = wj[k]
            aii += a * a
            ajj += b * b
            aij += a * b
    return aii, ajj, aij


@njit(cache=True)
def pair_rotation(aii, ajj, aij, mixed, s, t_max):
    """The 2×2 step ``V = [[v11, v12], [v21, v22]]`` for a block ``(a_ii, a_jj, a_ij)``.

    ``mixed``: ``j_i ≠ j_j`` (hyperbolic rotation minimising ``s·tr(VᵀA_BB V)``), else the
    Jacobi rotation zeroing the off-diagonal. Returns ``(v11, v12, v21, v22)``; ``V = I`` for a
    same-sign pair with ``a_ij = 0`` and for a mixed pair with ``α' = β' = 0``.
    """
    if not mixed:
        if aij == 0.0:
            return 1.0, 0.0, 0.0, 1.0
        # Golub–Van Loan sym.schur2: J = [[c, sn], [−sn, c]], JᵀA_BB J diagonal
        tau = (ajj - aii) / (2.0 * aij)
        if abs(tau) > 1e150:
            t = 0.5 / tau
        else:
            t = 1.0 / (abs(tau) + math.sqrt(1.0 + tau * tau))
            if tau < 0.0:
                t = -t
        c = 1.0 / math.sqrt(1.0 + t * t)
        sn = t * c
        return c, sn, -sn, c
    al = s * (aii + ajj)
    be = s * 2.0 * aij
    cap = math.cosh(t_max)
    if al > abs(be):
        r = math.sqrt((al - be) * (al + be))
        ch = al / r
        sh = -be / r
        if ch > cap:  # capped step along the same direction (f is convex in t)
            ch = cap
            sh = math.sinh(t_max) if sh > 0.0 else -math.sinh(t_max)
    else:
        if al == 0.0 and be == 0.0:
            return 1.0, 0.0, 0.0, 1.0
        ch = cap
        sh = -math.sinh(t_max) if be > 0.0 else math.sinh(t_max)
    # half-angle: cosh μ = √((1 + cosh t)/2), sinh μ = sinh t / (2 cosh μ)
    cm = math.sqrt(0.5 * (1.0 + ch))
    sm = sh / (2.0 * cm)
    return cm, sm, sm, cm


@njit(cache=True)
def _apply(yt, i, j, v11, v12, v21, v22):
    """Rows i, j of ``Yᵀ`` after ``Y ← Y V̂`` (columns i, j of ``Y = [W; X]``)."""
    ri = yt[i]
    rj = yt[j]
    for k in range(ri.shape[0]):
        a = ri[k]
        b = rj[k]
        ri[k] = v11 * a + v21 * b
        rj[k] = v12 * a + v22 * b


@njit(cache=True)
def rotate_pair(yt, m, sig, weighted, jv, s, tol, t_max, same_sign, i, j):
    """Rotate column pair (i, j) of W and X in place.

    ``yt = [Wᵀ, Xᵀ]`` (n × (m + n), C-contiguous): row i holds column i of W (first m entries)
    followed by column i of X. Returns 1 if a rotation was applied, 0 if the pair was skipped
    (negligible off-diagonal, or a same-sign pair with ``same_sign=False``), −1 (nothing
    written) if the block is not finite.
    """
    mixed = jv[i] != jv[j]
    if not mixed and not same_sign:
        return 0
    aii, ajj, aij = _block(yt, m, sig, weighted, i, j)
    if not (math.isfinite(aii) and math.isfinite(ajj) and math.isfinite(aij)):
        return -1
    # negligible off-diagonal: nothing to gain, except on a mixed pair whose cost is unbounded
    # along t (s(a_ii + a_jj) ≤ 0), where even a diagonal block gives a decrease
    if abs(aij) <= tol * math.sqrt(abs(aii)) * math.sqrt(abs(ajj)) and not (
            mixed and s * (aii + ajj) <= 0.0):
        return 0
    v11, v12, v21, v22 = pair_rotation(aii, ajj, aij, mixed, s, t_max)
    if v12 == 0.0 and v21 == 0.0:
        return 0
    _apply(yt, i, j, v11, v12, v21, v22)
    return 1


@njit(cache=True)
def sweep_cyclic(yt, m, sig, weighted, jv, s, tol, t_max, same_sign):
    """One row-cyclic sweep over all pairs ``i < j``; returns the number of rotations, or −1 as
    soon as a block is not finite."""
    n = yt.shape[0]
    count = 0
    for i in range(n - 1):
        for j in range(i + 1, n):
            r = rotate_pair(yt, m, sig, weighted, jv, s, tol, t_max, same_sign, i, j)
            if r < 0:
                return -1
            count += r
    return count


@njit(cache=True)
def rotate_pairs(yt, m, sig, weighted, jv, s, tol, t_max, same_sign, pairs):
    """Rotate one pair of each candidate group ``pairs[g]`` (shape (G, c, 2)), in order.

    With ``c = 1`` each pair is rotated (random order); with ``c > 1`` the candidate with the
    largest relative off-diagonal ``a_ij² / |a_ii a_jj|`` (greedy order; same-sign candidates
    only with ``same_sign``). Returns the number of rotations, or −1 as soon as a block is not
    finite.
    """
    count = 0
    for g in range(pairs.shape[0]):
        bi = pairs[g, 0, 0]
        bj = pairs[g, 0, 1]
        if pairs.shape[1] > 1:
            best = -1.0
            for c in range(pairs.shape[1]):
                i = pairs[g, c, 0]
                j = pairs[g, c, 1]
                if jv[i] == jv[j] and not same_sign:
                    continue
                aii, ajj, aij = _block(yt, m, sig, weighted, i, j)
                score = aij * aij / max(abs(aii * ajj), 1e-300)
                if score > best:
                    best = score
                    bi = i
                    bj = j
        r = rotate_pair(yt, m, sig, weighted, jv, s, tol, t_max, same_sign, bi, bj)
        if r < 0:
            return -1
        count += r
    return count
