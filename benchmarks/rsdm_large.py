"""RSDM with its default r vs pymanopt CG on large PCA and Procrustes (n = 1000, 2000, 4000).

    OMP_NUM_THREADS=1 python benchmarks/rsdm_large.py --out docs/results/rsdm_large.json
    python benchmarks/rsdm_large.py --ns 1000 --fractions 0.5 --r-factors 0.5 1 2   # r rule check

For every n in ``--ns``, p = f·n for f in ``--fractions`` (default 1/10, 1/2, 3/4) and both
problems (data, start X0 and closed-form optimum of :mod:`benchmarks.rsdm_stiefel`'s ``Bench``:
PCA ``F = −½tr(XᵀAX)``, F* from the eigenvalues; Procrustes in the linear form, F* from the SVD),
the methods run one after the other in this process (so their times compare): RSDM-P with the
default step rule (no step given) and r = factor × the default r (``--r-factors``, default 1
only) and pymanopt
ConjugateGradient, each until the relative gap ``|F − F*|/|F*|`` is ≤ ``--gap`` (default 1e-3)
or ``--max-time`` seconds; the times to 1e-2 and 1e-3 are recorded. ``--repeats`` runs the
interleaved sequence that many times (medians reported). ``--rules default armijo polar`` runs
RSDM-P with no step given, with ``line_search="armijo"`` and with ``line_search="polar"`` (same
r) on each instance. ``--clock cpu`` times every run in this
process's CPU seconds instead of wall seconds (one thread per method, so the work done,
independent of the share of a loaded machine the process got).

Memory: each method is also run in a child process (the same problem, to the gap 1e-2 or
``--memory-time`` seconds) that reports its peak resident memory above the resident memory just
before the method starts (after building the problem data, which both methods share): the
Linux peak counter is reset (``/proc/self/clear_refs``) at that point, so this is the method's
own peak, numpy and torch allocations alike.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rsdm_stiefel import Bench, Monitor, run_pymanopt, run_rsdm  # noqa: E402

from orthoplug.solvers.rsdm import default_slice_dimension  # noqa: E402

LEVELS = ("1e-02", "1e-03")
#: RSDM-P variants of ``--rules``: the step rule's name in rsdm_stiefel's ``RSDM_VARIANTS``
RULES = {"default": "RSDM-P-default", "armijo": "RSDM-P-armijo", "polar": "RSDM-P-polar"}
#: the method label of each rule ("RSDM": the default)
LABELS = {"default": "RSDM", "armijo": "RSDM-armijo", "polar": "RSDM-polar"}


def limit_threads(threads: int) -> None:
    """One BLAS/torch thread pool size for every method (torch and numpy alike)."""
    torch.set_num_threads(threads)
    from threadpoolctl import threadpool_limits

    threadpool_limits(threads)


def run_one(bench: Bench, method: str, r: int | None, gap: float, cap: float):
    """One run of ``method`` (a label of :data:`LABELS` with slice dimension r, or "CG") to
    ``gap``."""
    if method == "CG":
        return run_pymanopt(bench, "CG", gap, cap)
    bench.r = r
    rule = next(rule for rule, label in LABELS.items() if label == method)
    return run_rsdm(bench, RULES[rule], {}, gap, cap)


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        return int(re.search(rf"{field}:\s+(\d+)", fh.read()).group(1))


def child_memory(kind: str, n: int, p: int, method: str, r: int | None, cap: float,
                 threads: int) -> dict:
    """In this (child) process: the method's peak RSS above the RSS at its start, in MiB."""
    limit_threads(threads)
    bench = Bench(kind, n, p, r)
    gc.collect()
    with open("/proc/self/clear_refs", "w") as fh:  # reset the peak (VmHWM) to the current RSS
        fh.write("5")
    base = _status_kib("VmRSS")
    out = run_one(bench, method, r, 1e-2, cap)
    peak = _status_kib("VmHWM")
    return {"peak_mib": (peak - base) / 1024, "iterations": out.iterations,
            "best_gap": out.best_gap}


def measure_memory(kind, n, p, method, r, cap, threads) -> dict:
    """Run :func:`child_memory` in a fresh interpreter."""
    code = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); "
            f"import rsdm_large as m; print(json.dumps(m.child_memory({kind!r}, {n}, {p}, "
            f"{method!r}, {r!r}, {cap}, {threads})))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ns", nargs="+", type=int, default=[1000, 2000])
    parser.add_argument("--fractions", nargs="+", type=float, default=[0.1, 0.5, 0.75])
    parser.add_argument("--problems", nargs="+", default=["pca", "procrustes"],
                        choices=["pca", "procrustes"])
    parser.add_argument("--r-factors", nargs="+", type=float, default=[1.0],
                        help="RSDM runs with r = factor × the default r (rounded, in [2, n])")
    parser.add_argument("--seed", type=int, default=42, help="the instances' data and start")
    parser.add_argument("--gap", type=float, default=1e-3)
    parser.add_argument("--max-time", type=float, default=120.0, help="cap per run, seconds")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--memory-time", type=float, default=20.0,
                        help="cap of the memory runs (0: no memory measurement)")
    parser.add_argument("--rules", nargs="+", default=["default"], choices=list(RULES),
                        help="RSDM-P step rules run at each r (default: no step given)")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="time the runs in wall seconds or in this process's CPU seconds")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="write the results as JSON")
    args = parser.parse_args(argv)
    limit_threads(args.threads)
    if args.clock == "cpu":
        Monitor.clock = staticmethod(time.process_time)
    report = {"args": vars(args), "torch": torch.__version__, "numpy": np.__version__,
              "machine": platform.platform(), "python": sys.version.split()[0],
              "instances": []}

    def save():
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=1, default=str))

    for n in args.ns:
        for frac in args.fractions:
            p = max(1, round(frac * n))
            r0 = default_slice_dimension(n, p)
            rs = sorted({min(n, max(2, round(f * r0))) for f in args.r_factors})
            rsdm = [LABELS[rule] for rule in args.rules]
            methods = [(m, r) for r in rs for m in rsdm] + [("CG", None)]
            for kind in args.problems:
                bench = Bench(kind, n, p, r0, seed=args.seed)
                entry = {"problem": kind, "n": n, "p": p, "seed": args.seed, "default_r": r0,
                         "runs": {}}
                print(f"\n== {kind} n={n} p={p} (default r = {r0}) ==", flush=True)
                times = {f"{m}" if r is None else f"{m} r={r}": [] for m, r in methods}
                for _ in range(args.repeats):  # interleaved: RSDM(s), CG, RSDM(s), CG, ...
                    for method, r in methods:
                        label = method if r is None else f"{method} r={r}"
                        out = run_one(bench, method, r, args.gap, args.max_time)
                        times[label].append({"to": out.times_to_gap,
                                             "iterations": out.iterations,
                                             "best_gap": out.best_gap})
                        cells = "  ".join(f"{lv}: {out.times_to_gap.get(lv, float('nan')):7.2f}s"
                                          for lv in LEVELS)
                        print(f"  {label:12s} {cells}  iterations {out.iterations:6d}  best gap "
                              f"{out.best_gap:.1e}", flush=True)
                for label, runs in times.items():
                    med = {}
                    for lv in LEVELS:
                        got = [run["to"][lv] for run in runs if lv in run["to"]]
                        med[lv] = statistics.median(got) if len(got) == len(runs) else None
                    entry["runs"][label] = {"median_seconds_to": med, "runs": runs}
                if args.memory_time > 0:
                    entry["peak_mib"] = {}
                    for method, r in ((("RSDM", r0), ("CG", None))):
                        mem = measure_memory(kind, n, p, method, r, args.memory_time,
                                             args.threads)
                        entry["peak_mib"][method] = mem["peak_mib"]
                    print("  peak MiB above the start: " + "  ".join(
                        f"{k} {v:.1f}" for k, v in entry["peak_mib"].items()), flush=True)
                cg = entry["runs"]["CG"]["median_seconds_to"]
                for method in rsdm:  # "cg_over_rsdm" (default), "cg_over_rsdm-polar", ...
                    own = entry["runs"][f"{method} r={r0}"]["median_seconds_to"]
                    entry[f"cg_over_{method.lower()}"] = ratio = {
                        lv: (cg[lv] / own[lv] if cg[lv] and own[lv] else None) for lv in LEVELS}
                    print(f"  CG time ÷ {method} (default r) time: " + "  ".join(
                        f"{lv}: {v:.2f}" if v else f"{lv}: -" for lv, v in ratio.items()),
                        flush=True)
                report["instances"].append(entry)
                save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
