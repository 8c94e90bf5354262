"""RSDM's two front-ends run one implementation (issue #15): equal iterates, resumable torch
state, re-runnable solver objects, and named non-finite values.

The cost is a PCA term with a quartic perturbation (a non-constant Hessian), as a full cost and
as a finite sum of N components ``f_i(X) = −½‖Xᵀd_i‖² + ¼·c‖Xᵀd_i‖₄⁴``.
"""

from __future__ import annotations

import io

import geoopt
import pymanopt
import pytest
import torch
from pymanopt.manifolds import Stiefel

from orthoplug.adapters.geoopt import RSDM as GeooptRSDM
from orthoplug.adapters.pymanopt import RSDM as PymanoptRSDM
from orthoplug.geometry.stiefel import StiefelGeometry, qf
from orthoplug.oracles import FiniteSumOracle, FunctionOracle
from orthoplug.problems.stiefel_problems import ProcrustesProblem
from orthoplug.solvers.rsdm import RSDM, StochasticRSDM, default_line_search
from orthoplug.solvers.steps import Armijo, PolarSearch

F64 = torch.float64
N, P, R = 12, 3, 4
COMPONENTS, BATCH = 40, 8
QUARTIC = 0.2


def _gen(seed):
    return torch.Generator().manual_seed(seed)


DATA = torch.randn(COMPONENTS, N, dtype=F64, generator=_gen(0)) * torch.linspace(2.0, 0.2, N,
                                                                                  dtype=F64)


def _x0(seed=1):
    return qf(torch.randn(N, P, dtype=F64, generator=_gen(seed)))


def component_value(x, idx):
    y = DATA[idx] @ x
    return (-0.5 * (y ** 2).sum(-1) + 0.25 * QUARTIC * (y ** 4).sum(-1)).mean()


def component_gradient(x, idx):
    d = DATA[idx]
    y = d @ x
    return d.mT @ (-y + QUARTIC * y ** 3) / len(idx)


ALL = torch.arange(COMPONENTS)


def cost(x):
    return component_value(x, ALL)


def finite_sum():
    return FiniteSumOracle(COMPONENTS, component_value, component_gradient)


def _problem():
    manifold = Stiefel(N, P)

    @pymanopt.function.pytorch(manifold)
    def f(x):
        return cost(x)

    return pymanopt.Problem(manifold, f)


def _param(x0):
    return geoopt.ManifoldParameter(x0.clone(), manifold=geoopt.EuclideanStiefel())


def _loss(opt, w, stochastic):
    """The loss at ``w``: a minibatch drawn with the optimizer's generator (as the core's
    ``randperm(N)[:B]``), or the full cost."""
    if stochastic:
        idx = torch.randperm(COMPONENTS, generator=opt.generator())[:BATCH]
        return component_value(w, idx)
    return cost(w)


def _closure(opt, w, stochastic):
    """A closure of :func:`_loss`."""

    def closure():
        opt.zero_grad()
        loss = _loss(opt, w, stochastic)
        loss.backward()
        return loss

    return closure


def _torch_run(w, steps, stochastic, **options):
    opt = GeooptRSDM([w], **{"r": R, **options})
    closure = _closure(opt, w, stochastic)
    for _ in range(steps):
        opt.step(closure)
    return opt


CASES = {  # name: (pymanopt options, geoopt options, stochastic)
    "fixed": (dict(step_size=0.3), dict(lr=0.3), False),
    # no step given: line_search="auto", Armijo at r = 4 > p = 3, the polar step at r = 3 = p
    "default": (dict(), dict(), False),
    "default-polar": (dict(r=P), dict(r=P), False),
    "armijo": (dict(line_search="armijo"), dict(line_search="armijo"), False),
    "polar": (dict(line_search="polar"), dict(line_search="polar"), False),  # over O(4), p < r
    "armijo-object": (dict(line_search=Armijo(contraction=0.3, growth=2.0)),
                      dict(line_search=Armijo(contraction=0.3, growth=2.0)), False),
    "stochastic": (dict(batch_size=BATCH, step_size=0.3, schedule="inverse", decay_time=10.0),
                   dict(lr=0.3, schedule="inverse", decay_time=10.0), True),
}


@pytest.mark.parametrize("sampling", ["permutation", "orthogonal"])
@pytest.mark.parametrize("case", list(CASES))
def test_pymanopt_and_geoopt_take_the_same_steps(case, sampling):
    """N iterations of the pymanopt optimizer = N ``step(closure)`` calls (same seed, start and
    options) to 1e-10, and the iterates moved (the comparison is not vacuous). Without a step
    size both take the rule of the shape, and the line searches reject trials (their memory is
    exercised)."""
    pym_options, geo_options, stochastic = CASES[case]
    steps, x0 = 30, _x0()
    res = PymanoptRSDM(**{"r": R, **pym_options}, sampling=sampling, max_iterations=steps,
                       min_gradient_norm=0.0, seed=4).run(
        _problem(), initial_point=x0.numpy(), oracle=finite_sum() if stochastic else None)
    assert res.iterations == steps
    w = _param(x0)
    _torch_run(w, steps, stochastic, sampling=sampling, seed=4, **geo_options)
    point = torch.from_numpy(res.point)
    assert float((point - x0).abs().max()) > 1e-2
    assert float((w.detach() - point).abs().max()) <= 1e-10
    rule = {"default": "armijo", "default-polar": "polar"}.get(case, case)
    if rule in ("armijo", "polar"):
        info = res.solver_result.info
        assert info["step_rule"] == rule
        assert info["backtracks"] > 0  # the rule's memory was exercised


@pytest.mark.parametrize("case", list(CASES))
def test_torch_state_dict_resumes_exactly(case):
    """k steps, save (``torch.save``; a weights-only ``torch.load`` reads it), a new optimizer
    with another seed loads the state and continues: equal to the uninterrupted run (slices,
    minibatches, the line search and its memory, the schedule, momentum)."""
    _, geo_options, stochastic = CASES[case]
    x0, bias0 = _x0(2), torch.zeros(P, dtype=F64)

    def build(w, b, seed):
        groups = [{"params": [w], **geo_options}]
        if "lr" in geo_options:  # a Euclidean parameter with SGD momentum in the same group
            groups[0]["params"].append(b)
        opt = GeooptRSDM(groups, r=R, momentum=0.5, seed=seed)

        def closure():
            opt.zero_grad()
            loss = _loss(opt, w, stochastic) + ((w.sum(0) - b) ** 2).sum()
            loss.backward()
            return loss

        return opt, closure

    w, b = _param(x0), torch.nn.Parameter(bias0.clone())
    opt, closure = build(w, b, seed=7)
    for _ in range(6):
        opt.step(closure)
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)  # a checkpoint (state_dict shares the buffers)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    w_saved, b_saved = w.detach().clone(), b.detach().clone()
    for _ in range(6):
        opt.step(closure)
    w2, b2 = _param(w_saved), torch.nn.Parameter(b_saved.clone())
    opt2, closure2 = build(w2, b2, seed=99)
    opt2.load_state_dict(saved)
    for _ in range(6):
        opt2.step(closure2)
    assert float((w2.detach() - w.detach()).abs().max()) <= 1e-12
    assert float((b2.detach() - b.detach()).abs().max()) <= 1e-12
    assert float((w.detach() - w_saved).abs().max()) > 1e-3


@pytest.mark.parametrize("make", [
    lambda: RSDM(R, seed=3, max_iterations=40, eval_every=10),
    lambda: RSDM(R, sampling="orthogonal", step_size=0.3, seed=3, max_iterations=40),
    lambda: RSDM(R, line_search="polar", seed=3, max_iterations=40, eval_every=10),
    lambda: StochasticRSDM(R, batch_size=BATCH, step_size=0.3, schedule="inverse_sqrt",
                           seed=3, max_iterations=40, eval_every=10),
])
def test_a_solver_object_runs_twice_identically(make):
    solver = make()
    options = dict(vars(solver))
    geo, x0 = StiefelGeometry(N, P), _x0(3)
    oracle = finite_sum() if isinstance(solver, StochasticRSDM) else FunctionOracle(
        cost, lambda x: component_gradient(x, ALL))
    first = solver.run(oracle, x0, geo)
    assert vars(solver) == options  # nothing of the run stays on the solver
    second = solver.run(oracle, x0, geo)
    assert torch.equal(first.point, second.point)
    assert first.info == second.info and first.history["cost"] == second.history["cost"]
    assert first.cost < float(cost(x0)) - 1e-3


def test_a_non_finite_loss_or_gradient_is_named_and_the_last_good_point_kept():
    # a NaN loss in the middle of a closure run: fixed step and Armijo
    for options in (dict(lr=0.3), dict()):
        w = _param(_x0())
        opt = GeooptRSDM([w], r=R, seed=0, **options)
        calls = {"k": 0}

        def closure(opt=opt, w=w, calls=calls):
            calls["k"] += 1
            opt.zero_grad()
            loss = cost(w) * (float("nan") if calls["k"] > 12 else 1.0)
            loss.backward()
            return loss

        good = None
        with pytest.raises(FloatingPointError, match="non-finite loss"):
            for _ in range(40):
                good = w.detach().clone()
                opt.step(closure)
        assert torch.equal(w.detach(), good) and opt.steps_taken > 1
    # a NaN gradient without closure (backward outside the optimizer, RiemannianSGD style)
    w = _param(_x0())
    opt = GeooptRSDM([w], lr=0.3, r=R, seed=0)
    for _ in range(6):
        opt.zero_grad()
        cost(w).backward()
        opt.step()
    opt.zero_grad()
    cost(w).backward()
    w.grad[0, 0] = float("inf")
    good = w.detach().clone()
    with pytest.raises(FloatingPointError, match="non-finite gradient of parameter 0"):
        opt.step()
    assert torch.equal(w.detach(), good)


def test_default_line_search_follows_the_shape():
    """No step given (``line_search="auto"``): the polar step iff r ≤ p, in the core (the run's
    ``step_rule``) and in the geoopt door (per group: polar only if every Stiefel parameter of
    the group has r ≤ p; the group's dict holds the rule); a bad name is refused."""
    assert default_line_search(5, 5) == "polar" and default_line_search(4, 5) == "armijo"
    pr = ProcrustesProblem.make(20, 6, seed=0)
    x0 = qf(torch.randn(20, 6, dtype=F64, generator=_gen(5)))
    for r, rule in ((6, "polar"), (7, "armijo"), (None, "polar")):  # default r(20, 6) = 5
        res = RSDM(r, seed=0, max_iterations=2).run(pr.oracle("linear"), x0,
                                                    StiefelGeometry(20, 6))
        assert (res.info["line_search"], res.info["step_rule"]) == ("auto", rule)
    wide = _param(x0)
    narrow = _param(qf(torch.randn(40, 2, dtype=F64, generator=_gen(6))))  # default r = 4 > 2
    assert GeooptRSDM([wide]).param_groups[0]["line_search"] == PolarSearch()
    assert GeooptRSDM([wide, narrow]).param_groups[0]["line_search"] == Armijo()
    assert GeooptRSDM([wide], r=7).param_groups[0]["line_search"] == Armijo()
    assert GeooptRSDM([wide], line_search="armijo").param_groups[0]["line_search"] == Armijo()
    assert GeooptRSDM([wide], lr=0.1).param_groups[0]["line_search"] is None
    with pytest.raises(ValueError, match="line_search must be"):
        GeooptRSDM([wide], line_search="wolfe")
