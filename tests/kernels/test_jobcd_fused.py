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
from orthoplug.solvers.sigma_rules import SigmaFit


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
    from orthoplug.solvers.sigma_rules import SigmaFit

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


def test_sigma_fit_keeps_its_boldness_after_a_mild_optimistic_failure():
    """An optimistic trial (the one after an acceptance) rejected with ``ρ > 2 − boldness/2``
    failed by less than a quadratic with the fitted curvature predicts for a step ``boldness``
    times longer (``ρ = 2 − boldness``): the boldness stays. A failure the optimism explains,
    a non-finite trial value, and a trial that predicts no decrease halve it."""
    from orthoplug.solvers.sigma_rules import SigmaFit

    def optimistic(rule, f1, predicted=-1.0):
        assert rule.accepts(1.0, 1.0 - 0.9, -1.0)  # an accepted step: the next one is bold
        bold = rule.boldness
        assert not rule.accepts(1.0, f1, predicted)
        return bold, rule.boldness

    assert optimistic(SigmaFit(1.0), 1.3) == (8.0, 8.0)  # ρ = −0.3 > 2 − 8/2 = −2: kept
    assert optimistic(SigmaFit(1.0), 1.0 + 2.5) == (8.0, 4.0)  # ρ = −2.5 ≤ −2: halved
    rule = SigmaFit(1.0)
    assert optimistic(rule, 1.3) == (8.0, 8.0)
    assert optimistic(rule, 1.0 + 1.9) == (8.0, 8.0)  # kept again (ρ = −1.9)
    assert optimistic(SigmaFit(1.0, optimism=4.0), 1.0 + 1e-5) == (4.0, 2.0)  # bound ρ ≤ 0
    assert optimistic(SigmaFit(1.0), math.inf) == (8.0, 4.0)
    assert optimistic(SigmaFit(1.0), 1.1, predicted=0.0) == (8.0, 4.0)
    # σ is refitted as before: the mild failure's σ·(2 − ρ) with the rejection's clip [2, 10]
    rule = SigmaFit(1.0)
    assert rule.accepts(1.0, 0.1, -1.0)  # ρ = 0.9: σ·1.1 → grid 2^(1/4)·… / 8
    sigma = rule.sigma
    assert not rule.accepts(1.0, 1.3, -1.0)
    assert rule.sigma == pytest.approx(sigma * 2.0 ** (round(4 * math.log2(2.3)) / 4))


def _hspp_case(n: int = 6, m: int = 24):
    prob = HSPP(make_hspp_data(m, n, source="gaussian", seed=4), n // 2)
    geo, x0 = start(n, seed=5)
    return prob, geo, x0


def _record_boldness(monkeypatch):
    """Record ``(accepted, ρ, boldness before, after)`` of every optimistic trial."""
    from orthoplug.solvers.sigma_rules import SigmaFit

    seen, original = [], SigmaFit._observe

    def observe(self, accepted, rho=-math.inf):
        before, optimistic = self.boldness, self._last
        original(self, accepted, rho)
        if optimistic:
            seen.append((accepted, rho, before, self.boldness))

    monkeypatch.setattr(SigmaFit, "_observe", observe)
    return seen


def test_j_jobcd_on_hspp_is_monotone_at_every_evaluation_with_mild_failures(monkeypatch):
    seen = _record_boldness(monkeypatch)
    prob, geo, x0 = _hspp_case()
    result = JJOBCD(max_iterations=60, eval_every=1, seed=2).run(prob.oracle(), x0, geo)
    assert result.iterations == 60
    costs = result.history["cost"]
    assert all(b <= a for a, b in zip(costs, costs[1:], strict=False))
    assert costs[-1] < costs[0] - 1e-3
    # the rule kept its boldness after some rejected optimistic trials and halved it after others
    kept = [s for s in seen if not s[0] and s[3] == s[2] > 1.0]
    halved = [s for s in seen if not s[0] and s[3] < s[2]]
    assert kept and all(rho > 2.0 - bold / 2.0 for _, rho, bold, _ in kept)
    assert all(rho <= 2.0 - bold / 2.0 for _, rho, bold, _ in halved)


def test_j_jobcd_front_ends_take_the_same_steps_on_hspp(monkeypatch):
    """Core J-JOBCD (the pymanopt front-end runs it) and geoopt's JJOBCD optimizer on HSPP, a
    cost where rejected optimistic trials are mild: equal iterates and σ decisions."""
    import geoopt

    from orthoplug.adapters import geoopt as go

    seen = _record_boldness(monkeypatch)
    prob, geo, x0 = _hspp_case()

    def gradient(x):
        xr = x.detach().clone().requires_grad_(True)
        (g,) = torch.autograd.grad(prob.value(xr), xr)
        return g

    steps, options = 40, dict(sigma_rule=SigmaFit(1.0), matchings="all")
    res = JJOBCD(max_iterations=steps, eval_every=steps, seed=3, **options).run(
        FunctionOracle(prob.value, gradient), x0, geo)
    assert any(not s[0] and s[3] == s[2] > 1.0 for s in seen)  # a mild failure kept it
    x = geoopt.ManifoldParameter(x0.clone(), manifold=go.JOrthogonal(prob.n, prob.n // 2))
    opt = go.JJOBCD([x], seed=3, **options)

    def closure():
        opt.zero_grad()
        loss = prob.value(x)
        loss.backward()
        return loss

    for _ in range(steps):
        opt.step(closure)
    torch.testing.assert_close(res.point, x.detach(), rtol=0, atol=1e-10)
    assert res.info["backtracks"] == opt.state[x]["backtracks"] > 0
    assert res.info["final_sigma"] == pytest.approx(opt.state[x]["sigma"], rel=1e-12)
