"""The README's quickstarts run, and .ci/run executes the README's test command verbatim."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


@pytest.mark.parametrize("index", range(len(_blocks("python"))))
def test_readme_python_blocks_run(index):
    code = _blocks("python")[index]
    exec(compile(code, f"README.md python block {index}", "exec"), {"__name__": "readme"})


def test_ci_runs_the_readme_test_command():
    bash = _blocks("bash")
    assert len(bash) == 2, "README must show exactly two commands (main job, tests)"
    test_command = bash[1].strip()
    assert "pytest" in test_command
    assert test_command in (ROOT / ".ci" / "run").read_text()


def test_main_job_is_the_quick_benchmark():
    """The main job installs the bench extra and runs ``orthoplug-bench --suite quick``: the
    console script is declared and the quick plan (every experiment's data) builds."""
    import tomllib

    from orthoplug.bench import runner

    main_job = _blocks("bash")[0].strip()
    assert main_job.endswith('pip install -e ".[bench]" && orthoplug-bench --suite quick')
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["orthoplug-bench"] == "orthoplug.bench.cli:main"
    plan = runner.plan("quick", scale="quick")
    assert {exp.name for exp, _, _ in plan.items} == {
        "hevp-tracemin", "hevp-paper", "hspp", "ultrae", "l0-spca", "l1-spca", "nn-pca",
        "procrustes", "pca", "qap", "orthonet", "dpcp", "l1-spca-rssm", "quadratic-oj",
        "quadratic-sparse", "smooth-oj", "l1-spca-general", "pca-general", "procrustes-general",
        "dpcp-general"}
    assert all(instances for _, instances, _ in plan.items)
