"""The layer around OBCD: column rotations (brute force), starts, prox phase, greedy pairs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.nonsmooth import L0, L1, NonNegative
from orthoplug.oracles import QuadraticOracle
from orthoplug.problems import spca
from orthoplug.solvers.obcd_layer import (
    SparseOBCD,
    _column_sweep,
    column_invariant,
    column_rotations,
    pair_scores,
    prox_polar,
    start_candidates,
)

DT = torch.float64


def _problem(kind="l1", n=12, r=4, seed=0):
    a = np.random.default_rng(seed).standard_normal((30, n))
    c = spca.covariance(a)
    if kind == "nonneg":
        return spca.nn_pca(c, r)
    lam = 0.5 * float(torch.linalg.eigvalsh(c)[-1]) / (math.sqrt(n) if kind == "l1" else n)
    return (spca.l1_spca if kind == "l1" else spca.l0_spca)(c, r, lam)


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


def test_pair_scores_are_directional_derivatives():
    prob = _problem("l1", n=9, r=3)
    oracle = prob.oracle
    x = prob.initial_point("random", 2)
    g = oracle.gradient(x)
    pairs = torch.tensor([[0, 4], [7, 2], [3, 8]])
    scores = pair_scores(x, g[pairs], pairs)
    eps = 1e-6
    for (i, j), sc in zip(pairs.tolist(), scores.tolist(), strict=True):
        def f_at(t, i=i, j=j):
            y = x.clone()
            y[i] = math.cos(t) * x[i] - math.sin(t) * x[j]
            y[j] = math.sin(t) * x[i] + math.cos(t) * x[j]
            return float(oracle.value(y))
        assert sc == pytest.approx((f_at(eps) - f_at(-eps)) / (2 * eps), abs=1e-7)


@pytest.mark.parametrize("kind", ["l1", "nonneg"])
def test_prox_polar_feasible_and_not_worse(kind):
    prob = _problem(kind)
    x0 = prob.initial_point("random", 0)
    x, fx, done = prox_polar(x0, prob.oracle, prob.h, 30)
    assert done >= 1
    assert fx <= prob.objective(x0) + 1e-14
    assert fx == pytest.approx(prob.objective(x), abs=1e-12)
    assert float(StiefelGeometry(*x.shape).violation(x)) < 1e-12


@pytest.mark.parametrize("kind", ["l1", "l0", "nonneg"])
def test_sparse_obcd_monotone_and_feasible(kind):
    prob = _problem(kind, n=14, r=4)
    x0 = prob.initial_point("random", 0)
    res = SparseOBCD(prob.h, seed=0, max_iterations=3000, eval_every=100, candidates=8,
                     column_every=50).run(prob.oracle, x0, StiefelGeometry(14, 4))
    costs = res.history["cost"]
    assert all(b <= a + 1e-12 for a, b in zip(costs, costs[1:], strict=False))
    assert res.violation < 1e-12
    if kind == "nonneg":
        assert float(res.point.min()) >= 0.0
    assert res.cost == pytest.approx(prob.objective(res.point), abs=1e-10)
    assert res.info["start"] is not None and res.info["column_sweeps"] == 3000 // 50


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
        assert (res.info["prox_steps"] > 0) == expect_prox, kind
        assert res.cost <= prob.objective(prob.initial_point("random", 0)) + 1e-12


def test_sparse_obcd_errors():
    prob = _problem("l1")
    with pytest.raises(ValueError, match="unknown start"):
        SparseOBCD(prob.h, starts=("svd",))
    with pytest.raises(ValueError, match="candidates"):
        SparseOBCD(prob.h, candidates=0)
    with pytest.raises(ValueError, match="own pairs"):
        SparseOBCD(prob.h, working_set="jacobi")
    with pytest.raises(ValueError, match="prox_steps"):
        SparseOBCD(prob.h, prox_steps="some")
    with pytest.raises(ValueError, match="prox_fraction"):
        SparseOBCD(prob.h, prox_fraction=0.0)
    weighted = QuadraticOracle(prob.c, torch.diag(torch.arange(1.0, 5.0, dtype=DT)),
                               scale=-1.0)
    with pytest.raises(ValueError, match="without D"):
        SparseOBCD(prob.h, max_iterations=2).run(weighted, prob.initial_point("random", 0),
                                                 StiefelGeometry(12, 4))
    with pytest.raises(ValueError, match="NonNegative|negative"):
        SparseOBCD(NonNegative(), max_iterations=2).run(
            prob.oracle, prob.initial_point("random", 0), StiefelGeometry(12, 4))
