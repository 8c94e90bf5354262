r"""Smooth non-quadratic costs on O(J): time to a 1e-10 relative gap of orthoplug's default
(:class:`~orthoplug.solvers.lbfgs.CayleyLBFGS`), J-JOBCD and pymanopt's ConjugateGradient and
TrustRegions.

Instances (:mod:`orthoplug.problems.smooth_oj`): the families ``quartic``, ``logcosh`` and
``lorentz``, ``n`` in ``--sizes``, two signatures (``p = n/2`` and ``p = 1``, the Lorentz group
O(1, n − 1)), two random starts of condition number 10 each (``--starts``). Every method reads
the same autograd ``pymanopt.Problem``; TR and J-JOBCD use its Hessian-vector products.

Per instance and start, every method runs once per round, in a random order per round
(interleaved), ``--rounds`` rounds; each run records ``(time, f, gradients so far)`` at every cost
evaluation (CPU seconds of the one thread) and stops at its own convergence (gradient norm
``≤ 1e-13`` or its own rule) or at the first cost evaluation after ``--cap`` CPU seconds
(``--cap-large`` for n ≥ 100).
The reference ``f★`` is the lowest value any run found from that start; a method's time to the
target is the first recorded time with ``(f − f★)/max(1, |f★|) ≤ --target`` (median over rounds;
``None``: not reached). The cost has several local minima (quartic): a method that converged to
another one is reported with its gap to ``f★`` and its time to ``--target`` of its own final value
(``time_to_own_limit``).
One thread, one process, after a warm-up run of every method on a small instance::

    python benchmarks/smooth_oj.py --out docs/results/smooth-oj.json
    python benchmarks/smooth_oj.py --set tuning

``--set tuning`` is the instances the defaults were chosen on (n = 30, the ``quartic`` and
``logcosh`` families, data seed 0); ``--set heldout`` the others; ``--set all`` both.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy / torch load their BLAS

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

METHODS = ("default", "JJOBCD", "CG", "TR")


class _CapReached(Exception):
    pass


class _Trace:
    """Wraps a problem's cost: records ``(CPU seconds since start, f, gradients so far)`` of every
    evaluation and ends the run (``_CapReached``) at the first evaluation after ``cap`` CPU
    seconds (gradients: calls of the Euclidean gradient; TR's Hessian-vector products are not
    counted).

    CPU time of the one thread (``time.process_time``): on a shared machine a descheduled run
    loses wall time but not CPU time, so the ratios and the caps are the robust figures (the
    methods' own ``max_time`` is wall time and is set far beyond the cap)."""

    def __init__(self, problem, cap: float):
        self.cost = problem._cost
        self.cap = cap
        self.t0 = time.process_time()
        self.values: list[tuple[float, float]] = []
        self.last = None
        self.gradients = 0
        problem._cost = self
        gradient = problem.euclidean_gradient

        def counted(x):
            self.gradients += 1
            return gradient(x)

        problem._euclidean_gradient = counted

    def __call__(self, x):
        f = self.cost(x)
        t = time.process_time() - self.t0
        self.values.append((t, float(f), self.gradients))
        self.last = x
        if t > self.cap:
            raise _CapReached
        return f


def instances(which: str, sizes, starts: int) -> list[dict]:
    """The instance list of a set: dicts with family, n, p, data seed and start seeds."""
    out = []
    for family in ("quartic", "logcosh", "lorentz"):
        for n in sizes:
            for p in (n // 2, 1):
                tuning = n == 30 and family in ("quartic", "logcosh") and p == n // 2
                if which == "all" or (which == "tuning") == tuning:
                    out.append({"family": family, "n": n, "p": p, "seed": 0,
                                "starts": list(range(starts)), "set":
                                "tuning" if tuning else "heldout"})
    return out


def run_method(method: str, problem_def, x0: np.ndarray, cap: float) -> dict:
    import pymanopt

    from orthoplug.adapters import pymanopt as pm

    problem = problem_def.pymanopt_problem(
        pm.JOrthogonal(problem_def.n, signature=problem_def.signature))
    tol, wall = 1e-13, 100.0 * cap
    if method == "CG":
        opt = pymanopt.optimizers.ConjugateGradient(max_time=wall, max_iterations=10**9,
                                                    min_gradient_norm=tol, verbosity=0)
    elif method == "TR":
        opt = pymanopt.optimizers.TrustRegions(max_time=wall, max_iterations=10**9,
                                               min_gradient_norm=tol, verbosity=0)
    elif method == "JJOBCD":
        opt = pm.JJOBCD(max_time=wall, max_iterations=10**9, min_gradient_norm=tol, seed=0)
    else:
        opt = pm.CayleyLBFGS(max_time=wall, max_iterations=10**9, min_gradient_norm=tol)
    trace = _Trace(problem, cap)
    try:
        res = opt.run(problem, initial_point=x0)
    except _CapReached:
        res = None
    out = {"seconds": time.process_time() - trace.t0, "trace": trace.values,
           "gradients": trace.gradients}
    geo = problem.manifold.geometry
    if res is None:
        out.update(cost=min(e[1] for e in trace.values), iterations=None,
                   stop=f"CPU cap ({cap:g} s) reached")
        point = trace.last
    else:
        out.update(cost=float(res.cost), iterations=int(res.iterations),
                   stop=str(res.stopping_criterion))
        point = res.point
    out["violation"] = float(geo.relative_violation(torch.from_numpy(np.asarray(point))))
    if res is not None and hasattr(res, "solver_result"):
        out["info"] = {k: v for k, v in res.solver_result.info.items()
                       if isinstance(v, (int, float, str))}
    return out


def first_hit(trace, ref: float, target: float) -> tuple | None:
    """The first entry ``(t, f, gradients)`` of ``trace`` with ``(f − ref)/max(1, |ref|) ≤
    target`` (``None``: never)."""
    return next((e for e in trace if (e[1] - ref) / max(1.0, abs(ref)) <= target), None)


def time_to(trace, ref: float, target: float) -> float | None:
    """The time of :func:`first_hit` (``None``: never)."""
    hit = first_hit(trace, ref, target)
    return None if hit is None else hit[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=("tuning", "heldout", "all"), default="all")
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 30, 50, 100])
    parser.add_argument("--families", nargs="+", default=["quartic", "logcosh", "lorentz"])
    parser.add_argument("--starts", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--cap", type=float, default=10.0)
    parser.add_argument("--cap-large", type=float, default=30.0)
    parser.add_argument("--target", type=float, default=1e-10)
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)

    from orthoplug.adapters.pymanopt import JOrthogonal
    from orthoplug.problems.smooth_oj import smooth_oj_problem

    # warm-up: every method once on a small instance (imports, autograd tracing, kernels)
    small = smooth_oj_problem("quartic", 6, 3, seed=99)
    np.random.seed(99)
    x_small = JOrthogonal(6, 3).random_point()
    for method in args.methods:
        run_method(method, small, x_small, 1.0)

    meta = {"target": args.target, "rounds": args.rounds, "cap": args.cap,
            "cap_large": args.cap_large, "set": args.set, "families": args.families,
            "sizes": args.sizes, "machine": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__, "threads": 1,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    rows = []
    header = f"{'family':>8s} {'n':>4s} {'p':>3s} {'st':>2s} {'f*':>14s} " + " ".join(
        f"{m:>9s}" for m in args.methods) + f" {'best/def':>8s}  gradients to f★ (first round)"
    print(header, flush=True)
    for inst in instances(args.set, args.sizes, args.starts):
        if inst["family"] not in args.families:
            continue
        n, p = inst["n"], inst["p"]
        prob = smooth_oj_problem(inst["family"], n, p, seed=inst["seed"])
        cap = args.cap_large if n >= 100 else args.cap
        for start in inst["starts"]:
            np.random.seed(1000 + start)
            x0 = JOrthogonal(n, p).random_point()
            rng = np.random.default_rng(start)
            runs: dict[str, list[dict]] = {m: [] for m in args.methods}
            for _ in range(args.rounds):
                for k in rng.permutation(len(args.methods)):
                    m = args.methods[k]
                    runs[m].append(run_method(m, prob, x0, cap))
            ref = min(e[1] for rs in runs.values() for r in rs for e in r["trace"])
            summary = {}
            hits = {m: first_hit(rs[0]["trace"], ref, args.target) for m, rs in runs.items()}
            gradients = {m: None if h is None else h[2] for m, h in hits.items()}
            for m, rs in runs.items():
                times = [time_to(r["trace"], ref, args.target) for r in rs]
                reached = [t for t in times if t is not None]
                best = min(e[1] for r in rs for e in r["trace"])
                summary[m] = {
                    "time_to_target": float(np.median(reached)) if len(reached) == len(rs)
                    else None, "times": times,
                    "gradients_to_target": gradients[m],
                    "seconds_per_gradient": rs[0]["seconds"] / max(1, rs[0]["gradients"]),
                    "best_gap": (best - ref) / max(1.0, abs(ref)),
                    "time_to_own_limit": float(np.median([
                        time_to(r["trace"], min(e[1] for e in r["trace"]), args.target)
                        for r in rs])),
                    "violation": max(r["violation"] for r in rs),
                    "stop": rs[0]["stop"], "iterations": rs[0]["iterations"],
                    "info": rs[0].get("info", {})}
            baseline = [summary[m]["time_to_target"] for m in ("CG", "TR")
                        if m in summary and summary[m]["time_to_target"] is not None]
            mine = summary.get("default", {}).get("time_to_target")
            ratio = min(baseline) / mine if baseline and mine else None
            rows.append({**{k: v for k, v in inst.items() if k != "starts"}, "start": start,
                         "reference": ref, "cap": cap, "methods": summary,
                         "speedup_vs_best_of_cg_tr": ratio})

            def fmt(s):
                t = s["time_to_target"]
                return f"{t:9.3f}" if t is not None else f"gap{s['best_gap']:.0e}".rjust(9)
            print(f"{inst['family']:>8s} {n:4d} {p:3d} {start:2d} {ref:14.8g} "
                  + " ".join(fmt(summary[m]) for m in args.methods)
                  + f" {'-' if ratio is None else f'{ratio:8.2f}'}  "
                  + " ".join(f"{m}:{gradients[m]}" for m in args.methods), flush=True)
            if args.out:  # after every row: a long run keeps what it measured
                with open(args.out, "w") as fh:
                    json.dump({"meta": meta, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
