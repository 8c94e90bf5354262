"""``orthoplug-bench`` / ``python -m orthoplug.bench``: run, list and report.

    orthoplug-bench --suite quick                       # every paper, small sizes, ≤ 10 min
    orthoplug-bench --suite jobcd --scale paper --out bench-jobcd
    orthoplug-bench --suite rsdm --problems pca --solvers RSDM-P pymanopt-CG --seeds 0 1 2
    orthoplug-bench report bench-out                    # re-render tables and plots from JSON
    orthoplug-bench list                                # suites, experiments, solvers
    orthoplug-bench archive bench-out docs/results/general-quick.json --provenance "..."
    orthoplug-bench recommendations [--write]           # README/guide blocks vs the table
"""

from __future__ import annotations

import argparse
import logging
import sys

from orthoplug.bench import report, runner
from orthoplug.bench.core import SCALES

__all__ = ["main"]


def _run_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="orthoplug-bench",
        description="Run the seed papers' experiments: orthoplug against pymanopt, geoopt and "
                    "the papers' baselines. Subcommands: 'report DIR' re-renders a saved run, "
                    "'list' shows what can run.")
    ap.add_argument("--suite", default="quick",
                    help=f"one of {', '.join(('quick', 'all') + runner.SUITES)} "
                         "('quick' and 'all': every paper's experiments)")
    ap.add_argument("--problems", nargs="+", metavar="NAME",
                    help="only these experiments (see 'list')")
    ap.add_argument("--solvers", nargs="+", metavar="NAME",
                    help="only these solvers; a registry solver name adds it where it applies")
    ap.add_argument("--scale", choices=SCALES, default=None,
                    help="problem sizes and time limits (default: quick for --suite quick, "
                         "paper otherwise)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0],
                    help="seeds of the start points and the solvers' randomness "
                         "(the data use the first)")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="seconds per run (default: the experiment's for the scale)")
    ap.add_argument("--tune", action="store_true",
                    help="run each solver's step-size/β grid and report the best setting")
    ap.add_argument("--out", default="bench-out", help="output folder (default: bench-out)")
    ap.add_argument("--no-progress", action="store_true", help="log lines instead of a bar")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch and BLAS threads (default 1: fair comparisons on a shared box)")
    return ap


def _list() -> int:
    from orthoplug import registry

    for suite in runner.SUITES:
        for exp in runner.experiments_of(suite):
            names = ", ".join(m.name for m in exp.methods("quick"))
            print(f"{suite:7s} {exp.name:18s} {exp.title}\n{'':26s}solvers: {names}")
    plugins = [e.name for e in registry.entries("solver") if e.source != "builtin"]
    print("registry solvers:", ", ".join(registry.names("solver")),
          f"(plug-ins: {', '.join(plugins) or 'none'})")
    return 0


def _recommendations(argv: list[str]) -> int:
    """Check (or ``--write``) the README's and the guide's generated recommendation blocks and
    the table's evidence; 1 when something disagrees."""
    from pathlib import Path

    from orthoplug.bench import recommendations

    ap = argparse.ArgumentParser(prog="orthoplug-bench recommendations",
                                 description="compare the README's and the guide's "
                                             "recommendations with docs/results/"
                                             f"{recommendations.TABLE}")
    ap.add_argument("--root", default=".", help="repository root (default: .)")
    ap.add_argument("--write", action="store_true", help="rewrite the stale blocks")
    args = ap.parse_args(argv)
    root = Path(args.root)
    stale = recommendations.sync_blocks(root, write=args.write)
    problems = recommendations.check_evidence(
        recommendations.load_recommendations(root / "docs" / "results"),
        root / "docs" / "results")
    for name in stale:
        print(f"{name}: {'rewritten' if args.write else 'differs from the table'}")
    for line in problems:
        print(line)
    return 1 if problems or (stale and not args.write) else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``orthoplug-bench``: run a suite, ``report DIR`` or ``list``; returns the exit
    status (1 if a run failed, 2 on bad arguments).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if argv[:1] == ["list"]:
        return _list()
    if argv[:1] == ["report"]:
        ap = argparse.ArgumentParser(prog="orthoplug-bench report",
                                     description="re-render tables and plots of a saved run")
        ap.add_argument("dir", help="folder with results.jsonl")
        args = ap.parse_args(argv[1:])
        print(f"wrote {report.render(args.dir)}")
        return 0
    if argv[:1] == ["archive"]:
        ap = argparse.ArgumentParser(prog="orthoplug-bench archive",
                                     description="write a run's records as one JSON file")
        ap.add_argument("dir", help="folder with results.jsonl and run.json")
        ap.add_argument("out", help="the JSON file to write")
        ap.add_argument("--provenance", required=True, help="where and how the run was made")
        ap.add_argument("--exclude-suite", nargs="*", default=[], metavar="SUITE")
        args = ap.parse_args(argv[1:])
        path = runner.archive_run(args.dir, args.out, provenance=args.provenance,
                                  exclude_suites=args.exclude_suite)
        print(f"wrote {path}")
        return 0
    if argv[:1] == ["recommendations"]:
        return _recommendations(argv[1:])
    args = _run_parser().parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    try:  # numpy's BLAS pool too (pymanopt works in numpy)
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.threads)
    except ImportError:
        print("orthoplug-bench: threadpoolctl missing, numpy's BLAS threads not limited",
              file=sys.stderr)
    scale = args.scale or ("quick" if args.suite == "quick" else "paper")
    try:
        plan = runner.plan(args.suite, problems=args.problems, solvers=args.solvers,
                           scale=scale, seeds=args.seeds, tune=args.tune,
                           time_limit=args.time_limit)
    except ValueError as err:
        print(f"orthoplug-bench: {err}", file=sys.stderr)
        return 2
    print(f"orthoplug-bench: {plan.runs()} runs ({args.suite}, scale {scale}) → {args.out}")
    records = runner.run_plan(plan, args.out, progress=not args.no_progress,
                              argv=["orthoplug-bench", *argv])
    path = report.render(args.out, records=[r.to_json() for r in records])
    print(path.read_text())
    failed = [r for r in records if r.status == "error"]
    if failed:
        print(f"orthoplug-bench: {len(failed)} run(s) failed (see the table notes)",
              file=sys.stderr)
    return 1 if failed else 0
