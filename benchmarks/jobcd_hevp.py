r"""HEVP benchmark: time to a certified relative gap (default 1e-6), JOBCD against the baselines.

Problem (the well-posed trace-minimisation form of the JOBCD papers' HEVP):

    min tr(XᵀCX)  s.t.  XᵀJX = J,   C = DᵀD/m + εI ≻ 0,   J = diag(I_p, −I_{n−p}),  p = n/2,

whose global minimum is the certificate Σ|λ_i(JC)|. Data ``D`` (m × n):

* ``images`` — 10×10×3 patches of scikit-learn's two bundled sample images (n = 300),
* ``digits`` — scikit-learn's 8×8 digits (n = 64, m = 1797),
* ``gaussian`` — i.i.d. normal (n = 500, m = 2n);

image and digit features are centred and scaled to unit mean variance, ε = 1e-2. Data, sizes
(``HEVP_SIZES``) and the solvers' default options (``SOLVERS``) come from
:mod:`orthoplug.bench.suites.jobcd`, shared with ``orthoplug-bench``'s ``hevp-tracemin``.
More datasets, ``tracemin<n>`` for n ∈ {12, 30, 200, 500}: C = DᵀD/(2n) + 0.05·I with Gaussian
D (2n × n), started from X₀ = I (issue #17's trace-minimisation instances). ``--autodiff 12,30``
adds the same problem as a pymanopt autodiff ``Problem`` (no structure given to JOBCD): pymanopt
CG/TR against J-JOBCD's default there (the second-order column model from the problem's
Hessian-vector products, one sweep per iteration) and the scalar-majoriser J-/GS-JOBCD with and
without adaptive σ, rows and columns.

Methods, all from the same X₀ (cond 10): GS-JOBCD with the quadratic fast path
(``QuadraticOracle``; its default there is the column J-Jacobi sweep, cyclic order), the same
with random (``GS-JOBCD-col-random``) and greedy (``GS-JOBCD-col-greedy``) pair orders, the row
row fast path with cyclic pairs (``GS-JOBCD-row``, the fastest variant before issue #17), J-JOBCD,
pymanopt's SteepestDescent / ConjugateGradient / TrustRegions on
``orthoplug.adapters.pymanopt.JOrthogonal`` (autograd cost), UMCM and ADMM with the paper's
dynamic β, ADMM with a fixed β = L_f (our addition: the dynamic β freezes ADMM), and CSDM.
A method *reaches* the target at the first evaluation with ``|f − f*|/f* ≤ tol`` and
violation (mean ``|XᵀJX − J|``) ``≤ 1e-8``; infeasible methods are judged by the same rule.
pymanopt's times come from a wrapper around the cost (every evaluated point is feasible).

Second part: iterations/s of GS-JOBCD with the fast path (QuadraticOracle: two gradient rows
and an O(nk) update of CX per iteration) against a FunctionOracle (the full gradient 2CX each
iteration), at n = 1000.

    python benchmarks/jobcd_hevp.py --quick                 # small sizes, a minute or two
    python benchmarks/jobcd_hevp.py --time-limit 60 --out results.json
    python benchmarks/jobcd_hevp.py --quick --profile GS-JOBCD   # cProfile of one method

All BLAS pools are limited to ``--threads`` (default 1) so that methods compare fairly on a
shared machine; report ratios within one run. The numba kernels are compiled (or loaded from
their cache) before any timing starts.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

import numpy as np
import torch

from orthoplug import warm_up
from orthoplug.bench.suites.jobcd import build_solver, make_c
from orthoplug.geometry.manifolds import JOrthogonalGeometry
from orthoplug.oracles import FunctionOracle, QuadraticOracle
from orthoplug.problems.hevp import trace_min_certificate
from orthoplug.solvers.jobcd import GSJOBCD
from orthoplug.solvers.sigma_rules import SigmaBacktracking

#: benchmark name → (solver of ``SOLVERS``, options): JOBCD variants
JOBCD_VARIANTS = {
    "ColumnJJacobi": ("ColumnJJacobi", {}),
    "ColumnJJacobi-random": ("ColumnJJacobi", {"pairs": "random"}),
    "ColumnJJacobi-greedy": ("ColumnJJacobi", {"pairs": "greedy"}),
    "GS-JOBCD-row": ("GS-JOBCD", {"pairs": "cyclic"}),
    "J-JOBCD": ("J-JOBCD", {}),
}
JOBCD_METHODS = tuple(JOBCD_VARIANTS)
ALL_METHODS = (*JOBCD_METHODS, "pymanopt-SD", "pymanopt-CG", "pymanopt-TR", "UMCM",
               "ADMM", "ADMM-fixed", "CSDM")
#: the issue-#17 trace-minimisation instances: name → n
TRACEMIN = {"tracemin12": 12, "tracemin30": 30, "tracemin200": 200, "tracemin500": 500}
VIOLATION_OK = 1e-8


# ---- runners ------------------------------------------------------------------------------
def first_time(history: dict, cert: float, tol: float) -> float | None:
    for t, f, v in zip(history["time"], history["cost"], history["violation"], strict=True):
        if abs(f - cert) <= tol * cert and v <= VIOLATION_OK:
            return t
    return None


def run_orthoplug(name, c, geo, x0, cert, args):
    n = geo.j.n
    oracle = QuadraticOracle(torch.from_numpy(c))
    target = cert * (1 + args.tol)
    solver_name, extra = JOBCD_VARIANTS.get(name, (name, {}))
    if name in JOBCD_VARIANTS:
        extra = {**extra, "target_cost": target}
    if name == "GS-JOBCD-row":  # one iteration = one pair
        extra["eval_every"] = max(500, min(5000, n * n // 50))
    solver = build_solver(solver_name, oracle, max_time=args.time_limit, seed=args.seed,
                          max_iterations=10**9, **extra)
    res = solver.run(oracle, x0, geo)
    return {"time_to_tol": first_time(res.history, cert, args.tol),
            "time_to_loose": first_time(res.history, cert, args.loose_tol), "cost": res.cost,
            "gap": (res.cost - cert) / cert, "violation": res.violation,
            "iterations": res.iterations, "time": res.time, "stop": res.stop_reason}


def run_pymanopt(name, c, geo, x0, cert, args):
    import autograd.numpy as anp
    import pymanopt
    from pymanopt.optimizers import ConjugateGradient, SteepestDescent, TrustRegions

    from orthoplug.adapters import pymanopt as pm

    manifold = pm.JOrthogonal(geo.j.n, signature=list(geo.j.values))
    evals: list[tuple[float, float]] = []
    clock = {"start": None}

    @pymanopt.function.autograd(manifold)
    def cost(x):
        return anp.sum(x * (c @ x))

    problem = pymanopt.Problem(manifold, cost)
    plain_cost = problem.cost

    def recording_cost(x):
        val = plain_cost(x)
        if clock["start"] is not None:
            evals.append((time.perf_counter() - clock["start"], float(val)))
        return val

    problem._cost = recording_cost  # record every evaluation (all are feasible points)
    kw = dict(max_time=args.time_limit, max_iterations=10**9, min_gradient_norm=1e-13,
              min_step_size=0.0, max_cost_evaluations=10**9, verbosity=0)
    opt = {"pymanopt-SD": SteepestDescent, "pymanopt-CG": ConjugateGradient,
           "pymanopt-TR": TrustRegions}[name](**kw)
    run_kw = {"maxinner": 200} if name == "pymanopt-TR" else {}
    clock["start"] = time.perf_counter()
    res = opt.run(problem, initial_point=x0.numpy(), **run_kw)
    def reached(tol):
        return next((t for t, f in evals if abs(f - cert) <= tol * cert), None)

    return {"time_to_tol": reached(args.tol), "time_to_loose": reached(args.loose_tol),
            "cost": float(res.cost),
            "gap": (float(res.cost) - cert) / cert, "violation": manifold.violation(res.point),
            "iterations": res.iterations, "time": res.time, "stop": res.stopping_criterion}


def run_method(name, c, geo, x0, cert, args):
    if name.startswith("pymanopt"):
        return run_pymanopt(name, c, geo, x0, cert, args)
    return run_orthoplug(name, c, geo, x0, cert, args)


def make_instance(dataset: str, scale: str, seed: int):
    """``(C, label, X₀)``: a suite dataset (X₀ random, cond 10) or an issue-#17 trace-min
    instance (X₀ = I)."""
    if dataset in TRACEMIN:
        n = TRACEMIN[dataset]
        d = np.random.default_rng(seed).standard_normal((2 * n, n))
        c = d.T @ d / (2 * n) + 0.05 * np.eye(n)
        return c, f"tracemin({2 * n}-{n}-{n // 2}, X0 = I)", torch.eye(n, dtype=torch.float64)
    c, label = make_c(dataset, scale, seed)
    geo = JOrthogonalGeometry(c.shape[0], c.shape[0] // 2)
    return c, label, geo.random_point(generator=torch.Generator().manual_seed(seed))


def speedups(rows: dict, key: str = "time_to_tol") -> dict:
    """Best JOBCD variant, faster of pymanopt CG/TR, and their time ratio (None if missing)."""
    def best(names):
        times = {k: rows[k][key] for k in names if k in rows and rows[k][key] is not None}
        return min(times.items(), key=lambda kv: kv[1]) if times else (None, None)

    jb, jt = best(JOBCD_METHODS)
    pb, pt = best(("pymanopt-CG", "pymanopt-TR"))
    return {"best_jobcd": jb, "best_jobcd_time": jt, "best_pymanopt": pb,
            "best_pymanopt_time": pt,
            "speedup": (pt / jt) if jt is not None and pt is not None else None}


# ---- autodiff costs ----------------------------------------------------------------------
#: J-/GS-JOBCD variants on a pymanopt autodiff problem: name → (front-end class, options);
#: the Hessian column model takes one sweep per iteration; evaluations every iteration, for
#: GS-JOBCD every quarter sweep
AUTODIFF_VARIANTS = {
    "J-JOBCD Hessian model, columns": ("JJOBCD", {"curvature": "hessian", "side": "column"}),
    "J-JOBCD scalar σ (σ doubling only)": ("JJOBCD", {"sigma_rule": "backtracking"}),
    "J-JOBCD scalar adaptive σ": ("JJOBCD", {"sigma_rule": SigmaBacktracking(shrink=0.5)}),
    "J-JOBCD scalar adaptive σ, columns": ("JJOBCD", {"sigma_rule": SigmaBacktracking(shrink=0.5),
                                                      "side": "column"}),
    "GS-JOBCD (σ doubling only)": ("GSJOBCD", {"sigma_rule": "backtracking"}),
    "GS-JOBCD adaptive σ": ("GSJOBCD", {"sigma_rule": SigmaBacktracking(shrink=0.5)}),
    "GS-JOBCD adaptive σ, columns": ("GSJOBCD", {"sigma_rule": SigmaBacktracking(shrink=0.5),
                                                 "side": "column"}),
}


def autodiff_case(n: int, args) -> dict:
    """min tr(XᵀCX) over O(J) as a pymanopt ``Problem`` with an autograd cost (no structure
    given to JOBCD: a FunctionOracle with the problem's cost, gradient and Hessian-vector
    product), C = DᵀD/(2n) + 0.05·I, X₀ = I: time and iterations to the relative gap
    ``args.tol`` for pymanopt CG/TR and the JOBCD variants."""
    from orthoplug.adapters import pymanopt as pm

    c, label, x0 = make_instance(f"tracemin{n}", "paper", args.seed)
    geo = JOrthogonalGeometry(n, n // 2)
    cert = trace_min_certificate(c, geo.j)
    rows = {name: run_pymanopt(name, c, geo, x0, cert, args)
            for name in ("pymanopt-CG", "pymanopt-TR")}
    import autograd.numpy as anp
    import pymanopt

    manifold = pm.JOrthogonal(n, n // 2)

    @pymanopt.function.autograd(manifold)
    def cost(x):
        return anp.sum(x * (c @ x))

    problem = pymanopt.Problem(manifold, cost)
    for name, (cls, options) in AUTODIFF_VARIANTS.items():
        if cls == "GSJOBCD":  # (an iteration is ⌊n/2⌋ pair updates)
            options = {"eval_every": max(1, (n - 1) // 4), **options}
        opt = getattr(pm, cls)(max_time=args.time_limit, max_iterations=10**9,
                               min_gradient_norm=0.0, seed=args.seed,
                               target_cost=cert * (1 + args.tol), log_verbosity=1, **options)
        res = opt.run(problem, initial_point=x0.numpy()).solver_result
        rows[name] = {"time_to_tol": first_time(res.history, cert, args.tol),
                      "time_to_loose": first_time(res.history, cert, args.loose_tol),
                      "cost": res.cost, "gap": (res.cost - cert) / cert,
                      "violation": res.violation, "iterations": res.iterations,
                      "time": res.time, "stop": res.stop_reason}
        print(f"  autodiff n={n} {name}: {rows[name]}", file=sys.stderr, flush=True)
    return {"label": f"autodiff {label}", "certificate": cert, "methods": rows}


def autodiff_markdown(case: dict, args) -> str:
    rows = case["methods"]
    cg = rows["pymanopt-CG"]["time_to_tol"]
    lines = [f"### {case['label']}: certificate {case['certificate']:.10g}, "
             f"limit {args.time_limit:g} s", "",
             f"| method | time to {args.tol:g} gap [s] | ÷ CG | iterations | final gap |",
             "|---|---|---|---|---|"]
    for name, r in rows.items():
        t = r["time_to_tol"]
        ratio = "—" if t is None or cg is None else f"{t / cg:.3g}"
        lines.append(f"| {name} | {'not reached' if t is None else f'{t:.3f}'} | {ratio} | "
                     f"{r['iterations']} | {r['gap']:.2e} |")
    lines.append("\niterations: J-JOBCD one sweep of n(n−1)/2 pairs (Hessian model) or one "
                 "matching of ⌊n/2⌋ pairs (scalar), GS-JOBCD one pair, pymanopt its own (CG: one "
                 "line search; TR: one outer step).")
    return "\n".join(lines)


# ---- fast path ----------------------------------------------------------------------------
def fast_path(n: int, seconds: float, seed: int) -> dict:
    """Iterations/s of GS-JOBCD with QuadraticOracle vs FunctionOracle (full gradient)."""
    rng = np.random.default_rng(seed)
    d = rng.standard_normal((2 * n, n))
    c = torch.from_numpy(d.T @ d / (2 * n) + 1e-2 * np.eye(n))
    geo = JOrthogonalGeometry(n, n // 2)
    x0 = geo.random_point(generator=torch.Generator().manual_seed(seed))
    quad = QuadraticOracle(c)
    func = FunctionOracle(lambda x: (x * (c @ x)).sum(), lambda x: 2.0 * (c @ x),
                          lipschitz=quad.lipschitz)
    out = {"n": n}
    for label, oracle in (("fast path (QuadraticOracle)", quad),
                          ("full gradient (FunctionOracle)", func)):
        solver = GSJOBCD(side="row", max_time=seconds, max_iterations=10**9, eval_every=10**9,
                         seed=seed)
        res = solver.run(oracle, x0, geo)
        out[label] = {"iterations": res.iterations, "time": res.time,
                      "iterations_per_s": res.iterations / res.time, "cost": res.cost}
    keys = [k for k in out if k != "n"]
    out["speedup"] = out[keys[0]]["iterations_per_s"] / out[keys[1]]["iterations_per_s"]
    return out


# ---- output -------------------------------------------------------------------------------
def markdown(label: str, cert: float, rows: dict, args) -> str:
    """Table of one dataset; ratios are times over the fastest non-JOBCD method's time
    ("> r" when the method missed the target within the limit: a lower bound)."""
    def fastest(key):
        times = [r[key] for k, r in rows.items() if k not in JOBCD_METHODS and r[key] is not None]
        return min(times) if times else None

    def cells(r, key, best):
        t = r[key]
        if best is None:
            return ("—" if t is None else f"{t:.2f}"), "—"
        if t is None:
            return "not reached", f"> {args.time_limit / best:.3g}"
        return f"{t:.2f}", f"{t / best:.3g}"

    best, best_loose = fastest("time_to_tol"), fastest("time_to_loose")
    lines = [f"### {label}: certificate Σ|λ(JC)| = {cert:.10g}, limit {args.time_limit:g} s",
             "",
             f"| method | time to {args.tol:g} gap [s] | ratio | time to {args.loose_tol:g} "
             "gap [s] | ratio | final gap | violation | iterations |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        t, ratio = cells(r, "time_to_tol", best)
        tl, ratio_l = cells(r, "time_to_loose", best_loose)
        lines.append(f"| {name} | {t} | {ratio} | {tl} | {ratio_l} | {r['gap']:.2e} | "
                     f"{r['violation']:.1e} | {r['iterations']} |")
    lines.append("\nratio: time over the fastest non-JOBCD method's time (target: relative gap "
                 f"and violation ≤ {VIOLATION_OK:g}).")
    sp = speedups(rows)
    if sp["speedup"] is not None:
        lines.append(f"Best JOBCD ({sp['best_jobcd']}) is {sp['speedup']:.2f}× faster than the "
                     f"faster of pymanopt CG/TR ({sp['best_pymanopt']}) to a {args.tol:g} gap.")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a minute or two)")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds per method and dataset (default 3 quick / 60 full)")
    parser.add_argument("--tol", type=float, default=1e-6, help="relative certificate gap")
    parser.add_argument("--loose-tol", type=float, default=1e-2,
                        help="a second, looser gap reported alongside")
    parser.add_argument("--datasets", default="images,digits,gaussian")
    parser.add_argument("--methods", default=",".join(ALL_METHODS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="BLAS / torch threads")
    parser.add_argument("--fast-path-n", type=int, default=None,
                        help="n of the fast-path comparison (default 200 quick / 1000 full; 0 "
                             "skips it)")
    parser.add_argument("--fast-path-seconds", type=float, default=None)
    parser.add_argument("--profile", default=None, metavar="METHOD",
                        help="run METHOD on the first dataset under cProfile and print the top")
    parser.add_argument("--autodiff", default="",
                        help="comma-separated n of the autodiff cases (e.g. 12,30); they run "
                             "after the datasets ('--datasets \"\"' runs them alone)")
    parser.add_argument("--out", default=None, help="write all results to this JSON file")
    args = parser.parse_args(argv)
    if args.time_limit is None:
        args.time_limit = 3.0 if args.quick else 60.0
    if not (args.time_limit > 0 and args.tol > 0 and args.loose_tol > 0) or args.threads < 1:
        parser.error("--time-limit, --tol and --loose-tol must be > 0, --threads >= 1")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in methods if m not in ALL_METHODS]
    if bad:
        parser.error(f"unknown methods {bad}; choose from {ALL_METHODS}")
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]

    from threadpoolctl import threadpool_limits

    torch.set_num_threads(args.threads)
    scale = "quick" if args.quick else "paper"
    settings = {**vars(args), "out": Path(args.out).name if args.out else None}  # no machine paths
    results: dict = {"settings": settings, "hevp": {}}
    with threadpool_limits(args.threads):
        warm_up()
        if args.profile:
            c, label, x0 = make_instance(datasets[0], scale, args.seed)
            n = c.shape[0]
            geo = JOrthogonalGeometry(n, n // 2)
            cert = trace_min_certificate(c, geo.j)
            prof = cProfile.Profile()
            prof.enable()
            r = run_method(args.profile, c, geo, x0, cert, args)
            prof.disable()
            print(f"{args.profile} on {label}: {r}")
            pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(20)
            return 0
        for ds in datasets:
            c, label, x0 = make_instance(ds, scale, args.seed)
            n = c.shape[0]
            geo = JOrthogonalGeometry(n, n // 2)
            cert = trace_min_certificate(c, geo.j)
            rows = {}
            for name in methods:
                rows[name] = run_method(name, c, geo, x0, cert, args)
                print(f"  {label} {name}: {rows[name]}", file=sys.stderr, flush=True)
            results["hevp"][label] = {"certificate": cert, "methods": rows,
                                      "speedup": speedups(rows)}
            print(markdown(label, cert, rows, args) + "\n", flush=True)
        for n in [int(v) for v in args.autodiff.split(",") if v.strip()]:
            case = autodiff_case(n, args)
            results.setdefault("autodiff", {})[str(n)] = case
            print(autodiff_markdown(case, args) + "\n", flush=True)
        fp_n = args.fast_path_n if args.fast_path_n is not None else (200 if args.quick else 1000)
        if fp_n:
            secs = args.fast_path_seconds or (3.0 if args.quick else 15.0)
            fp = fast_path(fp_n, secs, args.seed)
            results["fast_path"] = fp
            print(f"### GS-JOBCD fast path at n = {fp_n}\n\n| oracle | iterations | "
                  "iterations/s |\n|---|---|---|")
            for k, v in fp.items():
                if isinstance(v, dict):
                    print(f"| {k} | {v['iterations']} | {v['iterations_per_s']:.1f} |")
            print(f"\nspeed-up of the fast path: {fp['speedup']:.1f}×")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
