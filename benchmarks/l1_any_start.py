"""ℓ1-SPCA from any start: SparseOBCD and OBCD against ManPG at equal time (not a test).

Problem (:mod:`orthoplug.problems.spca`): ``F(X) = −tr(XᵀCX) + μ‖X‖₁`` on St(n, r) with
``C = ÂᵀÂ``, ``Â = A/‖A‖_F`` and A standardized (each feature centred, unit variance).
Instances: every data set × r ∈ {2, 5, 10} (r < n) × μ ∈ {weak, strong} × start ∈ {random,
data}, where ``strong = 0.5 λ₁(C)/√n`` (the OBCD suite's λ), ``weak = strong/5``, ``random``
the Q factor of a Gaussian n × r matrix and ``data`` the PCA solution (top-r eigenvectors of C).

Two instance sets, never mixed:

* ``tuning`` — scikit-learn's digits (n = 64) and wine (n = 13), Gaussian 300 × 100 (seed 0):
  the set the defaults were chosen on;
* ``held-out`` — scikit-learn's breast_cancer (n = 30) and diabetes (n = 10), Gaussian
  400 × 150 (seed 1): the check.

Methods, each with the same budget (``--time`` seconds; ``--clock cpu``: this process's CPU
seconds, every clock read as ``time.process_time``, as ``benchmarks/cpu_clock_bench.py`` does, so
that runs at different loads compare), interleaved per instance, in one
process (run with ``OMP_NUM_THREADS=1``; the script also sets one torch thread): ManPG (the
reference), OBCD (random pairs, exact curvature) and SparseOBCD (default options), all from the
instance's start. Reported per instance: final F of each method and its relative gap to ManPG
``(F − F_ManPG)/|F_ManPG|``; the summary counts the instances where a method ends at or below
ManPG (gap ≤ 1e-4).

    OMP_NUM_THREADS=1 python benchmarks/l1_any_start.py --set tuning --out tuning.json
    OMP_NUM_THREADS=1 python benchmarks/l1_any_start.py --set held-out --time 1 --out held.json
    OMP_NUM_THREADS=1 python benchmarks/l1_any_start.py --set tuning --clock cpu --out tuning.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np
import torch

from orthoplug import warm_up
from orthoplug.baselines.manpg import ManPG
from orthoplug.bench.suites.obcd import spca_lambda
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.problems import spca
from orthoplug.solvers.obcd import OBCD
from orthoplug.solvers.sparse_obcd import SparseOBCD

#: a method "ends at or below ManPG" when its relative gap is at most this
TOLERANCE = 1e-4


def _sklearn(name: str) -> np.ndarray:
    from sklearn import datasets

    return getattr(datasets, f"load_{name}")().data.astype(np.float64)


SETS = {
    "tuning": {"digits": lambda: _sklearn("digits"), "wine": lambda: _sklearn("wine"),
               "gauss-300x100": lambda: spca.gaussian_data(300, 100, seed=0)},
    "held-out": {"breast_cancer": lambda: _sklearn("breast_cancer"),
                 "diabetes": lambda: _sklearn("diabetes"),
                 "gauss-400x150": lambda: spca.gaussian_data(400, 150, seed=1)},
}


def standardized(a: np.ndarray) -> np.ndarray:
    """Columns centred and scaled to unit variance (constant columns left at 0)."""
    a = a - a.mean(0)
    std = a.std(0)
    return a / np.where(std > 0, std, 1.0)


def instances(which: str, seed: int):
    """``(name, problem, start)`` of a set (module docstring)."""
    for data_name, load in SETS[which].items():
        c = spca.covariance(standardized(load()))
        n = c.shape[0]
        strong = spca_lambda(c, "l1")
        pca = torch.linalg.eigh(c)[1].flip(-1)
        for r in (2, 5, 10):
            if r >= n:
                continue
            for mu_name, mu in (("weak", strong / 5), ("strong", strong)):
                prob = spca.l1_spca(c, r, mu)
                starts = {"random": prob.initial_point("random", seed),
                          "data": pca[:, :r].contiguous()}
                for start_name, x0 in starts.items():
                    yield f"{data_name}/r={r}/{mu_name}/{start_name}", prob, x0


def methods(prob, seed: int, budget: float) -> dict:
    stop = dict(max_time=budget, max_iterations=10**9)
    return {"ManPG": ManPG(prob.h, eval_every=1, min_gradient_norm=1e-12, **stop),
            "OBCD": OBCD(prob.h, seed=seed, eval_every=200, **stop),
            "SparseOBCD": SparseOBCD(prob.h, seed=seed, eval_every=100, **stop)}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--set", choices=tuple(SETS), default="tuning")
    parser.add_argument("--time", type=float, default=1.0, help="seconds per method")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="budgets in wall seconds or in this process's CPU seconds")
    parser.add_argument("--out", type=str, default=None)
    args = parser.parse_args(argv)
    if args.clock == "cpu":  # the run clock reads time.perf_counter
        time.perf_counter = time.process_time
    torch.set_num_threads(1)
    warm_up()
    rows = []
    for name, prob, x0 in instances(args.set, args.seed):
        geo = StiefelGeometry(prob.n, prob.r)
        finals = {}
        for method, solver in methods(prob, args.seed, args.time).items():
            res = solver.run(prob.oracle, x0, geo)
            finals[method] = {"F": res.cost, "violation": res.violation,
                              "iterations": res.iterations, "time": res.time,
                              "zeros": int((res.point == 0).sum()),
                              "start": res.info.get("start")}
        ref = finals["ManPG"]["F"]
        for rec in finals.values():
            rec["gap"] = (rec["F"] - ref) / abs(ref)
        rows.append({"instance": name, "methods": finals})
        print(f"{name:34s} " + "  ".join(f"{m} {rec['F']:+.8f} ({rec['gap']:+.1e})"
                                          for m, rec in finals.items()), flush=True)
    summary = {}
    for method in rows[0]["methods"]:
        gaps = [row["methods"][method]["gap"] for row in rows]
        summary[method] = {"at_or_below_manpg": sum(g <= TOLERANCE for g in gaps),
                           "instances": len(gaps), "worst_gap": max(gaps),
                           "median_gap": float(np.median(gaps))}
        print(f"{method:10s} at or below ManPG on {summary[method]['at_or_below_manpg']}/"
              f"{len(gaps)}; worst gap {max(gaps):+.2e}, median {np.median(gaps):+.2e}")
    out = {"config": {"set": args.set, "time": args.time, "seed": args.seed,
                      "clock": args.clock, "tolerance": TOLERANCE, "torch": torch.__version__,
                      "machine": platform.machine()},
           "summary": summary, "rows": rows}
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=1)
    return out


if __name__ == "__main__":
    main()
