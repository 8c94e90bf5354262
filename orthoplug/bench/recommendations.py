"""One table of recommendations, rendered into the which-solver page, the guide and the README.

``docs/results/recommendations.json`` lists, per problem family, the recommended solver, a
one-line "when to use" and the measured evidence: benchmark records (a ``.jsonl`` file of
``orthoplug-bench`` records, or a ``.json`` file ``{"records": [...], ...}``) and the experiments
in them that decide the family. From it:

* :func:`recommendations_section` — the "Recommendations" section of the which-solver page, with
  per family and evidence experiment the measured winner, runner-up and their ratio
  (recomputed from the records by :func:`~orthoplug.bench.which.ranked_runs`);
* :func:`recommendation_block` — the block between :data:`BEGIN` and :data:`END` in
  ``README.md`` (``style="readme"``) and ``docs/guide/choosing.md`` (``style="guide"``);
  :func:`sync_blocks` rewrites (or checks) both, ``orthoplug-bench recommendations --write``
  runs it.

Rules: a recommendation must be the measured winner (most datasets won) of every experiment
named as its evidence (:func:`check_evidence`); where a built-in of pymanopt or geoopt wins, the
entry's ``builtin`` names the library and every rendering says so.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from orthoplug.bench.which import ranked_runs

__all__ = ["Recommendation", "Evidence", "BEGIN", "END", "TABLE", "load_recommendations",
           "load_records", "evidence", "check_evidence", "recommendations_section",
           "recommendation_block", "sync_blocks"]

#: the table's file name in the results folder
TABLE = "recommendations.json"
BEGIN = "<!-- recommendations: generated from docs/results/recommendations.json -->"
END = "<!-- end of the generated recommendations -->"
#: the files that carry a generated block, relative to the repository root, and their style
BLOCKS = {"README.md": "readme", "docs/guide/choosing.md": "guide"}


@dataclass(frozen=True)
class Recommendation:
    """One problem family's recommendation.

    Attributes:
        family: short identifier (``"quadratic-trace"``).
        problem: the problem family in words, one line.
        solver: the recommended solver as users call it (``"HyperbolicEig"``,
            ``"pymanopt ConjugateGradient"``).
        bench_names: the names its runs carry in the benchmark records.
        builtin: ``"pymanopt"`` or ``"geoopt"`` when the solver is that library's own, else
            ``None``.
        use: when to use it, one line.
        evidence: ``(records file, experiment)`` pairs that decide the family.
    """

    family: str
    problem: str
    solver: str
    bench_names: tuple[str, ...]
    builtin: str | None
    use: str
    evidence: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Evidence:
    """What one experiment's records say: leaders (most datasets won), datasets won by the
    recommendation, and per dataset ``(dataset, winner, runner-up, comparison)``."""

    records: str
    experiment: str
    leaders: tuple[str, ...]
    won: int
    datasets: int
    rows: tuple[tuple[str, str, str, str], ...]


def load_recommendations(results_dir: str | Path) -> list[Recommendation]:
    """The recommendations in ``results_dir/recommendations.json``.

    Raises:
        ValueError: an entry lacks a field, or names a builtin other than pymanopt or geoopt.
    """
    path = Path(results_dir) / TABLE
    entries = json.loads(path.read_text(encoding="utf-8"))["families"]
    out = []
    for k, entry in enumerate(entries):
        missing = {"family", "problem", "solver", "bench_names", "builtin", "use",
                   "evidence"} - set(entry)
        if missing:
            raise ValueError(f"{path}: entry {k} lacks {sorted(missing)}")
        if entry["builtin"] not in (None, "pymanopt", "geoopt"):
            raise ValueError(f"{path}: entry {k}: builtin must be null, 'pymanopt' or "
                             f"'geoopt', got {entry['builtin']!r}")
        out.append(Recommendation(entry["family"], entry["problem"], entry["solver"],
                                  tuple(entry["bench_names"]), entry["builtin"], entry["use"],
                                  tuple((e["records"], e["experiment"])
                                        for e in entry["evidence"])))
    return out


def load_records(path: str | Path) -> list[dict]:
    """Benchmark records from a ``.jsonl`` file (one record a line) or a ``.json`` file with a
    ``records`` list."""
    from orthoplug.bench.runner import read_records

    path = Path(path)
    if path.suffix == ".jsonl":
        return read_records(path)
    return json.loads(path.read_text(encoding="utf-8"))["records"]


def _compare(first: tuple, second: tuple) -> str:
    """The winner against the runner-up on one dataset (two entries of
    :func:`~orthoplug.bench.which.ranked_runs`), in words."""
    (_, value_a, label_a, a), (_, value_b, label_b, b) = first, second
    if a["time_to_target"] is not None:
        if b["time_to_target"] is not None:
            ratio = b["time_to_target"] / max(a["time_to_target"], 1e-9)
            return (f"{ratio:.3g}× faster to gap {a['target_gap']:.0e} "
                    f"({a['time_to_target']:.3g} s vs {b['time_to_target']:.3g} s)")
        return (f"{a['time_to_target']:.3g} s to gap {a['target_gap']:.0e}; the runner-up "
                f"ended at gap {b['gap']:.1e} after {b['time']:.3g} s")
    if a["gap"] is not None and b["gap"] is not None:
        return f"gap {a['gap']:.1e} vs {b['gap']:.1e}"
    scale = max(abs(value_a), abs(value_b), 1e-300)
    return f"{label_a} vs {label_b} (relative difference {abs(value_a - value_b) / scale:.1e})"


def evidence(rec: Recommendation, results_dir: str | Path) -> list[Evidence]:
    """The measured evidence of ``rec``: per named experiment, its leaders and per dataset the
    winner, the runner-up and their comparison."""
    out = []
    cache: dict[str, list[dict]] = {}
    for file, experiment in rec.evidence:
        if file not in cache:
            cache[file] = load_records(Path(results_dir) / file)
        records = cache[file]
        ranking = ranked_runs(records, experiment)
        if not ranking:
            raise ValueError(f"{rec.family}: no ranked runs of {experiment!r} in {file}")
        wins = Counter(runs[0][0] for runs in ranking.values())
        top = max(wins.values())
        rows = []
        for dataset, runs in ranking.items():
            winner = runs[0][0]
            if len(runs) > 1:
                rows.append((dataset, winner, runs[1][0], _compare(runs[0], runs[1])))
            else:
                rows.append((dataset, winner, "–", "no other feasible run"))
        out.append(Evidence(file, experiment,
                            tuple(sorted(s for s, c in wins.items() if c == top)),
                            sum(c for s, c in wins.items() if s in rec.bench_names),
                            len(ranking), tuple(rows)))
    return out


def check_evidence(recs: list[Recommendation], results_dir: str | Path) -> list[str]:
    """Problems with the table: a recommendation that does not lead an experiment named as its
    evidence (empty list: every recommendation is the measured winner)."""
    problems = []
    for rec in recs:
        for ev in evidence(rec, results_dir):
            if not set(ev.leaders) & set(rec.bench_names):
                problems.append(f"{rec.family}: {rec.solver} does not lead {ev.experiment} in "
                                f"{ev.records} (leaders: {', '.join(ev.leaders)})")
    return problems


def _who(rec: Recommendation) -> str:
    return f"`{rec.solver}`" + (f" (built-in: {rec.builtin})" if rec.builtin else "")


def recommendations_section(recs: list[Recommendation], results_dir: str | Path) -> str:
    """The which-solver page's "Recommendations" section: the table, then per family the
    measured winner, runner-up and ratio on every dataset of its evidence."""
    lines = ["## Recommendations", "",
             f"From `docs/results/{TABLE}`, the one table the README and the guide "
             "({doc}`../guide/choosing`) render too. Each recommendation is the solver that won "
             "most datasets of the experiments named as its evidence; the figures below are "
             "recomputed from those records.", "",
             "| problem family | recommended | when | evidence: datasets won |",
             "|---|---|---|---|"]
    details = []
    for rec in recs:
        evs = evidence(rec, results_dir)
        won = "; ".join(f"`{ev.experiment}` {ev.won} of {ev.datasets}" for ev in evs)
        lines.append(f"| {rec.problem} | {_who(rec)} | {rec.use} | {won} |")
        details += [f"### {rec.problem}", "",
                    "| records | experiment | dataset | winner | runner-up | comparison |",
                    "|---|---|---|---|---|---|"]
        details += [f"| `{ev.records}` | `{ev.experiment}` | {dataset} | {winner} | {second} | "
                    f"{how} |" for ev in evs for dataset, winner, second, how in ev.rows]
        details.append("")
    return "\n".join([*lines, "", *details])


def recommendation_block(recs: list[Recommendation], style: str) -> str:
    """The generated block of ``README.md`` (``"readme"``: one line per family) or of the guide
    (``"guide"``: a table linking the page), markers included.

    Raises:
        ValueError: an unknown style.
    """
    if style == "readme":
        body = [f"- **{rec.problem}**: {_who(rec)} — {rec.use}" for rec in recs]
        body += ["", "Measured evidence (winner, runner-up and ratio per dataset): the "
                 "\"which solver when\" page built from `docs/results/`."]
    elif style == "guide":
        body = ["| problem family | recommended | when |", "|---|---|---|"]
        body += [f"| {rec.problem} | {_who(rec)} | {rec.use} |" for rec in recs]
        body += ["", "The evidence behind each line (winner, runner-up and their ratio on "
                 "every dataset) is on {doc}`../_generated/which_solver`."]
    else:
        raise ValueError(f"style must be 'readme' or 'guide', got {style!r}")
    return "\n".join([BEGIN, *body, END])


def _replace_block(text: str, block: str, name: str) -> str:
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{name}: no block between {BEGIN!r} and {END!r}")
    return text[:start] + block + text[end + len(END):]


def sync_blocks(root: str | Path, *, write: bool = False) -> list[str]:
    """Compare (``write=False``) or rewrite (``write=True``) the generated blocks of the README
    and the guide with the table in ``root/docs/results``.

    Returns:
        The files whose block differs from the table (before rewriting them).
    """
    root = Path(root)
    recs = load_recommendations(root / "docs" / "results")
    stale = []
    for name, style in BLOCKS.items():
        path = root / name
        text = path.read_text(encoding="utf-8")
        new = _replace_block(text, recommendation_block(recs, style), name)
        if new != text:
            stale.append(name)
            if write:
                path.write_text(new, encoding="utf-8")
    return stale
