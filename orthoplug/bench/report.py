"""Tables (Markdown) and convergence plots (PNG) from benchmark records.

Everything here reads the JSON records only, so ``orthoplug-bench report DIR`` re-renders a saved
run without re-running anything.

Aggregation: for each (experiment, dataset, solver, seed) the best option setting (lowest final
objective; a tuned grid therefore reports its best member, as the papers do) is kept; the table
then shows the mean over seeds (± the standard deviation when there are several).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path

__all__ = ["best_runs", "markdown_tables", "plot_experiments", "render"]


def best_runs(records: list[dict]) -> list[dict]:
    """One record per (experiment, dataset, solver, seed): the best option setting."""
    best: dict[tuple, dict] = {}
    for rec in records:
        key = (rec["experiment"], rec["dataset"], rec["solver"], rec["seed"])
        cur = best.get(key)
        if cur is None or _rank(rec) < _rank(cur):
            best[key] = rec
    return list(best.values())


def _rank(rec: dict) -> tuple:
    ok = rec["status"] != "error" and rec["objective"] is not None
    return (not ok, rec["objective"] if ok else math.inf)


def _fmt(x, spec: str = ".6g") -> str:
    if x is None:
        return "–"
    if isinstance(x, float) and not math.isfinite(x):
        return "–"
    return format(x, spec)


def _agg(values: list, spec: str) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "–"
    if len(vals) == 1:
        return _fmt(vals[0], spec)
    return f"{_fmt(statistics.fmean(vals), spec)} ± {_fmt(statistics.stdev(vals), '.1g')}"


def _group(records: list[dict]) -> dict[str, dict[str, dict[str, list[dict]]]]:
    """experiment → dataset → solver → records (insertion order kept)."""
    out: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for rec in records:
        out[rec["experiment"]][rec["dataset"]][rec["solver"]].append(rec)
    return out


def markdown_tables(records: list[dict]) -> str:
    """One Markdown table per experiment: rows (dataset, solver); bold: the best objective
    among feasible runs (and those within 1e-9 relative of it); then the data notes."""
    runs = best_runs(records)
    parts = []
    for exp, datasets in _group(runs).items():
        sample = next(iter(next(iter(datasets.values())).values()))[0]
        metrics = sorted({k for ds in datasets.values() for rs in ds.values()
                          for r in rs for k in r["metrics"]})
        certified = any(r["optimum"] is not None for ds in datasets.values()
                        for rs in ds.values() for r in rs)
        head = ["dataset", "solver", "objective"]
        head += ["gap", "time to target (s)"] if certified else []
        head += ["violation", *metrics, "iterations", "time (s)", "status"]
        lines = [f"### {exp} ({sample['suite']}, scale {sample['scale']})", "",
                 "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for dataset, solvers in datasets.items():
            finals = [statistics.fmean(v) for rs in solvers.values()
                      if (v := [r["objective"] for r in rs
                                if r["objective"] is not None and r["feasible"]])]
            best = min(finals) if finals else None
            sizes = ", ".join(f"{k}={v}" for k, v in
                              next(iter(solvers.values()))[0]["sizes"].items())
            for solver, rs in solvers.items():
                obj = _agg([r["objective"] for r in rs], ".8g")
                objs = [r["objective"] for r in rs if r["objective"] is not None]
                if objs and best is not None and all(r["feasible"] for r in rs) and \
                        statistics.fmean(objs) <= best + 1e-9 * max(abs(best), 1.0):
                    obj = f"**{obj}**"
                row = [f"{dataset} ({sizes})", solver, obj]
                if certified:
                    row += [_agg([r["gap"] for r in rs], ".2e"),
                            _agg([r["time_to_target"] for r in rs], ".3g")]
                row += [_agg([r["violation"] for r in rs], ".1e")]
                row += [_agg([r["metrics"].get(m) for r in rs], ".4g") for m in metrics]
                row += [_agg([r["iterations"] for r in rs], ".0f"),
                        _agg([r["time"] for r in rs], ".3g"),
                        ", ".join(sorted({r["status"] for r in rs}))]
                lines.append("| " + " | ".join(row) + " |")
        notes = {ds: next(iter(rs.values()))[0]["note"] for ds, rs in datasets.items()}
        lines += [f"\n- {ds}: {note}" for ds, note in notes.items() if note]
        errors = [r for ds in datasets.values() for rs in ds.values() for r in rs
                  if r["status"] == "error"]
        for r in errors:
            lines.append(f"\n- {r['dataset']} / {r['solver']}: {r['message']}")
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


_LEGEND_WIDTH = 2.2  # inches reserved for the legend of a convergence plot


def plot_experiments(records: list[dict], out_dir: str | Path) -> list[Path]:
    """One PNG per experiment, one panel per dataset: certified gap (log) or objective vs
    time, one curve per solver (seed with the median final objective)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for exp, datasets in _group(best_runs(records)).items():
        k = len(datasets)
        width = 4.2 * k + _LEGEND_WIDTH  # inches; the legend gets its own column on the right
        fig, axes = plt.subplots(1, k, figsize=(width, 3.4), squeeze=False)
        for ax, (dataset, solvers) in zip(axes[0], datasets.items(), strict=True):
            gap_mode = False
            for solver, rs in solvers.items():
                rs = sorted((r for r in rs if r["history"]["time"]),
                            key=lambda r: r["objective"] if r["objective"] is not None
                            else math.inf)
                if not rs:
                    continue
                rec = rs[len(rs) // 2]
                t, f = rec["history"]["time"], rec["history"]["objective"]
                pairs = [(a, b) for a, b in zip(t, f, strict=True) if b is not None]
                if not pairs:
                    continue
                t, f = zip(*pairs, strict=True)
                if rec["optimum"] is not None:
                    gap_mode = True
                    scale = max(abs(rec["optimum"]), 1e-300)
                    f = [max(abs(v - rec["optimum"]) / scale, 1e-16) for v in f]
                ax.plot(t, f, label=solver, lw=1.2)
            if gap_mode:
                ax.set_yscale("log")
            ax.set_xlabel("time (s)")
            ax.set_ylabel("relative gap" if gap_mode else "objective")
            ax.set_title(dataset, fontsize=9)
            ax.grid(alpha=0.3)
        handles, labels = axes[0][0].get_legend_handles_labels()
        if handles:
            fig.legend(handles, labels, loc="center right", fontsize=7, frameon=False)
        fig.suptitle(exp, fontsize=10)
        fig.tight_layout(rect=(0, 0, 1 - _LEGEND_WIDTH / width, 1))
        path = out_dir / f"{exp}.png"
        fig.savefig(path, dpi=80)
        plt.close(fig)
        paths.append(path)
    return paths


def render(out_dir: str | Path, records: list[dict] | None = None) -> Path:
    """Write ``tables.md``, ``which-solver.md`` and the PNGs into ``out_dir`` (from
    ``results.jsonl`` if no records are given); returns the tables' path."""
    from orthoplug.bench.runner import read_records
    from orthoplug.bench.which import run_command, which_solver

    out_dir = Path(out_dir)
    records = read_records(out_dir) if records is None else records
    if not records:
        raise ValueError(f"{out_dir}: no records to report")
    pngs = plot_experiments(records, out_dir)
    text = markdown_tables(records)
    text += "\n" + "\n".join(f"![{p.stem}]({p.name})" for p in pngs) + "\n"
    path = out_dir / "tables.md"
    path.write_text("# orthoplug-bench results\n\n" + text)
    (out_dir / "which-solver.md").write_text(
        which_solver(records, command=run_command(out_dir)), encoding="utf-8")
    return path
