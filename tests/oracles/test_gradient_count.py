"""One definition of "gradient evaluations" for every solver (issue #15).

Every gradient a solver obtains goes through its tracker and is counted in full-gradient
equivalents (:class:`orthoplug.oracles.core.Tracker`): the tests count the calls the oracle
actually receives and compare them with the result's ``gradient_evaluations``.
"""

import math

import pytest
import torch

from orthoplug.baselines.admm import ADMM
from orthoplug.baselines.csdm import CSDM
from orthoplug.baselines.ladmm import LADMM
from orthoplug.baselines.landing import Landing
from orthoplug.baselines.manpg import ManPG
from orthoplug.baselines.pcal import PCAL
from orthoplug.baselines.psm import PSM
from orthoplug.baselines.rcd import RCD
from orthoplug.baselines.rsubgrad import RSubGrad
from orthoplug.baselines.umcm import UMCM
from orthoplug.geometry.manifolds import JOrthogonalGeometry
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.nonsmooth import L1
from orthoplug.oracles import (
    ColumnOracle,
    FiniteSumOracle,
    FunctionOracle,
    RowGradientOracle,
)
from orthoplug.problems.hevp import make_spd
from orthoplug.problems.nonsmooth_problems import SparsePCA
from orthoplug.solvers.jobcd import GSJOBCD, JJOBCD, VRJJOBCD
from orthoplug.solvers.obcd import OBCD
from orthoplug.solvers.rsdm import RSDM, StochasticRSDM
from orthoplug.solvers.rssm import RSSM
from orthoplug.solvers.sigma_rules import SigmaBacktracking

N, P = 8, 3
F64 = torch.float64


class Counting(FunctionOracle):
    """``f = tr(XᵀCX)`` (times ``scale``) counting the full gradients it computes."""

    def __init__(self, c: torch.Tensor, scale: float = 1.0, lipschitz: float | None = None):
        super().__init__(lambda x: scale * (x * (c @ x)).sum(), lambda x: 2 * scale * (c @ x),
                         lipschitz=lipschitz)
        self.calls = 0

    def gradient(self, x):
        self.calls += 1
        return super().gradient(x)


def _stiefel():
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(N, N, dtype=F64, generator=gen)
    c = a @ a.T
    x0 = torch.linalg.qr(torch.randn(N, P, dtype=F64, generator=gen))[0]
    lip = 2 * float(torch.linalg.eigvalsh(c)[-1])
    return Counting(c, -1.0, lipschitz=lip), x0, StiefelGeometry(N, P)


def _j():
    geometry = JOrthogonalGeometry(N, 4)
    x0 = geometry.random_point(generator=torch.Generator().manual_seed(1), cond=3.0)
    return Counting(torch.from_numpy(make_spd(N, seed=1))), x0, geometry


@pytest.mark.parametrize("solver, case", [
    (GSJOBCD(curvature="scalar", side="row"), _j), (JJOBCD(), _j),
    (JJOBCD(sigma_rule=SigmaBacktracking(shrink=0.5)), _j), (OBCD(), _stiefel),
    (OBCD(L1(0.01)), _stiefel),
    (RSDM(3), _stiefel), (RSDM(3, step_size=0.1), _stiefel), (RSSM(), _stiefel),
    (RSubGrad(), _stiefel), (ManPG(L1(0.01)), _stiefel), (LADMM(L1(0.01)), _stiefel),
    (PSM(L1(0.01)), _stiefel), (Landing(), _stiefel), (PCAL(), _stiefel), (RCD(), _stiefel),
    (ADMM(beta=10.0), _j), (UMCM(hvp="finite-difference"), _j), (CSDM(), _j),
], ids=lambda v: getattr(v, "name", "") + ("-shrink" if getattr(
    getattr(v, "sigma_rule", None), "shrink", 1) < 1 else ""))
def test_every_full_gradient_the_oracle_computes_is_counted(solver, case):
    oracle, x0, geometry = case()
    solver.stopping.max_iterations = 12
    solver.seed = 0
    result = solver.run(oracle, x0, geometry)
    assert oracle.calls > 0
    assert result.gradient_evaluations == oracle.calls


def test_partial_gradients_count_as_fractions_of_a_full_one():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(10, 4, dtype=F64, generator=gen)
    rows = RowGradientOracle(lambda x: (x * x).sum(), lambda x: 2 * x,
                             lambda x, r: 2 * x[r]).track(x)
    rows.gradient_rows(torch.tensor([0, 3, 7]))
    assert rows.gradient_evaluations == pytest.approx(3 / 10)
    cols = ColumnOracle(lambda x: (x * x).sum(), lambda x: 2 * x,
                        lambda x, c: 2 * x[:, c]).track(x)
    cols.gradient_columns(torch.tensor([1]))
    assert cols.gradient_evaluations == pytest.approx(1 / 4) and cols.column_gradients
    factored = SparsePCA.random(6, 10, mu=0.1, seed=0).oracle().track(x)
    factored.gradient_columns(torch.tensor([0, 2]))
    assert factored.gradient_evaluations == pytest.approx(2 / 4) and factored.column_gradients
    # no column function: the full gradient is computed (and counted, and cached)
    sliced = ColumnOracle(lambda x: (x * x).sum(), lambda x: 2 * x).track(x)
    sliced.gradient_columns(torch.tensor([1]))
    sliced.gradient_columns(torch.tensor([2]))
    assert sliced.gradient_evaluations == 1 and not sliced.column_gradients
    comps = FiniteSumOracle(5, lambda x, i: (x * x).sum(), lambda x, i: 2 * x)
    tracker = comps.track(x)
    tracker.component_gradient(x, torch.tensor([0, 4]))
    assert tracker.gradient_evaluations == pytest.approx(2 / 5)
    tracker.gradient_at(x + 1)
    tracker.gradient()
    tracker.gradient()  # cached at the current point: not counted again
    assert tracker.gradient_evaluations == pytest.approx(2 + 2 / 5)


def test_finite_sum_solvers_count_component_means():
    geometry = JOrthogonalGeometry(6, 3)
    x0 = geometry.random_point(generator=torch.Generator().manual_seed(3), cond=2.0)
    cs = torch.stack([torch.from_numpy(make_spd(6, seed=s)) for s in range(4)])

    def value(x, idx):  # the mean of tr(XᵀC_iX) over idx
        return torch.einsum("ij,bik,kj->", x, cs[idx], x) / len(idx)

    def gradient(x, idx):
        return 2 * cs[idx].mean(0) @ x

    oracle = FiniteSumOracle(4, value, gradient)
    res = VRJJOBCD(sigma_rule=50.0, batch_size=2, max_iterations=10, seed=0).run(oracle, x0,
                                                                                  geometry)
    comps = res.info["component_gradients"]  # (the first full gradient counts N of them)
    # the PAGE component means count |idx|/N each; the rest are whole full gradients (the
    # first estimate and the evaluations)
    whole = res.gradient_evaluations - (comps - 4) / 4
    assert comps > 4 and whole >= 1 and math.isclose(whole, round(whole), abs_tol=1e-12)
    st = StiefelGeometry(6, 3)
    res = StochasticRSDM(2, batch_size=2, step_size=0.01, max_iterations=6, seed=0).run(
        oracle, torch.eye(6, 3, dtype=F64), st)
    assert res.gradient_evaluations == pytest.approx(
        res.info["samples"] / 4 + len(res.history["cost"]))
