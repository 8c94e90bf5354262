"""SparseOBCD's restarts: the splitting stage rerun from freshly swept starts once the pair steps
stall (the class docstring's stage 9), and the splitting's patience without feasible points."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.nonsmooth import L0
from orthoplug.oracles import QuadraticOracle
from orthoplug.problems import spca
from orthoplug.solvers.sparse_obcd import SparseOBCD
from orthoplug.solvers.sparse_starts import splitting_iterates

N, R = 60, 6


def _l0_problem():
    """ℓ0-SPCA on Gaussian 500 × 60 data, λ = 0.5 λ₁(C)/n: from the PCA start the splitting
    ends in a point where pair steps stall, and restarts find lower ones."""
    c = spca.covariance(spca.gaussian_data(500, N, seed=0))
    return spca.l0_spca(c, R, 0.5 * float(torch.linalg.eigvalsh(c)[-1]) / N)


class _Recorded(SparseOBCD):
    """SparseOBCD recording the best F of each splitting run (the stage, then each restart)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ends = []

    def _splitting(self, run, start):
        self.ends.append(self._objective(run, start))
        for x, fx, done in super()._splitting(run, start):
            self.ends[-1] = fx
            yield x, fx, done


def _stage(res, name):
    return next(s for s in res.info["stages"] if s["name"] == name)


def test_restarts_return_the_best_point_of_every_stage_feasible_and_sparse():
    prob = _l0_problem()
    x0 = prob.initial_point("random", 0)
    solver = _Recorded(prob.h, starts=("pca",), seed=1, max_iterations=1500)
    res = solver.run(prob.oracle, x0, StiefelGeometry(N, R))
    restarts = _stage(res, "restarts")
    assert restarts["count"] == len(solver.ends) - 1 >= 2
    # every splitting end is either taken (then only lowered) or no lower than the run's F
    assert res.cost <= min(solver.ends)
    k = int(res.info["point_from"].removeprefix("restart "))  # a restart's point is returned
    assert 1 <= k <= restarts["count"]
    assert solver.ends[k] < min(solver.ends[:k])  # taken: lower than every earlier end
    assert restarts["decrease"] > 0
    x = res.point
    assert float(torch.linalg.norm(x.mT @ x - torch.eye(R, dtype=x.dtype))) <= 1e-12
    nnz = int(torch.count_nonzero(x))
    assert nnz < N * R  # exact zeros, counted by h
    assert res.cost == pytest.approx(float(prob.oracle.value(x)) + prob.h.lam * nnz, abs=1e-14)
    assert sum(s["decrease"] for s in res.info["stages"]) == pytest.approx(
        prob.objective(x0) - res.cost, abs=1e-12)
    pairs = _stage(res, "pair steps")["iterations"]
    assert res.iterations == res.info["stage_iterations"] + pairs // math.ceil(N / 2) == 1500
    assert np.all(np.diff(res.history["cost"]) <= 1e-12)


def test_restart_limit_and_auto_rule():
    prob = _l0_problem()
    x0 = prob.initial_point("random", 0)

    def run(**options):
        return SparseOBCD(prob.h, starts=("pca",), seed=1, max_iterations=1500,
                          **options).run(prob.oracle, x0, StiefelGeometry(N, R))

    assert _stage(run(restarts=2), "restarts")["count"] == 2
    none = run(restarts=0)
    assert "restarts" not in [s["name"] for s in none.info["stages"]]
    assert none.info["point_from"] == "splitting"
    # no splitting stage: "auto" runs no restarts (and asks for none)
    plain = run(split_steps=0)
    assert "restarts" not in [s["name"] for s in plain.info["stages"]]
    l1 = spca.l1_spca(prob.c, R, 0.01)
    res = SparseOBCD(l1.h, seed=1, max_iterations=300).run(l1.oracle, x0, StiefelGeometry(N, R))
    assert "restarts" not in [s["name"] for s in res.info["stages"]]


def test_restarts_end_once_one_ends_at_its_own_start():
    """A restart whose splitting forms no lower point than its start ends the restarts: the
    pair steps get the rest of the budget."""

    class Futile(SparseOBCD):
        def _splitting(self, run, start):
            yield start, self._objective(run, start), 1

    prob = _l0_problem()
    x0 = prob.initial_point("random", 0)
    res = Futile(prob.h, starts=("pca",), seed=1, max_iterations=400).run(
        prob.oracle, x0, StiefelGeometry(N, R))
    assert _stage(res, "restarts")["count"] == 1
    assert res.info["point_from"] == "pca"


def test_restarts_keep_nonnegativity_exactly():
    c = spca.covariance(spca.gaussian_data(200, 40, seed=2))
    prob = spca.nn_pca(c, 4)
    x0 = prob.initial_point("random", 0)
    res = SparseOBCD(prob.h, restarts=3, seed=0, max_iterations=2000).run(
        prob.oracle, x0, StiefelGeometry(40, 4))
    assert 1 <= _stage(res, "restarts")["count"] <= 3
    x = res.point
    assert float(x.min()) >= 0.0
    assert float(torch.linalg.norm(x.mT @ x - torch.eye(4, dtype=x.dtype))) <= 1e-12
    assert res.cost == pytest.approx(prob.objective(x), abs=1e-14)


def test_restart_option_errors():
    prob = _l0_problem()
    x0 = prob.initial_point("random", 0)
    with pytest.raises(ValueError, match="restarts"):
        SparseOBCD(prob.h, restarts=-1)
    with pytest.raises(ValueError, match="split_steps"):
        SparseOBCD(prob.h, restarts=2, split_steps=0, max_iterations=5).run(
            prob.oracle, x0, StiefelGeometry(N, R))
    weighted = QuadraticOracle(prob.c, torch.diag(torch.arange(1.0, R + 1, dtype=prob.c.dtype)),
                               scale=-1.0)  # f(XQ) ≠ f(X): column sweeps change f
    with pytest.raises(ValueError, match="restarts=0"):
        SparseOBCD(prob.h, starts=(), column_every=0, restarts=1, max_iterations=5).run(
            weighted, x0, StiefelGeometry(N, R))
    # the same without restarts runs (the "auto" rule asks for none on such an f)
    SparseOBCD(prob.h, starts=(), column_every=0, max_iterations=5).run(
        weighted, x0, StiefelGeometry(N, R))


def test_splitting_stops_after_patience_checks_without_a_feasible_point():
    """With λ so large that Y = 0, no check forms a feasible point: the stage ends after
    ``patience`` checks (iterations 1, 2, 4) at its start."""
    prob = _l0_problem()
    x = prob.initial_point("random", 0)
    items = list(splitting_iterates(x, prob.oracle, L0(10.0), 1000, patience=3))
    assert [done for _, _, done in items] == [1, 2, 4]
    assert items[-1][0] is x
