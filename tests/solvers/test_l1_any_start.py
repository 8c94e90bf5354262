"""ℓ1-SPCA from a data start: SparseOBCD ends at or below ManPG (iteration budgets)."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_wine

from orthoplug.baselines.manpg import ManPG
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.problems import spca
from orthoplug.solvers.base import Run
from orthoplug.solvers.clock import RunClock
from orthoplug.solvers.sparse_obcd import SparseOBCD


def _wine_problem(r: int, weak: bool):
    """Standardized wine (n = 13), μ = 0.5 λ₁/√n (strong) or a fifth of it (weak)."""
    a = load_wine().data.astype(np.float64)
    a = (a - a.mean(0)) / a.std(0)
    c = spca.covariance(a)
    mu = 0.5 * float(torch.linalg.eigvalsh(c)[-1]) / 13 ** 0.5
    return spca.l1_spca(c, r, mu / 5 if weak else mu)


def _stage(res, name):
    return [s for s in res.info["stages"] if s["name"] == name]


def test_sparse_obcd_reaches_manpg_from_the_pca_start():
    """From the PCA start ManPG (a full-direction descent method) ends lower than pair steps
    alone can: a point where no pair of rows can lower F need not be stationary. The ManPG
    steps after each column sweep leave such points; SparseOBCD then ends at or below ManPG,
    feasible to rounding."""
    prob = _wine_problem(5, weak=True)
    x0 = torch.linalg.eigh(prob.c)[1].flip(-1)[:, :5].contiguous()
    geo = StiefelGeometry(prob.n, prob.r)
    ref = ManPG(prob.h, max_iterations=2000, min_gradient_norm=1e-12).run(prob.oracle, x0, geo)
    res = SparseOBCD(prob.h, seed=0, max_iterations=3000).run(prob.oracle, x0, geo)
    assert res.cost <= ref.cost + 1e-10 * abs(ref.cost)
    prox_gradient = _stage(res, "prox-gradient steps")[0]
    assert prox_gradient["iterations"] >= 1 and prox_gradient["decrease"] > 1e-6
    assert res.violation <= 1e-13
    # the prox stage ran from every start, x0 included
    assert _stage(res, "prox")[0]["iterations"] >= 3


def test_no_prox_gradient_steps_for_discontinuous_h():
    """ℓ0 and the nonnegativity indicator have no ManPG direction: no such stage."""
    c = _wine_problem(3, weak=False).c
    for prob in (spca.l0_spca(c, 3, 1e-3), spca.nn_pca(c, 3)):
        res = SparseOBCD(prob.h, seed=0, max_iterations=200).run(
            prob.oracle, prob.initial_point("random", 0), StiefelGeometry(prob.n, 3))
        assert not _stage(res, "prox-gradient steps")


def test_run_out_of_time_ends_at_the_iteration_under_way(monkeypatch):
    """One ``steps`` call spans many column sweeps (``eval_every`` iterations); once the run's
    ``max_time`` has run out the pair steps end with the iteration under way at the next
    sweep, not at the end of the call. The clock is replaced by a count of sweeps, so the
    test reads no time: out of time after the third sweep of the pair stage."""
    prob = _wine_problem(5, weak=True)
    x0 = torch.linalg.eigh(prob.c)[1].flip(-1)[:, :5].contiguous()
    geo = StiefelGeometry(prob.n, prob.r)

    late = []

    def out_of_time(run):  # the solver's clock: out after the third sweep of the pair stage
        if getattr(run, "column_sweeps_done", 0) >= 3:
            late.append(True)
        return bool(late)

    monkeypatch.setattr(Run, "out_of_time", out_of_time)
    monkeypatch.setattr(RunClock, "out_of_time", lambda clock: bool(late))  # the run loop's
    res = SparseOBCD(prob.h, seed=0, eval_every=100, max_time=1e9,
                     max_iterations=2000).run(prob.oracle, x0, geo)
    updates = -(-prob.n // 2)
    pairs = _stage(res, "pair steps")[0]["iterations"]
    assert _stage(res, "column sweeps")[0]["iterations"] == 3
    # three sweeps of n pair steps, then to the end of that iteration
    assert pairs == -(-3 * prob.n // updates) * updates
    assert res.iterations == res.info["stage_iterations"] + pairs // updates
    assert "max time" in res.stop_reason
