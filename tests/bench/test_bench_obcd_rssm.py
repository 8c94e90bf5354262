"""The OBCD and RSSM benchmark suites: instances, every method through ``run_method``, scoring."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch

from orthoplug.bench.core import Instance, run_method
from orthoplug.bench.suites import obcd, rssm
from orthoplug.problems import spca

EXPERIMENTS = [*obcd.EXPERIMENTS, *rssm.EXPERIMENTS]
IDS = [f"{e.suite}/{e.name}" for e in EXPERIMENTS]


@functools.cache
def quick_instances(index: int) -> list[Instance]:
    return EXPERIMENTS[index].instances("quick", 0)


def _method_cases():
    return [pytest.param(i, m.name, id=f"{IDS[i]}/{m.name}")
            for i, e in enumerate(EXPERIMENTS) for m in e.methods("quick")]


@pytest.mark.parametrize("index", range(len(EXPERIMENTS)), ids=IDS)
def test_quick_instances_build(index):
    exp = EXPERIMENTS[index]
    insts = quick_instances(index)
    assert insts and all(isinstance(i, Instance) for i in insts)
    assert exp.suite in ("obcd", "rssm") and exp.time_limits["quick"] <= 5
    for inst in insts:
        x0 = exp.initial_point(inst, 0)
        scores = exp.evaluate(inst, x0)
        assert {"objective", "violation", *exp.metrics} <= set(scores)
        assert scores["violation"] <= 1e-8


@pytest.mark.parametrize(("index", "method"), _method_cases())
def test_method_runs(index, method):
    exp = EXPERIMENTS[index]
    inst = quick_instances(index)[0]
    meth = next(m for m in exp.methods("quick") if m.name == method)
    rec = run_method(exp, inst, meth, meth.options, seed=0, scale="quick", time_limit=0.3)
    assert rec.status == "ok", rec.message
    assert math.isfinite(rec.objective) and math.isfinite(rec.violation)
    assert rec.violation <= 1e-8  # every method here returns a feasible point
    assert set(rec.metrics) == set(exp.metrics)
    assert rec.iterations >= 1


def _spca_instance(make, *args) -> Instance:
    c = torch.diag(torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64))
    return Instance("hand", {"n": 3, "r": 2}, obcd.CompositeData(make(c, 2, *args)))


def test_l0_objective_counts_entries_above_1e_6():
    exp = obcd.L0SPCA()
    inst = _spca_instance(spca.l0_spca, 0.25)
    x = np.array([[1.0, 0.0], [0.0, 1.0], [5e-7, 0.0]])
    scores = exp.evaluate(inst, x)
    assert scores["nnz"] == 2  # 5e-7 is below the threshold
    assert scores["objective"] == pytest.approx(-(0.5 + 0.3) + 2 * 0.25, abs=1e-12)
    assert scores["violation"] == pytest.approx(2.5e-13, rel=1e-3)


def test_l1_objective_and_nnz():
    exp = obcd.L1SPCA()
    inst = _spca_instance(spca.l1_spca, 0.1)
    x = np.array([[0.6, 0.0], [0.8, 0.0], [0.0, -1.0]])
    scores = exp.evaluate(inst, x)
    assert scores["nnz"] == 3
    f = -(0.5 * 0.36 + 0.3 * 0.64 + 0.2)
    assert scores["objective"] == pytest.approx(f + 0.1 * 2.4, abs=1e-12)
    assert scores["violation"] < 1e-15


def test_nnpca_violation_adds_negative_part():
    exp = obcd.NNPCA()
    inst = _spca_instance(spca.nn_pca)
    x = np.array([[0.6, 0.0], [-0.8, 0.0], [0.0, 1.0]])  # orthonormal, one entry −0.8
    scores = exp.evaluate(inst, x)
    f = -0.5 * (0.5 * 0.36 + 0.3 * 0.64 + 0.2)
    assert scores["objective"] == pytest.approx(f, abs=1e-12)
    assert scores["nonneg_violation"] == pytest.approx(0.8)
    assert scores["orthogonality"] < 1e-15
    assert scores["violation"] == pytest.approx(0.8)
    assert scores["penalized"] == pytest.approx(f + 800.0)


def test_dpcp_evaluate_at_truth():
    exp = rssm.DPCPExperiment()
    inst = rssm.dpcp_problem_instance(20, 15, 60, seed=0)
    scores = exp.evaluate(inst, inst.data.normals.numpy())
    assert scores["principal_angle"] < 1e-7 and scores["subspace_error"] < 1e-7
    assert scores["violation"] < 1e-12
    rotated = torch.linalg.qr(torch.randn(20, 5, dtype=torch.float64))[0]
    assert exp.evaluate(inst, rotated.numpy())["principal_angle"] > 0.1


def test_dpcp_rssm_recovers_the_subspace():
    exp = rssm.DPCPExperiment()
    inst = rssm.dpcp_problem_instance(60, 40, 300, seed=0)
    meth = next(m for m in exp.methods("quick") if m.name == "RSSM-4")
    rec = run_method(exp, inst, meth, meth.options, seed=0, scale="quick", time_limit=math.inf,
                     max_iterations=250)  # 500 block steps: an iteration is ⌈4/2⌉ of them
    assert rec.status == "ok" and rec.iterations <= 250
    assert rec.metrics["principal_angle"] < 1e-5
    assert rec.violation < 1e-12
