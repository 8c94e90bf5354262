"""Benchmark: RSSM vs RSubGrad on DPCP (robust subspace recovery), wall time to a target angle.

Default (the issue's sizes): n = 1000, d = 800 (X ∈ St(1000, 200)), 4000 inliers (5d) + 4000
Gaussian outliers (outlier ratio 0.5), unit-norm points, f(X) = (1/m) Σ_j ‖Xᵀy_j‖₂;
RSSM with ℓ ∈ {4, 10, 20} and RSubGrad (full Riemannian subgradient, polar retraction), all
from the same start — the standard DPCP spectral initialisation (bottom-c eigenvectors of
YYᵀ; ``--init random`` for a random point) — with the same step rule: γ₀ = 0.5/‖grad f(X₀)‖_F
("auto") and geometric decay β per *epoch* (β per RSubGrad iteration, β^(2/ℓ) per RSSM
block step, since a block step updates 2/ℓ of the columns). On the DPCP column oracle one
iteration of every method is one epoch (RSSM: ⌈ℓ/2⌉ block steps). Fewer inliers (3d) or a random
start made some runs stall at a large angle for the step rules tried (β = 0.95–0.97).

Measured, in one run:

* time to largest principal angle ≤ 1e-6 (``--target``; iteration time only: the angle is
  checked after every iteration, outside the clock), for each step rule of ``--schedules`` (the
  paper's geometric decay, the adaptive ``polyak`` (``Polyak(path=None)``: the level halved
  readily), ``polyak-path`` (``Polyak(path=30)``, the solvers' default) and
  ``geometric-on-stall`` rules of
  :mod:`orthoplug.solvers.step_rules`, each with every ``--patience``, and ``default``, the
  solvers' default rule with their default options); speed-ups are relative to
  RSubGrad with the first rule and to the fastest RSubGrad run;
* the cost of one epoch and its terms in process CPU time (min and median of ``--repeats``
  interleaved timings; the terms at a fixed point): for RSubGrad the weights, the subgradient
  product (``(1/m) Y W``), the Stiefel step and the cache product (``Z = YᵀX``); for RSSM
  (float64 CPU: the column pass of :mod:`orthoplug.kernels.dpcp`), times the ⌈ℓ/2⌉ block steps
  of an epoch, the refresh product ``Yᵀ X_A``, its copy into the cache, the weight sweep, the
  subgradient product ``(1/m) Y W_C``, ``‖ξ‖²`` and the block update (projection (15) +
  polar); "other" is the whole epoch less its terms (bookkeeping, allocation, Python).

The compiled kernel is loaded (or compiled) by a tiny run before the clocks start.

    python benchmarks/rssm_dpcp.py              # issue sizes (several minutes)
    python benchmarks/rssm_dpcp.py --quick      # n = 200, d = 160 (seconds)
    python benchmarks/rssm_dpcp.py --out rssm_dpcp.json
    python benchmarks/rssm_dpcp.py --target 1e-4 --schedules geometric,polyak,geometric-on-stall
    python benchmarks/rssm_dpcp.py --target 1e-4 --ells 4,10 --schedules polyak \
        --rsubgrad-schedules geometric,polyak     # RSSM-Polyak vs RSubGrad's paper and best rules
    python benchmarks/rssm_dpcp.py --target 1e-4 --ells 4 --schedules polyak --pairs matching \
        --patience 1,3 --rsubgrad-schedules geometric,polyak   # the suite's RSSM configuration
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time

import numpy as np
import torch

from orthoplug import warm_up
from orthoplug.bench.suites.rssm import dpcp_solver
from orthoplug.geometry._linalg import sym
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.geometry.stiefel_block import (
    block_update,
    complement,
    partition_columns,
    polar_tall,
    take_columns,
)
from orthoplug.kernels.dpcp import dpcp_weights
from orthoplug.problems.nonsmooth_problems import dpcp_instance
from orthoplug.solvers.rssm import block_subgradient_sq


def time_to_target(solver, oracle, x0, geometry, prob, *, max_epochs: int,
                   target: float) -> dict:
    """Run ``solver`` iteration by iteration (one epoch each on the DPCP column oracle); stop
    when the angle is ≤ target or after max_epochs. Wall and process CPU time of the iterations
    (the CPU clock is less sensitive to other load)."""
    steps = solver.iterate(oracle, x0, geometry)
    clock, cpu, tracker = 0.0, 0.0, None
    trace = []
    reached = cpu_reached = None
    for epoch in range(1, max_epochs + 1):
        start, cpu_start = time.perf_counter(), time.process_time()
        tracker = next(steps)
        clock += time.perf_counter() - start
        cpu += time.process_time() - cpu_start
        angle = prob.principal_angle(tracker.x)
        if epoch % 10 == 0 or angle <= target:
            trace.append((epoch, round(clock, 4), angle))
        if angle <= target:
            reached, cpu_reached = clock, cpu
            break
    return {"time_to_target": reached, "cpu_to_target": cpu_reached, "time": clock,
            "cpu_time": cpu, "epochs": epoch, "final_angle": angle,
            "time_per_epoch": clock / epoch, "cpu_per_epoch": cpu / epoch,
            "cost": float(tracker.value()), "trace": trace}


def _cpu(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def breakdown(prob, x0, ells, repeats: int) -> dict:
    """CPU seconds (min, median) of one epoch of each method and of its terms, per epoch
    (RSSM's block-step terms times its ⌈ℓ/2⌉ block steps), the timings interleaved."""
    oracle = prob.oracle()
    p, m = x0.shape[1], prob.data.shape[1]
    geo = StiefelGeometry(*x0.shape)
    y, yt = prob.data, oracle.data_rows()
    x = x0.mT.contiguous().mT
    z = oracle.z_of(y, x)
    zt = z.mT.contiguous()
    g_full = oracle.gradient(x)
    terms = {"RSubGrad": (1, {
        "weights": lambda: oracle.weights(z),
        "subgradient product": lambda: oracle.g_of(y, oracle.weights(z)),
        "stiefel step": lambda: polar_tall(x - 0.01 * (g_full - x @ sym(x.mT @ g_full))),
        "cache product": lambda: oracle.z_of(y, x)})}
    epochs = {"RSubGrad": dpcp_solver(None, schedule="polyak").iterate(oracle, x0, geo)}
    for ell in ells:
        blocks = partition_columns(p, ell)
        cols = torch.cat([blocks[0], blocks[ell // 2]])
        rest = complement(cols, p)
        x_cols = take_columns(x, cols)
        g = take_columns(g_full, cols)
        terms[f"RSSM-{ell}"] = (math.ceil(ell / 2), {
            "refresh product": lambda a=x_cols: a.mT @ y,
            "cache copy": lambda c=cols: zt.index_copy_(0, c, zt[c]),
            "weight sweep": lambda c=cols: dpcp_weights(zt.numpy(), c.numpy(),
                                                        np.empty((c.numel(), m)), True),
            "subgradient product": lambda c=cols: torch.from_numpy(
                np.empty((c.numel(), m))) @ yt,
            "norm of xi": lambda c=cols, r=rest, g=g: block_subgradient_sq(x, c, r, g),
            "block update": lambda c=cols, r=rest, g=g: block_update(x, c, g, 0.01, r)})
        epochs[f"RSSM-{ell}"] = dpcp_solver(ell, schedule="polyak", pairs="matching").iterate(
            prob.oracle(), x0, geo)
    times = {name: {"epoch": [], **{k: [] for k in parts}}
             for name, (_, parts) in terms.items()}
    for steps in epochs.values():
        next(steps)  # first iteration (and its setup) outside the timings
    for _ in range(repeats):
        for name, (per_epoch, parts) in terms.items():
            times[name]["epoch"].append(_cpu(lambda s=epochs[name]: next(s)))
            for key, fn in parts.items():
                times[name][key].append(per_epoch * _cpu(fn))
    out = {}
    for name, parts in times.items():
        out[name] = {k: (min(v), statistics.median(v)) for k, v in parts.items()}
        accounted = [sum(v[i] for k, v in parts.items() if k not in ("epoch", "weights"))
                     for i in range(repeats)]
        out[name]["other"] = tuple(
            f(e - a for e, a in zip(parts["epoch"], accounted, strict=True))
            for f in (min, statistics.median))
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 200, d = 160 (seconds)")
    parser.add_argument("--n", type=int, default=None)
    parser.add_argument("--d", type=int, default=None)
    parser.add_argument("--inliers", type=int, default=None)
    parser.add_argument("--outlier-ratio", type=float, default=0.5,
                        help="outliers / (inliers + outliers)")
    parser.add_argument("--ells", type=str, default="4,10,20")
    parser.add_argument("--decay", type=float, default=0.95, help="β per epoch")
    parser.add_argument("--init", choices=("spectral", "random"), default="spectral")
    parser.add_argument("--schedules", type=str, default="geometric",
                        help="comma-separated step rules run for every method: default (the "
                             "solvers' default rule), geometric, polyak (Polyak(path=None)), "
                             "polyak-path (Polyak(path=30)), geometric-on-stall")
    parser.add_argument("--rsubgrad-schedules", type=str, default=None,
                        help="RSubGrad's step rules (default: --schedules); speed-ups are "
                             "relative to RSubGrad with the first")
    parser.add_argument("--pairs", type=str, default="uniform",
                        help="comma-separated RSSM pair rules: uniform (the paper's), matching")
    parser.add_argument("--patience", type=str, default="3",
                        help="comma-separated patience values of the adaptive rules (polyak, "
                             "geometric-on-stall): one run per value, for every method")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the list of methods this many times in turn; times are the "
                             "medians over the rounds")
    parser.add_argument("--target", type=float, default=1e-6)
    parser.add_argument("--max-epochs", type=int, default=800)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--repeats", type=int, default=None, help="breakdown repetitions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=str, default=None, help="write results as JSON")
    args = parser.parse_args(argv)
    n = args.n or (200 if args.quick else 1000)
    d = args.d or (160 if args.quick else 800)
    inliers = args.inliers or 5 * d
    repeats = args.repeats or (20 if args.quick else 7)
    ells = [int(e) for e in args.ells.split(",")]
    torch.set_num_threads(args.threads)

    prob = dpcp_instance(n, d, inliers, outlier_ratio=args.outlier_ratio, seed=args.seed)
    c = n - d
    x0 = prob.spectral_point() if args.init == "spectral" else prob.random_point(args.seed + 1)
    geo = StiefelGeometry(n, c)
    print(f"DPCP n={n}, d={d}, p=c={c}, m={prob.data.shape[1]} ({prob.num_outliers} outliers), "
          f"{args.init} start (angle {prob.principal_angle(x0):.3f}), β={args.decay}/epoch, "
          f"target angle {args.target:g}, torch threads {args.threads}")

    results = {}
    schedules = args.schedules.split(",")
    base_schedules = (args.rsubgrad_schedules or args.schedules).split(",")

    patiences = [int(k) for k in args.patience.split(",")]

    def label(ell, schedule, pairs="uniform", patience=3):
        name = "RSubGrad" if ell is None else f"RSSM-{ell}"
        name = name if schedule == "geometric" else f"{name}/{schedule}"
        name = name if pairs == "uniform" else f"{name}/{pairs}"
        return name if patience == 3 else f"{name}/patience {patience}"

    def rule_options(schedule):
        if schedule in ("polyak", "polyak-path", "geometric-on-stall"):
            return [{"patience": k} for k in patiences]
        return [{}]

    runs = ([(None, sched, opts) for sched in base_schedules for opts in rule_options(sched)]
            + [(ell, sched, {"pairs": pairs, **opts}) for sched in schedules
               for opts in rule_options(sched) for ell in ells
               for pairs in args.pairs.split(",")])
    methods = [(label(ell, sched, **opts),
                dpcp_solver(ell, args.decay, args.seed, schedule=sched, **opts))
               for ell, sched, opts in runs]
    warm_up()
    rounds = {name: [] for name, _ in methods}
    for _ in range(args.rounds):
        for name, solver in methods:
            res = time_to_target(solver, prob.oracle(), x0, geo, prob,
                                 max_epochs=args.max_epochs, target=args.target)
            rounds[name].append(res)
            ttt = res["time_to_target"]
            print(f"  {name:10s} {'not reached' if ttt is None else f'{ttt:8.2f} s'}  "
                  f"epochs {res['epochs']:5d}  angle {res['final_angle']:.1e}  "
                  f"{1e3 * res['time_per_epoch']:8.2f} ms/epoch  "
                  f"cpu {res['cpu_time']:8.2f} s", flush=True)
    for name, runs_of in rounds.items():  # the medians over the rounds (same epochs each)
        res = dict(runs_of[0])
        for key in ("time_to_target", "cpu_to_target"):
            reached_in = [r[key] for r in runs_of]
            res[key] = None if None in reached_in else statistics.median(reached_in)
            res[f"{key}_rounds"] = reached_in
        for key in ("time", "cpu_time"):
            res[key] = statistics.median(r[key] for r in runs_of)
        res["time_per_epoch"] = res["time"] / res["epochs"]
        res["cpu_per_epoch"] = res["cpu_time"] / res["epochs"]
        results[name] = res

    parts = breakdown(prob, x0, ells, repeats)
    base = results[label(None, base_schedules[0], **rule_options(base_schedules[0])[0])]
    reached = [res["time_to_target"] for name, res in results.items()
               if name.startswith("RSubGrad")]
    best = min((t for t in reached if t), default=None)
    print("\nmethod      time to target   vs RSubGrad (first rule / best rule)   CPU vs first  "
          "CPU ms/epoch")
    for name, res in results.items():
        ttt = res["time_to_target"]
        speed = (base["time_to_target"] / ttt) if (ttt and base["time_to_target"]) else None
        vs_best = best / ttt if (ttt and best) else None
        cpu = res["cpu_to_target"]
        cpu_speed = base["cpu_to_target"] / cpu if (cpu and base["cpu_to_target"]) else None
        res["speedup_vs_rsubgrad"], res["speedup_vs_best_rsubgrad"] = speed, vs_best
        res["cpu_speedup_vs_rsubgrad"] = cpu_speed
        res["breakdown"] = parts[name.split("/")[0]]
        print(f"{name:18s}  {'—' if ttt is None else f'{ttt:10.2f} s'}   "
              f"{'—' if speed is None else f'{speed:6.2f}x'} / "
              f"{'—' if vs_best is None else f'{vs_best:6.2f}x'}   "
              f"{'—' if cpu_speed is None else f'{cpu_speed:6.2f}x'}   "
              f"{1e3 * res['cpu_per_epoch']:9.2f}")
    print("\none epoch and its terms, CPU ms (min / median of the repeats)")
    for name, b in parts.items():
        print(f"{name:10s} " + ", ".join(f"{k} {1e3 * lo:.1f}/{1e3 * med:.1f}"
                                         for k, (lo, med) in b.items()))
    out = {"config": {"n": n, "d": d, "c": c, "m": int(prob.data.shape[1]),
                      "outliers": prob.num_outliers, "outlier_ratio": args.outlier_ratio,
                      "decay_per_epoch": args.decay,
                      "init": args.init, "schedules": schedules,
                      "rsubgrad_schedules": base_schedules, "pairs": args.pairs.split(","),
                      "patience": patiences, "rounds": args.rounds,
                      "target": args.target, "threads": args.threads, "seed": args.seed,
                      "torch": torch.__version__, "machine": platform.machine(),
                      "processor": platform.processor()},
           "results": results}
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=1)
    return out


if __name__ == "__main__":
    main()
