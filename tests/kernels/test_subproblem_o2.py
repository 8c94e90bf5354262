"""The exact O(2) subproblem solver against an independent brute force.

Brute force (written without the solver's one-angle algebra): for both families
``Vrot(t) = [[c, s], [-s, c]]`` and ``Vref(t) = [[-c, s], [s, c]]``, ``V(t) = c M + s N`` is built
from the two basis matrices and ``K(V) = 1/2 vec(V)^T Qt vec(V) + <V, P> + h(V Z)`` is evaluated
directly (own penalty formulas) on

* a uniform grid of ``GRID`` angles (evaluated in float32, only to pick cells),
* golden-section refinement (``GOLDEN_IT`` steps) in the cells around the ``TOP`` best grid points,
* every knot angle: the zeros ``(c, s) = +-(-y_i, x_i)/rho_i`` of each entry of V Z and, for
  capped-l1, the angles where ``|(V Z)_ij| = tau`` (a grid misses l0 / nonnegativity optima there),
* for l0 and nonnegativity (h piecewise constant), the full objective at the local minima of the
  smooth part, found by its own grid + golden section (the feasible set of the nonnegativity problem
  can be an arc narrower than a grid cell; on each arc the minimum is there or at a knot).

The 10^4-instance sweeps per term use ``GRID = 2^11`` (a 2^14-2^15 grid over 10^4 instances with
r up to 50 does not fit the 90 s budget on 2 cores); ``test_exact_against_dense_grid`` repeats the
check with a 2^15 grid on fewer, smaller instances.

For the discontinuous terms (l0, nonneg) entries of V Z with modulus ``<= 1e-12 max(1,
max_j ||Z_:j||)`` count as 0 (the solver's convention, also applied when evaluating the solver's
answer); l1 / capped-l1 are evaluated exactly. The assertion is
``(K_ours - K_brute) / max(1, |K_brute|) <= 1e-10``.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch

from orthoplug.nonsmooth import (
    L0,
    L1,
    CappedL1,
    NonNegative,
    PiecewiseAffine,
    SeparableTerm,
    Zero,
)
from orthoplug.subproblems.o2 import o2_objective, solve_o2, solve_o2_single, solve_polar

GRID = 2048
TOP = 6
GOLDEN_IT = 36
SNAP = 1e-12
TOL = 1e-10
LAMS = (1e-3, 1e-1, 1.0, 10.0)
TAUS = (0.3, 1.0, 0.1, 0.5)
# (r_low, r_high, share of the instances)
R_BUCKETS = ((1, 4, 0.4), (5, 12, 0.34), (13, 25, 0.18), (26, 50, 0.08))
PER_LAM = 2500  # x 4 lambdas = 10^4 instances per term

EYE4 = np.eye(4)


@pytest.fixture(autouse=True)
def _float64_single_thread():
    """float64 defaults; one intra-op thread (many small ops: extra threads only add contention)."""
    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    yield
    torch.set_default_dtype(dtype)
    torch.set_num_threads(threads)


# ----------------------------------------------------------------------------------------------
# independent reference pieces
# ----------------------------------------------------------------------------------------------
def penalty(kind, lam, tau):
    """sum_j h(U[..., j]) as a torch function of (U, thr) (own formulas, not the package's).

    For the discontinuous terms, |u| <= thr counts as 0 (thr broadcasts against U[..., 0])."""
    if kind == "zero":
        return None
    if kind == "l1":
        return lambda U, thr: lam * U.abs().sum(-1)
    if kind == "l0":
        return lambda U, thr: lam * (U.abs() - thr[..., None]).clamp_(min=0.0).sign_().sum(-1)
    if kind == "capped":
        return lambda U, thr: lam * U.abs().clamp_(max=tau).sum(-1)
    if kind == "pospart":
        return lambda U, thr: lam * U.clamp(min=0.0).sum(-1)
    if kind == "nonneg":

        def nonneg(U, thr):
            bad = U.amin(-1) < -thr
            return torch.where(bad, math.inf, 0.0).to(U.dtype)

        return nonneg
    raise AssertionError(kind)


def term(kind, lam, tau):
    return {
        "zero": lambda: Zero(),
        "l1": lambda: L1(lam),
        "l0": lambda: L0(lam),
        "capped": lambda: CappedL1(lam, tau),
        "nonneg": lambda: NonNegative(),
        "pospart": lambda: PositivePart(lam),
    }[kind]()


class PositivePart(SeparableTerm):
    """A term defined outside the package: lam * max(u, 0) (one affine change at 0)."""

    def __init__(self, lam):
        self.lam = float(lam)

    def _params(self):
        return (self.lam,)

    def elementwise(self, U):
        return self.lam * U.clamp(min=0.0)

    def subgradient(self, X):
        return self.lam * (X > 0).to(X.dtype)

    def prox(self, X, t):
        return torch.where(X > t * self.lam, X - t * self.lam, torch.where(X < 0, X, 0.0))

    @property
    def piecewise(self):
        lam = self.lam
        return PiecewiseAffine((0.0,), (0.0, lam), (0.0, 0.0), (True, True), (0.0,), (True,))


def family_matrices(t, e):
    """V(t) for e = +1 (rotation) or -1 (reflection); t of any shape -> (..., 2, 2)."""
    c, s = torch.cos(t), torch.sin(t)
    if e > 0:
        return torch.stack([torch.stack([c, s], -1), torch.stack([-s, c], -1)], -2)
    return torch.stack([torch.stack([-c, s], -1), torch.stack([s, c], -1)], -2)


def snap_threshold(Z):
    K, _, r = Z.shape
    return SNAP * torch.clamp(
        Z.norm(dim=1).amax(-1) if r else torch.zeros(K, dtype=Z.dtype), min=1.0
    )


def evaluate(V, P, Z, Qt, pen, thr):
    """K(V) straight from the definition; V (K, G, 2, 2), P (K,2,2), Z (K,2,r), Qt (K,4,4)."""
    v = V.transpose(-1, -2).reshape(*V.shape[:-2], 4)  # column-major vec
    quad = 0.5 * torch.einsum("kgi,kij,kgj->kg", v, Qt, v)
    lin = (V * P[:, None]).sum((-2, -1))
    out = quad + lin
    if pen is not None and Z.shape[-1] > 0:
        U = (V @ Z[:, None]).flatten(-2)
        out = out + pen(U, thr[:, None])
    return out


class Family:
    """phi(t) = K(c M + s N) for one family, expanded once: V(t) = c M + s N is linear in (c, s)."""

    def __init__(self, P, Z, Qt, e, pen, thr):
        M = torch.tensor([[float(e), 0.0], [0.0, 1.0]], dtype=torch.float64)  # V(t) = c M + s N
        N = torch.tensor([[0.0, 1.0], [-float(e), 0.0]], dtype=torch.float64)
        vm, vn = M.T.reshape(4), N.T.reshape(4)
        Qs = 0.5 * (Qt + Qt.transpose(-1, -2))
        self.qcc = 0.5 * torch.einsum("i,kij,j->k", vm, Qs, vm)[:, None]
        self.qcs = torch.einsum("i,kij,j->k", vm, Qs, vn)[:, None]
        self.qss = 0.5 * torch.einsum("i,kij,j->k", vn, Qs, vn)[:, None]
        self.lc = (M * P).sum((-2, -1))[:, None]
        self.ls = (N * P).sum((-2, -1))[:, None]
        self.X = (M @ Z).reshape(Z.shape[0], -1)  # V Z = c (M Z) + s (N Z)
        self.Y = (N @ Z).reshape(Z.shape[0], -1)
        self.pen, self.thr = pen, thr

    def smooth(self, t, rows=slice(None)):
        """The quadratic + linear part of phi at angles t of shape (K, G) (instances ``rows``)."""
        c, s = torch.cos(t), torch.sin(t)
        out = self.qcc[rows] * c * c + self.qcs[rows] * c * s + self.qss[rows] * s * s
        return out + self.lc[rows] * c + self.ls[rows] * s

    def __call__(self, t, dtype=torch.float64, rows=slice(None)):
        """phi at angles t of shape (K, G) (instances ``rows``)."""
        out = self.smooth(t, rows)
        if self.pen is not None and self.X.shape[-1] > 0:
            cs = torch.stack([torch.cos(t), torch.sin(t)], -1).to(dtype)
            XY = torch.stack([self.X[rows], self.Y[rows]], 1).to(dtype)
            U = torch.bmm(cs, XY)  # V(t) Z, flattened
            out = out + self.pen(U, self.thr[rows, None].to(dtype)).to(out.dtype)
        return out

    def knots(self, kind, tau):
        """Angles where an entry of V(t) Z vanishes (and, capped, where it equals +-tau); (K, m)."""
        X, Y = self.X.numpy(), self.Y.numpy()
        out = [np.arctan2(X, -Y), np.arctan2(-X, Y)]  # (c, s) parallel to +-(-Y, X)
        if kind == "capped":
            rho, psi = np.hypot(X, Y), np.arctan2(Y, X)
            with np.errstate(invalid="ignore", divide="ignore"):
                dd = np.arccos(np.clip(tau / rho, -1.0, 1.0))
            for base in (psi, psi + np.pi):
                for sgn in (-1.0, 1.0):
                    out.append(np.where(rho > tau, base + sgn * dd, 0.0))
        return torch.from_numpy(np.concatenate(out, -1))


def golden(fun, lo, hi, iters):
    """Vectorised golden-section search on [lo, hi]; returns (best value seen, its argument)."""
    gr = (math.sqrt(5.0) - 1.0) / 2.0
    x1 = hi - gr * (hi - lo)
    x2 = lo + gr * (hi - lo)
    f1, f2 = fun(x1), fun(x2)
    best = torch.minimum(f1, f2)
    arg = torch.where(f1 <= f2, x1, x2)
    for _ in range(iters):
        left = f1 < f2  # minimum in [lo, x2]
        hi = torch.where(left, x2, hi)
        lo = torch.where(left, lo, x1)
        nx1 = torch.where(left, hi - gr * (hi - lo), x2)
        nx2 = torch.where(left, x1, lo + gr * (hi - lo))
        xn = torch.where(left, nx1, nx2)
        fn = fun(xn)
        f1, f2 = torch.where(left, fn, f1), torch.where(left, f2, fn)
        x1, x2 = nx1, nx2
        arg = torch.where(fn < best, xn, arg)
        best = torch.minimum(best, fn)
    return best, arg


def brute_force(inst, kind, lam, tau, grid=GRID, use_knots=True):
    """min over O(2) of K(V); returns (K,) numpy values (all from float64 evaluations).

    grid (float32, only to pick cells) + golden section around the TOP best grid points + every
    knot angle; for l0 / nonneg, whose h is piecewise constant (0 / lam, 0 / inf), also the local
    minima of the smooth part (grid + golden section on it), as on every arc the minimum is there
    or at an end of the arc, i.e. at a knot.
    """
    P, Z, Qt = inst["P"], inst["Z"], inst["Qt"]
    K, _, r = Z.shape
    pen = penalty(kind, lam, tau)
    thr = snap_threshold(Z)
    h = 2 * math.pi / grid
    tg = torch.arange(grid, dtype=torch.float64) * h
    best = torch.full((K,), math.inf, dtype=torch.float64)
    per = max(1, 400_000 // (grid * max(2 * r, 4)))  # small, cache-friendly grid chunks
    for e in (1, -1):
        fam = Family(P, Z, Qt, e, pen, thr)
        top = torch.empty(K, TOP, dtype=torch.int64)
        for k0 in range(0, K, per):
            sl = slice(k0, min(K, k0 + per))
            vals = fam(tg.expand(sl.stop - k0, grid), dtype=torch.float32, rows=sl)
            vals = torch.where(torch.isfinite(vals), vals, torch.full_like(vals, 1e300))
            top[sl] = torch.topk(vals, TOP, dim=1, largest=False).indices
        cells = tg[top]
        bk = fam(cells).amin(1)
        bk = torch.minimum(bk, golden(fam, cells - h, cells + h, GOLDEN_IT)[0].amin(1))
        if use_knots and kind != "zero" and r > 0:
            bk = torch.minimum(bk, fam(fam.knots(kind, tau)).amin(1))
            if kind in ("l0", "nonneg"):
                gs = min(grid, 4096)
                ts = torch.arange(gs, dtype=torch.float64) * (2 * math.pi / gs)
                sm = fam.smooth(ts.expand(K, gs))
                locmin = (sm <= sm.roll(1, 1)) & (sm <= sm.roll(-1, 1))
                sm = torch.where(locmin, sm, torch.full_like(sm, math.inf))
                cells = ts[torch.topk(sm, 4, dim=1, largest=False).indices]
                hs = 2 * math.pi / gs
                _, arg = golden(fam.smooth, cells - hs, cells + hs, GOLDEN_IT)
                bk = torch.minimum(bk, fam(arg).amin(1))
        best = torch.minimum(best, bk)
    return best.numpy()


def ours_value(V, inst, kind, lam, tau):
    P, Z, Qt = inst["P"], inst["Z"], inst["Qt"]
    return evaluate(V[:, None], P, Z, Qt, penalty(kind, lam, tau), snap_threshold(Z))[:, 0].numpy()


# ----------------------------------------------------------------------------------------------
# random instances
# ----------------------------------------------------------------------------------------------
def make_instances(rng, K, r_lo, r_hi, nonneg):
    """Mixed instances, Z padded with zero columns to r_hi (zero columns are a test case too)."""
    R = r_hi
    r = rng.integers(r_lo, r_hi + 1, size=K)
    colmask = np.arange(R)[None, :] < r[:, None]
    zkind = rng.integers(0, 4, size=K)  # gauss, sparse, identity-like, parallel columns
    zscale = rng.choice([0.3, 1.0, 3.0], size=K)[:, None, None]
    G = rng.standard_normal((K, 2, R)) * zscale
    Zs = G * (rng.random((K, 2, R)) < 0.5)
    # identity-like: each row is 0 or a signed unit vector (rows of X0 = I(n, r))
    Zi = np.zeros((K, 2, R))
    for row in (0, 1):
        pos = rng.integers(0, R, size=K)
        on = rng.random(K) < 0.8
        sg = rng.choice([-1.0, 1.0], size=K)
        Zi[np.arange(K), row, pos] = np.where(on, sg, 0.0)
    vdir = rng.standard_normal((K, 2, 1))
    Zp = vdir * rng.standard_normal((K, 1, R)) * zscale
    Z = np.select([zkind[:, None, None] == j for j in range(4)], [G, Zs, Zi, Zp])
    Z = Z * colmask[:, None, :]
    if nonneg:
        Z = np.abs(Z)
    # curvature: sigma I, exact SPCA curvature, PSD, indefinite
    qkind = rng.integers(0, 4, size=K)
    alpha = 1e-5
    sig = rng.uniform(-2.0, 3.0, size=K)
    Qs = sig[:, None, None] * EYE4
    L = rng.standard_normal((K, 2, 2))
    C = L @ L.transpose(0, 2, 1) * rng.choice([0.1, 1.0, 5.0], size=K)[:, None, None]
    ZZ = Z @ Z.transpose(0, 2, 1)
    Qspca = -2.0 * np.einsum("kab,kcd->kacbd", ZZ, C).reshape(K, 4, 4) + alpha * EYE4
    B = rng.standard_normal((K, 4, 4))
    Qpsd = B @ B.transpose(0, 2, 1) * rng.choice([0.1, 1.0, 5.0], size=K)[:, None, None]
    A = rng.standard_normal((K, 4, 4)) * rng.choice([0.1, 1.0, 5.0], size=K)[:, None, None]
    Qind = A + A.transpose(0, 2, 1)
    Qt = np.select([qkind[:, None, None] == j for j in range(4)], [Qs, Qspca, Qpsd, Qind])
    # linear term: plain Gaussian, or OBCD-like P = G - mat(Qt vec I) with a small G
    Pg = rng.standard_normal((K, 2, 2)) * rng.choice([0.1, 1.0, 10.0], size=K)[:, None, None]
    vecI = np.array([1.0, 0.0, 0.0, 1.0])
    QI = (Qt @ vecI).reshape(K, 2, 2).transpose(0, 2, 1)  # mat() of a column-major vec
    Pobcd = 0.1 * rng.standard_normal((K, 2, 2)) - QI
    P = np.where((rng.random(K) < 0.7)[:, None, None], Pg, Pobcd)
    return {
        "P": torch.from_numpy(P),
        "Z": torch.from_numpy(Z),
        "Qt": torch.from_numpy(Qt),
    }


def instance_batches(kind, seed):
    rng = np.random.default_rng(seed)
    for li, lam in enumerate(LAMS):
        tau = TAUS[li]
        for r_lo, r_hi, share in R_BUCKETS:
            K = int(round(PER_LAM * share))
            yield lam, tau, make_instances(rng, K, r_lo, r_hi, kind == "nonneg")


# ----------------------------------------------------------------------------------------------
# the main comparison
# ----------------------------------------------------------------------------------------------
def orth_error(V):
    E = V.transpose(-1, -2) @ V - torch.eye(2)
    return float(E.abs().amax()) if V.numel() else 0.0


@pytest.mark.parametrize("kind", ["zero", "l1", "l0", "capped", "nonneg"])
def test_exact_against_brute_force(kind):
    """>= 10^4 instances per term, batched (solve_o2) and one at a time (solve_o2_single)."""
    seed = {"zero": 1, "l1": 2, "l0": 3, "capped": 4, "nonneg": 5}[kind]
    worst = -math.inf
    n_inst = 0
    n_ref = 0
    t_solve = 0.0
    for lam, tau, inst in instance_batches(kind, seed):
        h = term(kind, lam, tau)
        t = time.perf_counter()
        V = solve_o2(inst["P"], inst["Z"], h, Qt=inst["Qt"])
        t_solve += time.perf_counter() - t
        assert V.shape == inst["P"].shape
        assert orth_error(V) <= 1e-14
        ko = ours_value(V, inst, kind, lam, tau)
        kb = brute_force(inst, kind, lam, tau)
        assert np.all(np.isfinite(kb)) or kind == "nonneg"
        feas = np.isfinite(kb)
        assert np.all(np.isfinite(ko[feas])), "solver missed every feasible point"
        exc = (ko[feas] - kb[feas]) / np.maximum(1.0, np.abs(kb[feas]))
        worst = max(worst, float(exc.max()))
        assert exc.max() <= TOL, f"{kind} lam={lam}: excess {exc.max():.3e} over brute force"
        if kind == "nonneg":
            VZ = V @ inst["Z"]
            assert float(VZ[torch.from_numpy(feas)].amin()) >= -1e-12
        # the solver's own objective agrees with the reference evaluation
        snap = SNAP if kind in ("l0", "nonneg") else 0.0
        ko2 = o2_objective(V, inst["P"], inst["Z"], h, Qt=inst["Qt"], snap=snap).numpy()
        same = np.isfinite(ko)
        assert np.array_equal(np.isfinite(ko2), same)
        assert np.allclose(ko2[same], ko[same], rtol=1e-12, atol=1e-12)
        # the one-instance path (solve_o2_single, OBCD's hot loop) on every instance
        P1, Z1, Q1 = inst["P"].numpy(), inst["Z"].numpy(), inst["Qt"].numpy()
        V1 = np.stack([solve_o2_single(P1[k], Z1[k], h, Qt=Q1[k]) for k in range(P1.shape[0])])
        k1 = ours_value(torch.from_numpy(V1), inst, kind, lam, tau)
        assert np.all(np.isfinite(k1[feas]))
        exc1 = (k1[feas] - kb[feas]) / np.maximum(1.0, np.abs(kb[feas]))
        assert exc1.max() <= TOL, f"{kind} lam={lam}: one-instance path {exc1.max():.3e} over"
        worst = max(worst, float(exc1.max()))
        n_inst += V.shape[0]
        n_ref += int(np.sum(np.linalg.det(V.numpy()) < 0))
    assert n_inst >= 10_000
    assert 0 < n_ref < n_inst  # both families occur
    print(
        f"\n[o2 {kind}] {n_inst} instances, max relative excess over brute force {worst:.2e}, "
        f"{n_ref} reflections, solver time {t_solve:.2f} s"
    )


@pytest.mark.parametrize("kind", ["zero", "l1", "l0", "capped", "nonneg"])
def test_exact_against_dense_grid(kind):
    """Fewer instances, 2^15-point grid."""
    rng = np.random.default_rng(20 + ["zero", "l1", "l0", "capped", "nonneg"].index(kind))
    for lam, tau in ((0.05, 0.2), (3.0, 0.7)):
        inst = make_instances(rng, 100, 1, 10, kind == "nonneg")
        h = term(kind, lam, tau)
        V = solve_o2(inst["P"], inst["Z"], h, Qt=inst["Qt"])
        ko = ours_value(V, inst, kind, lam, tau)
        kb = brute_force(inst, kind, lam, tau, grid=2**15)
        feas = np.isfinite(kb)
        exc = (ko[feas] - kb[feas]) / np.maximum(1.0, np.abs(kb[feas]))
        assert exc.max() <= TOL


def test_term_defined_outside_the_package():
    """The solver only reads the term's piecewise description: a new term needs no solver change."""
    rng = np.random.default_rng(30)
    for lam in (0.1, 2.0):
        inst = make_instances(rng, 300, 1, 12, False)
        V = solve_o2(inst["P"], inst["Z"], PositivePart(lam), Qt=inst["Qt"])
        ko = ours_value(V, inst, "pospart", lam, 1.0)
        kb = brute_force(inst, "pospart", lam, 1.0)
        assert np.max((ko - kb) / np.maximum(1.0, np.abs(kb))) <= TOL


def test_knots_matter_for_l0_and_nonneg():
    """Sanity of the reference: without the knot evaluations the grid misses l0/nonneg optima."""
    rng = np.random.default_rng(11)
    for kind in ("l0", "nonneg"):
        inst = make_instances(rng, 200, 2, 6, kind == "nonneg")
        with_k = brute_force(inst, kind, 1.0, 1.0, grid=1024)
        without = brute_force(inst, kind, 1.0, 1.0, grid=1024, use_knots=False)
        gap = without - with_k
        assert np.nanmax(np.where(np.isfinite(gap), gap, 1.0)) > 1e-3
        V = solve_o2(inst["P"], inst["Z"], term(kind, 1.0, 1.0), Qt=inst["Qt"])
        ko = ours_value(V, inst, kind, 1.0, 1.0)
        assert np.all(ko <= with_k + TOL * np.maximum(1.0, np.abs(with_k)))


def test_reference_detects_a_wrong_answer():
    """The comparison can fail: the best rotation alone is not good enough on these instances."""
    rng = np.random.default_rng(12)
    inst = make_instances(rng, 400, 3, 8, False)
    h = L1(0.1)
    V = solve_o2(inst["P"], inst["Z"], h, Qt=inst["Qt"])
    refl = np.linalg.det(V.numpy()) < 0
    assert refl.sum() > 20
    kb = brute_force(inst, "l1", 0.1, 1.0, grid=1024)
    # replace each reflection by the identity: must exceed the tolerance somewhere
    V2 = torch.where(torch.from_numpy(refl)[:, None, None], torch.eye(2), V)
    k2 = ours_value(V2, inst, "l1", 0.1, 1.0)
    assert np.max((k2 - kb) / np.maximum(1.0, np.abs(kb))) > 1e-3


# ----------------------------------------------------------------------------------------------
# paper examples (spec section 3.7 / section 8 item 7)
# ----------------------------------------------------------------------------------------------
def test_paper_example_30_needs_a_reflection():
    # ||V - A||_F^2 = 1/2 vec(V)^T (2 I4) vec(V) + <V, -2A> + ||A||_F^2
    A = torch.tensor([[1.0, 0.0], [-1.0, -1.0]])
    P = (-2.0 * A)[None]
    Z = torch.eye(2)[None]
    for kw in ({"Qt": 2.0 * torch.eye(4)[None]}, {"s": 2.0}):
        V = solve_o2(P, Z, Zero(), **kw)
        val = float(o2_objective(V, P, Z, Zero(), **kw)[0]) + float((A * A).sum())
        assert abs(val - (5.0 - 2.0 * math.sqrt(5.0))) <= 1e-13  # 0.5279
        assert float(torch.linalg.det(V[0])) < 0
        assert torch.allclose(V[0], _best_reflection(A), atol=1e-14)
    # best rotation is 3.0 (value at t = pi/2)
    t = torch.linspace(0, 2 * math.pi, 100001)
    rot = family_matrices(t, 1)
    assert abs(float(((rot - A) ** 2).sum((-2, -1)).min()) - 3.0) < 1e-8


def _best_reflection(A):
    # min ||V - A||^2 over reflections [[-c, s], [s, c]]: maximise <V, A> = -2c - s
    c, s = -2.0 / math.sqrt(5.0), -1.0 / math.sqrt(5.0)
    return torch.tensor([[-c, s], [s, c]])


def test_paper_example_31_identity_is_optimal():
    # ||V - B||^2 + 5 ||V||_1 = 1/2 vec(V)^T (2 I4) vec(V) + <V, -2B> + 5 ||V I2||_1 + ||B||^2
    B = torch.tensor([[1.0, 0.0], [1.0, 2.0]])
    P = (-2.0 * B)[None]
    Z = torch.eye(2)[None]
    for kw in ({"Qt": 2.0 * torch.eye(4)[None]}, {"s": 2.0}):
        V = solve_o2(P, Z, L1(5.0), **kw)
        val = float(o2_objective(V, P, Z, L1(5.0), **kw)[0]) + float((B * B).sum())
        assert torch.equal(V[0], torch.eye(2))  # rotation family, V = I exactly
        assert abs(val - 12.0) <= 1e-13
    t = torch.linspace(0, 2 * math.pi, 200001)
    ref = family_matrices(t, -1)
    fref = ((ref - B) ** 2).sum((-2, -1)) + 5 * ref.abs().sum((-2, -1))
    assert float(fref.min()) >= 16.0 - 1e-9  # reflections are worse (spec section 8 item 7)


# ----------------------------------------------------------------------------------------------
# h = 0, scalar Q: polar rule
# ----------------------------------------------------------------------------------------------
def test_polar_general_k():
    g = torch.Generator().manual_seed(3)
    for k in range(2, 9):
        P = torch.randn(50, k, k, generator=g) * 3
        V = solve_polar(P)
        assert V.shape == P.shape
        E = V.transpose(-1, -2) @ V - torch.eye(k)
        assert float(E.abs().max()) <= 1e-13
        nuc = torch.linalg.matrix_norm(P, ord="nuc")
        assert float(((V * P).sum((-2, -1)) + nuc).abs().max()) <= 1e-12 * max(1.0, nuc.max())
        # random orthogonal matrices never do better
        Qr, _ = torch.linalg.qr(torch.randn(200, k, k, generator=g))
        vals = (Qr[:, None] * P[None]).sum((-2, -1))
        assert bool((vals >= -nuc[None] - 1e-12).all())
    P = torch.randn(200, 2, 2, generator=g)
    for sig in (0.0, 1.5):
        Vp = solve_polar(P)
        Vo = solve_o2(P, torch.randn(200, 2, 3, generator=g), Zero(), s=sig)
        kp = (Vp * P).sum((-2, -1))
        ko = (Vo * P).sum((-2, -1))
        assert float((ko - kp).abs().max()) <= 1e-13
        assert float((Vo - Vp).abs().max()) <= 1e-12
    with pytest.raises(ValueError):
        solve_polar(torch.randn(3, 2, 3))


# ----------------------------------------------------------------------------------------------
# API details
# ----------------------------------------------------------------------------------------------
def test_batching_matches_single_calls_and_scalar_matches_Qt():
    rng = np.random.default_rng(5)
    inst = make_instances(rng, 40, 3, 7, False)
    for h in (L1(0.3), L0(0.5), CappedL1(1.0, 0.4), Zero()):
        Vb = solve_o2(inst["P"], inst["Z"], h, Qt=inst["Qt"])
        vb = o2_objective(Vb, inst["P"], inst["Z"], h, Qt=inst["Qt"], snap=SNAP)
        for k in range(0, 40, 7):
            V1 = solve_o2(inst["P"][k], inst["Z"][k], h, Qt=inst["Qt"][k])
            assert V1.shape == (2, 2)
            v1 = o2_objective(V1, inst["P"][k], inst["Z"][k], h, Qt=inst["Qt"][k], snap=SNAP)
            assert abs(float(v1) - float(vb[k])) <= 1e-12 * max(1.0, abs(float(v1)))
        sig = torch.from_numpy(rng.uniform(-1, 2, size=40))
        Vs = solve_o2(inst["P"], inst["Z"], h, s=sig)
        Vq = solve_o2(inst["P"], inst["Z"], h, Qt=sig[:, None, None] * torch.eye(4))
        ks = o2_objective(Vs, inst["P"], inst["Z"], h, s=sig, snap=SNAP)
        kq = o2_objective(Vq, inst["P"], inst["Z"], h, s=sig, snap=SNAP)
        assert float((ks - kq).abs().max()) <= 1e-12


def test_identity_preferred_and_no_feasible_point():
    # X0 = I(n, r)-like rows, OBCD-like P = -(sigma + alpha) I: V = I is optimal (ties with swaps)
    Z = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]]).repeat(4, 1, 1)
    P = -1.00001 * torch.eye(2).repeat(4, 1, 1)
    for h in (Zero(), L0(1.0), L1(1.0), NonNegative(), CappedL1(1.0, 0.5)):
        V = solve_o2(P, Z, h, s=1.00001)
        assert torch.equal(V, torch.eye(2).expand(4, 2, 2))
    # nonnegativity infeasible for every V: Z has columns z and -z (z != 0), and V z >= 0,
    # -V z >= 0 would force V z = 0
    Zbad = torch.tensor([[[1.0, -1.0], [0.0, 0.0]]])
    V = solve_o2(torch.randn(1, 2, 2), Zbad, NonNegative(), s=0.0)
    assert torch.equal(V, torch.eye(2)[None])


def test_dtype_device_and_empty():
    P = torch.randn(5, 2, 2, dtype=torch.float32)
    Z = torch.randn(5, 2, 4, dtype=torch.float32)
    V = solve_o2(P, Z, L1(0.1), s=1.0)
    assert V.dtype == torch.float32 and V.shape == (5, 2, 2)
    V = solve_o2(torch.zeros(0, 2, 2), torch.zeros(0, 2, 3), L0(1.0), s=1.0)
    assert V.shape == (0, 2, 2)
    Q = torch.eye(4).repeat(3, 1, 1)
    V = solve_o2(torch.randn(3, 2, 2), torch.zeros(3, 2, 0), L1(1.0), Qt=Q)
    assert V.shape == (3, 2, 2)
    Vn = solve_o2(np.random.randn(2, 2, 2), np.random.randn(2, 2, 3), L1(1.0), s=0.5)
    assert isinstance(Vn, torch.Tensor)


@pytest.mark.parametrize(
    "args, msg",
    [
        ((torch.randn(3, 2, 3), torch.randn(3, 2, 4), L1(1.0)), "P must have shape"),
        ((torch.randn(3, 2, 2), torch.randn(4, 2, 4), L1(1.0)), "Z must have shape"),
        ((torch.randn(3, 2, 2), torch.randn(3, 3, 4), L1(1.0)), "Z must have shape"),
        ((torch.randn(3, 2, 2), torch.randn(3, 2, 4), "l1"), "SeparableTerm"),
    ],
)
def test_validation(args, msg):
    with pytest.raises(ValueError, match=msg):
        solve_o2(*args, s=1.0)


def test_validation_Q_and_s():
    P, Z = torch.randn(3, 2, 2), torch.randn(3, 2, 4)
    with pytest.raises(ValueError, match="exactly one"):
        solve_o2(P, Z, L1(1.0))
    with pytest.raises(ValueError, match="exactly one"):
        solve_o2(P, Z, L1(1.0), Qt=torch.eye(4).repeat(3, 1, 1), s=1.0)
    with pytest.raises(ValueError, match="Qt must have shape"):
        solve_o2(P, Z, L1(1.0), Qt=torch.eye(3).repeat(3, 1, 1))
    with pytest.raises(ValueError, match="s must be"):
        solve_o2(P, Z, L1(1.0), s=torch.ones(4))
    with pytest.raises(ValueError, match="NaN"):
        solve_o2(P * math.nan, Z, L1(1.0), s=1.0)
    with pytest.raises(ValueError, match="snap"):
        o2_objective(torch.eye(2).repeat(3, 1, 1), P, Z, L1(1.0), s=1.0, snap=-1.0)
