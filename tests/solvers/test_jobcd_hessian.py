"""J-JOBCD with the second-order column model (``curvature="hessian"``): Hessian-vector products
from pymanopt autodiff problems, round-robin column rounds over square O(J), the model step test."""

from __future__ import annotations

import autograd.numpy as anp
import numpy as np
import pymanopt
import pytest
import torch

from orthoplug.adapters import pymanopt as pm
from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry, JOrthogonalGeometry
from orthoplug.kernels.jmodel import psd2
from orthoplug.oracles import FunctionOracle, HessianVector
from orthoplug.problems.hevp import make_spd, trace_min_certificate
from orthoplug.solvers.jjacobi import ColumnModel
from orthoplug.solvers.jobcd import JJOBCD
from orthoplug.solvers.pairs import round_robin
from orthoplug.solvers.sigma_rules import ModelDamping


def _tracemin_c(n: int, seed: int = 0) -> np.ndarray:
    d = np.random.default_rng(seed).standard_normal((2 * n, n))
    return d.T @ d / (2 * n) + 0.05 * np.eye(n)


def _signature(n: int, kind: str) -> list[float]:
    j = [1.0] * (n // 2) + [-1.0] * (n - n // 2)
    return j if kind == "sorted" else list(np.random.default_rng(n).permutation(j))


def _trace_oracle(c: torch.Tensor, hessian: bool = True) -> FunctionOracle:
    return FunctionOracle(lambda x: (x * (c @ x)).sum(), lambda x: 2.0 * (c @ x),
                          hessian=(lambda x, u: 2.0 * (c @ u)) if hessian else None)


# ---- the model ----------------------------------------------------------------------------------


def test_round_robin_covers_every_pair_once_in_disjoint_rounds():
    for n in (2, 5, 8, 11):
        rounds = round_robin(n).numpy()
        assert rounds.shape == (n - 1 + n % 2, n // 2, 2)
        for r in rounds:
            assert len(set(r.ravel().tolist())) == r.size  # disjoint within a round
        pairs = {tuple(sorted(p)) for p in rounds.reshape(-1, 2).tolist()}
        assert len(pairs) == rounds.shape[0] * rounds.shape[1] == n * (n - 1) // 2


def test_psd_part_of_2x2_blocks_matches_the_eigendecomposition():
    a = np.random.default_rng(0).standard_normal((200, 2, 2))
    a = a + a.transpose(0, 2, 1)
    lam, u = np.linalg.eigh(a)
    want = (u * np.clip(lam, 0, None)[:, None, :]) @ u.transpose(0, 2, 1)
    for blk, w in zip(a, want, strict=True):
        p, q, r = psd2(blk[0, 0], blk[0, 1], blk[1, 1])
        np.testing.assert_allclose([[p, q], [q, r]], w, atol=1e-13)


def _model_at(oracle, x):
    return ColumnModel(x, oracle.gradient(x), oracle.hessian_vector(x, x))


@pytest.mark.parametrize("kind", ["sorted", "unsorted"])
def test_model_sweep_is_exact_for_the_trace_cost_and_carries_the_model(kind):
    """For f = tr(XᵀCX) the model is f(XV) itself, so a sweep's predicted change is the true
    one (θ = 1e-12); and carrying the model through the rounds (O(n) per pair in the kernel)
    gives the steps of a model rebuilt from derivatives before every round."""
    n = 9
    geo = JOrthogonalGeometry(n, signature=_signature(n, kind))
    jarr = np.asarray(geo.j.values, dtype=np.float64)
    oracle = _trace_oracle(torch.from_numpy(make_spd(n, seed=1)))
    x = geo.random_point(cond=3.0, generator=torch.Generator().manual_seed(1))
    rounds = round_robin(n).numpy()
    v, predicted, skipped = _model_at(oracle, x).sweep(rounds, jarr, 1e-12)
    vt = torch.from_numpy(v)
    jm = torch.diag(torch.from_numpy(jarr))
    assert skipped == 0
    assert float(torch.linalg.norm(vt.mT @ jm @ vt - jm)) < 1e-11
    change = float(oracle.value(x @ vt) - oracle.value(x))
    assert change < -1e-3
    np.testing.assert_allclose(change, predicted, rtol=1e-9)
    y = x.clone()
    for r in range(rounds.shape[0]):  # a fresh model (gradient, Hessian product) per round
        v_r, _, _ = _model_at(oracle, y).sweep(rounds[r:r + 1], jarr, 1e-12)
        y = y @ torch.from_numpy(v_r)
    torch.testing.assert_close(x @ vt, y, atol=1e-10, rtol=0)


def test_damping_rule_accepts_sufficient_decrease_and_raises_after_rejections():
    rule = ModelDamping(eta=0.1, start=1e-4, grow=10.0, shrink=0.25, max_rejections=3)
    assert rule.accepts(1.0, 0.95, -0.1) and rule.weight == 0.0
    assert not rule.accepts(1.0, 0.995, -0.1)  # 0.5 % of the predicted decrease
    assert rule.weight == 1e-4
    assert not rule.accepts(1.0, 1.0 + 1e-9, -1e-12)  # an increase beyond rounding
    assert rule.weight == pytest.approx(1e-3)
    assert rule.accepts(1.0, 0.9, -0.2)
    assert rule.weight == pytest.approx(2.5e-4)
    for _ in range(3):
        assert not rule.accepts(1.0, float("nan"), -0.1)
    with pytest.raises(FloatingPointError, match="not finite"):
        rule.accepts(1.0, float("nan"), -0.1)


# ---- the ability --------------------------------------------------------------------------------


def test_hessian_vector_ability_of_function_oracles_and_pymanopt_problems():
    c = torch.from_numpy(make_spd(4, seed=0))
    assert isinstance(_trace_oracle(c), HessianVector)
    assert not isinstance(_trace_oracle(c, hessian=False), HessianVector)
    manifold = pm.JOrthogonal(4, 2)
    cn = c.numpy()

    @pymanopt.function.autograd(manifold)
    def cost(x):
        return anp.sum(x * (cn @ x))

    oracle = pm.JJOBCD().oracle_for(pymanopt.Problem(manifold, cost))
    x, u = torch.eye(4, dtype=torch.float64), torch.from_numpy(make_spd(4, seed=3))
    assert isinstance(oracle, HessianVector)
    torch.testing.assert_close(oracle.hessian_vector(x, u), 2.0 * c @ u)

    @pymanopt.function.numpy(manifold)
    def plain_cost(x):
        return float(np.sum(x * (cn @ x)))

    @pymanopt.function.numpy(manifold)
    def plain_grad(x):
        return 2.0 * cn @ x

    no_hvp = pm.JJOBCD().oracle_for(pymanopt.Problem(manifold, plain_cost,
                                                     euclidean_gradient=plain_grad))
    assert not isinstance(no_hvp, HessianVector)


# ---- the solver ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sorted", "unsorted"])
@pytest.mark.parametrize("n", [12, 13])
def test_autodiff_trace_min_reaches_the_certificate(kind, n):
    """From a pymanopt autodiff Problem alone (no structure given), J-JOBCD's Hessian column
    model (``curvature="hessian", side="column"``) reaches Σ|λ(JC)| to 1e-10 relative in a few
    sweeps,
    with f non-increasing at every round and XᵀJX = J to 1e-10."""
    j = _signature(n, kind)
    c = _tracemin_c(n)
    manifold = pm.JOrthogonal(n, signature=j)

    @pymanopt.function.autograd(manifold)
    def cost(x):
        return anp.sum(x * (c @ x))

    cert = trace_min_certificate(c, JOrthogonalGeometry(n, signature=j).j)
    opt = pm.JJOBCD(curvature="hessian", side="column", max_iterations=20,
                    min_gradient_norm=0.0, seed=0, log_verbosity=1,
                    target_cost=cert * (1 + 1e-10))
    res = opt.run(pymanopt.Problem(manifold, cost), initial_point=np.eye(n)).solver_result
    assert res.info["curvature"] == "hessian" and res.info["side"] == "column"
    assert res.stop_reason.startswith("target cost"), res.stop_reason
    assert abs(res.cost - cert) <= 1e-10 * cert
    # quadratic convergence: a few sweeps (the scalar majoriser needs thousands of matchings),
    # one model (gradient + Hessian-vector product) per sweep
    assert res.iterations <= 6
    assert res.info["hessian_vector_products"] == res.iterations
    assert res.info["rejections"] == 0 and res.info["skipped_pairs"] == 0
    costs = np.asarray(res.history["cost"])
    assert np.all(np.diff(costs) <= 1e-13 * costs[0])
    assert max(res.history["violation"]) <= 1e-10


def _logcosh_oracle(c: torch.Tensor) -> FunctionOracle:
    """f = tr(XᵀCX) + Σ log cosh X_ij: its Hessian ``2CU + (1 − tanh²X)∘U`` does not act from
    the left, so the column model is only approximate."""
    return FunctionOracle(
        lambda x: (x * (c @ x)).sum() + torch.log(torch.cosh(x)).sum(),
        lambda x: 2 * c @ x + torch.tanh(x),
        hessian=lambda x, u: 2 * c @ u + (1 - torch.tanh(x) ** 2) * u)


def test_non_quadratic_cost_is_safeguarded_monotone_and_converges():
    """An approximate model: the step test rejects sweeps (the safeguard acts), the cost never
    increases, X stays feasible, and the run ends at a stationary point (Riemannian gradient
    down by 1e-6)."""
    n = 8
    geo = JOrthogonalGeometry(n, n // 2)
    oracle = _logcosh_oracle(torch.from_numpy(_tracemin_c(n, seed=1)))
    x0 = geo.random_point(cond=3.0, generator=torch.Generator().manual_seed(0))
    res = JJOBCD(curvature="hessian", side="column", seed=0, max_iterations=40,
                 min_gradient_norm=0.0, log_verbosity=1).run(oracle, x0, geo)
    assert res.info["curvature"] == "hessian" and res.info["rejections"] >= 1
    costs = np.asarray(res.history["cost"])
    assert np.all(np.diff(costs) <= 1e-13 * costs[0])
    assert max(res.history["violation"]) <= 1e-10
    grads = res.history["gradient_norm"]
    assert grads[-1] <= 1e-6 * grads[0]


def test_curvature_options_and_errors():
    c = torch.from_numpy(make_spd(6, seed=0))
    geo = JOrthogonalGeometry(6, 3)
    x0 = geo.random_point(generator=torch.Generator().manual_seed(0))
    # the defaults are the scalar model on rows, whether or not the oracle has Hessian products
    scalar = JJOBCD(max_iterations=2, seed=0).run(_trace_oracle(c, hessian=False), x0, geo)
    assert scalar.info["curvature"] == "scalar" and scalar.info["side"] == "row"
    rows = JJOBCD(max_iterations=2, seed=0).run(_trace_oracle(c), x0, geo)
    assert rows.info["curvature"] == "scalar" and rows.info["side"] == "row"
    assert torch.equal(rows.point, scalar.point)
    with pytest.raises(ValueError, match="Hessian-vector"):
        JJOBCD(curvature="hessian", side="column").run(_trace_oracle(c, hessian=False), x0, geo)
    with pytest.raises(ValueError, match="pass side='column'"):
        JJOBCD(curvature="hessian", side="row")
    ist = IndefiniteStiefelGeometry(6, 3, 3, 2)
    with pytest.raises(ValueError, match="square X"):
        JJOBCD(curvature="hessian", side="column").run(_trace_oracle(c), ist.random_point(
            generator=torch.Generator().manual_seed(0)), ist)
    with pytest.raises(ValueError, match="curvature must be"):
        JJOBCD(curvature="exact")
