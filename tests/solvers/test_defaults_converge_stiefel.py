"""Default budgets converge: a pymanopt door with no budget option (``max_iterations``,
``max_time``, ``min_gradient_norm`` at their defaults) ends within 1e-3 (relative) of the same
solver given a 20× iteration budget, on small instances of the problems each solver is for.
An iteration is about one full gradient's work in every solver (``docs/guide/options.md``)."""

from __future__ import annotations

import autograd.numpy as anp
import pymanopt
import pytest
import torch

from orthoplug.adapters import pymanopt as pm
from orthoplug.nonsmooth import Zero
from orthoplug.problems import spca
from orthoplug.solvers.splitting import nonneg_rounding

DEFAULT_ITERATIONS = 1000  # SolverOptimizer's max_iterations


def _problem(kind: str, n: int = 30, r: int = 3) -> spca.SPCAProblem:
    c = spca.covariance(spca.gaussian_data(60, n, seed=4))
    lam1 = float(torch.linalg.eigvalsh(c)[-1])
    if kind == "pca":
        return spca.SPCAProblem(c, r, Zero(), -1.0, "pca")
    if kind == "l1":
        return spca.l1_spca(c, r, 0.5 * lam1 / n**0.5)
    if kind == "l0":
        return spca.l0_spca(c, r, 0.5 * lam1 / n)
    return spca.nn_pca(c, r)


def _start(prob: spca.SPCAProblem) -> torch.Tensor:
    x0 = prob.initial_point("random", 0)
    return nonneg_rounding(x0) if prob.kind == "nonneg" else x0


#: id -> (door, its options besides the budget, problem kind, whether it takes h, n); the
#: SparseOBCD cases are smaller (their greedy pair steps compare 16 pairs each)
CASES = {
    "OBCD-h0": (pm.OBCD, {}, "pca", True, 30),
    "OBCD-l1": (pm.OBCD, {}, "l1", True, 30),
    "SparseOBCD-l0": (pm.SparseOBCD, {}, "l0", True, 12),
    "SparseOBCD-nnpca": (pm.SparseOBCD, {}, "nonneg", True, 12),
    "RSDM-pca": (pm.RSDM, {}, "pca", False, 30),
    "LADMM-h0": (pm.LADMM, {}, "pca", True, 30),
    "RADMM-h0": (pm.RADMM, {}, "pca", True, 30),
    "PSM-h0": (pm.PSM, {}, "pca", True, 30),
    "ManPG-l1": (pm.ManPG, {}, "l1", True, 30),
}


def _final_objective(case: str, **budget) -> float:
    door, options, kind, takes_h, n = CASES[case]
    prob = _problem(kind, n)
    manifold = pymanopt.manifolds.Stiefel(prob.n, prob.r)
    c, s = prob.c.numpy(), prob.scale

    @pymanopt.function.autograd(manifold)
    def cost(x):
        return s * anp.trace(x.T @ c @ x)

    if takes_h:
        options = {"h": prob.h, **options}
    result = door(seed=0, **options, **budget).run(
        pymanopt.Problem(manifold, cost), initial_point=_start(prob).numpy(),
        oracle=prob.oracle)
    return prob.objective(result.point)


@pytest.mark.parametrize("case", sorted(CASES))
def test_default_budget_is_within_1e_3_of_a_20x_budget(case):
    default = _final_objective(case)
    long = _final_objective(case, max_iterations=20 * DEFAULT_ITERATIONS)
    assert abs(default - long) <= 1e-3 * abs(long), (default, long)
    if CASES[case][2] == "pca":  # h = 0: the PCA optimum, −(sum of the r top eigenvalues)
        optimum = _problem("pca", CASES[case][4]).pca_value()
        assert abs(default - optimum) <= 1e-3 * abs(optimum), (default, optimum)
