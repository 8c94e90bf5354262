"""The public API: top-level names, statically imported adapters, and every baseline runnable on a
user's own pymanopt ``Problem`` through the registry (like the solvers).

The problems are the user's: an autograd cost on pymanopt's ``Stiefel`` (PCA, ``min −tr(XᵀAX)``,
optimum minus the sum of the p largest eigenvalues of A) and on orthoplug's ``JOrthogonal``
(``min tr(XᵀCX)`` with C ≻ 0, optimum ``trace_min_certificate``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import autograd.numpy as anp
import numpy as np
import pymanopt
import pytest
import torch

import orthoplug
import orthoplug.adapters
from orthoplug import nonsmooth, oracles, registry
from orthoplug.adapters import geoopt as go
from orthoplug.adapters import pymanopt as pm
from orthoplug.adapters._pymanopt_base import SolverOptimizer
from orthoplug.baselines.admm import ADMM
from orthoplug.baselines.csdm import CSDM
from orthoplug.baselines.ladmm import LADMM
from orthoplug.baselines.landing import Landing
from orthoplug.baselines.manpg import ManPG
from orthoplug.baselines.pcal import PCAL
from orthoplug.baselines.psm import PSM
from orthoplug.baselines.radmm import RADMM
from orthoplug.baselines.rcd import RCD
from orthoplug.baselines.umcm import UMCM
from orthoplug.geometry.manifolds import JOrthogonalGeometry
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.problems.hevp import make_spd, trace_min_certificate
from orthoplug.solvers.step_rules import Constant

BASELINES = ("ManPG", "RSubGrad", "Landing", "PCAL", "RCD", "LADMM", "RADMM", "PSM", "ADMM",
             "UMCM", "CSDM")
N, P = 8, 3


TOP_LEVEL = {nonsmooth: ("Zero", "L1", "L0", "CappedL1", "NonNegative", "PiecewiseAffine",
                         "SeparableTerm"),
             oracles: ("Oracle", "FunctionOracle", "QuadraticOracle", "FiniteSumOracle",
                       "RowGradientOracle", "ColumnOracle", "CompositeOracle", "StochasticOracle",
                       "Tracker", "NonFiniteError")}


def test_top_level_names_are_the_package_classes():
    from orthoplug import L1, FunctionOracle, QuadraticOracle  # noqa: F401 (the issue's line)

    for home, names in TOP_LEVEL.items():
        for name in names:
            assert getattr(orthoplug, name) is getattr(home, name)


def test_sigma_rules_are_exported_from_the_top_level_and_the_solvers_package():
    from orthoplug import solvers
    from orthoplug.solvers import sigma_rules

    for name in ("SigmaBacktracking", "SigmaFit", "SigmaFixed"):
        assert getattr(orthoplug, name) is getattr(sigma_rules, name)
        assert getattr(solvers, name) is getattr(sigma_rules, name)
        assert name in dir(orthoplug)
    with pytest.raises(AttributeError, match="no attribute 'SigmaArmijo'"):
        orthoplug.SigmaArmijo  # noqa: B018


def test_import_orthoplug_loads_neither_front_end_nor_solvers():
    code = ("import sys, orthoplug; print(sorted(m for m in ('pymanopt', 'geoopt', 'numba', "
            "'orthoplug.adapters', 'orthoplug.solvers', 'orthoplug.kernels') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("module", [pm, go])
def test_adapters_are_static_modules(module):
    """No module-level ``__getattr__``: every public name is an attribute of the module."""
    assert "__getattr__" not in vars(module)
    for name in module.__all__:
        assert name in vars(module), name


def test_no_adapter_module_imports_a_public_front_end_module():
    """No import cycle: the private modules import the shared bases (``_pymanopt_base``,
    ``_geoopt_base``), never ``orthoplug.adapters.pymanopt`` / ``.geoopt``, which import them."""
    offenders = []
    for path in Path(orthoplug.adapters.__path__[0]).glob("_*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (
                    (node.level == 1 and node.module in ("pymanopt", "geoopt")) or
                    node.module in ("orthoplug.adapters.pymanopt", "orthoplug.adapters.geoopt")):
                offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders, offenders


def test_every_baseline_is_registered_as_a_pymanopt_optimizer():
    assert set(BASELINES) <= set(registry.names("solver", frontend="pymanopt"))
    for name in BASELINES:
        cls = registry.get(name, "pymanopt")
        assert cls is getattr(pm, name)
        assert issubclass(cls, SolverOptimizer)


# ---- baselines on a user's own pymanopt Problem ------------------------------------------------

def _pca():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((N, N))
    a = a @ a.T
    manifold = pymanopt.manifolds.Stiefel(N, P)

    @pymanopt.function.autograd(manifold)
    def cost(x):
        return -anp.trace(x.T @ a @ x)

    x0 = np.linalg.qr(rng.standard_normal((N, P)))[0]
    lam = np.linalg.eigvalsh(a)
    return pymanopt.Problem(manifold, cost), x0, float(2 * lam[-1]), float(-lam[-P:].sum())


H = nonsmooth.L1(1e-3)
STIEFEL = {  # name: (options, feasible method)
    "ManPG": (dict(h=H, lipschitz=True), True),
    "LADMM": (dict(h=H, lipschitz=True), True),
    "RADMM": (dict(h=H, lipschitz=True), True),
    "PSM": (dict(h=H, lipschitz=True), True),
    "RSubGrad": (dict(step_size=Constant(1e-2)), True),
    "RCD": (dict(step_size=0.02), True),
    "Landing": (dict(step_size=0.02, safe_distance=0.5), False),
    "PCAL": (dict(), False),
}


@pytest.mark.parametrize("name", sorted(STIEFEL))
def test_stiefel_baseline_on_a_user_problem(name):
    """A few iterations from X₀ on pymanopt's Stiefel: F = f + h decreases; the feasible methods
    end on St(n, p) to 1e-10, Landing within its safe distance, PCAL with unit columns."""
    problem, x0, lip, optimum = _pca()
    options, feasible = STIEFEL[name]
    options = {k: (lip if k == "lipschitz" else v) for k, v in options.items()}
    result = registry.get(name, "pymanopt")(max_iterations=30, seed=0, **options).run(
        problem, initial_point=x0)
    x = result.point
    h = options.get("h")
    start = problem.cost(x0) + (0.0 if h is None else float(h.value(torch.from_numpy(x0))))
    assert result.cost < start - 1.0
    gram = x.T @ x - np.eye(P)
    assert result.violation == pytest.approx(np.linalg.norm(gram), abs=1e-12)
    if feasible:
        assert result.violation < 1e-10
        assert result.cost >= optimum - 1e-9  # f + h ≥ f ≥ min f on St(n, p)
    elif name == "Landing":
        assert result.violation <= 0.5
    else:  # PCAL normalises the columns exactly
        assert np.abs(np.diag(gram)).max() < 1e-12


def _hevp():
    c = make_spd(N, seed=0)
    manifold = pm.JOrthogonal(N, p=4)

    @pymanopt.function.autograd(manifold)
    def cost(x):
        return anp.trace(x.T @ c @ x)

    np.random.seed(0)
    x0 = manifold.random_point()
    lip = float(2 * np.linalg.eigvalsh(c)[-1])
    return pymanopt.Problem(manifold, cost), x0, lip, trace_min_certificate(c, manifold.signature)


def test_csdm_on_a_user_problem_stays_j_orthogonal():
    problem, x0, _, optimum = _hevp()
    result = pm.CSDM(step_size=5e-2, max_iterations=30, seed=0).run(problem, initial_point=x0)
    assert result.violation < 1e-10
    assert optimum <= result.cost < problem.cost(x0) - 1.0


def test_admm_with_a_fixed_penalty_approaches_the_certificate():
    """ADMM (infeasible) with β = L: after 50 iterations the gap to the certificate is below 1%
    of the initial gap and the constraint holds to 1e-3."""
    problem, x0, lip, optimum = _hevp()
    result = pm.ADMM(beta={"beta0": lip, "every": 0}, max_iterations=50, seed=0).run(
        problem, initial_point=x0)
    assert abs(result.cost - optimum) < 1e-2 * (problem.cost(x0) - optimum)
    assert result.violation < 1e-3


def test_umcm_on_a_user_problem_decreases_the_cost_near_the_constraint():
    problem, x0, _, optimum = _hevp()
    result = pm.UMCM(step_size=5e-2, beta={"beta0": 10.0, "every": 0}, max_iterations=50,
                     seed=0).run(problem, initial_point=x0)
    assert result.cost < problem.cost(x0) - 1.0
    assert result.violation < 0.1  # the penalty 10‖XᵀJX − J‖² keeps X near O(J)


def test_a_structured_oracle_brings_its_lipschitz_constant():
    """``run(problem, oracle=QuadraticOracle(...))``: ManPG needs no ``lipschitz=`` then."""
    problem, x0, _, _ = _pca()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((N, N))
    oracle = orthoplug.QuadraticOracle(torch.from_numpy(a @ a.T), scale=-1.0)
    with pytest.raises(ValueError, match="Lipschitz"):
        pm.ManPG(h=H, max_iterations=3).run(problem, initial_point=x0)
    result = pm.ManPG(h=H, max_iterations=30).run(problem, initial_point=x0, oracle=oracle)
    assert result.violation < 1e-10 and result.cost < problem.cost(x0) - 1.0


@pytest.mark.parametrize("name", ["ManPG", "Landing", "RCD"])
def test_a_stiefel_baseline_rejects_a_j_manifold(name):
    problem, x0, _, _ = _hevp()
    with pytest.raises(ValueError, match="does not support"):
        getattr(pm, name)(max_iterations=2).run(problem, initial_point=x0)


# ---- the Run contract: a baseline object run twice gives identical results --------------------

def _stiefel_case():
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(N, N, dtype=torch.float64, generator=gen)
    oracle = orthoplug.QuadraticOracle(a @ a.T, scale=-1.0)
    x0 = torch.linalg.qr(torch.randn(N, P, dtype=torch.float64, generator=gen))[0]
    return oracle, x0, StiefelGeometry(N, P)


def _j_case():
    c = torch.from_numpy(make_spd(N, seed=1))
    geometry = JOrthogonalGeometry(N, 4)
    x0 = geometry.random_point(generator=torch.Generator().manual_seed(1), cond=3.0)
    return orthoplug.QuadraticOracle(c), x0, geometry


@pytest.mark.parametrize("solver, case", [
    (ManPG(H), _stiefel_case), (LADMM(H), _stiefel_case), (RADMM(H), _stiefel_case),
    (PSM(H), _stiefel_case), (Landing(), _stiefel_case), (PCAL(), _stiefel_case),
    (RCD(), _stiefel_case), (ADMM(beta=10.0), _j_case), (UMCM(), _j_case), (CSDM(), _j_case),
], ids=lambda v: getattr(v, "name", ""))
def test_a_baseline_object_run_twice_gives_identical_results(solver, case):
    solver.stopping.max_iterations = 7
    solver.seed = 3
    oracle, x0, geometry = case()
    before = dict(vars(solver))
    first = solver.run(oracle, x0.clone(), geometry)
    assert vars(solver) == before  # the solver object does not change during a run
    second = solver.run(oracle, x0.clone(), geometry)
    assert torch.equal(first.point, second.point)
    assert first.history["cost"] == second.history["cost"]
    assert first.info == second.info


def test_splitting_measure_has_no_side_effects():
    """The splitting methods report the nonnegative rounding of X for h = indicator(X ≥ 0); the
    step keeps the tracker there, so ``measure`` only reads (same values, same point)."""
    oracle, _, geometry = _stiefel_case()
    x0 = torch.zeros(N, P, dtype=torch.float64)
    x0[torch.arange(N), torch.arange(N) % P] = 1.0
    x0 = x0 / torch.linalg.norm(x0, dim=0)
    solver = LADMM(nonsmooth.NonNegative(), seed=0)
    run = solver.start(oracle, x0, geometry)
    for _ in range(3):
        solver.step(run)
    point = run.tracker.x.clone()
    first = solver.measure(run)
    assert solver.measure(run) == first
    assert torch.equal(run.tracker.x, point)
    assert float((point < 0).sum()) == 0 and float(geometry.violation(point)) < 1e-12
    # the "gradient norm" slot: max(‖X − Y‖, ‖P_X(∇f(X) + Λ)‖), both zero at a KKT point
    d = oracle.gradient(run.x) + run.lam
    tangent = d - run.x @ (run.x.mT @ d + d.mT @ run.x) / 2
    assert first[1] == pytest.approx(max(float(torch.linalg.norm(run.x - run.y)),
                                         float(torch.linalg.norm(tangent))), rel=1e-12)
