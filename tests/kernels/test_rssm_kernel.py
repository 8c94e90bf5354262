"""The DPCP column pass (:mod:`orthoplug.kernels.dpcp`): against dense formulas, with the weight
sweep jitted and un-jitted (``NUMBA_DISABLE_JIT=1``), and RSSM's iterates with and without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from orthoplug.baselines.rsubgrad import RSubGrad
from orthoplug.geometry.stiefel import StiefelGeometry, qf
from orthoplug.kernels.dpcp import dpcp_block_pass
from orthoplug.problems.nonsmooth_problems import DPCPOracle, dpcp_instance
from orthoplug.solvers.rssm import RSSM

#: a 4-point tail (m = 23 is not a multiple of 4), odd and even column counts, a zero data point
CASE = {"n": 9, "m": 23, "p": 7, "old": [5, 1, 6], "new": [2, 0, 6, 4, 3]}


def _case_arrays(seed: int = 0):
    rng = np.random.default_rng(seed)
    n, m, p = CASE["n"], CASE["m"], CASE["p"]
    y = rng.standard_normal((n, m))
    y[:, 7] = 0.0
    x = np.linalg.qr(rng.standard_normal((n, p)))[0]
    z = y.T @ rng.standard_normal((n, p))  # stale everywhere; fresh after the pass where needed
    z[:, [c for c in range(p) if c not in CASE["old"]]] = (y.T @ x)[
        :, [c for c in range(p) if c not in CASE["old"]]]
    return y, x, z


def run_case(row_norms: bool, seed: int = 0) -> dict:
    """The kernel on :data:`CASE`: refreshed Z, subgradient columns, value (JSON-able)."""
    y, x, z = _case_arrays(seed)
    old, new = torch.tensor(CASE["old"]), torch.tensor(CASE["new"])
    zt = torch.from_numpy(np.ascontiguousarray(z.T))
    value, g = dpcp_block_pass(torch.from_numpy(y), torch.from_numpy(np.ascontiguousarray(y.T)),
                               zt, torch.from_numpy(x[:, CASE["old"]]), old, new, row_norms)
    return {"z": zt.mT.tolist(), "g": g.tolist(), "value": value}


def _dense(y, x, row_norms: bool):
    """Value and full subgradient of the DPCP objectives by the dense formulas."""
    m = y.shape[1]
    z = y.T @ x
    if row_norms:
        norms = np.linalg.norm(z, axis=1)
        w = np.divide(z, norms[:, None], out=np.zeros_like(z), where=norms[:, None] > 0)
        return norms.sum() / m, y @ w / m, z
    return np.abs(z).sum() / m, y @ np.sign(z) / m, z


@pytest.mark.parametrize("row_norms", [True, False])
def test_kernel_matches_dense_formulas(row_norms):
    y, x, _ = _case_arrays()
    value, grad, z = _dense(y, x, row_norms)
    out = run_case(row_norms)
    assert np.abs(np.array(out["z"]) - z).max() <= 1e-13
    assert np.abs(np.array(out["g"]) - grad[:, CASE["new"]]).max() <= 1e-13
    assert abs(out["value"] - value) <= 1e-13
    assert np.abs(grad[:, CASE["new"]]).max() > 1e-2  # a real subgradient, not zeros


def test_pass_rejects_a_cache_in_the_wrong_layout():
    y, x, z = _case_arrays()
    data, cols = torch.from_numpy(y), torch.tensor(CASE["new"])
    for cache in (torch.from_numpy(z), torch.from_numpy(z.T)):  # Z instead of Zᵀ; not C order
        with pytest.raises(ValueError, match="C-order float64"):
            dpcp_block_pass(data, data.mT.contiguous(), cache, torch.from_numpy(x[:, :0]),
                            cols[:0], cols, True)


def test_same_source_unjitted():
    """``NUMBA_DISABLE_JIT=1``: the same source run as Python gives the compiled answers."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import numba; "
            "from test_rssm_kernel import run_case; "
            "print(json.dumps([numba.config.DISABLE_JIT, run_case(True, 1), run_case(False, 1)]))")
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    proc = subprocess.run([sys.executable, "-c", code, os.path.dirname(__file__)], check=True,
                          env=env, capture_output=True, text=True, timeout=300)
    disabled, *plain = json.loads(proc.stdout)
    assert disabled
    for row_norms, py in zip((True, False), plain, strict=True):
        jit = run_case(row_norms, 1)
        for key in ("z", "g"):
            assert np.abs(np.array(jit[key]) - np.array(py[key])).max() <= 1e-12
        assert abs(jit["value"] - py["value"]) <= 1e-12


# the entrywise objective from a random start amplifies rounding by ~2 per 5 block steps (with
# or without the kernel): compare fewer of its iterations (⌈ℓ/2⌉ = 2 block steps each here)
@pytest.mark.parametrize(("objective", "iterations"), [("l12", 75), ("l1", 13)])
@pytest.mark.parametrize("num_blocks", [3, 4])
def test_rssm_iterates_same_with_and_without_kernel(objective, iterations, num_blocks):
    prob = dpcp_instance(30, 22, 90, seed=2)
    x0 = prob.random_point(3)
    geo = StiefelGeometry(*x0.shape)
    runs = []
    for compiled in (True, False):
        solver = RSSM(num_blocks=num_blocks, seed=4, max_iterations=iterations,
                      eval_every=5)
        runs.append(solver.run(DPCPOracle(prob.data, objective, compiled=compiled), x0, geo))
    fast, ref = runs
    assert (fast.point - ref.point).abs().max() <= 1e-12
    assert (fast.point - x0).abs().max() > 1e-2  # the runs moved
    assert abs(fast.cost - ref.cost) <= 1e-12
    assert fast.info["gradient_columns"] == ref.info["gradient_columns"] > 0


def test_tracker_deferred_refresh_is_consistent():
    """Writes, values and subgradients in any order agree with a fresh oracle at the point."""
    prob = dpcp_instance(14, 9, 30, seed=5)
    x = prob.random_point(6)
    oracle = prob.oracle()
    assert oracle.compiled
    tracker = oracle.track(x)
    assert tracker.compiled
    gen = torch.Generator().manual_seed(7)
    point = x.clone()
    for cols in ([0, 2], [4], [1, 3]):  # two writes in a row, then reads
        cols = torch.tensor(cols)
        new = qf(torch.randn(14, cols.numel(), dtype=x.dtype, generator=gen))
        tracker.set_columns(cols, new)
        point[:, cols] = new
    torch.testing.assert_close(tracker.gradient_columns(torch.tensor([4, 0])),
                               oracle.gradient(point)[:, [4, 0]], rtol=0, atol=1e-13)
    torch.testing.assert_close(tracker.value(), oracle.value(point), rtol=0, atol=1e-13)
    tracker.set_columns(torch.tensor([2]), point[:, [3]])
    point[:, 2] = point[:, 3]
    torch.testing.assert_close(tracker.gradient(), oracle.gradient(point), rtol=0, atol=1e-13)
    torch.testing.assert_close(tracker.z, prob.data.mT @ point, rtol=0, atol=1e-13)
    # float32 points stay on the torch path; RSubGrad (full subgradients) is unaffected
    assert not oracle.track(x.float()).compiled
    res = RSubGrad(seed=0, max_iterations=5).run(oracle, x, StiefelGeometry(14, 5))
    ref = RSubGrad(seed=0, max_iterations=5).run(DPCPOracle(prob.data, compiled=False), x,
                                                 StiefelGeometry(14, 5))
    assert (res.point - ref.point).abs().max() <= 1e-12
