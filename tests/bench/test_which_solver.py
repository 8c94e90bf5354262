"""The "which solver when" page: rankings from records, and the page the docs build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orthoplug.bench import report
from orthoplug.bench.core import Record
from orthoplug.bench.which import rank_runs, which_solver, write_which_solver_page

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def _rec(experiment, dataset, solver, objective, **kw):
    fields = dict(suite="s", experiment=experiment, dataset=dataset, sizes={"n": 4},
                  solver=solver, family="f", options={}, seed=0, scale="quick", time_limit=1.0,
                  status="ok", objective=objective, violation=0.0, feasible=True)
    fields.update(kw)
    return Record(**fields).to_json()


def test_certified_ranking_reached_target_first_then_gap():
    recs = [_rec("hevp", "d", "slow-reach", 1.0, optimum=1.0, gap=1e-9, target_gap=1e-6,
                 time_to_target=5.0),
            _rec("hevp", "d", "fast-reach", 1.0, optimum=1.0, gap=1e-7, target_gap=1e-6,
                 time_to_target=0.5),
            _rec("hevp", "d", "close", 1.0 + 2e-6, optimum=1.0, gap=2e-6, target_gap=1e-6),
            _rec("hevp", "d", "far", 2.0, optimum=1.0, gap=1.0, target_gap=1e-6),
            # lowest gap of all but infeasible, and a failed run: both excluded
            _rec("hevp", "d", "infeasible", 1.0, optimum=1.0, gap=0.0, target_gap=1e-6,
                 time_to_target=0.1, violation=1.0, feasible=False),
            _rec("hevp", "d", "crashed", None, optimum=1.0, status="error")]
    ranking = rank_runs(recs, "hevp")["d"]
    assert [s for s, _, _ in ranking] == ["fast-reach", "slow-reach", "close", "far"]
    assert ranking[0][2] == "0.5 s to gap 1e-06"


def test_criteria_objective_metric_unbounded_and_best_of_repeats():
    recs = [_rec("l1-spca", "d", "A", -0.1), _rec("l1-spca", "d", "B", -0.3),
            _rec("l1-spca", "d", "A", -0.5, seed=1),  # A's better seed counts, A listed once
            _rec("ultrae", "d", "A", 0.1, metrics={"mrr": 0.2}),
            _rec("ultrae", "d", "B", 0.9, metrics={"mrr": 0.6}),  # higher MRR wins
            _rec("hevp-paper", "d", "A", -1e30)]
    assert [(s, v) for s, v, _ in rank_runs(recs, "l1-spca")["d"]] == [("A", -0.5), ("B", -0.3)]
    assert [s for s, _, _ in rank_runs(recs, "ultrae")["d"]] == ["B", "A"]
    assert rank_runs(recs, "hevp-paper") == {}
    page = which_solver(recs, command="orthoplug-bench --suite quick")
    assert "orthoplug-bench --suite quick" in page
    assert "| `l1-spca` | s | A | 1 of 1 |" in page
    assert "| `ultrae` | s | B | 1 of 1 |" in page
    assert "unbounded below" in page
    with pytest.raises(ValueError, match="no records"):
        which_solver([])


def test_report_writes_the_page_with_the_run_command(tmp_path):
    pytest.importorskip("matplotlib")
    recs = [_rec("l0-spca", "d", "OBCD", -1.0), _rec("l0-spca", "d", "ManPG", 2.0)]
    (tmp_path / "run.json").write_text(json.dumps({"argv": ["orthoplug-bench", "--suite",
                                                            "obcd"]}))
    report.render(tmp_path, records=recs)
    page = (tmp_path / "which-solver.md").read_text()
    assert "orthoplug-bench --suite obcd" in page
    assert "| d | **OBCD**: objective -1 | ManPG: objective 2 | – |" in page


def test_docs_page_from_the_committed_measurements(tmp_path):
    page = write_which_solver_page(RESULTS, tmp_path / "which.md").read_text()
    records = [json.loads(line) for line in
               (RESULTS / "paper-run.jsonl").read_text().splitlines()]
    assert f"**Records:** {len(records)} runs" in page
    # the reading of these measurements, recomputed from the records
    assert "| `hevp-tracemin` | jobcd | pymanopt-TR | 2 of 3 |" in page
    assert "| `l1-spca` | obcd | ManPG | 3 of 4 |" in page
    assert "| `nn-pca` | obcd | OBCD | 10 of 15 |" in page
    assert "| 1e-02 | RSDM-P | 10.8 | pymanopt-CG | 23.2 |" in page  # RSDM-P to low accuracy
    assert "| 1e-06 | pymanopt-CG | 604.4 | – | – |" in page


def test_ties_go_to_the_solver_that_reached_the_value_first():
    hist = {"slow": ([0.1, 2.0], [0.5, -1.0]), "fast": ([0.1, 0.5], [0.2, -1.0 + 1e-12])}
    recs = [_rec("dpcp", "d", name, f[-1], history={"time": t, "objective": f})
            for name, (t, f) in hist.items()]
    recs.append(_rec("dpcp", "d", "worse", -0.9))
    ranking = rank_runs(recs, "dpcp")["d"]
    assert [s for s, _, _ in ranking] == ["fast", "slow", "worse"]
    assert ranking[0][2] == "objective -1 (tie; reached at 0.5 s)"
    assert ranking[2][2] == "objective -0.9"
    # one solver alone at the top (two seeds of it) is no tie
    alone = rank_runs([recs[0], _rec("dpcp", "d", "slow", -1.0, seed=1), recs[2]], "dpcp")["d"]
    assert [label for _, _, label in alone] == ["objective -1", "objective -0.9"]


def test_page_sections_nest_under_a_title():
    page = which_solver([_rec("l1-spca", "d", "A", -0.1)], title="Quick run")
    assert page.startswith("## Quick run\n") and "### Summary" in page
    assert "#### `l1-spca` (s)" in page and "# Which solver when" not in page
