"""LADMM, RADMM and PSM (the OBCD paper's splitting baselines) and the nonnegative rounding."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import orthoplug.baselines
from orthoplug.baselines.ladmm import LADMM
from orthoplug.baselines.psm import PSM
from orthoplug.baselines.radmm import RADMM
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.nonsmooth import L1
from orthoplug.oracles import QuadraticOracle
from orthoplug.problems import spca
from orthoplug.solvers.splitting import nonneg_rounding

DT = torch.float64
METHODS = [LADMM, RADMM, PSM]


def _problem(kind, n=16, r=4, seed=0):
    a = np.random.default_rng(seed).standard_normal((40, n))
    a[:, :3] *= 4.0  # a few dominant directions
    c = spca.covariance(a)
    lam1 = float(torch.linalg.eigvalsh(c)[-1])
    if kind == "nonneg":
        return spca.nn_pca(c, r)
    if kind == "l0":
        return spca.l0_spca(c, r, 0.5 * lam1 / n)
    return spca.l1_spca(c, r, 0.5 * lam1 / math.sqrt(n))


def test_nonneg_rounding_is_feasible_and_keeps_supports():
    gen = torch.Generator().manual_seed(0)
    for trial in range(20):
        x = torch.randn(9, 4, dtype=DT, generator=gen)
        if trial % 2:
            x[:, 2] = -x[:, 2].abs()  # a column with no positive entry
        out = nonneg_rounding(x)
        assert float(out.min()) >= 0.0
        assert torch.allclose(out.mT @ out, torch.eye(4, dtype=DT), atol=1e-14)
        assert int((out > 0).sum(1).max()) <= 1  # disjoint supports
    # a feasible point is its own rounding
    x = torch.zeros(6, 2, dtype=DT)
    x[[0, 3], 0] = torch.tensor([0.6, 0.8], dtype=DT)
    x[[1, 5], 1] = 1 / math.sqrt(2)
    assert torch.allclose(nonneg_rounding(x), x, atol=1e-15)
    with pytest.raises(ValueError, match="n >= r"):
        nonneg_rounding(torch.ones(2, 3, dtype=DT))


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
@pytest.mark.parametrize("kind", ["l1", "l0", "nonneg"])
def test_outputs_feasible_and_objective_decreases(method, kind):
    prob = _problem(kind)
    x0 = prob.initial_point("random", 1)
    res = method(prob.h, max_iterations=1500, eval_every=50).run(
        prob.oracle, x0, StiefelGeometry(16, 4))
    assert res.violation < 1e-12
    if kind == "nonneg":
        assert float(res.point.min()) >= 0.0
    score = (prob.f(res.point) + prob.h.lam * spca.count_l0(res.point) if kind == "l0"
             else prob.objective(res.point))
    start = (prob.f(x0) + prob.h.lam * spca.count_l0(x0) if kind == "l0"
             else prob.objective(x0))
    assert score < start - 1e-3, (score, start)
    assert res.cost == pytest.approx(prob.objective(res.point), abs=1e-10)
    assert res.info["residual"] < 1e-3  # X and Y agree in the end


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_h_zero_reaches_the_pca_value(method):
    prob = _problem("l1")
    prob0 = spca.l1_spca(prob.c, 3, 0.0)  # r = 3: the three boosted directions, a large gap
    res = method(prob0.h, max_iterations=3000, eval_every=100).run(
        prob0.oracle, prob0.initial_point("random", 2), StiefelGeometry(16, 3))
    assert res.cost == pytest.approx(prob0.pca_value(), abs=1e-8)


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_default_h_stops_at_the_pca_optimum_not_after_one_iteration(method):
    # h = 0 (the default): X = Y at every iterate, so the splitting residual alone would stop
    # the run at once; the stationarity ‖P_X(∇f + Λ)‖ stops it at the top-3 eigenspace, whose
    # value is minus the sum of the 3 largest eigenvalues of C (eigh's closed form)
    prob = _problem("l1")
    x0 = prob.initial_point("random", 2)
    res = method(min_gradient_norm=1e-9, max_iterations=20000).run(
        QuadraticOracle(prob.c, scale=-1.0), x0[:, :3].contiguous(), StiefelGeometry(16, 3))
    optimum = -float(torch.linalg.eigvalsh(prob.c)[-3:].sum())
    assert res.stop_reason.startswith("gradient norm") and res.iterations > 10
    assert res.cost == pytest.approx(optimum, abs=1e-12)
    assert res.gradient_evaluations == res.iterations + 1  # one gradient per X, reused
    x = res.point
    assert torch.allclose(prob.c @ x, x @ (x.mT @ prob.c @ x), atol=1e-8)  # an eigenspace


def test_radmm_y_step_is_the_exact_minimiser():
    # min_Y h_μ(Y) + ρ/2‖Y − W‖² for h = λ|·| on scalars, by brute force
    lam, rho, mu, w = 0.7, 2.0, 0.3, torch.tensor([1.3, -0.2, 0.45], dtype=DT)
    h = L1(lam)
    z = h.prox(w, 1.0 / rho + mu)
    y = (z + mu * rho * w) / (1.0 + mu * rho)
    grid = torch.linspace(-3, 3, 600001, dtype=DT)

    def moreau(v):  # h_μ(v) = Huber for |·|
        a = v.abs()
        return torch.where(a <= lam * mu, a * a / (2 * mu), lam * a - lam * lam * mu / 2)

    for k in range(3):
        vals = moreau(grid) + 0.5 * rho * (grid - w[k]) ** 2
        assert float(y[k]) == pytest.approx(float(grid[int(torch.argmin(vals))]), abs=2e-5)


def test_errors():
    prob = _problem("nonneg")
    with pytest.raises(ValueError, match="penalty"):
        LADMM(prob.h, penalty=0.0)
    with pytest.raises(ValueError, match="growth"):
        PSM(prob.h, growth=0.5)
    with pytest.raises(ValueError, match="smoothing"):
        RADMM(prob.h, smoothing=0.0)
    with pytest.raises(ValueError, match="infeasible initial point"):
        LADMM(prob.h, max_iterations=2).run(prob.oracle, -torch.eye(16, 4, dtype=DT),
                                            StiefelGeometry(16, 4))
    from orthoplug.oracles import FunctionOracle

    no_lip = FunctionOracle(prob.oracle.value, prob.oracle.gradient)
    with pytest.raises(ValueError, match="Lipschitz"):
        RADMM(prob.h, max_iterations=2).run(no_lip, prob.initial_point("random", 0),
                                            StiefelGeometry(16, 4))


#: the modules of SparseOBCD and its stages
SPARSE_OBCD_MODULES = ("sparse_obcd", "sparse_starts", "row_partition", "column_sweeps")


def test_no_baseline_imports_sparse_obcd_module():
    # the ADMM step the baselines share with SparseOBCD lives in orthoplug.solvers.splitting
    offenders = []
    for path in Path(orthoplug.baselines.__path__[0]).glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if any(module in name for name in names for module in SPARSE_OBCD_MODULES):
                offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders, offenders
