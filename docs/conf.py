"""Sphinx configuration of the orthoplug documentation.

Build with ``python -m sphinx -W -b html docs <out>`` after ``pip install -e ".[docs]"``. The
gallery executes ``examples/`` at the tiny sizes that ``tests/docs/test_examples.py`` uses, and the
"which solver when" page is generated from the measured records in ``docs/results/``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS))

import gallery_config  # noqa: E402
import torch  # noqa: E402

import orthoplug  # noqa: E402

project = "orthoplug"
author = "the orthoplug authors"
copyright = "the orthoplug authors"  # noqa: A001
release = version = orthoplug.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "results/*.md", "auto_examples/*.ipynb",
                    "auto_examples/*.py", "auto_examples/*.zip", "auto_examples/*.json"]
root_doc = "index"
html_theme = "furo"
html_title = f"orthoplug {release}"
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3
# results.md links to files outside docs/ (benchmarks/, JSON) and may skip heading levels
suppress_warnings = ["myst.xref_missing", "myst.header"]

# ---- autodoc / napoleon: one docstring style (Google) ---------------------------------------
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"
autodoc_inherit_docstrings = True  # an override without a docstring shows its base's
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_mock_imports: list[str] = []
nitpicky = False


# ---- gallery: examples/ executed at tiny sizes (see gallery_config.py) -----------------------
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": gallery_config.filename_pattern(),
    "reset_argv": "gallery_config.tiny_argv",
    "download_all_examples": False,
    "plot_gallery": "True",
    "within_subsection_order": "FileNameSortKey",
    "show_signature": False,
    "show_memory": False,
}
os.environ.setdefault("MPLBACKEND", "Agg")
# The examples run in this process at tiny sizes, single-threaded as in tests/docs/test_examples.py:
# with matrices this small, thread start-up dominates on a loaded machine.
torch.set_num_threads(1)


# ---- generated page: which solver when --------------------------------------------------------
def _which_solver(app) -> None:
    """Regenerate ``_generated/which_solver.md`` from ``results/`` before reading sources."""
    from orthoplug.bench.which import write_which_solver_page

    write_which_solver_page(DOCS / "results", DOCS / "_generated" / "which_solver.md")


def setup(app):
    app.connect("builder-inited", _which_solver)
