r"""The exact O(2) breakpoint search for ONE instance, compiled.

Solves ``min_{V in O(2)} 1/2 vec(V)^T Qt vec(V) + <V, P> + h(V Z)`` (``Qt`` 4 x 4, any inertia;
``Z`` 2 x r) for a separable piecewise-affine ``h``, by the algorithm described in
:mod:`orthoplug.subproblems.o2` (one-angle form per family, knots of ``h`` sorted from the middle of
the widest gap, arc states by running sums, knot-group corrections for discontinuous ``h``,
stationary points of each feasible arc, identity tie rule). It is the only implementation:
:func:`orthoplug.subproblems.o2.solve_o2` (one instance or a batch, :func:`o2_search_batch`),
:func:`~orthoplug.subproblems.o2.solve_o2_single` and the OBCD pair loop
(:mod:`orthoplug.kernels.obcd`) all call :func:`o2_search`.

``h`` is passed as its piecewise-affine tables (any :class:`~orthoplug.nonsmooth.PiecewiseAffine`):
thresholds ``th`` (T,), slopes ``g``, intercepts ``kk`` and infeasibility flags ``inf`` (T+1,),
point values ``pval`` (T,, ``+inf`` where infeasible), the knot table ``knot`` (2T, 5: per
threshold and crossing direction the changes of intercept and infeasibility count, the value and
feasibility corrections at the knot, the change of slope), ``h0 = phi(0)`` and the flags
``shared`` (all slopes equal) and ``continuous``.

Stationary points of ``rho cos(t - beta) + R2 cos(2t - gamma)`` (the smooth part on an arc): for
``R2 <= 1e-14 rho`` they are ``beta``, ``beta + pi``; for ``kappa = rho / (2 R2) >= 8`` the
derivative ``-rho sin(t - beta) - 2 R2 sin(2t - gamma)`` vanishes only where
``|sin(t - beta)| <= 1/kappa``, and on each of those two windows it is strictly monotone
(``rho sqrt(1 - kappa^-2) > 4 R2``), so Newton from ``beta`` and ``beta + pi`` finds all of them;
otherwise the four roots of the quartic ``z^4 + kappa e^{i(gamma-beta)} z^3 - kappa
e^{i(gamma+beta)} z - e^{2 i gamma}`` (``z = e^{it}``, coefficients of modulus <= 8) are found by
Weierstrass (Durand-Kerner) iteration and ``beta``, ``beta + pi`` are added. Every angle is then
polished by Newton steps on the derivative (a step of 0.3 rad or more is refused). Spurious
candidates are harmless: every candidate's value is a true objective value.

Per-arc quadratics (``l1``, capped ``l1``: continuous, slopes differ) skip that search on most
arcs: an arc survives pruning only if its Taylor lower bound is below the best value so far
and on a surviving arc where ``|phi''(mid)|`` exceeds half its length
times ``rho + 8 R2`` (a bound on ``|phi'''|``) ``phi'`` is monotone: a convex arc has an interior
minimum iff ``phi' < 0 < phi'`` at its ends, found by bracketed Newton, a concave one none (the
knots carry the end values). Knot and midpoint cosines come from ``x_i / rho_i``,
``theta_j / rho_i`` and the ends' unit vectors, not from trigonometric calls.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

TWO_PI = 2.0 * math.pi
TIE = 1e-14  # knots closer than this (rad) form one group
ZERO_REL = 1e-14  # rho_i <= ZERO_REL * max(1, max rho): coordinate identically 0
SNAP = 1e-14  # |(V Z)_ij| <= SNAP * max(1, max rho) counts as 0 for discontinuous h
PREFER_I = 1e-14  # relative tie tolerance in favour of V = I
LINEAR_ONLY = 1e-14  # R2 <= LINEAR_ONLY * rho: the quadratic part is a constant
PRUNE_SLACK = 1e-10  # arcs pruned only if their lower bound exceeds ub + slack * max(1, |ub|)
NEWTON_ONLY = 8.0  # kappa >= this: the two stationary points are Newton's from beta, beta + pi
NEWTON_MAX = 8  # Newton steps at most (stop when the step is below 1e-15)
DK_MAX = 200  # Durand-Kerner sweeps at most


@njit(cache=True)
def objective(v00, v01, v10, v11, P, Z, Q, th, g, kk, inf, pval, thr):
    """``K(V)``; entries of ``V Z`` with modulus ``<= thr`` count as 0."""
    v = (v00, v10, v01, v11)  # vec, column-major
    quad = 0.0
    for a in range(4):
        for b in range(4):
            quad += v[a] * Q[a, b] * v[b]
    out = 0.5 * quad + v00 * P[0, 0] + v01 * P[0, 1] + v10 * P[1, 0] + v11 * P[1, 1]
    # h(V Z): phi(u) per entry from the tables (+inf off the domain), written out here rather
    # than called per entry (a call passing the tables costs ~100 ns in numba)
    T = th.shape[0]
    hs = 0.0
    for i in range(Z.shape[1]):
        for row in range(2):
            u = (v00 * Z[0, i] + v01 * Z[1, i]) if row == 0 else (v10 * Z[0, i] + v11 * Z[1, i])
            if abs(u) <= thr:
                u = 0.0
            iv = 0
            while iv < T and th[iv] < u:
                iv += 1
            if iv < T and u == th[iv]:
                hs += pval[iv]
            elif inf[iv] > 0.0:
                hs += math.inf
            else:
                hs += g[iv] * u + kk[iv]
    return out + hs


@njit(cache=True)
def _mod2pi(x):
    return x - TWO_PI * math.floor(x * (1.0 / TWO_PI))


@njit(cache=True)
def _harmonic(t, rho, beta, R2, gam):
    return rho * math.cos(t - beta) + R2 * math.cos(2.0 * t - gam)


@njit(cache=True)
def _trig(al, be, R2, cg, sg, c, s, base):
    """``al c + be s + R2 cos(2t - gamma) + base`` from ``c = cos t``, ``s = sin t``."""
    return al * c + be * s + R2 * ((c * c - s * s) * cg + 2.0 * c * s * sg) + base


@njit(cache=True)
def _dphi(al, be, R2, cg, sg, c, s):
    """The derivative of ``al cos t + be sin t + R2 cos(2t - gamma)`` from ``c, s``."""
    return -al * s + be * c - 2.0 * R2 * (2.0 * s * c * cg - (c * c - s * s) * sg)


@njit(cache=True)
def _bracketed(al, be, R2, cg, sg, ta, tb):
    """The zero of ``phi'`` in ``(ta, tb)`` where ``phi'(ta) < 0 < phi'(tb)`` and ``phi'`` is
    increasing: Newton steps, bisection when a step leaves the bracket."""
    t = 0.5 * (ta + tb)
    for _ in range(100):
        c = math.cos(t)
        s = math.sin(t)
        d1 = _dphi(al, be, R2, cg, sg, c, s)
        if d1 < 0.0:
            ta = t
        elif d1 > 0.0:
            tb = t
        else:
            return t
        d2 = -(al * c + be * s) - 4.0 * R2 * ((c * c - s * s) * cg + 2.0 * c * s * sg)
        tn = t - d1 / d2 if d2 > 0.0 else 0.5 * (ta + tb)
        if not (ta < tn < tb):
            tn = 0.5 * (ta + tb)
        if abs(tn - t) <= 1e-15 * max(1.0, abs(t)):
            return tn
        t = tn
    return t


@njit(cache=True)
def stationary(rho, beta, R2, gam, out):
    """Angles containing every stationary point of ``rho cos(t - beta) + R2 cos(2t - gamma)``
    (written to ``out``, length >= 6); returns their number."""
    out[0] = beta + math.pi
    out[1] = beta
    cnt = 2
    if R2 > LINEAR_ONLY * rho and rho < NEWTON_ONLY * 2.0 * R2:
        kappa = rho / (2.0 * R2)
        c3 = kappa * complex(math.cos(gam - beta), math.sin(gam - beta))
        c1 = -kappa * complex(math.cos(gam + beta), math.sin(gam + beta))
        c0 = -complex(math.cos(2.0 * gam), math.sin(2.0 * gam))
        z = np.empty(4, dtype=np.complex128)
        w = complex(0.4, 0.9)
        z[0] = 1.0
        for k in range(1, 4):
            z[k] = z[k - 1] * w
        for _ in range(DK_MAX):
            big = 0.0
            for k in range(4):
                zk = z[k]
                num = ((zk + c3) * zk * zk + c1) * zk + c0
                den = complex(1.0, 0.0)
                for j in range(4):
                    if j != k:
                        den *= zk - z[j]
                if den == 0.0:
                    den = complex(1e-300, 0.0)
                d = num / den
                z[k] = zk - d
                big = max(big, abs(d))
            if big <= 1e-15:
                break
        for k in range(4):
            out[2 + k] = math.atan2(z[k].imag, z[k].real)
        cnt = 6
    for k in range(cnt):
        t = out[k]
        for _ in range(NEWTON_MAX):
            d1 = -rho * math.sin(t - beta) - 2.0 * R2 * math.sin(2.0 * t - gam)
            d2 = -rho * math.cos(t - beta) - 4.0 * R2 * math.cos(2.0 * t - gam)
            if d2 == 0.0:
                break
            step = d1 / d2
            if not abs(step) < 0.3:  # also refuses nan
                break
            t -= step
            if abs(step) <= 1e-15:
                break
        out[k] = t
    return cnt


@njit(cache=True)
def o2_search(P, Z, Q, th, g, kk, inf, pval, knot, h0, shared, continuous, V):
    """Global minimiser of the O(2) subproblem, written to ``V`` (2, 2).

    Returns the model decrease ``K(I) - K(V) > 0`` (``inf`` when ``K(I)`` is infinite), or 0.0
    when ``V = I`` (a tie with the best value, relative 1e-14, or no feasible candidate).

    ``P`` (2, 2), ``Z`` (2, r), ``Q`` (4, 4) float64, finite; the term's tables as described in
    the module docstring.
    """
    r = Z.shape[1]
    R = 2 * r
    T = th.shape[0]
    rho = np.empty(R)
    maxr = 0.0
    for i in range(r):
        rho[i] = math.hypot(Z[0, i], Z[1, i])
        rho[r + i] = math.hypot(Z[1, i], Z[0, i])
        maxr = max(maxr, rho[i], rho[r + i])
    cut = ZERO_REL * max(maxr, 1.0)
    live = np.empty(R, dtype=np.int64)
    L = 0
    for i in range(R):
        if rho[i] > cut:
            live[L] = i
            L += 1
    # knots: live coordinate l crosses threshold j (|theta_j| < rho_l), two directions each
    nk = 0
    for l in range(L):
        for j in range(T):
            if abs(th[j] / rho[live[l]]) < 1.0:
                nk += 1
    M = 2 * nk
    NA = max(M, 1)  # arcs (M = 0: one arc, the whole circle)
    kci = np.empty(M, dtype=np.int64)  # live index of each raw knot
    kid = np.empty(M, dtype=np.int64)  # row of the knot table
    dv = np.empty(M)
    cosd = np.empty(M)  # cos of the knot's offset from psi: theta_j / rho
    q = 0
    for l in range(L):
        for j in range(T):
            ratio = th[j] / rho[live[l]]
            if abs(ratio) < 1.0:
                d = math.acos(ratio)
                kci[2 * q] = l
                kci[2 * q + 1] = l
                kid[2 * q] = 2 * j
                kid[2 * q + 1] = 2 * j + 1
                dv[2 * q] = -d  # u increases through theta_j here
                dv[2 * q + 1] = d  # u decreases through theta_j here
                cosd[2 * q] = ratio
                cosd[2 * q + 1] = ratio
                q += 1
    KI = objective(1.0, 0.0, 0.0, 1.0, P, Z, Q, th, g, kk, inf, pval, 0.0)
    const = (R - L) * h0 if L < R else 0.0
    x = np.empty((2, L))
    y = np.empty((2, L))
    fam_a = np.empty(2)
    fam_b = np.empty(2)
    fam_m0 = np.empty(2)
    fam_R2 = np.empty(2)
    fam_gam = np.empty(2)
    t0s = np.zeros(2)
    rel = np.full((2, NA), math.inf)
    lo = np.full((2, NA), -math.inf)
    tk = np.empty((2, NA))
    ck = np.empty((2, NA))  # cos, sin of the sorted knots' angles
    sk = np.empty((2, NA))
    cmid = np.empty((2, NA))  # cos, sin of the arcs' midpoints
    smid = np.empty((2, NA))
    psi = np.empty(L)
    kcr = np.empty(M)  # cos, sin of the raw knots' angles
    ksr = np.empty(M)
    al = np.empty((2, NA))
    be = np.empty((2, NA))
    Kc = np.empty((2, NA))
    Nn = np.empty((2, NA))
    kval = np.full((2, NA), math.inf)
    arc_ok = np.zeros((2, NA), dtype=np.bool_)
    lb = np.empty((2, NA))
    best = np.full(2, math.inf)
    bang = np.zeros(2)
    cand = np.empty(6)
    traw = np.empty(M)
    tm = np.empty(M)
    order = np.arange(M)
    jg = 0
    ub = KI  # upper bound for pruning the arcs (per-arc quadratics)
    for f in range(2):
        e = 1.0 - 2.0 * f
        # one-angle form: vec(V) = c m + s v, m = (e, 0, 0, 1), v = (0, -e, 1, 0)
        fam_a[f] = e * P[0, 0] + P[1, 1]
        fam_b[f] = P[0, 1] - e * P[1, 0]
        mv = (e, 0.0, 0.0, 1.0)
        vv = (0.0, -e, 1.0, 0.0)
        qmm = 0.0
        qvv = 0.0
        qmv = 0.0
        qvm = 0.0
        for a in range(4):
            for b in range(4):
                qmm += mv[a] * Q[a, b] * mv[b]
                qvv += vv[a] * Q[a, b] * vv[b]
                qmv += mv[a] * Q[a, b] * vv[b]
                qvm += vv[a] * Q[a, b] * mv[b]
        q11 = 0.5 * qmm
        q22 = 0.5 * qvv
        q12 = 0.5 * (qmv + qvm)
        fam_m0[f] = 0.5 * (q11 + q22)
        fam_R2[f] = 0.5 * math.hypot(q11 - q22, q12)
        fam_gam[f] = math.atan2(q12, q11 - q22)
        for l in range(L):
            i = live[l]
            if i < r:
                x[f, l] = e * Z[0, i]
                y[f, l] = Z[1, i]
            else:
                x[f, l] = Z[1, i - r]
                y[f, l] = -e * Z[0, i - r]
        R2 = fam_R2[f]
        cg = math.cos(fam_gam[f])
        sg = math.sin(fam_gam[f])
        base0 = fam_m0[f] + const
        # knots sorted by angle after t0, the middle of the widest gap
        t0 = 0.0
        if M > 0:
            for l in range(L):
                psi[l] = math.atan2(y[f, l], x[f, l])
            for m in range(M):
                l = kci[m]
                traw[m] = psi[l] + dv[m]
                # cos, sin of psi -+ d from cos psi = x / rho, sin psi = y / rho, cos d, sin d
                cp = x[f, l] / rho[live[l]]
                sp = y[f, l] / rho[live[l]]
                sd = math.sqrt(max(0.0, 1.0 - cosd[m] * cosd[m]))
                if dv[m] > 0.0:
                    sd = -sd
                kcr[m] = cp * cosd[m] + sp * sd
                ksr[m] = sp * cosd[m] - cp * sd
                tv = traw[m] + TWO_PI if traw[m] < 0.0 else traw[m]
                tm[m] = 0.0 if tv >= TWO_PI else tv
            order = np.argsort(tm)
            gmax = -1.0
            for m in range(M):
                nxt = tm[order[m + 1]] if m + 1 < M else tm[order[0]] + TWO_PI
                gap = nxt - tm[order[m]]
                if gap > gmax:
                    gmax = gap
                    jg = m
            t0 = tm[order[jg]] + 0.5 * gmax
            for m in range(M):
                idx = order[(jg + 1 + m) % M]
                rv = tm[idx] - t0
                rel[f, m] = rv + TWO_PI if rv < 0.0 else rv
                tk[f, m] = traw[idx]
                ck[f, m] = kcr[idx]
                sk[f, m] = ksr[idx]
        t0s[f] = t0
        # pieces at t0, then the arc states by running sums over the sorted knots
        ct = math.cos(t0)
        st = math.sin(t0)
        kc = 0.0
        nn = 0.0
        sa = 0.0
        sb = 0.0
        for l in range(L):
            u0 = x[f, l] * ct + y[f, l] * st
            iv = 0
            while iv < T and th[iv] < u0:
                iv += 1
            kc += kk[iv]
            nn += inf[iv]
            if shared:
                sa += x[f, l]
                sb += y[f, l]
            else:
                sa += g[iv] * x[f, l]
                sb += g[iv] * y[f, l]
        if shared:
            sa *= g[0]
            sb *= g[0]
        ca = fam_a[f] + sa
        cb = fam_b[f] + sb
        if M > 0:
            for m in range(M):  # sorted knot m is raw knot order[(jg + 1 + m) % M]
                idx = order[(jg + 1 + m) % M]
                row = kid[idx]
                Kc[f, m] = kc
                Nn[f, m] = nn
                al[f, m] = ca
                be[f, m] = cb
                kc += knot[row, 0]
                nn += knot[row, 1]
                if not shared:
                    ca += knot[row, 4] * x[f, kci[idx]]
                    cb += knot[row, 4] * y[f, kci[idx]]
                kval[f, m] = _trig(al[f, m], be[f, m], R2, cg, sg, ck[f, m], sk[f, m],
                                   base0 + Kc[f, m])
            if not continuous:
                m = 0
                while m < M:
                    e_ = m
                    c0 = knot[kid[order[(jg + 1 + m) % M]], 2]
                    c1 = knot[kid[order[(jg + 1 + m) % M]], 3]
                    while e_ + 1 < M and rel[f, e_ + 1] - rel[f, e_] <= TIE:
                        e_ += 1
                        row = kid[order[(jg + 1 + e_) % M]]
                        c0 += knot[row, 2]
                        c1 += knot[row, 3]
                    if Nn[f, m] + c1 < 0.5:
                        kval[f, m] += c0
                    else:
                        kval[f, m] = math.inf
                    for mm in range(m + 1, e_ + 1):
                        kval[f, mm] = math.inf
                    m = e_ + 1
            for m in range(M):
                lo[f, m] = rel[f, m - 1] if m > 0 else rel[f, M - 1] - TWO_PI
        else:
            Kc[f, 0] = kc
            Nn[f, 0] = nn
            al[f, 0] = ca
            be[f, 0] = cb
        for m in range(NA):
            arc_ok[f, m] = Nn[f, m] < 0.5 and rel[f, m] - lo[f, m] > TIE
        # candidates at the knots
        for m in range(M):
            if kval[f, m] < best[f]:
                best[f] = kval[f, m]
                bang[f] = tk[f, m]
        if shared:
            # one smooth function per family: its stationary points, each in its arc
            rab = math.hypot(al[f, 0], be[f, 0])
            bet = math.atan2(be[f, 0], al[f, 0])
            cnt = stationary(rab, bet, R2, fam_gam[f], cand)
            for k in range(cnt):
                relc = _mod2pi(cand[k] - t0)
                j = 0
                for m in range(M):
                    if rel[f, m] < relc:
                        j += 1
                if j >= M:
                    j = 0
                if arc_ok[f, j]:
                    val = _harmonic(cand[k], rab, bet, R2, fam_gam[f]) + base0 + Kc[f, j]
                    if val < best[f]:
                        best[f] = val
                        bang[f] = cand[k]
        else:
            # per-arc quadratics: midpoint values and Taylor lower bounds for pruning
            for m in range(NA):
                length = rel[f, m] - lo[f, m]
                fin = length < math.inf
                half = 0.5 * length if fin else math.pi
                mid = (lo[f, m] + half if fin else 0.0) + t0
                jl = m - 1 if m > 0 else M - 1
                cs = ck[f, jl] + ck[f, m] if fin else 0.0
                ss = sk[f, jl] + sk[f, m] if fin else 0.0
                nrm = math.sqrt(cs * cs + ss * ss)
                if half < 1.5 and nrm > 1e-3:  # the bisector of the end points' unit vectors
                    cm = cs / nrm
                    sm = ss / nrm
                else:
                    cm = math.cos(mid)
                    sm = math.sin(mid)
                cmid[f, m] = cm
                smid[f, m] = sm
                mval = _trig(al[f, m], be[f, m], R2, cg, sg, cm, sm, base0 + Kc[f, m])
                dval = (be[f, m] * cm - al[f, m] * sm
                        + 2.0 * R2 * ((cm * cm - sm * sm) * sg - 2.0 * cm * sm * cg))
                lb[f, m] = (mval - abs(dval) * half
                            - 0.5 * (abs(al[f, m]) + abs(be[f, m]) + 4.0 * R2) * half * half)
                if arc_ok[f, m] and mval < ub:
                    ub = mval
            for m in range(M):
                if kval[f, m] < ub:
                    ub = kval[f, m]
    if not shared:
        ub = ub + PRUNE_SLACK * max(abs(ub), 1.0)
        for f in range(2):
            R2 = fam_R2[f]
            cg = math.cos(fam_gam[f])
            sg = math.sin(fam_gam[f])
            base0 = fam_m0[f] + const
            # best arc candidates come after every knot candidate of the family
            abest = math.inf
            aang = 0.0
            for m in range(NA):
                if not (arc_ok[f, m] and lb[f, m] <= ub):
                    continue
                A = al[f, m]
                B = be[f, m]
                rab = math.hypot(A, B)
                if continuous and M > 0:
                    # phi'' > 0 on the arc when phi''(mid) exceeds half the arc's length times
                    # rab + 8 R2 (a bound on the third derivative): an interior minimum iff
                    # phi' < 0 < phi' at the ends, found by bracketed Newton; phi'' < 0 on the
                    # arc: none (h continuous: the knots hold the end values)
                    cm = cmid[f, m]
                    sm = smid[f, m]
                    d2 = -(A * cm + B * sm) - 4.0 * R2 * ((cm * cm - sm * sm) * cg
                                                          + 2.0 * cm * sm * sg)
                    if abs(d2) > 0.5 * (rel[f, m] - lo[f, m]) * (rab + 8.0 * R2) * (1.0 + 1e-9):
                        if d2 > 0.0:
                            jl = m - 1 if m > 0 else M - 1
                            if (_dphi(A, B, R2, cg, sg, ck[f, jl], sk[f, jl]) < 0.0
                                    < _dphi(A, B, R2, cg, sg, ck[f, m], sk[f, m])):
                                t = _bracketed(A, B, R2, cg, sg, lo[f, m] + t0s[f],
                                               rel[f, m] + t0s[f])
                                val = _trig(A, B, R2, cg, sg, math.cos(t), math.sin(t),
                                            base0 + Kc[f, m])
                                if val < abest:
                                    abest = val
                                    aang = t
                        continue
                bet = math.atan2(B, A)
                cnt = stationary(rab, bet, R2, fam_gam[f], cand)
                for k in range(cnt):
                    relc = _mod2pi(cand[k] - t0s[f])
                    inside = ((relc > lo[f, m] and relc < rel[f, m])
                              or (relc - TWO_PI > lo[f, m] and relc - TWO_PI < rel[f, m]))
                    if inside:
                        val = _harmonic(cand[k], rab, bet, R2, fam_gam[f]) + base0 + Kc[f, m]
                        if val < abest:
                            abest = val
                            aang = cand[k]
            if abest < best[f]:
                best[f] = abest
                bang[f] = aang
    fam = 0 if not best[1] < best[0] else 1
    t = bang[fam]
    e = 1.0 - 2.0 * fam
    c = math.cos(t)
    s = math.sin(t)
    V[0, 0] = e * c
    V[0, 1] = s
    V[1, 0] = -e * s
    V[1, 1] = c
    found = min(best[0], best[1]) < math.inf
    thr = 0.0 if continuous else SNAP * max(maxr, 1.0)
    Kv = objective(V[0, 0], V[0, 1], V[1, 0], V[1, 1], P, Z, Q, th, g, kk, inf, pval, thr)
    ref = abs(Kv) if abs(Kv) < math.inf else abs(KI)
    KI_fin = abs(KI) < math.inf
    if (not found) or (KI_fin and KI <= Kv + PREFER_I * max(ref, 1.0)):
        V[0, 0] = 1.0
        V[0, 1] = 0.0
        V[1, 0] = 0.0
        V[1, 1] = 1.0
        return 0.0
    dec = KI - Kv
    return dec if dec > 0.0 else math.inf  # (KI infinite: any move counts)


@njit(cache=True)
def o2_search_batch(P, Z, Q, th, g, kk, inf, pval, knot, h0, shared, continuous, V):
    """:func:`o2_search` for K instances: ``P`` (K, 2, 2), ``Z`` (K, 2, r), ``Q`` (K, 4, 4),
    minimisers written to ``V`` (K, 2, 2)."""
    for k in range(P.shape[0]):
        o2_search(P[k], Z[k], Q[k], th, g, kk, inf, pval, knot, h0, shared, continuous, V[k])
