"""The optimizers of both front-ends list their options explicitly, and the defaults agree.

Walks every solver of :mod:`orthoplug.registry` (pymanopt and geoopt):

* no ``*args`` / ``**kwargs`` (an unknown option is Python's own ``TypeError``), every parameter
  annotated, every option named in the class docstring;
* a door's default for an option equals the core solver class's default for that name (the door
  passes it through);
* the pymanopt and geoopt classes of one algorithm give a shared option the same default.
"""

from __future__ import annotations

import inspect
import re

import pytest

from orthoplug import registry
from orthoplug.adapters._pymanopt_base import SolverOptimizer
from orthoplug.solvers import rsdm
from orthoplug.solvers.base import IterativeSolver

EMPTY = inspect.Parameter.empty

# the door's default differs from the core class's on purpose: pymanopt's optimizers keep no log
# by default (log_verbosity 0; the core solvers record one), and the pymanopt RSDM's
# batch_size=None selects the deterministic RSDM (StochasticRSDM's default batch is 1)
DOOR_CORE_DIFFERENCES = {("*", "log_verbosity"), ("RSDM", "batch_size")}

# options of the run loop, not of one solver: every pymanopt door takes them with the defaults of
# SolverOptimizer
COMMON = ("max_time", "max_iterations", "min_gradient_norm", "verbosity", "log_verbosity", "seed",
          "eval_every", "stall_evaluations", "stall_tolerance", "target_cost")


def _doors():
    """(label, algorithm, front-end, class) of every public optimizer class."""
    return [(f"{f}:{e.name}", e.name, f, e.load(f))
            for e in registry.entries("solver") for f in e.frontends]


DOORS = _doors()
IDS = [d[0] for d in DOORS]


def _options(cls) -> dict:
    """The options of ``cls.__init__`` and their defaults (``EMPTY``: required)."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    return {p.name: p.default for p in params if p.name != "params"}


def _core_options(cls) -> dict:
    """The keyword options of a core solver class and their defaults, following ``**kwargs`` up
    its bases (a subclass's default wins)."""
    out: dict = {}
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        params = list(inspect.signature(klass.__init__).parameters.values())[1:]
        for p in params:
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                out.setdefault(p.name, p.default)
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return out


def _core_of(name: str, frontend: str) -> dict:
    """The core options behind a door: the pymanopt door's ``solver_class`` (both RSDM classes
    for RSDM)."""
    if name == "RSDM":
        return {**_core_options(rsdm.StochasticRSDM), **_core_options(rsdm.RSDM)}
    return _core_options(registry.get(name, "pymanopt").solver_class)


def test_walk_covers_both_front_ends():
    frontends = {d[2] for d in DOORS}
    assert frontends == {"pymanopt", "geoopt"}
    assert len(DOORS) >= len(registry.names("solver"))


@pytest.mark.parametrize("label,name,frontend,cls", DOORS, ids=IDS)
def test_explicit_annotated_signature(label, name, frontend, cls):
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    assert params, label
    variadic = [p.name for p in params if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    assert not variadic, f"{label}: variadic parameters {variadic}"
    unannotated = [p.name for p in params if p.annotation is EMPTY]
    assert not unannotated, f"{label}: parameters without a type hint {unannotated}"
    if frontend == "geoopt":
        assert params[0].name == "params"


@pytest.mark.parametrize("label,name,frontend,cls", DOORS, ids=IDS)
def test_docstring_names_every_option(label, name, frontend, cls):
    doc = inspect.getdoc(cls) or ""
    assert "Args:" in doc, label
    missing = [o for o in _options(cls) if not re.search(rf"\b{o}\b", doc)]
    assert not missing, f"{label}: the docstring does not name {missing}"


@pytest.mark.parametrize("label,name,frontend,cls", DOORS, ids=IDS)
def test_door_defaults_equal_core_defaults(label, name, frontend, cls):
    core = _core_of(name, frontend)
    door = _options(cls)
    shared = sorted(set(door) & set(core))
    assert shared, label
    for option in shared:
        if ({("*", option), (name, option)} & DOOR_CORE_DIFFERENCES) and frontend == "pymanopt":
            assert door[option] != core[option], f"{label}.{option}: listed difference gone"
            continue
        assert door[option] == core[option], \
            f"{label}.{option}: door default {door[option]!r} != core {core[option]!r}"


@pytest.mark.parametrize("label,name,frontend,cls",
                         [d for d in DOORS if d[2] == "pymanopt"],
                         ids=[d[0] for d in DOORS if d[2] == "pymanopt"])
def test_pymanopt_doors_take_the_core_options_and_common_stops(label, name, frontend, cls):
    door = _options(cls)
    # IterativeSolver's own options (stopping, callback, ...) are the run loop's, not the
    # solver's: the door builds them from COMMON
    specific = set(_core_options(cls.solver_class)) - set(_core_options(IterativeSolver))
    missing = sorted(specific - set(door))
    if name == "SparseOBCD":  # its pair stage fixes OBCD's working set, block and curvature
        missing = sorted(set(missing) - {"k", "pairs", "curvature", "sigma_rule", "sweeps"})
    assert not missing, f"{label}: core options missing from the signature: {missing}"
    if name == "HyperbolicEig":  # a direct solve: no iterations to stop
        return
    common = _options(SolverOptimizer)
    for option in COMMON:
        assert door[option] == common[option], (label, option)


def test_pymanopt_geoopt_shared_defaults():
    """Every option both doors of an algorithm take has the same default in both."""
    found = {}
    for _, name, frontend, cls in DOORS:
        if frontend != "geoopt":
            continue
        pm, go = _options(registry.get(name, "pymanopt")), _options(cls)
        for option in set(pm) & set(go):
            if pm[option] != go[option]:
                found[name, option] = (pm[option], go[option])
    assert found == {}


@pytest.mark.parametrize("label,name,frontend,cls", DOORS, ids=IDS)
def test_unknown_option_is_a_type_error_naming_class_and_option(label, name, frontend, cls):
    with pytest.raises(TypeError, match=rf"{cls.__name__}\.__init__\(\) got an unexpected "
                                         r"keyword argument 'bogus'"):
        cls([], bogus=1) if frontend == "geoopt" else cls(bogus=1)
