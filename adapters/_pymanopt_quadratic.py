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

from pymanopt.optimizers.optimizer import Optimizer, OptimizerResult

from orthoplug.solvers.hyperbolic import HyperbolicEig as _Solver

from ._pymanopt_base import _n, _t, geometry_of

__all__ = ["HyperbolicEig"]


class HyperbolicEig(Optimizer):
    """Global minimiser of ``s·tr(XᵀCXD)`` over ``JOrthogonal`` / ``IndefiniteStiefel``
    (``s·C ≻ 0``, ``D`` diagonal ⪰ 0) by one pencil eigensolve
    (:class:`orthoplug.solvers.hyperbolic.HyperbolicEig`).

    Args:
        method: ``"auto"``, ``"dense"`` or ``"iterative"`` (see
            :func:`orthoplug.linalg.hyperbolic_trace_min`).
        tol: the iterative method's relative Ritz residual tolerance.
        maxiter: the iterative method's restart budget.
        verbosity: 0 silent, 1 prints a summary line.

    The result's ``log["optimizer_parameters"]`` holds the solver's ``info`` (``certificate``,
    ``certificate_gap``, ``eigenvalues``, ``method``, ``residual``); ``result.violation`` and
    ``result.solver_result`` as for the other orthoplug optimizers.
    """

    def __init__(self, method: str = "auto", tol: float = 1e-10, maxiter: int | None = None,
                 verbosity: int = 0):
        super().__init__(verbosity=verbosity)
        self.solver = _Solver(method=method, tol=tol, maxiter=maxiter)

    def run(self, problem, *, initial_point=None, oracle=None):
        """Solve ``problem`` (``initial_point`` is not used: the solve has no start) →
        ``OptimizerResult``.

        Raises:
            ValueError: an unsupported manifold, no ``oracle=`` with the quadratic (the message
                says what to pass), or a quadratic that is not ``s·C ≻ 0`` with diagonal ``D ⪰ 0``.
        """
        geometry = geometry_of(problem.manifold)
        if oracle is None or oracle.quadratic is None:
            raise ValueError("HyperbolicEig needs the cost as a known quadratic: "
                             "run(problem, oracle=QuadraticOracle(C, D, scale))")
        like = None if initial_point is None else _t(initial_point)
        res = self.solver.run(oracle, like, geometry)
        self._initialize_log(optimizer_parameters=res.info)
        if self._verbosity >= 1:
            print(f"{self.solver.name}: {res.stop_reason}, {res.time:.3g} s; cost "
                  f"{res.cost:.15g}, gap to the certificate {res.info['certificate_gap']:.2e}")
        result = OptimizerResult(point=_n(res.point), cost=res.cost, iterations=res.iterations,
                                 stopping_criterion=res.stop_reason, time=res.time,
                                 gradient_norm=res.gradient_norm, log=self._log)
        result.violation = res.violation
        result.solver_result = res
        return result
