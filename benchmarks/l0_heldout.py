"""ℓ0-SPCA held-out check of SparseOBCD's defaults (not a test): Gaussian instances other than
the suite's, each under the same CPU-second limit, in one process.

Problem: ``−tr(XᵀCX) + λ‖X‖₀`` on St(n, 20), ``C = ÂᵀÂ`` with ``Â = A/‖A‖_F``, A an m × n
standard Gaussian matrix (data seeds below; the suite uses 500 × 300 seed 0 and 500 × 1000
seed 1), ``λ = 0.5 λ₁(C)/n`` (:func:`~orthoplug.bench.suites.obcd.spca_lambda`), from the seeded
random start (seed 0). Every clock is read as process CPU time (as
``benchmarks/cpu_clock_bench.py``), so two versions run side by side compare.

    OMP_NUM_THREADS=1 python benchmarks/l0_heldout.py --time 1.5
"""

import time

time.perf_counter = time.process_time
time.time = time.process_time
time.monotonic = time.process_time

import argparse  # noqa: E402

import torch  # noqa: E402

from orthoplug.bench.suites.obcd import spca_lambda  # noqa: E402
from orthoplug.geometry.stiefel import StiefelGeometry  # noqa: E402
from orthoplug.problems import spca  # noqa: E402
from orthoplug.solvers.sparse_obcd import SparseOBCD  # noqa: E402

#: (m, n, data seed) of the held-out instances
INSTANCES = ((500, 300, 1), (500, 300, 2), (500, 300, 3), (500, 300, 5), (400, 500, 3),
             (600, 400, 4))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time", type=float, default=1.5, help="CPU seconds per instance")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for m, n, seed in INSTANCES:
        c = spca.covariance(spca.gaussian_data(m, n, seed=seed))
        prob = spca.l0_spca(c, 20, spca_lambda(c, "l0"))
        x0 = prob.initial_point("random", 0)
        res = SparseOBCD(prob.h, seed=0, max_time=args.time, max_iterations=10**12,
                         eval_every=10).run(prob.oracle, x0, StiefelGeometry(n, 20))
        restarts = [s.get("count", 0) for s in res.info["stages"] if s["name"] == "restarts"]
        print(f"gauss-{m}x{n} seed {seed}: F = {prob.objective(res.point):.6f}, "
              f"{res.iterations} iterations, start {res.info['start']}, point from "
              f"{res.info.get('point_from')}, restarts {sum(restarts)}", flush=True)


if __name__ == "__main__":
    main()
