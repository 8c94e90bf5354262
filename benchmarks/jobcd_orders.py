r"""GS-JOBCD pair orders: pairs and seconds to a 1e-9 certified gap, random vs cyclic vs greedy.

Problem: ``min tr(XᵀCX)`` over O(J), J = diag(I, −I), from X₀ = I, with ``C = U diag(linspace(1,
10, n)) Uᵀ`` (Haar-random U) — the instance of the certificate tests — whose minimum is the
certificate Σ|λ(JC)|. Each order runs the compiled pair loop (quadratic fast path, exact
curvature) until ``f ≤ (1 + 1e-9)·certificate``, evaluated every 500 pairs; the kernel is loaded
before the first timed run. One thread.

    python benchmarks/jobcd_orders.py                       # n = 50 and 200
    python benchmarks/jobcd_orders.py --sizes 50 --out orders.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--candidates", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    import torch
    from threadpoolctl import threadpool_limits

    from orthoplug.geometry.manifolds import JOrthogonalGeometry
    from orthoplug.oracles import QuadraticOracle
    from orthoplug.problems.hevp import trace_min_certificate
    from orthoplug.solvers.jobcd import GSJOBCD

    threadpool_limits(1)
    torch.set_num_threads(1)
    orders = [("random", 1), ("cyclic", 1)] + [("greedy", c) for c in args.candidates]
    rows = []
    print(f"{'n':>5s} {'order':>8s} {'cand':>5s} {'pairs':>9s} {'seconds':>8s} {'µs/pair':>8s}")
    for n in args.sizes:
        rng = np.random.default_rng(n)
        u, _ = np.linalg.qr(rng.standard_normal((n, n)))
        c = (u * np.linspace(1.0, 10.0, n)) @ u.T
        oracle = QuadraticOracle(torch.from_numpy(0.5 * (c + c.T)))
        geo = JOrthogonalGeometry(n, n // 2)
        cert = trace_min_certificate(c, geo.j)
        x0 = torch.eye(n, dtype=torch.float64)
        GSJOBCD(side="row", seed=args.seed, max_iterations=10).run(oracle, x0, geo)  # compile
        for order, cand in orders:
            solver = GSJOBCD(side="row", pairs=order, candidates=cand, seed=args.seed,
                             max_iterations=10**7, target_cost=cert * (1 + 1e-9), eval_every=500)
            t0 = time.perf_counter()
            res = solver.run(oracle, x0, geo)
            sec = time.perf_counter() - t0
            rows.append({"n": n, "order": order, "candidates": cand, "pairs": res.iterations,
                         "seconds": sec, "gap": (res.cost - cert) / cert,
                         "violation": res.violation, "stop_reason": res.stop_reason})
            print(f"{n:5d} {order:>8s} {cand:5d} {res.iterations:9d} {sec:8.2f} "
                  f"{1e6 * sec / res.iterations:8.1f}")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
