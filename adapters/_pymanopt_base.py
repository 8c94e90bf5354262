"""Shared parts of the pymanopt front-ends: numpy ↔ torch, the geometry-backed ``Manifold``,
the geometry of a pymanopt manifold and :class:`SolverOptimizer`.

Private: the public names are re-exported by :mod:`orthoplug.adapters.pymanopt`; the optimizer
modules (``_pymanopt_*.py``) import from here, so the public module can import all of them
statically.
"""

from __future__ import annotations

import numpy as np
import torch
from pymanopt.manifolds import Grassmann, SpecialOrthogonalGroup, Stiefel
from pymanopt.manifolds.manifold import Manifold
from pymanopt.optimizers.optimizer import Optimizer, OptimizerResult

from orthoplug.geometry.manifolds import (
    IndefiniteStiefelGeometry,
    JOrthogonalGeometry,
    check_arguments,
)
from orthoplug.geometry.stiefel import GrassmannGeometry, StiefelGeometry
from orthoplug.oracles import FunctionOracle

__all__ = ["SolverOptimizer", "geometry_of"]


def _t(a) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def _n(t: torch.Tensor) -> np.ndarray:
    return t.numpy()


def _start_point(geometry, x0) -> torch.Tensor:
    """The float64 start tensor of a run from ``x0``.

    The solvers run in float64. A start point of lower precision (e.g. float32) is checked
    against the tolerance of its own dtype (:func:`~orthoplug.geometry.manifolds.feasibility_tol`:
    a feasible float64 point rounded to float32 passes), then restored to float64 feasibility
    by the geometry's ``projx`` (a change of the order of that rounding).

    Raises:
        TypeError: ``x0`` is not a real floating-point array.
        ValueError: as the geometry's ``check_point``.
    """
    a = np.asarray(x0)
    if a.dtype.kind != "f":
        raise TypeError(f"the initial point must be a real floating-point array, got dtype "
                        f"{a.dtype}")
    if a.dtype == np.float64:
        return _t(a).clone()
    geometry.check_point(torch.from_numpy(np.ascontiguousarray(a)))
    return geometry.projx(_t(a))


class _GeometryManifold(Manifold):
    """Wraps a torch geometry object; converts numpy ↔ torch (zero-copy on CPU)."""

    geometry: JOrthogonalGeometry | IndefiniteStiefelGeometry

    def __init__(self, geometry, cond: float):
        self.geometry = geometry
        self.cond = float(cond)
        super().__init__(repr(geometry), geometry.dim)

    @property
    def signature(self) -> np.ndarray:
        """The diagonal of J as a float array of ±1."""
        return np.asarray(self.geometry.j.values, dtype=float)

    @property
    def typical_dist(self) -> float:
        return self.geometry.typical_dist()

    def _ts(self, *arrays) -> tuple[torch.Tensor, ...]:
        """The arguments of a map as float64 tensors, checked first (real floating point,
        shape ``(..., n, k)``): no silent cast of complex or integer input."""
        for a in arrays:
            kind = np.asarray(a).dtype.kind
            if kind != "f":
                raise TypeError(f"{self.geometry.name}: arguments must be real floating-point "
                                f"arrays, got dtype {np.asarray(a).dtype}")
        out = tuple(_t(a) for a in arrays)
        check_arguments(self.geometry.name, self.geometry.shape, *out)
        return out

    def inner_product(self, point, tangent_vector_a, tangent_vector_b) -> float:
        return float(self.geometry.inner(*self._ts(point, tangent_vector_a, tangent_vector_b)))

    def norm(self, point, tangent_vector) -> float:
        return float(np.sqrt(max(self.inner_product(point, tangent_vector, tangent_vector), 0.0)))

    def projection(self, point, vector):
        return _n(self.geometry.proj(*self._ts(point, vector)))

    to_tangent_space = projection

    def euclidean_to_riemannian_gradient(self, point, euclidean_gradient):
        return _n(self.geometry.egrad2rgrad(*self._ts(point, euclidean_gradient)))

    def euclidean_to_riemannian_hessian(
        self, point, euclidean_gradient, euclidean_hessian, tangent_vector
    ):
        return _n(self.geometry.ehess2rhess(
            *self._ts(point, euclidean_gradient, euclidean_hessian, tangent_vector)))

    def retraction(self, point, tangent_vector):
        return _n(self.geometry.retr(*self._ts(point, tangent_vector)))

    def transport(self, point_a, point_b, tangent_vector_a):
        return _n(self.geometry.transp(*self._ts(point_a, point_b, tangent_vector_a)))

    def random_point(self):
        gen = torch.Generator().manual_seed(int(np.random.randint(2**31 - 1)))
        return _n(self.geometry.random_point(cond=self.cond, generator=gen))

    def random_tangent_vector(self, point):
        gen = torch.Generator().manual_seed(int(np.random.randint(2**31 - 1)))
        return _n(self.geometry.random_tangent(_t(point), generator=gen))

    def zero_vector(self, point):
        return np.zeros(self.geometry.shape)

    def dist(self, point_a, point_b):
        raise NotImplementedError(f"{self.geometry.name}: no closed-form geodesic distance")

    def log(self, point_a, point_b):
        raise NotImplementedError(f"{self.geometry.name}: no closed-form logarithm")

    def check_point(self, point, tol: float | None = None) -> None:
        """Raise ``ValueError`` naming the violation if ``point`` is not on the manifold."""
        self.geometry.check_point(_t(point), tol)

    def violation(self, point) -> float:
        """The papers' constraint violation, mean ``|XᵀJX − J|``."""
        return float(self.geometry.violation(_t(point)))


def geometry_of(manifold):
    """The orthoplug geometry object behind a pymanopt manifold.

    Supports orthoplug's own manifolds and pymanopt's ``Stiefel``, ``Grassmann`` (single
    matrices, ``k = 1``) and ``SpecialOrthogonalGroup`` (``k = 1``, treated as St(n, n)).
    """
    if isinstance(manifold, _GeometryManifold):
        return manifold.geometry
    if not isinstance(manifold, (Grassmann, Stiefel, SpecialOrthogonalGroup)):
        raise ValueError(f"unsupported manifold {type(manifold).__name__}")
    shape = manifold.zero_vector(None).shape  # (n, p), or (k, n, p) for a product of k
    if len(shape) != 2:
        raise ValueError(f"{manifold}: product manifolds (k = {shape[0]}) are not supported")
    return (GrassmannGeometry if isinstance(manifold, Grassmann) else StiefelGeometry)(*shape)


class SolverOptimizer(Optimizer):
    """Base of orthoplug's pymanopt optimizers: runs an orthoplug solver on a ``Problem``.

    The problem's cost and Euclidean gradient (from any pymanopt autodiff backend) become a
    :class:`~orthoplug.oracles.core.FunctionOracle`. ``run(..., oracle=...)`` takes a
    structured oracle instead (e.g. :class:`~orthoplug.oracles.core.QuadraticOracle` for the
    fast path, :class:`~orthoplug.oracles.core.FiniteSumOracle` for variance reduction).

    Args:
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in pymanopt
            (the gradient norm is the Riemannian one, checked at each evaluation).
        seed: seed of the solver's random choices (pairs, matchings, minibatches).
        eval_every: iterations between evaluations of cost / gradient norm / violation.
        stall_evaluations: stop after this many evaluations without relative progress.
        stall_tolerance: the relative progress that counts as progress.
        target_cost: stop once the cost is at most this (``None``: no target).
        **options: solver-specific options (see the solver class). orthoplug's own optimizers
            list theirs explicitly in their signatures; this catch-all serves subclasses that
            set only ``solver_class`` (a plug-in solver).
    """

    solver_class: type = None
    geometries: tuple[type, ...] = ()
    #: False for a direct solver, which is run with ``x0 = None`` when no initial point is given
    #: (no random start is drawn).
    needs_initial_point: bool = True

    def __init__(self, max_time: float = 1000, max_iterations: int = 1000,
                 min_gradient_norm: float = 1e-6, verbosity: int = 0, log_verbosity: int = 0,
                 *, seed: int | None = None, eval_every: int | None = None,
                 stall_evaluations: int = 0, stall_tolerance: float = 1e-15,
                 target_cost: float | None = None, **options):
        super().__init__(max_time=max_time, max_iterations=max_iterations,
                         min_gradient_norm=min_gradient_norm, verbosity=verbosity,
                         log_verbosity=log_verbosity)
        self.options = options
        self._solver_kwargs = dict(seed=seed, eval_every=eval_every, max_time=max_time,
                                   max_iterations=max_iterations,
                                   min_gradient_norm=min_gradient_norm,
                                   stall_evaluations=stall_evaluations,
                                   stall_tolerance=stall_tolerance, target_cost=target_cost,
                                   log_verbosity=log_verbosity)
        self.make_solver()  # validate the options now, not at run time

    def make_solver(self):
        """A fresh orthoplug solver with this optimizer's options (one per run)."""
        return self.solver_class(**self._solver_kwargs, **self.options)

    def oracle_for(self, problem):
        """A :class:`~orthoplug.oracles.core.FunctionOracle` from the problem's cost, Euclidean
        gradient and, where the problem has one (an autodiff cost whose backend makes Hessian
        operators, or a given ``euclidean_hessian``), its Euclidean Hessian-vector product (the
        oracle then has :class:`~orthoplug.oracles.abilities.HessianVector`).
        """
        try:
            ehess = problem.euclidean_hessian
        except NotImplementedError:  # e.g. pymanopt's numpy backend: no Hessian operator
            ehess = None
        return FunctionOracle(
            lambda x: problem.cost(_n(x)), lambda x: _t(problem.euclidean_gradient(_n(x))),
            hessian=None if ehess is None else (lambda x, u: _t(ehess(_n(x), _n(u)))))

    def run(self, problem, *, initial_point=None, oracle=None):
        """Run on ``problem`` from ``initial_point`` (random if omitted) → ``OptimizerResult``.

        Raises:
            ValueError: unsupported manifold, an infeasible / misshapen initial point, or a
                batch of points without an ``oracle``.
            TypeError: an initial point that is not a real floating-point array.
        """
        geometry = geometry_of(problem.manifold)
        if self.geometries and not isinstance(geometry, self.geometries):
            raise ValueError(f"{type(self).__name__} does not support {problem.manifold}; "
                             f"supported: {[g.name for g in self.geometries]}")
        x0 = initial_point
        if x0 is None and self.needs_initial_point:
            x0 = problem.manifold.random_point()
        if x0 is not None and oracle is None and np.ndim(x0) != 2:
            raise ValueError(f"{type(self).__name__}: a pymanopt Problem's cost takes one "
                             f"matrix, got an initial point of shape {np.shape(x0)}; a batch "
                             "of matrices needs an orthoplug oracle (run(..., oracle=...))")
        solver = self.make_solver()
        res = solver.run(oracle or self.oracle_for(problem),
                         None if x0 is None else _start_point(geometry, x0), geometry)
        self._initialize_log(optimizer_parameters=res.info)
        if self._log_verbosity >= 1:
            self._log["iterations"] = res.history
        if self._verbosity >= 1:
            print(f"{solver.name}: {res.info}")  # the options and choices resolved at setup
            print(f"{solver.name}: {res.stop_reason} after {res.iterations} iterations, "
                  f"{res.time:.2f} s; cost {res.cost:.10g}, |grad| {res.gradient_norm:.3e}")
        result = OptimizerResult(point=_n(res.point), cost=res.cost, iterations=res.iterations,
                                 stopping_criterion=res.stop_reason, time=res.time,
                                 gradient_norm=res.gradient_norm, log=self._log)
        result.violation = res.violation
        result.solver_result = res
        return result
