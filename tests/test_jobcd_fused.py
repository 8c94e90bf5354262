"""J-JOBCD's fused step check (issue #17): ``value_and_gradient`` at the trial point, its
gradient kept on acceptance, honest gradient counts and NaN handling."""

from __future__ import annotations

import math

import pytest
import torch

from orthoplug.geometry.manifolds import JOrthogonalGeometry
from orthoplug.oracles import FunctionOracle
from orthoplug.problems.hspp import HSPP, make_hspp_data
from orthoplug.solvers.jobcd import JJOBCD


class Counted:
    """Wraps a callable and counts its calls."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args):
        self.calls += 1
        return self.fn(*args)


def hspp_oracle(fused: bool, m: int = 24, n: int = 6):
    """HSPP's finite-sum oracle with counted callables; ``fused=False`` switches the fused
    ability off (the same numbers, separate value and gradient calls)."""
    prob = HSPP(make_hspp_data(m, n, source="digits", seed=3), n // 2)
    oracle = prob.oracle()
    calls = {"value": Counted(oracle._cv), "gradient": Counted(oracle._cg),
             "fused": Counted(oracle._cvg)}
    oracle._cv, oracle._cg, oracle._cvg = calls["value"], calls["gradient"], calls["fused"]
    oracle.fused_value_gradient = fused
    return prob, oracle, calls


def start(n: int, seed: int = 0):
    geo = JOrthogonalGeometry(n, n // 2)
    return geo, geo.random_point(cond=5.0, generator=torch.Generator().manual_seed(seed))


def test_hspp_fused_value_and_gradient_equal_the_separate_calls_bitwise():
    prob, oracle, _ = hspp_oracle(True)
    _, x = start(prob.n)
    value, grad = oracle.value_and_gradient(x)
    assert oracle.fused_value_gradient
    assert torch.equal(value, prob.value(x)) and torch.equal(grad, prob.gradient(x))
    idx = torch.tensor([0, 5, 7])
    v_idx, g_idx = prob.component_value_and_gradient(x, idx)
    assert torch.equal(v_idx, prob.component_value(x, idx))
    assert torch.equal(g_idx, prob.component_gradient(x, idx))
    # still differentiable (double backward) when X requires grad
    xr = x.clone().requires_grad_(True)
    v_r, g_r = prob.component_value_and_gradient(xr, idx)
    assert g_r.requires_grad and torch.allclose(v_r.detach(), v_idx)


def test_fused_check_keeps_the_iterates_and_counts_every_gradient_it_computes():
    results, calls = {}, {}
    for fused in (False, True):
        prob, oracle, calls[fused] = hspp_oracle(fused)
        geo, x0 = start(prob.n)
        # (one matching per gradient: there the fused check fires often enough to be seen)
        results[fused] = JJOBCD(max_iterations=40, seed=1, matchings=1).run(oracle, x0, geo)
    plain, fused = results[False], results[True]
    assert torch.equal(plain.point, fused.point)
    assert plain.history["cost"] == fused.history["cost"]
    assert plain.info["backtracks"] == fused.info["backtracks"] > 0  # rejections happened
    # every gradient the oracle computed is counted, no more (the estimate_bb secant included)
    for run, c in ((plain, calls[False]), (fused, calls[True])):
        assert run.gradient_evaluations == c["gradient"].calls + c["fused"].calls
    assert calls[False]["fused"].calls == 0
    assert calls[True]["fused"].calls > 0
    # accepted fused checks hand their gradient over: fewer separate gradients and values
    assert calls[True]["gradient"].calls < calls[False]["gradient"].calls
    assert calls[True]["value"].calls < calls[False]["value"].calls
    # each trial is one value or one fused call in both runs
    assert (calls[True]["value"].calls + calls[True]["fused"].calls
            == calls[False]["value"].calls)


def quartic(n: int):
    """A smooth non-quadratic cost ``tr(XᵀCX) + 0.05 Σ X⁴`` and its gradient."""
    gen = torch.Generator().manual_seed(7)
    a = torch.randn(n, n, dtype=torch.float64, generator=gen)
    c = (a + a.T) / 2

    def value(x):
        return (x * (c @ x)).sum() + 0.05 * (x ** 4).sum()

    def gradient(x):
        return 2 * c @ x + 0.2 * x ** 3

    return value, gradient


def test_function_oracle_fused_runs_like_the_plain_one():
    value, gradient = quartic(6)
    fused_calls = Counted(lambda x: (value(x), gradient(x)))
    grad_calls = {False: Counted(gradient), True: Counted(gradient)}
    geo, x0 = start(6, seed=2)
    plain = JJOBCD(max_iterations=30, seed=0).run(FunctionOracle(value, grad_calls[False]),
                                                  x0, geo)
    oracle = FunctionOracle(value, grad_calls[True], value_and_gradient=fused_calls)
    assert oracle.fused_value_gradient and not FunctionOracle(value, gradient).fused_value_gradient
    fused = JJOBCD(max_iterations=30, seed=0).run(oracle, x0, geo)
    assert torch.equal(plain.point, fused.point) and plain.cost == fused.cost
    assert fused_calls.calls > 0
    assert fused.gradient_evaluations == grad_calls[True].calls + fused_calls.calls
    assert plain.gradient_evaluations == grad_calls[False].calls
    assert grad_calls[True].calls < grad_calls[False].calls  # gradients handed over


def test_nan_in_the_fused_call_stops_and_keeps_the_last_good_point():
    value, gradient = quartic(6)
    geo, x0 = start(6, seed=2)
    good = 5  # fused calls that return finite numbers

    def value_and_gradient(x):
        calls.calls += 1
        if calls.calls > good:
            return torch.tensor(math.nan, dtype=x.dtype), torch.full_like(x, math.nan)
        return value(x), gradient(x)

    calls = Counted(None)
    oracle = FunctionOracle(value, gradient, value_and_gradient=value_and_gradient)
    result = JJOBCD(max_iterations=200, seed=0).run(oracle, x0, geo)
    assert "stopped on non-finite cost" in result.stop_reason
    assert result.iterations < 200 and math.isfinite(result.cost)
    # the returned point is the iterate of a clean run after the same number of iterations
    ref = JJOBCD(max_iterations=result.iterations, seed=0).run(
        FunctionOracle(value, gradient), x0, geo)
    assert torch.equal(result.point, ref.point)
    assert result.cost == pytest.approx(float(value(result.point)), rel=1e-14)


def test_sigma_fit_is_optimistic_after_an_acceptance_and_tracks_acceptance_rates():
    """σ after an accepted step is the fitted curvature divided by the boldness (halved
    after a rejected optimistic trial, doubled up to ``optimism`` after an accepted one);
    the running acceptance rates are kept per previous outcome."""
    from orthoplug.solvers.steps import SigmaFit

    g2, f0 = 3.0, 1.0

    def trial(sigma, curvature):  # model minimiser -g/σ of g·t + σ t²/2 on a quadratic
        return f0 - g2 / sigma + curvature * g2 / (2 * sigma ** 2), -g2 / (2 * sigma)

    rule = SigmaFit(4.0, optimism=8.0)
    assert rule.likely_accepted() is False  # no evidence yet (rates start at 0.5)
    assert rule.accepts(f0, *trial(4.0, 4.0))  # ρ = 1: fit L = 4, then 4 / 8
    assert rule.sigma == pytest.approx(0.5, rel=1e-12)
    assert not rule.accepts(f0, *trial(0.5, 4.0))  # ρ = 2 − 8 = −6: σ·8 = L
    assert rule.sigma == pytest.approx(4.0, rel=1e-12) and rule.boldness == 4.0
    assert rule.accepts(f0, *trial(4.0, 4.0))  # ρ = 1 after a rejection: L / 4
    assert rule.sigma == pytest.approx(1.0, rel=1e-12) and rule.boldness == 4.0
    # after an acceptance (a run starts so): accepted 0.5 → 0.55, rejected → 0.495;
    # after a rejection: accepted 0.5 → 0.55
    assert rule.acceptance == pytest.approx([0.55, 0.495])
    for _ in range(30):  # accepted trials only: the rate after an acceptance → 1
        assert rule.accepts(f0, *trial(rule.sigma, 0.0))
    assert rule.acceptance[1] > 0.9 and rule.likely_accepted() and rule.boldness == 8.0
    copy = SigmaFit(1.0)  # the torch optimizers keep the rule in their state
    copy.load_state_dict(rule.state_dict())
    assert copy.state_dict() == rule.state_dict() and copy.likely_accepted()
    with pytest.raises(ValueError, match="optimism must be >= 1"):
        SigmaFit(1.0, optimism=0.5)
