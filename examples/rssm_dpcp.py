"""Robust subspace recovery (DPCP) with RSSM, through pymanopt.
============================================================

Data: inliers in a random d-dimensional subspace S of ℝⁿ plus as many Gaussian outliers.
RSSM minimises f(X) = (1/m) Σ_j ‖Xᵀy_j‖₂ over St(n, n − d); the minimiser spans S^⊥.

::

    python examples/rssm_dpcp.py --n 100 --d 70 --inliers 500
"""

from __future__ import annotations

import argparse
import time

import pymanopt

from orthoplug.adapters.pymanopt import RSSM
from orthoplug.problems.nonsmooth_problems import dpcp_instance


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--d", type=int, default=70)
    parser.add_argument("--inliers", type=int, default=500)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    prob = dpcp_instance(args.n, args.d, args.inliers, outlier_ratio=0.5, seed=args.seed)
    c = args.n - args.d
    manifold = pymanopt.manifolds.Stiefel(args.n, c)

    # pymanopt needs a cost; RSSM itself uses the column oracle, which caches Z = YᵀX and
    # computes only the subgradient columns of the current block pair.
    oracle = prob.oracle()  # "l12"; prob.oracle("l1") is the entrywise ‖YᵀX‖₁ / m
    problem = pymanopt.Problem(manifold, pymanopt.function.numpy(manifold)(
        lambda x: float(oracle.value(_torch(x)))))

    optimizer = RSSM(num_blocks=args.blocks, max_iterations=args.iterations,  # Polyak steps
                     seed=args.seed)
    x0 = prob.random_point(args.seed + 1).numpy()
    start = time.perf_counter()
    result = optimizer.run(problem, initial_point=x0, oracle=oracle)
    elapsed = time.perf_counter() - start

    angle = prob.principal_angle(_torch(result.point))
    print(f"RSSM (ℓ = {args.blocks}): {result.iterations} iterations in {elapsed:.2f} s, "
          f"cost {result.cost:.8f}, largest principal angle to S^⊥ {angle:.2e}, "
          f"‖XᵀX − I‖ = {result.violation:.1e}")
    return {"rssm_angle": angle, "time": elapsed, "cost": result.cost}


def _torch(a):
    import numpy as np
    import torch

    return torch.from_numpy(np.asarray(a, dtype=np.float64))


if __name__ == "__main__":
    main()
