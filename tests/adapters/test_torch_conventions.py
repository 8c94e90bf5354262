"""torch.optim conventions of every geoopt optimizer: float32 rules (the 500-step acceptance is in
:mod:`test_float32`), ``lr`` and schedulers, start checks, closures, parameter groups and their
per-group options, ``stabilize``, ``projx``.

The problems: ``tr(XᵀCX)`` with ``C`` symmetric positive definite over O(3, 3) (J-manifold
optimizers; bounded below, its minimum is reached) and ``−tr(XᵀAX)`` over St(8, 3) (Stiefel
optimizers; minimum ``−`` the sum of the 3 largest eigenvalues of ``A``).
"""

from __future__ import annotations

import geoopt
import numpy as np
import pymanopt
import pytest
import torch

from orthoplug.adapters import pymanopt as pm
from orthoplug.adapters.geoopt import (
    GSJOBCD,
    JJOBCD,
    OBCD,
    RSDM,
    RSSM,
    VRJJOBCD,
    CayleyLBFGS,
    ColumnJJacobi,
    IndefiniteStiefel,
    JOrthogonal,
)
from orthoplug.geometry.manifolds import InfeasiblePointError, feasibility_tol
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.solvers.sigma_rules import SigmaBacktracking, SigmaFit, cost_rounding
from orthoplug.solvers.step_rules import Constant

J_OPTIMIZERS = ("GSJOBCD", "JJOBCD", "VRJJOBCD", "ColumnJJacobi", "CayleyLBFGS")
STIEFEL_OPTIMIZERS = ("OBCD", "RSDM", "RSSM")
ALL = J_OPTIMIZERS + STIEFEL_OPTIMIZERS
N_J, N_ST, R_ST = 6, 8, 3


def _data():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(N_J, N_J, generator=g, dtype=torch.float64)
    c = a @ a.T + torch.eye(N_J, dtype=torch.float64)
    b = torch.randn(N_ST, N_ST, generator=g, dtype=torch.float64)
    return c, -(b @ b.T)


C_J, C_ST = _data()


def _start(name: str) -> torch.Tensor:
    """The float64 start point of ``name``'s problem."""
    if name in J_OPTIMIZERS:
        return JOrthogonal(N_J, p=3).random(N_J, N_J, cond=30.0, dtype=torch.float64,
                                            generator=torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(1)
    return torch.linalg.qr(torch.randn(N_ST, R_ST, generator=g, dtype=torch.float64))[0]


def _manifold(name: str):
    return JOrthogonal(N_J, p=3) if name in J_OPTIMIZERS else geoopt.EuclideanStiefel()


def _param(name: str, dtype=torch.float64, x=None) -> geoopt.ManifoldParameter:
    x = _start(name) if x is None else x
    return geoopt.ManifoldParameter(x.to(dtype).clone(), manifold=_manifold(name))


def _optimizer(name: str, params, **options):
    """``name`` over ``params`` with seed 0 and the problem's data."""
    if name == "VRJJOBCD":
        sigma = 2.0 * float(torch.linalg.eigvalsh(C_J)[-1])
        return VRJJOBCD(params, num_components=4, seed=0, **{"sigma_rule": sigma, **options})
    if name == "ColumnJJacobi":
        return ColumnJJacobi(params, c=C_J, seed=0, **options)
    if name == "RSDM":
        return RSDM(params, seed=0, **{"r": R_ST, "lr": 0.05, **options})
    return {"GSJOBCD": GSJOBCD, "JJOBCD": JJOBCD, "OBCD": OBCD, "RSSM": RSSM,
            "CayleyLBFGS": CayleyLBFGS}[name](params, seed=0, **options)


def _loss(name: str, x: torch.Tensor) -> torch.Tensor:
    c = (C_J if name in J_OPTIMIZERS else C_ST).to(x.dtype)
    return torch.trace(x.mT @ c @ x)


def _closure(name, opt, x):
    def closure(*_):
        opt.zero_grad()
        loss = _loss(name, x)
        loss.backward()
        return loss
    return closure


def _run(name: str, dtype, steps: int, **options):
    x = _param(name, dtype)
    opt = _optimizer(name, [x], **options)
    closure = _closure(name, opt, x)
    for _ in range(steps):
        opt.step(closure)
    return x, opt


def _relative_violation(x: torch.Tensor) -> float:
    geometry = getattr(x.manifold, "geometry", None)
    if geometry is None:
        geometry = StiefelGeometry(*x.shape[-2:])
    return float(geometry.relative_violation(x.detach()).max())


# ---- float32 -------------------------------------------------------------------------------

def test_sigma_rules_recognise_rounding():
    """A trial whose predicted decrease is below the float32 rounding of f, with f unchanged
    up to that rounding, is accepted without touching σ; with the float64 level (main's
    constant for every dtype) it is rejected and σ doubles: the float32 stall."""
    f0, predicted = 36.87, -1e-9
    f1 = f0 * (1 + 2 * torch.finfo(torch.float32).eps)  # one rounding step above f0
    for rule_class in (SigmaBacktracking, SigmaFit):
        rule = rule_class(32.0, rtol=cost_rounding(torch.float32))
        assert rule.accepts(f0, f1, predicted) and rule.sigma <= 32.0
        strict = rule_class(32.0, rtol=cost_rounding(torch.float64))
        assert not strict.accepts(f0, f1, predicted) and strict.sigma > 32.0
    # a real increase is still a rejection in float32
    rule = SigmaBacktracking(32.0, rtol=cost_rounding(torch.float32))
    assert not rule.accepts(f0, f0 * (1 + 1e-3), predicted) and rule.sigma == 64.0


def test_feasibility_tol_rule():
    """``max(√ε, 64·n·ε)``: a feasible float64 point rounded to float32 passes every check."""
    eps32, eps64 = torch.finfo(torch.float32).eps, torch.finfo(torch.float64).eps
    assert feasibility_tol(torch.float64, 10) == pytest.approx(eps64 ** 0.5)
    assert feasibility_tol(torch.float32, 1000) == pytest.approx(64 * 1000 * eps32)
    with pytest.raises(TypeError, match="floating-point"):
        feasibility_tol(torch.int64, 3)
    x = _start("GSJOBCD").to(torch.float32)
    JOrthogonal(N_J, p=3).geometry.check_point(x)


# ---- lr and schedulers ---------------------------------------------------------------------

@pytest.mark.parametrize("name", ALL)
def test_every_group_has_lr_and_lambda_zero_freezes(name):
    """``LambdaLR(opt, lambda e: 0.0)`` sets lr = 0 at once: the parameter does not move."""
    x = _param(name)
    opt = _optimizer(name, [x])
    assert all(isinstance(group["lr"], float) for group in opt.param_groups)
    torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.0)
    x0 = x.detach().clone()
    closure = _closure(name, opt, x)
    for _ in range(3):
        opt.step(closure)
    assert torch.equal(x.detach(), x0)


@pytest.mark.parametrize("name", [n for n in ALL if n != "ColumnJJacobi"])
def test_step_lr_halving_shortens_the_next_step(name):
    """Two runs equal for one step; ``StepLR(gamma=0.5)`` then halves lr, and the second step
    of that run is shorter than the unscheduled run's (the σ methods, with a fixed σ:
    σ_eff = 2σ; an adaptive σ rule would refit σ_eff to the curvature)."""
    fixed = {"sigma_rule": 2.0 * float(torch.linalg.eigvalsh(C_J)[-1])} \
        if name in ("GSJOBCD", "JJOBCD") else {}
    runs = []
    for scheduled in (False, True):
        x = _param(name)
        opt = _optimizer(name, [x], **fixed)
        scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        closure = _closure(name, opt, x)
        opt.step(closure)
        if scheduled:
            scheduler.step()
        x1 = x.detach().clone()
        opt.step(closure)
        runs.append((x1, x.detach() - x1, opt.param_groups[0]["lr"]))
    (a1, da, lr_a), (b1, db, lr_b) = runs
    assert torch.equal(a1, b1) and lr_b == 0.5 * lr_a
    assert 0 < float(db.norm()) < float(da.norm())


def test_column_jjacobi_lr_only_switches_the_sweep():
    """ColumnJJacobi's pair steps are exact minimisers: any lr > 0 gives the same sweep."""
    ends = []
    for lr in (1.0, 0.5):
        x = _param("ColumnJJacobi")
        opt = _optimizer("ColumnJJacobi", [x], lr=lr)
        opt.step()
        ends.append(x.detach().clone())
    assert torch.equal(*ends)


def test_rsdm_line_search_group_has_a_numeric_lr():
    """``RSDM(lr=None)``: the polar step on the closure's loss, the group's lr a factor 1.0 (so
    LambdaLR works) with ``line_search="polar"``."""
    x = _param("RSDM")
    opt = RSDM([x], r=R_ST, seed=0)
    assert opt.param_groups[0]["lr"] == 1.0 and opt.param_groups[0]["line_search"].name == "polar"
    torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.0)
    x0 = x.detach().clone()
    opt.step(_closure("RSDM", opt, x))
    assert torch.equal(x.detach(), x0)


def test_rssm_reads_lr_at_every_step():
    """RSSM with a constant rule: ``lr`` multiplies the rule's step, so after lr is halved the
    step γ is halved (the block update's length ``γ·‖ξ_C‖`` for small γ is nearly linear in
    γ)."""
    x = _param("RSSM")
    opt = RSSM([x], lr=Constant(1e-3), seed=0)
    x_ref = _param("RSSM")
    ref = RSSM([x_ref], lr=Constant(1e-3), seed=0)
    for o, p in ((opt, x), (ref, x_ref)):
        o.step(_closure("RSSM", o, p))
    assert opt.param_groups[0]["lr"] == 1.0  # a rule object: lr is its factor
    opt.param_groups[0]["lr"] = 0.5
    d = [p.detach().clone() for p in (x, x_ref)]
    for o, p in ((opt, x), (ref, x_ref)):
        o.step(_closure("RSSM", o, p))
    ratio = float((x.detach() - d[0]).norm() / (x_ref.detach() - d[1]).norm())
    assert ratio == pytest.approx(0.5, rel=1e-2)


# ---- start checks ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("offset", [1e-6, 0.4])
def test_infeasible_start_is_named(name, offset):
    """A start 1e-6 or 0.4 off the manifold: ValueError at the first step naming the violation;
    the parameter is untouched."""
    x0 = _start(name)
    x0[0, 0] += offset
    x = _param(name, x=x0)
    opt = _optimizer(name, [x])
    with pytest.raises(ValueError, match="infeasible.*= [0-9.]+e[-+][0-9]+ >"):
        opt.step(_closure(name, opt, x))
    assert torch.equal(x.detach(), x0)


def quadratic_problem(manifold, c: np.ndarray) -> pymanopt.Problem:
    """The pymanopt problem ``tr(XᵀCX)`` on ``manifold`` (cost and Euclidean gradient)."""

    @pymanopt.function.numpy(manifold)
    def cost(x):
        return np.trace(x.T @ c @ x)

    @pymanopt.function.numpy(manifold)
    def grad(x):
        return 2 * c @ x

    return pymanopt.Problem(manifold, cost, euclidean_gradient=grad)


def test_float32_starts_in_the_pymanopt_doors():
    """A feasible float64 point rounded to float32 starts every pymanopt door of the
    J-manifold and Stiefel optimizers (checked at float32 precision, then restored to float64
    feasibility); a float32 point 1e-2 off is refused with the violation."""
    problem = quadratic_problem(pm.JOrthogonal(N_J, p=3), C_J.numpy())
    x64 = _start("GSJOBCD").numpy()
    for door in (pm.GSJOBCD, pm.JJOBCD):
        result = door(max_iterations=3, seed=0).run(problem,
                                                    initial_point=x64.astype(np.float32))
        assert result.violation <= 1e-12
    bad = x64.astype(np.float32)
    bad[0, 0] += 1e-2
    with pytest.raises(ValueError, match="infeasible"):
        pm.GSJOBCD(max_iterations=3).run(problem, initial_point=bad)

    problem = quadratic_problem(pymanopt.manifolds.Stiefel(N_ST, R_ST), C_ST.numpy())
    start = _start("OBCD").numpy().astype(np.float32)
    for door, options in ((pm.OBCD, {}), (pm.RSDM, {"r": R_ST}), (pm.RSSM, {})):
        result = door(max_iterations=3, seed=0, **options).run(problem, initial_point=start)
        assert result.violation <= 1e-12


# ---- closures --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["GSJOBCD", "JJOBCD", "VRJJOBCD", "OBCD", "CayleyLBFGS"])
def test_closure_required(name):
    x = _param(name)
    opt = _optimizer(name, [x])
    with pytest.raises(ValueError, match="needs a closure"):
        opt.step()


@pytest.mark.parametrize("name", ALL)
def test_closure_without_backward(name):
    """A closure that computes the loss but never calls backward: ValueError, no move."""
    x = _param(name)
    opt = _optimizer(name, [x])
    x0 = x.detach().clone()

    def closure(*_):
        opt.zero_grad()
        return _loss(name, x)

    with pytest.raises(ValueError, match="backward"):
        opt.step(closure)
    assert torch.equal(x.detach(), x0)


def test_vrjjobcd_parameter_without_gradient():
    """A parameter that takes no part in the loss: ValueError naming it (not a KeyError)."""
    x, idle = _param("VRJJOBCD"), _param("VRJJOBCD")
    opt = _optimizer("VRJJOBCD", [x, idle])
    with pytest.raises(ValueError, match="parameter 1 of group 0 .* no gradient"):
        opt.step(_closure("VRJJOBCD", opt, x))


# ---- parameter groups ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["GSJOBCD", "JJOBCD", "ColumnJJacobi", "CayleyLBFGS", "OBCD",
                                  "RSSM"])
def test_euclidean_parameters_refused_with_advice(name):
    x = _param(name)
    plain = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(ValueError, match="their own optimizer"):
        _optimizer(name, [x, plain])
    opt = _optimizer(name, [x])
    with pytest.raises(ValueError, match="their own optimizer"):
        opt.add_param_group({"params": [plain]})
    assert len(opt.param_groups) == 1


@pytest.mark.parametrize("name", ALL)
def test_add_param_group_validated_like_the_constructor(name):
    x, y = _param(name), _param(name)
    opt = _optimizer(name, [x])
    for bad in (-1.0, float("nan"), "fast"):
        with pytest.raises((ValueError, TypeError), match="lr must be"):
            opt.add_param_group({"params": [y], "lr": bad})
    with pytest.raises(ValueError, match="stabilize"):
        opt.add_param_group({"params": [y], "stabilize": 0})
    assert len(opt.param_groups) == 1
    opt.add_param_group({"params": [y], "lr": 0.0})  # a frozen group
    y0 = y.detach().clone()

    def closure(*_):
        opt.zero_grad()
        loss = _loss(name, x) + _loss(name, y)
        loss.backward()
        return loss

    x0 = x.detach().clone()
    opt.step(closure)
    assert torch.equal(y.detach(), y0) and not torch.equal(x.detach(), x0)


#: a per-group option of each optimizer and a value that changes its iterates
GROUP_OPTION = {"GSJOBCD": ("theta", 10.0), "JJOBCD": ("theta", 10.0),
                "VRJJOBCD": ("theta", 10.0), "ColumnJJacobi": ("stabilize", 1),
                "OBCD": ("theta", 1.0), "RSDM": ("r", 2),
                "RSSM": ("project_step", False), "CayleyLBFGS": ("lr", 0.5)}


def _three_steps(name, params_or_groups, x, **options):
    opt = _optimizer(name, params_or_groups, **options)
    closure = _closure(name, opt, x)
    for _ in range(3):
        opt.step(closure)
    return x.detach().clone()


@pytest.mark.parametrize("name", ALL)
def test_group_options_override_the_defaults(name):
    """torch's convention: an option in a group dict overrides the constructor's value for that
    group: the iterates equal those of the option given to the constructor, and differ from the
    defaults' (except ``stabilize``, a projection at rounding level)."""
    option, value = GROUP_OPTION[name]
    x = _param(name)
    in_group = _three_steps(name, [{"params": [x], option: value}], x)
    x = _param(name)
    in_constructor = _three_steps(name, [x], x, **{option: value})
    x = _param(name)
    default = _three_steps(name, [x], x)
    assert torch.equal(in_group, in_constructor)
    if option != "stabilize":
        assert not torch.equal(in_group, default)


@pytest.mark.parametrize("name", ALL)
def test_unknown_group_keys_are_named(name):
    """A group key that is no per-group option is refused, naming the class and the key; an
    optimizer-wide option (``seed``) is named as one for the constructor; nothing is added."""
    x, y = _param(name), _param(name)
    cls = type(_optimizer(name, [x])).__name__
    with pytest.raises(ValueError, match=rf"unknown option 'bogus' in a parameter group of {cls}"):
        _optimizer(name, [{"params": [y], "bogus": 1}])
    opt = _optimizer(name, [x])
    with pytest.raises(ValueError, match=rf"'seed' is an optimizer-wide option of {cls}"):
        opt.add_param_group({"params": [y], "seed": 3})
    assert len(opt.param_groups) == 1


@pytest.mark.parametrize("name", ALL)
def test_stabilize_projects_every_k_steps(name):
    """``stabilize=2``: after steps 2 and 4 the parameter is its own ``projx``; a parameter
    drifted by round-off (2e-9, inside the start tolerance) comes back to rounding."""
    x0 = _start(name)
    x0 = x0 * (1 + 2e-9)
    x = _param(name, x=x0)
    opt = _optimizer(name, [x], stabilize=2)
    closure = _closure(name, opt, x)
    opt.step(closure)
    opt.step(closure)
    assert _relative_violation(x) <= 1e-14


# ---- projx -----------------------------------------------------------------------------------

@pytest.mark.parametrize("manifold", [JOrthogonal(6, p=2), IndefiniteStiefel(6, 3, p=3, k_plus=2)])
def test_projx_restores_near_points_and_refuses_far_ones(manifold):
    x = manifold.random(*manifold.geometry.shape, cond=30.0, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    near = x + 1e-3 * torch.randn(x.shape, generator=g, dtype=x.dtype) / x.norm()
    assert float(manifold.geometry.relative_violation(manifold.projx(near))) <= 1e-15
    far = x + 0.5 * torch.randn(x.shape, generator=g, dtype=x.dtype)
    with pytest.raises(InfeasiblePointError, match="projx restores points"):
        manifold.projx(far)


# ---- device dispatch (the rule itself: tests/kernels/test_dispatch.py) ------------------------

@pytest.mark.parametrize("options", [{}, {"matchings": 3}])
def test_torch_path_equals_compiled_path(monkeypatch, options):
    """J-JOBCD's torch path (any device; here forced on the CPU) takes the iterates of the
    compiled one: the same draws, the same pairs, rounding apart."""
    from orthoplug.solvers import jobcd_steps

    ends = []
    for compiled in (True, False):
        monkeypatch.setattr(jobcd_steps, "runs_compiled", lambda x, c=compiled: c)
        x, _ = _run("JJOBCD", torch.float64, 20, **options)
        ends.append(x.detach().clone())
    torch.testing.assert_close(ends[1], ends[0], rtol=1e-10, atol=1e-10)
    assert _relative_violation(x) <= 1e-14
