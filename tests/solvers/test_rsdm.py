"""RSDM (issue #5): the random-submanifold step, the solvers against closed forms, front-ends.

Closed forms: PCA ``F* = −½ Σ_{i≤p} λ_i`` at the top-p eigenvectors; Procrustes ``X* = UVᵀ``
from the SVD of ``BAᵀ``. Small r×r LAPACK calls are dominated by thread start-up on a loaded
2-core machine, so this module runs single-threaded (restored afterwards).
"""

from __future__ import annotations

import gc
import math
import os
import re

import numpy as np
import pytest
import sklearn  # noqa: F401 - the orthogonal MLP's digits (scikit-learn is in the test extra)
import torch

from orthoplug.geometry._linalg import skew
from orthoplug.geometry.stiefel import GrassmannGeometry, StiefelGeometry, qf
from orthoplug.geometry.submanifold import (
    RETRACTIONS,
    Submanifold,
    retract_identity,
    sample_haar_rows,
    sample_rows,
    sample_submanifold,
    submanifold_gradient,
)
from orthoplug.oracles import (
    FiniteSumOracle,
    FunctionOracle,
    QuadraticOracle,
    RowGradientOracle,
)
from orthoplug.problems.stiefel_problems import PCAProblem, ProcrustesProblem
from orthoplug.solvers.base import Run
from orthoplug.solvers.rsdm import (
    RSDM,
    PolarSlice,
    StochasticRSDM,
    _rotation_polar,
    _rotation_polar_svd,
    default_slice_dimension,
)
from orthoplug.solvers.steps import ARMIJO_GROWTH, Armijo, ArmijoBacktracking, PolarSearch
from orthoplug.training.orthonet import train_orthonet

F64 = torch.float64


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _x0(n, p, seed=1, dtype=F64):
    return qf(torch.randn(n, p, dtype=F64, generator=_gen(seed))).to(dtype)


def _full_rows(sub: Submanifold, n: int) -> torch.Tensor:
    """P(r) as an explicit r×n matrix (test only, small n)."""
    if sub.basis is not None:
        return sub.basis
    p = torch.zeros(sub.r, n, dtype=F64)
    p[torch.arange(sub.r), sub.rows] = 1.0
    return p


# ---------------------------------------------------------------------------------------------
# the building blocks
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", RETRACTIONS)
def test_retractions_on_O_r(method):
    g = _gen(0)
    a = torch.randn(3, 7, 7, dtype=F64, generator=g)
    omega = a - a.mT
    y = retract_identity(omega, method)
    eye = torch.eye(7, dtype=F64)
    assert torch.allclose(y.mT @ y, eye.expand(3, 7, 7), atol=1e-13)
    assert torch.allclose(torch.linalg.det(y), torch.ones(3, dtype=F64), atol=1e-12)  # SO(r)
    # first order: Retr(tΩ) = I + tΩ + O(t²)
    errs = [float((retract_identity(t * omega, method) - eye - t * omega).abs().max())
            for t in (1e-2, 1e-3)]
    assert errs[1] < errs[0] / 50
    assert retract_identity(omega[0], method).shape == (7, 7)


def test_cayley_has_the_half_and_low_precision_is_orthogonal():
    a = torch.randn(5, 5, dtype=F64, generator=_gen(1))
    omega = 1e-4 * (a - a.mT)
    # (I − Ω/2)^{-1}(I + Ω/2) agrees with expm to second order; without the ½ it would be 2Ω
    diff = retract_identity(omega, "cayley") - torch.linalg.matrix_exp(omega)
    assert float(diff.abs().max()) < 1e-11
    y32 = retract_identity((100 * omega).float(), "qr")
    assert y32.dtype == torch.float32
    assert float((y32.double().mT @ y32.double() - torch.eye(5, dtype=F64)).abs().max()) < 3e-7


def test_row_sampling_and_haar_rows():
    idx = sample_rows(50, 20, generator=_gen(0))
    assert idx.shape == (20,) and len(set(idx.tolist())) == 20 and int(idx.max()) < 50
    bidx = sample_rows(50, 20, batch=(4,), generator=_gen(0))
    assert bidx.shape == (4, 20) and all(len(set(b.tolist())) == 20 for b in bidx)
    p = sample_haar_rows(30, 6, batch=(2,), generator=_gen(0))
    assert torch.allclose(p @ p.mT, torch.eye(6, dtype=F64).expand(2, 6, 6), atol=1e-13)
    # sign fix: P(r) is a function of the Gaussian, Q = Z R^{-1} with diag(R) > 0
    z = torch.randn(30, 6, dtype=F64, generator=_gen(3))
    q = sample_haar_rows(30, 6, generator=_gen(3)).mT
    r = q.mT @ z
    assert torch.allclose(q @ r, z, atol=1e-12) and bool((torch.diagonal(r) > 0).all())
    assert torch.allclose(r, torch.triu(r), atol=1e-12)


@pytest.mark.parametrize("sampling", ["permutation", "orthogonal"])
def test_slice_gradient_and_update_match_the_dense_formulas(sampling):
    n, p, r = 9, 4, 5
    x = _x0(n, p)
    gmat = torch.randn(n, p, dtype=F64, generator=_gen(2))
    sub = sample_submanifold(sampling, n, r, generator=_gen(4))
    pr = _full_rows(sub, n)
    c, b = sub.restrict(x), sub.restrict(gmat)
    gamma = submanifold_gradient(b, c)
    # formula (4): Γ = P(r) skew(G Xᵀ) P(r)ᵀ
    assert torch.allclose(gamma, pr @ skew(gmat @ x.mT) @ pr.mT, atol=1e-13)
    # U(Y)X = X + P(r)ᵀ(Y − I)P(r)X with U(Y) = Pᵀ blockdiag(Y, I) P
    y = retract_identity(-0.3 * gamma, "exp")
    dense = x + pr.mT @ ((y - torch.eye(r, dtype=F64)) @ pr @ x)
    new = sub.apply_(x.clone(), y, c)
    assert torch.allclose(new, dense, atol=1e-13)
    assert float(StiefelGeometry(n, p).violation(new)) < 1e-13


@pytest.mark.parametrize("sampling", ["permutation", "orthogonal"])
def test_slice_gradient_is_the_derivative_on_O_r(sampling):
    """d/dt F(U(exp(tΩ))X) at 0 equals ⟨Γ, Ω⟩ for a smooth non-quadratic F."""
    n, p, r = 10, 3, 4
    x = _x0(n, p)
    w = torch.randn(n, p, dtype=F64, generator=_gen(5))

    def f(z):
        return (torch.sin(z) * w).sum() + (z ** 4).sum()

    xg = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(f(xg), xg)
    sub = sample_submanifold(sampling, n, r, generator=_gen(6))
    gamma = submanifold_gradient(sub.restrict(grad), sub.restrict(x))
    a = torch.randn(r, r, dtype=F64, generator=_gen(7))
    omega = a - a.mT
    h = 1e-6
    fd = (f(sub.apply_(x.clone(), torch.linalg.matrix_exp(h * omega)))
          - f(sub.apply_(x.clone(), torch.linalg.matrix_exp(-h * omega)))) / (2 * h)
    assert abs(float(fd) - float((gamma * omega).sum())) < 1e-7


@pytest.mark.parametrize("sampling", ["permutation", "orthogonal"])
def test_prop1_expected_slice_gradient(sampling):
    """Prop. 1: E‖P(r) M P(r)ᵀ‖² = ρ‖M‖² for skew M, ρ = r(r−1)/(n(n−1)) (Monte Carlo)."""
    n, r, trials = 12, 4, 4000
    a = torch.randn(n, n, dtype=F64, generator=_gen(8))
    m = a - a.mT
    rho = r * (r - 1) / (n * (n - 1))
    gen = _gen(9)
    if sampling == "permutation":
        idx = sample_rows(n, r, batch=(trials,), generator=gen)
        sub_m = m[idx[:, :, None], idx[:, None, :]]
    else:
        pr = sample_haar_rows(n, r, batch=(trials,), generator=gen)
        sub_m = pr @ m @ pr.mT
    ratio = float((sub_m ** 2).sum(dim=(-2, -1)).mean() / (rho * (m ** 2).sum()))
    assert abs(ratio - 1.0) < 0.05


# ---------------------------------------------------------------------------------------------
# the solver against closed forms
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pca200():
    return PCAProblem.make(200, 20, top=1.0, seed=0)


@pytest.mark.parametrize("sampling", ["permutation", "orthogonal"])
def test_pca_n200_reaches_the_eigenvalue_sum(pca200, sampling):
    pca = pca200
    solver = RSDM(100, sampling=sampling, step_size=5.0, seed=0, max_iterations=5000,
                  eval_every=50, target_cost=pca.target(1e-9))
    res = solver.run(pca.oracle(), _x0(200, 20), StiefelGeometry(200, 20))
    assert res.stop_reason.startswith("target cost"), res.stop_reason
    exact = float(pca.cost(res.point))  # from scratch, not the tracker's running value
    assert pca.relative_gap(exact) <= 1e-8
    assert res.violation <= 1e-12
    assert float(GrassmannGeometry(200, 20).distance(res.point, pca.x_star)) < 1e-3
    assert res.info["row_gradient_evaluations"] == (res.info["slice_steps"]
                                                    if sampling == "permutation" else 0)
    # an iteration: n/r = 2 slice steps of RSDM-P (rows read alone), one of RSDM-O
    assert res.info["slice_steps"] == res.iterations * (2 if sampling == "permutation" else 1)


def test_grassmann_pca_reaches_the_same_optimum(pca200):
    pca = pca200
    geo = GrassmannGeometry(200, 20)
    res = RSDM(100, step_size=5.0, seed=3, max_iterations=5000, eval_every=50,
               min_gradient_norm=1e-7).run(pca.oracle(), _x0(200, 20, seed=2), geo)
    assert res.stop_reason.startswith("gradient norm"), res.stop_reason
    assert pca.relative_gap(float(pca.cost(res.point))) <= 1e-8
    assert float(geo.distance(res.point, pca.x_star)) < 1e-5  # the same subspace
    assert res.violation <= 1e-12


@pytest.mark.parametrize("sampling", ["permutation", "orthogonal"])
def test_procrustes_n200_reaches_the_svd_solution(sampling):
    pr = ProcrustesProblem.make(200, 20, seed=0)
    res = RSDM(100, sampling=sampling, step_size=1.0, seed=0, max_iterations=5000,
               eval_every=50, target_cost=pr.target(1e-9)).run(
        pr.oracle("quadratic"), _x0(200, 20), StiefelGeometry(200, 20))
    assert res.stop_reason.startswith("target cost"), res.stop_reason
    assert pr.relative_gap(float(pr.cost(res.point))) <= 1e-8
    assert float(torch.linalg.norm(res.point - pr.x_star)) < 1e-2  # flat directions: ~√gap
    assert res.violation <= 1e-12


def test_feasibility_after_1e5_iterations():
    """XᵀX is only ever multiplied by orthogonal matrices: after 10⁵ RSDM-P steps (float64,
    n = 12, p = 3, r = 6: 5·10⁴ iterations of n/r = 2 steps; the linear form of Procrustes, so
    gradient rows are O(rp))."""
    pr = ProcrustesProblem.make(12, 3, seed=0)
    x0 = _x0(12, 3)
    res = RSDM(6, step_size=0.5, seed=0, max_iterations=50_000, eval_every=50_000,
               stabilize=None).run(
        pr.oracle("linear"), x0, StiefelGeometry(12, 3))
    assert res.iterations == 50_000 and res.info["slice_steps"] == 100_000
    assert res.violation <= 1e-12
    assert pr.relative_gap(float(pr.cost(res.point))) <= 1e-12


def test_partial_rows_follow_the_same_path_as_full_gradients():
    """Quadratic tracker rows (RSDM-P) and its rank-r update (RSDM-O) = the plain full-gradient
    path, slice step for slice step (RSDM-P's iteration with rows: n/r = 4 steps, without: 1);
    a RowGradientOracle is never asked for a full gradient."""
    pca = PCAProblem.make(40, 5, top=1.0, seed=1)
    geo, x0 = StiefelGeometry(40, 5), _x0(40, 5)
    for sampling in ("permutation", "orthogonal"):
        kw = dict(sampling=sampling, step_size=3.0, seed=7, eval_every=300)
        fast = RSDM(10, max_iterations=300 if sampling == "orthogonal" else 75, **kw).run(
            pca.oracle(), x0, geo)
        assert fast.info["slice_steps"] == 300
        slow = RSDM(10, max_iterations=300, **kw).run(pca.function_oracle(), x0, geo)
        assert torch.allclose(fast.point, slow.point, atol=1e-11)
        assert abs(fast.cost - slow.cost) < 1e-10
    pr = ProcrustesProblem.make(30, 4, seed=2)
    calls = {"full": 0}

    def full(x):
        calls["full"] += 1
        return pr.gradient(x)

    oracle = RowGradientOracle(pr.cost, full, lambda x, rows: pr.oracle().gradient_rows(x, rows))
    RSDM(8, step_size=1.0, seed=0, max_iterations=200, eval_every=200).run(
        oracle, _x0(30, 4), StiefelGeometry(30, 4))
    assert calls["full"] == 2  # the initial and the final measurement only


def test_armijo_decreases_monotonically_from_a_bad_step():
    pca = PCAProblem.make(60, 6, top=1.0, seed=2)
    values = []
    res = RSDM(20, step_size=1e3, line_search="armijo", seed=0, max_iterations=1500,
               eval_every=1, callback=lambda it, tr: values.append(float(tr.value()))).run(
        pca.oracle(), _x0(60, 6), StiefelGeometry(60, 6))
    assert all(b <= a + 1e-12 for a, b in zip(values, values[1:], strict=False))
    assert pca.relative_gap(float(pca.cost(res.point))) < 1e-8
    assert res.info["backtracks"] > 0
    # a fixed step that large does not converge
    bad = RSDM(20, step_size=1e3, seed=0, max_iterations=300, eval_every=300).run(
        pca.oracle(), _x0(60, 6), StiefelGeometry(60, 6))
    assert pca.relative_gap(bad.cost) > 1e-3


def test_orthogonal_armijo_and_all_retractions_converge():
    pca = PCAProblem.make(30, 4, top=1.0, seed=3)
    geo = StiefelGeometry(30, 4)
    for retraction in RETRACTIONS:
        res = RSDM(10, sampling="orthogonal", retraction=retraction, line_search="armijo",
                   step_size=1.0, seed=1, max_iterations=600, eval_every=600).run(
            pca.oracle(), _x0(30, 4), geo)
        assert pca.relative_gap(float(pca.cost(res.point))) < 1e-9, retraction


def test_stochastic_pca_from_streamed_samples():
    """Spiked covariance (4, 3, 10⁻³ × 18), n = 20, p = 2: after 3000 minibatches of 500
    streamed samples (1.5·10⁶ samples), the largest principal angle to the top-2 eigenspace
    is ≤ 1e-3."""
    n, p = 20, 2
    pca = PCAProblem.from_spectrum([4.0, 3.0] + [1e-3] * (n - 2), p, seed=0)
    geo = GrassmannGeometry(n, p)
    res = StochasticRSDM(10, batch_size=500, step_size=0.5, schedule="inverse", decay_time=200,
                         seed=0, max_iterations=3000, eval_every=3000).run(
        pca.stochastic_oracle(), _x0(n, p), geo)
    assert res.info["samples"] == 1_500_000
    assert float(geo.distance(res.point, pca.x_star)) <= 1e-3
    assert res.violation < 1e-12


def test_finite_sum_minibatch_rsdm():
    """F = (1/N) Σ −½‖Xᵀa_i‖²: minibatch RSDM reaches the top-p subspace of the sample matrix."""
    scales = torch.tensor([3.0, 2.5, 2.0] + [0.3] * 12, dtype=F64)
    data = torch.randn(400, 15, dtype=F64, generator=_gen(3)) * scales
    top = torch.linalg.eigh(data.mT @ data / 400).eigenvectors[:, -3:]

    def value(x, idx):
        return -0.5 * ((data[idx] @ x) ** 2).sum() / len(idx)

    def grad(x, idx):
        d = data[idx]
        return -(d.mT @ (d @ x)) / len(idx)

    oracle = FiniteSumOracle(400, value, grad)
    geo = GrassmannGeometry(15, 3)
    res = StochasticRSDM(8, batch_size=40, step_size=0.3, schedule="inverse", decay_time=300,
                         seed=1, max_iterations=2000, eval_every=2000).run(
        oracle, _x0(15, 3), geo)
    assert float(geo.distance(res.point, top)) < 0.05
    assert res.info["samples"] == 2000 * 40
    # the full batch (B = N) is deterministic RSDM: exact convergence
    full = StochasticRSDM(8, batch_size=400, step_size=0.3, seed=1, max_iterations=1500,
                          eval_every=1500).run(oracle, _x0(15, 3), geo)
    assert float(geo.distance(full.point, top)) < 1e-6
    assert math.isfinite(full.cost)


def test_determinism_and_nan_handling():
    pca = PCAProblem.make(30, 3, top=1.0, seed=4)
    geo, x0 = StiefelGeometry(30, 3), _x0(30, 3)
    a = RSDM(6, seed=11, max_iterations=50, eval_every=10).run(pca.oracle(), x0, geo)
    b = RSDM(6, seed=11, max_iterations=50, eval_every=10).run(pca.oracle(), x0, geo)
    assert torch.equal(a.point, b.point)
    count = {"k": 0}

    def grad(x):
        count["k"] += 1
        g = pca.gradient(x)
        return g * float("nan") if count["k"] > 20 else g

    res = RSDM(6, seed=0, max_iterations=100, eval_every=5).run(
        FunctionOracle(pca.cost, grad), x0, geo)
    assert res.stop_reason.startswith("stopped on non-finite")
    assert bool(torch.isfinite(res.point).all()) and res.iterations < 100


def test_low_precision_reorthonormalises():
    pca = PCAProblem.make(40, 5, top=1.0, seed=5)
    x0 = _x0(40, 5, dtype=torch.float32)
    res = RSDM(10, step_size=3.0, seed=0, max_iterations=2000, eval_every=2000).run(
        QuadraticOracle32(pca), x0, StiefelGeometry(40, 5))
    assert res.point.dtype == torch.float32
    assert res.violation < 1e-5
    assert pca.relative_gap(float(pca.cost(res.point.double()))) < 1e-5


def QuadraticOracle32(pca):  # noqa: N802 - a factory named like the class it builds
    from orthoplug.oracles import QuadraticOracle

    return QuadraticOracle(pca.a.float(), scale=-pca.scale)


@pytest.mark.parametrize("kwargs, match", [
    (dict(r=1), "r must be"), (dict(r=2.5), "r must be"), (dict(r=4, sampling="haar"), "sampling"),
    (dict(r=4, retraction="svd"), "retraction"), (dict(r=4, step_size=0), "step_size"),
    (dict(r=4, step_size=-1.0), "step_size"), (dict(r=4, line_search="wolfe"), "line_search"),
])
def test_option_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RSDM(**kwargs)


@pytest.mark.parametrize("make, match", [
    (lambda: Armijo(contraction=1.5), "contraction"),
    (lambda: Armijo(sufficient_decrease=0.0), "sufficient_decrease"),
    (lambda: Armijo(growth=0.5), "growth"),
    (lambda: PolarSearch(max_backtracks=-1), "max_backtracks"),
    (lambda: RSDM(4, line_search=ArmijoBacktracking(1.0)), "LineSearch object"),
])
def test_line_search_object_errors(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_line_search_objects_are_the_named_rules_and_configure_the_run():
    """A name is the rule with its defaults (equal iterates); an object's options reach the
    run's backtracking (``info["line_search_options"]``); ``Armijo(growth=γ)`` grows the first
    trial by γ after a first-trial acceptance."""
    pca = PCAProblem.make(30, 4, seed=1)
    geo, x0 = StiefelGeometry(30, 4), _x0(30, 4)

    def run(search):
        return RSDM(8, line_search=search, seed=0, max_iterations=40, eval_every=40).run(
            pca.oracle(), x0, geo)

    for name, rule in (("armijo", Armijo()), ("polar", PolarSearch())):
        a, b = run(name), run(rule)
        assert torch.equal(a.point, b.point) and a.info["step_rule"] == name
        assert b.info["line_search_options"] == rule.options()
    grown = run(Armijo(growth=2.0))
    assert grown.info["line_search_options"]["growth"] == 2.0
    assert not torch.equal(grown.point, run("armijo").point)
    assert Armijo(growth=2.0).backtracking(1.0).growth == 2.0


def test_run_errors():
    pca = PCAProblem.make(10, 2, seed=0)
    with pytest.raises(ValueError, match="exceeds n"):
        RSDM(11).run(pca.oracle(), _x0(10, 2), StiefelGeometry(10, 2))
    from orthoplug.geometry.manifolds import JOrthogonalGeometry

    with pytest.raises(ValueError, match="supports Stiefel"):
        RSDM(2).run(pca.oracle(), torch.eye(10, dtype=F64)[:, :10], JOrthogonalGeometry(10, 5))
    with pytest.raises(ValueError, match="StochasticOracle or a FiniteSumOracle"):
        StochasticRSDM(4).run(pca.oracle(), _x0(10, 2), StiefelGeometry(10, 2))
    with pytest.raises(ValueError, match="no line search"):
        StochasticRSDM(4, line_search="armijo")
    with pytest.raises(ValueError, match="batch_size"):
        StochasticRSDM(4, batch_size=0)


# ---------------------------------------------------------------------------------------------
# front-ends
# ---------------------------------------------------------------------------------------------


def test_pymanopt_frontend_stiefel_grassmann_so():
    import autograd.numpy as anp
    import pymanopt
    from pymanopt.manifolds import Grassmann, SpecialOrthogonalGroup, Sphere, Stiefel

    from orthoplug.adapters.pymanopt import RSDM as PymanoptRSDM

    pca = PCAProblem.make(30, 4, top=1.0, seed=6)
    a = pca.a.numpy()
    for manifold in (Stiefel(30, 4), Grassmann(30, 4)):
        @pymanopt.function.autograd(manifold)
        def cost(x):
            return -0.5 * anp.trace(x.T @ a @ x)

        problem = pymanopt.Problem(manifold, cost)
        opt = PymanoptRSDM(r=10, step_size=3.0, max_iterations=1500, seed=0, eval_every=100,
                           min_gradient_norm=1e-9)
        result = opt.run(problem, initial_point=_x0(30, 4).numpy())
        assert pca.relative_gap(result.cost) < 1e-10
        assert result.violation < 1e-12
    # SO(n) = St(n, n) with det +1: Procrustes over rotations
    n = 8
    target = qf(torch.randn(n, n, dtype=F64, generator=_gen(9))).numpy()
    if np.linalg.det(target) < 0:
        target[:, 0] *= -1
    so = SpecialOrthogonalGroup(n)

    @pymanopt.function.autograd(so)
    def dist(x):
        return anp.sum((x - target) ** 2)

    res = PymanoptRSDM(r=4, sampling="orthogonal", line_search="armijo", max_iterations=800,
                       seed=1, eval_every=50, min_gradient_norm=1e-10).run(
        pymanopt.Problem(so, dist), initial_point=np.eye(n))
    assert np.linalg.det(res.point) == pytest.approx(1.0, abs=1e-12)
    assert np.abs(res.point - target).max() < 1e-8
    sphere = Sphere(5)

    @pymanopt.function.autograd(sphere)
    def linear(x):
        return anp.sum(x)

    with pytest.raises(ValueError, match="unsupported manifold|does not support"):
        PymanoptRSDM(r=2).run(pymanopt.Problem(sphere, linear))
    with pytest.raises(ValueError, match="sampling"):
        PymanoptRSDM(r=4, sampling="random")


def test_pymanopt_frontend_partial_oracle_and_stochastic():
    from orthoplug.adapters.pymanopt import RSDM as PymanoptRSDM

    pca = PCAProblem.make(50, 5, top=1.0, seed=7)
    problem = pca.pymanopt_problem()
    res = PymanoptRSDM(r=20, step_size=4.0, max_iterations=3000, seed=0, eval_every=50,
                       min_gradient_norm=1e-8).run(problem, initial_point=_x0(50, 5).numpy(),
                                                   oracle=pca.oracle())
    assert pca.relative_gap(res.cost) < 1e-10
    assert res.solver_result.info["row_gradient_evaluations"] == 3 * res.iterations  # ⌈n/r⌉
    st = PymanoptRSDM(r=10, batch_size=64, step_size=1.0, max_iterations=200, seed=0).run(
        problem, initial_point=_x0(50, 5).numpy(), oracle=pca.stochastic_oracle())
    assert st.solver_result.info["samples"] == 200 * 64
    assert st.cost < float(pca.cost(_x0(50, 5)))


def test_geoopt_rsdm_batched_and_equivalent_to_sgd_elsewhere():
    import geoopt

    from orthoplug.adapters.geoopt import RSDM as GeooptRSDM

    pca = PCAProblem.from_spectrum([3.0, 2.0, 1.5] + [0.1] * 21, 3, seed=8)
    # one matrix: the same slices and iterates as the solver with the same seed
    w = geoopt.ManifoldParameter(_x0(24, 3), manifold=geoopt.EuclideanStiefel())
    opt = GeooptRSDM([w], lr=1.0, r=8, seed=5)
    for _ in range(99):  # one slice per step; the solver's iteration: n/r = 3 slices
        opt.zero_grad()
        pca.cost(w).backward()
        opt.step()
    ref = RSDM(8, step_size=1.0, seed=5, max_iterations=33).run(
        pca.oracle(), _x0(24, 3), StiefelGeometry(24, 3))
    assert torch.allclose(w.detach(), ref.point, atol=1e-10)
    for manifold, sampling in ((geoopt.Stiefel(), "permutation"),
                               (geoopt.EuclideanStiefel(), "orthogonal"),
                               (geoopt.CanonicalStiefel(), "permutation")):
        w = geoopt.ManifoldParameter(_x0(24, 3).expand(4, 24, 3).clone(), manifold=manifold)
        opt = GeooptRSDM([w], lr=1.0, r=8, sampling=sampling, seed=0)
        for k in range(300):
            opt.zero_grad()
            pca.cost(w).backward()  # summed over the batch: each matrix its own problem
            opt.step()
            if k == 0:  # one independent slice per matrix
                assert not torch.equal(w[0], w[1])
        for k in range(4):
            assert pca.relative_gap(float(pca.cost(w[k].detach()))) < 1e-9
    # non-manifold parameters: exactly RiemannianSGD (momentum, Nesterov, weight decay)
    a0 = torch.randn(5, 4, dtype=F64, generator=_gen(1))
    params = []
    for cls in (GeooptRSDM, geoopt.optim.RiemannianSGD):
        p = torch.nn.Parameter(a0.clone())
        kw = dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
        opt = cls([p], r=2, **kw) if cls is GeooptRSDM else cls([p], **kw)
        for _ in range(5):
            opt.zero_grad()
            ((p - 1.0) ** 2 * (1.0 + a0 ** 2)).sum().backward()
            opt.step()
        params.append(p.detach())
    assert torch.equal(params[0], params[1])


def test_geoopt_rsdm_state_dict_round_trip_and_errors():
    import geoopt

    from orthoplug.adapters.geoopt import RSDM as GeooptRSDM

    pca = PCAProblem.make(20, 3, top=1.0, seed=9)

    def steps(opt, w, k):
        for _ in range(k):
            opt.zero_grad()
            pca.cost(w).backward()
            opt.step()

    manifold = geoopt.EuclideanStiefel()
    w = geoopt.ManifoldParameter(_x0(20, 3), manifold=manifold)
    opt = GeooptRSDM([w], lr=2.0, r=6, seed=3)
    steps(opt, w, 10)
    saved_w, saved = w.detach().clone(), opt.state_dict()
    steps(opt, w, 10)
    reference = w.detach().clone()
    w2 = geoopt.ManifoldParameter(saved_w.clone(), manifold=manifold)
    opt2 = GeooptRSDM([w2], lr=2.0, r=6, seed=99)
    opt2.load_state_dict(saved)
    steps(opt2, w2, 10)
    assert torch.equal(w2.detach(), reference)
    # a generator state that torch.load(map_location=...) turned into another tensor type is
    # still restored (set_state takes a CPU ByteTensor only)
    moved = {**saved, "orthoplug": {**saved["orthoplug"],
                                    "generator": saved["orthoplug"]["generator"].float()}}
    w3 = geoopt.ManifoldParameter(saved_w.clone(), manifold=manifold)
    opt3 = GeooptRSDM([w3], lr=2.0, r=6, seed=99)
    opt3.load_state_dict(moved)
    steps(opt3, w3, 10)
    assert torch.equal(w3.detach(), reference)
    with pytest.raises(ValueError, match="exceeds n"):
        GeooptRSDM([w], lr=1.0, r=21)
    with pytest.raises(ValueError, match="r must be"):
        GeooptRSDM([w], lr=1.0, r=1)
    with pytest.raises(ValueError, match="lr"):
        GeooptRSDM([w], lr=-1.0, r=4)
    sphere = geoopt.ManifoldParameter(torch.tensor([1.0, 0.0]), manifold=geoopt.Sphere())
    with pytest.raises(ValueError, match="supports Stiefel"):
        GeooptRSDM([sphere], lr=1.0, r=2)


def test_orthogonal_mlp_on_digits_reaches_95_percent():
    """2 Stiefel hidden layers (St(128, 64), St(128, 128)), batch 16, 10 epochs, seed 0.
    RSDM-P (r = 64, lr 0.05) must reach ≥ 95 % test accuracy; RiemannianSGD (lr 0.02, the
    best of {0.02, 0.05, 0.2} in our runs) is trained in the same run for comparison."""
    rsdm = train_orthonet("RSDM", epochs=10, lr=0.05, r=64, seed=0)
    rsgd = train_orthonet("RiemannianSGD", epochs=10, lr=0.02, seed=0)
    print(f"\ndigits test accuracy: RSDM-P {rsdm.accuracy:.4f}, "
          f"RiemannianSGD {rsgd.accuracy:.4f}")
    assert rsdm.accuracy >= 0.95
    assert rsdm.violation < 1e-4



# ---------------------------------------------------------------------------------------------
# default step rule on unscaled instances (issue #18)
# ---------------------------------------------------------------------------------------------

UNSCALED = (1e-2, 1e2)


def _unscaled_problems(scale):
    """St(100, 30): PCA with ‖A‖ = scale (condition 100), and Procrustes with A Gaussian × scale
    (s = 1: no 1/(2p) normalisation); both with their closed forms."""
    pca = PCAProblem.make(100, 30, top=scale, cond=100.0, seed=0)
    g = _gen(3)
    pr = ProcrustesProblem(scale * torch.randn(30, 30, dtype=F64, generator=g),
                           torch.randn(100, 30, dtype=F64, generator=g), scale=1.0)
    return (("pca", pca, pca.oracle()), ("procrustes", pr, pr.oracle("linear")))


def _samplings(scale):
    """Samplings for (PCA, Procrustes) at ``scale``: across UNSCALED each problem gets both."""
    return ("permutation", "orthogonal") if scale < 1 else ("orthogonal", "permutation")


@pytest.mark.parametrize("scale", UNSCALED)
@pytest.mark.parametrize("sampling", ["permutation", "orthogonal"])
@pytest.mark.parametrize("line_search", [None, "polar"])
def test_default_step_reaches_closed_forms_unscaled(scale, sampling, line_search):
    """No step given: the default rule (Armijo here, r = 60 > p = 30) or the polar step, with
    memory; both problems to a 1e-8 gap at ‖A‖ = 1e-2 and 1e2."""
    geo = StiefelGeometry(100, 30)
    for name, problem, oracle in _unscaled_problems(scale):
        res = RSDM(60, sampling=sampling, line_search=line_search, seed=0, max_iterations=6000,
                   eval_every=20, target_cost=problem.target(1e-9)).run(oracle, _x0(100, 30), geo)
        assert res.info["step_rule"] == (line_search or "armijo")
        assert problem.relative_gap(float(problem.cost(res.point))) <= 1e-8, (name, res)
        assert res.violation <= 1e-12


@pytest.mark.parametrize("scale", UNSCALED)
def test_default_step_pymanopt_frontend_unscaled(scale):
    from orthoplug.adapters.pymanopt import RSDM as PymanoptRSDM

    for (name, problem, _), sampling in zip(_unscaled_problems(scale), _samplings(scale),
                                            strict=True):
        pym = (problem.pymanopt_problem() if name == "pca"
               else problem.pymanopt_problem(form="linear"))
        res = PymanoptRSDM(r=60, sampling=sampling, max_iterations=6000, min_gradient_norm=0.0,
                           seed=1, eval_every=20, target_cost=problem.target(1e-9)).run(
            pym, initial_point=_x0(100, 30).numpy())
        assert problem.relative_gap(float(problem.cost(torch.from_numpy(res.point)))) <= 1e-8
        assert res.violation <= 1e-12


@pytest.mark.parametrize("scale", UNSCALED)
def test_default_step_geoopt_frontend_unscaled(scale):
    """geoopt drop-in with lr=None: the default rule on the closure's loss (Armijo here,
    r = 60 > p = 30) reaches both closed forms."""
    import geoopt

    from orthoplug.adapters.geoopt import RSDM as GeooptRSDM

    for (name, problem, _), sampling in zip(_unscaled_problems(scale), _samplings(scale),
                                            strict=True):
        cost = problem.cost if name == "pca" else problem.linear_cost
        w = geoopt.ManifoldParameter(_x0(100, 30), manifold=geoopt.EuclideanStiefel())
        opt = GeooptRSDM([w], r=60, sampling=sampling, seed=2)

        def closure(w=w, opt=opt, cost=cost):
            opt.zero_grad()
            loss = cost(w)
            loss.backward()
            return loss

        for _ in range(3000):
            loss = opt.step(closure)
            if problem.relative_gap(float(loss.detach())) <= 1e-9:
                break
        assert problem.relative_gap(float(problem.cost(w.detach()))) <= 1e-8, (name, sampling)
        assert float(StiefelGeometry(100, 30).violation(w.detach())) <= 1e-12


def test_fixed_step_without_progress_warns_and_armijo_does_not():
    """The issue's stall: a unit step on an unscaled Procrustes instance (‖A‖ ≈ 1e2·√30)."""
    _, (_, pr, oracle) = _unscaled_problems(1e2)
    geo = StiefelGeometry(100, 30)
    with pytest.warns(RuntimeWarning, match=r"fixed step_size=1 made no progress"):
        res = RSDM(30, step_size=1.0, seed=0, max_iterations=400, eval_every=20).run(
            oracle, _x0(100, 30), geo)
    assert pr.relative_gap(res.cost) > 1e-3  # it did stall
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        small = RSDM(30, step_size=1e-4, seed=0, max_iterations=400, eval_every=20).run(
            oracle, _x0(100, 30), geo)  # a small step makes progress: no warning
        assert small.cost < res.cost


def test_polar_step_is_the_exact_block_minimiser_on_a_linear_cost():
    """line_search='polar' on F = s(c − 2⟨X, M⟩): with a huge first η, one step attains the
    block optimum max_{Y ∈ O(r)} ⟨M_B, Y X_B⟩ = ‖M_B X_Bᵀ‖_* (nuclear norm), and the method
    reaches the closed forms of PCA and Procrustes."""
    pr = ProcrustesProblem.make(40, 6, seed=4)
    x0, geo = _x0(40, 6), StiefelGeometry(40, 6)
    solver = RSDM(10, line_search="polar", step_size=1e12, seed=0)
    tracker = pr.oracle("linear").track(x0)
    gen = _gen(5)
    run = Run(tracker.oracle, tracker, geo, gen)
    solver.setup(run)
    rows = sample_rows(40, 10, generator=_gen(5))  # the rows the step will draw
    solver.step(run)
    m_b, c = pr.m[rows], x0[rows]
    best = float(torch.linalg.matrix_norm(m_b @ c.mT, ord="nuc"))
    gain = float((m_b * tracker.x[rows]).sum() - (m_b * c).sum())
    assert gain == pytest.approx(best - float((m_b * c).sum()), rel=1e-10)
    assert torch.equal(tracker.x[_complement(rows, 40)], x0[_complement(rows, 40)])
    for name, problem, oracle in _unscaled_problems(1.0):
        res = RSDM(60, line_search="polar", seed=0, max_iterations=6000, eval_every=20,
                   target_cost=problem.target(1e-9)).run(oracle, _x0(100, 30),
                                                         StiefelGeometry(100, 30))
        assert res.info["step_rule"] == "polar"
        assert problem.relative_gap(float(problem.cost(res.point))) <= 1e-8, name
        assert res.violation <= 1e-12
    # the steps are rotations (det Y = +1): on St(8, 8) from I the iterate stays in SO(8)
    sq = ProcrustesProblem.make(8, 8, seed=1)
    res = RSDM(4, line_search="polar", seed=0, max_iterations=300, eval_every=300).run(
        sq.oracle("linear"), torch.eye(8, dtype=F64), StiefelGeometry(8, 8))
    assert float(torch.linalg.det(res.point)) == pytest.approx(1.0, abs=1e-12)
    assert res.cost < float(sq.cost(torch.eye(8, dtype=F64)))



def test_polar_rotation_is_the_maximiser_over_so_r():
    """The polar step's rotation maximises ⟨Y, W⟩ over SO(r): ⟨Y, W⟩ = Σσᵢ when det W > 0 and
    Σσᵢ − 2σ_min when det W < 0 (von Neumann's bound with the sign constraint), Y ∈ SO(r), and
    no random rotation does better. A batch of both signs gives each matrix's rotation."""
    gen = _gen(11)
    for r in (2, 5, 9):
        ws, ys = [], []
        for sign in (1.0, -1.0):
            w = torch.randn(r, r, dtype=F64, generator=gen)
            if float(torch.linalg.det(w)) * sign < 0:
                w[0] = -w[0]
            y = _rotation_polar(w)
            ws.append(w)
            ys.append(y)
            sv = torch.linalg.svdvals(w)
            best = float(sv.sum()) - (2.0 * float(sv[-1]) if sign < 0 else 0.0)
            assert float((y * w).sum()) == pytest.approx(best, rel=1e-12)
            assert float(torch.linalg.det(y)) == pytest.approx(1.0, abs=1e-12)
            assert float((y.mT @ y - torch.eye(r, dtype=F64)).abs().max()) <= 1e-13
            q = qf(torch.randn(200, r, r, dtype=F64, generator=gen))
            q[torch.linalg.det(q) < 0, :, 0] *= -1.0
            assert float((q * w).sum((-2, -1)).max()) <= best + 1e-12
        batched = _rotation_polar(torch.stack(ws))
        assert float((batched - torch.stack(ys)).abs().max()) <= 1e-13


def _with_spectrum(sv, negative, gen):
    """``Q₁ diag(sv) Q₂ᵀ`` with random orthogonal ``Q₁, Q₂`` and ``det(Q₁Q₂ᵀ) = −1`` when
    ``negative`` (else +1): the sign of det W for positive ``sv``."""
    r = sv.shape[0]
    q1, q2 = (qf(torch.randn(r, r, dtype=F64, generator=gen)) for _ in range(2))
    if (float(torch.linalg.det(q1 @ q2.mT)) < 0) != negative:
        q1[:, 0] *= -1.0
    return (q1 * sv) @ q2.mT


def _count_svds(monkeypatch):
    calls = []
    svd = torch.linalg.svd

    def counting(a, *args, **kwargs):
        calls.append(a.shape)
        return svd(a, *args, **kwargs)

    monkeypatch.setattr(torch.linalg, "svd", counting)
    return calls


def test_polar_rotation_without_svd_agrees_with_the_svd(monkeypatch):
    """:func:`_rotation_polar` on random and ill-conditioned matrices of both determinant
    signs: the guard accepts the eigen route (no SVD), the result is a rotation to 1e-13 and
    attains the SO(r) optimum ``Σσᵢ − 2σ_min·[det < 0]`` to 1e-14·r of ``‖W‖_*``, and it is the
    SVD's rotation to 1e-14 + 10ε·κ(W), the conditioning both routes share (the uncorrected
    ``WVΣ⁻¹Vᵀ``, off by ε·κ(W)², and the uncorrected flip direction miss it at κ = 1e4). A
    batch gives each matrix's rotation."""
    calls = _count_svds(monkeypatch)
    gen = _gen(12)
    ws = []
    for r in (2, 7, 60, 150):
        for kappa in (1.0, 1e2, 1e4):
            for negative in (False, True):
                sv = torch.logspace(0, -math.log10(kappa), r, dtype=F64) if kappa > 1 else (
                    torch.rand(r, dtype=F64, generator=gen) + 0.5)
                w = 3.0 * _with_spectrum(sv, negative, gen)
                y = _rotation_polar(w)
                nuclear = 3.0 * float(sv.sum())
                best = nuclear - (6.0 * float(sv.min()) if negative else 0.0)
                assert float(torch.linalg.det(y)) == pytest.approx(1.0, abs=1e-12)
                assert float((y.mT @ y - torch.eye(r, dtype=F64)).abs().max()) <= 1e-13
                assert abs(float((y * w).sum()) - best) <= 1e-14 * nuclear * r
                tol = 1e-14 + 10 * torch.finfo(F64).eps * kappa
                assert float((y - _rotation_polar_svd(w)).abs().max()) <= tol, (r, kappa)
                if r == 60:
                    ws.append((w, y))
    assert len(calls) == 4 * 3 * 2  # the references' only: the guard accepted every one
    batched = _rotation_polar(torch.stack([w for w, _ in ws]))
    assert float((batched - torch.stack([y for _, y in ws])).abs().max()) <= 1e-13


def test_polar_rotation_falls_back_to_the_svd_when_the_guard_refuses(monkeypatch):
    """κ(W) = 1e12 (WᵀW's small eigenvalues at ε·λ_max), exact rank deficiency (the polar
    factor is not unique), W = 0, and det < 0 with the two smallest singular values equal
    (the flipped direction is not unique): the guard refuses, and the rotation is the SVD's
    (to 1e-15: the same SVD, a product that may round differently in a batch); in a batch
    with accepted matrices only the refused ones take the SVD, and each result is the single
    matrix's. float32 input runs in float64 and is returned in float32."""
    calls = _count_svds(monkeypatch)
    gen = _gen(13)
    r = 40
    sv = torch.logspace(0, -12, r, dtype=F64)
    deficient = torch.logspace(0, -2, r, dtype=F64)
    deficient[-3:] = 0.0
    tied = torch.logspace(0, -2, r, dtype=F64)
    tied[-1] = tied[-2]
    refused = [_with_spectrum(sv, False, gen), _with_spectrum(sv, True, gen),
               _with_spectrum(deficient, False, gen), torch.zeros(r, r, dtype=F64),
               _with_spectrum(tied, True, gen)]
    for w in refused:
        before = len(calls)
        assert float((_rotation_polar(w) - _rotation_polar_svd(w)).abs().max()) <= 1e-15
        assert len(calls) == before + 2  # the fallback's and the reference's
    accepted = _with_spectrum(torch.rand(r, dtype=F64, generator=gen) + 0.1, False, gen)
    negative = _with_spectrum(torch.rand(r, dtype=F64, generator=gen) + 0.1, True, gen)
    mixed = torch.stack([accepted, refused[0], negative, refused[4]])
    del calls[:]
    out = _rotation_polar(mixed)
    assert calls == [(2, r, r)]  # one SVD, of the two matrices the guard refused
    for got, w in zip(out, mixed, strict=True):
        assert float((got - _rotation_polar(w)).abs().max()) <= 1e-13
    y32 = _rotation_polar(negative.float())
    assert y32.dtype == torch.float32
    assert torch.equal(y32, _rotation_polar(negative.float().double()).float())
    assert float(torch.linalg.det(y32.double())) == pytest.approx(1.0, abs=1e-5)


def test_polar_steps_without_svd_give_the_svd_iterates(monkeypatch):
    """RSDM's polar step with :func:`_rotation_polar` and with the SVD reference in its place:
    the same slices (same seed) and the same accepted trials, so iterates equal to 1e-10
    after 30 iterations, on Procrustes (linear) and PCA."""
    import orthoplug.solvers.rsdm as rsdm_module

    pca, pr = PCAProblem.make(60, 40, seed=3), ProcrustesProblem.make(60, 40, seed=3)
    points = {}
    for route in ("eigen", "svd"):
        if route == "svd":
            monkeypatch.setattr(rsdm_module, "_rotation_polar", _rotation_polar_svd)
        for name, oracle in (("pca", pca.oracle()), ("procrustes", pr.oracle("linear"))):
            res = RSDM(24, line_search="polar", seed=0, max_iterations=30, eval_every=30).run(
                oracle, _x0(60, 40), StiefelGeometry(60, 40))
            assert res.info["step_rule"] == "polar"
            points[name, route] = res.point
    for name in ("pca", "procrustes"):
        assert float((points[name, "eigen"] - points[name, "svd"]).abs().max()) <= 1e-10
        assert not torch.equal(points[name, "eigen"], _x0(60, 40))


def test_polar_slice_minimises_its_model_which_majorises_a_smooth_cost():
    """:class:`PolarSlice`: the trial Y ∈ SO(r) minimises ``m_η(Y) = ⟨B, Δ⟩ + ‖Δ‖²/(2η)``,
    ``Δ = (Y − I)C``, over SO(r) (no random rotation, and not I, does better); with η = 1/L
    (L = ‖A‖₂, the Lipschitz constant of ∇F for F = −½tr(XᵀAX)) the model majorises the cost,
    F(U(Y)X) ≤ F(X) + m_η(Y) < F(X) (the descent lemma), on 10 slices; a batch of slices gives
    each slice's rotation and the sum of their models."""
    n, p, r = 30, 8, 6
    gen = _gen(21)
    a = torch.randn(n, n, dtype=F64, generator=gen)
    a = a + a.mT
    eta = 1.0 / float(torch.linalg.matrix_norm(a, ord=2))
    x = _x0(n, p, seed=4)

    def f(z):
        return -0.5 * float((z * (a @ z)).sum())

    grad = -(a @ x)
    pieces, trials = [], []
    for _ in range(10):
        rows = torch.randperm(n, generator=gen)[:r]
        b, c = grad[rows], x[rows]
        piece = PolarSlice(b, c)
        y, model = piece.trial(eta)
        assert float(torch.linalg.det(y)) == pytest.approx(1.0, abs=1e-12)
        assert float((y.mT @ y - torch.eye(r, dtype=F64)).abs().max()) <= 1e-13
        q = qf(torch.randn(300, r, r, dtype=F64, generator=gen))
        q[torch.linalg.det(q) < 0, :, 0] *= -1.0
        dq = q @ c - c
        models = (b * dq).sum((-2, -1)) + (dq * dq).sum((-2, -1)) / (2.0 * eta)
        assert model <= float(models.min()) + 1e-12 and model < -1e-3
        moved = x.clone()
        moved[rows] = y @ c
        assert f(moved) <= f(x) + model + 1e-12
        pieces.append((b, c))
        trials.append((y, model))
    batch = PolarSlice(torch.stack([b for b, _ in pieces]), torch.stack([c for _, c in pieces]))
    ys, total = batch.trial(eta)
    assert float((ys - torch.stack([y for y, _ in trials])).abs().max()) <= 1e-12
    assert total == pytest.approx(sum(m for _, m in trials), rel=1e-12)


def _complement(rows, n):
    keep = torch.ones(n, dtype=torch.bool)
    keep[rows] = False
    return keep


# ---------------------------------------------------------------------------------------------
# large n: O(nr + np) memory, the dense reference path, the default r
# ---------------------------------------------------------------------------------------------


def _dense_rsdm(cost, grad, x, r, seed, iterations):
    """RSDM-P with the Armijo rule written with explicit n×n matrices (reference only):
    ``Γ = [P skew(∇F Xᵀ) Pᵀ]_{r×r}``, ``X ← Pᵀ blockdiag(qf(I − ηΓ), I) P X``, the cost
    evaluated in full at every trial, the next first trial ``γη`` after a first-trial
    acceptance."""
    n = x.shape[0]
    gen, eta0 = _gen(seed), 1.0
    for _ in range(iterations):
        rows = sample_rows(n, r, generator=gen)  # the solver's draw: randperm(n)[:r]
        perm = torch.cat([rows, torch.arange(n)[_complement(rows, n)]])
        big_p = torch.eye(n, dtype=F64)[perm]
        gamma = (big_p @ skew(grad(x) @ x.mT) @ big_p.mT)[:r, :r]
        f0, slope, eta = float(cost(x)), float((gamma * gamma).sum()), eta0
        for trial in range(31):
            u = torch.eye(n, dtype=F64)
            u[:r, :r] = qf(torch.eye(r, dtype=F64) - eta * gamma)
            x_new = big_p.mT @ u @ big_p @ x
            if float(cost(x_new)) <= f0 - 1e-4 * eta * slope:
                x, eta0 = x_new, (ARMIJO_GROWTH * eta if trial == 0 else eta)
                break
            eta *= 0.5
        else:
            eta0 = eta
    return x


def test_iterates_equal_the_dense_reference_path():
    """Row updates, slice-priced Armijo trials (quadratic tracker, Procrustes row prices) and
    full evaluations all follow the n×n reference path to 1e-12 (default r = 17, 60 slice steps:
    15 iterations of ⌈n/r⌉ = 4 with gradient rows, 60 without)."""
    n, p, iterations = 60, 20, 60
    r = default_slice_dimension(n, p)
    pca, pr = PCAProblem.make(n, p, seed=3), ProcrustesProblem.make(n, p, seed=3)
    x0 = _x0(n, p, seed=5)
    cases = [(pca.cost, pca.gradient, pca.oracle()),
             (pca.cost, pca.gradient, pca.function_oracle()),
             (pr.linear_cost, pr.linear_gradient, pr.oracle("linear")),
             (pr.cost, pr.gradient, pr.oracle("quadratic"))]
    for cost, grad, oracle in cases:
        per = math.ceil(n / r) if oracle.track(x0).row_gradients else 1
        res = RSDM(line_search="armijo", seed=7, max_iterations=iterations // per,
                   eval_every=iterations).run(oracle, x0, StiefelGeometry(n, p))
        assert res.info["slice_steps"] == iterations and res.info["r"] == r
        reference = _dense_rsdm(cost, grad, x0, r, seed=7, iterations=iterations)
        assert float((reference - x0).abs().max()) > 0.1  # it moved
        assert float((res.point - reference).abs().max()) <= 1e-12, type(oracle).__name__
        assert res.cost == pytest.approx(float(cost(res.point)), rel=1e-12)  # F kept current


def _peak_bytes(fn) -> int:
    """Peak resident memory while ``fn()`` runs, above the resident memory at its start
    (Linux: the peak counter is reset through /proc/self/clear_refs)."""
    if not os.access("/proc/self/clear_refs", os.W_OK):
        pytest.skip("needs Linux's /proc/self/clear_refs to reset the peak RSS")

    def status(field):
        with open("/proc/self/status") as fh:
            return 1024 * int(re.search(rf"{field}:\s+(\d+)", fh.read()).group(1))

    gc.collect()
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    base = status("VmRSS")
    fn()
    return status("VmHWM") - base


@pytest.mark.parametrize("sampling", ["permutation", "orthogonal"])
def test_no_n_by_n_array_when_n_is_much_larger_than_r(sampling):
    """n = 3000 ≫ r, p: building the quadratic oracle and 30 iterations allocate far less than
    one n×n array (72 MB; each is its own mapping, so it would show in the peak): only C itself,
    given by the user, is n×n."""
    n, p = 3000, 8
    low = torch.randn(n, 3, dtype=F64, generator=_gen(0))
    c = low @ low.mT + torch.eye(n, dtype=F64)
    x0 = _x0(n, p)
    out = {}

    def run():
        oracle = QuadraticOracle(c, scale=-0.5)
        out["res"] = RSDM(sampling=sampling, seed=0, max_iterations=30, eval_every=10).run(
            oracle, x0, StiefelGeometry(n, p))

    run()  # the libraries' first-use allocations (BLAS buffers, compiled kernels) are not RSDM's
    peak = _peak_bytes(run)
    assert peak < n * n * 8 / 4, f"peak {peak / 2**20:.1f} MiB"
    assert out["res"].info["r"] == default_slice_dimension(n, p) == 77
    assert out["res"].cost < float(-0.5 * (x0 * (c @ x0)).sum())


def test_default_r_rule_values_and_errors():
    """r = max(2, round(√(np)/2)): values, the floor at 2, and bad shapes named."""
    cases = {(1000, 500): 354, (2000, 200): 316, (2000, 2000): 1000, (60, 20): 17,
             (4, 1): 2, (3, 3): 2, (2, 2): 2}
    for (n, p), r in cases.items():
        assert default_slice_dimension(n, p) == r
        assert 2 <= r <= n
    for n, p in ((1, 1), (5, 6), (5, 0), (5.0, 2)):
        with pytest.raises(ValueError, match="1 <= p <= n"):
            default_slice_dimension(n, p)
    with pytest.raises(ValueError, match="or None"):
        RSDM(r=1)


def test_default_r_is_the_same_in_the_solver_and_both_front_ends():
    """No r given: the core solver, the pymanopt and the geoopt optimizers take the same
    default slice, hence (same seed, same fixed step) the same first iterate, which changes
    exactly r = 17 rows of X ∈ St(60, 20)."""
    import geoopt

    from orthoplug.adapters.geoopt import RSDM as GeooptRSDM
    from orthoplug.adapters.pymanopt import RSDM as PymanoptRSDM

    n, p = 60, 20
    pca = PCAProblem.make(n, p, seed=2)
    x0 = _x0(n, p)
    core = RSDM(step_size=0.5, seed=4, max_iterations=1, eval_every=1).run(
        pca.function_oracle(), x0, StiefelGeometry(n, p))
    pym = PymanoptRSDM(step_size=0.5, seed=4, max_iterations=1, eval_every=1).run(
        pca.pymanopt_problem(), initial_point=x0.numpy().copy())
    w = geoopt.ManifoldParameter(x0.clone(), manifold=geoopt.EuclideanStiefel())
    opt = GeooptRSDM([w], lr=0.5, seed=4)
    w.grad = pca.gradient(x0)
    opt.step()
    changed = (core.point - x0).abs().amax(dim=1) > 0
    assert int(changed.sum()) == default_slice_dimension(n, p) == 17
    assert core.info["r"] == pym.solver_result.info["r"] == 17
    assert torch.allclose(torch.from_numpy(pym.point), core.point, rtol=0, atol=1e-14)
    assert torch.allclose(w.detach(), core.point, rtol=0, atol=1e-14)


def test_armijo_memory_grows_by_its_factor_after_a_first_trial_acceptance():
    """The next first trial is γη after a first-trial acceptance, the accepted η after a
    backtrack; RSDM's Armijo rule uses γ = ARMIJO_GROWTH (both front-ends), its polar step
    doubles; γ < 1 is refused."""
    rule = ArmijoBacktracking(1.0, growth=1.25)
    assert rule.search(lambda eta: True) and rule.step == 1.25
    assert rule.search(lambda eta: eta < 1.0) and rule.step == 0.625 and rule.backtracks == 1
    assert RSDM(line_search="armijo").line_search.backtracking(1.0).growth == ARMIJO_GROWTH
    assert RSDM(line_search="polar").line_search.backtracking(1.0).growth == 2.0
    with pytest.raises(ValueError, match="growth"):
        ArmijoBacktracking(1.0, growth=0.9)
