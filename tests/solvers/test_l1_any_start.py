"""ℓ1-SPCA from any start: SparseOBCD ends at or below ManPG (iteration budgets)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_wine

from orthoplug.baselines.manpg import ManPG
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.problems import spca
from orthoplug.solvers.base import Run
from orthoplug.solvers.clock import RunClock
from orthoplug.solvers.sparse_obcd import BRANCH_MAX_RANK, BRANCH_WINDOW, SparseOBCD


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
    feasible to rounding (without the branches, whose ManPG trajectories would reach that
    value before the pair steps start)."""
    prob = _wine_problem(5, weak=True)
    x0 = torch.linalg.eigh(prob.c)[1].flip(-1)[:, :5].contiguous()
    geo = StiefelGeometry(prob.n, prob.r)
    ref = ManPG(prob.h, max_iterations=2000, min_gradient_norm=1e-12).run(prob.oracle, x0, geo)
    res = SparseOBCD(prob.h, seed=0, branch_steps=0, max_iterations=3000).run(prob.oracle, x0,
                                                                              geo)
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


def _basins_instance():
    """Wine, r = 4, weak μ, random start (seed 2): the prox stage's start ends in a basin
    1.4e-3 above ManPG's end from x0 (found by trying seeds 0–5 of r = 3, 4)."""
    prob = _wine_problem(4, weak=True)
    return prob, prob.initial_point("random", 2), StiefelGeometry(prob.n, prob.r)


def test_branches_end_at_or_below_manpg_from_x0():
    """x0's own ManPG trajectory is a branch, kept unless another start's is lower: the run
    ends at or below ManPG's converged value from the same x0, where the prox stage's choice
    of start (the same run with ``branch_steps=0``) ends in a higher basin. The point is
    feasible to rounding (this optimum has no exact zeros: ManPG's has none either); the
    bookkeeping names the branch."""
    prob, x0, geo = _basins_instance()
    ref = ManPG(prob.h, max_iterations=1500, min_gradient_norm=1e-12).run(prob.oracle, x0, geo)
    prox = SparseOBCD(prob.h, seed=0, branch_steps=0, max_iterations=1000).run(prob.oracle, x0,
                                                                               geo)
    assert prox.cost > ref.cost + 1e-4 * abs(ref.cost)  # the basins differ
    res = SparseOBCD(prob.h, seed=0, max_iterations=1000).run(prob.oracle, x0, geo)
    assert res.cost <= ref.cost + 1e-10 * abs(ref.cost)
    assert res.violation <= 1e-13
    ends = _stage(res, "branches")[0]["ends"]
    compared = [e for e in ends if not e.get("continued")]
    assert [e["start"] for e in compared] == ["x0", "diagonal", "pca", "x0 + prox",
                                              "diagonal + prox", "pca + prox"]
    # the others get at most x0's steps; the stage's iterations are all of them
    assert all(1 <= e["steps"] <= compared[0]["steps"] for e in compared[1:])
    assert _stage(res, "branches")[0]["iterations"] == sum(e["steps"] for e in ends)
    kept = min(compared, key=lambda e: e["F"])  # the first on ties: x0's
    assert res.info["start"] == f"{kept['start']} + branches"
    assert res.info["point_from"] == "branches"
    assert res.cost <= kept["F"]  # later stages only lower F
    assert kept["start"] == "x0" and len(ends) == 6  # here x0's own end is the lowest
    assert _stage(res, "pair steps")[0]["iterations"] > 0


def test_branches_same_seed_same_bits():
    prob, x0, geo = _basins_instance()
    a, b = (SparseOBCD(prob.h, seed=3, max_iterations=150).run(prob.oracle, x0, geo)
            for _ in range(2))
    assert torch.equal(a.point, b.point)
    assert a.info["stages"] == b.info["stages"]


def test_branch_budgets():
    """``branch_steps="auto"``: 100 n ManPG steps for ℓ1 at r ≤ BRANCH_MAX_RANK, none above it
    or for ℓ0 (the prox stage's rule unchanged); asking for branches without the ManPG steps is
    refused before any work."""
    c = _wine_problem(2, weak=True).c
    n = c.shape[0]
    for r, branches, prox in ((BRANCH_MAX_RANK, 100 * n, n), (BRANCH_MAX_RANK + 1, 0, n)):
        prob = spca.l1_spca(c, r, 0.01)
        res = SparseOBCD(prob.h, max_iterations=1).run(prob.oracle, prob.initial_point(
            "random", 0), StiefelGeometry(n, r))
        assert (res.info["budgets"]["branch_steps"], res.info["budgets"]["prox_steps"]) == (
            branches, prox)
    prob = spca.l0_spca(c, 3, 1e-3)
    res = SparseOBCD(prob.h, max_iterations=1).run(prob.oracle, prob.initial_point("random", 0),
                                                   StiefelGeometry(n, 3))
    assert res.info["budgets"]["branch_steps"] == 0
    prob = spca.l1_spca(c, 3, 0.01)
    with pytest.raises(ValueError, match="branches are ManPG trajectories"):
        SparseOBCD(prob.h, starts=(), column_every=0, branch_steps=5).run(
            prob.oracle, prob.initial_point("random", 0), StiefelGeometry(n, 3))


def test_branches_end_within_a_window_of_max_iterations():
    """The branches are items of ``BRANCH_WINDOW`` ManPG steps: a run budget smaller than the
    stage ends it within one window (the run's point is the lowest reached, feasible)."""
    prob, x0, geo = _basins_instance()
    res = SparseOBCD(prob.h, seed=0, max_iterations=60, eval_every=5).run(prob.oracle, x0, geo)
    stages = _stage(res, "prox")[0]["iterations"] + _stage(res, "branches")[0]["iterations"]
    assert 60 <= stages < 60 + BRANCH_WINDOW
    assert res.iterations == 60 and not _stage(res, "pair steps")[0]["iterations"]
    assert res.violation <= 1e-13 and res.cost < prob.objective(x0)
