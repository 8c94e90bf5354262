"""Gallery settings shared by ``conf.py``: which examples run at build time, and with what argv.

Sphinx caches its configuration by pickling it, so the gallery's ``reset_argv`` is named here as
``"gallery_config.tiny_argv"`` rather than passed as a function defined in ``conf.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Examples executed at build time; each draws its convergence plot when given ``--plot``.
EXECUTED = ("rsdm_pca.py", "obcd_sparse_pca.py", "procrustes.py", "nonnegative_pca.py")


def tiny_args() -> dict[str, list[str]]:
    """The tiny argv of each example, from ``examples/tiny.json`` (the one source of the small
    sizes: the tests and the install check read it too)."""
    entries = json.loads((ROOT / "examples" / "tiny.json").read_text(encoding="utf-8"))
    return {name: entry["args"] for name, entry in entries.items()}


def tiny_argv(gallery_conf, script_vars) -> list[str]:
    """sphinx-gallery ``reset_argv``: the example's tiny arguments plus ``--plot``."""
    name = Path(script_vars["src_file"]).name
    return [*tiny_args()[name], "--plot"]


def filename_pattern() -> str:
    """Regular expression matching the executed examples' paths."""
    return "/(" + "|".join(name.replace(".", r"\.") for name in EXECUTED) + ")$"
