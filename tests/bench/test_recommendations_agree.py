"""The README, the guide and the which-solver page recommend the same solver for every problem
family, all three from ``docs/results/recommendations.json``, and every recommendation is the
measured winner of the experiments named as its evidence."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orthoplug.bench import recommendations as rc
from orthoplug.bench.which import write_which_solver_page

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
README_LINE = re.compile(r"^- \*\*(.+?)\*\*: `([^`]+)`", re.MULTILINE)
TABLE_ROW = re.compile(r"^\| (.+?) \| `([^`]+)`", re.MULTILINE)
#: words of a measured claim: they belong in the generated lines, not in the README's class table
CLAIMS = ("fastest", "faster", "slower", "one to beat", "lowest", "best", "wins")


def _block(text: str) -> str:
    start, end = text.index(rc.BEGIN), text.index(rc.END)
    return text[start:end]


def _section(page: str) -> str:
    return page.split("## Recommendations", 1)[1].split("\n###", 1)[0]


def claims(readme: str, guide: str, page: str) -> dict[str, dict[str, str]]:
    """problem family → solver, as each of the three texts states it (parsed, not generated)."""
    return {"README": dict(README_LINE.findall(_block(readme))),
            "guide": dict(TABLE_ROW.findall(_block(guide))),
            "page": dict(TABLE_ROW.findall(_section(page)))}


def disagreements(found: dict[str, dict[str, str]],
                  table: list[rc.Recommendation]) -> list[str]:
    expected = {rec.problem: rec.solver for rec in table}
    return [f"{where}: {family!r} → {got.get(family)!r}, table says {solver!r}"
            for where, got in found.items() for family, solver in expected.items()
            if got.get(family) != solver] + \
           [f"{where}: {family!r} is not in the table" for where, got in found.items()
            for family in set(got) - set(expected)]


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    page = write_which_solver_page(RESULTS, tmp_path_factory.mktemp("page") / "which.md")
    return ((ROOT / "README.md").read_text(encoding="utf-8"),
            (ROOT / "docs" / "guide" / "choosing.md").read_text(encoding="utf-8"),
            page.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def table():
    return rc.load_recommendations(RESULTS)


def test_readme_guide_and_page_recommend_the_same_solvers(texts, table):
    found = claims(*texts)
    assert disagreements(found, table) == []
    assert len(found["README"]) == len(table) >= 8


def test_a_changed_recommendation_is_caught(texts, table):
    readme, guide, page = texts
    rec = table[0]
    line = f"**{rec.problem}**: `{rec.solver}`"
    assert line in readme
    found = claims(readme.replace(line, f"**{rec.problem}**: `pymanopt TrustRegions`"),
                   guide, page)
    assert disagreements(found, table) == [
        f"README: {rec.problem!r} → 'pymanopt TrustRegions', table says {rec.solver!r}"]


def test_generated_blocks_are_current():
    assert rc.sync_blocks(ROOT) == [], \
        "run `orthoplug-bench recommendations --write` after editing the table"


def test_every_recommendation_is_the_measured_winner(table):
    assert rc.check_evidence(table, RESULTS) == []
    for rec in table:
        for ev in rc.evidence(rec, RESULTS):
            assert ev.won >= 1 and ev.won * 2 >= ev.datasets, (rec.family, ev.experiment)


def test_builtin_winners_are_named_and_hyperbolic_eig_leads_quadratics(texts, table):
    readme, guide, page = texts
    builtins = [rec for rec in table if rec.builtin]
    assert builtins, "the measurements have built-in winners: the table must name them"
    for rec in builtins:
        assert rec.solver.startswith(rec.builtin)
        for text in (_block(readme), _block(guide), _section(page)):
            assert f"`{rec.solver}` (built-in: {rec.builtin})" in text
    quadratic = [rec for rec in table if rec.family.startswith("quadratic")]
    assert quadratic and all(rec.solver == "HyperbolicEig" for rec in quadratic)
    for text in (_block(readme), _block(guide)):
        assert "`HyperbolicEig`" in text


def test_readme_class_table_makes_no_measured_claims(texts):
    readme = texts[0]
    table = readme.split("## What is in the package", 1)[1].split("###", 1)[0]
    when = [row.rsplit("|", 2)[-2] for row in table.splitlines() if row.startswith("| `")]
    assert len(when) >= 10
    bad = [cell for cell in when for word in CLAIMS if word in cell.lower()]
    assert bad == [], "measured claims go in the generated recommendations"


def test_bad_table_entries_are_refused(tmp_path):
    (tmp_path / rc.TABLE).write_text('{"families": [{"family": "x"}]}')
    with pytest.raises(ValueError, match="lacks"):
        rc.load_recommendations(tmp_path)
    with pytest.raises(ValueError, match="style"):
        rc.recommendation_block([], "html")


def test_cli_checks_and_rewrites_the_blocks(tmp_path, table):
    from orthoplug.bench import cli

    for name in ("README.md", "docs/guide/choosing.md", *(f"docs/results/{f}" for f in
                 {rc.TABLE, *(file for rec in table for file, _ in rec.evidence)})):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((ROOT / name).read_text(encoding="utf-8"),
                                     encoding="utf-8")
    assert cli.main(["recommendations", "--root", str(tmp_path)]) == 0
    guide = tmp_path / "docs" / "guide" / "choosing.md"
    row = f"| {table[0].problem} | `{table[0].solver}`"
    guide.write_text(guide.read_text(encoding="utf-8").replace(
        row, f"| {table[0].problem} | `GSJOBCD`"), encoding="utf-8")
    assert cli.main(["recommendations", "--root", str(tmp_path)]) == 1
    assert cli.main(["recommendations", "--root", str(tmp_path), "--write"]) == 0
    assert guide.read_text(encoding="utf-8") == \
        (ROOT / "docs" / "guide" / "choosing.md").read_text(encoding="utf-8")
