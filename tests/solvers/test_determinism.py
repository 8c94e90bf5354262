"""Determinism: the same seed and iteration budget give the same bits, under any load.

* every registered solver, through each front-end it has (walked from :mod:`orthoplug.registry`),
  run twice and once more beside a CPU-bound process: identical points and costs;
* SparseOBCD on ℓ1-SPCA, ℓ0-SPCA and NN-PCA at n = 200: the same, stages included;
* no solver or baseline module reads a clock, except the run loop and ``Run.out_of_time``
  (the ``max_time`` stop) in ``solvers/base.py``;
* the same draws on every device: the solvers' and optimizers' generators live on the CPU, and
  no module that serves an iterate calls torch's samplers except through
  :mod:`orthoplug._random` (draw where the generator lives, then move).
"""

from __future__ import annotations

import ast
import contextlib
import math
import multiprocessing
from pathlib import Path

import autograd.numpy as anp
import geoopt
import numpy as np
import pymanopt
import pytest
import torch

import orthoplug
from orthoplug import registry
from orthoplug.adapters import geoopt as go
from orthoplug.adapters import pymanopt as pm
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.nonsmooth import L1
from orthoplug.oracles import FiniteSumOracle, QuadraticOracle
from orthoplug.problems import spca
from orthoplug.problems.hevp import make_spd
from orthoplug.solvers.sparse_obcd import SparseOBCD

DT = torch.float64
N, P = 8, 3
ITERATIONS = 25


def _spin(stop) -> None:
    while not stop.is_set():
        pass


@contextlib.contextmanager
def _busy():
    """A CPU-bound process (a busy loop) running for the duration of the block."""
    ctx = multiprocessing.get_context("fork")
    stop = ctx.Event()
    proc = ctx.Process(target=_spin, args=(stop,), daemon=True)
    proc.start()
    try:
        yield
    finally:
        stop.set()
        proc.join(10)


def _same_three_times(run):
    """``run()`` twice, then once beside a busy process: the three outcomes are identical."""
    first, second = run(), run()
    with _busy():
        third = run()
    for other in (second, third):
        assert other[0].tobytes() == first[0].tobytes()
        assert other[1:] == first[1:]
    return first


# ---- every registered solver, pymanopt front-end ----------------------------------------------

_RNG = np.random.default_rng(0)
_A = _RNG.standard_normal((N, N))
C_PCA = _A @ _A.T
C_SPD = make_spd(N, seed=0)
ROWS = torch.from_numpy(np.random.default_rng(5).standard_normal((40, N)))


def _stiefel():
    manifold = pymanopt.manifolds.Stiefel(N, P)

    @pymanopt.function.autograd(manifold)
    def cost(x):
        return -anp.trace(x.T @ C_PCA @ x)

    x0 = np.linalg.qr(np.random.default_rng(1).standard_normal((N, P)))[0]
    return pymanopt.Problem(manifold, cost), x0, QuadraticOracle(torch.from_numpy(C_PCA),
                                                                  scale=-1.0)


def _jorth():
    manifold = pm.JOrthogonal(N, p=4)

    @pymanopt.function.autograd(manifold)
    def cost(x):
        return anp.trace(x.T @ C_SPD @ x)

    np.random.seed(0)
    return pymanopt.Problem(manifold, cost), manifold.random_point(), None


def _finite_sum():
    problem, x0, _ = _jorth()

    def value(x, idx):
        return ((ROWS[idx] @ x) ** 2).sum(dim=1).mean()

    def grad(x, idx):
        return 2.0 * ROWS[idx].T @ (ROWS[idx] @ x) / idx.numel()

    lip = 4.0 * float(torch.linalg.eigvalsh(ROWS.T @ ROWS / 40).max())
    return problem, x0, FiniteSumOracle(40, value, grad, lipschitz=lip)


PYMANOPT = {  # registry name: (problem, options)
    "GSJOBCD": (_jorth, {}),
    "JJOBCD": (_jorth, {}),
    "VRJJOBCD": (_finite_sum, dict(batch_size=10, small_batch=3)),
    "ColumnJJacobi": (lambda: (*_jorth()[:2], QuadraticOracle(torch.from_numpy(C_SPD))),
                      dict(pairs="random")),
    "CayleyLBFGS": (_jorth, {}),
    "OBCD": (_stiefel, dict(h=L1(0.05))),
    "SparseOBCD": (_stiefel, dict(h=L1(0.05), prox_steps=5, candidates=4)),
    "RSSM": (_stiefel, {}),
    "RSDM": (_stiefel, dict(r=3)),
    "ManPG": (_stiefel, dict(h=L1(0.05))),
    "RSubGrad": (_stiefel, dict(h=L1(0.05))),
    "Landing": (_stiefel, dict(step_size=0.02)),
    "PCAL": (_stiefel, {}),
    "RCD": (_stiefel, dict(step_size=0.02)),
    "LADMM": (_stiefel, dict(h=L1(0.05))),
    "RADMM": (_stiefel, dict(h=L1(0.05))),
    "PSM": (_stiefel, dict(h=L1(0.05))),
    "ADMM": (_jorth, dict(beta=10.0)),
    "UMCM": (_jorth, {}),
    "CSDM": (_jorth, {}),
    "HyperbolicEig": (lambda: (*_jorth()[:2], QuadraticOracle(torch.from_numpy(C_SPD))), {}),
}
#: solvers without an iteration budget or random draws (a direct solve)
DIRECT = {"HyperbolicEig"}


def test_every_registered_pymanopt_solver_has_a_case():
    assert set(PYMANOPT) == set(registry.names("solver", frontend="pymanopt"))


@pytest.mark.parametrize("name", sorted(PYMANOPT))
def test_pymanopt_front_end_is_deterministic(name):
    make, options = PYMANOPT[name]

    def run():
        problem, x0, oracle = make()
        budget = {} if name in DIRECT else {"max_iterations": ITERATIONS, "seed": 3}
        result = registry.get(name, "pymanopt")(**budget, **options).run(
            problem, initial_point=x0, oracle=oracle)
        return (np.asarray(result.point), result.cost, result.iterations,
                result.solver_result.gradient_evaluations)

    point, cost, iterations, _ = _same_three_times(run)
    assert math.isfinite(cost) and iterations >= (0 if name in DIRECT else 1)


# ---- every registered solver, geoopt front-end ------------------------------------------------

def _quadratic_loss(c):
    c = torch.from_numpy(c)

    def loss(x, *idx):
        return torch.trace(x.mT @ c @ x)

    return loss


def _rows_loss(x, idx):
    return ((ROWS[idx] @ x) ** 2).sum(dim=1).mean()


def _stiefel_param():
    x0 = torch.linalg.qr(torch.randn(N, P, dtype=DT, generator=torch.Generator().manual_seed(1)))
    return geoopt.ManifoldParameter(x0.Q, manifold=geoopt.Stiefel())


def _jorth_param():
    manifold = go.JOrthogonal(N, 4)
    x0 = manifold.geometry.random_point(generator=torch.Generator().manual_seed(1), cond=3.0)
    return geoopt.ManifoldParameter(x0, manifold=manifold)


_PCA_LOSS = _quadratic_loss(-C_PCA)
_SPD_LOSS = _quadratic_loss(C_SPD)
_LIP_SUM = 4.0 * float(torch.linalg.eigvalsh(ROWS.T @ ROWS / 40).max())
GEOOPT = {  # registry name: (parameter, loss, options)
    "GSJOBCD": (_jorth_param, _SPD_LOSS, {}),
    "JJOBCD": (_jorth_param, _SPD_LOSS, {}),
    "VRJJOBCD": (_jorth_param, _rows_loss,
                 dict(num_components=40, sigma_rule=_LIP_SUM, batch_size=10, small_batch=3)),
    "ColumnJJacobi": (_jorth_param, _SPD_LOSS, dict(c=C_SPD, pairs="random")),
    "CayleyLBFGS": (_jorth_param, _SPD_LOSS, {}),
    "OBCD": (_stiefel_param, _PCA_LOSS, dict(h=L1(0.05))),
    "RSSM": (_stiefel_param, _PCA_LOSS, {}),
    "RSDM": (_stiefel_param, _PCA_LOSS, dict(r=3)),
}


def test_every_registered_geoopt_solver_has_a_case():
    assert set(GEOOPT) == set(registry.names("solver", frontend="geoopt"))


@pytest.mark.parametrize("name", sorted(GEOOPT))
def test_geoopt_front_end_is_deterministic(name):
    make, loss_of, options = GEOOPT[name]

    def run():
        x = make()
        opt = registry.get(name, "geoopt")([x], seed=3, **options)
        losses = []

        def closure(*args):
            opt.zero_grad()
            loss = loss_of(x, *args)
            loss.backward()
            losses.append(float(loss.detach()))
            return loss

        for _ in range(ITERATIONS):
            opt.step(closure)
        return x.detach().numpy().copy(), losses

    point, losses = _same_three_times(run)
    assert all(math.isfinite(v) for v in losses)


# ---- SparseOBCD at n = 200, every stage ------------------------------------------------------

def _stage(stages, name):
    return next(s for s in stages if s["name"] == name)


def _sparse_problem(kind):
    a = np.random.default_rng(7).standard_normal((300, 200))
    c = spca.covariance(a)
    if kind == "nn":
        return spca.nn_pca(c, 5)
    lam1 = float(torch.linalg.eigvalsh(c)[-1])
    if kind == "l1":
        return spca.l1_spca(c, 5, 0.5 * lam1 / math.sqrt(200))
    return spca.l0_spca(c, 5, 0.5 * lam1 / 200)


@pytest.mark.parametrize("kind", ["l1", "l0", "nn"])
def test_sparse_obcd_is_deterministic_at_n_200(kind):
    prob = _sparse_problem(kind)
    x0 = prob.initial_point("random", 0)
    budget = dict(prox_steps=30, branch_steps=20) if kind == "l1" else dict(split_steps=200)
    # the stages' iterations (their gradients: ℓ1 2 start candidates, 3 × 30 prox steps from x0
    # and the two data starts, 6 × 20 ManPG branch steps from those and the prox ends and 20
    # more on the kept branch; 170, 256) and 15 of n/2 = 100 pair steps
    iterations = {"l1": 245, "l0": 185, "nn": 271}[kind]
    solver = SparseOBCD(prob.h, seed=3, max_iterations=iterations, eval_every=5, **budget)

    def run():
        res = solver.run(prob.oracle, x0.clone(), StiefelGeometry(200, 5))
        return (res.point.numpy(), res.cost, res.history["cost"], res.info["stages"],
                res.info["start"], res.gradient_evaluations)

    point, cost, costs, stages, start, _ = _same_three_times(run)
    names = [s["name"] for s in stages]
    expected = {"l1": ["start", "prox", "branches"], "l0": ["start", "splitting"],
                "nn": ["start", "splitting", "partition search", "partition search"]}[kind]
    tail = ["prox-gradient steps"] if kind == "l1" else []  # ManPG steps: continuous h only
    assert names == [*expected, "pair steps", "column sweeps", *tail]
    assert _stage(stages, "pair steps")["iterations"] == 1500
    assert cost == pytest.approx(prob.objective(torch.from_numpy(point)), abs=1e-10)
    assert sum(s["decrease"] for s in stages) == pytest.approx(prob.objective(x0) - cost,
                                                               abs=1e-10)
    assert all(b <= a + 1e-12 for a, b in zip(costs, costs[1:], strict=False))


def test_sparse_obcd_restarts_are_deterministic():
    """ℓ0 from the PCA start with restarts (the splitting rerun from freshly swept starts once
    the pair steps stall): the same restarts, points and stage records every time."""
    c = spca.covariance(np.random.default_rng(0).standard_normal((500, 60)))
    prob = spca.l0_spca(c, 6, 0.5 * float(torch.linalg.eigvalsh(c)[-1]) / 60)
    x0 = prob.initial_point("random", 0)
    solver = SparseOBCD(prob.h, starts=("pca",), seed=1, max_iterations=1500, eval_every=10)

    def run():
        res = solver.run(prob.oracle, x0.clone(), StiefelGeometry(60, 6))
        return (res.point.numpy(), res.cost, res.history["cost"], res.info["stages"],
                res.info["point_from"])

    _, _, _, stages, point_from = _same_three_times(run)
    assert _stage(stages, "restarts")["count"] >= 2 and point_from.startswith("restart ")


# ---- no clock inside the algorithms -----------------------------------------------------------

CLOCKS = {"perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns",
          "process_time", "process_time_ns", "thread_time", "thread_time_ns"}
# the run's clock (``clock.py``: wall time less JIT compilation), read by the run loop and by
# ``Run.out_of_time``
ALLOWED = {("clock.py", "on_start"), ("clock.py", "on_end"), ("clock.py", "__init__"),
           ("clock.py", "elapsed")}


def _clock_reads(path: Path) -> list[str]:
    """``time.<clock>`` uses, ``from time import ...`` and reads of ``.deadline`` outside the
    allowed functions of ``path``, as ``file:line (function)``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []

    def visit(node, function):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        bad = ((isinstance(node, ast.Attribute) and node.attr in CLOCKS
                and isinstance(node.value, ast.Name) and node.value.id == "time")
               or (isinstance(node, ast.ImportFrom) and node.module == "time")
               or (isinstance(node, ast.Attribute) and node.attr == "deadline"
                   and path.name != "base.py"))
        if bad and (path.name, function) not in ALLOWED:
            found.append(f"{path.name}:{node.lineno} ({function})")
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, None)
    return found


def test_no_clock_in_solvers_and_baselines():
    root = Path(orthoplug.__file__).parent
    files = sorted((root / "solvers").glob("*.py")) + sorted((root / "baselines").glob("*.py"))
    assert any(f.name == "base.py" for f in files) and len(files) > 10
    offenders = [hit for f in files for hit in _clock_reads(f)]
    assert not offenders, offenders


def test_the_clock_check_catches_a_clock(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import time\n\ndef step(run):\n    return time.perf_counter() > "
                     "run.deadline\n", encoding="utf-8")
    assert _clock_reads(probe) == ["probe.py:4 (step)", "probe.py:4 (step)"]


# ---- the same draws on every device -----------------------------------------------------------

SAMPLERS = {"randn", "rand", "randint", "randperm", "normal", "bernoulli", "multinomial",
            "randn_like", "rand_like", "randint_like"}


def _torch_draws(path: Path) -> list[str]:
    """Calls ``torch.<sampler>(...)`` and in-place samplers (``.normal_()``, ``.uniform_()``, …)
    in ``path``, as ``file:function (sampler)``."""
    hits = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    functions = [f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.Lambda))]
    owner = {id(node): getattr(f, "name", "<lambda>") for f in functions for node in ast.walk(f)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        f = node.func
        direct = (f.attr in SAMPLERS and isinstance(f.value, ast.Name) and f.value.id == "torch")
        in_place = f.attr in {"normal_", "uniform_", "random_", "bernoulli_", "exponential_"}
        if direct or in_place:
            hits.append(f"{path.name}:{owner.get(id(node), '<module>')} ({f.attr})")
    return hits


def _iterate_modules() -> list[Path]:
    root = Path(orthoplug.__file__).parent
    folders = ("solvers", "baselines", "geometry", "oracles", "subproblems", "kernels")
    files = [f for d in folders for f in sorted((root / d).glob("*.py"))]
    return files + sorted((root.parent / "adapters").glob("*.py"))


def test_draws_go_through_the_one_device_rule():
    """Every draw that serves an iterate is made by :mod:`orthoplug._random` (the only
    exception: ``seed=None`` drawing the seed itself, before any generator exists)."""
    files = _iterate_modules()
    assert len(files) > 40
    offenders = [hit for f in files for hit in _torch_draws(f)]
    assert offenders == ["base.py:start (randint)"], offenders


def test_the_draw_check_catches_a_draw(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import torch\n\ndef step(x, g):\n    x.normal_()\n"
                     "    return torch.randn(3, generator=g, device=x.device)\n", encoding="utf-8")
    assert sorted(_torch_draws(probe)) == ["probe.py:step (normal_)", "probe.py:step (randn)"]


def test_generators_live_on_the_cpu():
    """The core run's and the torch optimizer's generators are CPU generators, whatever the
    iterate's device, so a seed gives one stream everywhere."""
    geometry = StiefelGeometry(6, 2)
    x0 = geometry.random_point(generator=torch.Generator().manual_seed(0))
    oracle = orthoplug.FunctionOracle(lambda x: -(x ** 2).sum(), lambda x: -2 * x)
    run = orthoplug.solvers.rsdm.RSDM(r=3, seed=1).start(oracle, x0, geometry)
    assert run.generator.device.type == "cpu"
    w = geoopt.ManifoldParameter(x0.clone(), manifold=geoopt.Stiefel())
    assert go.RSDM([w], lr=0.1, r=3, seed=1).generator().device.type == "cpu"
