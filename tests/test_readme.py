"""The README's quickstarts run, and .ci/run executes the README's test command verbatim."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
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


def test_main_job_example_runs_small():
    import importlib.util

    spec = importlib.util.spec_from_file_location("hevp_example",
                                                  ROOT / "examples" / "hevp_certificate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--n", "8", "--seed", "3"]) == 0
