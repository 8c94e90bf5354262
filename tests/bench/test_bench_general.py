"""The general suite: every experiment builds a tiny instance and every method runs on it under an
iteration budget; the direct solve meets the certificate; the smooth O(J) cost's derivatives."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from orthoplug.bench import runner
from orthoplug.bench.core import run_method
from orthoplug.bench.suites import general
from orthoplug.bench.suites.general import (
    EXPERIMENTS,
    GeneralL1SPCA,
    QuadraticOJ,
    SmoothOJ,
    SparseQuadratic,
)

#: the runs' budget, in iterations (no time limit)
ITERATIONS = 3
TINY = [(QuadraticOJ.SIZES, {"oj": 8, "ist": (12, 4)}), (SparseQuadratic.SIZES, 60),
        (SmoothOJ.SIZES, 6), (GeneralL1SPCA.GAUSSIAN, (30, 12, 4)),
        (general._TwoShapes.SIZES, 20)]  # DPCP's quick n = 100 is small (RSSM-10 needs c ≥ 10)
CASES = [(exp, method) for exp in EXPERIMENTS for method in exp.methods("quick")]


@pytest.fixture
def tiny(monkeypatch):
    for table, size in TINY:
        monkeypatch.setitem(table, "quick", size)


def test_suite_is_part_of_quick_and_small():
    assert "general" in runner.SUITES
    names = {exp.name for exp in runner.experiments_of("quick")}
    assert {exp.name for exp in EXPERIMENTS} <= names
    assert all(exp.suite == "general" for exp in EXPERIMENTS)
    # the quick run grows by at most the sum of the time limits (the direct solves stop early)
    total = sum(exp.time_limits["quick"] * len(exp.instances("quick", 0))
                * len(exp.methods("quick")) for exp in EXPERIMENTS)
    assert total <= 90.0


@pytest.mark.parametrize(("exp", "method"), CASES, ids=[f"{e.name}-{m.name}" for e, m in CASES])
def test_method_runs_one_tiny_instance(exp, method, tiny):
    instance = exp.instances("quick", 0)[0]
    record = run_method(exp, instance, method, method.options, seed=0, scale="quick",
                        time_limit=math.inf, max_iterations=ITERATIONS)
    assert record.status == "ok", record.message
    assert record.options["max_iterations"] == ITERATIONS
    assert math.isfinite(record.objective) and record.violation <= 1e-8
    assert set(record.metrics) == set(exp.metrics)
    if instance.optimum is not None:
        assert record.objective >= instance.optimum * (1 - 1e-10)


def test_direct_solve_meets_the_certificate(tiny):
    for exp in (QuadraticOJ(), SparseQuadratic()):
        for instance in exp.instances("quick", 0):
            method = exp.methods("quick")[0]
            assert method.name == "HyperbolicEig"
            record = run_method(exp, instance, method, {}, seed=0, scale="quick",
                                time_limit=math.inf)
            assert record.gap <= 1e-12 and record.violation <= 1e-12, instance.dataset
            assert record.time_to_target is not None


def test_quadratic_instances_cover_both_signatures_and_weights(tiny):
    instances = QuadraticOJ().instances("quick", 0)
    assert [inst.sizes["p"] for inst in instances] == [6, 2, 9, 3]
    assert [inst.data.weights is None for inst in instances] == [True, True, False, False]
    x0 = SparseQuadratic().initial_point(SparseQuadratic().instances("quick", 0)[0], 0)
    assert SparseQuadratic().evaluate(SparseQuadratic().instances("quick", 0)[0],
                                      x0)["violation"] == 0.0


def test_smooth_oj_gradient_and_hessian_match_finite_differences(tiny):
    exp = SmoothOJ()
    instance = exp.instances("quick", 0)[0]
    data = instance.data
    rng = np.random.default_rng(0)
    x = exp.initial_point(instance, 0)
    u = rng.standard_normal(x.shape)
    h = 1e-6
    directional = (data.value(x + h * u) - data.value(x - h * u)) / (2 * h)
    assert directional == pytest.approx(np.sum(data.gradient(x) * u), rel=1e-6)
    hess_fd = (data.gradient(x + h * u) - data.gradient(x - h * u)) / (2 * h)
    np.testing.assert_allclose(data.hessian(x, u), hess_fd, rtol=1e-5, atol=1e-6)
    xt, ut = torch.from_numpy(x), torch.from_numpy(u)  # torch and numpy give the same numbers
    assert float(data.value(xt)) == pytest.approx(data.value(x), rel=1e-13)
    np.testing.assert_allclose(data.hessian(xt, ut).numpy(), data.hessian(x, u), rtol=1e-12)
