"""RSDM-P on Procrustes with and without row-priced Armijo trials, interleaved in one process.

    OMP_NUM_THREADS=1 python benchmarks/rsdm_row_prices.py [--n 1000 --p 500 --r 354 --gap 1e-2]

"with": ``ProcrustesProblem.oracle("linear")`` (its ``row_value_change`` prices a trial in
O(rp)); "without": the same value, gradient and gradient rows but no row price (each trial
evaluates the cost, O(np)). Same seed, so the same iterates; the times are to the gap.
"""

from __future__ import annotations

import argparse
import time

import torch

from orthoplug.bench.suites.rsdm import EXPERIMENTS, random_stiefel
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.oracles import RowGradientOracle
from orthoplug.solvers.rsdm import RSDM


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--p", type=int, default=500)
    parser.add_argument("--r", type=int, default=None, help="default: the default rule")
    parser.add_argument("--gap", type=float, default=1e-2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    problem = {e.name: e for e in EXPERIMENTS}["procrustes"].build(args.n, args.p, 42)
    x0 = random_stiefel(args.n, args.p, 42)
    with_prices = problem.oracle("linear")
    without = RowGradientOracle(problem.linear_cost, problem.linear_gradient,
                                lambda x, rows: (-2.0 * problem.scale) * problem.m.to(x)[rows])
    points = {}
    for _ in range(args.repeats):
        for name, oracle in (("without", without), ("with", with_prices)):
            solver = RSDM(args.r, seed=0, max_iterations=10**6, eval_every=10,
                          target_cost=problem.target(args.gap))
            start = time.perf_counter()
            out = solver.run(oracle, x0, StiefelGeometry(args.n, args.p))
            seconds = time.perf_counter() - start
            points[name] = out.point
            print(f"{name:8s} row prices: {seconds:7.2f} s  iterations {out.iterations}  r "
                  f"{out.info['r']}  gap {problem.relative_gap(out.cost):.2e}", flush=True)
    diff = float((points["with"] - points["without"]).abs().max())
    print(f"max |X_with − X_without| = {diff:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
