"""One home for each piece of mathematics, checked on the source of ``orthoplug/`` and
``adapters/`` (AST, no imports):

(a) the shared pieces of the pair methods are defined once, in their home module: the pair batch
    size, the quadratic pair models (rows and columns) and their Kronecker curvature, the row and
    column updates, the pair queue;
(b) no attribute probes (``getattr`` with a default, ``hasattr``): an object's abilities are
    declared (a protocol of :mod:`orthoplug.oracles.abilities`, a class, an ``isinstance``), not
    guessed — except the short list :data:`PROBES_ALLOWED`, each with its reason;
(c) no private attribute of another module's object: ``<expr>._x`` where ``<expr>`` is not
    ``self``/``cls``/``super()`` and ``_x`` is not defined in the module itself (a ``def``,
    ``class``, an assignment to ``self._x``/``cls._x`` or a name bound there) — except
    :data:`PRIVATE_ALLOWED`, each with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(path for folder in ("orthoplug", "adapters")
                 for path in ROOT.joinpath(folder).rglob("*.py"))

#: name → the one module that defines it
HOMES = {
    "PAIR_BATCH": "orthoplug/solvers/pairs.py",
    "PairQueue": "orthoplug/solvers/pairs.py",
    "pair_model": "orthoplug/kernels/quadratic.py",
    "column_pair_model": "orthoplug/kernels/quadratic.py",
    "kron_curvature": "orthoplug/kernels/quadratic.py",
    "update_rows": "orthoplug/kernels/quadratic.py",
    "update_columns": "orthoplug/kernels/quadratic.py",
}

#: (module, the probed attribute) → why it is not a probe of one of our objects
PROBES_ALLOWED = {
    ("orthoplug/registry.py", "key"): "a third-party plugin's optional field (the entry-point "
                                      "format lets a plugin object leave out any key)",
}

#: (module, expression) → why the private attribute is read there
PRIVATE_ALLOWED = {
    ("orthoplug/bench/core.py", "problem._cost"): "pymanopt.Problem offers no public way to "
                                                  "wrap its cost (``cost`` is a read-only "
                                                  "property of ``_cost``); the recorder does",
    ("adapters/_torch.py", "p.grad._version"): "torch exposes a tensor's in-place version "
                                               "counter only as ``_version``; the closure check "
                                               "reads it to see whether backward wrote .grad",
    ("adapters/_geoopt_lbfgs.py", "p._version"): "the same counter on the parameters: the "
                                                 "cached loss and gradient of the last accepted "
                                                 "trial are reused only if no parameter was "
                                                 "written since",
}


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _trees():
    return [(_rel(p), ast.parse(p.read_text(encoding="utf-8"))) for p in SOURCES]


def _definitions(tree: ast.Module) -> set[str]:
    """Names a module defines: functions and classes (any depth), names bound at module or
    class level."""
    out = set()
    bodies = [tree.body] + [n.body for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
    for body in bodies:
        for stmt in body:
            targets = (stmt.targets if isinstance(stmt, ast.Assign) else
                       [stmt.target] if isinstance(stmt, ast.AnnAssign) else [])
            out.update(t.id for t in targets if isinstance(t, ast.Name))
    return out


def _own_names(tree: ast.Module) -> set[str]:
    """Everything a module defines or binds: its definitions, ``self._x``/``cls._x`` stores,
    names bound anywhere and arguments."""
    out = _definitions(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            out.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
    return out


@pytest.fixture(scope="module")
def trees():
    return _trees()


@pytest.mark.parametrize("name", sorted(HOMES))
def test_each_shared_piece_is_defined_once_in_its_home(trees, name):
    where = sorted(path for path, tree in trees if name in _definitions(tree))
    assert where == [HOMES[name]], f"{name} is defined in {where}, its home is {HOMES[name]}"


def _probes(tree: ast.Module):
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id == "hasattr" or (node.func.id == "getattr" and len(node.args) == 3):
            attr = node.args[1]
            yield (ast.unparse(attr) if not isinstance(attr, ast.Constant) else attr.value,
                   node.lineno)


def test_no_attribute_probes_outside_the_allow_list(trees):
    found = [f"{path}:{line} probes {attr!r}" for path, tree in trees
             for attr, line in _probes(tree) if (path, attr) not in PROBES_ALLOWED]
    assert not found, "declare an ability or check a class instead:\n" + "\n".join(found)


def test_the_allowed_probes_still_exist(trees):
    """The allow-list names only probes that are there (an entry left behind would let a new
    probe in)."""
    present = {(path, attr) for path, tree in trees for attr, _ in _probes(tree)}
    assert set(PROBES_ALLOWED) <= present


def _private_reads(tree: ast.Module):
    own = _own_names(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id in ("self", "cls"):
            continue
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) \
                and value.func.id == "super":
            continue
        if node.attr not in own:
            yield ast.unparse(node), node.lineno


def test_no_private_attribute_of_another_modules_object(trees):
    found = [f"{path}:{line} reads {expr}" for path, tree in trees
             for expr, line in _private_reads(tree) if (path, expr) not in PRIVATE_ALLOWED]
    assert not found, "use a public method or a declared ability:\n" + "\n".join(found)


def test_the_allowed_private_reads_still_exist(trees):
    present = {(path, expr) for path, tree in trees for expr, _ in _private_reads(tree)}
    assert set(PRIVATE_ALLOWED) <= present


def test_the_checks_catch_what_they_forbid():
    """Each check flags a sample of what it forbids and passes the allowed forms."""
    sample = ast.parse(
        "PAIR_BATCH = 8\n"
        "def f(o, tracker):\n"
        "    getattr(o, 'manifold', None)\n"
        "    hasattr(o, 'x')\n"
        "    getattr(o, 'x')\n"
        "    tracker._f\n"
        "    super()._g\n"
        "class A:\n"
        "    def _own(self):\n"
        "        return self._own, other._own\n")
    assert "PAIR_BATCH" in _definitions(sample)
    assert [a for a, _ in _probes(sample)] == ["manifold", "x"]
    assert [e for e, _ in _private_reads(sample)] == ["tracker._f"]
