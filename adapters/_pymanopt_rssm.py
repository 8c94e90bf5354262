"""pymanopt front-ends for RSSM: the ``RSSM`` optimizer and the ``StiefelBlock`` manifold.

``RSSM`` runs :class:`orthoplug.solvers.rssm.RSSM` on a ``pymanopt.Problem`` over pymanopt's
``Stiefel`` (or ``Grassmann`` representatives / ``SpecialOrthogonalGroup``)::

    import autograd.numpy as anp, pymanopt
    from orthoplug.adapters.pymanopt import RSSM

    manifold = pymanopt.manifolds.Stiefel(n, p)
    @pymanopt.function.autograd(manifold)
    def cost(X):                       # ℓ1 objective: autograd gives sign(·) with sign(0) = 0
        return anp.sum(anp.abs(Y.T @ X)) / m
    result = RSSM(num_blocks=8, max_iterations=5000).run(
        pymanopt.Problem(manifold, cost))

The problem's autodiff gradient is used as the subgradient (valid for piecewise-smooth costs:
autograd and torch differentiate ``abs`` as ``sign`` with ``sign(0) = 0``). For ``f + h`` give a
smooth cost and ``RSSM(h=orthoplug.nonsmooth.L1(mu))``; for the cheap column oracles of
:mod:`orthoplug.problems.nonsmooth_problems` pass ``run(problem, oracle=...)``.

An iteration is about one full subgradient's work, as in the core solver: the problem's
gradient is a full one, so here one iteration is one block step; with a column oracle
(``run(problem, oracle=...)``) it is ``⌈ℓ/2⌉`` block steps, one pass over the columns.

``StiefelBlock(X, columns)`` is the submanifold block ``{Y ∈ St(n, |C|) : X_Rᵀ Y = 0}``: the
columns C of the Stiefel point X as the variable, the other columns fixed. Any pymanopt optimizer
then optimises one block with the rest frozen::

    block = StiefelBlock(X, columns=[0, 3, 4])
    @pymanopt.function.autograd(block)
    def cost(Y):
        return full_cost(block.assemble(Y))     # assemble: autograd-friendly
    Y = pymanopt.optimizers.ConjugateGradient().run(
        pymanopt.Problem(block, cost), initial_point=block.initial_point()).point
    X_new = block.assemble(Y)                   # still on St(n, p); X[:, R] bit-for-bit kept
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.geometry.stiefel_block import StiefelBlockGeometry
from orthoplug.nonsmooth import SeparableTerm
from orthoplug.oracles import ColumnOracle
from orthoplug.solvers import rssm as _rssm
from orthoplug.solvers.step_rules import StepRule

from ._pymanopt_base import SolverOptimizer, _GeometryManifold, _n, _t

__all__ = ["RSSM", "StiefelBlock"]


class RSSM(SolverOptimizer):
    """RSSM (randomized submanifold subgradient method) as a pymanopt optimizer
    (:class:`orthoplug.solvers.rssm.RSSM`: the math and the rules of every option).

    The result carries ``solver_result`` (history with ``best_cost``; info with ``best_cost``,
    ``best_iteration``) and ``violation``.

    Args:
        num_blocks: ℓ, the number of column blocks (``None``: ``min(4, p)``).
        blocks: an explicit partition of the columns (instead of ``num_blocks``).
        project_step: project the step off the fixed columns before the polar factor.
        refresh_every: re-orthonormalise the iterate (``polar(X)``) every this many
            block steps (0: never).
        pairs: how the block pairs are drawn: ``"uniform"`` or ``"matching"``.
        step_size: the step rule: an object of :mod:`orthoplug.solvers.step_rules`
            (``Polyak``, ``Diminishing``, ``Constant``, ``Geometric``, ``GeometricOnStall``), a
            number γ₀ (``Diminishing(γ₀)``) or a rule name; default ``"polyak"``.
        h: a term of :mod:`orthoplug.nonsmooth` added to the problem's cost.
        return_best: return the best point seen rather than the last.
        final_prox: with a separable ``h``, end with the proximal pass that sets exact zeros.
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = _rssm.RSSM
    geometries = (StiefelGeometry,)

    def __init__(self, *, num_blocks: int | None = None,
                 blocks: Sequence[Sequence[int]] | None = None, project_step: bool = True,
                 refresh_every: int = 0, pairs: str = "uniform",
                 step_size: StepRule | float | str = "polyak",
                 h: SeparableTerm | None = None, return_best: bool = False,
                 final_prox: bool = True,
                 max_time: float = 1000, max_iterations: int = 1000,
                 min_gradient_norm: float = 1e-6, verbosity: int = 0, log_verbosity: int = 0,
                 seed: int | None = None, eval_every: int | None = None,
                 stall_evaluations: int = 0, stall_tolerance: float = 1e-15,
                 target_cost: float | None = None):
        super().__init__(max_time=max_time, max_iterations=max_iterations,
                         min_gradient_norm=min_gradient_norm, verbosity=verbosity,
                         log_verbosity=log_verbosity, seed=seed, eval_every=eval_every,
                         stall_evaluations=stall_evaluations, stall_tolerance=stall_tolerance,
                         target_cost=target_cost,
                         num_blocks=num_blocks, blocks=blocks, project_step=project_step,
                         refresh_every=refresh_every, pairs=pairs, step_size=step_size,
                         h=h, return_best=return_best, final_prox=final_prox)

    def oracle_for(self, problem):
        """A :class:`~orthoplug.oracles.columns.ColumnOracle` (column access) from the problem's
        cost and Euclidean gradient.
        """
        return ColumnOracle(lambda x: problem.cost(_n(x)),
                                  lambda x: _t(problem.euclidean_gradient(_n(x))))


class StiefelBlock(_GeometryManifold):
    """A submanifold block of St(n, p): columns C of ``point`` variable, the others fixed.

    Args:
        point: a point X of St(n, p) (numpy array).
        columns: the variable columns C.

    Points are ``n × |C|`` arrays Y with ``YᵀY = I`` and ``X_RᵀY = 0``; the metric is Euclidean,
    the retraction the polar projection onto the block (with re-orthogonalisation against the
    fixed columns); the Riemannian Hessian is exact (TrustRegions works). See
    :class:`orthoplug.geometry.stiefel_block.StiefelBlockGeometry`.
    """

    def __init__(self, point, columns):
        geometry = StiefelBlockGeometry(_t(point), columns)
        super().__init__(geometry, 1.0)
        p = geometry.p
        sel = np.zeros((geometry.q, p))
        sel[np.arange(geometry.q), geometry.columns.numpy()] = 1.0
        self._select = sel
        full = np.zeros((geometry.n, p))
        full[:, geometry.rest.numpy()] = geometry.fixed.numpy()
        self._fixed_full = full

    @property
    def columns(self) -> np.ndarray:
        """The indices of the variable columns C."""
        return self.geometry.columns.numpy().copy()

    @property
    def typical_dist(self) -> float:
        return math.sqrt(self.geometry.q)

    def initial_point(self) -> np.ndarray:
        """The columns C of the point given at construction."""
        return _n(self.geometry.initial_point)

    def assemble(self, y):
        """The full n × p point with ``y`` in columns C (works inside autograd costs).

        numpy/autograd input: ``y S + X_fixed`` with a 0/1 selection matrix S (``O(n |C| p)``);
        torch input: indexed assembly (differentiable).
        """
        if isinstance(y, torch.Tensor):
            return self.geometry.assemble(y)
        return y @ self._select + self._fixed_full

    def exp(self, point, tangent_vector):
        raise NotImplementedError("StiefelBlock: no exponential map; use retraction")

    def violation(self, point) -> float:
        """``(‖YᵀY − I‖_F² + 2‖X_RᵀY‖_F²)^{1/2}``."""
        return float(self.geometry.violation(_t(point)))
