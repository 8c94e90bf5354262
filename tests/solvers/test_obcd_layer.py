"""The layer around OBCD: column rotations (brute force), starts, prox phase, greedy pairs."""

from __future__ import annotations

import inspect
import math

import autograd.numpy as anp
import numpy as np
import pymanopt
import pytest
import torch

from orthoplug.adapters import pymanopt as pm
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.kernels.obcd import partition_polish, partition_row_moves
from orthoplug.nonsmooth import L0, L1, NonNegative
from orthoplug.oracles import FunctionOracle, QuadraticOracle
from orthoplug.problems import spca
from orthoplug.solvers.column_sweeps import _column_sweep, column_invariant, column_rotations
from orthoplug.solvers.row_partition import partition_search, row_move_gains
from orthoplug.solvers.sparse_obcd import SPLIT_CAP, SPLIT_STALL, SparseOBCD
from orthoplug.solvers.sparse_starts import (
    prox_polar,
    sparse_orthonormal,
    splitting_iterates,
    splitting_start,
    start_candidates,
)
from orthoplug.solvers.splitting import linearised_x_step, nonneg_rounding

DT = torch.float64


def _problem(kind="l1", n=12, r=4, seed=0):
    a = np.random.default_rng(seed).standard_normal((30, n))
    c = spca.covariance(a)
    if kind == "nonneg":
        return spca.nn_pca(c, r)
    lam = 0.5 * float(torch.linalg.eigvalsh(c)[-1]) / (math.sqrt(n) if kind == "l1" else n)
    return (spca.l1_spca if kind == "l1" else spca.l0_spca)(c, r, lam)


def _stages(res, name):
    """The records of the stages called ``name`` in ``res.info["stages"]``."""
    return [s for s in res.info["stages"] if s["name"] == name]


def _brute_pair(w, h):
    """min over O(2) of h(R W) for W (2, n): a fine grid over both families, refined."""
    best = math.inf
    for refl in (1.0, -1.0):
        t = torch.linspace(0, 2 * math.pi, 20001, dtype=DT)
        for _ in range(3):
            c, s = torch.cos(t), torch.sin(t)
            rows0 = c[:, None] * w[0] - s[:, None] * w[1]
            rows1 = refl * (s[:, None] * w[0] + c[:, None] * w[1])
            vals = h.elementwise(rows0).sum(-1) + h.elementwise(rows1).sum(-1)
            k = int(torch.argmin(vals))
            best = min(best, float(vals[k]))
            t = torch.linspace(float(t[max(k - 1, 0)]), float(t[min(k + 1, t.numel() - 1)]),
                               2001, dtype=DT)
    return best


@pytest.mark.parametrize("h", [L1(0.3), L0(0.05)])
def test_column_rotation_of_one_pair_matches_brute_force(h):
    gen = torch.Generator().manual_seed(3)
    for trial in range(5):
        x = torch.linalg.qr(torch.randn(7, 2, dtype=DT, generator=gen))[0]
        out = column_rotations(x, h, gen)
        got = float(h.value(out))
        brute = _brute_pair(x.mT, h)
        assert got <= brute + 1e-9, (trial, got, brute)
        assert torch.allclose(out @ out.mT, x @ x.mT, atol=1e-12)  # same subspace


@pytest.mark.parametrize("kind", ["l1", "l0", "nonneg"])
def test_column_rotations_keep_f_and_feasibility_and_never_raise_h(kind):
    prob = _problem(kind)
    gen = torch.Generator().manual_seed(0)
    x = prob.initial_point("random", 1)
    for _ in range(4):
        new = column_rotations(x, prob.h, gen, sweeps=2)
        assert float(StiefelGeometry(*x.shape).violation(new)) < 1e-12
        assert prob.f(new) == pytest.approx(prob.f(x), abs=1e-12)
        assert float(prob.h.value(new)) <= float(prob.h.value(x)) + 1e-12
        x = new


@pytest.mark.parametrize("h", [L1(0.3), L0(0.05)])
def test_compiled_column_sweep_keeps_cx_and_f_and_reports_the_decrease(h):
    # column_pairs rotates X and Y = C X in place: Y stays C X, f is unchanged and the returned
    # total is the decrease of h (both searches count entries below SNAP as 0 for l0)
    prob = _problem("l1", n=9, r=4)
    c = prob.c.numpy()
    gen = torch.Generator().manual_seed(1)
    x = prob.initial_point("random", 2).numpy().copy()
    for _ in range(3):
        y = c @ x
        f0, h0 = float((x * y).sum()), float(h.value(torch.from_numpy(x)))
        total = _column_sweep(x, y, h, gen)
        h1 = float(h.value(torch.from_numpy(x)))
        assert np.allclose(y, c @ x, atol=1e-13)
        assert float((x * (c @ x)).sum()) == pytest.approx(f0, abs=1e-13)
        assert total >= 0.0 and h0 - h1 == pytest.approx(total, abs=1e-10)
        assert np.allclose(x.T @ x, np.eye(4), atol=1e-13)


@pytest.mark.parametrize("h", [L1(0.3), L0(0.05)])
def test_column_rotations_off_the_compiled_path_match_brute_force(h):
    # float32 tensors take the batched torch search; same answer up to float32 rounding
    gen = torch.Generator().manual_seed(4)
    for trial in range(3):
        x = torch.linalg.qr(torch.randn(7, 2, dtype=DT, generator=gen))[0]
        out = column_rotations(x.float(), h, gen)
        assert out.dtype == torch.float32
        assert float(h.value(out.double())) <= _brute_pair(x.mT, h) + 1e-4, trial


def test_column_rotations_errors():
    gen = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="r >= 2"):
        column_rotations(torch.eye(4, 1, dtype=DT), L1(1.0), gen)
    with pytest.raises(ValueError, match="sweeps"):
        column_rotations(torch.eye(4, 2, dtype=DT), L1(1.0), gen, sweeps=0)


def test_start_candidates_closed_forms():
    prob = _problem("l1", n=10, r=3)
    starts = start_candidates(prob.oracle, 3)
    pca, diag = starts["pca"], starts["diagonal"]
    assert prob.f(pca) == pytest.approx(prob.pca_value(), abs=1e-12)
    top = torch.sort(torch.diagonal(prob.c), descending=True).values[:3].sum()
    assert prob.f(diag) == pytest.approx(-float(top), abs=1e-12)
    for x in (pca, diag):
        assert float(StiefelGeometry(10, 3).violation(x)) < 1e-12
    assert torch.equal(start_candidates(prob.oracle, 3, ("diagonal",))["diagonal"], diag)
    assert set(start_candidates(prob.oracle, 3, ("pca",))) == {"pca"}


def test_pca_start_by_lanczos_matches_eigh():
    # n > max(200, 4 r): the PCA start comes from eigsh; same f optimum and subspace as eigh
    a = np.random.default_rng(5).standard_normal((300, 240))
    prob = spca.l1_spca(spca.covariance(a), 4, 0.01)
    pca = start_candidates(prob.oracle, 4)["pca"]
    assert prob.f(pca) == pytest.approx(prob.pca_value(), abs=1e-12)
    assert float(StiefelGeometry(240, 4).violation(pca)) < 1e-12
    ref = torch.linalg.eigh(prob.c)[1][:, -4:]
    assert torch.allclose(pca @ pca.mT, ref @ ref.mT, atol=1e-8)


def test_column_invariance_detection():
    c = torch.eye(5, dtype=DT)
    assert column_invariant(QuadraticOracle(c))
    assert column_invariant(QuadraticOracle(c, torch.eye(3, dtype=DT) * 2.0))
    assert not column_invariant(QuadraticOracle(c, torch.diag(torch.tensor([1.0, 2, 3]))))


@pytest.mark.parametrize("momentum", [False, True])
@pytest.mark.parametrize("kind", ["l1", "nonneg"])
def test_prox_polar_feasible_and_not_worse(kind, momentum):
    prob = _problem(kind)
    x0 = prob.initial_point("random", 0)
    x, fx, done = prox_polar(x0, prob.oracle, prob.h, 30, momentum=momentum)
    assert done >= 1
    assert fx <= prob.objective(x0) + 1e-14
    assert fx == pytest.approx(prob.objective(x), abs=1e-12)
    assert float(StiefelGeometry(*x.shape).violation(x)) < 1e-12


def test_start_stage_functions_end_when_stop_says_so():
    # ``stop`` (a run's out_of_time) is read after each iteration / check, nothing else
    prob = _problem("l1")
    x0 = prob.initial_point("random", 0)
    assert prox_polar(x0, prob.oracle, prob.h, 30, stop=lambda: True)[2] == 1
    assert prox_polar(x0, prob.oracle, prob.h, 30, patience=100, stop=lambda: False)[2] == 30
    assert splitting_start(x0, prob.oracle, prob.h, 400, stop=lambda: True)[2] == 1


@pytest.mark.parametrize("kind", ["l1", "l0", "nonneg"])
def test_sparse_obcd_monotone_and_feasible(kind):
    prob = _problem(kind, n=14, r=4)
    x0 = prob.initial_point("random", 0)
    res = SparseOBCD(prob.h, seed=0, max_iterations=450, eval_every=14, candidates=8,
                     column_every=50, split_steps=0, partition=False, branch_steps=0).run(
        prob.oracle, x0, StiefelGeometry(14, 4))
    costs = res.history["cost"]
    assert all(b <= a + 1e-12 for a, b in zip(costs, costs[1:], strict=False))
    assert res.violation < 1e-12
    if kind == "nonneg":
        assert float(res.point.min()) >= 0.0
    assert res.cost == pytest.approx(prob.objective(res.point), abs=1e-10)
    assert res.info["start"].split(" + ")[0] in {"x0", "diagonal", "pca"}  # a candidate won
    # the stages' iterations are their gradients; then iterations of n/2 = 7 pair steps
    stage_iterations = res.info["stage_iterations"]
    assert stage_iterations == math.ceil(sum(
        s["gradient_evaluations"] for s in res.info["stages"]
        if s["name"] not in ("pair steps", "column sweeps", "prox-gradient steps")))
    pairs = _stages(res, "pair steps")[0]["iterations"]
    assert pairs == (450 - stage_iterations) * 7 > 2800
    assert _stages(res, "column sweeps")[0]["iterations"] == pairs // 50


def test_sparse_obcd_start_beats_identity_on_dominant_diagonal():
    # C with a dominant diagonal and a large ℓ1 weight: the sparse "diagonal" start wins
    prob = _problem("l1", n=12, r=3)
    big = spca.l1_spca(prob.c + torch.diag(torch.linspace(0, 1, 12, dtype=DT)), 3, 0.2)
    res = SparseOBCD(big.h, seed=0, max_iterations=1, prox_steps=0).run(
        big.oracle, big.initial_point("random", 0), StiefelGeometry(12, 3))
    assert res.info["start"] == "diagonal"
    assert res.cost <= big.objective(start_candidates(big.oracle, 3)["diagonal"]) + 1e-12


def test_sparse_obcd_prox_phase_auto_only_for_continuous_h():
    for kind, expect_prox in (("l1", True), ("l0", False), ("nonneg", False)):
        prob = _problem(kind, n=10, r=3)
        res = SparseOBCD(prob.h, seed=0, max_iterations=5).run(
            prob.oracle, prob.initial_point("random", 0), StiefelGeometry(10, 3))
        assert bool(_stages(res, "prox")) == expect_prox, kind
        if expect_prox:  # a full gradient per prox step at least, counted
            prox = _stages(res, "prox")[0]
            # the budget: n per start (x0, "diagonal", "pca"), each run to its patience or end
            assert 3 <= prox["iterations"] <= 3 * 10
            assert prox["gradient_evaluations"] >= prox["iterations"]
        assert res.cost <= prob.objective(prob.initial_point("random", 0)) + 1e-12


def test_sparse_obcd_errors():
    prob = _problem("l1")
    with pytest.raises(ValueError, match="unknown start"):
        SparseOBCD(prob.h, starts=("svd",))
    with pytest.raises(ValueError, match="candidates"):
        SparseOBCD(prob.h, candidates=0)
    with pytest.raises(ValueError, match="own pairs"):
        SparseOBCD(prob.h, pairs="jacobi")
    with pytest.raises(ValueError, match="prox_steps"):
        SparseOBCD(prob.h, prox_steps="some")
    with pytest.raises(ValueError, match="start_sweeps"):
        SparseOBCD(prob.h, start_sweeps=-1)
    with pytest.raises(ValueError, match="curvature"):
        SparseOBCD(prob.h, curvature="scalar")
    weighted = QuadraticOracle(prob.c, torch.diag(torch.arange(1.0, 5.0, dtype=DT)),
                               scale=-1.0)
    with pytest.raises(ValueError, match="without D"):
        SparseOBCD(prob.h, max_iterations=2).run(weighted, prob.initial_point("random", 0),
                                                 StiefelGeometry(12, 4))
    with pytest.raises(ValueError, match="NonNegative|negative"):
        SparseOBCD(NonNegative(), max_iterations=2).run(
            prob.oracle, prob.initial_point("random", 0), StiefelGeometry(12, 4))


def test_sparse_obcd_float32_takes_the_float64_pairs():
    """The pair stage is OBCD's greedy order on every path: float64 runs the compiled loop,
    float32 the Python steps on the tracker's arrays, each step the best of the same 4 queued
    pairs by the same model decrease. So the same pairs move: the same support and the same
    iterates to float32 accuracy after 40 iterations of n/2 = 6 pair steps."""
    prob = _problem("l1", n=12, r=3)
    x0 = prob.initial_point("random", 0)
    geo = StiefelGeometry(12, 3)
    options = dict(starts=(), prox_steps=0, column_every=0, candidates=4, seed=0,
                   max_iterations=40, eval_every=40)
    ref = SparseOBCD(prob.h, **options).run(prob.oracle, x0, geo)
    f32 = QuadraticOracle(prob.c.float(), scale=prob.oracle.quadratic.scale)
    res = SparseOBCD(prob.h, **options).run(f32, x0.float(), geo)
    assert res.point.dtype == torch.float32 and ref.info["pairs"] == res.info["pairs"] == "greedy"
    assert res.info["block_updates"] == ref.info["block_updates"] == 240
    assert torch.equal(res.point == 0, ref.point == 0) and int((ref.point == 0).sum()) > 0
    assert torch.abs(res.point.double() - ref.point).max() <= 1e-4
    assert torch.abs(ref.point - x0).max() > 0.1  # the pair steps moved X


def test_sparse_obcd_greedy_pairs_need_the_exact_model():
    """``candidates > 1`` ranks pairs by the exact model of a quadratic f: on another cost the
    run refuses at setup, naming ``candidates``; with ``candidates=1`` (and no data starts or
    column sweeps) it runs OBCD's uniform pairs on that cost."""
    prob = _problem("l1", n=10, r=3)
    oracle = FunctionOracle(prob.oracle.value, prob.oracle.gradient,
                            lipschitz=prob.oracle.lipschitz)
    x0 = prob.initial_point("random", 0)
    geo = StiefelGeometry(10, 3)
    plain = dict(starts=(), column_every=0, prox_steps=0, seed=0, max_iterations=20)
    with pytest.raises(ValueError, match="candidates=4 .*quadratic f.*pass candidates=1"):
        SparseOBCD(prob.h, candidates=4, **plain).run(oracle, x0, geo)
    res = SparseOBCD(prob.h, candidates=1, eval_every=1, **plain).run(oracle, x0, geo)
    assert res.info["pairs"] == "random" and res.info["candidates"] == 1
    costs = res.history["cost"]
    assert all(b <= a + 1e-12 for a, b in zip(costs, costs[1:], strict=False))
    assert costs[-1] < costs[0] and res.violation < 1e-12


def _sparse_orthonormal_point(gen):
    """An exactly orthonormal 8 × 3 matrix with overlapping sparse column supports: rows
    {0..3} carry columns 0 and 1 (an orthonormal 4 × 2 block), rows {4..7} column 2, then
    rows 3 and 4 are mixed by a rotation (both supports grow by one row)."""
    x = torch.zeros(8, 3, dtype=DT)
    x[:4, :2] = torch.linalg.qr(torch.randn(4, 2, dtype=DT, generator=gen))[0]
    x[4:, 2] = torch.nn.functional.normalize(torch.randn(4, dtype=DT, generator=gen), dim=0)
    c, s = math.cos(0.4), math.sin(0.4)
    x[[3, 4]] = torch.tensor([[c, -s], [s, c]], dtype=DT) @ x[[3, 4]]
    return x


def test_sparse_orthonormal_restores_orthonormality_on_the_mask():
    gen = torch.Generator().manual_seed(7)
    for trial in range(4):
        x = _sparse_orthonormal_point(gen)
        mask = x != 0
        noisy = x + 1e-3 * torch.randn(8, 3, dtype=DT, generator=gen) * mask
        out = sparse_orthonormal(noisy, mask)
        assert out is not None, trial
        assert float(torch.linalg.norm(out.mT @ out - torch.eye(3, dtype=DT))) <= 1e-13
        assert bool((out[~mask] == 0).all())  # the support never grows
        assert float(torch.linalg.norm(out - noisy)) < 1e-2  # a nearby point, not any point


def test_sparse_orthonormal_fails_cleanly():
    x = torch.eye(5, 2, dtype=DT) * 0.9
    mask = torch.zeros(5, 2, dtype=torch.bool)
    mask[0, 0] = True  # column 1 has an empty mask: no orthonormal point exists
    assert sparse_orthonormal(x, mask) is None
    with pytest.raises(ValueError, match="mask shape"):
        sparse_orthonormal(x, mask[:, :1])


@pytest.mark.parametrize("kind", ["l0", "nonneg"])
def test_splitting_start_feasible_and_not_worse(kind):
    prob = _problem(kind, n=16, r=3)
    geo = StiefelGeometry(16, 3)
    for start in (prob.initial_point("random", 1), start_candidates(prob.oracle, 3)["pca"]):
        x0 = nonneg_rounding(start) if kind == "nonneg" else start
        x, fx, done = splitting_start(x0, prob.oracle, prob.h, 400,
                                      smoothing=0.1 if kind == "nonneg" else 0.0)
        assert done >= 10
        assert fx <= prob.objective(x0) + 1e-14
        assert fx == pytest.approx(prob.objective(x), abs=1e-12)
        assert float(geo.violation(x)) <= 1e-12
        if kind == "nonneg":
            assert float(x.min()) >= 0.0
    with pytest.raises(ValueError, match="smoothing"):
        splitting_start(x0, prob.oracle, prob.h, 5, smoothing=-1.0)


def test_splitting_start_reaches_a_sparse_point_for_l0():
    # from the dense PCA start, the restored splitting point has exact zeros and a lower F
    prob = _problem("l0", n=16, r=3)
    pca = start_candidates(prob.oracle, 3)["pca"]
    x, fx, _ = splitting_start(pca, prob.oracle, prob.h, 400)
    assert fx < prob.objective(pca)
    assert int((x == 0).sum()) > 0


def _nonneg_partition(n, r, gen):
    owner = torch.arange(n) % r
    owner = owner[torch.randperm(n, generator=gen)]
    x = torch.zeros(n, r, dtype=DT)
    x[torch.arange(n), owner] = torch.rand(n, dtype=DT, generator=gen) + 0.1
    return x / torch.linalg.norm(x, dim=0)


def test_row_move_gains_match_brute_force():
    # every finite gain equals a brute-force search: the rest of column a renormalised, column b
    # the best cos θ x_b + sin θ e_i over a fine grid of θ in [0, π/2]
    prob = _problem("nonneg", n=7, r=2)
    a = (-prob.oracle.quadratic.scale * prob.c).numpy()
    gen = torch.Generator().manual_seed(2)
    x = _nonneg_partition(7, 2, gen).numpy()
    x[6] = 0.0  # one row outside both supports (it can only join)
    x /= np.linalg.norm(x, axis=0)
    gains = row_move_gains(x, a, a @ x)
    theta = np.linspace(0.0, math.pi / 2, 200001)
    form = float(np.trace(x.T @ a @ x))
    checked = 0
    for i in range(7):
        for b in range(2):
            if not np.isfinite(gains[i, b]):
                continue
            y = x.copy()
            if y[i].max() > 0:
                col = int(np.argmax(y[i]))
                y[i, col] = 0.0
                y[:, col] /= np.linalg.norm(y[:, col])
            u = y[:, b]
            e = np.zeros(7)
            e[i] = 1.0
            cand = np.cos(theta)[:, None] * u + np.sin(theta)[:, None] * e
            best = np.einsum("ti,ij,tj->t", cand, a, cand).max()
            rest = float(np.trace(y.T @ a @ y)) - float(u @ a @ u)
            assert gains[i, b] == pytest.approx(rest + best - form, abs=1e-9), (i, b)
            checked += 1
    assert checked >= 6


@pytest.mark.parametrize("seed", [0, 1])
def test_partition_search_descends_and_stays_feasible(seed):
    prob = _problem("nonneg", n=20, r=3, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    x0 = _nonneg_partition(20, 3, gen)
    x, fx, moves = partition_search(x0, prob.oracle)
    assert moves >= 1
    assert fx < prob.objective(x0)
    assert fx == pytest.approx(prob.objective(x), abs=1e-12)
    assert float(StiefelGeometry(20, 3).violation(x)) <= 1e-12
    assert float(x.min()) >= 0.0 and int(((x > 0).sum(dim=1) > 1).sum()) == 0
    # a local minimum of the moves: no move gains
    a = (-prob.oracle.quadratic.scale * prob.c).numpy()
    xa = x.numpy()
    assert row_move_gains(xa, a, a @ xa).max() <= 1e-10
    with pytest.raises(ValueError, match="disjoint"):
        partition_search(torch.ones(20, 3, dtype=DT) / math.sqrt(20), prob.oracle)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_partition_row_move_gains_what_row_move_gains_predicts(seed):
    # one compiled move: the form grows by exactly the largest predicted gain, G stays A X,
    # the point stays a nonnegative partition with orthonormal columns
    prob = _problem("nonneg", n=9, r=3, seed=seed)
    a = (-prob.oracle.quadratic.scale * prob.c).numpy()
    x = _nonneg_partition(9, 3, torch.Generator().manual_seed(seed)).numpy()
    x[8] = 0.0  # a row outside every support
    x /= np.linalg.norm(x, axis=0)
    g = a @ x
    predicted = row_move_gains(x, a, g).max()
    before = float(np.trace(x.T @ a @ x))
    assert partition_row_moves(x, a, g, 1, 1e-12) == (1 if predicted > 1e-12 * before else 0)
    assert float(np.trace(x.T @ a @ x)) == pytest.approx(before + max(predicted, 0.0), abs=1e-12)
    assert np.allclose(g, a @ x, atol=1e-12)
    assert x.min() >= 0.0 and ((x > 0).sum(axis=1) <= 1).all()
    assert np.abs(x.T @ x - np.eye(3)).max() <= 1e-12


@pytest.mark.parametrize(("n", "r", "seed"), [(40, 3, 0), (60, 6, 1), (120, 10, 2), (80, 16, 3)])
def test_partition_row_moves_keep_their_gains_exactly(n, r, seed):
    # the gains a call keeps between its moves are the fresh ones: one call of many moves and
    # as many calls of one move (each starting from fresh gains) make the same moves, bit for
    # bit, and each move is the largest fresh gain (the first in row-major order): row i joins
    # column b, or leaves its column for none (x_b kept)
    prob = _problem("nonneg", n=n, r=r, seed=seed)
    a = (-prob.oracle.quadratic.scale * prob.c).numpy()
    x0 = _nonneg_partition(n, r, torch.Generator().manual_seed(seed)).numpy()
    x0[: n // 10] = 0.0  # rows outside every support
    x0 /= np.linalg.norm(x0, axis=0)
    x1, x2 = x0.copy(), x0.copy()
    g1, g2 = a @ x1, a @ x2
    moves = partition_row_moves(x1, a, g1, 10**6, 1e-12)
    single = 0
    while True:
        gains = row_move_gains(x2, a, g2)
        i, b = np.unravel_index(np.argmax(gains), gains.shape)
        row = x2[i].copy()
        if not partition_row_moves(x2, a, g2, 1, 1e-12):
            break
        single += 1
        assert not np.array_equal(x2[i], row) and (x2[i, b] > 0.0 or not x2[i].any())
    assert moves == single > n // 10
    assert np.array_equal(x1, x2) and np.array_equal(g1, g2)


def test_partition_polish_never_lowers_a_column_nor_grows_a_support():
    prob = _problem("nonneg", n=15, r=3, seed=3)
    a = (-prob.oracle.quadratic.scale * prob.c).numpy()
    x = _nonneg_partition(15, 3, torch.Generator().manual_seed(3)).numpy()
    support = x > 0
    g = a @ x
    before = np.einsum("ib,ib->b", x, g)
    partition_polish(x, a, g, 50)
    assert (np.einsum("ib,ib->b", x, g) >= before - 1e-15).all()
    assert not (x > 0)[~support].any() and x.min() >= 0.0
    assert np.allclose(g, a @ x, atol=1e-12)
    assert np.allclose(np.linalg.norm(x, axis=0), 1.0, atol=1e-12)
    # at the end no power step gains any more: x_b is the normalised (A x_b)⁺ on its support
    y = np.where(x > 0, np.maximum(g, 0.0), 0.0)
    assert np.allclose(y / np.linalg.norm(y, axis=0), x, atol=1e-6)


def test_refined_float32_splitting_yields_feasible_float64_points():
    # the splitting with float32 iterates and a partition search on its rounded points: every
    # point is a float64 nonnegative partition with orthonormal columns, its F is the one
    # yielded, F never rises, and a refined point is a local minimum of the row moves
    prob = _problem("nonneg", n=20, r=3, seed=4)
    x0 = _nonneg_partition(20, 3, torch.Generator().manual_seed(4))
    c32 = (2.0 * prob.oracle.quadratic.scale * prob.c).float()
    refined = []

    def refine(x):
        out = partition_search(x, prob.oracle)[:2]
        refined.append(out[0])
        return out

    last = math.inf
    for x, fx, _ in splitting_iterates(x0, prob.oracle, prob.h, 200, smoothing=0.1,
                                       gradient=lambda y: c32 @ y, refine=refine,
                                       dtype=torch.float32):
        assert x.dtype == DT and fx <= last
        assert fx == pytest.approx(prob.objective(x), abs=1e-12)
        assert float(x.min()) >= 0.0 and int(((x > 0).sum(dim=1) > 1).sum()) == 0
        assert float(StiefelGeometry(20, 3).violation(x)) <= 1e-12
        last = fx
    assert refined and last < prob.objective(x0)
    a = (-prob.oracle.quadratic.scale * prob.c).numpy()
    xa = refined[-1].numpy()
    assert row_move_gains(xa, a, a @ xa).max() <= 1e-10


@pytest.mark.parametrize("kind", ["l0", "nonneg"])
@pytest.mark.parametrize("dtype", [DT, torch.float32])
def test_sparse_obcd_start_phases_monotone_and_feasible(kind, dtype):
    # float64: the compiled pair loop after the start stages; float32: OBCD's Python pair steps
    prob = _problem(kind, n=16, r=3)
    x0 = prob.initial_point("random", 0)
    if kind == "nonneg":
        x0 = nonneg_rounding(x0)
    oracle = prob.oracle if dtype == DT else QuadraticOracle(
        prob.c.float(), scale=prob.oracle.quadratic.scale)
    # the stages' iterations (their gradients), then iterations of n/2 = 8 pair steps
    res = SparseOBCD(prob.h, seed=0, max_iterations=700 if dtype == DT else 240,
                     eval_every=20).run(oracle, x0.to(dtype), StiefelGeometry(16, 3))
    tol, feas = (1e-12, 1e-12) if dtype == DT else (1e-6, 1e-5)
    costs = res.history["cost"]
    assert all(b <= a + tol for a, b in zip(costs, costs[1:], strict=False))
    assert res.point.dtype == dtype and res.violation < feas
    split = _stages(res, "splitting")[0]
    if kind == "l0":
        assert 0 < split["iterations"] <= 10 * 16  # the budget: 10 n
    else:  # float64: ended by its stall rule (SPLIT_STALL n iterations without a gain), well
        # before its cap; float32: by the run's budget
        assert (SPLIT_STALL * 16 if dtype == DT else 0) < split["iterations"] < SPLIT_CAP * 16
    assert split["gradient_evaluations"] >= split["iterations"]  # float32 ones counted too
    if dtype == DT:
        assert res.cost == pytest.approx(prob.objective(res.point), abs=1e-10)
    if kind == "nonneg":
        assert float(res.point.min()) >= 0.0
        if dtype == DT:
            assert (res.info["start"].endswith("partition search")
                    or _stages(res, "partition search")[-1]["iterations"] == 0)


def test_tangent_x_step_ignores_the_normal_part():
    # D = X S with S symmetric is normal to St(n, r) at X: the Riemannian step keeps X, the
    # plain step moves it (with S = 3(L + β) I it flips the sign); a tangent D moves both alike
    gen = torch.Generator().manual_seed(0)
    x = torch.linalg.qr(torch.randn(8, 3, dtype=DT, generator=gen))[0]
    zero = torch.zeros_like(x)
    lip, beta = 1.0, 2.0
    normal = 3.0 * (lip + beta) * x
    assert torch.allclose(linearised_x_step(x, x, zero, normal, beta, lip, tangent=True), x,
                          atol=1e-12)
    assert torch.allclose(linearised_x_step(x, x, zero, normal, beta, lip), -x, atol=1e-12)
    skew = torch.randn(3, 3, dtype=DT, generator=gen)
    tan = x @ (skew - skew.mT) + (torch.eye(8, dtype=DT) - x @ x.mT) @ torch.randn(
        8, 3, dtype=DT, generator=gen)
    assert torch.allclose(linearised_x_step(x, x, zero, tan, beta, lip, tangent=True),
                          linearised_x_step(x, x, zero, tan, beta, lip), atol=1e-12)


def test_sparse_obcd_nonneg_start_with_tiny_overlaps():
    # x0 is feasible but not an exact partition (a 1e-20 entry beside a row's own one): the
    # partition searches run from its rounding, and the run stays feasible and monotone
    prob = _problem("nonneg", n=16, r=3)
    x0 = prob.initial_point("random", 0)
    row = int(torch.nonzero(x0[:, 0]).flatten()[0])
    x0[row, 1] = 1e-20
    res = SparseOBCD(prob.h, starts=(), seed=0, max_iterations=450, eval_every=20).run(
        prob.oracle, x0, StiefelGeometry(16, 3))  # no other start: x0 is the start
    costs = res.history["cost"]
    assert all(b <= a + 1e-12 for a, b in zip(costs, costs[1:], strict=False))
    assert float(res.point.min()) >= 0.0 and res.violation < 1e-12
    assert res.cost < prob.objective(x0)


def test_sparse_obcd_phase_option_errors():
    prob = _problem("l1")
    with pytest.raises(ValueError, match="split_steps"):
        SparseOBCD(prob.h, split_steps=-1)
    with pytest.raises(ValueError, match="split_smoothing"):
        SparseOBCD(prob.h, split_smoothing=-0.5)
    with pytest.raises(ValueError, match="prox_steps"):
        SparseOBCD(prob.h, prox_steps=-3)
    with pytest.raises(ValueError, match="indicator"):
        SparseOBCD(prob.h, partition=True)
    with pytest.raises(ValueError, match="split_from"):
        SparseOBCD(prob.h, split_from="pca")
    with pytest.raises(ValueError, match="split_steps"):
        SparseOBCD(prob.h, split_steps="half")
    with pytest.raises(ValueError, match="unknown start"):
        start_candidates(prob.oracle, 2, ("diagonal", "random"))


def test_pymanopt_door_takes_every_option_explicitly_and_runs_the_core_solver():
    door = inspect.signature(pm.SparseOBCD.__init__).parameters
    assert not any(p.kind is p.VAR_KEYWORD for p in door.values())
    core = set(inspect.signature(SparseOBCD.__init__).parameters) - {"self", "kwargs"}
    assert core <= set(door)
    prob = _problem("nonneg", n=14, r=3)
    x0 = nonneg_rounding(prob.initial_point("random", 0))
    options = dict(seed=2, max_iterations=300, eval_every=100)
    ref = SparseOBCD(prob.h, **options).run(prob.oracle, x0, StiefelGeometry(14, 3))
    manifold = pymanopt.manifolds.Stiefel(14, 3)
    c = prob.c.numpy()

    @pymanopt.function.autograd(manifold)
    def cost(x):
        return -0.5 * anp.trace(x.T @ c @ x)

    res = pm.SparseOBCD(prob.h, min_gradient_norm=0.0, **options).run(
        pymanopt.Problem(manifold, cost), initial_point=x0.numpy(), oracle=prob.oracle)
    assert np.array_equal(res.point, ref.point.numpy()) and res.cost == ref.cost
    assert res.stages == ref.info["stages"] and res.stages[0]["name"] == "start"
    assert res.h_value + res.f_value == pytest.approx(res.cost, abs=1e-15)


def test_sparse_obcd_history_records_every_stage():
    """The start stages count their gradients as iterations and the run loop evaluates during
    them: with ``eval_every=1`` a history row after every iteration of the stages, F recorded
    as it falls, and F after them equal to F(x0) less the stages' decreases."""
    prob = _problem("l0", n=16, r=3)
    x0 = prob.initial_point("random", 0)
    res = SparseOBCD(prob.h, starts=(), restarts=0, seed=0, max_iterations=200,
                     eval_every=1).run(prob.oracle, x0, StiefelGeometry(16, 3))
    # x0 is the start: the splitting does the work
    k = res.info["stage_iterations"]
    assert k == math.ceil(_stages(res, "splitting")[0]["gradient_evaluations"]) > 50
    assert res.history["iteration"][:k + 1] == list(range(k + 1))
    costs = res.history["cost"][:k + 1]
    assert costs[0] == pytest.approx(prob.objective(x0), abs=1e-12)
    assert all(b <= a + 1e-12 for a, b in zip(costs, costs[1:], strict=False))
    assert len(set(costs)) > 2  # improvements recorded while the splitting runs
    stages = [s for s in res.info["stages"] if s["name"] not in ("pair steps", "column sweeps")]
    assert costs[k] == pytest.approx(costs[0] - sum(s["decrease"] for s in stages), abs=1e-12)
