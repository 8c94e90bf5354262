"""Every registered solver, in both front-ends, names bad input: a ``ValueError`` /
``TypeError`` (``FloatingPointError`` for a non-finite loss in a torch step) whose message gives
the cause, raised before any work — never a raw error from inside torch, NumPy, numba or
autograd.

Classes walked: infeasible start, non-finite start, wrong shape, wrong dtype (integer, half,
complex), non-finite data, unknown option, bad scalar option (nan, negative, a float seed),
non-finite cost / loss / gradient, a loss that is not one number, missing closure or gradient;
plus the manifold maps (wrong-shape tangents, mixed dtypes, integer and complex tensors) and
random points with an impossible condition number.
"""

from __future__ import annotations

import re

import geoopt
import numpy as np
import pymanopt
import pytest
import torch
from test_torch_conventions import quadratic_problem

from orthoplug import registry
from orthoplug.adapters import geoopt as go
from orthoplug.adapters import pymanopt as pm
from orthoplug.oracles import FiniteSumOracle, FunctionOracle, QuadraticOracle

NAMED = (ValueError, TypeError, FloatingPointError)
N, K = 6, 3  # O(3, 3) and St(6, 3)
J_SOLVERS = {"GSJOBCD", "JJOBCD", "VRJJOBCD", "ColumnJJacobi", "ADMM", "UMCM", "CSDM",
             "HyperbolicEig", "CayleyLBFGS"}


def _named(call, cause: str):
    """``call()`` raises a named error whose message matches ``cause`` (a regex)."""
    with pytest.raises(NAMED) as info:
        call()
    assert re.search(cause, str(info.value), re.IGNORECASE), str(info.value)
    return info.value


def _data():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(N, N, generator=g, dtype=torch.float64)
    return a @ a.T + torch.eye(N, dtype=torch.float64)


C = _data()


def _j_start() -> torch.Tensor:
    x = go.JOrthogonal(N, p=3).random(N, N, cond=3.0, dtype=torch.float64,
                                      generator=torch.Generator().manual_seed(1))
    return x.detach().as_subclass(torch.Tensor)


def _st_start() -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.linalg.qr(torch.randn(N, K, generator=g, dtype=torch.float64))[0]


# ---- the geoopt front-end ------------------------------------------------------------------

GEOOPT = sorted(set(registry.names("solver", "geoopt")) | {"ColumnJJacobi"})


def _go_start(name):
    return _j_start() if name in J_SOLVERS else _st_start()


def _go_manifold(name):
    return go.JOrthogonal(N, p=3) if name in J_SOLVERS else geoopt.EuclideanStiefel()


def _go_param(name, x=None):
    x = _go_start(name) if x is None else x
    return geoopt.ManifoldParameter(x, manifold=_go_manifold(name),
                                    requires_grad=x.dtype.is_floating_point)


def _go_optimizer(name, params, **options):
    if name == "VRJJOBCD":
        options = {"num_components": 2, "sigma_rule": 100.0, **options}
    elif name == "ColumnJJacobi":
        options = {"c": C, **options}
    elif name == "RSDM":
        options = {"r": K, "lr": 0.1, **options}
    return getattr(go, name)(params, **options)


def _go_step(name, x, loss=None, **options):
    """One step of ``name`` from ``x`` with the loss ``loss(x)`` (default ``tr(XᵀCX)``)."""
    opt = _go_optimizer(name, [x], **options)
    c = C.to(x.dtype)

    def closure(*_):
        opt.zero_grad()
        value = torch.trace(x.mT @ c @ x) if loss is None else loss(x)
        value.sum().backward()
        return value

    opt.step(closure)


@pytest.mark.parametrize("name", GEOOPT)
def test_geoopt_start_points(name):
    x0 = _go_start(name)
    _named(lambda: _go_step(name, _go_param(name, x0 + 0.1)), r"infeasible.*= \d")
    _named(lambda: _go_step(name, _go_param(name, x0 * float("nan"))), "non-finite")


@pytest.mark.parametrize("name", GEOOPT)
@pytest.mark.parametrize("dtype", [torch.int64, torch.float16, torch.bfloat16, torch.complex128])
def test_geoopt_dtypes(name, dtype):
    x = _go_param(name, _go_start(name).to(dtype))
    _named(lambda: _go_optimizer(name, [x]), "float32 or float64")


@pytest.mark.parametrize("name", GEOOPT)
def test_geoopt_wrong_shape(name):
    if name in J_SOLVERS:  # geoopt checks the shape against the manifold itself
        _named(lambda: _go_param(name, torch.eye(N - 1, dtype=torch.float64)), "shape")
    else:  # a wide "Stiefel" matrix: geoopt checks it too
        _named(lambda: geoopt.ManifoldParameter(_st_start().mT.contiguous(),
                                                manifold=geoopt.EuclideanStiefel()), "shape")


@pytest.mark.parametrize("name", GEOOPT)
def test_geoopt_options(name):
    _named(lambda: _go_optimizer(name, [_go_param(name)], bogus=1), "bogus")
    for value in (float("nan"), -1.0, "fast"):
        _named(lambda v=value: _go_optimizer(name, [_go_param(name)], lr=v), "lr must be")
    _named(lambda: _go_optimizer(name, [_go_param(name)], seed=1.5), "seed must be")
    _named(lambda: _go_optimizer(name, [_go_param(name)], stabilize=-1), "stabilize")


BAD_SCALARS = {
    "GSJOBCD": ["sigma_rule", "theta"],
    "JJOBCD": ["sigma_rule", "theta", "matchings", "betas"],
    "VRJJOBCD": ["sigma_rule", "theta", "num_components", "batch_size"],
    "ColumnJJacobi": ["scale", "tol", "max_boost", "candidates"],
    "OBCD": ["theta", "sigma_rule"],
    "RSDM": ["r", "momentum", "weight_decay", "decay_time"],
    "RSSM": ["num_blocks"],
    "CayleyLBFGS": ["memory", "max_step", "sufficient_decrease"],
}


@pytest.mark.parametrize("name", GEOOPT)
def test_geoopt_bad_scalar_options(name):
    """nan and a negative value of every numeric option (nan only for ColumnJJacobi's scale s,
    whose sign is free): refused, naming the option (at
    construction, or at the first step for the options the core step rules check)."""
    for option in BAD_SCALARS[name]:
        for value in (float("nan"),) if option == "scale" else (float("nan"), -1):  # s < 0 is fine
            bad = (value, value) if option == "betas" else value
            _named(lambda o=option, b=bad: _go_step(name, _go_param(name), **{o: b}), option)


@pytest.mark.parametrize("name", GEOOPT)
def test_geoopt_losses_and_closures(name):
    x0 = _go_start(name)
    _named(lambda: _go_step(name, _go_param(name, x0.clone()), loss=lambda x: x.sum() / 0 * 0),
           "non-finite")
    _named(lambda: _go_step(name, _go_param(name, x0.clone()),
                            loss=lambda x: (x * float("inf")).sum() * 0 + x.sum()),
           "non-finite")
    _named(lambda: _go_step(name, _go_param(name, x0.clone()), loss=lambda x: (x * x).sum(-1)),
           "one real number")
    x = _go_param(name, x0.clone())
    opt = _go_optimizer(name, [x])

    def no_backward(*_):
        opt.zero_grad()
        return (x * x).sum()

    if name != "ColumnJJacobi":  # it uses no gradient
        _named(lambda: opt.step(no_backward), "backward")
    if name in ("GSJOBCD", "JJOBCD", "VRJJOBCD", "OBCD", "CayleyLBFGS"):
        _named(lambda: opt.step(), "closure")
    assert torch.equal(x.detach(), x0)


def test_geoopt_mixed_groups_and_devices():
    x = _go_param("GSJOBCD")
    _named(lambda: go.GSJOBCD([x, torch.nn.Parameter(torch.zeros(3))]), "own optimizer")
    _named(lambda: go.ColumnJJacobi([x], c=C[:-1]), "square")
    _named(lambda: go.ColumnJJacobi([x], c=C * float("nan")), "non-finite")
    _named(lambda: go.ColumnJJacobi([x], c=C.to(torch.complex128)), "real")
    _named(lambda: go.ColumnJJacobi([x], c=C, scale=float("nan")), "scale")


# ---- the pymanopt front-end ----------------------------------------------------------------

PYMANOPT = registry.names("solver", "pymanopt")
#: direct solvers: no start point, iteration budget or seed
DIRECT = {"HyperbolicEig"}


def _pm_problem(name):
    """The pymanopt problem ``tr(XᵀCX)`` over O(3, 3), or ``−tr(XᵀCX)`` over St(6, 3), and
    its start point."""
    if name in J_SOLVERS:
        return quadratic_problem(pm.JOrthogonal(N, p=3), C.numpy()), _j_start().numpy()
    return quadratic_problem(pymanopt.manifolds.Stiefel(N, K), -C.numpy()), _st_start().numpy()


def _pm_oracle(name, c=None):
    c = (C if name in J_SOLVERS else -C) if c is None else c
    if name == "VRJJOBCD":
        ct = torch.as_tensor(c)
        return FiniteSumOracle(2, lambda x, idx: torch.trace(x.mT @ ct @ x),
                               lambda x, idx: 2 * ct @ x, lipschitz=100.0)
    return QuadraticOracle(c)


def _pm_run(name, start=None, oracle=None, **options):
    problem, x0 = _pm_problem(name)
    budget = {} if name in DIRECT else {"max_iterations": 2, "seed": 0}
    options = {**budget, **({"r": K} if name == "RSDM" else {}), **options}
    return registry.get(name, "pymanopt")(**options).run(
        problem, initial_point=x0 if start is None else start,
        oracle=_pm_oracle(name) if oracle is None else oracle)


@pytest.mark.parametrize("name", PYMANOPT)
def test_pymanopt_start_points(name):
    _, x0 = _pm_problem(name)
    _pm_run(name)  # the reference run works
    if name in DIRECT:
        pytest.skip("a direct solve takes no start point (the door documents it)")
    _named(lambda: _pm_run(name, x0 + 0.1), r"infeasible.*= \d")
    _named(lambda: _pm_run(name, x0 * np.nan), "non-finite")
    _named(lambda: _pm_run(name, x0[:-1]), "shape")
    _named(lambda: _pm_run(name, np.stack([x0, x0[::-1]])[:, :-1]), "shape|one .*matrix")
    problem, _ = _pm_problem(name)
    door = registry.get(name, "pymanopt")(max_iterations=2, **({"r": K} if name == "RSDM" else {}))
    _named(lambda: door.run(problem, initial_point=np.stack([x0, x0])),  # the Problem's cost
           "one matrix")
    for dtype in (np.int64, np.complex128):
        _named(lambda d=dtype: _pm_run(name, x0.astype(d)), "real floating-point")


@pytest.mark.parametrize("name", PYMANOPT)
def test_pymanopt_options(name):
    door = registry.get(name, "pymanopt")
    required = {"r": K} if name == "RSDM" else {}
    # a door with **options names the option; an explicit signature gets Python's own message,
    # which names the class and the option as well
    _named(lambda: door(bogus=1, **required),
           r"unknown option.*bogus|__init__\(\) got an unexpected keyword argument 'bogus'")
    if name in DIRECT:
        _named(lambda: door(method="bogus"), "method")
        _named(lambda: door(tol=float("nan")), "tol")
        return
    _named(lambda: door(seed=1.5, **required), "seed must be")
    _named(lambda: door(max_iterations=-1, **required), "max_iterations")
    _named(lambda: door(max_time=float("nan"), **required), "max_time")


@pytest.mark.parametrize("name", PYMANOPT)
def test_pymanopt_non_finite_data_and_cost(name):
    _named(lambda: _pm_run(name, oracle=_pm_oracle(name, C * np.nan)), "finite")
    nan = FunctionOracle(lambda x: torch.tensor(float("nan"), dtype=x.dtype),
                         lambda x: torch.zeros_like(x), lipschitz=1.0)
    # SparseOBCD's data starts, column sweeps and greedy pairs need a quadratic: without them it
    # runs any cost
    plain = ({"starts": (), "column_every": 0, "candidates": 1} if name == "SparseOBCD"
             else {})
    if name in DIRECT or name == "ColumnJJacobi":  # they need the quadratic's data (C), not
        _named(lambda: _pm_run(name, oracle=nan), "quadratic")  # a cost function
    elif name != "VRJJOBCD":  # needs a finite sum
        _named(lambda: _pm_run(name, oracle=nan, **plain), "finite")


def test_quadratic_oracle_data():
    _named(lambda: QuadraticOracle(C[:, :-1]), "square")
    _named(lambda: QuadraticOracle(C.to(torch.complex128)), "real")
    _named(lambda: QuadraticOracle(C, scale=float("inf")), "finite")
    _named(lambda: QuadraticOracle(C[:-1, :-1]).track(_j_start()), "rows")
    exact = QuadraticOracle(torch.eye(N, dtype=torch.int64))  # integer data: exact in float64
    assert float(exact.value(_st_start())) == pytest.approx(K, abs=1e-12)


# ---- manifold maps ---------------------------------------------------------------------------

@pytest.mark.parametrize("manifold", [go.JOrthogonal(N, p=3), go.IndefiniteStiefel(N, K, p=3,
                                                                                     k_plus=2)])
def test_geoopt_manifold_maps(manifold):
    shape = manifold.geometry.shape
    x = manifold.random(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    u = torch.ones(shape, dtype=torch.float64)
    for call in (manifold.proju, manifold.egrad2rgrad, manifold.retr, manifold.inner):
        _named(lambda f=call: f(x, u[:-1]), "shape")
        _named(lambda f=call: f(x, u.float()), "one dtype")
        for dtype in (torch.int64, torch.float16, torch.bfloat16, torch.complex128):
            _named(lambda f=call, d=dtype: f(x.to(d), u.to(d)), "real floating point")
    _named(lambda: manifold.random(*shape, cond=float("nan")), "cond must be")
    _named(lambda: manifold.random(*shape, cond=1e200), "cond must be")


def test_pymanopt_manifold_maps():
    manifold = pm.JOrthogonal(N, p=3)
    x = _j_start().numpy()
    _named(lambda: manifold.projection(x, np.ones((N - 1, N))), "shape")
    _named(lambda: manifold.retraction(x, np.ones((N, N), dtype=complex)), "real floating")
    _named(lambda: manifold.inner_product(x, np.ones((N, N), dtype=int), np.ones((N, N))),
           "real floating")


def _function_oracle(value, gradient):
    return FunctionOracle(value, gradient, lipschitz=100.0)


def _pm_function_run(name, value, gradient):
    """``name`` on the pymanopt problem with the cost and gradient given as a FunctionOracle
    (SparseOBCD without its quadratic-only stages)."""
    plain = ({"starts": (), "column_every": 0, "candidates": 1} if name == "SparseOBCD"
             else {})
    return _pm_run(name, oracle=_function_oracle(value, gradient), **plain)


#: solvers that take a user's FunctionOracle (VR-J-JOBCD needs a finite sum, ColumnJJacobi the
#: quadratic's C; both refuse other oracles by name, checked above)
FUNCTION_SOLVERS = [n for n in PYMANOPT if n not in DIRECT | {"VRJJOBCD", "ColumnJJacobi"}]


@pytest.mark.parametrize("name", FUNCTION_SOLVERS)
def test_pymanopt_bad_oracle_outputs(name):
    """A cost that is not one number and a gradient of the wrong shape are named (by the oracle,
    at the first evaluation), never a broadcasting error from inside the solver."""
    c = C if name in J_SOLVERS else -C

    def cost(x):
        return torch.trace(x.mT @ c.to(x.dtype) @ x)

    def grad(x):
        return 2 * c.to(x.dtype) @ x

    _named(lambda: _pm_function_run(name, lambda x: (x * x).sum(0), grad), "one number|scalar")
    _named(lambda: _pm_function_run(name, cost, lambda x: grad(x)[:-1]), "shape")
    if name not in J_SOLVERS:  # (a transposed gradient of a square X has X's shape)
        _named(lambda: _pm_function_run(name, cost, lambda x: grad(x).mT), "shape")


@pytest.mark.parametrize("name", FUNCTION_SOLVERS)
def test_pymanopt_non_finite_after_the_start_ends_the_run(name):
    """f finite at the start point only: the run stops with a result (the last finite iterate,
    its reason naming the non-finite value), never an error from ``finalize``."""
    _, x0 = _pm_problem(name)
    x0 = torch.as_tensor(x0)
    c = C if name in J_SOLVERS else -C

    def cost(x):
        finite = torch.equal(x, x0.to(x.dtype))
        return torch.trace(x.mT @ c.to(x.dtype) @ x) * (1.0 if finite else float("nan"))

    result = _pm_function_run(name, cost, lambda x: 2 * c.to(x.dtype) @ x)
    point = np.asarray(result.point)
    assert np.isfinite(point).all()


@pytest.mark.parametrize("name", PYMANOPT)
def test_pymanopt_wrong_size_data(name):
    """C of the wrong size for the start point: named (rows), before any step."""
    if name == "VRJJOBCD":
        pytest.skip("a finite-sum oracle has no C")
    _named(lambda: _pm_run(name, oracle=QuadraticOracle(C[:-1, :-1])), "rows|shape|size")


def test_quadratic_oracle_non_finite_data_and_wrong_d():
    _named(lambda: QuadraticOracle(C * float("nan")), "finite")
    _named(lambda: QuadraticOracle(C, d=torch.eye(K - 1, dtype=torch.float64)).track(_st_start()),
           "D is .* columns")


@pytest.mark.parametrize("name", GEOOPT)
def test_geoopt_unknown_option_names_the_class(name):
    _named(lambda: _go_optimizer(name, [_go_param(name)], bogus=1), rf"{name}.*bogus")


@pytest.mark.parametrize("name", PYMANOPT)
def test_pymanopt_unknown_option_names_the_class(name):
    _named(lambda: registry.get(name, "pymanopt")(bogus=1), rf"{name}.*bogus")


def test_stiefel_block_maps():
    x = _st_start()
    manifold = go.StiefelBlock(x, columns=[0, 1])
    y = manifold.origin()
    u = torch.ones_like(y)
    for call in (manifold.proju, manifold.egrad2rgrad, manifold.retr, manifold.inner):
        _named(lambda f=call: f(y, u[:-1]), "shape")
        _named(lambda f=call: f(y, u.float()), "one dtype")
        _named(lambda f=call: f(y.half(), u.half()), "float32 or float64")


def test_pymanopt_random_points_cond():
    for cond in (float("nan"), 1e200, 0.5):
        _named(lambda c=cond: pm.JOrthogonal(N, p=3, cond=c).random_point(), "cond")


def test_maps_at_zero_are_the_documented_values():
    """X = 0 is on neither J-manifold: the maps return their formula's value there (stated in
    :mod:`orthoplug.geometry.manifolds`): 0 on O(J), NaN for iSt's projection (its Lyapunov
    system is singular); ``projx`` refuses the point."""
    u = torch.ones(N, N, dtype=torch.float64)
    oj = go.JOrthogonal(N, p=3)
    zero = torch.zeros(N, N, dtype=torch.float64)
    for value in (oj.proju(zero, u), oj.egrad2rgrad(zero, u), oj.transp(zero, zero, u),
                  oj.retr(zero, u), oj.expmap(zero, u)):
        assert torch.equal(value, zero)
    ist = go.IndefiniteStiefel(N, K, p=3, k_plus=2)
    zero_k = torch.zeros(N, K, dtype=torch.float64)
    for value in (ist.proju(zero_k, u[:, :K]), ist.egrad2rgrad(zero_k, u[:, :K])):
        assert torch.isnan(value).all()
    for manifold, z in ((oj, zero), (ist, zero_k)):
        _named(lambda m=manifold, x=z: m.projx(x), "projx restores")
