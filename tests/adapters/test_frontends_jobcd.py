"""One JOBCD implementation behind both front-ends.

The pymanopt optimizers run the core solvers; the geoopt optimizers take the same steps, draws
and σ decisions through the torch scaffold. Checked here: equal iterates of the two doors built
with their defaults (and with the same non-default options), a resumed optimizer continues
bit-identically, a core solver object can be run twice, and a NaN stops a torch run with its
cause while the parameters keep their last good values.
"""

from __future__ import annotations

import io

import autograd.numpy as anp
import geoopt
import numpy as np
import pymanopt
import pytest
import torch

from orthoplug.adapters import geoopt as go
from orthoplug.adapters import pymanopt as pm
from orthoplug.geometry.manifolds import JOrthogonalGeometry
from orthoplug.oracles import FiniteSumOracle, FunctionOracle, QuadraticOracle
from orthoplug.problems.hevp import make_spd
from orthoplug.solvers.jjacobi import ColumnJacobi, ColumnJJacobi
from orthoplug.solvers.jobcd import GSJOBCD, JJOBCD, VRJJOBCD
from orthoplug.solvers.sigma_rules import SigmaBacktracking, SigmaFit, SigmaFixed

F64 = torch.float64
N, P = 6, 3
SEED = 11
C = make_spd(N, seed=2)
D = make_spd(N, seed=3)
L_F = float(QuadraticOracle(torch.from_numpy(C), torch.from_numpy(D)).lipschitz)


def _x0(seed=0):
    return JOrthogonalGeometry(N, P).random_point(cond=3.0, generator=torch.Generator()
                                                  .manual_seed(seed))


def _pymanopt_run(name, steps, x0, oracle=None, **options):
    """``steps`` iterations of the pymanopt optimizer on f = tr(XᵀCXD) (autodiff problem)."""
    manifold = pm.JOrthogonal(N, P)

    @pymanopt.function.autograd(manifold)
    def cost(x):
        return anp.trace(x.T @ C @ x @ D)

    opt = getattr(pm, name)(max_iterations=steps, min_gradient_norm=0.0, seed=SEED, **options)
    return opt.run(pymanopt.Problem(manifold, cost), initial_point=x0.numpy(),
                   oracle=oracle).solver_result


def _param(x0):
    return geoopt.ManifoldParameter(x0.clone(), manifold=go.JOrthogonal(N, P))


def _loss_closure(opt, x, loss_of, nan_at=None, nan_grad=False):
    """``closure(*args)`` computing ``loss_of(*args)`` and its gradient; at step ``nan_at`` the
    loss (or, with ``nan_grad``, one gradient entry) is made NaN."""

    def closure(*args):
        opt.zero_grad()
        loss = loss_of(*args)
        if nan_at is not None and opt.steps_taken == nan_at and not nan_grad:
            loss = loss * float("nan")
        loss.backward()
        if nan_at is not None and opt.steps_taken == nan_at and nan_grad:
            x.grad[0, 0] = float("nan")
        return loss

    return closure


def _closure(opt, x, nan_at=None, nan_grad=False):
    c, d = torch.from_numpy(C), torch.from_numpy(D)
    return _loss_closure(opt, x, lambda: torch.trace(x.mT @ c @ x @ d), nan_at, nan_grad)


# f = (1/M) Σ_i ‖a_iᵀ X‖² = tr(XᵀCX), C = AᵀA/M: the finite sum of VR-J-JOBCD
M = 40
A = torch.from_numpy(np.random.default_rng(5).standard_normal((M, N)))
L_SUM = 2.0 * float(torch.linalg.eigvalsh(A.T @ A / M).max()) * 2


def _sum_value(x, idx):
    return ((A[idx] @ x) ** 2).sum(dim=1).mean()


def _sum_grad(x, idx):
    return 2.0 * A[idx].T @ (A[idx] @ x) / idx.numel()


def _vr_closure(opt, x, nan_at=None, nan_grad=False):
    return _loss_closure(opt, x, lambda idx: _sum_value(x, idx), nan_at, nan_grad)


VR_OPTIONS = dict(batch_size=20, small_batch=5, reset_probability=0.3)


def _torch_opt(name, x, seed=SEED, **options):
    if name == "VRJJOBCD":
        return go.VRJJOBCD([x], num_components=M, sigma_rule=L_SUM, seed=seed, **VR_OPTIONS)
    if name == "ColumnJJacobi":
        return go.ColumnJJacobi([x], c=C, pairs="random", seed=seed)
    return getattr(go, name)([x], seed=seed, **options)


def _torch_steps(opt, x, steps, name):
    closure = _vr_closure(opt, x) if name == "VRJJOBCD" else _closure(opt, x)
    for _ in range(steps):
        opt.step(closure)
    return x.detach().clone()


# ---- equal iterates ---------------------------------------------------------------------------

CASES = {  # (door, options given to both doors alike); "defaults": none at all
    "GS defaults": ("GSJOBCD", {}),
    "GS fixed sigma": ("GSJOBCD", dict(sigma_rule=L_F)),
    "GS backtracking from sigma0": ("GSJOBCD", dict(sigma_rule=SigmaBacktracking(1.0))),
    "GS backtracking, Lipschitz estimate": ("GSJOBCD", dict(sigma_rule="backtracking")),
    "GS column": ("GSJOBCD", dict(side="column")),
    "J defaults": ("JJOBCD", {}),
    "J fixed sigma": ("JJOBCD", dict(sigma_rule=SigmaFixed(L_F))),
    "J adaptive backtracking, column": ("JJOBCD", dict(
        sigma_rule=SigmaBacktracking(1.0, shrink=0.5), side="column")),
    "J all matchings": ("JJOBCD", dict(matchings="all")),
    "J fit column, 3 matchings": ("JJOBCD", dict(sigma_rule=SigmaFit(1.0), matchings=3,
                                                 side="column")),
}


@pytest.mark.parametrize("case", CASES)
def test_pymanopt_and_geoopt_take_the_same_steps_and_sigma_decisions(case):
    name, options = CASES[case]
    steps = 40
    x0 = _x0()
    res = _pymanopt_run(name, steps, x0, eval_every=7, **options)
    x = _param(x0)
    opt = _torch_opt(name, x, **options)
    out = _torch_steps(opt, x, steps, name)
    assert res.iterations == steps
    assert float(torch.linalg.norm(out - x0)) > 1e-3  # the iterates moved
    torch.testing.assert_close(res.point, out, rtol=0, atol=1e-10)
    assert res.info["sigma_rule"] == opt.info()["sigma_rule"]
    assert res.info["sigma_start"] == opt.state[x]["sigma_start"]
    if opt.sigma_rule.checked:  # the same σ decisions
        assert res.info["backtracks"] == opt.state[x]["backtracks"]
        assert res.info["final_sigma"] == pytest.approx(opt.state[x]["sigma"], rel=1e-12)
        assert res.info["backtracks"] > 0 or options.get("sigma_rule") == "backtracking"


def test_vr_j_jobcd_front_ends_draw_the_same_coins_and_batches():
    """The geoopt door needs the σ that the core solver's default reads from the oracle's
    declared Lipschitz constant (a closure declares none): the same σ in both."""
    steps = 30
    x0 = _x0()
    declared = FiniteSumOracle(M, _sum_value, _sum_grad, lipschitz=L_SUM)
    res = _pymanopt_run("VRJJOBCD", steps, x0, oracle=declared, eval_every=5, **VR_OPTIONS)
    given = _pymanopt_run("VRJJOBCD", steps, x0, oracle=FiniteSumOracle(M, _sum_value, _sum_grad),
                          eval_every=5, sigma_rule=L_SUM, **VR_OPTIONS)
    assert torch.equal(res.point, given.point)
    x = _param(x0)
    opt = _torch_opt("VRJJOBCD", x)
    out = _torch_steps(opt, x, steps, "VRJJOBCD")
    assert float(torch.linalg.norm(out - x0)) > 1e-3
    torch.testing.assert_close(res.point, out, rtol=0, atol=1e-10)
    assert res.info["component_gradients"] == opt.component_gradients
    assert opt.component_gradients < M * steps  # the estimator skipped full gradients


@pytest.mark.parametrize("options", [{}, {"pairs": "random"}], ids=["defaults", "random"])
def test_column_jjacobi_doors_take_the_same_sweeps(options):
    manifold = pm.JOrthogonal(N, P)

    @pymanopt.function.autograd(manifold)
    def cost(x):
        return anp.trace(x.T @ C @ x)

    x0 = _x0(1)
    res = pm.ColumnJJacobi(seed=SEED, max_iterations=4, min_gradient_norm=0.0, **options).run(
        pymanopt.Problem(manifold, cost), initial_point=x0.numpy(),
        oracle=QuadraticOracle(torch.from_numpy(C))).solver_result
    x = _param(x0)
    opt = go.ColumnJJacobi([x], c=C, seed=SEED, **options)
    for _ in range(res.iterations):
        opt.step()
    assert res.iterations >= 2
    assert res.info["pairs"] == options.get("pairs", "cyclic")
    torch.testing.assert_close(res.point, x.detach(), rtol=0, atol=1e-12)


def test_a_sweep_that_raises_f_is_undone_in_both_front_ends(monkeypatch):
    """Rounding may make a sweep increase f: both front-ends keep the point before it
    (:meth:`ColumnJacobi.outcome`). Simulated by a sweep that applies an O(J) boost."""
    geo = JOrthogonalGeometry(N, P)
    boost = geo.random_point(cond=50.0, generator=torch.Generator().manual_seed(9)).numpy()
    original = ColumnJacobi.sweep

    def bad_sweep(self, x, generator):
        original(self, x, generator)
        return x @ boost

    monkeypatch.setattr(ColumnJacobi, "sweep", bad_sweep)
    c = torch.from_numpy(C)
    x0 = _x0(1)
    oracle = QuadraticOracle(c)
    assert float(oracle.value(x0 @ torch.from_numpy(boost))) > float(oracle.value(x0))
    res = ColumnJJacobi(seed=SEED, max_iterations=5).run(oracle, x0, geo)
    assert "increased f" in res.stop_reason and res.iterations == 1
    torch.testing.assert_close(res.point, x0, rtol=0, atol=0)
    x = _param(x0)
    opt = go.ColumnJJacobi([x], c=C, seed=SEED)
    opt.step()
    torch.testing.assert_close(x.detach(), x0, rtol=0, atol=0)


# ---- resume -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["GSJOBCD", "JJOBCD", "VRJJOBCD", "ColumnJJacobi"])
def test_resumed_optimizer_continues_bit_identically(name):
    k, more = 7, 9
    x0 = _x0(2)
    x = _param(x0)
    full = _torch_steps(_torch_opt(name, x), x, k + more, name)

    x = _param(x0)
    opt = _torch_opt(name, x)
    _torch_steps(opt, x, k, name)
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    y = _param(x.detach())
    opt2 = _torch_opt(name, y, seed=SEED + 1)
    opt2.load_state_dict(torch.load(buffer))
    resumed = _torch_steps(opt2, y, more, name)
    assert float(torch.linalg.norm(resumed - x.detach())) > 1e-6
    torch.testing.assert_close(resumed, full, rtol=0, atol=1e-12)


# ---- the core solver object holds no run state ---------------------------------------------


SOLVERS = {
    "GS compiled": (lambda: GSJOBCD(side="row", seed=3, max_iterations=300, eval_every=50),
                    "quadratic"),
    "GS per pair": (lambda: GSJOBCD(side="row", curvature="scalar", seed=3, max_iterations=40,
                                    eval_every=10), "function"),
    "column J-Jacobi": (lambda: ColumnJJacobi(pairs="random", seed=3, max_iterations=3),
                        "trace"),
    "J": (lambda: JJOBCD(seed=3, max_iterations=30, eval_every=5), "function"),
    "VR": (lambda: VRJJOBCD(seed=3, max_iterations=30, eval_every=5, **VR_OPTIONS), "sum"),
}


def _oracle(kind):
    c, d = torch.from_numpy(C), torch.from_numpy(D)
    if kind == "quadratic":
        return QuadraticOracle(c, d)
    if kind == "trace":
        return QuadraticOracle(c)
    if kind == "sum":
        return FiniteSumOracle(M, _sum_value, _sum_grad, lipschitz=L_SUM)
    return FunctionOracle(lambda x: torch.trace(x.mT @ c @ x @ d), lambda x: 2.0 * c @ x @ d)


@pytest.mark.parametrize("case", SOLVERS)
def test_a_core_solver_object_run_twice_gives_identical_results(case):
    make, kind = SOLVERS[case]
    solver = make()
    options = dict(vars(solver))
    x0 = _x0(4)
    first = solver.run(_oracle(kind), x0, JOrthogonalGeometry(N, P))
    assert dict(vars(solver)) == options  # the solver object did not change
    second = solver.run(_oracle(kind), x0, JOrthogonalGeometry(N, P))
    assert first.cost < float(_oracle(kind).value(x0))
    assert torch.equal(first.point, second.point)
    assert first.history["cost"] == second.history["cost"]
    assert first.info == second.info


# ---- NaN in the middle of a torch run -----------------------------------------------------------


@pytest.mark.parametrize("name", ["GSJOBCD", "JJOBCD", "VRJJOBCD", "ColumnJJacobi"])
@pytest.mark.parametrize("what", ["loss", "gradient"])
def test_nan_mid_run_names_the_cause_and_keeps_the_last_good_parameters(name, what):
    if what == "gradient" and name == "ColumnJJacobi":
        pytest.skip("ColumnJJacobi uses no gradient")
    x = _param(_x0(3))
    opt = _torch_opt(name, x)
    if name == "VRJJOBCD":
        closure = _vr_closure(opt, x, nan_at=4, nan_grad=what == "gradient")
    else:
        closure = _closure(opt, x, nan_at=4, nan_grad=what == "gradient")
    for _ in range(4):
        opt.step(closure)
    good = x.detach().clone()
    with pytest.raises(FloatingPointError, match=f"non-finite {what}.*at step 4"):
        opt.step(closure)
    assert torch.equal(x.detach(), good)


def test_vr_nan_at_the_previous_point_restores_the_current_parameters():
    """The PAGE difference step evaluates the closure at the previous point too (the parameters
    swapped in): a NaN there leaves the parameters at the current point, not the previous."""
    x = _param(_x0(3))
    opt = go.VRJJOBCD([x], num_components=M, sigma_rule=L_SUM, seed=SEED, batch_size=20,
                      small_batch=5, reset_probability=0.0)  # every later step a difference
    calls = []

    def closure(idx):
        calls.append(opt.steps_taken)
        opt.zero_grad()
        loss = _sum_value(x, idx)
        if calls.count(4) == 2:  # the second call of step 4: at the previous point
            loss = loss * float("nan")
        loss.backward()
        return loss

    for _ in range(4):
        opt.step(closure)
    good = x.detach().clone()
    with pytest.raises(FloatingPointError, match="non-finite loss.*at step 4"):
        opt.step(closure)
    assert calls.count(4) == 2 and torch.equal(x.detach(), good)


def test_resolved_choices_are_reported_and_printed_at_verbosity_1(capsys):
    """J-JOBCD's one default (scalar model, rows, one matching, SigmaFit from a local estimate)
    is in ``result.info``, printed by the pymanopt door at verbosity 1, and in the geoopt
    optimizer's ``info()`` with the same first σ."""
    x0 = _x0()
    res = _pymanopt_run("JJOBCD", 3, x0, verbosity=1)
    printed = capsys.readouterr().out
    for key, value in (("curvature", "scalar"), ("side", "row"), ("matchings", 1)):
        assert res.info[key] == value and f"'{key}': {value!r}" in printed
    assert res.info["sigma_rule"].startswith("SigmaFit(sigma0=None")
    x = _param(x0)
    opt = _torch_opt("JJOBCD", x)
    _torch_steps(opt, x, 1, "JJOBCD")
    info = opt.info()
    assert (info["curvature"], info["side"], info["matchings"]) == ("scalar", "row", 1)
    assert info["sigma_rule"] == res.info["sigma_rule"]
    assert info["sigma_start"] == res.info["sigma_start"] > 0
