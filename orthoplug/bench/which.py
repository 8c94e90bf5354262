"""The "which solver when" page, generated from measured benchmark records.

:func:`which_solver` turns the records of one ``orthoplug-bench`` run (the lines of
``results.jsonl``) into a Markdown page: for each problem class (experiment) and dataset, the
solvers ranked by the experiment's criterion, and a summary of which solver won most datasets.
``orthoplug-bench report DIR`` writes it as ``DIR/which-solver.md`` next to ``tables.md``; the
documentation builds its page with :func:`write_which_solver_page` from ``docs/results/``.

Ranking, per (experiment, dataset), among the feasible runs that did not fail:

* experiments with a certified optimum: reached the target gap first (``time_to_target``), then
  the smallest relative gap;
* otherwise the experiment's criterion in :data:`CRITERIA` (default: the lowest final objective);
  runs within :data:`TIE_TOLERANCE` (relative) of the best value tie, and tied runs rank by the
  time they first reached that value (from the record's objective history when the criterion
  is the objective, else the run's time): several solvers converging to the same point are
  told apart by speed, not by rounding;
* experiments mapped to ``None`` in :data:`CRITERIA` have no winner (``hevp-paper`` is unbounded
  below, so its objective measures divergence, not quality).
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from pathlib import Path

__all__ = ["CRITERIA", "TIE_TOLERANCE", "rank_runs", "ranked_runs", "which_solver",
           "time_to_gap_section", "run_command", "write_which_solver_page", "ARCHIVED_RUNS"]

#: relative distance to the best value within which runs tie (ranked by time instead)
TIE_TOLERANCE = 1e-9

#: experiment → (record field or metric name, "min" or "max"); ``None``: no ranking.
CRITERIA: dict[str, tuple[str, str] | None] = {
    "hevp-paper": None,
    "ultrae": ("mrr", "max"),
    "orthonet": ("accuracy", "max"),
}

_PAGE_INTRO = """\
This page is generated from measured benchmark records by
`orthoplug.bench.which.which_solver`; `orthoplug-bench report DIR` writes the same page as
`DIR/which-solver.md` for any run. Answers change as solvers improve: rerun the command below
and the page follows. Times compare only within one run (one process per table).
"""


def _value(rec: dict, key: str) -> float | None:
    value = rec[key] if key in rec and key != "metrics" else rec["metrics"].get(key)
    return value if isinstance(value, int | float) and math.isfinite(value) else None


def rank_runs(records: list[dict], experiment: str) -> dict[str, list[tuple[str, float, str]]]:
    """Rank the solvers of one experiment on each of its datasets.

    Args:
        records: benchmark records (``results.jsonl`` lines); with several runs of a solver on
            a dataset (seeds, a tuning grid) its best one counts.
        experiment: the experiment's name, e.g. ``"hevp-tracemin"``.

    Returns:
        dataset → ``[(solver, value, label), ...]`` best first, where ``value`` is the ranking
        value and ``label`` the rendered figure; empty if the experiment has no criterion.
    """
    return {dataset: [(solver, value, label) for solver, value, label, _ in runs]
            for dataset, runs in ranked_runs(records, experiment).items()}


def ranked_runs(records: list[dict],
                experiment: str) -> dict[str, list[tuple[str, float, str, dict]]]:
    """:func:`rank_runs` with each solver's counted (best) record as a fourth entry."""
    criterion = CRITERIA.get(experiment, ("objective", "min"))
    if criterion is None:
        return {}
    key, direction = criterion
    sign = -1.0 if direction == "max" else 1.0
    certified: dict[str, list[tuple]] = defaultdict(list)
    scored: dict[str, list[tuple]] = defaultdict(list)
    datasets: dict[str, None] = {}  # in the order of their first ranked run
    for rec in records:
        if rec["experiment"] != experiment or rec["status"] == "error" or not rec["feasible"]:
            continue
        if rec["optimum"] is not None and rec["gap"] is not None:
            ttt = rec["time_to_target"]
            order = (ttt is None, ttt if ttt is not None else 0.0, rec["gap"])
            label = (f"{ttt:.3g} s to gap {rec['target_gap']:.0e}" if ttt is not None
                     else f"gap {rec['gap']:.2e} at {rec['time']:.3g} s")
            certified[rec["dataset"]].append((order, rec["solver"], rec["gap"], label, rec))
        elif (value := _value(rec, key)) is not None:
            scored[rec["dataset"]].append((sign * value, value, rec))
        else:
            continue
        datasets[rec["dataset"]] = None
    for dataset, runs in scored.items():
        certified[dataset] += _tie_break(runs, key, sign)
    ranking = {}
    for dataset in datasets:
        runs = certified[dataset]
        seen: set[str] = set()  # each solver once, with its best run (seeds, tuning grids)
        ranking[dataset] = [(solver, value, label, rec) for _, solver, value, label, rec
                            in sorted(runs, key=lambda run: run[:2])
                            if not (solver in seen or seen.add(solver))]
    return ranking


def _reached(rec: dict, key: str, sign: float, bound: float) -> float:
    """When the run first had ``sign·value ≤ bound``: from its objective history (criterion
    ``objective``), else its final time."""
    if key == "objective":
        hist = rec["history"]
        for t, f in zip(hist.get("time", []), hist.get("objective", []), strict=False):
            if f is not None and sign * f <= bound:
                return t
    return rec["time"]


def _tie_break(runs: list[tuple], key: str, sign: float) -> list[tuple]:
    """Criterion runs ``(sign·value, value, record)`` as ``(order, solver, value, label,
    record)``: runs tied with the best (within :data:`TIE_TOLERANCE`, two solvers or more)
    are ordered by the time they reached the tie, the others by their value."""
    best = min(signed for signed, _, _ in runs)
    bound = best + TIE_TOLERANCE * max(abs(best), 1e-300)
    tied = len({rec["solver"] for signed, _, rec in runs if signed <= bound}) > 1
    out = []
    for signed, value, rec in runs:
        if tied and signed <= bound:
            t = _reached(rec, key, sign, bound)
            out.append(((best, 0, t), rec["solver"], value,
                        f"{key} {value:.6g} (tie; reached at {t:.3g} s)", rec))
        else:
            out.append(((signed, 1, 0.0), rec["solver"], value, f"{key} {value:.6g}", rec))
    return out


def which_solver(records: list[dict], *, command: str | None = None,
                 provenance: str = "", title: str | None = None) -> str:
    """Markdown "which solver when" page from benchmark records.

    Args:
        records: the records of one run (``results.jsonl`` lines).
        command: the command that produced them, shown verbatim.
        provenance: a sentence on where the records come from, shown under the command.
        title: ``None``: a page of its own ("# Which solver when" and the page's introduction);
            a string: a section of a larger page, headed ``## title`` (its subsections one
            level down).

    Returns:
        The page: a summary table (problem class → solver that won most datasets), then one
        table per problem class with the winner and runner-up on each dataset.

    Raises:
        ValueError: ``records`` is empty.
    """
    if not records:
        raise ValueError("no records: nothing to rank")
    experiments = list(dict.fromkeys(rec["experiment"] for rec in records))
    summary = ["| problem class | suite | best on most datasets | datasets won |",
               "|---|---|---|---|"]
    sections = []
    for exp in experiments:
        suite = next(rec["suite"] for rec in records if rec["experiment"] == exp)
        ranking = rank_runs(records, exp)
        if not ranking:
            reason = ("no ranking (unbounded below: the objective measures divergence)"
                      if exp in CRITERIA else "no feasible run")
            summary.append(f"| `{exp}` | {suite} | – | {reason} |")
            continue
        wins = Counter(runs[0][0] for runs in ranking.values())
        top = max(wins.values())
        leaders = ", ".join(sorted(s for s, c in wins.items() if c == top))
        summary.append(f"| `{exp}` | {suite} | {leaders} | {top} of {len(ranking)} |")
        lines = [f"### `{exp}` ({suite})", "", "| dataset | best | runner-up | third |",
                 "|---|---|---|---|"]
        for dataset, runs in ranking.items():
            cells = [f"**{s}**: {label}" if k == 0 else f"{s}: {label}"
                     for k, (s, _, label) in enumerate(runs[:3])]
            cells += ["–"] * (3 - len(cells))
            lines.append(f"| {dataset} | " + " | ".join(cells) + " |")
        sections.append("\n".join(lines))
    scale = ", ".join(sorted({rec["scale"] for rec in records}))
    limits = ", ".join(f"{t:g} s" for t in sorted({rec["time_limit"] for rec in records}))
    sub = "##" if title is None else "###"
    head = ["# Which solver when", "", _PAGE_INTRO] if title is None else [f"## {title}", ""]
    head += [f"**Records:** {len(records)} runs, scale `{scale}`, time limit {limits} per run."]
    if command:
        head += ["", "**Command:**", "", "```", command, "```"]
    if provenance:
        head += ["", provenance]
    head += ["", f"{sub} Summary", "", *summary, "", f"{sub} Per problem class", ""]
    if title is not None:  # one level down
        sections = [section.replace("### ", "#### ", 1) for section in sections]
    return "\n".join(head) + "\n" + "\n\n".join(sections) + "\n"


def time_to_gap_section(result: dict, *, title: str) -> str:
    """Markdown section from a ``benchmarks/rsdm_stiefel.py`` JSON file: per problem, the method
    first to each relative-gap decade (the question "which solver to which accuracy").

    Args:
        result: the parsed JSON file (keys ``args`` and ``problems``).
        title: the section heading.
    """
    args = result["args"]
    command = ["python benchmarks/rsdm_stiefel.py", f"--threads {args['threads']}",
               "--problems " + " ".join(args["problems"]),
               "--methods " + " ".join(args["methods"]), f"--max-time {args['max_time']:g}"]
    command += ["--no-scaling"] if args.get("no_scaling") else []
    lines = [f"## {title}", "", "```", " ".join(command), "```", ""]
    for name, prob in result["problems"].items():
        sizes = ", ".join(f"{k} = {prob[k]}" for k in ("n", "p", "r") if k in prob)
        decades = sorted({d for run in prob["results"] for d in run["times_to_gap"]},
                         key=float, reverse=True)
        lines += [f"**{name}** ({sizes}), seconds to each relative gap, capped at "
                  f"{args['max_time']:g} s:", "",
                  "| gap | first | time (s) | second | time (s) |", "|---|---|---|---|---|"]
        for decade in decades:
            times = sorted((run["times_to_gap"][decade], run["method"]) for run in prob["results"]
                           if run["times_to_gap"].get(decade) is not None)
            cells = [c for t, m in times[:2] for c in (m, f"{t:.1f}")]
            cells += ["–"] * (4 - len(cells))
            lines.append(f"| {decade} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def run_command(out_dir: str | Path) -> str | None:
    """The command recorded in ``out_dir/run.json`` by ``orthoplug-bench`` (None if absent)."""
    path = Path(out_dir) / "run.json"
    if not path.exists():
        return None
    argv = json.loads(path.read_text(encoding="utf-8")).get("argv")
    return " ".join(argv) if argv else None


#: the archived runs shown on the documentation's page (file in ``docs/results``, section title)
ARCHIVED_RUNS = (("general-quick.json", "General suite, quick scale"),
                 ("general-paper.json", "General suite, paper scale (four families)"),
                 ("quick-run.json", "Paper suites, quick scale"))


def write_which_solver_page(results_dir: str | Path, out: str | Path) -> Path:
    """Write the documentation's page from the measured data in ``results_dir``.

    The page: the recommendations table with its evidence
    (:mod:`orthoplug.bench.recommendations`), then one ranking section per archived run of
    :data:`ARCHIVED_RUNS` (``.json`` files with ``command``, ``provenance`` and ``records``),
    the paper-size run (``paper-run.jsonl``, its command in ``paper-run.json``) and every
    ``rsdm-stiefel-*-long.json`` time-to-gap benchmark.

    Args:
        results_dir: the folder with the measured data (``docs/results`` in the repository).
        out: the Markdown file to write.

    Returns:
        The path written.
    """
    from orthoplug.bench.recommendations import load_recommendations, recommendations_section
    from orthoplug.bench.runner import read_records

    results_dir, out = Path(results_dir), Path(out)
    text = "\n".join(["# Which solver when", "", _PAGE_INTRO,
                      recommendations_section(load_recommendations(results_dir), results_dir)])
    for name, title in ARCHIVED_RUNS:
        run = json.loads((results_dir / name).read_text(encoding="utf-8"))
        text += "\n" + which_solver(run["records"], command=run["command"],
                                    provenance=run["provenance"], title=f"{title}: `{name}`")
    meta = json.loads((results_dir / "paper-run.json").read_text(encoding="utf-8"))
    text += "\n" + which_solver(read_records(results_dir / "paper-run.jsonl"),
                                command="\n".join(meta["commands"]),
                                provenance=meta["provenance"],
                                title="Paper suites, paper scale: `paper-run.jsonl`")
    for path in sorted(results_dir.glob("rsdm-stiefel-*-long.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        text += "\n" + time_to_gap_section(
            result, title=f"Time to each accuracy: `{path.name}`")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out
