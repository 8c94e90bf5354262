"""Helper of ``test_obcd_kernel.test_same_source_unjitted`` (not collected by pytest).

``python _obcd_kernel_unjitted.py OUT.npz`` with ``NUMBA_DISABLE_JIT=1`` runs the kernels'
source as plain Python on small O(2) instances of every term and a short OBCD run, and saves the
answers; the test computes the same with the compiled kernels and compares.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch

from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.nonsmooth import L0, L1, CappedL1, NonNegative, Zero
from orthoplug.problems import spca
from orthoplug.solvers.obcd import OBCD
from orthoplug.subproblems.o2 import solve_o2_single

CASES = (("zero", 0.0, 1.0), ("l1", 0.3, 1.0), ("l0", 0.2, 1.0), ("capped", 0.5, 0.3),
         ("nonneg", 0.0, 1.0))


def term(kind, lam, tau):
    return {"zero": Zero, "l1": lambda: L1(lam), "l0": lambda: L0(lam),
            "capped": lambda: CappedL1(lam, tau), "nonneg": NonNegative}[kind]()


def instances(kind):
    from test_subproblem_o2 import make_instances

    rng = np.random.default_rng(40 + [c[0] for c in CASES].index(kind))
    return make_instances(rng, 16, 1, 6, kind == "nonneg")


def jit_disabled() -> bool:
    from numba.core import config

    return bool(config.DISABLE_JIT)


def compute() -> dict[str, np.ndarray]:
    out = {}
    for kind, lam, tau in CASES:
        inst = instances(kind)
        h = term(kind, lam, tau)
        P, Z, Q = (inst[k].numpy() for k in ("P", "Z", "Qt"))
        out[f"V_{kind}"] = np.stack([solve_o2_single(P[i], Z[i], h, Qt=Q[i])
                                     for i in range(P.shape[0])])
    c = spca.covariance(spca.gaussian_data(30, 12, seed=9))
    prob = spca.l1_spca(c, 3, 0.02)
    for kind, h, order in (("l1", L1(0.02), "random"), ("nonneg", NonNegative(), "greedy")):
        res = OBCD(h, pairs=order, candidates=3, seed=1, max_iterations=7,
                   eval_every=4).run(
            prob.oracle, torch.eye(12, 3, dtype=torch.float64), StiefelGeometry(12, 3))
        out[f"X_{kind}_{order}"] = res.point.numpy().copy()
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    res = compute()
    np.savez(sys.argv[1], meta=json.dumps({"numba_disabled": jit_disabled()}), **res)
