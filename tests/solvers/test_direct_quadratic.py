"""The direct solve of ``min tr(XᵀCXD)``, ``C ≻ 0``, over O(J) and the indefinite Stiefel set.

Certificates are checked against eigenvalues of ``JC`` computed independently (the nonsymmetric
``np.linalg.eigvals``), minimisers against random feasible points, against local perturbations
and, for weighted costs, against every assignment of eigenvectors to columns.
"""

from __future__ import annotations

import itertools

import numpy as np
import pymanopt
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch

from orthoplug import FunctionOracle, QuadraticOracle, registry
from orthoplug.adapters.pymanopt import HyperbolicEig, IndefiniteStiefel, JOrthogonal
from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry, JOrthogonalGeometry
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.linalg import hyperbolic_trace_min, trace_min_certificate
from orthoplug.problems import hevp
from orthoplug.problems.hevp import make_banded_spd, make_spd
from orthoplug.solvers.hyperbolic import HyperbolicEig as HyperbolicEigSolver


def _shuffled(plus: int, minus: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).permutation([1.0] * plus + [-1.0] * minus)


def _independent_certificate(c: np.ndarray, j: np.ndarray, kp: int, km: int) -> float:
    """Sum of the kp smallest positive and km smallest |negative| eigenvalues of JC (eigvals)."""
    lam = np.sort(np.linalg.eigvals(j[:, None] * c).real)
    return float(lam[lam > 0][:kp].sum() - lam[lam < 0][::-1][:km].sum())


def _relative_violation(x: np.ndarray, j: np.ndarray, jk: np.ndarray) -> float:
    return float(np.linalg.norm(x.T @ (j[:, None] * x) - np.diag(jk)) / np.sum(x * x))


def _cost(c, x, d=None):
    cx = c @ x
    return float(np.sum(x * cx) if d is None else np.sum(x * cx * d))


# ---- dense: certificates, feasibility, optimality --------------------------------------------

CASES = [  # (n, p, k_plus, k_minus): p > q and p < q, tall and square-ish
    (50, 35, 7, 3), (50, 15, 3, 9), (41, 20, 20, 21), (12, 4, 2, 8), (30, 29, 5, 1),
]


@pytest.mark.parametrize("n,p,kp,km", CASES)
def test_rectangular_minimiser_reaches_the_certificate_with_unsorted_signatures(n, p, kp, km):
    c = make_spd(n, seed=n + p)
    j, jk = _shuffled(p, n - p, seed=1), _shuffled(kp, km, seed=2)
    sol = hyperbolic_trace_min(c, j, jk)
    cert = _independent_certificate(c, j, kp, km)
    assert sol.method == "dense" and sol.x.shape == (n, kp + km)
    assert abs(sol.certificate - cert) <= 1e-10 * cert
    assert abs(_cost(c, sol.x) - cert) <= 1e-10 * cert
    assert abs(sol.value - _cost(c, sol.x)) <= 1e-12 * cert
    assert trace_min_certificate(c, j, jk) == pytest.approx(cert, rel=1e-10)
    assert _relative_violation(sol.x, j, jk) <= 1e-12
    # every column is a pencil eigenvector whose J-norm is the column's sign
    theta = sol.eigenvalues
    assert np.all(np.sign(theta) == jk)
    resid = c @ sol.x - theta * (j[:, None] * sol.x)
    assert np.linalg.norm(resid) <= 1e-12 * np.linalg.norm(c @ sol.x)


@pytest.mark.parametrize("p", [3, 9])
def test_square_group_minimum_is_the_sum_of_all_absolute_eigenvalues(p):
    n = 12
    c, j = make_spd(n, seed=p), _shuffled(p, n - p, seed=p)
    sol = hyperbolic_trace_min(c, j)
    cert = float(np.abs(np.linalg.eigvals(j[:, None] * c).real).sum())
    assert abs(sol.value - cert) <= 1e-12 * cert
    assert _relative_violation(sol.x, j, j) <= 1e-13
    assert sol.x.shape == (n, n)


def test_no_random_feasible_point_or_nearby_point_is_below_the_minimum():
    n, p = 10, 6
    c, j, jk = make_spd(n, seed=0), _shuffled(p, n - p, seed=3), np.array([1.0, -1, 1, -1])
    sol = hyperbolic_trace_min(c, j, jk)
    geo = IndefiniteStiefelGeometry(n, 4, signature=j, k_signature=jk)
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        y = geo.random_point(cond=3.0, generator=gen).numpy()
        assert _cost(c, y) >= sol.value * (1 - 1e-12)
    x = torch.from_numpy(sol.x)
    for scale in (1e-3, 1e-1):
        for _ in range(50):
            u = geo.random_tangent(x, generator=gen)
            y = geo.retr(x, scale * u / torch.linalg.norm(u)).numpy()
            assert _relative_violation(y, j, jk) <= 1e-12
            assert _cost(c, y) >= sol.value * (1 - 1e-12)


@pytest.mark.parametrize("jk", [[1.0, -1.0, 1.0, 1.0, -1.0], [-1.0, -1.0, 1.0]])
def test_weighted_cost_pairs_large_weights_with_small_eigenvalues(jk):
    """Brute force over every assignment of the wanted eigenvectors to the columns."""
    n, p = 14, 7
    jk = np.array(jk)
    c, j = make_spd(n, seed=5), _shuffled(p, n - p, seed=4)
    d = np.random.default_rng(6).uniform(0.0, 3.0, jk.size)
    d[0] = 0.0  # a zero weight is allowed
    sol = hyperbolic_trace_min(c, j, jk, d)
    assert _relative_violation(sol.x, j, jk) <= 1e-12
    assert abs(sol.value - _cost(c, sol.x, d)) <= 1e-12 * sol.value
    assert sol.certificate == pytest.approx(trace_min_certificate(c, j, jk, np.diag(d)),
                                            rel=1e-12)
    # candidates: the eigenvectors of the smallest |θ| of each sign (unweighted solution)
    base = hyperbolic_trace_min(c, j, jk)
    best = np.inf
    for perm in itertools.permutations(range(jk.size)):
        if np.all(jk[list(perm)] == jk):  # a plus column must keep a plus eigenvector
            best = min(best, _cost(c, base.x[:, perm], d))
    assert abs(sol.value - best) <= 1e-12 * best
    gen = torch.Generator().manual_seed(1)
    geo = IndefiniteStiefelGeometry(n, jk.size, signature=j, k_signature=jk)
    for _ in range(100):
        assert _cost(c, geo.random_point(cond=3.0, generator=gen).numpy(), d) >= sol.value


def test_weights_as_vector_or_diagonal_matrix_agree():
    c, j, jk = make_spd(9, seed=2), _shuffled(5, 4, seed=0), np.array([1.0, -1.0, 1.0])
    a = hyperbolic_trace_min(c, j, jk, [1.0, 2.0, 0.5])
    b = hyperbolic_trace_min(c, j, jk, np.diag([1.0, 2.0, 0.5]))
    np.testing.assert_array_equal(a.x, b.x)


def test_hevp_reexports_the_linalg_certificates():
    from orthoplug import linalg

    assert hevp.trace_min_certificate is linalg.trace_min_certificate
    assert hevp.pencil_eigenvalues is linalg.pencil_eigenvalues


# ---- iterative: sparse and operator C -----------------------------------------------------------


def test_iterative_on_a_banded_sparse_matrix_matches_the_dense_answer():
    n = 2000
    c = make_banded_spd(n, bandwidth=2, seed=1)
    j, jk = _shuffled(1100, 900, seed=5), _shuffled(6, 4, seed=6)
    it = hyperbolic_trace_min(c, j, jk)
    dense = hyperbolic_trace_min(c.toarray(), j, jk, method="dense")
    assert it.method == "iterative" and dense.method == "dense"
    assert abs(it.value - dense.value) <= 1e-8 * dense.value
    assert abs(it.certificate - dense.certificate) <= 1e-8 * dense.certificate
    np.testing.assert_allclose(it.eigenvalues, dense.eigenvalues, rtol=1e-8)
    assert _relative_violation(it.x, j, jk) <= 1e-12
    assert it.residual <= 1e-8
    assert 0 < it.operator_applications <= 2000  # C-solves, a budget in operations


def test_iterative_with_weights_and_an_operator_matches_dense():
    n = 300
    c = make_banded_spd(n, bandwidth=3, seed=2)
    j, jk = _shuffled(150, 150, seed=7), np.array([1.0, -1.0, -1.0, 1.0])
    d = np.array([0.5, 2.0, 1.0, 3.0])
    dense = hyperbolic_trace_min(c.toarray(), j, jk, d)
    for kind in (c, spla.aslinearoperator(c), c.toarray()):
        it = hyperbolic_trace_min(kind, j, jk, d, method="iterative")
        assert it.method == "iterative"
        assert abs(it.value - dense.value) <= 1e-8 * dense.value
        assert _relative_violation(it.x, j, jk) <= 1e-12
    # seeded Lanczos starts: the same call gives the same bits
    first, again = (hyperbolic_trace_min(c, j, jk, d, seed=3) for _ in range(2))
    np.testing.assert_array_equal(first.x, again.x)


# ---- the solver and its pymanopt door ---------------------------------------------------------


def test_pymanopt_door_solves_a_quadratic_problem_and_reports_the_gap():
    n, c = 16, make_spd(16, seed=9)
    j = _shuffled(6, 10, seed=8)
    for manifold, jk in ((IndefiniteStiefel(n, 5, signature=j, k_signature=[1, -1, -1, 1, -1]),
                          np.array([1.0, -1, -1, 1, -1])),
                         (JOrthogonal(n, signature=j), j)):
        @pymanopt.function.numpy(manifold)
        def cost(x):
            return float(np.sum(x * (c @ x)))

        problem = pymanopt.Problem(manifold, cost)
        result = HyperbolicEig().run(problem, oracle=QuadraticOracle(torch.from_numpy(c)))
        info = result.log["optimizer_parameters"]
        assert info["certificate"] == pytest.approx(trace_min_certificate(c, j, jk), rel=1e-12)
        assert abs(info["certificate_gap"]) <= 1e-12 * info["certificate"]
        assert result.violation <= 1e-13 and result.gradient_norm <= 1e-10 * info["certificate"]
        assert result.iterations == 0 and info["method"] == "dense"
    assert registry.get("HyperbolicEig", "pymanopt") is HyperbolicEig


def test_solver_scale_and_weights_come_from_the_quadratic():
    n, k = 10, 4
    c, j, jk = make_spd(n, seed=3), _shuffled(5, 5, seed=1), np.array([-1.0, 1.0, 1.0, -1.0])
    d = np.array([1.0, 0.25, 4.0, 2.0])
    geo = IndefiniteStiefelGeometry(n, k, signature=j, k_signature=jk)
    oracle = QuadraticOracle(torch.from_numpy(c), torch.from_numpy(np.diag(d)), scale=0.5)
    res = HyperbolicEigSolver().run(oracle, None, geo)
    assert res.cost == pytest.approx(trace_min_certificate(0.5 * c, j, jk, d), rel=1e-12)
    assert abs(res.info["certificate_gap"]) <= 1e-12 * res.cost


def test_solver_and_door_errors():
    c = torch.from_numpy(make_spd(6, seed=0))
    geo = JOrthogonalGeometry(6, 3)
    solver = HyperbolicEigSolver()
    with pytest.raises(ValueError, match="known quadratic"):
        solver.run(FunctionOracle(lambda x: (x * x).sum(), lambda x: 2 * x), None, geo)
    with pytest.raises(ValueError, match="scale s must be positive"):
        solver.run(QuadraticOracle(c, scale=-1.0), None, geo)
    with pytest.raises(ValueError, match="O\\(J\\) or the indefinite Stiefel"):
        solver.run(QuadraticOracle(c), None, StiefelGeometry(6, 3))
    with pytest.raises(ValueError, match="D must be diagonal"):
        solver.run(QuadraticOracle(c, c), None, geo)
    with pytest.raises(ValueError, match="method must be one of"):
        HyperbolicEig(method="qr")
    manifold = JOrthogonal(6, 3)
    problem = pymanopt.Problem(manifold, pymanopt.function.numpy(manifold)(
        lambda x: float(np.sum(x * (c.numpy() @ x)))))
    with pytest.raises(ValueError, match="known quadratic"):
        HyperbolicEig().run(problem)


# ---- bad input --------------------------------------------------------------------------------


def test_bad_input_is_named_before_any_factorisation():
    c, j = make_spd(6, seed=1), [1, -1, 1, -1, 1, -1]
    indefinite = c - 10 * np.eye(6)
    cases = [
        (dict(c=indefinite, signature=[1, -1, 0, 1, 1, 1]), r"signature.*\+1 or -1"),
        (dict(c=indefinite, signature=j, k_signature=[1, 1, 1, 1]), "does not fit"),
        (dict(c=indefinite, signature=j, k_signature=[-1, -1, -1, -1]), "does not fit"),
        (dict(c=indefinite[:5, :5], signature=j), "6×6"),
        (dict(c=np.triu(c), signature=j), "symmetric"),
        (dict(c=np.full((6, 6), np.nan), signature=j), "non-finite"),
        (dict(c=indefinite, signature=j, k_signature=[1, -1], d=[1.0, -1.0]), "nonnegative"),
        (dict(c=indefinite, signature=j, k_signature=[1, -1], d=[1.0, 2.0, 3.0]), "length-2"),
        (dict(c=indefinite, signature=j, k_signature=[1, -1], d=np.ones((2, 2))), "diagonal"),
        (dict(c=indefinite, signature=j, method="svd"), "method"),
        (dict(c=indefinite, signature=j, tol=0.0), "tol"),
        (dict(c=spla.aslinearoperator(c), signature=j, method="dense"), "LinearOperator"),
        (dict(c=indefinite, signature=j), "positive definite"),
        (dict(c=make_banded_spd(6, 1) - 5 * sp.eye_array(6), signature=j), "positive definite"),
        (dict(c=sp.csr_array(indefinite), signature=j), "positive definite"),
    ]
    for kwargs, match in cases:
        with pytest.raises(ValueError, match=match):
            hyperbolic_trace_min(**kwargs)
    with pytest.raises(ValueError, match="k₋ < n − 1"):
        hyperbolic_trace_min(make_banded_spd(6, 1), [1, -1, -1, -1, -1, -1])
