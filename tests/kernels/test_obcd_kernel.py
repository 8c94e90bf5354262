"""The compiled OBCD pair loop and O(2) search (:mod:`orthoplug.kernels`) against independent
references: the O(2) search entered per pair from Python (:func:`solve_o2`) with the model
recomputed from scratch and direct row updates (same iterates), the brute force of
``test_subproblem_o2`` with the kernels' source run un-jitted (``NUMBA_DISABLE_JIT=1``), and the
pair orders' invariants."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.kernels.obcd import obcd_pairs
from orthoplug.kernels.quadratic import NONFINITE_CURVATURE
from orthoplug.nonsmooth import L0, L1, CappedL1, NonNegative, Zero
from orthoplug.oracles import QuadraticOracle
from orthoplug.problems import spca
from orthoplug.solvers.obcd import OBCD
from orthoplug.solvers.pairs import PAIR_BATCH, random_pairs
from orthoplug.subproblems.o2 import SNAP, breakpoint_tables, solve_o2

DT = torch.float64
TERMS = {"zero": Zero(), "l1": L1(0.05), "l0": L0(0.004), "capped": CappedL1(0.05, 0.1),
         "nonneg": NonNegative()}


def _oracle(n, seed, d=None):
    c = spca.covariance(spca.gaussian_data(3 * n, n, seed=seed))
    return c, QuadraticOracle(c, scale=-1.0, d=d)


def _start(n, r, kind):
    x = torch.eye(n, r, dtype=DT)
    if kind != "nonneg":  # a dense start: every entry of Z live
        q, _ = torch.linalg.qr(torch.from_numpy(np.random.default_rng(1).standard_normal((n, r))))
        x = q.to(DT)
    return x


def _reference(c, d, s, x0, h, seed, steps, alpha=1e-5):
    """Today's OBCD (random pairs, exact curvature) written out directly: the pair stream of
    ``random_pairs`` in batches of ``PAIR_BATCH`` from the seeded generator, ``∇f = 2s C X D``
    recomputed from X at every step, the O(2) search through :func:`solve_o2`,
    ``X[B] ← V Z`` snapped."""
    gen = torch.Generator().manual_seed(seed)
    cn, x = c.numpy(), x0.numpy().copy()
    dn = np.eye(x.shape[1]) if d is None else d.numpy()
    n = x.shape[0]
    pairs = np.zeros((0, 2), dtype=np.int64)
    for t in range(steps):
        if t % PAIR_BATCH == 0:
            pairs = random_pairs(n, PAIR_BATCH, gen).numpy()
        b = pairs[t % PAIR_BATCH]
        z = x[b]
        g = 2.0 * s * (cn @ x @ dn)[b]
        q = np.kron(2.0 * s * z @ dn @ z.T, cn[np.ix_(b, b)]) + alpha * np.eye(4)
        p = g @ z.T - (q @ np.array([1.0, 0.0, 0.0, 1.0])).reshape(2, 2).T
        v = solve_o2(p, z, h, Qt=q).numpy()
        if np.array_equal(v, np.eye(2)):
            continue
        new = v @ z
        if not isinstance(h, Zero):
            new[np.abs(new) < SNAP] = 0.0
        x[b] = new
    return x


@pytest.mark.parametrize("kind, with_d", [(k, False) for k in TERMS] + [("l1", True),
                                                                          ("nonneg", True)])
def test_same_iterates_as_reference(kind, with_d):
    """Compiled OBCD = the written-out reference to 1e-12 after 92 iterations of n/2 = 12 pair
    steps (1104 steps: two pair batches)."""
    n, r, iterations = 24, 4, 92
    steps = iterations * n // 2
    d = torch.diag(torch.tensor([1.0, 0.8, 0.5, 0.3], dtype=DT)) if with_d else None
    c, oracle = _oracle(n, 7, d)
    h = TERMS[kind]
    x0 = _start(n, r, kind)
    res = OBCD(h, seed=11, max_iterations=iterations, eval_every=40).run(
        oracle, x0, StiefelGeometry(n, r))
    assert res.iterations == iterations
    ref = _reference(c, d, -1.0, x0, h, 11, steps)
    assert np.abs(res.point.numpy() - ref).max() <= 1e-12
    assert np.abs(ref - x0.numpy()).max() > 1e-3  # the run moved
    dn = np.eye(r) if d is None else d.numpy()
    f_ref = -np.trace(ref.T @ c.numpy() @ ref @ dn)
    assert abs(res.info["f"] - f_ref) <= 1e-12 * max(1.0, abs(f_ref))


def test_same_source_unjitted(tmp_path):
    """``NUMBA_DISABLE_JIT=1``: the same kernels as plain Python (a subprocess) give the
    compiled answers on small O(2) instances (also checked against the brute force) and the same
    OBCD iterates."""
    script = Path(__file__).with_name("_obcd_kernel_unjitted.py")
    out = tmp_path / "unjitted.npz"
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    subprocess.run([sys.executable, str(script), str(out)], check=True, env=env, timeout=600)
    sys.path.insert(0, str(script.parent))
    try:
        import _obcd_kernel_unjitted as mod
        from test_subproblem_o2 import brute_force, ours_value
    finally:
        sys.path.pop(0)
    py = np.load(out)
    jit = mod.compute()
    meta = json.loads(str(py["meta"]))
    assert meta["numba_disabled"] and not mod.jit_disabled()
    for key in jit:
        assert np.abs(jit[key] - py[key]).max() <= 1e-12, key
    for kind, lam, tau in mod.CASES:
        inst = mod.instances(kind)
        kb = brute_force(inst, kind, lam, tau)
        ko = ours_value(torch.from_numpy(py[f"V_{kind}"]), inst, kind, lam, tau)
        feas = np.isfinite(kb)
        assert np.max((ko[feas] - kb[feas]) / np.maximum(1.0, np.abs(kb[feas]))) <= 1e-10


@pytest.mark.parametrize("kind", ["l1", "l0", "capped", "nonneg"])
@pytest.mark.parametrize("order", ["cyclic", "greedy"])
def test_orders_monotone_and_feasible(kind, order):
    n, r = 30, 4
    _, oracle = _oracle(n, 3)
    geo = StiefelGeometry(n, r)
    x0 = _start(n, r, kind)
    # 134 iterations of n/2 = 15 pair steps, an evaluation every 7 (105 pair steps)
    res = OBCD(TERMS[kind], pairs=order, seed=2, max_iterations=134, eval_every=7).run(
        oracle, x0, geo)
    cost = np.array(res.history["cost"])
    assert np.all(np.diff(cost) <= 1e-13 * np.abs(cost[1:]).max()), np.diff(cost).max()
    assert cost[-1] < cost[0] - 1e-3
    assert max(res.history["violation"]) <= 1e-12
    if kind == "nonneg":
        assert float(res.point.min()) >= 0.0
    again = OBCD(TERMS[kind], pairs=order, seed=2, max_iterations=134,
                 eval_every=7).run(oracle, x0, geo)
    assert torch.equal(again.point, res.point)  # deterministic given the seed


class _PythonPath(OBCD):
    """OBCD with its compiled pair loop switched off after setup: the pair steps of
    :meth:`OBCD.step` on the tracker's arrays (the float32 path) on float64 data."""

    def setup(self, run):
        super().setup(run)
        run.kernel = False


@pytest.mark.parametrize("kind", ["l1", "nonneg"])
@pytest.mark.parametrize("candidates", [1, 6])
def test_python_pair_steps_equal_the_compiled_loop(kind, candidates):
    """The greedy (and random) order is one algorithm on both paths: the Python steps read the
    same ``candidates`` queued pairs per step and apply the same best one, so after 360 pair
    steps (36 iterations of n/2 = 10; several greedy draws of 1024 // 6 steps) the iterates
    agree to 1e-12 and differ from the other order's."""
    n, r = 20, 3
    _, oracle = _oracle(n, 4)
    x0 = _start(n, r, kind)
    geo = StiefelGeometry(n, r)
    order = "greedy" if candidates > 1 else "random"
    points = []
    for cls in (OBCD, _PythonPath):
        solver = cls(TERMS[kind], pairs=order, candidates=candidates, seed=3, max_iterations=36,
                     eval_every=9, refresh_every=100)
        run = solver.start(oracle, x0, geo)
        assert run.kernel == (cls is OBCD)
        res = solver.run(oracle, x0, geo)
        assert res.info["block_updates"] == 360
        points.append(res.point)
    assert torch.abs(points[0] - points[1]).max() <= 1e-12
    other = OBCD(TERMS[kind], pairs="random" if candidates > 1 else "greedy", seed=3,
                 max_iterations=36).run(oracle, x0, geo)
    assert torch.abs(other.point - points[0]).max() > 1e-3


def _kernel_args(c, x, h, alpha=1e-5):
    tab = breakpoint_tables(h)
    xa = x.numpy().copy()
    ya = c.numpy() @ xa
    fval = np.array([-float(np.sum(xa * ya))])
    return xa, ya, fval, (tab.th, tab.g, tab.k, tab.inf, tab.pval, tab.knot, tab.h0, tab.shared,
                          tab.continuous)


def test_greedy_step_applies_the_best_candidate():
    """One greedy step over 6 candidates equals the single step on the candidate whose model
    decrease K(I) − K(V) is largest; with the exact curvature that decrease is
    F(X) − F(X⁺) + α/2 ‖V − I‖², so it is recovered from the single steps' F."""
    n, r, alpha = 20, 3, 1e-5
    c, _ = _oracle(n, 4)
    h = L1(0.05)
    x0 = _start(n, r, "l1")
    pairs = random_pairs(n, 6, torch.Generator().manual_seed(5)).numpy()
    nod = np.empty((0, 0))
    xa, ya, fval, tabs = _kernel_args(c, x0, h)
    assert obcd_pairs(xa, ya, c.numpy(), nod, -1.0, alpha, pairs, 6, True, *tabs, fval) == (1, 0)
    decs, points = [], []
    for p in pairs:
        xs, ys, fs, _ = _kernel_args(c, x0, h)
        f0 = fs[0] + h.value(xs)
        obcd_pairs(xs, ys, c.numpy(), nod, -1.0, alpha, p[None], 1, True, *tabs, fs)
        z, u = x0.numpy()[p], xs[p]
        v = u @ np.linalg.pinv(z)
        decs.append(f0 - (fs[0] + h.value(xs)) + 0.5 * alpha * np.sum((v - np.eye(2)) ** 2))
        points.append(xs)
    best = int(np.argmax(decs))
    assert decs[best] > 0.0 and np.sort(decs)[-1] > np.sort(decs)[-2] + 1e-9
    assert np.abs(xa - points[best]).max() <= 1e-15
    assert abs(fval[0] + h.value(xa) - (-np.sum(points[best] * (c.numpy() @ points[best]))
                                         + h.value(points[best]))) <= 1e-12


def test_non_finite_model_stops_before_writing():
    n, r = 10, 2
    c, _ = _oracle(n, 6)
    c = c.clone()
    x0 = _start(n, r, "l1")
    xa, ya, fval, tabs = _kernel_args(c, x0, L1(0.1))
    c[7, 7] = float("inf")
    pairs = np.array([[0, 1], [2, 3], [7, 4], [5, 6]])
    x_before = xa.copy()
    done, status = obcd_pairs(xa, ya, c.numpy(), np.empty((0, 0)), -1.0, 1e-5, pairs, 1, True,
                              *tabs, fval)
    assert (done, status) == (2, NONFINITE_CURVATURE)
    assert np.array_equal(xa[[4, 7]], x_before[[4, 7]])  # the failing pair was not written
    assert np.abs(xa - x_before).max() > 0  # the two steps before it were


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["l1", "l0", "capped", "nonneg"])
def test_feasible_after_1e6_compiled_steps(kind):
    """10⁶ compiled OBCD steps (random pairs, exact curvature): on St(n, r) to 1e-12."""
    n, r = 200, 10
    _, oracle = _oracle(n, 8)
    geo = StiefelGeometry(n, r)
    res = OBCD(TERMS[kind], seed=0, max_iterations=10**6, eval_every=10**5).run(
        oracle, _start(n, r, kind), geo)
    assert res.iterations == 10**6
    cost = np.array(res.history["cost"])
    assert np.all(np.diff(cost) <= 1e-13 * np.abs(cost).max())
    err = float(torch.linalg.matrix_norm(res.point.mT @ res.point - torch.eye(r, dtype=DT), ord=2))
    print(f"\n[obcd 1e6 {kind}] ||X'X - I||_2 = {err:.2e}, violation {res.violation:.2e}")
    assert err <= 1e-12 and res.violation <= 1e-12
    if kind == "nonneg":
        assert float(res.point.min()) >= 0.0
