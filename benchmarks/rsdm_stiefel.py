"""RSDM vs pymanopt / geoopt / Landing on the paper's PCA and Procrustes settings (issue #5).

    python benchmarks/rsdm_stiefel.py                    # paper sizes (long on a CPU)
    python benchmarks/rsdm_stiefel.py --quick            # n = 400: a few minutes
    python benchmarks/rsdm_stiefel.py --scale mid        # n = 1000 (issue #18)
    python benchmarks/rsdm_stiefel.py --out results.json --threads 1 --dtype float32

For each problem every method runs from the same ``X0 = qf(randn(n, p))`` (seed 42) until the
relative gap ``|F − F*|/|F*|`` (closed-form F*) is ≤ ``--gap`` (default 1e-6), and the wall time
to that point is reported, with each method's time divided by the best RSDM time. Methods:

* RSDM-P, RSDM-O (orthoplug; the paper's fixed step, tuned; QR retraction on O(r));
  RSDM-P-default / RSDM-O-default (no step given: the default rule, ``line_search="auto"``),
  RSDM-P-armijo / RSDM-O-armijo (Armijo with memory) and RSDM-P-polar (``line_search="polar"``:
  the proximal-linear polar step on the slice);
* pymanopt SteepestDescent and ConjugateGradient (their own Armijo line searches, QR
  retraction of pymanopt's Stiefel), and TrustRegions with the Euclidean Hessian (``−AU`` for
  PCA, zero for the linear form of Procrustes);
* geoopt RiemannianSGD and RiemannianAdam on ``EuclideanStiefel`` (QR retraction);
* Landing (orthoplug.baselines; infeasible, its gap is measured on X as is).

Every method gets the same hand-written gradient, each cost/gradient pair computed from one
product (pymanopt: memoised on the point; geoopt: the gradient is set from the same product as
the loss), and checks the gap on values it has anyway (pymanopt and geoopt evaluate the cost
every iteration; RSDM reads the value its oracle keeps: incrementally updated for PCA, O(np)
for Procrustes). Procrustes uses the linear form ``F = s(‖A‖² + ‖B‖² − 2⟨X, BAᵀ⟩)`` for the
feasible methods (equal to ``s‖XA − B‖²`` on St(n, p), as the paper notes) and the quadratic
form for Landing. Data: PCA ``A = Q diag(λ) Qᵀ``, ``λ_i = 10·1000^{−(i−1)/(n−1)}``,
``F = −½ tr(XᵀAX)``; Procrustes A, B i.i.d. N(0, 1), ``F = ‖XA − B‖²/(2p)``.

Step sizes were tuned with ``--tune --quick`` (best gap after ``--tune-time`` = 5 seconds) on the
paper's grid {0.01, 0.05, 0.1, 0.5, 1, 1.5, 2}, extended by {3, 5} for RSDM (RAdam: {1e-3 ...
0.3}; Landing: step {0.05, 0.1, 0.5, 1} × penalty {0.1, 0.5, 1, 2}); the defaults are those
results, used unchanged at the paper sizes (too slow to tune there on a CPU). Sizes, defaults,
grids and the problem data come from the benchmark suite ``orthoplug.bench.suites.rsdm``
(``SIZES``, ``DEFAULTS``, ``GRIDS``, ``build``). A method that has not reached the gap after
``min(--max-time, --cap-factor × best RSDM time)`` is reported as ``> cap``. The summary gives
the fastest other method's time ÷ the best RSDM time at the target and at every decade of the
gap on the way, marked as a bound (``>``/``<``) where one side did not get there. The scaling
part times RSDM-P/RSDM-O iterations and one Riemannian gradient step (QR retraction) on PCA
with p = 3n/4 at fixed r.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from orthoplug.bench.suites.rsdm import DEFAULTS, GRIDS, SIZES, random_stiefel
from orthoplug.bench.suites.rsdm import EXPERIMENTS as RSDM_EXPERIMENTS
from orthoplug.geometry.stiefel import StiefelGeometry, qf
from orthoplug.solvers.rsdm import RSDM

# sizes per scale (n, p, r), tuned step sizes and tuning grids: shared with the benchmark suite
SCALING_SIZES = {"paper": ((1000, 2000, 4000), 700), "quick": ((200, 400, 800), 140),
                 "mid": ((500, 1000, 2000), 300)}
#: n = 1000 (issue #18): sizes at which every method can be run to 1e-6 on a CPU
MID_SIZES = {"pca": (1000, 600, 300), "procrustes": (1000, 1000, 450)}
EXPERIMENTS = {exp.name: exp for exp in RSDM_EXPERIMENTS}
#: RSDM step rules beyond the tuned fixed step of ``RSDM-P`` / ``RSDM-O`` (issue #18)
RSDM_VARIANTS = {"RSDM-P-default": {}, "RSDM-O-default": {},  # no step: the default rule
                 "RSDM-P-armijo": {"line_search": "armijo"},
                 "RSDM-O-armijo": {"line_search": "armijo"},
                 "RSDM-P-polar": {"line_search": "polar"}}
METHODS = ("RSDM-P", "RSDM-O", *RSDM_VARIANTS, "pymanopt-SD", "pymanopt-CG", "pymanopt-TR",
           "geoopt-RSGD", "geoopt-RAdam", "Landing")


class Reached(Exception):
    """Raised inside a run once the target gap is reached (stops pymanopt mid-run)."""


@dataclass
class Outcome:
    method: str
    options: dict
    time: float | None  # seconds to the target gap; None if not reached
    iterations: int
    best_gap: float
    violation: float | None = None
    times_to_gap: dict = field(default_factory=dict)
    note: str = ""
    extra: dict = field(default_factory=dict)


class Monitor:
    """Times to each decade of the relative gap (1e-1, 1e-2, ...) down to the target.

    ``clock`` is wall time (``time.perf_counter``); set it to ``time.process_time`` to time in
    this process's CPU seconds instead (one thread per method: the work done, not the share of
    a loaded machine the process got).
    """

    clock = staticmethod(time.perf_counter)

    def __init__(self, bench, target: float, cap: float):
        self.bench, self.target, self.cap = bench, target, cap
        self.levels = [10.0 ** -k for k in range(1, 17) if 10.0 ** -k >= target * 0.999]
        self.reached: dict[str, float] = {}
        self.best = math.inf
        self.start = self.clock()

    def elapsed(self) -> float:
        return self.clock() - self.start

    def done(self, value: float) -> bool:
        """Record ``value``; True once the target is reached, the cap passed, or NaN met."""
        gap = self.bench.gap(value)
        t = self.elapsed()
        if gap < self.best:
            self.best = gap
            for level in self.levels:
                if gap <= level and f"{level:.0e}" not in self.reached:
                    self.reached[f"{level:.0e}"] = t
        return gap <= self.target or t > self.cap or not math.isfinite(gap)

    @property
    def time(self) -> float | None:
        return self.reached.get(f"{self.levels[-1]:.0e}") if self.best <= self.target else None


# ---------------------------------------------------------------------------------------------
# problems: one product per (value, gradient) pair
# ---------------------------------------------------------------------------------------------


class Bench:
    """A problem with the value-and-gradient function every method uses, and its optimum."""

    def __init__(self, kind: str, n: int, p: int, r: int, seed: int = 42,
                 dtype: torch.dtype = torch.float64):
        self.kind, self.n, self.p, self.r, self.dtype = kind, n, p, r, dtype
        experiment = EXPERIMENTS[kind]
        self.problem = experiment.build(n, p, seed)  # data and optimum in float64
        self.rsdm_oracle = lambda: experiment.feasible_oracle(self.problem)
        if kind == "pca":
            a = self.problem.a.to(dtype)

            def vg(x):
                y = a @ x
                return -0.5 * float((x * y).sum()), -y

            self.value_and_gradient = vg
            self.feasible_value_and_gradient = vg
            self.feasible_hessian = lambda x, u: -(a @ u)
        else:
            pr = self.problem
            grad_lin = pr.linear_gradient(torch.zeros(1, dtype=dtype))
            pa, pb = pr.a.to(dtype), pr.b.to(dtype)

            def vg_lin(x):
                return float(pr.linear_cost(x)), grad_lin

            def vg_quad(x):
                res = x @ pa - pb
                return pr.scale * float((res * res).sum()), (2.0 * pr.scale) * (res @ pa.mT)

            self.value_and_gradient = vg_quad
            self.feasible_value_and_gradient = vg_lin
            self.feasible_hessian = lambda x, u: torch.zeros_like(u)  # linear on St
        self.optimum = self.problem.optimum
        self.x0 = random_stiefel(n, p, seed).to(dtype)

    def gap(self, value: float) -> float:
        return abs(value - self.optimum) / abs(self.optimum)


# ---------------------------------------------------------------------------------------------
# drivers
# ---------------------------------------------------------------------------------------------


def _step_until_target(solver, bench: Bench, oracle, mon: Monitor):
    """Drive ``solver``'s own steps from X0, checking the tracker's value after every one."""
    run = solver.start(oracle, bench.x0, StiefelGeometry(bench.n, bench.p))
    while True:
        solver.step(run)
        run.iteration += 1
        if mon.done(float(run.tracker.value())):
            return run


def run_rsdm(bench: Bench, name: str, options: dict, target: float, cap: float) -> Outcome:
    """RSDM's own step loop, checking the value its tracker keeps after every iteration."""
    sampling = "orthogonal" if name.startswith("RSDM-O") else "permutation"
    options = {**RSDM_VARIANTS.get(name, {}), **options}
    solver = RSDM(bench.r, sampling=sampling, max_iterations=10**9, seed=0, **options)
    mon = Monitor(bench, target, cap)
    # timed: the first AX is part of the run
    run = _step_until_target(solver, bench, bench.rsdm_oracle(), mon)
    x = run.tracker.x
    exact = bench.gap(float(bench.problem.cost(x.double())))
    return Outcome(name, options, mon.time, run.iteration, mon.best,
                   float(run.geometry.violation(x)), mon.reached,
                   extra={"final_gap_recomputed": exact, **{
                       k: v for k, v in solver.info(run).items()
                       if k in ("step_rule", "backtracks", "skipped_steps")}})


def run_landing(bench: Bench, options: dict, target: float, cap: float) -> Outcome:
    from orthoplug.baselines.landing import Landing
    from orthoplug.oracles import FunctionOracle

    cache = {}

    def vg(x):
        if cache.get("x") is not x:
            cache["x"], cache["vg"] = x, bench.value_and_gradient(x)
        return cache["vg"]

    oracle = FunctionOracle(lambda x: vg(x)[0], lambda x: vg(x)[1])
    solver = Landing(max_iterations=10**9, **options)
    mon = Monitor(bench, target, cap)
    # the value shares its product with the next step's gradient (memoised)
    run = _step_until_target(solver, bench, oracle, mon)
    return Outcome("Landing", options, mon.time, run.iteration, mon.best,
                   float(run.geometry.violation(run.tracker.x)), mon.reached)


def run_pymanopt(bench: Bench, which: str, target: float, cap: float) -> Outcome:
    import pymanopt
    from pymanopt.manifolds import Stiefel

    manifold = Stiefel(bench.n, bench.p)
    memo = {"x": None, "vg": None}
    state = {"evals": 0}
    mon = None

    def vg(x):
        if memo["x"] is not x:
            v, g = bench.feasible_value_and_gradient(torch.from_numpy(x))
            memo["x"], memo["vg"] = x, (v, g.numpy())
        return memo["vg"]

    @pymanopt.function.numpy(manifold)
    def cost(x):
        value = vg(x)[0]
        state["evals"] += 1
        if mon.done(value) and (mon.best <= target or mon.elapsed() > cap):
            raise Reached  # (the cap in the monitor's clock: pymanopt's max_time is wall time)
        return value

    @pymanopt.function.numpy(manifold)
    def grad(x):
        return vg(x)[1]

    @pymanopt.function.numpy(manifold)
    def hess(x, u):
        return bench.feasible_hessian(torch.from_numpy(x), torch.from_numpy(u)).numpy()

    problem = pymanopt.Problem(manifold, cost, euclidean_gradient=grad,
                               euclidean_hessian=hess if which == "TR" else None)
    if which == "TR":
        opt = pymanopt.optimizers.TrustRegions(max_time=math.inf, max_iterations=10**9,
                                               min_gradient_norm=0.0, min_step_size=0.0,
                                               verbosity=0)
    else:
        cls = (pymanopt.optimizers.SteepestDescent if which == "SD"
               else pymanopt.optimizers.ConjugateGradient)
        opt = cls(max_time=math.inf, max_iterations=10**9, min_gradient_norm=0.0,
                  min_step_size=0.0, max_cost_evaluations=10**9, verbosity=0)
    mon = Monitor(bench, target, cap)
    try:
        opt.run(problem, initial_point=bench.x0.numpy().copy())
        note = "stopped by pymanopt or the cap"
    except Reached:
        note = "" if mon.best <= target else "stopped at the cap"
    return Outcome(f"pymanopt-{which}", {}, mon.time, state["evals"], mon.best,
                   times_to_gap=mon.reached, note=note + " (iterations = cost evaluations)")


def run_geoopt(bench: Bench, which: str, options: dict, target: float, cap: float) -> Outcome:
    import geoopt

    manifold = geoopt.EuclideanStiefel()
    w = geoopt.ManifoldParameter(bench.x0.clone(), manifold=manifold)
    cls = geoopt.optim.RiemannianSGD if which == "RSGD" else geoopt.optim.RiemannianAdam
    opt = cls([w], **options)
    mon = Monitor(bench, target, cap)
    it = 0
    while True:
        with torch.no_grad():
            value, grad = bench.feasible_value_and_gradient(w.data)
        if mon.done(value):
            break
        w.grad = grad.clone()
        opt.step()
        it += 1
    viol = float(StiefelGeometry(bench.n, bench.p).violation(w.detach()))
    return Outcome(f"geoopt-{which}", options, mon.time, it, mon.best, viol, mon.reached)


def run_method(bench, method, options, target, cap) -> Outcome:
    if method.startswith("RSDM"):
        return run_rsdm(bench, method, options, target, cap)
    if method.startswith("pymanopt-"):
        return run_pymanopt(bench, method.split("-")[1], target, cap)
    if method.startswith("geoopt-"):
        return run_geoopt(bench, method.split("-")[1], options, target, cap)
    if method == "Landing":
        return run_landing(bench, options, target, cap)
    raise ValueError(method)


def tune(bench, method, seconds) -> dict:
    """Best option set on the grid by the gap reached after ``seconds`` (target 0)."""
    best, best_gap = None, math.inf
    for options in GRIDS[method]:
        out = run_method(bench, method, options, 0.0, seconds)
        print(f"    tune {method} {options}: gap {out.best_gap:.2e}", flush=True)
        if out.best_gap < best_gap:
            best, best_gap = options, out.best_gap
    return best


# ---------------------------------------------------------------------------------------------
# scaling of the time per iteration with n
# ---------------------------------------------------------------------------------------------


def scaling(ns, r, iterations=5) -> list[dict]:
    rows = []
    for n in ns:
        p = 3 * n // 4
        bench = Bench("pca", n, p, r)
        geometry = StiefelGeometry(n, p)
        row = {"n": n, "p": p, "r": r}
        for sampling in ("permutation", "orthogonal"):
            solver = RSDM(r, sampling=sampling, step_size=1.0, seed=0)
            run = solver.start(bench.rsdm_oracle(), bench.x0, geometry)
            solver.step(run)  # warm-up
            start = time.perf_counter()
            for _ in range(iterations):
                solver.step(run)
            row[solver.name] = (time.perf_counter() - start) / iterations
        x = bench.x0
        start = time.perf_counter()
        for _ in range(max(1, iterations // 2)):
            _, g = bench.value_and_gradient(x)
            rg = g - x @ (0.5 * (x.mT @ g + g.mT @ x))
            x = qf(x - 0.1 * rg)
        row["RGD-QR"] = (time.perf_counter() - start) / max(1, iterations // 2)
        print(f"  n={n} p={p} r={r}: " + "  ".join(f"{k} {row[k]:.3f}s"
                                                   for k in ("RSDM-P", "RSDM-O", "RGD-QR")),
              flush=True)
        rows.append(row)
    return rows


def _fastest(runs: list[dict], time_of) -> tuple[float, bool] | None:
    """Fastest time over ``runs`` and whether it is only a lower bound.

    A run that did not get there counts with its cap (its time is > cap). If the minimum is a
    cap, every run's time is above it (lower bound); if it is a reached time, it is exact.
    """
    cells = [(time_of(o), False) if time_of(o) is not None else (o["cap"], True) for o in runs]
    return min(cells) if cells else None


def speedup(results: list[dict], time_of) -> tuple[float, str] | None:
    """Fastest other method's time ÷ best RSDM time, with ``"="``, ``">"`` or ``"<"``.

    ``">"``: only RSDM got there (a lower bound); ``"<"``: only another method did (an upper
    bound); ``None`` when neither did or a side has no runs.
    """
    rsdm = _fastest([o for o in results if o["method"].startswith("RSDM")], time_of)
    other = _fastest([o for o in results if not o["method"].startswith("RSDM")], time_of)
    if rsdm is None or other is None or (rsdm[1] and other[1]):
        return None
    return other[0] / rsdm[0], ">" if other[1] else "<" if rsdm[1] else "="


def summarize(entry: dict, target: float) -> None:
    """Print the time table; store the speedups (at the target and every decade) in ``entry``."""
    results = entry["results"]
    at_target = speedup(results, lambda o: o["time"])
    if at_target is not None:
        entry["speedup_vs_fastest_other"], entry["speedup_bound"] = at_target
    levels = [f"{10.0 ** -k:.0e}" for k in range(1, 17) if 10.0 ** -k >= target * 0.999]
    entry["speedup_by_gap"] = by_gap = {}
    for level in levels:
        ratio = speedup(results, lambda o, lv=level: o["times_to_gap"].get(lv))
        if ratio is not None:
            by_gap[level] = list(ratio)
    print("  seconds to relative gap (> cap: not reached; last row: fastest other ÷ best RSDM)")
    print(f"  {'':13s} " + "  ".join(f"{lv:>8s}" for lv in levels) + f"  {'target':>9s}")
    for o in results:
        cells = [o["times_to_gap"].get(lv) for lv in levels]
        t = o["time"]
        print(f"  {o['method']:13s} " + "  ".join(f"{c:8.2f}" if c is not None else f"{'-':>8s}"
                                                  for c in cells)
              + (f"  {t:9.2f}" if t is not None else f"  {'> ' + format(o['cap'], '.0f'):>9s}"))
    print(f"  {'other ÷ RSDM':13s} " + "  ".join(
        f"{(by_gap[lv][1] if by_gap[lv][1] != '=' else '') + format(by_gap[lv][0], '.2f'):>8s}"
        if lv in by_gap else f"{'-':>8s}" for lv in levels))
    if at_target is not None:
        ratio, bound = at_target
        print(f"  at the target: fastest other ÷ best RSDM = {'' if bound == '=' else bound}"
              f"{ratio:.2f} (> 1: RSDM is faster; < or >: a bound, one side did not get there)")


# ---------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (n = 400)")
    parser.add_argument("--scale", choices=["quick", "mid", "paper"], default=None,
                        help="sizes: quick (n = 400), mid (n = 1000), paper (n = 2000); "
                             "default paper, or quick with --quick")
    parser.add_argument("--problems", nargs="+", default=["pca", "procrustes"],
                        choices=["pca", "procrustes"])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--gap", type=float, default=1e-6)
    parser.add_argument("--dtype", choices=["float64", "float32"], default="float64",
                        help="precision of every method's iterate and data (F* in float64)")
    parser.add_argument("--max-time", type=float, default=1800.0,
                        help="cap per method in seconds")
    parser.add_argument("--cap-factor", type=float, default=5.0,
                        help="stop a baseline after this many times the best RSDM time")
    parser.add_argument("--tune", action="store_true", help="grid-search step sizes first")
    parser.add_argument("--tune-time", type=float, default=20.0)
    parser.add_argument("--no-scaling", action="store_true")
    parser.add_argument("--threads", type=int, default=None,
                        help="BLAS/torch threads for every method (torch and numpy)")
    parser.add_argument("--out", default=None, help="write the results as JSON")
    args = parser.parse_args(argv)

    if args.threads:  # torch's pool and numpy's BLAS (pymanopt) alike
        torch.set_num_threads(args.threads)
        try:
            from threadpoolctl import threadpool_limits

            threadpool_limits(args.threads)
        except ImportError:
            print("threadpoolctl not installed: numpy's BLAS threads are not limited",
                  file=sys.stderr)
    scale = args.scale or ("quick" if args.quick else "paper")
    sizes = MID_SIZES if scale == "mid" else SIZES[scale]
    report = {"args": vars(args), "torch": torch.__version__, "numpy": np.__version__,
              "threads": torch.get_num_threads(), "machine": platform.platform(),
              "python": sys.version.split()[0], "problems": {}}

    def save():
        if args.out:
            with open(args.out, "w") as fh:
                json.dump(report, fh, indent=1, default=str)

    for kind in args.problems:
        n, p, r = sizes[kind]
        print(f"\n== {kind}: n={n} p={p} r={r}, target relative gap {args.gap:g} ==", flush=True)
        bench = Bench(kind, n, p, r, dtype=getattr(torch, args.dtype))
        entry = report["problems"][kind] = {"n": n, "p": p, "r": r, "optimum": bench.optimum,
                                            "dtype": args.dtype, "results": []}
        rsdm_times = []
        for method in args.methods:
            options = dict(DEFAULTS[kind].get(method, {}))
            if args.tune and method in GRIDS:
                options = tune(bench, method, args.tune_time)
            is_rsdm = method.startswith("RSDM")
            cap = args.max_time
            if not is_rsdm and rsdm_times:
                cap = min(cap, args.cap_factor * min(rsdm_times))
            out = run_method(bench, method, options, args.gap, cap)
            if is_rsdm and out.time is not None:
                rsdm_times.append(out.time)
            shown = f"{out.time:9.2f} s" if out.time is not None else f"  > {cap:.0f} s"
            print(f"  {method:13s} {shown}  iterations {out.iterations:7d}  best gap "
                  f"{out.best_gap:.2e}  options {out.options}", flush=True)
            entry["results"].append({**out.__dict__, "cap": cap})
            save()
        summarize(entry, args.gap)
        save()

    if not args.no_scaling:
        ns, r = SCALING_SIZES[scale]
        print(f"\n== time per iteration vs n (PCA, p = 3n/4, r = {r}) ==", flush=True)
        report["scaling"] = scaling(ns, r)
        save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
