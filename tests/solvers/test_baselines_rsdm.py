"""Landing, PCAL and RCD (the RSDM paper's baselines) against the PCA and Procrustes optima."""

from __future__ import annotations

import pytest
import torch

from orthoplug.baselines.landing import Landing, landing_field
from orthoplug.baselines.pcal import PCAL
from orthoplug.baselines.rcd import RCD
from orthoplug.geometry._linalg import skew
from orthoplug.geometry.stiefel import StiefelGeometry, qf
from orthoplug.problems.stiefel_problems import PCAProblem, ProcrustesProblem
from orthoplug.solvers.clock import RunClock
from orthoplug.solvers.pairs import round_robin

F64 = torch.float64


def _x0(n, p, seed=1):
    return qf(torch.randn(n, p, dtype=F64, generator=torch.Generator().manual_seed(seed)))


class CountingStiefel(StiefelGeometry):
    """Counts check_point calls: infeasible methods may only have x0 checked."""

    checks = 0

    def check_point(self, x, tol=None):
        type(self).checks += 1
        return super().check_point(x, tol)


@pytest.fixture(scope="module")
def pca():
    return PCAProblem.make(40, 6, top=1.0, seed=0)


@pytest.mark.parametrize("make", [
    lambda: Landing(step_size=1.0, penalty=1.0, min_gradient_norm=1e-9, eval_every=10),
    lambda: PCAL(penalty=1.0, min_gradient_norm=1e-9, eval_every=10),
    lambda: PCAL(penalty=1.0, step_size=0.5, min_gradient_norm=1e-9, eval_every=10),
])
def test_infeasible_methods_reach_the_pca_optimum(pca, make):
    CountingStiefel.checks = 0
    geo = CountingStiefel(40, 6)
    res = make().run(pca.function_oracle(), _x0(40, 6), geo)
    assert res.stop_reason.startswith("gradient norm"), res.stop_reason
    assert CountingStiefel.checks == 1
    assert pca.relative_gap(res.cost) < 1e-10
    assert res.violation < 1e-10  # they land on the manifold at the end
    assert res.history["violation"] and max(res.history["violation"]) > 0


def test_landing_field_and_safe_step():
    x = _x0(12, 3) + 0.05 * torch.randn(12, 3, dtype=F64, generator=torch.Generator()
                                        .manual_seed(2))
    g = torch.randn(12, 3, dtype=F64, generator=torch.Generator().manual_seed(3))
    field, d = landing_field(x, g, 2.0)
    dense = skew(g @ x.mT) @ x + 2.0 * x @ (x.mT @ x - torch.eye(3, dtype=F64))
    assert torch.allclose(field, dense, atol=1e-13)
    assert d == pytest.approx(float(torch.linalg.norm(x.mT @ x - torch.eye(3, dtype=F64))))
    # huge step: the safe step keeps ‖XᵀX − I‖ ≤ ε = 0.5 along the whole run
    pr = ProcrustesProblem.make(12, 3, seed=0)
    res = Landing(step_size=50.0, penalty=1.0, eval_every=1, max_iterations=200).run(
        pr.function_oracle(), _x0(12, 3), StiefelGeometry(12, 3))
    assert max(res.history["violation"]) <= 0.5 + 1e-12


def test_rcd_round_robin_and_convergence(pca):
    for n in (2, 7, 10):
        rounds = round_robin(n)
        pairs = {tuple(sorted(map(int, p))) for p in rounds.reshape(-1, 2)}
        assert len(pairs) == rounds.reshape(-1, 2).shape[0] == n * (n - 1) // 2
        assert all(len(set(r.reshape(-1).tolist())) == r.numel() for r in rounds)  # disjoint
    for gradient in ("sweep", "round"):
        res = RCD(step_size=1.0, gradient=gradient, seed=0, max_iterations=300,
                  target_cost=pca.target(1e-9)).run(pca.oracle(), _x0(40, 6),
                                                    StiefelGeometry(40, 6))
        assert pca.relative_gap(res.cost) < 1e-8
        assert res.violation < 1e-12


@pytest.mark.parametrize("gradient", ["sweep", "round"])
def test_rcd_sweep_stops_at_the_deadline(gradient):
    """Past the run's time limit a sweep ends after its current round (one round of odd n = 7
    rotates 3 disjoint pairs and leaves one row as it was), feasible."""
    n, p = 7, 3
    x0 = _x0(n, p)
    solver = RCD(step_size=1.0, gradient=gradient, seed=0)
    geo = StiefelGeometry(n, p)
    run = solver.start(PCAProblem.make(n, p, seed=0).oracle(), x0, geo)
    run.clock, run.timed = RunClock(max_time=0.0), True  # out of time from the start
    solver.step(run)
    tracker = run.tracker
    unchanged = (tracker.x == x0).all(-1)
    assert int(unchanged.sum()) == 1
    assert float(geo.violation(tracker.x).max()) < 1e-13


def test_baseline_option_errors():
    with pytest.raises(ValueError, match="step_size"):
        Landing(step_size=0)
    with pytest.raises(ValueError, match="safe_distance"):
        Landing(safe_distance=1.5)
    with pytest.raises(ValueError, match="penalty"):
        PCAL(penalty=-1)
    with pytest.raises(ValueError, match="step_size"):
        PCAL(step_size="armijo")
    with pytest.raises(ValueError, match="gradient"):
        RCD(gradient="full")
