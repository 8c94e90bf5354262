r"""Lorentz fits in geoopt: align two point clouds on the hyperboloid by X ∈ O(1, d),
``min ‖XP − Q‖_F²`` (:func:`orthoplug.problems.smooth_oj.lorentz_fit_problem`), full-batch
closures, from the identity.

Methods, each on a ``geoopt.ManifoldParameter`` of orthoplug's geoopt ``JOrthogonal(d + 1, 1)``
and the same closure:

* ``CayleyLBFGS``: :class:`orthoplug.adapters.geoopt.CayleyLBFGS` with its defaults (one L-BFGS
  iteration per ``step``);
* ``JJOBCD``: :class:`orthoplug.adapters.geoopt.JJOBCD` with its defaults, and ``JJOBCD-fit``
  with ``sigma_rule="fit"`` (σ refitted after every checked step, the core solver's rule);
* ``Adam(lr)``: geoopt's ``RiemannianAdam`` for ``lr`` in ``--adam-lrs`` (the best is reported);
* ``SGD(c)``: geoopt's ``RiemannianSGD`` with ``lr = c/L``, ``L = 2‖PPᵀ‖₂`` the Lipschitz constant
  of the Euclidean gradient, ``c`` in ``--sgd-cs``.

Every closure call records ``(CPU seconds, loss)``; the reference ``f★`` is the lowest loss any
run found, including a run of the core :class:`orthoplug.solvers.lbfgs.CayleyLBFGS` to its own
stop (where f stops decreasing) made first; a method's time is the first recorded time with
``(f − f★)/max(1, |f★|) ≤ --target``. The methods run interleaved in a random order per
instance, one thread, one process, after a warm-up; each stops at the target, after
``--max-steps`` steps or ``--cap`` CPU seconds. The final point's constraint violation
``‖XᵀJX − J‖_F/‖X‖_F²`` is reported for every method. The instance of ``(d, N)`` is drawn with
the seed ``d·1000 + N + --seed-offset``::

    python benchmarks/lorentz_fit.py --noise 0.1 --cap 2 --out docs/results/lorentz-fit.json
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
from smooth_oj import time_to  # noqa: E402  (this folder: the same gap rule)


class _Stop(Exception):
    pass


def _loss_fn(prob):
    p = torch.from_numpy(prob.data["P"])
    q = torch.from_numpy(prob.data["Q"])

    def loss(x):
        r = x @ p - q
        return (r * r).sum()
    return loss, 2.0 * float(torch.linalg.matrix_norm(p @ p.T, ord=2))


def run_torch(method: str, opt_factory, prob, target: float | None, max_steps: int,
              cap: float) -> dict:
    """One geoopt optimizer from the identity; ``(CPU s, loss)`` of every closure call."""
    import geoopt

    from orthoplug.adapters.geoopt import JOrthogonal

    loss, _ = _loss_fn(prob)
    manifold = JOrthogonal(prob.n, 1)
    x = geoopt.ManifoldParameter(torch.eye(prob.n, dtype=torch.float64), manifold=manifold)
    opt = opt_factory([x])
    trace: list[tuple[float, float]] = []
    t0 = time.process_time()

    def closure():
        opt.zero_grad()
        value = loss(x)
        value.backward()
        trace.append((time.process_time() - t0, float(value.detach())))
        return value

    steps = 0
    while steps < max_steps:
        opt.step(closure)
        steps += 1
        f = trace[-1][1]
        if target is not None and f <= target or trace[-1][0] > cap or not np.isfinite(f):
            break
    with torch.no_grad():
        trace.append((time.process_time() - t0, float(loss(x))))
        viol = float(manifold.geometry.relative_violation(x.detach()))
    return {"method": method, "trace": trace, "steps": steps, "violation": viol}


def run_lbfgs(prob, target: float | None, cap: float) -> dict:
    """The core CayleyLBFGS on the same loss (the reference run)."""
    from orthoplug.geometry.manifolds import JOrthogonalGeometry
    from orthoplug.oracles import FunctionOracle
    from orthoplug.solvers.lbfgs import CayleyLBFGS

    loss, _ = _loss_fn(prob)
    trace: list[tuple[float, float]] = []
    t0 = time.process_time()

    def value(x):
        f = loss(x)
        trace.append((time.process_time() - t0, float(f)))
        if target is not None and float(f) <= target or trace[-1][0] > cap:
            raise _Stop
        return f

    oracle = FunctionOracle(value, lambda x: torch.func.grad(loss)(x))
    geo = JOrthogonalGeometry(prob.n, 1)
    res = None
    try:
        res = CayleyLBFGS(max_iterations=10**6, min_gradient_norm=0.0).run(
            oracle, torch.eye(prob.n, dtype=torch.float64), geo)
    except _Stop:
        pass
    viol = None if res is None else float(geo.relative_violation(res.point))
    return {"method": "CayleyLBFGS", "trace": trace,
            "steps": None if res is None else res.iterations, "violation": viol}


def _best(summary: dict, prefix: str):
    """(time, name) of the fastest method whose name starts with ``prefix``."""
    cands = [(s["time_to_target"], n) for n, s in summary.items()
             if n.startswith(prefix) and s["time_to_target"] is not None]
    return min(cands) if cands else (None, None)


def _solver(method: str) -> str:
    """The method as the records name it: a tuning grid is one solver whose best run counts, as
    in the orthoplug-bench records."""
    return ("geoopt-RAdam" if method.startswith("Adam") else
            "geoopt-RSGD" if method.startswith("SGD") else method)


def bench_records(rows: list[dict], target: float, cap: float) -> list[dict]:
    """The rows as ``orthoplug-bench`` records of the experiment ``lorentz-fit-geoopt`` (the
    fields :func:`orthoplug.bench.which.ranked_runs` ranks by: time to the ``target`` gap, else
    the gap), so ``docs/results/recommendations.json`` can name this file as evidence."""
    out = []
    for row in rows:
        dataset = (f"O(1,{row['d']})-N{row['points']}-noise{row['noise']:g}-seed{row['seed']}")
        for method, m in row["methods"].items():
            viol = m["violation"]
            out.append({"suite": "lorentz-fit", "experiment": "lorentz-fit-geoopt",
                        "dataset": dataset, "solver": _solver(method), "options": {
                            "method": method}, "status": "ok", "time_limit": cap,
                        "objective": row["reference"] + m["best_gap"] * max(
                            1.0, abs(row["reference"])),
                        "optimum": row["reference"], "gap": max(m["best_gap"], 0.0),
                        "target_gap": target, "time_to_target": m["time_to_target"],
                        "time": m["time"], "iterations": m["steps"], "violation": viol,
                        "feasible": viol is not None and viol <= 1e-8,
                        "metrics": {}, "history": {}})
    return out


def _ratio(t, base):
    """``t / base`` where both were reached, else None."""
    return t / base if t and base else None


def _fmt(t, name=None, width=7, digits=3) -> str:
    s = "-" if t is None else f"{t:.{digits}f}"
    return f"{s if name is None else f'{s} {name}':>{width}s}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[2, 5, 10])
    parser.add_argument("--points", type=int, nargs="+", default=[50, 500])
    parser.add_argument("--noise", type=float, nargs="+", default=[0.01, 0.1])
    parser.add_argument("--adam-lrs", type=float, nargs="+", default=[1e-3, 1e-2, 1e-1])
    parser.add_argument("--sgd-cs", type=float, nargs="+", default=[0.25, 0.5, 1.0])
    parser.add_argument("--target", type=float, default=1e-6)
    parser.add_argument("--max-steps", type=int, default=20_000)
    parser.add_argument("--cap", type=float, default=5.0)
    parser.add_argument("--seed-offset", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)

    import geoopt

    from orthoplug.adapters import geoopt as go
    from orthoplug.problems.smooth_oj import lorentz_fit_problem

    def factories(lipschitz):
        out = {"CayleyLBFGS": lambda ps: go.CayleyLBFGS(ps),
               "JJOBCD": lambda ps: go.JJOBCD(ps, seed=0),
               "JJOBCD-fit": lambda ps: go.JJOBCD(ps, seed=0, sigma_rule="fit")}
        for lr in args.adam_lrs:
            out[f"Adam({lr:g})"] = lambda ps, lr=lr: geoopt.optim.RiemannianAdam(ps, lr=lr)
        for c in args.sgd_cs:
            out[f"SGD({c:g})"] = lambda ps, c=c: geoopt.optim.RiemannianSGD(
                ps, lr=c / lipschitz)
        return out

    warm = lorentz_fit_problem(2, 20, 0.1, seed=99)
    for name, make in factories(_loss_fn(warm)[1]).items():
        run_torch(name, make, warm, None, 50, 1.0)
    run_lbfgs(warm, None, 1.0)

    meta = {"target": args.target, "cap": args.cap, "max_steps": args.max_steps,
            "adam_lrs": args.adam_lrs, "sgd_cs": args.sgd_cs, "noise": args.noise,
            "seed_offset": args.seed_offset,
            "machine": platform.platform(), "python": platform.python_version(),
            "torch": torch.__version__, "threads": 1,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    rows = []
    print(f"{'d':>3s} {'N':>5s} {'noise':>6s} {'f*':>12s} {'LBFGS':>7s} {'JJOBCD':>7s} "
          f"{'JJ-fit':>7s} {'best Adam':>16s} {'best SGD':>16s} {'Adam/LB':>7s} {'SGD/LB':>7s} "
          f"{'viol LB':>8s} {'viol Adam':>9s}", flush=True)
    rng = np.random.default_rng(0)
    for d in args.dims:
        for points in args.points:
            for noise in args.noise:
                prob = lorentz_fit_problem(d, points, noise,
                                           seed=d * 1000 + points + args.seed_offset)
                # the reference first: CayleyLBFGS to its own stop
                ref_run = run_lbfgs(prob, None, 4 * args.cap)
                ref = min(f for _, f in ref_run["trace"])
                target = ref + args.target * max(1.0, abs(ref))
                runs = {}
                items = list(factories(_loss_fn(prob)[1]).items())
                for k in rng.permutation(len(items)):
                    name, make = items[k]
                    runs[name] = run_torch(name, make, prob, target, args.max_steps, args.cap)
                ref = min(ref, *(f for r in runs.values() for _, f in r["trace"]))
                summary = {}
                for name, r in runs.items():
                    summary[name] = {"time_to_target": time_to(r["trace"], ref, args.target),
                                     "best_gap": (min(f for _, f in r["trace"]) - ref)
                                     / max(1.0, abs(ref)),
                                     "steps": r["steps"], "violation": r["violation"],
                                     "time": r["trace"][-1][0]}

                adam_t, adam_name = _best(summary, "Adam")
                sgd_t, sgd_name = _best(summary, "SGD")
                times = {n: summary[n]["time_to_target"] for n in ("CayleyLBFGS", "JJOBCD",
                                                                    "JJOBCD-fit")}
                lb = times["CayleyLBFGS"]

                rows.append({"d": d, "points": points, "noise": noise, "reference": ref,
                             "seed": d * 1000 + points + args.seed_offset,
                             "methods": summary, "best_adam": adam_name, "best_sgd": sgd_name,
                             "adam_over_lbfgs": _ratio(adam_t, lb),
                             "sgd_over_lbfgs": _ratio(sgd_t, lb),
                             "adam_over_jjobcd": _ratio(adam_t, times["JJOBCD"])})

                viol_adam = summary[adam_name]["violation"] if adam_name else None
                print(f"{d:3d} {points:5d} {noise:6g} {ref:12.6g} {_fmt(lb)} "
                      f"{_fmt(times['JJOBCD'])} {_fmt(times['JJOBCD-fit'])} "
                      f"{_fmt(adam_t, adam_name, 16)} {_fmt(sgd_t, sgd_name, 16)} "
                      f"{_fmt(_ratio(adam_t, lb), digits=1)} {_fmt(_ratio(sgd_t, lb), digits=1)} "
                      f"{summary['CayleyLBFGS']['violation']:8.1e} "
                      f"{'-' if viol_adam is None else f'{viol_adam:9.1e}':>9s}", flush=True)
                if args.out:  # after every row: a long run keeps what it measured
                    with open(args.out, "w") as fh:
                        json.dump({"meta": meta, "rows": rows,
                                   "records": bench_records(rows, args.target, args.cap)},
                                  fh, indent=1)


if __name__ == "__main__":
    main()
