r"""HSPP: J-JOBCD under several ``SigmaFit`` constants beside pymanopt's CG, in one process.

For each seed and HSPP data source of the ``jobcd`` bench suite (``--scale quick`` or ``paper``),
every method runs from the suite's common start with the same time limit, one after another
(interleaved per instance, so they share the load; each ran once before, on a quick instance).
A J-JOBCD variant is given as ``FRACTION,OPTIMISM`` (``SigmaFit``'s ``fraction`` and
``optimism``; ``0.5,1`` is the rule before issue #17's follow-up), ``CG`` is the suite's
``pymanopt-CG``. Prints and optionally appends one JSON line per run: final objective,
iterations, seconds, and the difference to CG in %.

    OMP_NUM_THREADS=1 python benchmarks/hspp_sigma.py --scale paper --time-limit 15 \
        --seeds 0 1 --variants 0.5,1 1e-4,8 1e-4,2 --out rows.jsonl
"""

from __future__ import annotations

import argparse
import time

from orthoplug.bench.runner import emit_row


def _variant_runner(fraction: float, optimism: float):
    """A bench runner of the suite's J-JOBCD whose ``SigmaFit`` uses these constants."""
    import torch

    from orthoplug.bench.suites.jobcd import SOLVERS
    from orthoplug.solvers.jobcd import JJOBCD
    from orthoplug.solvers.sigma_rules import SigmaFit

    rule = SigmaFit(fraction=fraction, optimism=optimism)

    def run(experiment, instance, *, seed, time_limit):
        x0 = torch.from_numpy(experiment.initial_point(instance, seed))
        oracle = experiment.oracle(instance, x0)
        solver = JJOBCD(**{**SOLVERS["J-JOBCD"][1], "matchings": "all", "sigma_rule": rule,
                           "max_time": time_limit, "max_iterations": 10**9, "seed": seed})
        result = solver.run(oracle, x0, instance.data.geometry)
        return result.point.detach().cpu().numpy(), result.iterations

    return run


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", default="paper", choices=("quick", "paper"))
    parser.add_argument("--time-limit", type=float, default=15.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--sources", nargs="+", default=["gaussian", "digits"])
    parser.add_argument("--variants", nargs="+", default=["0.5,1", "1e-4,8"],
                        help="FRACTION,OPTIMISM of SigmaFit per J-JOBCD run")
    parser.add_argument("--out", help="append one JSON line per run here")
    args = parser.parse_args(argv)

    from orthoplug.bench.suites.jobcd import HSPPExperiment, _common_methods

    experiment = HSPPExperiment()
    cg = next(m for m in _common_methods(trust_regions=False, vr=False, admm_fixed=False)
              if m.name == "pymanopt-CG")
    runners = {"CG": lambda e, i, *, seed, time_limit: (
        (o := cg.runner(e, i, seed=seed, time_limit=time_limit, **cg.options)).point,
        o.iterations)}
    for spec in args.variants:
        fraction, optimism = (float(v) for v in spec.split(","))
        runners[spec] = _variant_runner(fraction, optimism)
    warm = experiment.instances("quick", 0)[0]  # first calls (imports, caches) off the clock
    for run in runners.values():
        run(experiment, warm, seed=0, time_limit=0.2)
    for seed in args.seeds:
        for instance in experiment.instances(args.scale, seed):
            if instance.dataset not in args.sources:
                continue
            rows = []
            for name, run in runners.items():
                start = time.perf_counter()
                point, iterations = run(experiment, instance, seed=seed,
                                        time_limit=args.time_limit)
                seconds = time.perf_counter() - start
                rows.append({"scale": args.scale, "source": instance.dataset, "seed": seed,
                             "method": name, "time_limit": args.time_limit,
                             "objective": experiment.evaluate(instance, point)["objective"],
                             "iterations": iterations, "seconds": round(seconds, 2)})
            reference = rows[0]["objective"]
            for row in rows:
                row["vs_cg_percent"] = round(100 * (row["objective"] / reference - 1), 2)
                emit_row(row, args.out)


if __name__ == "__main__":
    main()
