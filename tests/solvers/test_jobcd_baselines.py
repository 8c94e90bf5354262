"""JOBCD papers' baselines (ADMM, UMCM, CSDM) and the HSPP finite-sum problem.

Accuracies measured on the HEVP instance below (n = 20, C = DᵀD/n + 0.01 I, relative gap of the
start 1.85), which the bounds are set against:

* ADMM, paper's dynamic β (β₀ = 1e2, ×2 every 5 iterations): gap 1.35 after 50 iterations and
  frozen there (β reaches 1e9 after ~115 iterations, so steps vanish), violation ~1e-16.
  ADMM with a fixed β = L_f: gap 1e-10, violation 2e-9 after 1500 iterations.
* UMCM, paper's settings (Adagrad lr 5e-3, dynamic β₀ = 1e2): gap 1.78, frozen (Adagrad's
  accumulator fills with the penalty's gradients); fixed β = 10, lr 5e-2: gap 3e-3 after 600.
* CSDM (one Givens layer, 30 parameters for a 190-dimensional group): gap 1.67 after 500
  iterations, exactly feasible; it cannot reach the certificate (reduced family).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from orthoplug.baselines.admm import ADMM, PenaltySchedule, admm_x_update, admm_y_update
from orthoplug.baselines.csdm import CSDM, CSParametrization
from orthoplug.baselines.umcm import UMCM, umcm_gradient
from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry, JOrthogonalGeometry
from orthoplug.geometry.signature import Signature
from orthoplug.oracles import FunctionOracle, QuadraticOracle
from orthoplug.problems.hevp import make_spd, trace_min_certificate
from orthoplug.problems.hspp import HSPP, make_hspp_data
from orthoplug.solvers.jobcd import JJOBCD, VRJJOBCD

F64 = torch.float64


@pytest.fixture(scope="module")
def hevp():
    n = 20
    c = torch.from_numpy(make_spd(n, seed=0))
    geo = JOrthogonalGeometry(n, n // 2)
    cert = trace_min_certificate(c.numpy(), geo.j)
    x0 = geo.random_point(generator=torch.Generator().manual_seed(0))
    oracle = QuadraticOracle(c)
    gap0 = (float(oracle.value(x0)) - cert) / cert
    return c, geo, cert, x0, oracle, gap0


def _gap(res, cert):
    return (res.cost - cert) / cert


# ---- HEVP: each baseline moves toward the certificate ---------------------------------------
def test_admm_dynamic_beta_decreases_and_fixed_beta_reaches_certificate(hevp):
    c, geo, cert, x0, oracle, gap0 = hevp
    res = ADMM(beta=1e2, max_iterations=150, eval_every=10).run(oracle, x0, geo)
    assert _gap(res, cert) <= 0.85 * gap0  # measured 0.73·gap0
    assert res.violation <= 1e-8
    res = ADMM(beta={"beta0": oracle.lipschitz, "every": 0}, max_iterations=1500,
               eval_every=100).run(oracle, x0, geo)
    assert abs(_gap(res, cert)) <= 1e-6  # measured 1e-10
    assert res.violation <= 1e-6


def test_umcm_decreases_and_fixed_beta_approaches_certificate(hevp):
    c, geo, cert, x0, oracle, gap0 = hevp
    res = UMCM(max_iterations=150, eval_every=10).run(oracle, x0, geo)
    assert res.info["hvp"] == "closed"
    assert _gap(res, cert) <= 0.98 * gap0  # measured 0.96·gap0
    assert res.violation <= 1e-3
    res = UMCM(step_size=5e-2, beta={"beta0": 10.0, "every": 0}, max_iterations=600,
               eval_every=100).run(oracle, x0, geo)
    assert abs(_gap(res, cert)) <= 1e-2  # measured 3e-3
    assert res.violation <= 1e-3
    costs = np.asarray(res.history["cost"])
    assert costs[-1] < costs[0]


def test_umcm_hessian_vector_modes_agree(hevp):
    """Closed form, autograd through a torch gradient, and finite differences give one path."""
    c, geo, cert, x0, oracle, gap0 = hevp
    torch_oracle = FunctionOracle(lambda x: (x * (c @ x)).sum(), lambda x: 2.0 * c @ x)
    out = {}
    for mode, orc in (("closed", oracle), ("autograd", torch_oracle),
                      ("finite-difference", oracle)):
        res = UMCM(hvp=mode, max_iterations=30, eval_every=30).run(orc, x0, geo)
        assert res.info["hvp"] == mode
        out[mode] = res.point
    assert torch.allclose(out["closed"], out["autograd"], atol=1e-9)
    assert torch.allclose(out["closed"], out["finite-difference"], atol=1e-6)
    res = UMCM(max_iterations=1).run(torch_oracle, x0, geo)
    assert res.info["hvp"] == "autograd"


def test_csdm_decreases_and_stays_feasible(hevp):
    c, geo, cert, x0, oracle, gap0 = hevp
    res = CSDM(max_iterations=500, eval_every=50).run(oracle, x0, geo)
    gap = _gap(res, cert)
    assert gap <= 0.95 * gap0  # measured 0.90·gap0
    assert gap >= -1e-10  # feasible: cannot go below the certificate
    assert geo.relative_violation(res.point) <= 1e-13
    assert res.info["parameters"] == 30 < geo.dim
    assert np.all(np.diff(res.history["cost"]) < 0)


# ---- ADMM subproblems and the penalty schedule ----------------------------------------------
@pytest.mark.parametrize("shape", [(7, 7), (9, 4)])
def test_admm_closed_forms_solve_their_subproblems(shape):
    n, k = shape
    g_ = torch.Generator().manual_seed(n)
    jn = torch.tensor([1.0, -1, 1, -1, 1, 1, -1, 1, -1][:n], dtype=F64)
    jk = torch.tensor([1.0, -1, -1, 1, 1, -1, 1][:k], dtype=F64)
    x, y, w, g = (torch.randn(n, k, dtype=F64, generator=g_) for _ in range(4))
    z = torch.randn(k, k, dtype=F64, generator=g_)
    lip, beta = 3.0, 50.0

    def lagr(x_, y_):
        e1, e2 = x_.mT @ y_ - torch.diag(jk), jn[:, None] * x_ - y_
        return ((e1 * z).sum() + (e2 * w).sum() + beta / 2 * (e1 * e1).sum()
                + beta / 2 * (e2 * e2).sum())

    xp = admm_x_update(x, y, z, w, g, jn, jk, lip, beta).requires_grad_(True)
    lx = ((xp - x) * g).sum() + lip / 2 * ((xp - x) ** 2).sum() + lagr(xp, y)
    (gx,) = torch.autograd.grad(lx, xp)
    yp = admm_y_update(xp.detach(), z, w, jn, jk, beta).requires_grad_(True)
    (gy,) = torch.autograd.grad(lagr(xp.detach(), yp), yp)
    scale = beta * float(torch.linalg.norm(y)) ** 2 * float(torch.linalg.norm(x))
    assert float(torch.linalg.norm(gx)) <= 1e-12 * scale
    assert float(torch.linalg.norm(gy)) <= 1e-12 * scale


def test_penalty_schedule_matches_the_papers_loop():
    sched = PenaltySchedule(1e2)
    beta, expected = 1e2, []
    for t in range(200):
        expected.append(beta)
        if t % 5 == 0 and beta <= 1e9:
            beta *= 2
    assert [sched(t) for t in range(200)] == expected
    assert PenaltySchedule(7.0, every=0)(100) == 7.0


def test_baseline_option_errors(hevp):
    c, geo, cert, x0, oracle, gap0 = hevp
    for make in (lambda: PenaltySchedule(-1.0), lambda: PenaltySchedule(1.0, every=-1),
                 lambda: PenaltySchedule(1.0, factor=0.5), lambda: ADMM(lipschitz=0.0),
                 lambda: ADMM(beta="big"), lambda: UMCM(step_size=0.0), lambda: UMCM(hvp="exact"),
                 lambda: CSDM(layers=0), lambda: CSDM(step_size=-1.0)):
        with pytest.raises(ValueError):
            make()
    fn_oracle = FunctionOracle(lambda x: (x * (c @ x)).sum(), lambda x: 2.0 * c @ x)
    with pytest.raises(ValueError, match="QuadraticOracle"):
        UMCM(hvp="closed", max_iterations=1).run(fn_oracle, x0, geo)
    np_oracle = FunctionOracle(lambda x: (x * (c @ x)).sum(),
                               lambda x: torch.from_numpy(2.0 * c.numpy() @ x.detach().numpy()))
    with pytest.raises(ValueError, match="differentiable"):
        UMCM(hvp="autograd", max_iterations=1).run(np_oracle, x0, geo)
    with pytest.raises(ValueError, match="one n × k"):
        ADMM(max_iterations=1).run(oracle, torch.stack([x0, x0]), geo)


def test_baselines_on_rectangular_indefinite_stiefel():
    n, k = 12, 5
    c = torch.from_numpy(make_spd(n, seed=3))
    geo = IndefiniteStiefelGeometry(n, k, 6, 3)
    cert = trace_min_certificate(c.numpy(), geo.j, geo.jk.values)
    x0 = geo.random_point(generator=torch.Generator().manual_seed(0))
    oracle = QuadraticOracle(c)
    f0 = float(oracle.value(x0))
    res = ADMM(beta={"beta0": oracle.lipschitz, "every": 0}, max_iterations=1500,
               eval_every=500).run(oracle, x0, geo)
    assert abs(res.cost - cert) <= 1e-6 * cert and res.violation <= 1e-6
    for solver in (UMCM(max_iterations=100, eval_every=100),
                   CSDM(max_iterations=100, eval_every=100)):
        res = solver.run(oracle, x0, geo)
        assert res.cost < f0
    assert geo.relative_violation(res.point) <= 1e-13  # CSDM


# ---- CSDM parametrisation --------------------------------------------------------------------
@pytest.mark.parametrize("layers", [1, 2, 3])
def test_csdm_parametrisation_is_j_orthogonal_and_its_vjp_is_exact(layers):
    sig = Signature(np.random.default_rng(layers).permutation([1.0] * 6 + [-1.0] * 5))
    pm = CSParametrization(sig, layers)
    gen = torch.Generator().manual_seed(layers)
    jd = torch.diag(sig.like(torch.zeros(1, dtype=F64)))
    for _ in range(5):
        psi = torch.randn(pm.num_parameters, dtype=F64, generator=gen)
        y = pm.matrix(psi)
        assert float((y.mT @ jd @ y - jd).abs().max()) <= 1e-12
    eye = torch.eye(11, dtype=F64)
    assert torch.equal(pm.matrix(torch.zeros(pm.num_parameters, dtype=F64)), eye)
    x0 = torch.randn(7, 11, dtype=F64, generator=gen)
    g = torch.randn(7, 11, dtype=F64, generator=gen)
    p = psi.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(pm.apply(x0, p), p, g)
    pm.apply(x0, psi, keep=True)
    assert torch.allclose(pm.vjp(psi, g), auto, atol=1e-12)
    assert torch.allclose(pm.apply(x0, psi), x0 @ y, atol=1e-12)


# ---- UMCM gradient ---------------------------------------------------------------------------
def test_umcm_gradient_matches_autograd_of_h():
    n, k, s, beta = 9, 4, 0.7, 3.0
    geo = IndefiniteStiefelGeometry(n, k, 5, 2)
    c = torch.from_numpy(make_spd(n, seed=1))
    d = torch.from_numpy(make_spd(k, seed=2))
    x = torch.randn(n, k, dtype=F64, generator=torch.Generator().manual_seed(0))
    jn, jk = geo.j.like(x), geo.jk.like(x)

    def h(x_):
        g = 2 * s * c @ x_ @ d
        e = x_.mT @ (jn[:, None] * x_) - torch.diag(jk)
        return (s * (x_ * (c @ x_ @ d)).sum() - 0.5 * ((jk[:, None] * (x_.mT @ g)) * e).sum()
                + beta / 2 * (e * e).sum())

    xl = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(h(xl), xl)
    mine = umcm_gradient(x, 2 * s * c @ x @ d, lambda v: 2 * s * c @ v @ d, jn, jk, beta)
    assert torch.allclose(mine, auto, rtol=1e-12, atol=1e-11 * float(auto.abs().max()))


# ---- HSPP ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hspp_small():
    n, p, m = 8, 4, 40
    geo = JOrthogonalGeometry(n, p)
    prob = HSPP(make_hspp_data(m, n, seed=0), p)
    x = geo.random_point(generator=torch.Generator().manual_seed(0))
    return geo, prob, x


def test_hspp_full_gradient_is_mean_of_components_and_matches_finite_differences(hspp_small):
    geo, prob, x = hspp_small
    g = prob.gradient(x)
    comps = torch.stack([prob.component_gradient(x, [i]) for i in range(prob.m)])
    assert torch.allclose(g, comps.mean(0), rtol=1e-12, atol=1e-13)
    vals = torch.stack([prob.component_value(x, [i]) for i in range(prob.m)])
    assert torch.allclose(prob.value(x), vals.mean(), rtol=1e-13)
    idx = [3, 17, 25]
    assert torch.allclose(prob.component_gradient(x, idx), comps[idx].mean(0), atol=1e-13)
    v = torch.randn(x.shape, dtype=F64, generator=torch.Generator().manual_seed(1))
    eps = 1e-7  # third derivatives are large (d_α' ~ |u−1|^(-1/2)): keep ε small
    fd = (prob.value(x + eps * v) - prob.value(x - eps * v)) / (2 * eps)
    assert abs(float(fd - (g * v).sum())) <= 1e-6 * float(g.abs().sum() * v.abs().max())
    # the gradient keeps its graph for Hessian-vector products (UMCM's hvp="autograd")
    xl = x.clone().requires_grad_(True)
    (hv,) = torch.autograd.grad(prob.component_gradient(xl, torch.arange(prob.m)), xl, v)
    hfd = (prob.gradient(x + eps * v) - prob.gradient(x - eps * v)) / (2 * eps)
    assert torch.allclose(hv, hfd, rtol=1e-4, atol=1e-4 * float(hv.abs().max()))
    # the oracle wraps the same functions
    oracle = prob.oracle(lipschitz=1.0)
    assert oracle.num_components == prob.m
    assert torch.equal(oracle.gradient(x), g)


def test_hspp_paper_form_is_constant_on_the_group_and_ours_is_not(hspp_small):
    geo, prob, _ = hspp_small
    paper = HSPP(prob.data, 4, form="phi(D)X")
    xs = [geo.random_point(generator=torch.Generator().manual_seed(s)) for s in range(4)]
    vp = [float(paper.value(x)) for x in xs]
    vo = [float(prob.value(x)) for x in xs]
    assert max(vp) - min(vp) <= 1e-12 * abs(vp[0])
    assert max(vo) - min(vo) >= 1e-3 * abs(vo[0])


def test_hspp_options_and_pymanopt_problem(hspp_small):
    geo, prob, x = hspp_small
    from orthoplug.adapters import pymanopt as pm

    problem = prob.pymanopt_problem(pm.JOrthogonal(8, 4))
    assert abs(problem.cost(x.numpy()) - float(prob.value(x))) <= 1e-14
    assert np.allclose(problem.euclidean_gradient(x.numpy()), prob.gradient(x).numpy())
    for kwargs in ({"alpha": 0.0}, {"form": "paper"}, {"clamp": 2.0},
                   {"k_signature": [1.0, 1.0]}):
        with pytest.raises(ValueError):
            HSPP(prob.data, 4, **kwargs)
    with pytest.raises(ValueError):
        prob.component_gradient(x, [prob.m])
    with pytest.raises(ValueError):
        make_hspp_data(10, 4, source="mnist")
    rect = HSPP(make_hspp_data(30, 6, source="digits", seed=1), 3, k_signature=[1.0, -1.0, 1.0])
    xr = IndefiniteStiefelGeometry(6, 3, 3, 2).random_point(
        generator=torch.Generator().manual_seed(0))
    assert rect.gradient(xr).shape == (6, 3)


def test_baselines_run_on_the_hspp_finite_sum_oracle(hspp_small):
    """Any oracle works: UMCM takes Hessian-vector products by double backward through HSPP's
    autograd gradients; CSDM stays exactly feasible; ADMM with a fixed β decreases f."""
    geo, prob, x = hspp_small
    sigma = prob.estimate_lipschitz(x, iterations=5, generator=torch.Generator().manual_seed(0))
    oracle = prob.oracle(lipschitz=sigma)
    f0 = float(prob.value(x))
    res = UMCM(max_iterations=5, eval_every=5).run(oracle, x, geo)
    assert res.info["hvp"] == "autograd" and math.isfinite(res.cost)
    res = CSDM(max_iterations=30, eval_every=30).run(oracle, x, geo)
    assert res.cost < f0 and geo.relative_violation(res.point) <= 1e-13
    res = ADMM(beta={"beta0": sigma, "every": 0}, max_iterations=30, eval_every=30).run(
        oracle, x, geo)
    assert res.cost < f0 and res.violation <= 1e-4


# ---- the acceptance line -------------------------------------------------------------
@pytest.mark.parametrize("seed", range(3))
def test_vr_j_jobcd_beats_j_jobcd_at_equal_component_gradients(seed):
    """HSPP, Q = φ(DX), N = m = 500 components, n = 8, σ = 2 × local Hessian norm at X₀.

    VR-J-JOBCD runs 150 iterations and reports its component gradients C (≈ 20 N); J-JOBCD,
    with the same fixed σ, gets ⌈C/N⌉ iterations (N component gradients each), i.e. at least the
    same budget. Measured over
    5 Gaussian and 3 digits seeds: VR's decrease f(X₀) − f is 2.2–9.9× J-JOBCD's.
    """
    m, n = 500, 8
    geo = JOrthogonalGeometry(n, n // 2)
    prob = HSPP(make_hspp_data(m, n, seed=seed), n // 2)
    x0 = geo.random_point(generator=torch.Generator().manual_seed(seed))
    sigma = prob.estimate_lipschitz(x0, iterations=8,
                                    generator=torch.Generator().manual_seed(seed))
    oracle = prob.oracle(lipschitz=sigma)
    f0 = float(prob.value(x0))
    vr = VRJJOBCD(seed=seed, max_iterations=150, eval_every=150).run(oracle, x0, geo)
    budget = vr.info["component_gradients"]
    iters = math.ceil(budget / m)
    jj = JJOBCD(sigma_rule=sigma, seed=seed, max_iterations=iters, eval_every=iters).run(
        oracle, x0, geo)
    assert iters * m >= budget
    assert vr.cost < jj.cost < f0
    assert f0 - vr.cost >= 1.5 * (f0 - jj.cost)
    assert vr.violation <= 1e-12 and jj.violation <= 1e-12
