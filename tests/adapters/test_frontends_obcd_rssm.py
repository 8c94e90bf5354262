"""One implementation behind both front-ends of OBCD and RSSM (issue #15).

* N iterations of the pymanopt optimizer equal N ``step(closure)`` calls of the geoopt optimizer
  (same seed, start and options — OBCD's defaults too — or fixed σ / step sizes), to 1e-10;
* a torch optimizer saved after k steps and loaded into one built with another seed continues
  exactly as the uninterrupted one;
* a core solver object run twice gives the same result and is not changed by the run;
* a NaN loss or gradient in the middle of a torch run raises an error naming it and keeps the
  last good parameters.
"""

from __future__ import annotations

import copy
import io

import autograd.numpy as anp
import geoopt
import numpy as np
import pymanopt
import pytest
import torch

from orthoplug.adapters import geoopt as go
from orthoplug.adapters import pymanopt as pm
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.nonsmooth import L1
from orthoplug.oracles import QuadraticOracle
from orthoplug.problems.nonsmooth_problems import dpcp_instance
from orthoplug.solvers.obcd import OBCD
from orthoplug.solvers.rssm import RSSM
from orthoplug.solvers.step_rules import Constant, Diminishing, Geometric, GeometricOnStall, Polyak

DT = torch.float64
N, R = 10, 4


def _data(seed=0, m=30, n=N):
    return torch.randn(m, n, dtype=DT, generator=torch.Generator().manual_seed(seed))


def _start(seed=1, n=N, r=R):
    return torch.linalg.qr(torch.randn(n, r, dtype=DT,
                                       generator=torch.Generator().manual_seed(seed))).Q


# ---- OBCD: f(X) = −½‖AX‖² + 0.05 Σ (AX)⁴ / m (not quadratic), h = λ‖X‖₁ ---------------------

def _obcd_cost_torch(a, x):
    y = a @ x
    return (-0.5 * (y ** 2).sum() + 0.05 * (y ** 4).sum()) / a.shape[0]


def _obcd_problem(a):
    an = a.numpy()
    manifold = pymanopt.manifolds.Stiefel(N, R)

    @pymanopt.function.autograd(manifold)
    def cost(x):
        y = an @ x
        return (-0.5 * anp.sum(y ** 2) + 0.05 * anp.sum(y ** 4)) / an.shape[0]

    return pymanopt.Problem(manifold, cost)


def _stiefel_param(x0):
    return geoopt.ManifoldParameter(x0.clone(), manifold=geoopt.Stiefel())


def _closure(opt, x, loss_fn):
    def closure():
        opt.zero_grad()
        loss = loss_fn(x)
        loss.backward()
        return loss
    return closure


def test_obcd_doors_take_the_same_steps_with_default_options():
    """No option but the seed: both doors resolve the pair order to Jacobi (every update pays
    a full gradient) and start the same σ rule at the same local estimate, and their iterates
    agree over 40 iterations, a doubling of σ included (row 0 of X meets 9 times the curvature
    of the others, which the estimate along a random direction underrates)."""
    a, x0, h, steps = _data(), _start(), L1(0.02), 40
    a[:, 0] *= 3.0
    res = pm.OBCD(h=h, max_iterations=steps, seed=4).run(_obcd_problem(a),
                                                          initial_point=x0.numpy())
    x = _stiefel_param(x0)
    opt = go.OBCD([x], h=h, seed=4)
    closure = _closure(opt, x, lambda p: _obcd_cost_torch(a, p))
    for _ in range(steps):
        opt.step(closure)
    info = res.solver_result.info
    assert info["pairs"] == opt.info()["pairs"] == "jacobi"
    assert info["sigma_rule"] == opt.info()["sigma_rule"] == "SigmaBacktracking(sigma0=None, " \
        "shrink=1.0, max_backtracks=60)"
    assert opt.info()["sigma_start"] == pytest.approx(info["sigma_start"], rel=1e-12)
    assert info["backtracks"] > 0  # σ doubled on the way: the checked rule was exercised
    assert opt.state[x]["backtracks"] == info["backtracks"]
    assert float(torch.linalg.norm(x.detach() - x0)) > 1e-2  # the runs went somewhere
    assert float(np.abs(x.detach().numpy() - res.point).max()) <= 1e-10


@pytest.mark.parametrize("pairs", ["random", "cyclic", "jacobi"])
def test_obcd_pymanopt_and_geoopt_take_the_same_steps(pairs):
    a, x0, h, steps = _data(), _start(), L1(0.02), 40
    opts = dict(pairs=pairs, theta=1e-5, sigma_rule=3.0)
    res = pm.OBCD(h=h, curvature="scalar", max_iterations=steps, seed=4, **opts).run(
        _obcd_problem(a), initial_point=x0.numpy())
    x = _stiefel_param(x0)
    opt = go.OBCD([x], h=h, seed=4, **opts)
    closure = _closure(opt, x, lambda p: _obcd_cost_torch(a, p))
    for _ in range(steps):
        opt.step(closure)
    moved = float(torch.linalg.norm(x.detach() - x0))
    assert moved > 1e-2  # the runs went somewhere
    assert float(np.abs(x.detach().numpy() - res.point).max()) <= 1e-10


@pytest.mark.parametrize("pairs", ["random", "jacobi"])
def test_obcd_state_dict_resume_is_exact(pairs):
    a, x0, h = _data(), _start(), L1(0.02)
    loss_fn = lambda p: _obcd_cost_torch(a, p)  # noqa: E731
    # σ backtracks (its state must travel) and a batched parameter (two matrices)
    start = torch.stack([x0, _start(2)])
    x = _stiefel_param(start)
    opt = go.OBCD([x], h=h, pairs=pairs, seed=5)
    closure = _closure(opt, x, loss_fn)
    for _ in range(7):
        opt.step(closure)
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    x2 = _stiefel_param(x.detach())
    opt2 = go.OBCD([x2], h=h, pairs=pairs, seed=99)
    buf.seek(0)
    opt2.load_state_dict(torch.load(buf))
    closure2 = _closure(opt2, x2, loss_fn)
    for _ in range(9):
        opt.step(closure)
        opt2.step(closure2)
    assert not torch.equal(x.detach(), start)
    assert float((x.detach() - x2.detach()).abs().max()) <= 1e-12


def test_obcd_core_solver_run_twice_is_identical():
    c = _data(3).mT @ _data(3) / 30.0
    oracle, geo = QuadraticOracle(c, scale=-1.0), StiefelGeometry(N, R)
    for solver in (OBCD(L1(0.01), seed=3, max_iterations=300, eval_every=50),
                   OBCD(L1(0.01), pairs="jacobi", seed=3, max_iterations=20),
                   OBCD(L1(0.01), curvature="scalar", seed=3, max_iterations=300,
                        eval_every=50)):
        options = dict(vars(solver))
        first = solver.run(oracle, _start(), geo)
        second = solver.run(oracle, _start(), geo)
        assert torch.equal(first.point, second.point)
        assert first.history["cost"] == second.history["cost"]
        assert first.history["h"] == second.history["h"] and len(first.history["h"]) > 1
        assert first.info["h"] == pytest.approx(float(L1(0.01).value(first.point)), abs=1e-15)
        assert vars(solver).keys() == options.keys()
        assert all(vars(solver)[k] is v for k, v in options.items())


# ---- RSSM on DPCP: f(X) = mean_j ‖Xᵀy_j‖ ----------------------------------------------------

_DPCP = dpcp_instance(16, 10, 40, seed=2)


def _dpcp_torch(x):
    return torch.linalg.vector_norm(_DPCP.data.mT @ x, dim=1).mean()


def _dpcp_problem():
    y = _DPCP.data.numpy()
    manifold = pymanopt.manifolds.Stiefel(16, 6)

    @pymanopt.function.autograd(manifold)
    def cost(x):
        return anp.mean(anp.sqrt(anp.sum((y.T @ x) ** 2, axis=1)))

    return pymanopt.Problem(manifold, cost)


SAME_STEP_RULES = {
    "constant": Constant(0.05), "diminishing": Diminishing(0.05),
    "geometric": Geometric(0.05, 0.97),
    "polyak": Polyak(patience=1, path=None),
    "polyak-path": Polyak(patience=1, path=30.0),
    "geometric-on-stall": GeometricOnStall(2.0, 0.999, patience=1),  # far too large: restarts
}


@pytest.mark.parametrize("name", list(SAME_STEP_RULES))
def test_rssm_pymanopt_and_geoopt_take_the_same_steps(name):
    x0, steps = _DPCP.random_point(3), 60
    rule = SAME_STEP_RULES[name]
    res = pm.RSSM(step_size=rule, num_blocks=3, max_iterations=steps, seed=8).run(
        _dpcp_problem(), initial_point=x0.numpy())
    x = geoopt.ManifoldParameter(x0.clone(), manifold=geoopt.EuclideanStiefel())
    opt = go.RSSM([x], lr=rule, num_blocks=3, seed=8)
    closure = _closure(opt, x, _dpcp_torch)
    for _ in range(steps):
        opt.step(closure)
    # the problem's gradient is a full one: a pymanopt iteration is one block step
    assert res.solver_result.info["updates_per_iteration"] == 1
    if name == "geometric-on-stall":
        assert res.solver_result.info["restarts"] >= 1
    assert float(torch.linalg.norm(x.detach() - x0)) > 1e-2
    assert float(np.abs(x.detach().numpy() - res.point).max()) <= 1e-10


def test_rssm_doors_take_the_same_steps_with_default_options():
    """Defaults only (seed and budget aside): the pymanopt door on an autograd cost and the
    geoopt optimizer on a closure move through the same points (a pymanopt iteration and a
    geoopt step are one block step each: both read a full gradient)."""
    x0, steps = _DPCP.random_point(5), 60
    res = pm.RSSM(max_iterations=steps, seed=3).run(_dpcp_problem(), initial_point=x0.numpy())
    assert res.iterations == steps
    x = geoopt.ManifoldParameter(x0.clone(), manifold=geoopt.EuclideanStiefel())
    opt = go.RSSM([x], seed=3)
    closure = _closure(opt, x, _dpcp_torch)
    for _ in range(steps):
        opt.step(closure)
    assert float(torch.linalg.norm(x.detach() - x0)) > 1e-2
    assert float(np.abs(x.detach().numpy() - res.point).max()) <= 1e-10


@pytest.mark.parametrize("name", ["diminishing", "polyak"])
def test_rssm_compiled_dpcp_oracle_and_geoopt_take_the_same_steps(name):
    """The core solver on the DPCP oracle (float64 CPU: the compiled column pass) and the torch
    front-end on an autograd closure move through the same points. A geoopt step is one block
    step; the core's iteration on this column oracle is ⌈3/2⌉ = 2 of them."""
    x0, steps = _DPCP.random_point(3), 60
    rule = SAME_STEP_RULES[name]
    oracle = _DPCP.oracle()
    res = RSSM(step_size=rule, num_blocks=3, max_iterations=steps // 2, seed=8).run(
        oracle, x0, StiefelGeometry(16, 6))
    assert oracle.track(x0).compiled
    assert res.info["block_steps"] == steps and res.info["updates_per_iteration"] == 2
    x = geoopt.ManifoldParameter(x0.clone(), manifold=geoopt.EuclideanStiefel())
    opt = go.RSSM([x], lr=rule, num_blocks=3, seed=8)
    closure = _closure(opt, x, _dpcp_torch)
    for _ in range(steps):
        opt.step(closure)
    assert float(torch.linalg.norm(x.detach() - x0)) > 1e-2
    assert float((x.detach() - res.point).abs().max()) <= 1e-10


@pytest.mark.parametrize("rule", [Diminishing(), Polyak(patience=1), GeometricOnStall(patience=1)])
def test_rssm_state_dict_resume_is_exact(rule):
    x0 = _DPCP.random_point(4)
    x = geoopt.ManifoldParameter(x0.clone(), manifold=geoopt.EuclideanStiefel())
    opt = go.RSSM([x], rule, num_blocks=3, seed=1)
    closure = _closure(opt, x, _dpcp_torch)
    for _ in range(8):
        opt.step(closure)
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    x2 = geoopt.ManifoldParameter(x.detach().clone(), manifold=geoopt.EuclideanStiefel())
    opt2 = go.RSSM([x2], rule, num_blocks=3, seed=77)
    buf.seek(0)
    opt2.load_state_dict(torch.load(buf))  # plain data: weights_only loads it
    closure2 = _closure(opt2, x2, _dpcp_torch)
    for _ in range(12):
        opt.step(closure)
        opt2.step(closure2)
    assert float((x.detach() - x2.detach()).abs().max()) <= 1e-12


@pytest.mark.parametrize("rule", [Polyak(patience=1), GeometricOnStall(0.5, patience=1)])
def test_rssm_core_solver_run_twice_is_identical(rule):
    solver = RSSM(num_blocks=3, step_size=rule, seed=2, max_iterations=120, eval_every=5)
    options = copy.copy(vars(solver))
    state = copy.deepcopy(vars(rule))
    geo = StiefelGeometry(16, 6)
    first = solver.run(_DPCP.oracle(), _DPCP.random_point(5), geo)
    second = solver.run(_DPCP.oracle(), _DPCP.random_point(5), geo)
    assert torch.equal(first.point, second.point) and torch.equal(first.best_point,
                                                                  second.best_point)
    assert first.history["cost"] == second.history["cost"]
    assert first.best_cost == min(first.history["cost"] + [first.cost])
    assert first.info["best_cost"] == first.best_cost
    assert vars(solver) == options
    assert repr(vars(rule)) == repr(state)  # the template is not run itself


# ---- NaN in the middle of a torch run ----------------------------------------------------

def _nan_run(make_opt, loss_fn, x0, bad_step, where):
    x = geoopt.ManifoldParameter(x0.clone(), manifold=geoopt.EuclideanStiefel())
    opt = make_opt(x)
    calls = {"n": 0}

    def closure():
        opt.zero_grad()
        loss = loss_fn(x)
        if opt.steps_taken == bad_step and where == "loss":
            loss = loss * float("nan")
        loss.backward()
        if opt.steps_taken == bad_step and where == "gradient":
            x.grad[0, 0] = float("nan")
        calls["n"] += 1
        return loss

    for _ in range(bad_step):
        opt.step(closure)
    before = x.detach().clone()
    return opt, closure, x, before


@pytest.mark.parametrize("where", ["loss", "gradient"])
@pytest.mark.parametrize("method", ["OBCD", "RSSM"])
def test_nan_mid_run_names_the_cause_and_keeps_the_point(method, where):
    if method == "OBCD":
        a = _data()
        opt, closure, x, before = _nan_run(
            lambda x: go.OBCD([x], h=L1(0.02), seed=0), lambda p: _obcd_cost_torch(a, p),
            _start(), 5, where)
    else:
        opt, closure, x, before = _nan_run(
            lambda x: go.RSSM([x], num_blocks=3, seed=0), _dpcp_torch,
            _DPCP.random_point(3), 5, where)
    with pytest.raises(FloatingPointError, match=f"non-finite {where}"):
        opt.step(closure)
    assert torch.equal(x.detach(), before)
    assert bool(torch.isfinite(before).all())
