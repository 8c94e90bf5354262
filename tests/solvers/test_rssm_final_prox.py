"""The subgradient methods' final proximal pass: exact zeros for ℓ1, feasibility, F not raised."""

from __future__ import annotations

import pytest
import torch

from orthoplug.baselines.rsubgrad import RSubGrad
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.problems import spca
from orthoplug.solvers.rssm import RSSM


def _problem(lam_scale: float = 1.0):
    """Gaussian ℓ1-SPCA, n = 40, r = 4, with the OBCD suite's μ = 0.5 λ₁/√n (times lam_scale):
    its minimisers have many zero entries."""
    c = spca.covariance(spca.gaussian_data(120, 40, seed=3))
    lam1 = float(torch.linalg.eigvalsh(c)[-1])
    return spca.l1_spca(c, 4, lam_scale * 0.5 * lam1 / 40 ** 0.5)


SOLVERS = {"RSSM": lambda **kw: RSSM(num_blocks=4, max_iterations=400, seed=0, **kw),
           "RSubGrad": lambda **kw: RSubGrad(max_iterations=200, seed=0, **kw)}


@pytest.mark.parametrize("name", list(SOLVERS))
def test_final_prox_gives_exact_zeros_and_keeps_feasibility(name):
    prob = _problem()
    x0 = prob.initial_point("random", 1)
    geo = StiefelGeometry(prob.n, prob.r)
    plain = SOLVERS[name](h=prob.h, final_prox=False).run(prob.oracle, x0, geo)
    res = SOLVERS[name](h=prob.h).run(prob.oracle, x0, geo)
    record = res.info["final_prox"]
    assert "final_prox" not in plain.info
    # the pass starts from the plain run's point: a subgradient iterate has no exact zeros
    assert record["cost_before"] == plain.cost and record["zeros_before"] == 0
    assert int((plain.point == 0).sum()) == 0
    zeros = int((res.point == 0).sum())
    assert record["accepted"] and record["zeros_after"] == zeros > 0
    assert res.cost <= plain.cost
    assert res.cost == pytest.approx(prob.objective(res.point), abs=1e-14)
    assert record["cost_after"] == pytest.approx(res.cost, abs=1e-14)
    eye = torch.eye(prob.r, dtype=res.point.dtype)
    assert float(torch.linalg.matrix_norm(res.point.mT @ res.point - eye)) <= 1e-13
    assert res.violation <= 1e-13


def test_final_prox_only_for_separable_terms():
    """Without h (or with h written into f) there is no prox to take: no pass, no record."""
    prob = _problem()
    x0 = prob.initial_point("random", 1)
    res = RSSM(num_blocks=4, max_iterations=50, seed=0).run(
        prob.oracle, x0, StiefelGeometry(prob.n, prob.r))
    assert "final_prox" not in res.info


def test_final_prox_is_deterministic():
    prob = _problem(2.0)
    x0 = prob.initial_point("random", 2)
    geo = StiefelGeometry(prob.n, prob.r)
    a, b = (RSSM(num_blocks=4, h=prob.h, max_iterations=100, seed=5).run(prob.oracle, x0, geo)
            for _ in range(2))
    assert torch.equal(a.point, b.point)
