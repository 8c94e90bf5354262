"""The geoopt ``CayleyLBFGS``: the same iterates as the pymanopt door, one closure call per step
after the first, one memory for a product of parameters, an exact ``state_dict`` resume, and the
rules for non-finite trials and gradients and for the parameters it refuses."""

from __future__ import annotations

import io

import geoopt
import numpy as np
import pytest
import torch

from orthoplug.adapters import geoopt as go
from orthoplug.adapters import pymanopt as pm
from orthoplug.problems.smooth_oj import smooth_oj_problem

N = 8


def _setup(family: str, p: int, seed: int = 0):
    """The smooth problem, its geoopt manifold and a start of condition 3."""
    prob = smooth_oj_problem(family, N, p, seed=seed)
    manifold = go.JOrthogonal(N, signature=prob.signature.tolist())
    x0 = manifold.geometry.random_point(cond=3.0, generator=torch.Generator().manual_seed(1))
    return prob, manifold, x0


def _closure(opt, params, cost, calls: list | None = None, spoil=None):
    """The summed loss of ``params``; each call's loss is appended to ``calls``, and
    ``spoil(k, loss)`` (after the backward of the k-th call, from 1) gives what it returns."""
    calls = [] if calls is None else calls

    def closure():
        opt.zero_grad()
        loss = sum(cost(x) for x in params)
        loss.backward()
        calls.append(float(loss.detach()))
        return loss if spoil is None else spoil(len(calls), loss)
    return closure


@pytest.mark.parametrize("family,p", [("logcosh", 4), ("lorentz", 1), ("quartic", 4)])
def test_steps_equal_the_pymanopt_iterations(family, p):
    """N geoopt steps from the pymanopt door's start, defaults on both sides: the same point to
    1e-10, one closure call per step plus one for the start, the point on O(J) to 1e-13."""
    prob, manifold, x0 = _setup(family, p)
    steps = 15  # below every family's convergence (the pymanopt run must not stop early)
    problem = prob.pymanopt_problem(pm.JOrthogonal(N, signature=prob.signature))
    res = pm.CayleyLBFGS(max_iterations=steps, min_gradient_norm=0.0).run(
        problem, initial_point=x0.numpy())
    assert res.iterations == steps
    x = geoopt.ManifoldParameter(x0.clone(), manifold=manifold)
    opt = go.CayleyLBFGS([x])
    calls: list = []
    closure = _closure(opt, [x], prob.torch_cost, calls)
    for _ in range(steps):
        opt.step(closure)
    np.testing.assert_allclose(x.detach().numpy(), np.asarray(res.point), rtol=0, atol=1e-10)
    info = opt.info()
    assert len(calls) == 1 + info["trials"] and info["stopped"] is None
    assert info["trials"] == res.solver_result.info["line_search_trials"]
    assert float(manifold.geometry.relative_violation(x.detach())) <= 1e-13


def test_a_batched_parameter_is_the_product_of_its_matrices():
    """One (2, n, n) parameter and two n×n parameters with the summed loss are the same point
    of O(J)²: one memory, one line search, the same iterates."""
    prob, manifold, x0 = _setup("logcosh", 4)
    x1 = manifold.geometry.random_point(cond=3.0, generator=torch.Generator().manual_seed(5))
    both = geoopt.ManifoldParameter(torch.stack([x0, x1]), manifold=manifold)
    pair = [geoopt.ManifoldParameter(x.clone(), manifold=manifold) for x in (x0, x1)]
    opt_b, opt_p = go.CayleyLBFGS([both]), go.CayleyLBFGS(pair)

    def batched():
        opt_b.zero_grad()
        loss = prob.torch_cost(both[0]) + prob.torch_cost(both[1])
        loss.backward()
        return loss

    cp = _closure(opt_p, pair, prob.torch_cost)
    for _ in range(10):
        opt_b.step(batched)
        opt_p.step(cp)
    torch.testing.assert_close(both.detach(), torch.stack([x.detach() for x in pair]),
                               rtol=0, atol=1e-12)
    assert opt_b.info()["pairs"] == opt_p.info()["pairs"] > 1


def test_state_dict_resume_is_exact():
    """Five steps, a save through torch.save / torch.load (weights only), five more: the resumed
    optimizer's iterates equal the uninterrupted one's bit for bit."""
    prob, manifold, x0 = _setup("lorentz", 1)
    x = geoopt.ManifoldParameter(x0.clone(), manifold=manifold)
    opt = go.CayleyLBFGS([x], memory=3)
    closure = _closure(opt, [x], prob.torch_cost)
    for _ in range(5):
        opt.step(closure)
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    y = geoopt.ManifoldParameter(x.detach().clone(), manifold=manifold)
    resumed = go.CayleyLBFGS([y], memory=3)
    buffer.seek(0)
    resumed.load_state_dict(torch.load(buffer))
    assert resumed.info()["pairs"] == 3
    other = _closure(resumed, [y], prob.torch_cost)
    for _ in range(5):
        opt.step(closure)
        resumed.step(other)
    assert torch.equal(x.detach(), y.detach())


def test_a_written_parameter_is_evaluated_again():
    """The accepted trial's gradient is reused only while no parameter was written: after
    ``x.copy_`` the next step calls the closure at the new point first."""
    prob, manifold, x0 = _setup("logcosh", 4)
    x = geoopt.ManifoldParameter(x0.clone(), manifold=manifold)
    opt = go.CayleyLBFGS([x])
    calls: list = []
    closure = _closure(opt, [x], prob.torch_cost, calls)
    opt.step(closure)
    opt.step(closure)
    before = len(calls)
    assert before == 1 + opt.info()["trials"]
    with torch.no_grad():
        x.copy_(x0)
    opt.step(closure)
    assert calls[before] == pytest.approx(float(prob.torch_cost(x0)), rel=1e-15)


def test_non_finite_trial_loss_is_a_rejection():
    """A first trial whose loss is inf is rejected (t shrinks by 10) and the step still moves,
    decreasing the loss."""
    prob, manifold, x0 = _setup("quartic", 4)
    x = geoopt.ManifoldParameter(x0.clone(), manifold=manifold)
    opt = go.CayleyLBFGS([x])
    closure = _closure(opt, [x], prob.torch_cost,
                       spoil=lambda k, loss: loss * float("inf") if k == 2 else loss)
    opt.step(closure)
    assert opt.info()["trials"] >= 2
    assert float(prob.torch_cost(x.detach())) < float(prob.torch_cost(x0))


def test_non_finite_gradient_at_the_accepted_trial_restores_the_start():
    prob, manifold, x0 = _setup("logcosh", 4)
    x = geoopt.ManifoldParameter(x0.clone(), manifold=manifold)
    opt = go.CayleyLBFGS([x])

    def spoil(k, loss):
        if k >= 2:  # every trial's gradient
            x.grad[0, 0] = float("nan")
        return loss

    closure = _closure(opt, [x], prob.torch_cost, spoil=spoil)
    with pytest.raises(FloatingPointError, match="non-finite gradient of parameter 0"):
        opt.step(closure)
    assert torch.equal(x.detach(), x0)


def test_lr_scales_the_step_and_zero_keeps_the_memory():
    """With lr = 1/2 the first step is half the default's (its first trial is accepted in
    both); steps with lr = 0 move nothing and keep the memory: the run continues as if they
    had not been taken."""
    prob, manifold, x0 = _setup("logcosh", 4)
    moves = []
    for lr in (1.0, 0.5):
        x = geoopt.ManifoldParameter(x0.clone(), manifold=manifold)
        opt = go.CayleyLBFGS([x], lr=lr)
        opt.step(_closure(opt, [x], prob.torch_cost))
        assert opt.info()["trials"] == 1
        moves.append(x.detach())
    # the algebra steps: C = X⁻¹X⁺ = cay(Ω), so Ω = 2(C − I)(C + I)⁻¹
    eye = torch.eye(N, dtype=x0.dtype)
    omegas = [2 * torch.linalg.solve(c + eye, c - eye, left=False)
              for c in (torch.linalg.solve(x0, m) for m in moves)]
    torch.testing.assert_close(omegas[1], 0.5 * omegas[0], rtol=1e-10, atol=1e-12)
    ends = []
    for frozen in (0, 2):  # steps with lr = 0 after the fourth
        x = geoopt.ManifoldParameter(x0.clone(), manifold=manifold)
        opt = go.CayleyLBFGS([x])
        closure = _closure(opt, [x], prob.torch_cost)
        for _ in range(4):
            opt.step(closure)
        at = x.detach().clone()
        opt.param_groups[0]["lr"] = 0.0
        for _ in range(frozen):
            opt.step(closure)
        assert torch.equal(x.detach(), at)
        opt.param_groups[0]["lr"] = 1.0
        opt.step(closure)
        ends.append(x.detach())
    assert torch.equal(*ends)


def test_refuses_other_manifolds_and_mixed_dtypes():
    stiefel = geoopt.ManifoldParameter(torch.eye(6, 3, dtype=torch.float64),
                                       manifold=go.IndefiniteStiefel(6, 3, p=3, k_plus=3))
    with pytest.raises(ValueError, match="indefinite Stiefel set use JJOBCD"):
        go.CayleyLBFGS([stiefel])
    plain = geoopt.ManifoldParameter(torch.eye(4, 2, dtype=torch.float64),
                                     manifold=geoopt.Stiefel())
    with pytest.raises(ValueError, match="own optimizer"):
        go.CayleyLBFGS([plain])
    manifold = go.JOrthogonal(4, p=2)
    x64 = geoopt.ManifoldParameter(manifold.origin(4, 4, dtype=torch.float64), manifold=manifold)
    x32 = geoopt.ManifoldParameter(manifold.origin(4, 4, dtype=torch.float32), manifold=manifold)
    with pytest.raises(ValueError, match="one dtype and device"):
        go.CayleyLBFGS([x64, x32])
