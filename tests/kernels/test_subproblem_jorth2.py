"""Tests for ``orthoplug.subproblems.jorth2`` against a brute force written independently of it.

The brute force builds every feasible V from the explicit matrices of each one-parameter family
(four hyperbolic components of O(1,1), rotations and reflections of O(2)), scans a dense grid of the
parameter and refines the best grid minima by golden-section search. Its range for μ is a proven
bound: with r = ‖vec V‖ ≥ e^|μ|, F ≥ ½ λ_min(Qd) r² − ‖P‖ r, and a form's minimiser does no worse
than μ = 0.
"""

import math

import numpy as np
import pytest
import torch

from orthoplug.subproblems.jorth2 import solve_jorth2x2, solve_jorth2x2_single, subproblem_value

JCASES = {"diag(1,-1)": (1, -1), "diag(-1,1)": (-1, 1), "I": (1, 1), "-I": (-1, -1)}
N_COMBO = 300  # instances per (Q kind, P kind) combination
N_LARGE = 1200  # extra instances with minimisers at large |mu|
EXCESS_TOL = 1e-10
FEAS_TOL = 1e-12


# ----------------------------------------------------------------------------------------------
# Independent reference: objective, forms, brute force
# ----------------------------------------------------------------------------------------------
def vec(V):
    """Column-major vec of (..., 2, 2): [V11, V21, V12, V22]."""
    return np.swapaxes(V, -1, -2).reshape(*V.shape[:-2], 4)


def f_ref(V, P, Q):
    """F(V) in extended precision where the platform has it: at large |mu| the terms of F are
    ~‖Qd‖ e^{2|mu|} and cancel, so float64 rounding alone would blur the comparison."""
    V, P, Q = (np.asarray(x, dtype=np.longdouble) for x in (V, P, Q))
    v = vec(V)
    F = 0.5 * np.einsum("...i,...ij,...j->...", v, Q, v) + (V * P).sum((-2, -1))
    return F.astype(np.float64)


def families(hyperbolic):
    """Each family as V(c, s) = c A + s B read off explicit matrices."""
    if hyperbolic:  # diag(e1, e2) [[cosh, sinh], [sinh, cosh]]
        out = []
        for e1 in (1.0, -1.0):
            for e2 in (1.0, -1.0):
                E = np.diag([e1, e2])
                out.append((E @ np.eye(2), E @ np.array([[0.0, 1.0], [1.0, 0.0]])))
        return out
    rot = (np.eye(2), np.array([[0.0, -1.0], [1.0, 0.0]]))  # [[cos, -sin], [sin, cos]]
    ref = (np.diag([1.0, -1.0]), np.array([[0.0, 1.0], [1.0, 0.0]]))  # [[cos, sin], [sin, -cos]]
    return [rot, ref]


def _golden(f, lo, hi, iters=60):
    """Vectorised golden-section search of f on [lo, hi] (arrays of shape (N, 1))."""
    g = (math.sqrt(5.0) - 1.0) / 2.0
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    f1, f2 = f(x1), f(x2)
    for _ in range(iters):
        left = f1 <= f2  # minimum in [lo, x2]
        lo, hi = np.where(left, lo, x1), np.where(left, x2, hi)
        xn = np.where(left, hi - g * (hi - lo), lo + g * (hi - lo))
        fn = f(xn)
        x1, x2, f1, f2 = (np.where(left, xn, x2), np.where(left, x1, xn),
                          np.where(left, fn, f2), np.where(left, f1, fn))
    return np.where(f1 <= f2, x1, x2)


def brute_force(hyperbolic, P, Q, grid=1001, n_refine=3):
    """Best (V, F) per instance; vectorised over instances, loops over forms only."""
    N = P.shape[0]
    lam = np.linalg.eigvalsh(0.5 * (Q + np.swapaxes(Q, -1, -2)))[:, :1]
    pn = np.linalg.norm(P.reshape(N, 4), axis=1, keepdims=True)
    best_F = np.full(N, np.inf)
    best_V = np.zeros((N, 2, 2))
    u = np.linspace(-1.0, 1.0, grid) if hyperbolic else np.arange(grid) * (2 * np.pi / grid)
    for A, B in families(hyperbolic):
        al, be = vec(A), vec(B)
        qa = 0.5 * np.einsum("i,nij,j->n", al, Q, al)[:, None]
        qb = 0.5 * np.einsum("i,nij,j->n", be, Q, be)[:, None]
        qab = np.einsum("i,nij,j->n", al, Q + np.swapaxes(Q, -1, -2), be)[:, None] / 2
        pa = (A * P).sum((-2, -1))[:, None]
        pb = (B * P).sum((-2, -1))[:, None]

        def cs(t):
            return (np.cosh(t), np.sinh(t)) if hyperbolic else (np.cos(t), np.sin(t))

        def f(t, pa=pa, pb=pb, qa=qa, qb=qb, qab=qab):
            c, s = cs(t)
            return pa * c + pb * s + qa * c * c + qab * c * s + qb * s * s

        if hyperbolic:
            F0 = pa + qa  # value at mu = 0
            r = (pn + np.sqrt(np.maximum(pn**2 + 2 * lam * F0, 0.0))) / lam
            tmax = np.log(np.maximum(r, 2.0)) + 1.0
            t = tmax * u[None, :]
            h = tmax * (u[1] - u[0])
        else:
            t = np.broadcast_to(u[None, :], (N, grid))
            h = np.full((N, 1), u[1] - u[0])
        vals = f(t)
        lft, rgt = np.roll(vals, 1, axis=1), np.roll(vals, -1, axis=1)
        if hyperbolic:
            lft[:, 0] = np.inf
            rgt[:, -1] = np.inf
        score = np.where((vals <= lft) & (vals <= rgt), vals, np.inf)
        order = np.argsort(score, axis=1)[:, :n_refine]
        rows = np.arange(N)
        fine = np.linspace(-2.0, 2.0, 41)[None, :]  # spacing h/10 over two coarse cells each side
        for j in range(n_refine):
            i = order[:, j]
            t0 = t[rows, i][:, None]
            tf = t0 + h * fine
            t1 = tf[rows, np.argmin(f(tf), axis=1)][:, None]
            tt = _golden(f, t1 - h / 10, t1 + h / 10)
            for cand in (t0, tt):
                c, s = cs(cand)
                V = c[:, :, None] * A + s[:, :, None] * B  # (N, 2, 2)
                Fv = f_ref(V, P, Q)
                ok = np.isfinite(score[rows, i]) & (Fv < best_F)
                best_F = np.where(ok, Fv, best_F)
                best_V[ok] = V[ok]
    return best_V, best_F


def feas_err(V, jb):
    J = np.diag(np.asarray(jb, dtype=float))
    R = np.swapaxes(V, -1, -2) @ J @ V - J
    return np.abs(R).max((-2, -1)) / np.maximum(1.0, (V**2).sum((-2, -1)))


# ----------------------------------------------------------------------------------------------
# Instance generation
# ----------------------------------------------------------------------------------------------
Q_KINDS = ("scalar", "spd", "ill", "quad", "diag")
P_KINDS = ("randn", "zero", "ab0", "diag", "sym", "nearI")


def make_Q(rng, kind, n):
    eye = np.eye(4)
    if kind == "scalar":
        return np.exp(rng.uniform(np.log(0.05), np.log(5.0), n))[:, None, None] * eye
    if kind == "spd":
        A = rng.standard_normal((n, 4, 4))
        return A @ np.swapaxes(A, 1, 2) / 4 + 10 ** rng.uniform(-3, 0, n)[:, None, None] * eye
    if kind == "ill":
        U = np.linalg.qr(rng.standard_normal((n, 4, 4)))[0]
        ev = np.concatenate([np.full((n, 1), 1e-4), np.full((n, 1), 1e2),
                             10 ** rng.uniform(-4, 2, (n, 2))], axis=1)
        Q = (U * ev[:, None, :]) @ np.swapaxes(U, 1, 2)
        return 0.5 * (Q + np.swapaxes(Q, 1, 2))
    if kind == "quad":  # exact majoriser of tr(X^T C X): 2 (Z Z^T) kron C_BB + theta I
        out = np.empty((n, 4, 4))
        for m in range(n):
            Z = rng.standard_normal((2, rng.integers(1, 5)))
            Bc = rng.standard_normal((2, 2))
            C = Bc @ Bc.T + 0.01 * np.eye(2)
            out[m] = 2 * np.kron(Z @ Z.T, C) + rng.choice([1e-6, 1e-3, 1e-1]) * eye
        return out
    if kind == "diag":
        return np.einsum("ni,ij->nij", 10 ** rng.uniform(-2, 1, (n, 4)), eye)
    raise AssertionError(kind)


def make_P(rng, kind, Q):
    n = Q.shape[0]
    x, y, z, w = (rng.standard_normal(n) * 10 ** rng.uniform(-1, 1, n) for _ in range(4))
    if kind == "randn":
        P = np.stack([x, y, z, w], 1).reshape(n, 2, 2)
    elif kind == "zero":
        P = np.zeros((n, 2, 2))
    elif kind == "ab0":  # a = b = 0 on one pair of forms
        pick = rng.integers(0, 4, n)
        P = np.stack([np.stack([x, y, -y, -x], 1), np.stack([x, y, y, x], 1),
                      np.stack([x, y, y, -x], 1), np.stack([x, y, -y, x], 1)])[pick, np.arange(n)]
        P = P.reshape(n, 2, 2)
    elif kind == "diag":
        P = np.stack([x, 0 * x, 0 * x, w], 1).reshape(n, 2, 2)
    elif kind == "sym":
        P = np.stack([x, y, y, w], 1).reshape(n, 2, 2)
    elif kind == "nearI":  # JOBCD's P = M - mat(Qd vec I) with a small M
        vI = np.array([1.0, 0.0, 0.0, 1.0])
        P = 1e-3 * rng.standard_normal((n, 2, 2)) - np.swapaxes((Q @ vI).reshape(n, 2, 2), 1, 2)
    else:
        raise AssertionError(kind)
    return P


def make_instances(seed):
    rng = np.random.default_rng(seed)
    Ps, Qs, scal = [], [], []
    for qk in Q_KINDS:
        for pk in P_KINDS:
            Q = make_Q(rng, qk, N_COMBO)
            Ps.append(make_P(rng, pk, Q))
            Qs.append(Q)
            scal.append(np.full(N_COMBO, qk == "scalar"))
    # minimisers at large |mu| (up to ~35): big P, small Q; ‖P‖/λ_min(Qd) up to ~1e15, where the
    # companion eigenvalues lose the small roots unless the reversed quartic is solved too
    Q = make_Q(rng, "spd", N_LARGE) * 10 ** -rng.uniform(0, 6, N_LARGE)[:, None, None]
    scale = 10 ** rng.uniform(0, 6, N_LARGE)[:, None, None]
    Ps.append(rng.standard_normal((N_LARGE, 2, 2)) * scale)
    Qs.append(Q)
    scal.append(np.zeros(N_LARGE, bool))
    return np.concatenate(Ps), np.concatenate(Qs), np.concatenate(scal)


def t64(x):
    return torch.from_numpy(np.ascontiguousarray(x)).to(torch.float64)


def solve(jb, P, Q=None, s=None):
    jbt = torch.tensor(jb, dtype=torch.float64).expand(P.shape[0], 2)
    kw = {"Qd": t64(Q)} if Q is not None else {"s": t64(s)}
    return solve_jorth2x2(jbt, t64(P), **kw).numpy()


def solve_single(jb, P, Q=None, s=None):
    """The plain-float K = 1 path, one instance at a time."""
    if Q is not None:
        return np.array([solve_jorth2x2_single(jb, p, Qd=q) for p, q in zip(P.tolist(), Q.tolist(),
                                                                             strict=True)])
    return np.array([solve_jorth2x2_single(jb, p, s=si) for p, si in zip(P.tolist(), s.tolist(),
                                                                          strict=True)])


def rel_excess(F, Fb):
    return (F - Fb) / np.maximum(1.0, np.abs(Fb))


# ----------------------------------------------------------------------------------------------
# Main brute-force comparison: >= 10^4 instances per J_BB case
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(JCASES))
def test_against_brute_force(name):
    jb = JCASES[name]
    hyperbolic = jb[0] * jb[1] < 0
    P, Q, scal = make_instances(seed=list(JCASES).index(name))
    assert P.shape[0] >= 10_000
    V = solve(jb, P, Q)
    Vs = solve(jb, P[scal], s=Q[scal, 0, 0])  # scalar path via s=
    F = f_ref(V, P, Q)
    Fs = f_ref(Vs, P[scal], Q[scal])
    Fb = np.empty_like(F)
    for lo in range(0, P.shape[0], 2000):
        sl = slice(lo, lo + 2000)
        Fb[sl] = brute_force(hyperbolic, P[sl], Q[sl])[1]
    exc = rel_excess(F, Fb)
    exc_s = rel_excess(Fs, Fb[scal])
    assert np.all(np.isfinite(F)) and np.all(np.isfinite(Fb))
    assert exc.max() <= EXCESS_TOL, (name, exc.max(), int(exc.argmax()))
    assert exc_s.max() <= EXCESS_TOL, (name, exc_s.max())
    # the brute force is fine enough to agree with the exact solver (guards a weak reference)
    assert exc.min() >= -1e-9, (name, exc.min(), int(exc.argmin()))
    assert feas_err(V, jb).max() <= FEAS_TOL
    assert feas_err(Vs, jb).max() <= FEAS_TOL
    big = np.abs(V).max((1, 2))[-N_LARGE:]
    if hyperbolic:  # the large-|mu| family does reach large |mu|
        assert np.quantile(big, 0.9) > 1e4
    # the K = 1 plain-float path (GS-JOBCD's) on the same instances: as exact as the batched one
    V1 = solve_single(jb, P, Q)
    V1s = solve_single(jb, P[scal], s=Q[scal, 0, 0])
    F1, F1s = f_ref(V1, P, Q), f_ref(V1s, P[scal], Q[scal])
    assert rel_excess(F1, Fb).max() <= EXCESS_TOL, (name, rel_excess(F1, Fb).max())
    assert rel_excess(F1s, Fb[scal]).max() <= EXCESS_TOL, (name, rel_excess(F1s, Fb[scal]).max())
    assert np.abs(rel_excess(F1, F)).max() <= EXCESS_TOL  # agrees with the batched solver
    assert feas_err(V1, jb).max() <= FEAS_TOL and feas_err(V1s, jb).max() <= FEAS_TOL
    same_eye = np.all(V1 == np.eye(2), axis=(1, 2)) == np.all(V == np.eye(2), axis=(1, 2))
    assert same_eye.mean() > 0.999  # the prefer-identity rule picks I on the same instances


# ----------------------------------------------------------------------------------------------
# Paper's t = tanh(mu) reduction (spec 2.2), as an independent cross-check of the u-form
# ----------------------------------------------------------------------------------------------
def form_coeffs(P, Q, alpha, beta):
    a = np.einsum("i,ni->n", alpha, vec(P))
    b = np.einsum("i,ni->n", beta, vec(P))
    cq = 0.5 * np.einsum("i,nij,j->n", alpha, Q, alpha)
    d = np.einsum("i,nij,j->n", alpha, Q, beta)
    e = 0.5 * np.einsum("i,nij,j->n", beta, Q, beta)
    return a, b, cq, d, e


def p_pm(t, sign, a, b, cq, d, e):
    """p±(t) = ±(a + bt)/√(1−t²) + (w + dt)/(1−t²) − e, with 1 − t² = (1 − t)(1 + t)."""
    om = (1 - t) * (1 + t)
    return sign * (a + b * t) / np.sqrt(om) + (cq + e + d * t) / om - e


def tanh_form_min(a, b, cq, d, e):
    """min over forms ±ε of one pair via the squared quartic; both signs at every root."""
    w = cq + e
    coeffs = [d * d + a * a, 4 * w * d + 2 * a * b, 4 * w * w + 2 * d * d - a * a + b * b,
              4 * w * d - 2 * a * b, d * d - b * b]
    r = np.roots(coeffs)
    t = r.real[(np.abs(r.imag) <= 1e-7 * (1 + np.abs(r))) & (np.abs(r.real) < 1)]
    t = np.concatenate([t, [0.0]])
    return min(p_pm(t, 1, a, b, cq, d, e).min(), p_pm(t, -1, a, b, cq, d, e).min())


HYP_PAIRS = [(np.array([1.0, 0, 0, 1]), np.array([0, 1.0, 1, 0])),  # eps = ±(1, 1)
             (np.array([1.0, 0, 0, -1]), np.array([0, -1.0, 1, 0]))]  # eps = ±(1, -1)


def test_tanh_reduction_agrees_with_solver():
    rng = np.random.default_rng(11)
    n = 300
    Q = np.concatenate([make_Q(rng, k, n // 5) for k in Q_KINDS])
    Q = Q + 1e-2 * np.eye(4)  # moderate |mu|, where the t-form is accurate
    P = np.concatenate([make_P(rng, k, Q[:50]) for k in P_KINDS])
    for jb in ((1, -1), (-1, 1)):
        F = f_ref(solve(jb, P, Q), P, Q)
        Ft = np.array([min(tanh_form_min(*[c[m] for c in form_coeffs(P, Q, al, be)])
                           for al, be in HYP_PAIRS) for m in range(n)])
        assert np.max(np.abs(F - Ft) / np.maximum(1, np.abs(Ft))) <= 1e-9


def test_tanh_squaring_adds_the_other_branch():
    # every real root in (-1, 1) of the squared quartic is stationary for p+ or for p-, and
    # some are stationary only for p-: squaring introduces roots that p+ alone must reject.
    rng = np.random.default_rng(12)
    Q = make_Q(rng, "spd", 200)
    P = make_P(rng, "randn", Q)
    a, b, cq, d, e = form_coeffs(P, Q, *HYP_PAIRS[0])
    w = cq + e
    n_minus_only = 0
    for m in range(200):
        coeffs = [d[m] ** 2 + a[m] ** 2, 4 * w[m] * d[m] + 2 * a[m] * b[m],
                  4 * w[m] ** 2 + 2 * d[m] ** 2 - a[m] ** 2 + b[m] ** 2,
                  4 * w[m] * d[m] - 2 * a[m] * b[m], d[m] ** 2 - b[m] ** 2]
        r = np.roots(coeffs)
        for t in r.real[(np.abs(r.imag) < 1e-9) & (np.abs(r.real) < 1)]:
            lhs = d[m] * t * t + 2 * w[m] * t + d[m]
            rhs = (b[m] + a[m] * t) * np.sqrt((1 - t) * (1 + t))
            scale = 1e-8 * (abs(lhs) + abs(rhs) + 1)
            plus, minus = abs(lhs + rhs) <= scale, abs(lhs - rhs) <= scale
            assert plus or minus
            n_minus_only += minus and not plus
    assert n_minus_only > 0


def test_tanh_endpoints_and_precision_loss():
    # Qd > 0 gives w ± d > 0, so p± -> +inf at t -> ±1: no endpoint candidates are needed.
    rng = np.random.default_rng(5)
    Q = make_Q(rng, "spd", 50)
    P = make_P(rng, "randn", Q)
    for al, be in HYP_PAIRS:
        a, b, cq, d, e = form_coeffs(P, Q, al, be)
        for t in (1 - 1e-14, -1 + 1e-14):
            for sign in (1, -1):
                assert np.all(p_pm(t, sign, a, b, cq, d, e) > 1e9)
    # For |mu| >~ 19, tanh(mu) rounds to 1 in float64 and the t-form cannot represent the
    # minimiser; the u-form solver handles it. Form (1, 1) with Qd = I/2 (w± = 1), a = b = -m:
    # u^4 - 2m u^3 - 1 = 0, so u* ~ 2m = 2e9 (mu* ~ 21.4).
    assert math.tanh(20.0) == 1.0
    m = 1e9
    P = np.full((1, 2, 2), -m / 2)
    Q = 0.5 * np.eye(4)[None]
    V = solve((1, -1), P, s=np.array([0.5]))
    assert rel_excess(f_ref(V, P, Q), brute_force(True, P, Q)[1]).max() <= EXCESS_TOL
    assert abs(np.log(V[0, 0, 0] + V[0, 0, 1]) - np.log(2 * m)) < 1e-12


# ----------------------------------------------------------------------------------------------
# Degenerate cases, individually
# ----------------------------------------------------------------------------------------------
def _check(jb, P, Q, tol=EXCESS_TOL):
    V = solve(jb, P, Q)
    Fb = brute_force(jb[0] * jb[1] < 0, P, Q)[1]
    F = f_ref(V, P, Q)
    assert rel_excess(F, Fb).max() <= tol
    assert feas_err(V, jb).max() <= FEAS_TOL
    return V, F


def _close_to_grid(Ft, a, b, cq, d, e):
    """Ft (a t-form closed form) equals the minimum over forms ±eps found on a fine mu grid."""
    mu = np.linspace(-10, 10, 40001)[None]
    c, s = np.cosh(mu), np.sinh(mu)
    q = cq[:, None] * c * c + d[:, None] * c * s + e[:, None] * s * s
    lin = a[:, None] * c + b[:, None] * s
    Fg = np.minimum((q + lin).min(1), (q - lin).min(1))
    scale = np.maximum(1, np.abs(Fg))
    assert np.all(Ft <= Fg + 1e-12 * scale) and np.all(Fg <= Ft + 1e-6 * scale)


@pytest.mark.parametrize("jb", list(JCASES.values()))
def test_ab_zero(jb):
    rng = np.random.default_rng(1)
    Q = make_Q(rng, "spd", 400)
    x, y = rng.standard_normal((2, 400))
    for P in (np.stack([x, y, -y, -x], 1), np.stack([x, y, y, x], 1),
              np.stack([x, y, y, -x], 1), np.stack([x, y, -y, x], 1)):
        _check(jb, P.reshape(-1, 2, 2), Q)
    if jb[0] * jb[1] < 0:  # spec: a = b = 0 -> t = -d / (w + sqrt(w^2 - d^2)), both signs equal
        P = np.stack([x, y, -y, -x], 1).reshape(-1, 2, 2)
        a, b, cq, d, e = form_coeffs(P, Q, *HYP_PAIRS[0])
        assert np.abs(a).max() < 1e-15 and np.abs(b).max() < 1e-15
        w = cq + e
        t = -d / (w + np.sqrt(w * w - d * d))
        Ft = np.minimum(p_pm(t, 1, a, b, cq, d, e), p_pm(t, -1, a, b, cq, d, e))
        _close_to_grid(Ft, a, b, cq, d, e)


@pytest.mark.parametrize("jb", list(JCASES.values()))
def test_a_d_zero(jb):
    # diagonal Qd gives d = 0 on every form; P11 = -P22 gives a = 0 on forms ±(1, 1) / rotations
    rng = np.random.default_rng(2)
    n = 400
    Q = make_Q(rng, "diag", n)
    x, y, z = rng.standard_normal((3, n))
    P = np.stack([x, y, z, -x], 1).reshape(n, 2, 2)
    V, F = _check(jb, P, Q)
    if jb[0] * jb[1] < 0:  # spec: t = ∓ b / sqrt(4 w^2 + b^2) for p±
        a, b, cq, d, e = form_coeffs(P, Q, *HYP_PAIRS[0])
        assert np.abs(a).max() == 0 and np.abs(d).max() == 0
        w = cq + e
        tp = -b / np.sqrt(4 * w * w + b * b)
        Ft = np.minimum(p_pm(tp, 1, a, b, cq, d, e), p_pm(-tp, -1, a, b, cq, d, e))
        _close_to_grid(Ft, a, b, cq, d, e)
        assert np.all(F <= Ft + 1e-12 * np.maximum(1, np.abs(Ft)))


@pytest.mark.parametrize("jb", list(JCASES.values()))
def test_scalar_Q_d_zero(jb):
    rng = np.random.default_rng(3)
    n = 400
    s = np.exp(rng.uniform(-3, 2, n))
    Q = s[:, None, None] * np.eye(4)
    P = make_P(rng, "randn", Q)
    V1, F1 = _check(jb, P, Q)
    V2 = solve(jb, P, s=s)
    assert np.max(np.abs(f_ref(V2, P, Q) - F1) / np.maximum(1, np.abs(F1))) <= 1e-13
    if jb[0] * jb[1] > 0:  # closed form: F* = s - max over families of sqrt(a^2 + b^2)
        rot = np.hypot(P[:, 0, 0] + P[:, 1, 1], P[:, 1, 0] - P[:, 0, 1])
        ref = np.hypot(P[:, 0, 0] - P[:, 1, 1], P[:, 0, 1] + P[:, 1, 0])
        Fc = s - np.maximum(rot, ref)
        assert np.max(np.abs(F1 - Fc) / np.maximum(1, np.abs(Fc))) <= 1e-13
    # python float s
    V3 = solve_jorth2x2(torch.tensor([jb] * n), t64(P), s=2.0).numpy()
    _, Fb = brute_force(jb[0] * jb[1] < 0, P, 2.0 * np.eye(4)[None].repeat(n, 0))
    assert rel_excess(f_ref(V3, P, 2.0 * np.eye(4)), Fb).max() <= EXCESS_TOL


@pytest.mark.parametrize("jb", list(JCASES.values()))
def test_P_zero_and_stationary_identity(jb):
    rng = np.random.default_rng(4)
    n = 200
    # P = 0, Qd = s I: F = s ||V||^2 / 2 is minimal (and tied on O(2)) at V = I
    s = np.exp(rng.uniform(-3, 2, n))
    V = solve(jb, np.zeros((n, 2, 2)), s=s)
    assert np.array_equal(V, np.broadcast_to(np.eye(2), V.shape))
    V = solve(jb, np.zeros((n, 2, 2)), s[:, None, None] * np.eye(4))
    assert np.array_equal(V, np.broadcast_to(np.eye(2), V.shape))
    # P = 0, general SPD Qd: compare with brute force
    Q = make_Q(rng, "ill", n)
    _check(jb, np.zeros((n, 2, 2)), Q)
    # P = -mat(Qd vec I): F = ½|vec(V - I)|²_Qd + const, so V = I is the minimiser; no move
    Q = make_Q(rng, "spd", n)
    P = -np.swapaxes((Q @ np.array([1.0, 0, 0, 1])).reshape(n, 2, 2), 1, 2)
    V = solve(jb, P, Q)
    assert np.array_equal(V, np.broadcast_to(np.eye(2), V.shape))


# ----------------------------------------------------------------------------------------------
# Mixed batches, API details, dtypes, guards, errors
# ----------------------------------------------------------------------------------------------
def test_mixed_batch_matches_groups():
    rng = np.random.default_rng(6)
    n = 2000
    Q = make_Q(rng, "spd", n)
    P = make_P(rng, "randn", Q)
    jbs = np.array(list(JCASES.values()), dtype=float)[rng.integers(0, 4, n)]
    V = solve_jorth2x2(torch.tensor(jbs), t64(P), Qd=t64(Q)).numpy()
    hyp = jbs[:, 0] != jbs[:, 1]
    for mask, h in ((hyp, True), (~hyp, False)):
        Vg = solve((1, -1) if h else (1, 1), P[mask], Q[mask])
        assert np.allclose(V[mask], Vg, rtol=1e-12, atol=1e-12)
        Fb = brute_force(h, P[mask], Q[mask])[1]
        assert rel_excess(f_ref(V[mask], P[mask], Q[mask]), Fb).max() <= EXCESS_TOL
    J = np.zeros((n, 2, 2))
    J[:, [0, 1], [0, 1]] = jbs
    R = np.swapaxes(V, 1, 2) @ J @ V - J
    assert np.abs(R).max() <= FEAS_TOL * max(1, (V**2).sum((1, 2)).max())
    # scalar path with per-instance s in a mixed batch
    s = np.exp(rng.uniform(-2, 2, n))
    Vs = solve_jorth2x2(torch.tensor(jbs), t64(P), s=t64(s)).numpy()
    Vq = solve_jorth2x2(torch.tensor(jbs), t64(P), Qd=t64(s[:, None, None] * np.eye(4))).numpy()
    Qs = s[:, None, None] * np.eye(4)
    Fs, Fq = f_ref(Vs, P, Qs), f_ref(Vq, P, Qs)
    assert np.max(np.abs(Fs - Fq) / np.maximum(1, np.abs(Fq))) <= 1e-13


def test_subproblem_value_and_shapes():
    rng = np.random.default_rng(7)
    Q = make_Q(rng, "spd", 10)
    P = make_P(rng, "randn", Q)
    V = rng.standard_normal((10, 2, 2))
    F = subproblem_value(t64(V), t64(P), Qd=t64(Q)).numpy()
    assert F.shape == (10,) and np.allclose(F, f_ref(V, P, Q), rtol=1e-14, atol=1e-14)
    Fs = subproblem_value(t64(V), t64(P), s=3.0).numpy()
    assert np.allclose(Fs, f_ref(V, P, 3.0 * np.eye(4)), rtol=1e-14, atol=1e-14)
    out = solve_jorth2x2(torch.ones(0, 2), torch.zeros(0, 2, 2, dtype=torch.float64), s=1.0)
    assert out.shape == (0, 2, 2)
    jb_int = torch.tensor([[1, -1]] * 10)  # integer jb, P float64
    Vt = solve_jorth2x2(jb_int, t64(P), Qd=t64(Q))
    assert Vt.dtype == torch.float64 and Vt.shape == (10, 2, 2) and Vt.is_contiguous()


@pytest.mark.parametrize("jb", list(JCASES.values()))
def test_float32_smoke(jb):
    rng = np.random.default_rng(8)
    n = 500
    Q = make_Q(rng, "spd", n)
    P = make_P(rng, "randn", Q)
    jbt = torch.tensor([jb] * n, dtype=torch.float32)
    V = solve_jorth2x2(jbt, t64(P).float(), Qd=t64(Q).float())
    assert V.dtype == torch.float32 and torch.isfinite(V).all()
    V = V.double().numpy()
    assert feas_err(V, jb).max() <= 1e-5
    F64 = f_ref(solve(jb, P, Q), P, Q)
    assert rel_excess(f_ref(V, P, Q), F64).max() <= 1e-4
    Vs = solve_jorth2x2(jbt, t64(P).float(), s=torch.full((n,), 2.0))
    assert Vs.dtype == torch.float32 and torch.isfinite(Vs).all()


@pytest.mark.parametrize("jb", list(JCASES.values()))
def test_overflow_guard(jb):
    # minimiser far beyond the clamp on log u (u* ~ 1e300): result finite and feasible, no NaN
    P = np.array([[[-1e150, 2e149], [3e149, -1e150]], [[1e150, 0.0], [0.0, 1e150]]])
    s = np.array([1e-150, 1e-150])
    for V in (solve(jb, P, s=s), solve(jb, P, s[:, None, None] * np.eye(4))):
        assert np.all(np.isfinite(V))
        assert feas_err(V, jb).max() <= FEAS_TOL
    # companion entries beyond overflow (‖P‖/λ ~ 1e300 and 1e310): no LinAlgError, finite output
    P = np.array([[[-1e150, -1e150], [0.0, 0.0]], [[1.0, 1e150], [1e150, 1.0]]])
    for s in (1e-150, 1e-160):
        V = solve(jb, P, s=np.full(2, s))
        assert np.all(np.isfinite(V)) and feas_err(V, jb).max() <= FEAS_TOL
    # huge Qd: F overflows at some candidates, which must be discarded without NaN
    Q = 1e305 * np.eye(4)[None].repeat(2, 0)
    V = solve(jb, np.ones((2, 2, 2)), Q)
    assert np.all(np.isfinite(V)) and feas_err(V, jb).max() <= FEAS_TOL


def test_bad_inputs():
    P = torch.zeros(3, 2, 2, dtype=torch.float64)
    Q = torch.eye(4, dtype=torch.float64).expand(3, 4, 4)
    jb = torch.tensor([[1, -1]] * 3)
    with pytest.raises(ValueError, match="exactly one"):
        solve_jorth2x2(jb, P)
    with pytest.raises(ValueError, match="exactly one"):
        solve_jorth2x2(jb, P, Qd=Q, s=1.0)
    with pytest.raises(ValueError, match="P must"):
        solve_jorth2x2(jb, torch.zeros(3, 4, dtype=torch.float64), s=1.0)
    with pytest.raises(ValueError, match="floating"):
        solve_jorth2x2(jb, torch.zeros(3, 2, 2, dtype=torch.int64), s=1.0)
    with pytest.raises(ValueError, match="Qd must"):
        solve_jorth2x2(jb, P, Qd=torch.eye(3, dtype=torch.float64).expand(3, 3, 3))
    with pytest.raises(ValueError, match="Qd must"):
        solve_jorth2x2(jb, P, Qd=torch.eye(4, dtype=torch.float64).expand(2, 4, 4))
    with pytest.raises(ValueError, match="jb entries"):
        solve_jorth2x2(torch.tensor([[1, 0]] * 3), P, s=1.0)
    with pytest.raises(ValueError, match="jb entries"):
        solve_jorth2x2(torch.tensor([[1.0, 2.0]] * 3), P, s=1.0)
    with pytest.raises(ValueError, match="jb must"):
        solve_jorth2x2(torch.tensor([[1, -1]] * 2), P, s=1.0)
    for bad in (0.0, -1.0, float("nan"), torch.tensor([1.0, 0.0, 1.0]), torch.tensor(-2.0)):
        with pytest.raises(ValueError, match="s must be positive"):
            solve_jorth2x2(jb, P, s=bad)
    with pytest.raises(ValueError, match="s must be a scalar"):
        solve_jorth2x2(jb, P, s=torch.ones(4))
    with pytest.raises(ValueError, match="V must"):
        subproblem_value(torch.zeros(2, 2, 2), P, s=1.0)
