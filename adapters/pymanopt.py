"""pymanopt front-end: manifolds (numpy points) backed by :mod:`orthoplug.geometry`.

The classes subclass :class:`pymanopt.manifolds.manifold.Manifold`, so pymanopt's
SteepestDescent, ConjugateGradient and TrustRegions run on them unchanged::

    import autograd.numpy as anp, pymanopt
    from orthoplug.adapters.pymanopt import JOrthogonal

    manifold = JOrthogonal(6, p=3)
    @pymanopt.function.autograd(manifold)
    def cost(X):
        return anp.trace(X.T @ C @ X)
    result = pymanopt.optimizers.TrustRegions().run(pymanopt.Problem(manifold, cost))

Random points are drawn with a seed taken from numpy's global generator, so
``np.random.seed`` makes pymanopt runs reproducible as with pymanopt's own manifolds.
"""

from __future__ import annotations

import numpy as np
import torch
from pymanopt.manifolds.manifold import Manifold
from pymanopt.optimizers.optimizer import Optimizer

from orthoplug.geometry.manifolds import (
    IndefiniteStiefelGeometry,
    JOrthogonalGeometry,
    typical_dist,
)

__all__ = ["JOrthogonal", "IndefiniteStiefel", "SolverOptimizer", "GSJOBCD", "JJOBCD", "VRJJOBCD",
           "geometry_of"]


def _t(a) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def _n(t: torch.Tensor) -> np.ndarray:
    return t.numpy()


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
        return typical_dist(self.dim)

    def inner_product(self, point, tangent_vector_a, tangent_vector_b) -> float:
        return float(self.geometry.inner(_t(point), _t(tangent_vector_a), _t(tangent_vector_b)))

    def norm(self, point, tangent_vector) -> float:
        return float(np.sqrt(max(self.inner_product(point, tangent_vector, tangent_vector), 0.0)))

    def projection(self, point, vector):
        return _n(self.geometry.proj(_t(point), _t(vector)))

    to_tangent_space = projection

    def euclidean_to_riemannian_gradient(self, point, euclidean_gradient):
        return _n(self.geometry.egrad2rgrad(_t(point), _t(euclidean_gradient)))

    def euclidean_to_riemannian_hessian(
        self, point, euclidean_gradient, euclidean_hessian, tangent_vector
    ):
        return _n(
            self.geometry.ehess2rhess(
                _t(point), _t(euclidean_gradient), _t(euclidean_hessian), _t(tangent_vector)
            )
        )

    def retraction(self, point, tangent_vector):
        return _n(self.geometry.retr(_t(point), _t(tangent_vector)))

    def transport(self, point_a, point_b, tangent_vector_a):
        return _n(self.geometry.transp(_t(point_a), _t(point_b), _t(tangent_vector_a)))

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


class JOrthogonal(_GeometryManifold):
    """The J-orthogonal group ``O(J) = {X : XᵀJX = J}``, J = diag(±1).

    Args:
        n: matrix size.
        p: number of +1 entries, ``J = diag(I_p, −I_{n−p})``; or
        signature: an explicit ±1 vector of length n (any order), instead of ``p``.
        retraction: ``"cayley"`` (default) or ``"exp"`` (the Riemannian exponential).
        cond: condition number of :meth:`random_point` draws (default 10).

    Metric: left-invariant, ``⟨XΩ₁, XΩ₂⟩ = tr(Ω₁ᵀΩ₂)``; :meth:`exp` is its exact exponential map.
    """

    def __init__(self, n: int, p: int | None = None, *, signature=None, retraction="cayley",
                 cond: float = 10.0):
        super().__init__(JOrthogonalGeometry(n, p, signature=signature, retraction=retraction),
                         cond)

    def exp(self, point, tangent_vector):
        return _n(self.geometry.exp(_t(point), _t(tangent_vector)))


class IndefiniteStiefel(_GeometryManifold):
    """The indefinite Stiefel set ``{X ∈ ℝⁿˣᵏ : Xᵀ J_n X = J_k}`` with the Euclidean metric.

    Args:
        n, k: matrix shape (k ≤ n).
        p: number of +1 entries of ``J_n = diag(I_p, −I_{n−p})``.
        k_plus: number of +1 entries of ``J_k = diag(I_{k_plus}, −I_{k−k_plus})``.
        signature, k_signature: explicit ±1 vectors instead of ``p`` / ``k_plus`` (unsorted J).
        cond: condition number of :meth:`random_point` draws.
    """

    def __init__(self, n: int, k: int, p: int | None = None, k_plus: int | None = None, *,
                 signature=None, k_signature=None, cond: float = 10.0):
        super().__init__(
            IndefiniteStiefelGeometry(n, k, p, k_plus, signature=signature,
                                      k_signature=k_signature),
            cond,
        )


# ---------------------------------------------------------------------------------------------
# Optimizers: orthoplug solvers as pymanopt ``Optimizer``\ s
# ---------------------------------------------------------------------------------------------


def geometry_of(manifold):
    """The orthoplug geometry object behind a pymanopt manifold.

    Supports orthoplug's own manifolds and pymanopt's ``Stiefel``, ``Grassmann`` (single
    matrices, ``k = 1``) and ``SpecialOrthogonalGroup`` (``k = 1``, treated as St(n, n)).
    """
    from pymanopt.manifolds import Grassmann, SpecialOrthogonalGroup, Stiefel

    from orthoplug.geometry.stiefel import GrassmannGeometry, StiefelGeometry

    if isinstance(manifold, _GeometryManifold):
        return manifold.geometry
    k = getattr(manifold, "_k", 1)
    if k != 1:
        raise ValueError(f"{manifold}: product manifolds (k = {k}) are not supported")
    if isinstance(manifold, Grassmann):
        return GrassmannGeometry(manifold._n, manifold._p)
    if isinstance(manifold, Stiefel):
        return StiefelGeometry(manifold._n, manifold._p)
    if isinstance(manifold, SpecialOrthogonalGroup):
        return StiefelGeometry(manifold._n, manifold._n)
    raise ValueError(f"unsupported manifold {type(manifold).__name__}")


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
        **options: solver-specific options (see the solver class).
    """

    solver_class: type = None
    geometries: tuple[type, ...] = ()

    def __init__(self, max_time: float = 1000, max_iterations: int = 1000,
                 min_gradient_norm: float = 1e-6, verbosity: int = 0, log_verbosity: int = 0,
                 *, seed: int | None = None, eval_every: int | None = None,
                 stall_evaluations: int = 0, **options):
        super().__init__(max_time=max_time, max_iterations=max_iterations,
                         min_gradient_norm=min_gradient_norm, verbosity=verbosity,
                         log_verbosity=log_verbosity)
        self.options = options
        self._solver_kwargs = dict(seed=seed, eval_every=eval_every, max_time=max_time,
                                   max_iterations=max_iterations,
                                   min_gradient_norm=min_gradient_norm,
                                   stall_evaluations=stall_evaluations,
                                   log_verbosity=log_verbosity)
        self.make_solver()  # validate the options now, not at run time

    def make_solver(self):
        """A fresh orthoplug solver with this optimizer's options (one per run)."""
        return self.solver_class(**self._solver_kwargs, **self.options)

    def oracle_for(self, problem):
        """A :class:`~orthoplug.oracles.core.FunctionOracle` from the problem's cost and Euclidean
        gradient.
        """
        from orthoplug.oracles import FunctionOracle

        return FunctionOracle(lambda x: problem.cost(_n(x)),
                              lambda x: _t(problem.euclidean_gradient(_n(x))))

    def run(self, problem, *, initial_point=None, oracle=None):
        """Run on ``problem`` from ``initial_point`` (random if omitted) → ``OptimizerResult``.

        Raises:
            ValueError: unsupported manifold, or an infeasible / misshapen initial point.
        """
        from pymanopt.optimizers.optimizer import OptimizerResult

        geometry = geometry_of(problem.manifold)
        if self.geometries and not isinstance(geometry, self.geometries):
            raise ValueError(f"{type(self).__name__} does not support {problem.manifold}; "
                             f"supported: {[g.name for g in self.geometries]}")
        x0 = problem.manifold.random_point() if initial_point is None else initial_point
        solver = self.make_solver()
        res = solver.run(oracle or self.oracle_for(problem), _t(x0).clone(), geometry)
        self._initialize_log(optimizer_parameters=res.info)
        if self._log_verbosity >= 1:
            self._log["iterations"] = res.history
        if self._verbosity >= 1:
            print(f"{solver.name}: {res.stop_reason} after {res.iterations} iterations, "
                  f"{res.time:.2f} s; cost {res.cost:.10g}, |grad| {res.gradient_norm:.3e}")
        result = OptimizerResult(point=_n(res.point), cost=res.cost, iterations=res.iterations,
                                 stopping_criterion=res.stop_reason, time=res.time,
                                 gradient_norm=res.gradient_norm, log=self._log)
        result.violation = res.violation
        result.solver_result = res
        return result


def _jobcd_optimizer(solver_name: str, doc: str):
    from orthoplug.solvers import jobcd

    cls = type(solver_name, (SolverOptimizer,), {
        "solver_class": getattr(jobcd, solver_name),
        "geometries": (JOrthogonalGeometry, IndefiniteStiefelGeometry),
        "__doc__": doc,
        "__module__": __name__,
    })
    return cls


GSJOBCD = _jobcd_optimizer("GSJOBCD", """GS-JOBCD as a pymanopt optimizer.

    Options (see :class:`orthoplug.solvers.jobcd.GSJOBCD`): ``theta``, ``sigma``,
    ``side="auto"|"row"|"column"``, ``pairs="random"|"cyclic"|"greedy"``,
    ``curvature="exact"|"scalar"``, ``jacobi_tol``, ``max_boost``, ``same_sign``, ``candidates``.
    For the quadratic fast path pass ``run(problem, oracle=QuadraticOracle(C, D, scale))``; on
    square O(J) with ``D = None`` that runs column J-Jacobi sweeps (one sweep per iteration).
    """)
JJOBCD = _jobcd_optimizer("JJOBCD", """J-JOBCD (Jacobi, ⌊n/2⌋ pairs per iteration) for pymanopt.

    Options: ``theta``, ``sigma``, ``side="row"|"column"`` (see
    :class:`orthoplug.solvers.jobcd.JJOBCD`).
    """)
VRJJOBCD = _jobcd_optimizer("VRJJOBCD", """VR-J-JOBCD for pymanopt.

    pymanopt has no finite-sum interface: pass ``run(problem, oracle=FiniteSumOracle(...))`` with
    the component gradients (the problem's cost is still used for nothing else). Options:
    ``batch_size``, ``small_batch``, ``reset_probability``, ``sigma``, ``theta``.
    """)



# Solver front-ends live in private modules (one per solver family) and are re-exported here.
_FRONTENDS = {
    "OBCD": "_pymanopt_obcd",
    "RSDM": "_pymanopt_rsdm",
    "RSSM": "_pymanopt_rssm",
    "StiefelBlock": "_pymanopt_rssm",
}


def __getattr__(name):
    if name in _FRONTENDS:
        import importlib

        return getattr(importlib.import_module(f"{__package__}.{_FRONTENDS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
