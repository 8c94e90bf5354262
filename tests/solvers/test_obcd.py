"""OBCD against brute force over O(2), the PCA closed form and its own invariants."""

from __future__ import annotations

import math

import autograd.numpy as anp
import geoopt
import numpy as np
import pymanopt
import pytest
import torch

from orthoplug.adapters import geoopt as go
from orthoplug.adapters import pymanopt as pm
from orthoplug.baselines.manpg import ManPG, manpg_direction
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.nonsmooth import L0, L1, CappedL1, NonNegative, Zero
from orthoplug.oracles import FunctionOracle, QuadraticOracle
from orthoplug.problems import spca
from orthoplug.solvers.obcd import OBCD, local_block_solve
from orthoplug.solvers.sigma_rules import SigmaBacktracking, SigmaFit
from orthoplug.subproblems.o2 import o2_objective

DT = torch.float64


def _dist_oracle(a):
    """f(X) = ‖X − A‖²_F (gradient 2(X − A), Lipschitz constant 2)."""
    a = torch.as_tensor(a, dtype=DT)
    return FunctionOracle(lambda x: ((x - a) ** 2).sum(), lambda x: 2.0 * (x - a), lipschitz=2.0)


def _brute_o2(a, h):
    """min over O(2) of ‖V − A‖² + h(V): fine grid on both families (knots at multiples of π/2
    included exactly, tiny entries snapped to 0), then golden-section refinement."""
    a = torch.as_tensor(np.asarray(a, dtype=float))

    def vals(t, e):
        t = torch.as_tensor(np.atleast_1d(t), dtype=DT)
        c, s = torch.cos(t), torch.sin(t)
        v = torch.stack([torch.stack([e * c, s], -1), torch.stack([-e * s if e == 1 else s, c],
                                                                  -1)], -2)
        if e == -1:
            v[:, 0, 0] = -c
        v = torch.where(v.abs() < 1e-12, torch.zeros_like(v), v)
        return (((v - a) ** 2).sum((-2, -1)) + h.value(v)).numpy()

    best = math.inf
    ts = np.concatenate([np.linspace(0, 2 * np.pi, 20001), np.arange(4) * np.pi / 2])
    for e in (1, -1):
        allv = vals(ts, e)
        best = min(best, float(allv.min()))
        i = int(np.argmin(allv))
        lo, hi = ts[i] - 4e-4, ts[i] + 4e-4
        for _ in range(60):
            m1, m2 = lo + 0.382 * (hi - lo), hi - 0.382 * (hi - lo)
            if vals(m1, e)[0] < vals(m2, e)[0]:
                hi = m2
            else:
                lo = m1
        best = min(best, float(vals(0.5 * (lo + hi), e)[0]))
    return best


def _run_n2(a, h, iters=30):
    geo = StiefelGeometry(2, 2)
    res = OBCD(h, seed=0, max_iterations=iters, eval_every=1).run(
        _dist_oracle(a), torch.eye(2, dtype=DT), geo)
    return res


def test_n2_reflection_example():
    a = [[1.0, 0.0], [-1.0, -1.0]]
    res = _run_n2(a, Zero())
    assert res.cost <= _brute_o2(a, Zero()) + 1e-8
    assert float(torch.linalg.det(res.point)) < 0  # the minimiser is a reflection


def test_n2_l1_example_stays_at_identity():
    b = [[1.0, 0.0], [1.0, 2.0]]
    res = _run_n2(b, L1(5.0))
    assert res.cost <= _brute_o2(b, L1(5.0)) + 1e-8
    assert torch.allclose(res.point, torch.eye(2, dtype=DT))
    assert res.cost == pytest.approx(12.0)


@pytest.mark.parametrize("h", [Zero(), L1(0.7), L0(0.5), CappedL1(0.8, 0.4), NonNegative()],
                         ids=repr)
def test_n2_random_instances_reach_global_minimum(h):
    rng = np.random.default_rng(1)
    for _ in range(4):
        a = rng.standard_normal((2, 2)) * 1.5
        res = _run_n2(a, h)
        brute = _brute_o2(a, h)
        assert res.cost <= brute + 1e-7, (a, res.cost, brute)
        assert res.violation < 1e-13


def test_h0_reaches_pca_value():
    n, r = 100, 10
    c = spca.covariance(spca.gaussian_data(300, n, seed=3))
    target = -float(torch.linalg.eigvalsh(c)[-r:].sum())
    geo = StiefelGeometry(n, r)
    # iterations of n/k = 5 block updates
    res = OBCD(k=20, seed=0, max_iterations=12_000, eval_every=40,
               target_cost=target + 1e-9 * abs(target)).run(
        QuadraticOracle(c, scale=-1.0), torch.eye(n, r, dtype=DT), geo)
    assert abs(res.cost - target) <= 1e-8 * abs(target), (res.cost, target, res.iterations)
    assert res.violation < 1e-12


def _problem(kind, n=14, r=3):
    c = spca.covariance(spca.gaussian_data(40, n, seed=5))
    if kind == "l1":
        return spca.l1_spca(c, r, 0.01)
    if kind == "l0":
        return spca.l0_spca(c, r, 0.002)
    return spca.nn_pca(c, r)


@pytest.mark.parametrize("kind", ["l1", "l0", "nonneg"])
@pytest.mark.parametrize("pairs", ["random", "cyclic"])
def test_monotone_and_feasible_sequential(kind, pairs):
    """F = f + h non-increasing and (NN-PCA) X ≥ 0 after EVERY pair update: 406 updates (58
    iterations of n/2 = 7) of the compiled pair loop entered one update at a time
    (:meth:`OBCD.pair_steps` on a started run), F computed afresh from X each time; the
    solver's own run of 58 iterations ends at the same point, so these are its updates."""
    p = _problem(kind)
    geo = StiefelGeometry(p.n, p.r)
    solver = OBCD(p.h, pairs=pairs, seed=0, max_iterations=58, eval_every=1)
    run = solver.start(p.oracle, p.initial_point(), geo)
    assert run.kernel and run.updates == 7

    def composite(x):
        return float(p.oracle.value(x)) + float(p.h.value(x))

    cost, low = [composite(run.tracker.x)], [float(run.tracker.x.min())]
    for _ in range(58 * run.updates):
        solver.pair_steps(run, 1)
        cost.append(composite(run.tracker.x))
        low.append(float(run.tracker.x.min()))
    cost = np.array(cost)
    assert np.all(np.diff(cost) <= 1e-13), np.diff(cost).max()
    assert np.count_nonzero(np.diff(cost) < 0) > 50  # the check sees many moves
    assert cost[-1] < cost[0] - 1e-3
    assert float(geo.violation(run.tracker.x)) <= 1e-12
    if kind == "nonneg":
        assert min(low) >= 0.0

    res = solver.run(p.oracle, p.initial_point(), geo)
    assert torch.equal(res.point, run.tracker.x)
    assert res.info["block_updates"] == 406
    assert res.violation <= 1e-12
    assert res.info["f"] + res.info["h"] == pytest.approx(res.cost)
    assert len(res.history["h"]) == len(res.history["cost"]) == 59


@pytest.mark.parametrize("kind", ["l1", "l0", "nonneg"])
def test_feasible_after_1e5_sequential_iterations(kind):
    """10⁵ sequential OBCD pair updates (random pairs, exact curvature, fast path; 2·10⁴
    iterations of n/2 = 5): still on St(n, r) to 1e-12, f + h non-increasing at every
    evaluation, NN-PCA iterates ≥ 0. (With the O(2) search's former 1e-12 snap tolerance the ℓ1
    case left St(n, r) by 1.3e-12.)"""
    p = _problem(kind, n=10, r=3)
    geo = StiefelGeometry(p.n, p.r)
    res = OBCD(p.h, seed=0, max_iterations=20_000, eval_every=200).run(
        p.oracle, p.initial_point(), geo)
    assert res.iterations == 20_000
    assert res.info["block_updates"] == 100_000
    cost = np.array(res.history["cost"])
    assert np.all(np.diff(cost) <= 1e-13)
    assert res.violation <= 1e-12
    assert float(torch.linalg.matrix_norm(res.point.mT @ res.point - torch.eye(p.r, dtype=DT),
                                          ord=2)) <= 1e-12
    if kind == "nonneg":
        assert float(res.point.min()) >= 0.0


@pytest.mark.parametrize("kind", ["l1", "l0", "nonneg"])
def test_feasible_after_1e5_pair_updates(kind):
    """10⁵ exact pair updates (Jacobi: 250 iterations × 400 disjoint pairs), fast path."""
    p = _problem(kind, n=800, r=3)
    geo = StiefelGeometry(p.n, p.r)
    res = OBCD(p.h, pairs="jacobi", seed=0, max_iterations=250, eval_every=5).run(
        p.oracle, p.initial_point(), geo)
    cost = np.array(res.history["cost"])
    assert np.all(np.diff(cost) <= 1e-13)
    assert res.violation <= 1e-12
    if kind == "nonneg":
        assert float(res.point.min()) >= 0.0


def test_exact_curvature_beats_scalar_on_l0_from_identity():
    p = _problem("l0", n=20, r=3)
    geo = StiefelGeometry(p.n, p.r)
    ex = OBCD(p.h, seed=0, max_iterations=30, eval_every=30).run(p.oracle, p.initial_point(),
                                                                  geo)
    sc = OBCD(p.h, curvature="scalar", seed=0, max_iterations=30, eval_every=30).run(
        p.oracle, p.initial_point(), geo)
    assert ex.cost < sc.cost


def test_general_k_local_method_decreases():
    rng = np.random.default_rng(0)
    p = torch.as_tensor(rng.standard_normal((4, 4)))
    z = torch.linalg.qr(torch.as_tensor(rng.standard_normal((6, 4))))[0].T  # 4 × 6 rows
    h = L1(0.3)
    v, u = local_block_solve(p, z, h)
    assert torch.allclose(v.T @ v, torch.eye(4, dtype=DT), atol=1e-13)
    k_v = float((v * p).sum() + h.value(u))
    k_i = float(torch.trace(p) + h.value(z))
    assert k_v <= k_i
    # the k = 2 case is exact: compare with the shared subproblem objective
    assert o2_objective(torch.eye(2, dtype=DT), p[:2, :2], z[:2], h, s=0.0) is not None
    prob = _problem("l1", n=12, r=3)
    res = OBCD(prob.h, k=4, seed=0, max_iterations=20, eval_every=1).run(
        prob.oracle, prob.initial_point(), StiefelGeometry(12, 3))
    assert np.all(np.diff(res.history["cost"]) <= 1e-13)
    assert res.violation <= 1e-12


def test_deterministic_with_seed():
    p = _problem("l1")
    geo = StiefelGeometry(p.n, p.r)
    a = OBCD(p.h, seed=7, max_iterations=8).run(p.oracle, p.initial_point(), geo)
    b = OBCD(p.h, seed=7, max_iterations=8).run(p.oracle, p.initial_point(), geo)
    assert torch.equal(a.point, b.point)


@pytest.mark.parametrize("pairs", ["random", None])
def test_backtracking_without_lipschitz(pairs):
    c = spca.covariance(spca.gaussian_data(30, 10, seed=2))
    oracle = FunctionOracle(lambda x: (x * (c @ x)).sum(), lambda x: 2 * c @ x)  # convex f
    geo = StiefelGeometry(10, 2)
    res = OBCD(L1(0.01), pairs=pairs, seed=0, max_iterations=200, eval_every=1).run(
        oracle, torch.eye(10, 2, dtype=DT), geo)
    assert np.all(np.diff(res.history["cost"]) <= 1e-12)
    assert res.cost < res.history["cost"][0] - 1e-3


def test_default_pair_order_follows_the_cost_of_an_update(capsys):
    """``pairs=None``: random pairs when the tracker reads gradient rows without a full gradient
    (``QuadraticOracle``: ⌈n/2⌉ pair updates an iteration) or k > 2, else one Jacobi matching an
    iteration, with the iterates of the explicit order; reported in ``info`` and printed by
    the pymanopt door at verbosity 1."""
    p = _problem("l1", n=10, r=2)
    geo, x0 = StiefelGeometry(10, 2), p.initial_point()
    full = FunctionOracle(p.oracle.value, p.oracle.gradient)
    assert OBCD(p.h).info()["pairs"] is None
    for oracle, k, order, updates in ((p.oracle, 2, "random", 5), (full, 2, "jacobi", 1),
                                      (full, 3, "random", 1)):
        res = OBCD(p.h, k=k, seed=0, max_iterations=3).run(oracle, x0, geo)
        assert (res.info["pairs"], res.info["updates_per_iteration"]) == (order, updates)
        same = OBCD(p.h, k=k, pairs=order, seed=0, max_iterations=3).run(oracle, x0, geo)
        assert torch.equal(res.point, same.point)
    c = p.c.numpy()
    manifold = pymanopt.manifolds.Stiefel(10, 2)

    @pymanopt.function.autograd(manifold)
    def cost(x):
        return -anp.trace(x.T @ c @ x)

    pm.OBCD(h=p.h, max_iterations=1, seed=0, verbosity=1).run(
        pymanopt.Problem(manifold, cost), initial_point=x0.numpy())
    assert "'pairs': 'jacobi'" in capsys.readouterr().out


def test_sigma_rule_start():
    """A concave quadratic f has the safe σ = 0 (its linear model majorises it): every rule
    starts there, fixed (a multiplicative rule cannot leave 0); a declared Lipschitz constant
    starts a rule without ``sigma0`` (fixed for backtracking, refitted for ``"fit"``); a
    number is a fixed σ and a ``sigma0`` the first σ of a checked rule."""
    p = _problem("l1", n=10, r=2)  # −tr(XᵀCX) + λ‖X‖₁
    geo, x0 = StiefelGeometry(10, 2), p.initial_point()
    for rule in ("backtracking", "fit", SigmaFit()):
        res = OBCD(p.h, curvature="scalar", sigma_rule=rule, seed=0, max_iterations=5).run(
            p.oracle, x0, geo)
        assert (res.info["sigma_start"], res.info["sigma"], res.info["backtracks"]) == (0, 0, 0)
    dist = _dist_oracle(torch.randn(10, 2, dtype=DT, generator=torch.Generator().manual_seed(0)))
    fixed = OBCD(sigma_rule="backtracking", seed=0, max_iterations=5).run(dist, x0, geo)
    fit = OBCD(sigma_rule="fit", seed=0, max_iterations=5).run(dist, x0, geo)  # L = 2
    assert fixed.info["sigma_start"] == fixed.info["sigma"] == fit.info["sigma_start"] == 2.0
    assert fit.info["sigma"] != 2.0
    number = OBCD(sigma_rule=0.5, seed=0, max_iterations=5).run(dist, x0, geo)
    assert number.info["sigma_start"] == number.info["sigma"] == 0.5
    first = OBCD(sigma_rule=SigmaBacktracking(1e-3), seed=0, max_iterations=5).run(
        dist, x0, geo)
    assert first.info["sigma_start"] == 1e-3 and first.info["backtracks"] > 0
    with pytest.raises(ValueError, match="sigma_rule"):
        OBCD(sigma_rule=-1.0)


def test_errors():
    geo = StiefelGeometry(4, 2)
    oracle = QuadraticOracle(torch.eye(4, dtype=DT))
    with pytest.raises(ValueError, match="k must"):
        OBCD(k=1)
    with pytest.raises(ValueError, match="pairs"):
        OBCD(pairs="sweep")
    with pytest.raises(ValueError, match="theta"):
        OBCD(theta=0.0)
    with pytest.raises(ValueError, match="k = 2"):
        OBCD(k=3, pairs="jacobi")
    with pytest.raises(ValueError, match="separable"):
        OBCD(h=lambda x: 0.0)
    with pytest.raises(ValueError, match="exceeds"):
        OBCD(k=5).run(oracle, torch.eye(4, 2, dtype=DT), geo)
    with pytest.raises(ValueError, match="negative"):
        OBCD(NonNegative()).run(oracle, -torch.eye(4, 2, dtype=DT), geo)
    with pytest.raises(ValueError, match="infeasible"):
        OBCD().run(oracle, torch.ones(4, 2, dtype=DT), geo)
    with pytest.raises(ValueError, match="Stiefel"):
        OBCD().run(oracle, torch.eye(4, 2, dtype=DT), object())
    with pytest.raises(ValueError, match="curvature='exact'"):
        OBCD(pairs="greedy", curvature="scalar")
    with pytest.raises(ValueError, match="k = 2"):
        OBCD(pairs="greedy", k=3)
    with pytest.raises(ValueError, match="quadratic f .*FunctionOracle"):  # at setup, no step
        OBCD(pairs="greedy").run(_dist_oracle(torch.eye(4, 2)), torch.eye(4, 2, dtype=DT), geo)


# ---- front-ends -------------------------------------------------------------------------------
def test_pymanopt_obcd_reports_f_and_h():
    p = _problem("l1", n=10, r=2)
    c = p.c.numpy()
    manifold = pymanopt.manifolds.Stiefel(10, 2)

    @pymanopt.function.autograd(manifold)
    def cost(x):
        return -anp.trace(x.T @ c @ x)

    problem = pymanopt.Problem(manifold, cost)
    x0 = np.eye(10, 2)
    res = pm.OBCD(h=p.h, max_iterations=300, seed=0, log_verbosity=1).run(
        problem, initial_point=x0)
    fast = pm.OBCD(h=p.h, max_iterations=300, seed=0).run(problem, initial_point=x0,
                                                          oracle=p.oracle)
    for r in (res, fast):
        assert r.cost == pytest.approx(p.objective(r.point), abs=1e-12)
        assert r.h_value == pytest.approx(float(p.h.value(torch.as_tensor(r.point))))
        assert r.f_value + r.h_value == pytest.approx(r.cost)
        assert r.cost < p.objective(x0) - 1e-3
        assert r.violation < 1e-12
    assert "h" in res.log["iterations"]
    so = pymanopt.manifolds.SpecialOrthogonalGroup(3)

    @pymanopt.function.autograd(so)
    def cost3(x):
        return anp.sum((x - np.diag([1.0, 2.0, 3.0])) ** 2)

    r3 = pm.OBCD(max_iterations=200, seed=0).run(pymanopt.Problem(so, cost3),
                                                  initial_point=np.eye(3))
    assert r3.cost <= 14.0 - 6.0 + 1e-6  # min over O(3) of ‖X − diag(1,2,3)‖² = 3 + 14 − 12
    with pytest.raises(ValueError, match="does not support|unsupported"):
        pm.OBCD().run(pymanopt.Problem(pymanopt.manifolds.Sphere(3), cost))


@pytest.mark.parametrize("pairs", ["random", "jacobi"])
def test_geoopt_obcd_monotone(pairs):
    p = _problem("nonneg", n=12, r=3)
    c = p.c
    x = geoopt.ManifoldParameter(p.initial_point("random").unsqueeze(0).repeat(2, 1, 1),
                                 manifold=geoopt.Stiefel())
    opt = go.OBCD([x], h=p.h, pairs=pairs, seed=0)

    def closure():
        opt.zero_grad()
        loss = -0.5 * (x * (c @ x)).sum()
        loss.backward()
        return loss

    vals = []
    for _ in range(60):
        opt.step(closure)
        vals.append(-0.5 * float((x.detach() * (c @ x.detach())).sum()))
        assert float(x.detach().min()) >= 0.0
    assert np.all(np.diff(vals) <= 1e-13)
    assert vals[-1] < vals[0]
    gram = x.detach().mT @ x.detach() - torch.eye(3, dtype=DT)
    assert float(gram.abs().max()) < 1e-12
    with pytest.raises(ValueError, match="Stiefel"):
        go.OBCD([torch.nn.Parameter(torch.eye(3, dtype=DT))])
    negative = geoopt.ManifoldParameter(-torch.eye(3, dtype=DT), manifold=geoopt.Stiefel())
    with pytest.raises(ValueError, match="infeasible"):  # checked at the first step
        go.OBCD([negative], h=NonNegative()).step(closure)
    with pytest.raises(ValueError, match="closure"):
        opt.step(None)


def test_manpg_direction_tangent_and_monotone():
    p = _problem("l1", n=30, r=4)
    x = p.initial_point("random")
    g = p.oracle.gradient(x)
    d, lam, _ = manpg_direction(x, g, p.h, 0.5)
    assert float(torch.linalg.norm(x.T @ d + d.T @ x)) < 1e-9
    geo = StiefelGeometry(30, 4)
    res = ManPG(p.h, max_iterations=100, eval_every=1).run(p.oracle, x, geo)
    assert np.all(np.diff(res.history["cost"]) <= 1e-13)
    assert res.cost < p.objective(x)
    assert res.violation < 1e-12
    with pytest.raises(ValueError, match="step"):
        ManPG(step_size=0.0)


def test_example_runs():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[2] / "examples" / "obcd_sparse_pca.py"
    spec = importlib.util.spec_from_file_location("obcd_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.main(["--r", "3", "--iterations", "200"])
    assert set(out) == {"l1", "l0"}
    assert all(res.violation < 1e-12 for res in out.values())
