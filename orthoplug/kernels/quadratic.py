r"""The quadratic fast path's pair model and row update, written once.

For ``f(X) = s·tr(Xᵀ C X D)`` (C n×n and D k×k symmetric; D = I is passed as a 0×0 array) with
``Y = C X`` kept current:

* :func:`pair_model` — the exact model of a step ``X[B] ← V X[B]`` on the row pair
  ``B = (i, j)``: ``Z = X[B]``, ``W = Z D``, ``M = ∇f(X)[B] Zᵀ = 2s Y[B] Wᵀ`` and the curvature
  ``Q̲ = 2s (Z D Zᵀ) ⊗ C_BB`` (column-major vec; its PSD part when ``clip``: the eigenpairs of a
  Kronecker product of two symmetric 2×2 factors are the products of theirs, so the negative
  part is removed in closed form) plus ``prox·I₄``. The model is exact: ``f(X⁺) − f(X) =
  ⟨W, M⟩ + ½ vec(W)ᵀ Q̲ vec(W)`` for ``W = V − I``.
* :func:`rotate_pair` — the new rows ``U = V Z`` and ``Δ = U − Z``.
* :func:`column_pair_model` — the exact model of a step ``X[:, B] ← X[:, B] V̂`` on the column
  pair ``B = (a, b)`` (``V̂ ∈ O(J_BB)`` keeps ``XᵀJX``), written as a row step on ``Xᵀ``: with
  ``V = V̂ᵀ``, ``W = V − I`` and ``A = XᵀY = XᵀCX``, ``f(X⁺) − f(X) = ⟨W, M⟩ + ½ vec(W)ᵀ Q̲
  vec(W)`` with ``M = 2s (D A)_BB`` and ``Q̲ = 2s A_BB ⊗ D_BB`` (the row model with the roles
  of C and D swapped: ``f = s·tr(X̃ᵀ D X̃ C)`` for ``X̃ = Xᵀ``).
* :func:`update_columns` — ``X[:, B] ← X[:, B] Vᵀ`` and ``Y[:, B] ← Y[:, B] Vᵀ`` (``Y = CX``
  is linear in the columns) and f moved by the exact model change (M from the model).
* :func:`update_rows` — ``X[B] ← U`` for a row pair B: ``Y += C[B]ᵀ Δ`` in ONE pass over
  Y (each entry read and written once; C symmetric, so its rows are read) and
  ``f += s⟨Δ D, Y[B] + Y⁺[B]⟩`` with ``Y⁺[B] = Y[B] + C_BB Δ``. Nothing is written unless
  ``Δ`` and the new cost are finite.

Every CPU path calls these: the compiled GS-JOBCD and OBCD pair loops
(:mod:`~orthoplug.kernels.jobcd`, :mod:`~orthoplug.kernels.obcd`) and
:class:`~orthoplug.oracles.core.QuadraticTracker` on its host arrays (numba functions are
callable from Python). Tensors on other devices take the tracker's torch expressions of the
same formulas.

One status vocabulary for every kernel and its callers: :data:`OK`,
:data:`NONFINITE_CURVATURE`, :data:`NONFINITE_UPDATE`, :data:`NONFINITE_COST`,
:data:`NEEDS_BATCHED_PAIR`; :data:`MESSAGES` names them.
"""

from __future__ import annotations

import math

from numba import njit

__all__ = ["pair_model", "kron_curvature", "column_pair_model", "update_columns",
           "rotate_pair", "update_rows", "OK", "NONFINITE_CURVATURE", "NONFINITE_UPDATE",
           "NONFINITE_COST", "NEEDS_BATCHED_PAIR", "MESSAGES"]

#: every requested step was taken
OK = 0
#: the next pair's model (curvature bound or M) is not finite (nothing written)
NONFINITE_CURVATURE = 1
#: the next step's new rows are not finite (nothing written)
NONFINITE_UPDATE = 2
#: the next step's cost overflows (nothing written)
NONFINITE_COST = 3
#: the next pair's 2×2 subproblem needs the batched solver (nothing written)
NEEDS_BATCHED_PAIR = 4
#: the error message of each failure status
MESSAGES = {NONFINITE_CURVATURE: "non-finite block curvature",
            NONFINITE_UPDATE: "non-finite block update", NONFINITE_COST: "non-finite cost"}


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
def _clip_kron(q, a: float, b: float, d: float, p: float, r: float, t: float) -> None:
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
def pair_model(x, y, c, d, s, prox, clip, i, j, z, w, q):
    """Fill ``z = X[B]``, ``w = Z D`` (2, k) and ``q = Q̲ (its PSD part when clip) + prox·I₄``
    (4, 4) for the pair ``B = (i, j)``; return ``(ok, M11, M12, M21, M22)`` with
    ``M = 2s Y[B] Wᵀ`` (``ok`` False: the model is not finite)."""
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
    if not kron_curvature(q, (s2 * g00, s2 * g01, s2 * g10, s2 * g11),
                          (c[i, i], c[i, j], c[j, i], c[j, j]), prox, clip) \
            or not math.isfinite(m11 + m12 + m21 + m22):
        return False, 0.0, 0.0, 0.0, 0.0
    return True, s2 * m11, s2 * m12, s2 * m21, s2 * m22


@njit(cache=True)
def kron_curvature(q, f1, f2, prox, clip) -> bool:
    """Fill ``q = F1 ⊗ F2`` (4×4, column-major vec; its PSD part when ``clip``) ``+ prox·I₄``
    for the 2×2 factors ``F1 = [[a, b], [b2, e]]`` and ``F2 = [[p, r], [r2, t]]`` given as
    ``(a, b, b2, e)`` and ``(p, r, r2, t)``; False (``q`` not written) when the product is not
    finite."""
    a, b, b2, e = f1
    p, r, r2, t = f2
    bound = (abs(a) + abs(b) + abs(b2) + abs(e)) * (abs(p) + abs(r) + abs(r2) + abs(t))
    if not math.isfinite(bound):
        return False
    for m in range(4):
        for l in range(4):
            # row (ia, ib) = divmod(m, 2), column (ja, jb) = divmod(l, 2)
            q[m, l] = f1[2 * (m // 2) + l // 2] * f2[2 * (m % 2) + l % 2]
    if clip:
        _clip_kron(q, a, 0.5 * (b + b2), e, p, 0.5 * (r + r2), t)
    for m in range(4):
        q[m, m] += prox
    return True


@njit(cache=True)
def rotate_pair(z, v11, v12, v21, v22, snap, u, dz) -> bool:
    """``u = V Z`` (entries of modulus ``< snap`` set to 0) and ``dz = u − Z`` for rows z (2, k);
    False when an entry of ``dz`` is not finite."""
    tot = 0.0
    for col in range(z.shape[1]):
        z0, z1 = z[0, col], z[1, col]
        u0 = v11 * z0 + v12 * z1
        u1 = v21 * z0 + v22 * z1
        if abs(u0) < snap:
            u0 = 0.0
        if abs(u1) < snap:
            u1 = 0.0
        u[0, col], u[1, col] = u0, u1
        d0, d1 = u0 - z0, u1 - z1
        dz[0, col], dz[1, col] = d0, d1
        tot += d0 + d1
    return math.isfinite(tot)


@njit(cache=True)
def update_rows(x, y, c, s, f, i, j, u, dz, dd) -> tuple[int, float]:
    """``X[B] = u`` for the row pair ``B = (i, j)`` with ``Y = C X`` and the cost ``f`` updated
    (see the module docstring).

    Args:
        x, y: (n, k) the iterate and ``C X``, updated in place.
        c: (n, n) symmetric C. s: the cost's scale. f: the cost at x.
        i, j: distinct row indices. u: (2, k) the new rows.
        dz: (2, k) ``Δ = u − X[B]``. dd: (2, k) ``Δ D`` (``dz`` itself for D = I).

    Returns:
        ``(status, f)``: :data:`OK` and the new cost, or :data:`NONFINITE_UPDATE` /
        :data:`NONFINITE_COST` and ``f`` (nothing written).
    """
    n, k = x.shape
    # f(X + Δ) − f(X) = s⟨Δ D, Y[B] + Y⁺[B]⟩ with Y⁺[B] = Y[B] + C_BB Δ; Δ's sum (tot) tests
    # Δ finite in the same pass
    cii, cji, cij, cjj = c[i, i], c[j, i], c[i, j], c[j, j]
    change = tot = 0.0
    for col in range(k):
        d0, d1 = dz[0, col], dz[1, col]
        yi, yj = y[i, col], y[j, col]
        change += (dd[0, col] * (yi + (yi + (cii * d0 + cji * d1)))
                   + dd[1, col] * (yj + (yj + (cij * d0 + cjj * d1))))
        tot += d0 + d1
    if not math.isfinite(tot):
        return NONFINITE_UPDATE, f
    f_new = f + s * change
    if not math.isfinite(f_new):
        return NONFINITE_COST, f
    # Y += C[B]ᵀ Δ: one pass over Y
    for row in range(n):
        ci, cj = c[i, row], c[j, row]
        for col in range(k):
            y[row, col] += ci * dz[0, col] + cj * dz[1, col]
    for col in range(k):
        x[i, col] = u[0, col]
        x[j, col] = u[1, col]
    return OK, f_new


@njit(cache=True)
def column_pair_model(x, y, d, s, prox, clip, a, b, acol, q):
    """Fill the rows of ``acol = Xᵀ Y[:, B]`` (k, 2) that the model reads (a, b and those with
    ``D[a, l]`` or ``D[b, l]`` non-zero) and ``q = Q̲ (its PSD part when clip) + prox·I₄`` for
    the column pair ``B = (a, b)`` and a (k, k) D; return ``(ok, M11, M12, M21, M22)`` with
    ``M = 2s (D A)_BB`` (``ok`` False: the model is not finite). O(n) per row read: O(n) for a
    diagonal D, O(nk) for a dense one."""
    n, k = x.shape
    for l in range(k):
        if l != a and l != b and d[a, l] == 0.0 and d[b, l] == 0.0:
            continue
        s0 = s1 = 0.0
        for r in range(n):
            s0 += x[r, l] * y[r, a]
            s1 += x[r, l] * y[r, b]
        acol[l, 0], acol[l, 1] = s0, s1
    m11 = m12 = m21 = m22 = 0.0
    for l in range(k):
        if d[a, l] == 0.0 and d[b, l] == 0.0:
            continue  # row l of A is not read (nor filled, unless l is a or b)
        m11 += d[a, l] * acol[l, 0]
        m12 += d[a, l] * acol[l, 1]
        m21 += d[b, l] * acol[l, 0]
        m22 += d[b, l] * acol[l, 1]
    s2 = 2.0 * s
    off = 0.5 * (acol[a, 1] + acol[b, 0])  # A is symmetric: its rounding removed
    if not kron_curvature(q, (s2 * acol[a, 0], s2 * off, s2 * off, s2 * acol[b, 1]),
                          (d[a, a], d[a, b], d[b, a], d[b, b]), prox, clip) \
            or not math.isfinite(m11 + m12 + m21 + m22):
        return False, 0.0, 0.0, 0.0, 0.0
    return True, s2 * m11, s2 * m12, s2 * m21, s2 * m22


@njit(cache=True)
def update_columns(x, y, d, s, f, a, b, acol, m, v) -> tuple[int, float]:
    """``X[:, B] ← X[:, B] Vᵀ`` and ``Y[:, B] ← Y[:, B] Vᵀ`` for the column pair ``B = (a, b)``
    with f moved by the exact change ``⟨W, M⟩ + s·tr(W A_BB Wᵀ D_BB)`` (``W = V − I``; ``acol``
    and ``m = (M11, M12, M21, M22)`` from :func:`column_pair_model`, ``v`` = V's entries in
    the same order). Returns ``(status, f)``: :data:`OK` and the new cost, or
    :data:`NONFINITE_UPDATE` / :data:`NONFINITE_COST` and ``f`` (nothing written)."""
    v11, v12, v21, v22 = v
    m11, m12, m21, m22 = m
    w11, w12, w21, w22 = v11 - 1.0, v12, v21, v22 - 1.0
    off = 0.5 * (acol[a, 1] + acol[b, 0])
    p11, p12, p22 = acol[a, 0], off, acol[b, 1]
    # T = W A_BB Wᵀ (symmetric), change = ⟨W, M⟩ + s·tr(T D_BB)
    u11, u12 = w11 * p11 + w12 * p12, w11 * p12 + w12 * p22
    u21, u22 = w21 * p11 + w22 * p12, w21 * p12 + w22 * p22
    t11, t12, t22 = u11 * w11 + u12 * w12, u11 * w21 + u12 * w22, u21 * w21 + u22 * w22
    change = (w11 * m11 + w12 * m12 + w21 * m21 + w22 * m22
              + s * (t11 * d[a, a] + t12 * (d[a, b] + d[b, a]) + t22 * d[b, b]))
    if not math.isfinite(v11 + v12 + v21 + v22):
        return NONFINITE_UPDATE, f
    f_new = f + change
    if not math.isfinite(f_new):
        return NONFINITE_COST, f
    tot = 0.0
    for r in range(x.shape[0]):
        tot += v11 * x[r, a] + v12 * x[r, b] + v21 * x[r, a] + v22 * x[r, b]
    if not math.isfinite(tot):
        return NONFINITE_UPDATE, f
    for r in range(x.shape[0]):
        xa, xb = x[r, a], x[r, b]
        x[r, a], x[r, b] = v11 * xa + v12 * xb, v21 * xa + v22 * xb
        ya, yb = y[r, a], y[r, b]
        y[r, a], y[r, b] = v11 * ya + v12 * yb, v21 * ya + v22 * yb
    return OK, f_new
