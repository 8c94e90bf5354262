"""float32 acceptance of every geoopt optimizer (the registry's geoopt front-end and
``ColumnJJacobi``): 500 float32 steps on the test problems of :mod:`test_torch_conventions`
(``tr(XᵀCX)`` over O(3, 3), ``−tr(XᵀAX)`` over St(8, 3)) reach the float64 run's loss within 1e-3
(relative) and stay feasible to 1e-5 (relative violation); the float64 run stays feasible to
1e-12. Both runs start from the same float64 point (rounded to float32 for the float32 run).
The same for the batched torch 2×2 path of GS-JOBCD and J-JOBCD (the path of tensors off the
CPU, forced here), which must not freeze above the float32 rounding of the loss.
"""

from __future__ import annotations

import geoopt
import pytest
import torch
from test_torch_conventions import (
    ALL,
    N_J,
    R_ST,
    _closure,
    _loss,
    _manifold,
    _optimizer,
    _param,
    _relative_violation,
    _run,
)

from orthoplug import registry
from orthoplug.adapters.geoopt import OBCD, RSDM
from orthoplug.solvers import jobcd_steps
from orthoplug.subproblems import jorth2

GEOOPT = sorted(set(registry.names("solver", "geoopt")) | {"ColumnJJacobi"})
STEPS = 500


def test_every_geoopt_optimizer_is_walked():
    assert set(GEOOPT) == set(ALL)


@pytest.mark.parametrize("name", GEOOPT)
def test_float32_reaches_the_float64_loss(name):
    x64, _ = _run(name, torch.float64, STEPS)
    x32, _ = _run(name, torch.float32, STEPS)
    f64 = float(_loss(name, x64.detach()))
    f32 = float(_loss(name, x32.detach().double()))
    assert abs(f32 - f64) <= 1e-3 * abs(f64), (f32, f64)
    assert _relative_violation(x32) <= 1e-5
    assert _relative_violation(x64) <= 1e-12


@pytest.mark.parametrize("name", ["GSJOBCD", "JJOBCD"])
def test_torch_pair_path_float32_is_not_frozen(monkeypatch, name):
    """The torch 2×2 steps (dispatch rule patched to "not compiled") in float32, start condition
    number 10: 500 steps reach the float64 run's loss within 1e-3 (the acceptance) and within
    2e-6 (16 ε₃₂); a margin of 8ε·|F| froze both runs near the optimum, 4e-6 and 2e-5 above it."""
    for module in (jobcd_steps, jorth2):
        monkeypatch.setattr(module, "runs_compiled", lambda x: False)
    x0 = _manifold(name).random(N_J, N_J, cond=10.0, dtype=torch.float64,
                                generator=torch.Generator().manual_seed(1))
    losses = []
    for dtype in (torch.float64, torch.float32):
        x = geoopt.ManifoldParameter(x0.to(dtype).clone(), manifold=_manifold(name))
        opt = _optimizer(name, [x])
        closure = _closure(name, opt, x)
        for _ in range(STEPS):
            opt.step(closure)
        losses.append(float(_loss(name, x.detach().double())))
        assert _relative_violation(x) <= (1e-5 if dtype == torch.float32 else 1e-12)
    f64, f32 = losses
    assert abs(f32 - f64) <= 1e-3 * abs(f64)
    assert abs(f32 - f64) <= 2e-6 * abs(f64), (f32, f64)


@pytest.mark.parametrize("name", ["OBCD", "RSDM"])
def test_default_stabilize_bounds_the_float32_drift(name):
    """2000 float32 steps on St(20, 5) with the default ``stabilize`` (1000): the violation,
    measured after every step, never exceeds 100 ε₃₂ (the random walk of 1000 steps' rounding,
    ≈ a·ε·√1000 with a ≤ 2.5, plus the start's rounding), and after steps 1000 and 2000 it is
    back at the rounding of one projection (≤ 2e-6). Without projections OBCD is at 6.8e-6 after
    1000 steps and 8.8e-5 after 10⁵ (``docs/results/float32.md``)."""
    g = torch.Generator().manual_seed(0)
    b = torch.randn(20, 20, generator=g, dtype=torch.float64)
    c = (-(b @ b.T)).float()
    x0 = torch.linalg.qr(torch.randn(20, 5, generator=g, dtype=torch.float64))[0]
    x = geoopt.ManifoldParameter(x0.float(), manifold=geoopt.EuclideanStiefel())
    opt = OBCD([x], seed=0) if name == "OBCD" else RSDM([x], lr=0.05, r=5, seed=0)

    def closure():
        opt.zero_grad()
        loss = torch.trace(x.mT @ c @ x)
        loss.backward()
        return loss

    worst = 0.0
    for k in range(1, 2001):
        opt.step(closure)
        violation = _relative_violation(x)
        worst = max(worst, violation)
        if k % 1000 == 0:
            assert violation <= 2e-6, (k, violation)
    assert worst <= 100 * torch.finfo(torch.float32).eps, worst


@pytest.mark.parametrize("line_search", [None, "armijo"])
def test_rsdm_line_search_float32(line_search):
    """The geoopt RSDM's step without ``lr`` (the default: the polar step at r = p = 3; and
    Armijo) in float32: the losses the steps return never increase (each accepted trial's loss
    is at most the majorisation / Armijo bound below the step's start loss, compared in
    float32), 500 steps reach the float64 run's loss within 1e-3 and stay feasible to 1e-5, and
    both dtypes take the rule asked for."""
    losses = {}
    for dtype in (torch.float64, torch.float32):
        x = _param("RSDM", dtype)
        opt = RSDM([x], r=R_ST, seed=0, line_search=line_search)
        assert opt.param_groups[0]["line_search"].name == (line_search or "polar")
        closure = _closure("RSDM", opt, x)
        trace = [float(closure().detach())]
        for _ in range(STEPS):
            trace.append(float(opt.step(closure).detach()))
        assert all(b <= a for a, b in zip(trace, trace[1:], strict=False)), dtype
        assert trace[-1] < trace[0] - 1.0
        assert _relative_violation(x) <= (1e-5 if dtype == torch.float32 else 1e-12)
        losses[dtype] = float(_loss("RSDM", x.detach().double()))
    f64, f32 = losses[torch.float64], losses[torch.float32]
    assert abs(f32 - f64) <= 1e-3 * abs(f64), (f32, f64)
