"""Column (right-action) J-Jacobi for s·tr(XᵀCX) over square O(J), and column-side JOBCD."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import autograd.numpy as anp
import geoopt
import numpy as np
import pymanopt
import pytest
import torch

from orthoplug.adapters import geoopt as go
from orthoplug.adapters import pymanopt as pm
from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry, JOrthogonalGeometry
from orthoplug.kernels.jjacobi import pair_rotation
from orthoplug.oracles import FunctionOracle, QuadraticOracle
from orthoplug.problems.hevp import make_spd, trace_min_certificate
from orthoplug.solvers.jjacobi import ColumnJacobi, ColumnJJacobi, factor_quadratic
from orthoplug.solvers.jobcd import GSJOBCD, JJOBCD
from orthoplug.solvers.sigma_rules import SigmaBacktracking


def _signature(n: int, kind: str) -> list[float]:
    j = [1.0] * (n // 2) + [-1.0] * (n - n // 2)
    return j if kind == "sorted" else list(np.random.default_rng(n).permutation(j))


def _block_cost(v, a, s):
    return s * np.trace(v.T @ a @ v)


# ---- the 2×2 rotation -----------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
def test_mixed_pair_rotation_is_the_exact_minimiser_and_zeroes_the_off_diagonal(seed):
    """For a PD block, V = H(μ) with tanh 2μ = −2a_ij/(a_ii + a_jj) minimises tr(VᵀA_BB V) over
    O(1,1) (brute force over a fine grid of μ and all four components) and makes VᵀA_BB V
    diagonal; for a same-sign pair the Jacobi rotation diagonalises and keeps the trace."""
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((2, 2))
    a = g @ g.T + 0.05 * np.eye(2)
    v = np.array(pair_rotation(a[0, 0], a[1, 1], a[0, 1], True, 1.0, 30.0)).reshape(2, 2)
    j = np.diag([1.0, -1.0])
    assert np.allclose(v.T @ j @ v, j, atol=1e-12)
    b = v.T @ a @ v
    assert abs(b[0, 1]) <= 1e-12 * np.abs(a).max()
    mu = np.linspace(-6, 6, 24001)
    ch, sh = np.cosh(mu), np.sinh(mu)
    best = math.inf
    for e1, e2 in ((1, 1), (1, -1), (-1, 1), (-1, -1)):  # V = diag(e) H(μ), all μ at once
        v_all = np.stack([np.stack([e1 * ch, e1 * sh], -1), np.stack([e2 * sh, e2 * ch], -1)],
                         -2)
        best = min(best, np.einsum("mki,kl,mli->m", v_all, a, v_all).min())
    assert _block_cost(v, a, 1.0) <= best + 1e-12 * best
    # closed form of the minimum: √((a_ii + a_jj)² − 4a_ij²)
    assert np.isclose(np.trace(b), math.sqrt((a[0, 0] + a[1, 1]) ** 2 - 4 * a[0, 1] ** 2))
    q = np.array(pair_rotation(a[0, 0], a[1, 1], a[0, 1], False, 1.0, 30.0)).reshape(2, 2)
    assert np.allclose(q.T @ q, np.eye(2), atol=1e-14)
    d = q.T @ a @ q
    assert abs(d[0, 1]) <= 1e-12 * np.abs(a).max() and np.isclose(np.trace(d), np.trace(a))


@pytest.mark.parametrize(("aii", "ajj", "aij", "s"), [
    (1.0, 1.0, 2.0, 1.0),      # indefinite block: infimum −∞
    (1.0, 1.0, 1.0, 1.0),      # singular, α = |β|: infimum 0, not attained
    (-1.0, -2.0, 0.3, 1.0),    # negative definite block
    (1.0, 2.0, 0.0, -1.0),     # s < 0, diagonal block: still unbounded below
])
def test_mixed_pair_without_a_minimiser_takes_a_bounded_decreasing_step(aii, ajj, aij, s):
    t_max = 2.0
    v = np.array(pair_rotation(aii, ajj, aij, True, s, t_max)).reshape(2, 2)
    a = np.array([[aii, aij], [aij, ajj]])
    j = np.diag([1.0, -1.0])
    assert np.allclose(v.T @ j @ v, j, atol=1e-12)
    assert _block_cost(v, a, s) < _block_cost(np.eye(2), a, s)
    assert np.cosh(np.arcsinh(abs(v[0, 1])) * 2) <= np.cosh(t_max) * (1 + 1e-12)


@pytest.mark.parametrize("indefinite", [False, True])
def test_factor_reproduces_c(indefinite):
    c = make_spd(7, seed=2)
    if indefinite:
        c = c - 1.5 * np.eye(7) * np.linalg.eigvalsh(c).mean()
    g, sig = factor_quadratic(c)
    assert (sig is None) != indefinite
    sig = np.ones(7) if sig is None else sig
    np.testing.assert_allclose(g.T @ (sig[:, None] * g), c, atol=1e-12)


# ---- certificates -----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [50, 200])
@pytest.mark.parametrize("kind", ["sorted", "unsorted"])
def test_column_sweeps_reach_the_certificate(n, kind):
    """Column J-Jacobi (cyclic by default) on square O(J) with a quadratic oracle: the sweeps reach
    Σ|λ(JC)| to 1e-10 relative, feasible to 1e-10 relative, f non-increasing per sweep, and
    stop by themselves once a cyclic sweep rotates nothing."""
    j = _signature(n, kind)
    geo = JOrthogonalGeometry(n, signature=j)
    c = torch.from_numpy(make_spd(n, seed=n))
    cert = trace_min_certificate(c.numpy(), geo.j)
    x0 = geo.random_point(generator=torch.Generator().manual_seed(0))
    res = ColumnJJacobi(seed=0, max_iterations=60).run(QuadraticOracle(c), x0, geo)
    assert res.info["pairs"] == "cyclic"
    assert res.stop_reason.startswith("converged"), res.stop_reason
    assert abs(res.cost - cert) <= 1e-10 * cert
    assert geo.relative_violation(res.point) <= 1e-10
    costs = np.asarray(res.history["cost"])
    assert np.all(np.diff(costs) <= 1e-13 * costs[0])
    assert res.iterations <= 15  # quadratic convergence: a handful of sweeps


@pytest.mark.parametrize("pairs", ["random", "greedy"])
def test_random_and_greedy_orders_reach_the_certificate(pairs):
    n = 40
    geo = JOrthogonalGeometry(n, signature=_signature(n, "unsorted"))
    c = torch.from_numpy(make_spd(n, seed=5))
    cert = trace_min_certificate(c.numpy(), geo.j)
    res = ColumnJJacobi(pairs=pairs, seed=1, max_iterations=200,
                        target_cost=cert * (1 + 1e-11)).run(
        QuadraticOracle(c), torch.eye(n, dtype=torch.float64), geo)
    assert abs(res.cost - cert) <= 1e-10 * cert, res.stop_reason
    assert geo.relative_violation(res.point) <= 1e-10
    assert np.all(np.diff(res.history["cost"]) <= 1e-13 * cert)


def test_negative_scale_is_a_maximisation_of_the_trace_that_moves_monotonically():
    """s < 0: f = −tr(XᵀCX) is unbounded below over O(J); every column step decreases f."""
    n = 8
    geo = JOrthogonalGeometry(n, 4)
    c = torch.from_numpy(make_spd(n, seed=1))
    res = ColumnJJacobi(seed=0, max_iterations=3, max_boost=1.0).run(
        QuadraticOracle(c, scale=-1.0), torch.eye(n, dtype=torch.float64), geo)
    assert res.info["max_boost"] == 1.0 and res.iterations == 3
    assert np.all(np.diff(res.history["cost"]) < 0)
    assert geo.relative_violation(res.point) <= 1e-12


def test_without_jit_the_same_kernel_gives_the_same_iterates():
    """NUMBA_DISABLE_JIT=1 runs the kernels as Python: same sweeps, same point."""
    script = (
        "import json, numpy as np, torch\n"
        "from orthoplug.solvers.jjacobi import ColumnJacobi\n"
        "from orthoplug.problems.hevp import make_spd\n"
        "c = make_spd(9, seed=3); j = [1, -1, 1, 1, -1, -1, 1, -1, 1]\n"
        "x = np.eye(9); g = torch.Generator().manual_seed(0)\n"
        "for order in ('cyclic', 'random', 'greedy'):\n"
        "    e = ColumnJacobi(c, 1.0, j, order=order, candidates=3)\n"
        "    for _ in range(2):\n"
        "        x = e.sweep(x, g)\n"
        "print(json.dumps(x.ravel().tolist()))\n")
    out = {}
    for jit in ("0", "1"):
        env = {**os.environ, "NUMBA_DISABLE_JIT": jit}
        run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                             text=True, check=True)
        out[jit] = np.array(json.loads(run.stdout))
    np.testing.assert_allclose(out["0"], out["1"], rtol=1e-12, atol=1e-12)


# ---- front-ends -------------------------------------------------------------------------------


@pytest.mark.parametrize("pairs", ["cyclic", "random", "greedy"])
def test_same_seed_same_iterates_in_both_front_ends(pairs):
    n = 10
    c = make_spd(n, seed=4)
    manifold_pm = pm.JOrthogonal(n, signature=_signature(n, "unsorted"))
    x0 = manifold_pm.geometry.random_point(generator=torch.Generator().manual_seed(2))

    @pymanopt.function.autograd(manifold_pm)
    def cost(x):
        return anp.trace(x.T @ c @ x)

    problem = pymanopt.Problem(manifold_pm, cost)
    res = pm.ColumnJJacobi(max_iterations=2, seed=7, pairs=pairs, min_gradient_norm=0.0).run(
        problem, initial_point=x0.numpy(), oracle=QuadraticOracle(torch.from_numpy(c)))
    manifold_go = go.JOrthogonal(n, signature=_signature(n, "unsorted"))
    x = geoopt.ManifoldParameter(x0.clone(), manifold=manifold_go)
    opt = go.ColumnJJacobi([x], c=c, pairs=pairs, seed=7)
    for _ in range(2):
        opt.step()
    np.testing.assert_array_equal(res.point, x.detach().numpy())
    assert res.cost < float(np.trace(x0.numpy().T @ c @ x0.numpy()))


def test_generic_column_steps_same_iterates_in_both_front_ends():
    """J-JOBCD on columns (a matching of the columns, scalar curvature with known σ) on a
    generic (function) oracle: the orthoplug solver and the geoopt optimizer agree."""
    n = 8
    c = torch.from_numpy(make_spd(n, seed=6))
    geo = JOrthogonalGeometry(n, 4)
    x0 = geo.random_point(generator=torch.Generator().manual_seed(3))
    sigma = QuadraticOracle(c).lipschitz
    oracle = FunctionOracle(lambda x: (x * (c @ x)).sum(), lambda x: 2.0 * (c @ x))
    res = JJOBCD(side="column", sigma_rule=sigma, seed=5, max_iterations=20).run(oracle, x0, geo)
    manifold = go.JOrthogonal(n, 4)
    x = geoopt.ManifoldParameter(x0.clone(), manifold=manifold)
    opt = go.JJOBCD([x], sigma_rule=sigma, seed=5, side="column")

    def closure():
        opt.zero_grad()
        loss = (x * (c @ x)).sum()
        loss.backward()
        return loss

    for _ in range(20):
        opt.step(closure)
    torch.testing.assert_close(res.point, x.detach(), rtol=1e-12, atol=1e-12)
    assert res.cost < float(oracle.value(x0))
    assert geo.relative_violation(res.point) <= 1e-12


@pytest.mark.parametrize("solver", ["GS", "J"])
def test_generic_column_steps_are_monotone_and_feasible(solver):
    """Column steps with the scalar majoriser (σ estimated, backtracking) on a cost that is not
    s·tr(XᵀCX): f = tr(XᵀCXD) with D ≠ I, which the J-Jacobi path does not cover."""
    n = 8
    geo = JOrthogonalGeometry(n, signature=_signature(n, "unsorted"))
    c = torch.from_numpy(make_spd(n, seed=7))
    d = torch.from_numpy(make_spd(n, seed=8))
    oracle = QuadraticOracle(c, d)
    make = GSJOBCD if solver == "GS" else JJOBCD
    res = make(side="column", seed=0, max_iterations=300, eval_every=1).run(
        oracle, geo.random_point(generator=torch.Generator().manual_seed(0)), geo)
    assert res.info["side"] == "column"
    costs = np.asarray(res.history["cost"])
    assert np.all(np.diff(costs) <= 1e-12 * abs(costs[0]))
    assert costs[-1] < 0.9 * costs[0]
    assert geo.relative_violation(res.point) <= 1e-10


def test_column_side_errors():
    geo = IndefiniteStiefelGeometry(6, 3, 3, 2)
    c = torch.from_numpy(make_spd(6, seed=0))
    x0 = geo.random_point(generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="square X"):
        GSJOBCD(side="column").run(QuadraticOracle(c), x0, geo)
    with pytest.raises(ValueError, match="greedy"):  # no kernel for scalar-curvature row pairs
        GSJOBCD(pairs="greedy", curvature="scalar").run(QuadraticOracle(c), x0, geo)
    with pytest.raises(ValueError, match="side must be"):
        JJOBCD(side="diagonal")
    with pytest.raises(ValueError, match="J has 3 entries"):
        ColumnJacobi(make_spd(4), 1.0, [1, -1, 1])
    with pytest.raises(ValueError, match="pairs .the sweep order. must be"):
        ColumnJacobi(make_spd(4), 1.0, [1, -1, 1, -1], order="sweep")
    with pytest.raises(ValueError, match="square matrices"):
        go.JJOBCD([geoopt.ManifoldParameter(x0, manifold=go.IndefiniteStiefel(6, 3, 3, 2))],
                  side="column")


# ---- adaptive σ -------------------------------------------------------------------------------


def _quartic_oracle(c):
    """A non-quadratic cost: f = tr(XᵀCX) + 0.1·Σ (XᵀCX)_ii² (no known Lipschitz constant)."""
    def value(x):
        a = x.mT @ c @ x
        return torch.diagonal(a).sum() + 0.1 * (torch.diagonal(a) ** 2).sum()

    def gradient(x):
        a = x.mT @ c @ x
        return 2.0 * (c @ x) * (1.0 + 0.2 * torch.diagonal(a))[None, :]

    return FunctionOracle(value, gradient)


@pytest.mark.parametrize("solver", ["GS", "J"])
@pytest.mark.parametrize("side", ["row", "column"])
def test_adaptive_sigma_keeps_the_cost_non_increasing_at_every_evaluation(solver, side):
    n = 8
    geo = JOrthogonalGeometry(n, signature=_signature(n, "unsorted"))
    c = torch.from_numpy(make_spd(n, seed=9))
    oracle = _quartic_oracle(c)
    x0 = geo.random_point(generator=torch.Generator().manual_seed(1))
    # the gradient formula is right (central differences along a random direction)
    e = torch.randn(n, n, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    fd = (oracle.value(x0 + 1e-6 * e) - oracle.value(x0 - 1e-6 * e)) / 2e-6
    assert abs(float(fd) - float((oracle.gradient(x0) * e).sum())) <= 1e-6 * abs(float(fd))
    make = GSJOBCD if solver == "GS" else JJOBCD
    res = make(side=side, sigma_rule=SigmaBacktracking(shrink=0.5), seed=0, max_iterations=400,
               eval_every=1).run(
        oracle, x0, geo)
    costs = np.asarray(res.history["cost"])
    assert np.all(np.diff(costs) <= 1e-12 * abs(costs[0]))
    assert costs[-1] < costs[0] and res.info["backtracks"] > 0  # σ went down and came back up
    assert geo.relative_violation(res.point) <= 1e-10


def test_adaptive_sigma_in_the_geoopt_optimizer_is_monotone():
    n = 6
    manifold = go.JOrthogonal(n, 3)
    c = torch.from_numpy(make_spd(n, seed=3))
    x = geoopt.ManifoldParameter(manifold.random(n, n, dtype=torch.float64,
                                                 generator=torch.Generator().manual_seed(0)),
                                 manifold=manifold)
    opt = go.JJOBCD([x], seed=0, sigma_rule=SigmaBacktracking(shrink=0.5), side="column")

    def closure():
        opt.zero_grad()
        loss = (x * (c @ x)).sum()
        loss.backward()
        return loss

    losses = [float(opt.step(closure).detach()) for _ in range(300)]
    assert all(b <= a + 1e-12 * abs(a) for a, b in zip(losses[:-1], losses[1:], strict=True))
    assert losses[-1] < 0.9 * losses[0]
    with pytest.raises(ValueError, match="shrink must be in"):
        go.JJOBCD([x], sigma_rule=SigmaBacktracking(shrink=1.5))
    with pytest.raises(ValueError, match="shrink must be in"):
        JJOBCD(sigma_rule=SigmaBacktracking(shrink=0.0))


def test_float32_sweeps_converge_and_stop():
    """The default threshold follows the dtype: float32 sweeps stop as converged (a 1e-12
    threshold would never be met in float32)."""
    n = 7
    geo = JOrthogonalGeometry(n, signature=_signature(n, "unsorted"))
    c = make_spd(n, seed=7)
    cert = trace_min_certificate(c, geo.j)
    res = ColumnJJacobi(seed=0, max_iterations=100).run(
        QuadraticOracle(torch.from_numpy(c).float()), torch.eye(n), geo)
    assert res.stop_reason.startswith("converged") and res.iterations < 20
    assert abs(res.cost - cert) <= 1e-5 * cert


def test_singular_psd_c_stays_monotone_and_stops():
    """C ⪰ 0 of rank 3 (n = 6): blocks without a minimiser take bounded steps; the run keeps f
    non-increasing and stops by itself (converged, or a sweep that rounding made increase f)."""
    n = 6
    geo = JOrthogonalGeometry(n, 3)
    d = np.random.default_rng(0).standard_normal((3, n))
    res = ColumnJJacobi(seed=0, max_iterations=200).run(
        QuadraticOracle(torch.from_numpy(d.T @ d)), torch.eye(n, dtype=torch.float64), geo)
    costs = np.asarray(res.history["cost"])
    assert np.all(np.diff(costs) <= 1e-11 * costs[0]) and costs[-1] < costs[0]
    assert res.iterations < 200 and res.stop_reason.startswith(("converged", "stopped"))
    assert geo.relative_violation(res.point) <= 1e-10
