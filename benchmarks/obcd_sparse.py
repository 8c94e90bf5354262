"""OBCD, SparseOBCD and the baselines on ℓ1-SPCA, ℓ0-SPCA and NN-PCA: equal time, same start.

Every method gets the same wall-clock budget in one process, single-threaded. ``OBCD(id)`` is
the paper's OBCD-R(id) from ``I(n, r)``; every other method, ``SparseOBCD`` included, starts from
the same random point (NN-PCA: a random 0/1 column partition, feasible). Methods: SparseOBCD
(:mod:`orthoplug.solvers.sparse_obcd`), ManPG, and on ℓ0 / NN-PCA the paper's splitting
baselines LADMM, RADMM, PSM. Scores: F as the suite scores it (ℓ0: ``f + λ·#{|X_ij| > 1e-6}``;
NN-PCA: f at a feasible point).

Reported per instance: final F per method; for ℓ1 the relative gap
``(F_SparseOBCD − F_ManPG)/|F_ManPG|``; for ℓ0 / NN-PCA whether SparseOBCD ends lowest and the
ratio ``t_other / t_ours``: the best other method's time to its own final F (first history entry
within 1e-9 relative) over SparseOBCD's time to reach that F (∞ if never).

    python benchmarks/obcd_sparse.py --time 4 --scale quick
    python benchmarks/obcd_sparse.py --time 6 --scale paper --out obcd_sparse.json
"""

from __future__ import annotations

import argparse
import json
import math

import torch

from orthoplug import warm_up
from orthoplug.baselines.ladmm import LADMM
from orthoplug.baselines.manpg import ManPG
from orthoplug.baselines.psm import PSM
from orthoplug.baselines.radmm import RADMM
from orthoplug.bench.suites.obcd import spca_datasets, spca_lambda
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.problems import spca
from orthoplug.solvers.obcd import OBCD
from orthoplug.solvers.sparse_obcd import SparseOBCD


def _score(prob, x) -> float:
    if prob.kind == "l0":
        return prob.f(x) + prob.h.lam * spca.count_l0(x)
    return prob.objective(x)


def _first_time(trace, value) -> float:
    tol = 1e-9 * max(1.0, abs(value))
    return next((t for t, f in trace if f <= value + tol), math.inf)


def run_instance(name, a, kind, budget, seed=0) -> dict:
    c = spca.covariance(a)
    n = c.shape[0]
    if kind == "nn":
        prob = spca.nn_pca(c, min(10, n))
    else:
        make = spca.l1_spca if kind == "l1" else spca.l0_spca
        prob = make(c, min(20, n), spca_lambda(c, kind))
    geo = StiefelGeometry(n, prob.r)
    x_rnd, x_id = prob.initial_point("random", seed), prob.initial_point("identity")
    stop = dict(max_time=budget, max_iterations=10**12)
    solvers = {"OBCD(id)": (OBCD(prob.h, seed=seed, eval_every=5, **stop), x_id),
               "SparseOBCD": (SparseOBCD(prob.h, seed=seed, eval_every=10, **stop), x_rnd),
               "ManPG": (ManPG(prob.h, eval_every=1, min_gradient_norm=1e-9, **stop), x_rnd)}
    if kind != "l1":
        for cls in (LADMM, RADMM, PSM):
            solvers[cls.name] = (cls(prob.h, eval_every=10, **stop), x_rnd)
    rows = {}
    for method, (solver, x0) in solvers.items():
        res = solver.run(prob.oracle, x0, geo)
        hist = list(zip(res.history["time"], res.history["cost"], strict=True))
        # the history's end rescored as the table scores it: ℓ0 with the thresholded count;
        # the splitting baselines' histories hold their own (unrounded) cost, so their final F
        # is first "reached" at their last entry (their time to it is an upper bound)
        hist[-1] = (hist[-1][0], _score(prob, res.point))
        rows[method] = {"F": _score(prob, res.point), "iterations": res.iterations,
                        "time": res.time, "violation": res.violation,
                        "nnz_per_col": spca.count_l0(res.point) / prob.r, "trace": hist,
                        "info": {k: v for k, v in res.info.items()
                                 if isinstance(v, (int, float, str))}}
    ours = rows["SparseOBCD"]
    others = {m: r for m, r in rows.items() if m not in ("SparseOBCD", "OBCD(id)")}
    best_name = min(others, key=lambda m: others[m]["F"])
    best = others[best_name]
    out = {"dataset": name, "kind": kind, "n": n, "r": prob.r,
           "lam": getattr(prob.h, "lam", None), "budget": budget, "rows": rows,
           "best_other": best_name}
    if kind == "l1":
        out["rel_gap_vs_manpg"] = (ours["F"] - rows["ManPG"]["F"]) / abs(rows["ManPG"]["F"])
    else:
        t_other = _first_time(best["trace"], best["F"])
        t_ours = _first_time(ours["trace"], best["F"])
        out.update(lowest=ours["F"] <= min(r["F"] for r in others.values()),
                   t_other=t_other, t_ours=t_ours,
                   speedup=(t_other / t_ours) if t_ours > 0 else math.inf)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time", type=float, default=4.0, help="seconds per method")
    ap.add_argument("--scale", choices=("quick", "paper"), default="quick")
    ap.add_argument("--kinds", default="l1,l0,nn")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--datasets", default=None,
                    help="comma-separated dataset names (default: all of the scale)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    warm_up()
    results = []
    datasets = spca_datasets(args.scale, args.seed)
    if args.datasets:
        wanted = args.datasets.split(",")
        unknown = sorted(set(wanted) - set(datasets))
        if unknown:
            ap.error(f"unknown dataset(s) {unknown}; choose from {sorted(datasets)}")
        datasets = {k: datasets[k] for k in wanted}
    for name, a in datasets.items():
        for kind in args.kinds.split(","):
            res = run_instance(name, a, kind, args.time, args.seed)
            results.append(res)
            print(f"\n{name} {kind} n={res['n']} r={res['r']}")
            for m, r in res["rows"].items():
                print(f"  {m:11s} F {r['F']:+.6f}  nnz/col {r['nnz_per_col']:6.1f}  "
                      f"it {r['iterations']:7d}  viol {r['violation']:.1e}")
            if kind == "l1":
                print(f"  SparseOBCD vs ManPG relative gap {res['rel_gap_vs_manpg']:+.2e}")
            else:
                print(f"  lowest: {res['lowest']}; best other {res['best_other']} reaches its "
                      f"final F at {res['t_other']:.2f} s, SparseOBCD at {res['t_ours']:.2f} s "
                      f"(ratio {res['speedup']:.2f})", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=1, default=float)
    return results


if __name__ == "__main__":
    main()
