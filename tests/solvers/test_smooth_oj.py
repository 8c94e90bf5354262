"""Cayley L-BFGS on smooth non-quadratic costs over O(J): the compact L-BFGS direction against the
two-loop recursion and the secant equation, the algebra gradient against finite differences,
convergence to 1e-10 of TrustRegions' value (and of the closed-form optimum 0 of a noiseless
Lorentz fit) in an iteration budget, feasibility, monotonicity, and bad input."""

from __future__ import annotations

import numpy as np
import pymanopt
import pytest
import torch

from orthoplug import registry
from orthoplug.adapters import pymanopt as pm
from orthoplug.geometry import jorthogonal as jo
from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry, JOrthogonalGeometry
from orthoplug.oracles import FunctionOracle
from orthoplug.problems.smooth_oj import smooth_oj_problem
from orthoplug.solvers.lbfgs import CayleyLBFGS, LBFGSMemory


def _two_loop(a: torch.Tensor, s: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The textbook two-loop recursion (Nocedal and Wright, Algorithm 7.4)."""
    q = a.reshape(-1).clone()
    rho = 1.0 / (s * y).sum(1)
    alphas = []
    for i in reversed(range(len(s))):
        alphas.append(rho[i] * (s[i] @ q))
        q -= alphas[-1] * y[i]
    r = (s[-1] @ y[-1]) / (y[-1] @ y[-1]) * q
    for i, alpha in zip(range(len(s)), reversed(alphas), strict=True):
        r += s[i] * (alpha - rho[i] * (y[i] @ r))
    return r.reshape(a.shape)


@pytest.mark.parametrize("m", [1, 3, 7])
def test_compact_direction_is_the_two_loop_recursion_and_meets_the_secant_equation(m):
    """After 9 pairs, a memory of m holds the last m and its product is the two-loop recursion's
    on them; it maps the newest y to the newest s (the BFGS secant equation)."""
    gen = torch.Generator().manual_seed(m)
    s = torch.randn(9, 36, dtype=torch.float64, generator=gen)
    y = s + 0.3 * torch.randn(9, 36, dtype=torch.float64, generator=gen)
    assert bool(((s * y).sum(1) > 0).all())
    memory = LBFGSMemory(m)
    for si, yi in zip(s, y, strict=True):
        memory.add(si, yi)
    assert len(memory) == m
    a = torch.randn(6, 6, dtype=torch.float64, generator=gen)
    torch.testing.assert_close(memory.direction(a), _two_loop(a, s[-m:], y[-m:]), rtol=1e-12,
                               atol=1e-12)
    torch.testing.assert_close(memory.direction(y[-1]), s[-1], rtol=1e-10, atol=1e-10)
    memory.clear()
    assert len(memory) == 0


@pytest.mark.parametrize("p", [3, 1])
def test_algebra_gradient_is_the_derivative_along_the_cayley_curve(p):
    """``d/dt f(X cay(tΩ))|₀ = ⟨A, Ω⟩_F`` (central differences, h = 1e-5) for Ω ∈ o(J)."""
    prob = smooth_oj_problem("logcosh", 6, p, seed=2)
    geo = JOrthogonalGeometry(6, signature=prob.signature.tolist())
    gen = torch.Generator().manual_seed(0)
    x = geo.random_point(cond=3.0, generator=gen)
    om = jo.algebra(geo.j, x, geo.random_tangent(x, generator=gen))
    xr = x.clone().requires_grad_(True)
    prob.torch_cost(xr).backward()
    a = jo.algebra_gradient(geo.j, x, xr.grad)
    h = 1e-5
    fd = (prob.torch_cost(jo.cayley_step(x, h * om))
          - prob.torch_cost(jo.cayley_step(x, -h * om))) / (2 * h)
    assert abs(float(fd) - float((a * om).sum())) <= 1e-8 * max(1.0, abs(float(fd)))


CASES = [(family, p) for family in ("quartic", "logcosh") for p in (4, 1)]


@pytest.mark.parametrize("family,p", CASES)
def test_reaches_trust_regions_value_to_1e10_in_an_iteration_budget(family, p):
    """n = 8, both signatures (O(4, 4) and the Lorentz group O(1, 7)): from the same start as a
    long TrustRegions run, the default reaches TR's value to 1e-10 (relative) within 300
    iterations; the cost never increases and X stays on O(J) to 1e-13 (relative)."""
    prob = smooth_oj_problem(family, 8, p, seed=0)
    problem = prob.pymanopt_problem(pm.JOrthogonal(8, signature=prob.signature))
    geo = problem.manifold.geometry
    x0 = geo.random_point(cond=3.0, generator=torch.Generator().manual_seed(1)).numpy()
    ref = pymanopt.optimizers.TrustRegions(verbosity=0, max_iterations=500,
                                           min_gradient_norm=1e-12).run(problem,
                                                                        initial_point=x0).cost
    target = ref + 1e-10 * max(1.0, abs(ref))
    res = pm.CayleyLBFGS(max_iterations=300, min_gradient_norm=0.0, target_cost=target,
                         log_verbosity=1).run(problem, initial_point=x0).solver_result
    assert res.stop_reason.startswith("target cost"), res.stop_reason
    assert res.cost <= target
    costs = np.asarray(res.history["cost"])
    assert np.all(np.diff(costs) < 0)
    assert float(geo.relative_violation(res.point)) <= 1e-13
    assert max(res.history["violation"]) <= 1e-13


@pytest.mark.parametrize("p", [4, 1])
def test_noiseless_lorentz_fit_reaches_the_closed_form_optimum(p):
    """``‖XP − X★P‖²`` with P of full row rank: f★ = 0, attained only at X★. The default reaches
    f ≤ 1e-10 within 300 iterations and its point is X★ to 1e-4 (relative)."""
    prob = smooth_oj_problem("lorentz", 8, p, seed=3, noise=0.0)
    x_star = np.linalg.lstsq(prob.data["P"].T, prob.data["Q"].T, rcond=None)[0].T
    problem = prob.pymanopt_problem(pm.JOrthogonal(8, signature=prob.signature))
    geo = problem.manifold.geometry
    assert float(geo.relative_violation(torch.from_numpy(x_star))) <= 1e-12  # X★ ∈ O(J)
    x0 = geo.random_point(cond=3.0, generator=torch.Generator().manual_seed(2)).numpy()
    res = pm.CayleyLBFGS(max_iterations=300, min_gradient_norm=0.0,
                         target_cost=1e-10).run(problem, initial_point=x0).solver_result
    assert res.cost <= 1e-10, res.stop_reason
    assert np.linalg.norm(res.point.numpy() - x_star) <= 1e-4 * np.linalg.norm(x_star)
    assert float(geo.relative_violation(res.point)) <= 1e-13


def test_stops_when_rounding_hides_every_decrease():
    """Run without a budget or a gradient target, it stops by itself at the cost's rounding
    level (the line search finds no trial with f(X⁺) < f(X)), and runs are identical."""
    prob = smooth_oj_problem("logcosh", 6, 3, seed=1)
    geo = JOrthogonalGeometry(6, 3)
    oracle = FunctionOracle(prob.torch_cost, lambda x: torch.func.grad(prob.torch_cost)(x))
    x0 = geo.random_point(cond=3.0, generator=torch.Generator().manual_seed(0))
    runs = [CayleyLBFGS(max_iterations=5000, min_gradient_norm=0.0).run(oracle, x0, geo)
            for _ in range(2)]
    assert runs[0].stop_reason.startswith("line search"), runs[0].stop_reason
    assert runs[0].iterations < 5000 and runs[0].gradient_norm <= 1e-7
    assert torch.equal(runs[0].point, runs[1].point)


def test_bad_input_is_refused_before_any_work():
    with pytest.raises(ValueError, match="memory"):
        CayleyLBFGS(memory=0)
    with pytest.raises(ValueError, match="max_step"):
        CayleyLBFGS(max_step=0.0)
    with pytest.raises(ValueError, match="sufficient_decrease"):
        CayleyLBFGS(sufficient_decrease=0.5)
    calls = []
    oracle = FunctionOracle(lambda x: calls.append(1) or x.sum(), lambda x: torch.ones_like(x))
    geo = IndefiniteStiefelGeometry(6, 2, 3, 1)
    with pytest.raises(ValueError, match="square J-orthogonal group"):
        CayleyLBFGS().run(oracle, geo.random_point(), geo)
    assert not calls
    assert registry.get("CayleyLBFGS", "pymanopt") is pm.CayleyLBFGS
