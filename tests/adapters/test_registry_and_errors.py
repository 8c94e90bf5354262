"""Registry (built-ins and entry points) and clear errors on bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from orthoplug import registry
from orthoplug.adapters import geoopt as go
from orthoplug.adapters import pymanopt as pm
from orthoplug.geometry.manifolds import InfeasiblePointError


def test_builtins_listed_and_loadable():
    assert {"JOrthogonal", "IndefiniteStiefel"} <= set(registry.names("manifold"))
    solvers = ("GSJOBCD", "JJOBCD", "VRJJOBCD", "OBCD", "RSSM", "RSDM")
    assert registry.get("StiefelBlock", "geoopt").__name__ == "StiefelBlock"
    assert set(solvers) <= set(registry.names("solver"))
    for name in solvers:
        assert registry.get(name, "pymanopt").__name__ == name
        assert registry.get(name, "geoopt").__name__ == name
    assert registry.get("JOrthogonal", "pymanopt") is pm.JOrthogonal
    assert registry.get("IndefiniteStiefel", "geoopt") is go.IndefiniteStiefel
    with pytest.raises(KeyError, match="no manifold or solver named"):
        registry.get("NoSuchThing", "pymanopt")
    with pytest.raises(ValueError, match="unknown front-end"):
        registry.get("JOrthogonal", "jax")
    with pytest.raises(ValueError, match="already registered"):
        registry.register("JOrthogonal", "manifold", pymanopt=object)


def test_entry_point_solver_is_discovered(install_plugin):
    install_plugin("""
        class DummySolver:
            pass
        SOLVER = {"pymanopt": DummySolver, "description": "a test plug-in"}
    """, "dummy-solver = dummy_orthoplug_plugin:SOLVER")
    assert "dummy-solver" in registry.names("solver", frontend="pymanopt")
    assert "dummy-solver" not in registry.names("solver", frontend="geoopt")
    cls = registry.get("dummy-solver", "pymanopt")
    assert cls.__name__ == "DummySolver"
    entry = [e for e in registry.entries("solver") if e.name == "dummy-solver"][0]
    assert entry.description == "a test plug-in" and "entry point" in entry.source


def test_broken_entry_point_is_skipped_with_warning(install_plugin, caplog):
    install_plugin("SOLVER = None\n", "broken = dummy_orthoplug_plugin:MISSING")
    assert "broken" not in registry.names()
    assert "skipping entry point broken" in caplog.text


@pytest.mark.parametrize("make,match", [
    (lambda: pm.JOrthogonal(0, 0), "dimension must be an integer >= 1"),
    (lambda: pm.JOrthogonal(4), "give p"),
    (lambda: pm.JOrthogonal(4, 5), r"p must be an integer in \[0, 4\]"),
    (lambda: pm.JOrthogonal(4, 2, signature=[1, 1, -1, -1]), "exactly one of"),
    (lambda: go.JOrthogonal(3, signature=[1, 0, -1]), r"entries must be \+1 or -1"),
    (lambda: go.JOrthogonal(3, signature=[1, 2, -1]), r"entries must be \+1 or -1"),
    (lambda: pm.JOrthogonal(3, signature=[1, -1]), "signature has length 2, expected 3"),
    (lambda: pm.JOrthogonal(3, 1, retraction="qr"), "unsupported retraction"),
    (lambda: pm.IndefiniteStiefel(4, 5, 2, 2), "need k <= n"),
    (lambda: pm.IndefiniteStiefel(4, 0, 2, 0), "k must be an integer >= 1"),
    (lambda: go.IndefiniteStiefel(5, 3, 1, 2), "does not fit"),
    (lambda: go.IndefiniteStiefel(5, 3, 4, 0), "does not fit"),
])
def test_bad_constructor_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_infeasible_and_misshapen_points_are_named():
    m = pm.JOrthogonal(4, 2)
    np.random.seed(0)
    x = m.random_point()
    m.check_point(x)
    with pytest.raises(InfeasiblePointError, match=r"infeasible: ‖XᵀJX − J‖_F/‖X‖_F² = "):
        m.check_point(x + 1e-3)
    with pytest.raises(ValueError, match=r"shape \(\.\.\., 4, 4\), got \(4, 3\)"):
        m.check_point(x[:, :3])
    with pytest.raises(InfeasiblePointError, match="non-finite"):
        m.check_point(np.full((4, 4), np.nan))
    g = go.IndefiniteStiefel(5, 2, 3, 1)
    with pytest.raises(ValueError, match="should have shape"):
        g.random(5, 3)
    with pytest.raises(ValueError, match="cond must be >= 1"):
        g.geometry.random_point(cond=0.5)
    with pytest.raises(ValueError, match="empty -1 block must be \\+1"):
        go.JOrthogonal(3, 3).geometry.random_point(component=(1, -1))


@pytest.mark.parametrize("component", [(1, 1), (1, -1), (-1, 1), (-1, -1)])
def test_random_points_stay_in_the_requested_component(component):
    from orthoplug.geometry import jorthogonal as jo

    m = go.JOrthogonal(7, signature=[1, -1, 1, 1, -1, -1, 1])
    x = m.geometry.random_point((20,), cond=100.0, component=component)
    s_plus, s_minus = jo.component(m.geometry.j, x)
    assert (s_plus == component[0]).all() and (s_minus == component[1]).all()
    assert torch.allclose(torch.linalg.cond(x), torch.full((20,), 100.0, dtype=x.dtype))
    # a retraction path never leaves the component
    y = x
    for _ in range(50):
        y = m.retr(y, 0.3 * m.geometry.random_tangent(y))
    s_plus, s_minus = jo.component(m.geometry.j, y)
    assert (s_plus == component[0]).all() and (s_minus == component[1]).all()
