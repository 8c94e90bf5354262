"""Gallery settings shared by ``conf.py``: which examples run at build time, and with what argv.

Sphinx caches its configuration by pickling it, so the gallery's ``reset_argv`` is named here as
``"gallery_config.tiny_argv"`` rather than passed as a function defined in ``conf.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Examples executed at build time; each draws its convergence plot when given ``--plot``.
EXECUTED = ("rsdm_pca.py", "obcd_sparse_pca.py", "procrustes.py", "nonnegative_pca.py")


def tiny_args() -> dict[str, list[str]]:
    """``TINY_ARGS`` of ``tests/test_examples.py`` (one source for the small sizes).

    The file is parsed, not imported, so building the docs does not need pytest.
    """
    tree = ast.parse((ROOT / "tests" / "test_examples.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "TINY_ARGS":
            return ast.literal_eval(node.value)
    raise RuntimeError("tests/test_examples.py defines no TINY_ARGS")


def tiny_argv(gallery_conf, script_vars) -> list[str]:
    """sphinx-gallery ``reset_argv``: the example's tiny arguments plus ``--plot``."""
    name = Path(script_vars["src_file"]).name
    return [*tiny_args()[name], "--plot"]


def filename_pattern() -> str:
    """Regular expression matching the executed examples' paths."""
    return "/(" + "|".join(name.replace(".", r"\.") for name in EXECUTED) + ")$"
