"""Every script in ``examples/`` runs at a tiny size and passes its own check.

Each example is imported from its path and ``main(TINY_ARGS[name])`` is called in-process
(``examples/tiny.json`` holds the arguments and the expected output line). Most
examples return an exit code (0 = their check against a closed form, certificate or baseline
passed); the older ``obcd_sparse_pca.py`` and ``rssm_dpcp.py`` return a dict of results, checked
here. A new example needs an entry in ``TINY_ARGS`` (``test_every_example_has_tiny_args``).
Single-threaded torch: the examples' small matrices are dominated by thread start-up on a loaded
machine.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

#: argv of each example at a size that runs in a few seconds, and a line its output must contain
#: (besides a zero exit code); the same file drives the install check of ``.ci/check_install.sh``.
TINY = json.loads((EXAMPLES / "tiny.json").read_text(encoding="utf-8"))
TINY_ARGS: dict[str, list[str]] = {name: entry["args"] for name, entry in TINY.items()}
EXPECTED_OUTPUT: dict[str, str] = {name: entry["expect"] for name, entry in TINY.items()}


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{Path(name).stem}", EXAMPLES / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check_result(name: str, result) -> None:
    """Exit code 0, or for the dict-returning examples the quality of what they return."""
    if name == "obcd_sparse_pca.py":
        assert set(result) == {"l1", "l0"}
        for res in result.values():
            assert res.violation <= 1e-12 and math.isfinite(res.cost)
            assert res.info["f"] + res.info["h"] == pytest.approx(res.cost)
    elif name == "rssm_dpcp.py":
        assert math.isfinite(result["cost"]) and 0.0 <= result["rssm_angle"] < 1.0
    else:
        assert result == 0


def test_every_example_has_tiny_args():
    files = {path.name for path in EXAMPLES.glob("*.py")}
    assert files - TINY_ARGS.keys() == set(), "add the new example to TINY_ARGS"
    assert TINY_ARGS.keys() - files == set(), "TINY_ARGS names a file that does not exist"
    assert EXPECTED_OUTPUT.keys() == TINY_ARGS.keys()


@pytest.mark.parametrize("name", sorted(TINY_ARGS))
def test_example_runs_at_tiny_size(name, capsys):
    pytest.importorskip("sklearn")  # digits data in several examples (the test extra has it)
    module = _load(name)
    assert module.__doc__ and "python examples/" in module.__doc__  # how to run it
    result = module.main(TINY_ARGS[name])
    out = capsys.readouterr().out
    _check_result(name, result)
    assert EXPECTED_OUTPUT[name] in out, out
