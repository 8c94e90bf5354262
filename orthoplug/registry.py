"""Names → manifolds and solvers, for both front-ends, extensible through entry points.

Built-in entries are stored as ``"module:attribute"`` strings and imported on first use, so
listing the registry imports neither pymanopt nor geoopt.

Third-party solvers
-------------------
A package adds solvers by declaring an entry point in the group ``orthoplug.solvers``::

    # pyproject.toml of the third-party package
    [project.entry-points."orthoplug.solvers"]
    my-solver = "my_package.orthoplug_plugin:SOLVER"

The entry point must load to a mapping (or an object with the same attributes) with the keys
``pymanopt`` and/or ``geoopt`` (a class or a ``"module:attribute"`` string) and optionally
``description``. The entry point's name becomes the registry name. Entry points are read on the
first query; :func:`reload_entry_points` re-reads them.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

__all__ = [
    "ENTRY_POINT_GROUP",
    "Entry",
    "register",
    "names",
    "entries",
    "get",
    "reload_entry_points",
]

ENTRY_POINT_GROUP = "orthoplug.solvers"
FRONTENDS = ("pymanopt", "geoopt")
KINDS = ("manifold", "solver")
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Entry:
    """One registry entry: a name, a kind, and an implementation per front-end."""

    name: str
    kind: str
    pymanopt: Any = None
    geoopt: Any = None
    description: str = ""
    source: str = "builtin"

    def load(self, frontend: str):
        """Return the class for ``frontend`` (importing ``"module:attr"`` references)."""
        if frontend not in FRONTENDS:
            raise ValueError(f"unknown front-end {frontend!r}; choose from {FRONTENDS}")
        ref = self.implementations()[frontend]
        if ref is None:
            raise KeyError(f"{self.kind} {self.name!r} has no {frontend} implementation")
        if isinstance(ref, str):
            module, _, attr = ref.partition(":")
            ref = getattr(importlib.import_module(module), attr)
        return ref

    @property
    def frontends(self) -> tuple[str, ...]:
        """The front-ends this entry implements, a subset of ``("pymanopt", "geoopt")``."""
        return tuple(f for f, ref in self.implementations().items() if ref is not None)

    def implementations(self) -> dict[str, Any]:
        """The implementation of each front-end (``None``: none), keyed like
        :data:`FRONTENDS`."""
        return {"pymanopt": self.pymanopt, "geoopt": self.geoopt}


_REGISTRY: dict[str, Entry] = {}
_entry_points_loaded = False


def register(name: str, kind: str, *, pymanopt=None, geoopt=None, description: str = "",
             source: str = "builtin", replace: bool = False) -> Entry:
    """Add an entry. Raises ``ValueError`` on a duplicate name (unless ``replace``)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if pymanopt is None and geoopt is None:
        raise ValueError(f"{name!r}: give a pymanopt and/or a geoopt implementation")
    if name in _REGISTRY and not replace:
        raise ValueError(f"{name!r} is already registered ({_REGISTRY[name].source})")
    entry = Entry(name, kind, pymanopt, geoopt, description, source)
    _REGISTRY[name] = entry
    return entry


def _load_entry_points() -> None:
    global _entry_points_loaded
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            obj = obj() if callable(obj) and not isinstance(obj, type) else obj

            def field(key, obj=obj):
                # the plugin format's keys are optional (module docstring): an absent key or
                # attribute is its declared "not given", not a probe of one of our objects
                return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)

            register(ep.name, "solver", pymanopt=field("pymanopt"), geoopt=field("geoopt"),
                     description=field("description") or "", source=f"entry point {ep.value}",
                     replace=ep.name in _REGISTRY and _REGISTRY[ep.name].source != "builtin")
        except Exception as err:  # a broken plugin must not break the package
            _log.warning("orthoplug: skipping entry point %s (%s): %s", ep.name, ep.value, err)


def reload_entry_points() -> None:
    """Forget entry-point entries and read the ``orthoplug.solvers`` group again."""
    for name in [n for n, e in _REGISTRY.items() if e.source != "builtin"]:
        del _REGISTRY[name]
    _load_entry_points()


def entries(kind: str | None = None, frontend: str | None = None) -> list[Entry]:
    """All entries, optionally filtered by kind and by the front-end they support."""
    if not _entry_points_loaded:
        _load_entry_points()
    out = [e for e in _REGISTRY.values() if kind is None or e.kind == kind]
    return [e for e in out if frontend is None or e.implementations()[frontend] is not None]


def names(kind: str | None = None, frontend: str | None = None) -> list[str]:
    """The names of :func:`entries` (same filters)."""
    return [e.name for e in entries(kind, frontend)]


def get(name: str, frontend: str):
    """The class registered under ``name`` for ``frontend`` ("pymanopt" or "geoopt")."""
    if not _entry_points_loaded:
        _load_entry_points()
    if name not in _REGISTRY:
        raise KeyError(f"no manifold or solver named {name!r}; known: {sorted(_REGISTRY)}")
    return _REGISTRY[name].load(frontend)


_PM, _GO = "orthoplug.adapters.pymanopt", "orthoplug.adapters.geoopt"
register("JOrthogonal", "manifold", pymanopt=f"{_PM}:JOrthogonal", geoopt=f"{_GO}:JOrthogonal",
         description="J-orthogonal group XᵀJX = J, any signature")
register("IndefiniteStiefel", "manifold", pymanopt=f"{_PM}:IndefiniteStiefel",
         geoopt=f"{_GO}:IndefiniteStiefel", description="indefinite Stiefel set XᵀJ_nX = J_k")
for _name, _desc in (("GSJOBCD", "Gauss–Seidel JOBCD: one exact 2×2 row- or column-pair step per "
                                 "iteration"),
                     ("ColumnJJacobi", "column J-Jacobi: sweeps of exact column-pair steps for "
                                       "tr(XᵀCX) on square O(J) (needs a QuadraticOracle)"),
                     ("JJOBCD", "Jacobi JOBCD: n/2 disjoint exact row-pair steps per iteration"),
                     ("VRJJOBCD", "variance-reduced (PAGE) Jacobi JOBCD for finite sums")):
    register(_name, "solver", pymanopt=f"{_PM}:{_name}", geoopt=f"{_GO}:{_name}",
             description=_desc)
register("CayleyLBFGS", "solver", pymanopt=f"{_PM}:CayleyLBFGS", geoopt=f"{_GO}:CayleyLBFGS",
         description="L-BFGS on square O(J) in the Lie algebra with the Cayley step: the "
                     "recommended solver for smooth costs given by value and gradient")
register("OBCD", "solver", pymanopt=f"{_PM}:OBCD", geoopt=f"{_GO}:OBCD",
         description="block coordinate descent for f + h on Stiefel, exact k = 2 breakpoint search")
# no geoopt door: SparseOBCD's start stages are not step methods on a parameter — they read the
# quadratic's C (data starts, partition search) and replace the point by jumps (a candidate, a
# rounded splitting iterate); its pair steps alone are geoopt's OBCD
register("SparseOBCD", "solver", pymanopt=f"{_PM}:SparseOBCD",
         description="OBCD after named start stages (data starts, prox or ADMM splitting, "
                     "partition search), greedy pairs and column sweeps, each stage budgeted "
                     "in iterations")
register("RSSM", "solver", pymanopt=f"{_PM}:RSSM", geoopt=f"{_GO}:RSSM",
         description="randomized submanifold subgradient method (random column-block pairs)")
register("StiefelBlock", "manifold", pymanopt=f"{_PM}:StiefelBlock", geoopt=f"{_GO}:StiefelBlock",
         description="columns C of a Stiefel point, the other columns fixed")
register("RSDM", "solver", pymanopt=f"{_PM}:RSDM", geoopt=f"{_GO}:RSDM",
         description="randomized Riemannian submanifold descent (permutation / Haar sampling)")
register("HyperbolicEig", "solver", pymanopt=f"{_PM}:HyperbolicEig",
         description="global minimiser of tr(XᵀCXD), C ≻ 0, over O(J) / iSt by one pencil "
                     "eigensolve (dense or Lanczos); needs oracle=QuadraticOracle (pymanopt only: "
                     "a direct solve is no step method on a geoopt parameter)")
# the comparison methods of orthoplug.baselines (pymanopt front-ends only: most are infeasible
# or not step methods on a parameter; see orthoplug.adapters.pymanopt)
for _name, _desc in (
        ("ManPG", "manifold proximal gradient for f + h on Stiefel (semismooth Newton direction)"),
        ("RSubGrad", "full Riemannian subgradient method on Stiefel, polar retraction"),
        ("Landing", "retraction-free landing field on Stiefel (infeasible iterates)"),
        ("PCAL", "proximal linearised augmented Lagrangian on Stiefel (infeasible iterates)"),
        ("RCD", "Givens-rotation coordinate descent on Stiefel, one sweep per iteration"),
        ("LADMM", "linearised ADMM splitting for f + h on Stiefel"),
        ("RADMM", "Riemannian ADMM with a Moreau-smoothed h on Stiefel"),
        ("PSM", "penalty splitting with a growing penalty for f + h on Stiefel"),
        ("ADMM", "linearised ADMM with Y = JX for XᵀJX = J_k (infeasible iterates)"),
        ("UMCM", "unconstrained multiplier correction with Adagrad for XᵀJX = J_k (infeasible)"),
        ("CSDM", "Adagrad on a reduced hyperbolic-CS parametrisation of O(J) (feasible)")):
    register(_name, "solver", pymanopt=f"{_PM}:{_name}", description=_desc)
