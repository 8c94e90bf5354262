"""JOBCD (GS, J, VR) against closed forms, brute force and its own invariants."""

from __future__ import annotations

import io
import math
from functools import partial

import autograd.numpy as anp
import geoopt
import numpy as np
import pymanopt
import pytest
import torch

from orthoplug.adapters import geoopt as go
from orthoplug.adapters import pymanopt as pm
from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry, JOrthogonalGeometry
from orthoplug.oracles import FiniteSumOracle, FunctionOracle, NonFiniteError, QuadraticOracle
from orthoplug.problems.hevp import make_spd, trace_min_certificate
from orthoplug.solvers.jobcd import GSJOBCD, JJOBCD, VRJJOBCD
from orthoplug.solvers.pairs import random_matching


def _unsorted(n, seed=0):
    return list(np.random.default_rng(seed).permutation([1.0] * (n // 2) + [-1.0] * (n - n // 2)))


def _o11_brute_force(c, d):
    """min over O(1,1) of tr(YᵀCYD): dense μ grid on the 4 components, then golden refinement."""
    best = np.inf
    mus = np.linspace(-12, 12, 48001)
    for e1 in (1, -1):
        for e2 in (1, -1):
            ch, sh = np.cosh(mus), np.sinh(mus)
            y = np.empty((mus.size, 2, 2))
            y[:, 0, 0], y[:, 0, 1], y[:, 1, 0], y[:, 1, 1] = e1 * ch, e1 * sh, e2 * sh, e2 * ch
            vals = np.einsum("kji,jl,klm,mi->k", y, c, y, d)
            i = int(np.argmin(vals))
            lo, hi = mus[max(i - 1, 0)], mus[min(i + 1, mus.size - 1)]

            def f(m, e1=e1, e2=e2):
                ch, sh = np.cosh(m), np.sinh(m)
                yy = np.array([[e1 * ch, e1 * sh], [e2 * sh, e2 * ch]])
                return float(np.trace(yy.T @ c @ yy @ d))

            g = (np.sqrt(5) - 1) / 2
            for _ in range(200):
                a, b = hi - g * (hi - lo), lo + g * (hi - lo)
                if f(a) < f(b):
                    hi = b
                else:
                    lo = a
            best = min(best, f(0.5 * (lo + hi)), vals[i])
    return best


@pytest.mark.parametrize("seed", range(8))
def test_n2_one_gs_step_reaches_global_minimum_over_o11(seed):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((2, 2)), rng.standard_normal((2, 2))
    c = a @ a.T + 0.1 * np.eye(2)
    d = b @ b.T + 0.1 * np.eye(2)
    geo = JOrthogonalGeometry(2, signature=[1, -1] if seed % 2 else [-1, 1])
    x0 = geo.random_point(cond=5.0, component=((-1) ** seed, 1),
                          generator=torch.Generator().manual_seed(seed))
    oracle = QuadraticOracle(torch.from_numpy(c), torch.from_numpy(d))
    res = GSJOBCD(side="row", max_iterations=1, theta=1e-12, seed=seed).run(oracle, x0, geo)
    brute = _o11_brute_force(c, d)
    assert res.cost <= brute + 1e-9 * max(1.0, abs(brute))
    assert res.violation < 1e-13


@pytest.mark.parametrize("n", [10, 16])
@pytest.mark.parametrize("kind", ["sorted", "unsorted"])
@pytest.mark.parametrize("solver", ["GS", "J"])
def test_certificate_gap_feasibility_and_monotonicity(n, kind, solver):
    """n = 50 and 200: :func:`test_certificate_at_larger_n`."""
    c = torch.from_numpy(make_spd(n, seed=n))
    geo = JOrthogonalGeometry(n, n // 2) if kind == "sorted" else \
        JOrthogonalGeometry(n, signature=_unsorted(n))
    cert = trace_min_certificate(c.numpy(), geo.j)
    x0 = geo.random_point(generator=torch.Generator().manual_seed(1))
    target = cert * (1 + 1e-9)
    if solver == "GS":
        s = GSJOBCD(side="row", seed=0, max_iterations=400_000, target_cost=target,
                    eval_every=200)
    else:
        s = JJOBCD(seed=0, max_iterations=40_000, target_cost=target, eval_every=20)
    res = s.run(QuadraticOracle(c), x0, geo)
    assert (res.cost - cert) / cert <= 1e-8, res.stop_reason
    assert geo.relative_violation(res.point) <= 1e-10
    assert res.violation <= 1e-10
    costs = np.asarray(res.history["cost"])
    assert np.all(np.diff(costs) <= 1e-12 * abs(costs[0]))


def _spread_spd(n, seed):
    """C = U diag(linspace(1, 10, n)) Uᵀ with Haar-random U: C ≻ 0, condition number 10."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.standard_normal((n, n)))
    c = (u * np.linspace(1.0, 10.0, n)) @ u.T
    return 0.5 * (c + c.T)


@pytest.mark.parametrize(("n", "kind", "solver", "budget"), [
    (50, "sorted", "GS", 60_000), (50, "unsorted", "GS", 60_000),
    (50, "sorted", "J", 4000), (50, "unsorted", "J", 4000),
    (200, "sorted", "GS", 400_000), (200, "unsorted", "GS", 400_000),
    (200, "sorted", "J", 12_000), (200, "unsorted", "J", 12_000)])
def test_certificate_at_larger_n(n, kind, solver, budget):
    """min tr(XᵀCX) over O(J) from X₀ = I with C of eigenvalues spread over [1, 10] and random
    eigenvectors (:func:`_spread_spd`): 1e-8 relative gap to Σ|λ(JC)|, violation ≤ 1e-10,
    f non-increasing (GS: evaluated every 2000 pairs). Measured (1 thread): GS-JOBCD needs ≈ 2·10⁴
    pairs at n = 50 and ≈ 3.3·10⁵ at n = 200 (both signatures; ≈ 30 s each at ≈ 80 µs per pair
    on a loaded 2-core machine), J-JOBCD ≈ 1.3·10³ sweeps at n = 50 and ≈ 5·10³ at n = 200
    (gap × ≈ 0.9967 per sweep)."""
    c = torch.from_numpy(_spread_spd(n, seed=n))
    geo = JOrthogonalGeometry(n, n // 2) if kind == "sorted" else \
        JOrthogonalGeometry(n, signature=_unsorted(n))
    cert = trace_min_certificate(c.numpy(), geo.j)
    target = cert * (1 + 1e-9)
    make = partial(GSJOBCD, side="row", eval_every=2000) if solver == "GS" else \
        partial(JJOBCD, eval_every=50)
    res = make(seed=0, max_iterations=budget, target_cost=target).run(
        QuadraticOracle(c), torch.eye(n, dtype=torch.float64), geo)
    assert (res.cost - cert) / cert <= 1e-8, res.stop_reason
    assert res.violation <= 1e-10
    costs = np.asarray(res.history["cost"])
    assert np.all(np.diff(costs) <= 1e-12 * abs(costs[0]))


@pytest.mark.parametrize("solver", ["GS", "J"])
def test_certificate_on_indefinite_stiefel(solver):
    n, k = 12, 5
    c = torch.from_numpy(make_spd(n, seed=3))
    geo = IndefiniteStiefelGeometry(n, k, signature=_unsorted(n, 2), k_signature=[1, -1, -1, 1, 1])
    cert = trace_min_certificate(c.numpy(), geo.j, geo.jk.values)
    x0 = geo.random_point(generator=torch.Generator().manual_seed(0))
    target = cert * (1 + 1e-9)
    if solver == "GS":
        s = GSJOBCD(seed=0, max_iterations=300_000, target_cost=target, eval_every=100)
    else:
        s = JJOBCD(seed=0, max_iterations=60_000, target_cost=target, eval_every=20)
    res = s.run(QuadraticOracle(c), x0, geo)
    assert (res.cost - cert) / cert <= 1e-8, res.stop_reason
    assert res.violation <= 1e-10
    assert np.all(np.diff(res.history["cost"]) <= 1e-12 * cert)


def test_fast_path_tracks_exact_cost_and_gradient():
    n, k = 30, 7
    c = torch.from_numpy(make_spd(n, seed=0))
    d = torch.from_numpy(make_spd(k, seed=1))
    geo = IndefiniteStiefelGeometry(n, k, 15, 3)
    oracle = QuadraticOracle(c, d, scale=0.7)
    res = GSJOBCD(seed=0, max_iterations=2000, eval_every=2000, refresh_every=10**9).run(
        oracle, geo.random_point(generator=torch.Generator().manual_seed(0)), geo)
    x = res.point
    assert abs(res.cost - float(oracle.value(x))) <= 1e-10 * abs(res.cost)
    tracker = oracle.track(x)
    torch.testing.assert_close(tracker.gradient(), oracle.gradient(x))


@pytest.mark.parametrize("scale", [0.7, -1.3])
def test_tracker_pair_model_and_row_updates_match_direct_formulas(scale):
    """QuadraticTracker's one-pair fast path (GS-JOBCD, OBCD): ``pair_model_array`` against
    ``np.kron`` (PSD part for ``psd=True`` when indefinite), and ``set_rows_array`` (the compiled
    update of Y and f on the host, :func:`~orthoplug.kernels.quadratic.update_rows`) keeping
    ``Y = CX`` and f exact; a non-finite change is refused, nothing moves; a finite change with an
    overflowing cost is refused, nothing moves."""
    rng = np.random.default_rng(0)
    n, k = 9, 4
    a = rng.standard_normal((n, n))
    c, d = a + a.T, make_spd(k, seed=2)  # C indefinite
    oracle = QuadraticOracle(torch.from_numpy(c), torch.from_numpy(d), scale=scale)
    tracker = oracle.track(torch.from_numpy(rng.standard_normal((n, k))))
    assert tracker.on_host  # the compiled host update is the one under test
    for _ in range(50):
        rows = rng.choice(n, 2, replace=False)
        x = tracker.xa.copy()
        for psd in (True, False):
            z, m, q = tracker.pair_model_array(rows, 0.25, psd=psd)
            exact = 2 * scale * np.kron(z @ d @ z.T, c[np.ix_(rows, rows)])
            if psd:
                lam, v = np.linalg.eigh(exact)
                exact = (v * lam.clip(0.0)) @ v.T
            np.testing.assert_allclose(q, exact + 0.25 * np.eye(4), rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(m, 2 * scale * (c @ x @ d)[rows] @ z.T, rtol=1e-12)
        tracker.set_rows_array(rows, z + 0.1 * rng.standard_normal(z.shape))
        x = tracker.xa
        np.testing.assert_allclose(tracker.ya, c @ x, rtol=1e-12, atol=1e-12)
        assert float(tracker.value()) == pytest.approx(scale * np.sum(x * (c @ x @ d)), rel=1e-12)
    grad = tracker.gradient()  # a tensor (no NumPy round trip), = 2s·C X D
    assert isinstance(grad, torch.Tensor)
    torch.testing.assert_close(grad, torch.from_numpy(2 * scale * c @ tracker.xa @ d))
    x, y = tracker.xa.copy(), tracker.ya.copy()
    f = float(tracker.value())
    with pytest.raises(NonFiniteError):
        tracker.set_rows_array(np.array([1, 4]), np.full((2, k), np.inf))
    assert np.array_equal(tracker.xa, x) and np.array_equal(tracker.ya, y)
    # a finite change whose cost overflows (|Δ|² ≈ 1e400) is refused before anything is written
    with pytest.raises(NonFiniteError, match="non-finite cost"):
        tracker.set_rows_array(np.array([1, 4]), np.full((2, k), 1e200))
    assert np.array_equal(tracker.xa, x) and np.array_equal(tracker.ya, y)
    assert float(tracker.value()) == f


def test_generic_oracle_with_backtracking_never_increases_cost():
    """Non-quadratic cost, unknown Lipschitz constant: σ is estimated and doubled as needed."""
    n = 8
    geo = JOrthogonalGeometry(n, 4)
    c = torch.from_numpy(make_spd(n, seed=5))

    def value(x):
        return (x * (c @ x)).sum() + 0.1 * ((x * x).sum(0) ** 2).sum()

    def grad(x):
        return 2 * c @ x + 0.4 * x * (x * x).sum(0, keepdim=True)

    x0 = geo.random_point(generator=torch.Generator().manual_seed(2))
    for solver in (GSJOBCD(seed=0, max_iterations=3000, eval_every=1),
                   JJOBCD(seed=0, max_iterations=300, eval_every=1)):
        res = solver.run(FunctionOracle(value, grad), x0, geo)
        costs = np.asarray(res.history["cost"])
        assert np.all(np.diff(costs) <= 1e-12 * abs(costs[0]))
        assert costs[-1] < 0.5 * costs[0]
        assert res.violation < 1e-12


def test_random_matching_handles_odd_n_and_is_uniform():
    gen = torch.Generator().manual_seed(0)
    counts = np.zeros(7)
    for _ in range(3000):
        pairs = random_matching(7, gen)
        assert pairs.shape == (3, 2) and len(set(pairs.flatten().tolist())) == 6
        counts[sorted(set(range(7)) - set(pairs.flatten().tolist()))] += 1
    assert counts.sum() == 3000 and np.all(np.abs(counts / 3000 - 1 / 7) < 0.03)


def test_j_jobcd_odd_n_reaches_certificate():
    n = 9
    c = torch.from_numpy(make_spd(n, seed=9))
    geo = JOrthogonalGeometry(n, 4)
    cert = trace_min_certificate(c.numpy(), geo.j)
    res = JJOBCD(seed=0, max_iterations=40_000, target_cost=cert * (1 + 1e-9), eval_every=20).run(
        QuadraticOracle(c), geo.random_point(generator=torch.Generator().manual_seed(0)), geo)
    assert (res.cost - cert) / cert <= 1e-8


def test_nan_stops_and_keeps_last_good_point():
    n = 6
    geo = JOrthogonalGeometry(n, 3)
    c = torch.from_numpy(make_spd(n, seed=0))
    calls = {"n": 0}

    def grad(x):
        calls["n"] += 1
        g = 2 * c @ x
        return g * float("nan") if calls["n"] > 20 else g

    x0 = geo.random_point(generator=torch.Generator().manual_seed(0))
    res = JJOBCD(seed=0, max_iterations=100, sigma_rule=10.0, eval_every=1).run(
        FunctionOracle(lambda x: (x * (c @ x)).sum(), grad), x0, geo)
    assert "non-finite gradient" in res.stop_reason
    assert torch.isfinite(res.point).all() and res.violation < 1e-12
    assert res.iterations < 100


@pytest.mark.parametrize("make", [lambda: GSJOBCD(side="row", seed=0, max_iterations=10**6),
                                  lambda: GSJOBCD(side="row", seed=0, max_iterations=10**6,
                                                  curvature="scalar"),
                                  lambda: JJOBCD(seed=0, max_iterations=10**6)])
def test_unbounded_quadratic_stops_on_overflow_with_a_finite_point(make):
    """min −tr(XᵀCX) over O(J) is unbounded: the iterates grow until the arithmetic overflows
    (with the exact curvature at once: its PSD part is zero, only θ damps the step). The run
    must stop on that with the last finite point, not crash in LAPACK or the 2×2 solver."""
    n = 10
    geo = JOrthogonalGeometry(n, n // 2)
    c = -torch.from_numpy(make_spd(n, seed=1))
    x0 = geo.random_point(generator=torch.Generator().manual_seed(1))
    res = make().run(QuadraticOracle(c), x0, geo)
    assert "non-finite" in res.stop_reason
    assert res.iterations < 10**6
    assert math.isfinite(res.cost) and res.cost < -1e100
    assert torch.isfinite(res.point).all()
    assert res.cost == pytest.approx(float((res.point * (c @ res.point)).sum()), rel=1e-6)


def test_infeasible_start_and_bad_options_raise():
    geo = JOrthogonalGeometry(4, 2)
    oracle = QuadraticOracle(torch.eye(4, dtype=torch.float64))
    with pytest.raises(ValueError, match="infeasible"):
        GSJOBCD().run(oracle, torch.ones(4, 4, dtype=torch.float64), geo)
    with pytest.raises(ValueError, match="theta must be > 0"):
        GSJOBCD(theta=0.0)
    with pytest.raises(ValueError, match="pairs must be"):
        GSJOBCD(pairs="sweep")
    with pytest.raises(ValueError, match="needs a FiniteSumOracle"):
        VRJJOBCD(sigma_rule=1.0).run(oracle, torch.eye(4, dtype=torch.float64), geo)


def test_cyclic_pairs_visit_every_pair():
    n = 6
    geo = JOrthogonalGeometry(n, 3)
    c = torch.from_numpy(make_spd(n, seed=1))
    cert = trace_min_certificate(c.numpy(), geo.j)
    res = GSJOBCD(side="row", pairs="cyclic", max_iterations=30_000, target_cost=cert * (1 + 1e-9),
                  eval_every=15).run(QuadraticOracle(c), torch.eye(n, dtype=torch.float64), geo)
    assert (res.cost - cert) / cert <= 1e-8


# ---- VR-J-JOBCD on a finite sum -------------------------------------------------------------


def _finite_sum_hevp(m=400, n=8, eps=0.05, seed=0):
    """f(X) = (1/m) Σ_i ‖D_i X‖² + ε‖X‖²  (C = DᵀD/m + εI), N = m components."""
    rng = np.random.default_rng(seed)
    d = torch.from_numpy(rng.standard_normal((m, n)))

    def value(x, idx):
        return ((d[idx] @ x) ** 2).sum(dim=1).mean() + eps * (x * x).sum()

    def grad(x, idx):
        di = d[idx]
        return 2 * di.T @ (di @ x) / idx.numel() + 2 * eps * x

    c = d.T @ d / m + eps * torch.eye(n, dtype=torch.float64)
    lip = 2 * float(torch.linalg.eigvalsh(d.T @ d).max()) / m * 3 + 2 * eps
    return FiniteSumOracle(m, value, grad, lipschitz=lip), c


def test_vr_j_jobcd_converges_on_finite_sum():
    oracle, c = _finite_sum_hevp()
    geo = JOrthogonalGeometry(8, 4)
    cert = trace_min_certificate(c.numpy(), geo.j)
    x0 = geo.random_point(generator=torch.Generator().manual_seed(0))
    res = VRJJOBCD(seed=0, max_iterations=3000, eval_every=50).run(oracle, x0, geo)
    assert (res.cost - cert) / cert < 1e-3
    assert res.violation < 1e-12
    assert res.info["component_gradients"] > 0


# ---- front-ends ----------------------------------------------------------------------------


def test_pymanopt_front_ends_on_autodiff_problem():
    n = 8
    c = make_spd(n, seed=4)
    manifold = pm.JOrthogonal(n, signature=_unsorted(n, 4))
    cert = trace_min_certificate(c, manifold.signature)

    @pymanopt.function.autograd(manifold)
    def cost(x):
        return anp.trace(x.T @ c @ x)

    problem = pymanopt.Problem(manifold, cost)
    np.random.seed(0)
    x0 = manifold.random_point()
    target = cert * (1 + 1e-9)  # solver options pass through the front-end
    res = pm.JJOBCD(max_iterations=20_000, min_gradient_norm=1e-7, seed=0, target_cost=target,
                    log_verbosity=1).run(problem, initial_point=x0)
    assert abs(res.cost - cert) / cert < 1e-8
    assert res.violation < 1e-12
    assert set(res.log["iterations"]) >= {"time", "cost", "gradient_norm", "violation"}
    fast = pm.GSJOBCD(side="row", max_iterations=200_000, seed=0, target_cost=target).run(
        problem, initial_point=x0, oracle=QuadraticOracle(torch.from_numpy(c)))
    assert abs(fast.cost - cert) / cert < 1e-8
    with pytest.raises(ValueError, match="does not support"):
        pm.GSJOBCD().run(pymanopt.Problem(pymanopt.manifolds.Stiefel(4, 2), _stiefel_cost()))


def _stiefel_cost():
    @pymanopt.function.autograd(pymanopt.manifolds.Stiefel(4, 2))
    def cost(x):
        return anp.sum(x)

    return cost


@pytest.mark.parametrize("name", ["JJOBCD", "GSJOBCD"])
def test_geoopt_optimizers_update_every_matrix_monotonically(name):
    n, batch = 6, 4
    manifold = go.JOrthogonal(n, 3)
    cs = torch.stack([torch.from_numpy(make_spd(n, seed=s)) for s in range(batch)])
    certs = torch.tensor([trace_min_certificate(c.numpy(), manifold.geometry.j) for c in cs],
                         dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    x = geoopt.ManifoldParameter(manifold.random(batch, n, n, dtype=torch.float64, generator=gen),
                                 manifold=manifold)
    x_start = x.detach().clone()
    opt = getattr(go, name)([x], seed=0)

    def closure():
        opt.zero_grad()
        loss = torch.einsum("bij,bik,bkj->", x, cs, x)
        loss.backward()
        return loss

    losses = [float(opt.step(closure).detach()) for _ in range(1500)]
    assert all(b <= a + 1e-12 * abs(a) for a, b in zip(losses[:-1], losses[1:], strict=True))
    assert (x.detach() - x_start).abs().amax(dim=(-2, -1)).min() > 0  # every matrix moved
    with torch.no_grad():
        gaps = (torch.einsum("bij,bik,bkj->b", x, cs, x) - certs) / certs
    assert gaps.max() < 0.05 and manifold.geometry.violation(x.detach()).max() < 1e-12

    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    opt2 = getattr(go, name)([x], seed=0)
    opt2.load_state_dict(torch.load(buffer))
    assert opt2.state[x]["sigma"] == opt.state[x]["sigma"]


def test_geoopt_vr_optimizer_on_finite_sum():
    oracle, c = _finite_sum_hevp(m=200)
    manifold = go.JOrthogonal(8, 4)
    cert = trace_min_certificate(c.numpy(), manifold.geometry.j)
    x = geoopt.ManifoldParameter(manifold.random(8, 8, dtype=torch.float64,
                                                 generator=torch.Generator().manual_seed(0)),
                                 manifold=manifold)
    opt = go.VRJJOBCD([x], num_components=200, sigma_rule=oracle.lipschitz, seed=0)

    def closure(idx):
        opt.zero_grad()
        loss = oracle._cv(x, idx)
        loss.backward()
        return loss

    for _ in range(2000):
        opt.step(closure)
    value = float(oracle.value(x.detach()))
    assert (value - cert) / cert < 1e-3
    assert opt.component_gradients < 2000 * 200
    with pytest.raises(ValueError, match="optimises ManifoldParameters"):
        go.JJOBCD([torch.nn.Parameter(torch.zeros(3, 3))])
