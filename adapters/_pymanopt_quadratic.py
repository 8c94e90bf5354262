"""``HyperbolicEig`` as a pymanopt optimizer (re-exported as
``orthoplug.adapters.pymanopt.HyperbolicEig``)::

    import pymanopt
    from orthoplug import QuadraticOracle
    from orthoplug.adapters.pymanopt import HyperbolicEig, IndefiniteStiefel

    manifold = IndefiniteStiefel(200, 20, p=120, k_plus=12)
    problem = pymanopt.Problem(manifold, cost)        # cost = tr(XᵀCX), any backend
    result = HyperbolicEig().run(problem, oracle=QuadraticOracle(C))
    result.log["optimizer_parameters"]["certificate_gap"]   # ≈ 1e-15 relative

The cost must be given as the quadratic it is (``oracle=QuadraticOracle(C, D, scale)``, as for the
other optimizers' fast paths): a direct solve cannot read ``C`` out of a general cost function.
geoopt has no counterpart: a direct solve is not a step method on a ``ManifoldParameter`` (call
:func:`orthoplug.linalg.hyperbolic_trace_min` and copy the result into the parameter).
"""

from __future__ import annotations

from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry, JOrthogonalGeometry
from orthoplug.solvers import hyperbolic

from ._pymanopt_base import SolverOptimizer

__all__ = ["HyperbolicEig"]


class HyperbolicEig(SolverOptimizer):
    """Global minimiser of ``s·tr(XᵀCXD)`` over ``JOrthogonal`` / ``IndefiniteStiefel``
    (``s·C ≻ 0``, ``D`` diagonal ⪰ 0) by one pencil eigensolve
    (:class:`orthoplug.solvers.hyperbolic.HyperbolicEig`).

    ``run(problem, oracle=QuadraticOracle(C, D, scale))``; without the quadratic oracle the run
    raises ``ValueError`` saying so. ``initial_point`` is not used (the solve has no start). The
    result's ``log["optimizer_parameters"]`` holds the solver's ``info`` (``certificate``,
    ``certificate_gap``, ``eigenvalues``, ``method``, ``residual``).

    Args:
        method: ``"auto"``, ``"dense"`` or ``"iterative"`` (see
            :func:`orthoplug.linalg.hyperbolic_trace_min`).
        tol: the iterative method's relative Ritz residual tolerance.
        maxiter: the iterative method's restart budget.
        verbosity: 0 silent, 1 prints a summary line.
    """

    solver_class = hyperbolic.HyperbolicEig
    geometries = (JOrthogonalGeometry, IndefiniteStiefelGeometry)
    needs_initial_point = False

    def __init__(self, method: str = "auto", tol: float = 1e-10, maxiter: int | None = None,
                 verbosity: int = 0):
        self._solver_options = dict(method=method, tol=tol, maxiter=maxiter)
        super().__init__(verbosity=verbosity)

    def make_solver(self):
        """A :class:`orthoplug.solvers.hyperbolic.HyperbolicEig` with this optimizer's options."""
        return self.solver_class(**self._solver_options)
