"""Every script in ``examples/`` runs at a tiny size and passes its own check.

Each example is imported from its path and ``main(TINY_ARGS[name])`` is called in-process. Most
examples return an exit code (0 = their check against a closed form, certificate or baseline
passed); the older ``obcd_sparse_pca.py`` and ``rssm_dpcp.py`` return a dict of results, checked
here. A new example needs an entry in ``TINY_ARGS`` (``test_every_example_has_tiny_args``).
Single-threaded torch: the examples' small matrices are dominated by thread start-up on a loaded
machine.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

#: argv of each example at a size that runs in a few seconds.
TINY_ARGS: dict[str, list[str]] = {
    "distributed_ultrae.py": ["--dataset", "synthetic", "--epochs", "2", "--dim", "8", "--p",
                              "4", "--negatives", "10", "--synthetic-entities", "20"],
    "hevp_certificate.py": ["--n", "6", "--geoopt-steps", "300"],
    "hspp_probe.py": ["--m", "30", "--n", "4", "--steps", "5"],
    "nonnegative_pca.py": ["--data", "gaussian", "--m", "60", "--n", "20", "--r", "3",
                           "--iterations", "300"],
    "obcd_sparse_pca.py": ["--r", "2", "--iterations", "300"],
    "orthogonal_mlp.py": ["--epochs", "1", "--hidden", "64", "--layers", "1", "--r", "16",
                          "--min-accuracy", "0.5"],
    "procrustes.py": ["--n", "30", "--p", "4", "--r", "10", "--iterations", "2000"],
    "qap.py": ["--n", "12", "--r", "6", "--iterations", "300"],
    "rsdm_pca.py": ["--n", "40", "--p", "4", "--r", "12", "--iterations", "800"],
    "rssm_dpcp.py": ["--n", "12", "--d", "8", "--inliers", "60", "--iterations", "300"],
    "ultrae_kg.py": ["--dataset", "synthetic", "--epochs", "2", "--dim", "8", "--p", "4",
                     "--negatives", "10", "--synthetic-entities", "20"],
}

#: A line every example prints with its check (besides a zero exit code).
EXPECTED_OUTPUT = {
    "distributed_ultrae.py": "replicas identical",
    "hevp_certificate.py": "largest pymanopt certificate gap",
    "hspp_probe.py": "RiemannianAdam",
    "nonnegative_pca.py": "PCA bound",
    "obcd_sparse_pca.py": "nonzeros",
    "orthogonal_mlp.py": "RiemannianSGD",
    "procrustes.py": "largest relative gap",
    "qap.py": "optimum −‖B‖²_F",
    "rsdm_pca.py": "relative gap",
    "rssm_dpcp.py": "principal angle",
    "ultrae_kg.py": "RiemannianAdam",
}


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
