"""Documentation: every public callable has a Google-style docstring, and the site builds with -W.

Public API: every module of ``orthoplug`` and ``orthoplug.adapters`` whose dotted path has no
component starting with ``_``, and in it the names of ``__all__`` (or, without ``__all__``, the
classes and functions defined there whose names do not start with ``_``). For a public class,
its own public methods and properties count too. An override without a docstring of its own is
accepted when a base class (ours, pymanopt's, geoopt's or torch's) documents the same name:
autodoc shows the base's docstring for it (``autodoc_inherit_docstrings``).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import orthoplug
import orthoplug.adapters

ROOT = Path(__file__).resolve().parents[2]

#: numpydoc section headers ("Parameters" underlined with dashes): the style we do not use.
NUMPYDOC_SECTION = re.compile(
    r"^\s*(Parameters|Returns|Raises|Yields|Attributes|Examples|Notes|See Also)\n\s*-{3,}\s*$",
    re.MULTILINE)


def public_modules() -> list[str]:
    names = []
    for package in (orthoplug, orthoplug.adapters):
        names.append(package.__name__)
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not any(part.startswith("_") for part in info.name.split(".")):
                names.append(info.name)
    return names


def public_objects(module_name: str) -> dict[str, object]:
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, obj in vars(module).items() if not n.startswith("_")
                 and (inspect.isclass(obj) or inspect.isfunction(obj))
                 and obj.__module__ == module_name]
    return {name: getattr(module, name) for name in names}


def _own_members(cls: type):
    for name, attr in vars(cls).items():
        if name.startswith("_"):
            continue
        func = attr.__func__ if isinstance(attr, staticmethod | classmethod) else attr
        func = func.fget if isinstance(func, property) else func
        if inspect.isfunction(func):
            yield name, func


def _documented_in_base(cls: type, name: str) -> bool:
    for base in cls.__mro__[1:]:
        attr = vars(base).get(name)
        if attr is not None and inspect.getdoc(attr):
            return True
    return False


def missing_docstrings() -> list[str]:
    missing = []
    for module_name in public_modules():
        module = importlib.import_module(module_name)
        if not inspect.getdoc(module):
            missing.append(module_name)
        for name, obj in public_objects(module_name).items():
            obj = getattr(obj, "py_func", obj)  # a numba kernel: its Python function
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue  # constants are documented in the module docstring
            if not (obj.__doc__ and obj.__doc__.strip()):
                missing.append(f"{module_name}.{name}")
            if inspect.isclass(obj):
                for member, func in _own_members(obj):
                    if not (func.__doc__ and func.__doc__.strip()) and \
                            not _documented_in_base(obj, member):
                        missing.append(f"{module_name}.{name}.{member}")
    return missing


def test_the_walk_sees_the_whole_public_api():
    modules = public_modules()
    for expected in ("orthoplug.adapters.pymanopt", "orthoplug.adapters.geoopt",
                     "orthoplug.solvers.jobcd", "orthoplug.nonsmooth", "orthoplug.registry"):
        assert expected in modules
    assert not any("._" in m for m in modules)
    front_ends = public_objects("orthoplug.adapters.geoopt")
    assert {"JOrthogonal", "GSJOBCD", "OBCD", "RSDM", "RSSM", "StiefelBlock"} <= set(front_ends)


def test_every_public_callable_has_a_docstring():
    missing = missing_docstrings()
    assert not missing, f"{len(missing)} public callables without a docstring:\n" + \
        "\n".join(missing)


def test_every_public_module_with_members_has_an_api_page():
    pages = "\n".join(path.read_text(encoding="utf-8")
                      for path in (ROOT / "docs" / "api").glob("*.rst"))
    documented = set(re.findall(r"^\.\. automodule:: (\S+)", pages, re.MULTILINE))
    documented |= {m.rpartition(".")[0]
                   for m in re.findall(r"^\.\. autoclass:: (\S+)", pages, re.MULTILINE)}
    missing = [m for m in public_modules() if public_objects(m) and m not in documented]
    assert not missing, f"public modules without an API page (add them to docs/api/): {missing}"


def test_one_docstring_style_google():
    numpydoc = []
    for module_name in public_modules():
        module = importlib.import_module(module_name)
        source = inspect.getsource(module)
        if NUMPYDOC_SECTION.search(source):
            numpydoc.append(module_name)
    assert not numpydoc, f"numpydoc sections (use Google style 'Args:'): {numpydoc}"


def test_the_style_check_catches_numpydoc():
    assert NUMPYDOC_SECTION.search('"""Sum.\n\n    Parameters\n    ----------\n    x : int\n"""')
    assert not NUMPYDOC_SECTION.search('"""Sum.\n\n    Args:\n        x: an int.\n"""')


def test_every_example_starts_with_a_gallery_title():
    """sphinx-gallery needs an rST title: the docstring's first line, underlined with '='."""
    untitled = []
    for path in sorted((ROOT / "examples").glob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False) or ""
        title, _, rest = doc.partition("\n")
        underline = rest.partition("\n")[0]
        if not title.strip() or underline != "=" * len(title):
            untitled.append(path.name)
    assert not untitled, f"examples without a title line underlined by '=': {untitled}"


def test_docs_build_with_warnings_as_errors(tmp_path):
    """The README's docs command: ``python -m sphinx -W -b html docs <out>``."""
    pytest.importorskip("sphinx")
    pytest.importorskip("sphinx_gallery")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b",
                           "html", "-d", str(tmp_path / "doctrees"), str(ROOT / "docs"),
                           str(tmp_path / "html")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    html = tmp_path / "html"
    for page in ("api/manifolds.html", "api/solvers.html", "api/oracles.html",
                 "api/nonsmooth.html", "api/registry.html", "_generated/which_solver.html",
                 "results.html"):
        assert (html / page).exists(), page
    anchors = "\n".join(path.read_text(encoding="utf-8") for path in html.rglob("*.html"))
    undocumented = [f"{m}.{name}" for m in public_modules()
                    for name, obj in public_objects(m).items()
                    if inspect.isclass(obj) and f'id="{m}.{name}"' not in anchors]
    assert not undocumented, f"public classes without an API entry: {undocumented}"
    executed = sorted((html / "_images").glob("sphx_glr_*_001.png"))
    assert len(executed) >= 3, executed  # convergence plots of the executed gallery examples
