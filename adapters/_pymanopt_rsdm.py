"""RSDM as a pymanopt optimizer (re-exported as ``orthoplug.adapters.pymanopt.RSDM``).

::

    import autograd.numpy as anp, pymanopt
    from pymanopt.manifolds import Stiefel
    from orthoplug.adapters.pymanopt import RSDM

    manifold = Stiefel(200, 20)
    @pymanopt.function.autograd(manifold)
    def cost(X):
        return -0.5 * anp.trace(X.T @ A @ X)
    result = RSDM(r=100, max_iterations=5000).run(pymanopt.Problem(manifold, cost))

Works on pymanopt's ``Stiefel``, ``Grassmann`` and ``SpecialOrthogonalGroup`` (as St(n, n): every
RSDM step has determinant +1). pymanopt's problems give full gradients; for RSDM-P's partial
gradients pass a structured oracle, ``run(problem, oracle=QuadraticOracle(A, scale=-0.5))`` or a
:class:`~orthoplug.oracles.rows.RowGradientOracle`. With ``batch_size=B`` the optimizer runs
:class:`~orthoplug.solvers.rsdm.StochasticRSDM` and needs ``oracle=`` a
:class:`~orthoplug.oracles.rows.StochasticOracle` or a
:class:`~orthoplug.oracles.core.FiniteSumOracle`.

The optimizer runs the core solver, whose step the geoopt optimizer
(:mod:`orthoplug.adapters.geoopt`) runs too: with the same seed, start and options (``step_size``
as ``lr``, no step as ``lr=None``, the same ``schedule``; for the stochastic variant a closure
that draws its minibatch as ``torch.randperm(N, generator=opt.generator(device))[:B]``), N
iterations here and N ``step(closure)`` calls there give the same iterates.
"""

from __future__ import annotations

from orthoplug.geometry.stiefel import GrassmannGeometry, StiefelGeometry
from orthoplug.solvers import rsdm

from ._pymanopt_base import SolverOptimizer

__all__ = ["RSDM"]


class RSDM(SolverOptimizer):
    """Riemannian random submanifold descent (RSDM-P / RSDM-O) for pymanopt problems.

    Args:
        r: slice dimension, ``2 ≤ r ≤ n``; default ``max(2, round(√(np)/2))``
            (:func:`~orthoplug.solvers.rsdm.default_slice_dimension`, as the geoopt optimizer).
        sampling: ``"permutation"`` (RSDM-P) or ``"orthogonal"`` (RSDM-O).
        step_size: fixed step η, or ``None`` (default): Armijo backtracking with memory, no
            tuning (for the stochastic variant: η = 1 with the ``schedule``, default constant).
        retraction: on O(r): ``"qr"``, ``"polar"``, ``"cayley"``, ``"exp"``.
        line_search: ``None``, ``"armijo"`` or ``"polar"``.
        batch_size: minibatch size for the stochastic variant (``None``: deterministic).
        **kwargs: pymanopt's ``max_time``, ``max_iterations``, ``min_gradient_norm``,
            ``verbosity``, ``log_verbosity``; orthoplug's ``seed``, ``eval_every``,
            ``stall_evaluations``; and the other options of
            :class:`~orthoplug.solvers.rsdm.RSDM` / :class:`~orthoplug.solvers.rsdm.StochasticRSDM`
            (``contraction``, ``schedule``, ``decay_time``, ...).
    """

    solver_class = rsdm.RSDM
    geometries = (StiefelGeometry, GrassmannGeometry)

    def __init__(self, r: int | None = None, sampling: str = "permutation", *,
                 step_size: float | None = None, retraction: str = "qr",
                 line_search: str | None = None, batch_size: int | None = None, **kwargs):
        if batch_size is not None:
            self.solver_class = rsdm.StochasticRSDM
            kwargs["batch_size"] = batch_size
        super().__init__(r=r, sampling=sampling, step_size=step_size, retraction=retraction,
                         line_search=line_search, **kwargs)
