r"""Shared parts of the OBCD paper's splitting baselines (LADMM, RADMM, PSM) for ``f + h``.

The three methods split ``min_{X ∈ St(n, r)} f(X) + h(X)`` as ``f(X) + h(Y)`` with ``X = Y``:
X stays on St(n, r) (a polar factor per iteration), ``Y`` carries h through its prox, and the
coupling is enforced by multipliers (:mod:`~orthoplug.baselines.ladmm`,
:mod:`~orthoplug.baselines.radmm`) or by a growing penalty (:mod:`~orthoplug.baselines.psm`).
Their iterates are feasible for neither constraint set at once: X is orthonormal, Y is sparse
(or nonnegative), and ``X = Y`` holds only in the limit.

What a run reports (the benchmark scores points of the feasible set): the orthonormal X,
except for an indicator h (nonnegativity), where X is rounded to the nearest point of the
feasible set with disjoint column supports
(:func:`~orthoplug.solvers.splitting.nonneg_rounding`). ``info["residual"]`` is
``‖X − Y‖_F`` at the end; ``info["y_objective"]`` and ``info["y_orthogonality"]`` give
``F(Y)`` and ``‖YᵀY − I‖_F`` of the (infeasible) sparse iterate, for comparison with papers that
report it. Cost per iteration: one full gradient ``∇f(X)`` (``O(n² r)`` for
``s·tr(XᵀCX)``), one polar factor (``O(n r²)``) and entrywise work.

Stationarity (the "gradient norm" of the run's history and of ``min_gradient_norm``):
``max(‖X − Y‖_F, ‖P_X(∇f(X) + Λ)‖_F)`` with ``P_X`` the tangent projection of St(n, r) and
``Λ ∈ ∂h(Y)`` the method's multiplier (:meth:`SplittingSolver.multiplier`): both vanish exactly
at a KKT point ``X = Y``, ``0 ∈ P_X(∇f(X) + ∂h(X))`` of ``min f + h`` on St(n, r). (The
splitting residual alone is 0 whenever the prox of h is the identity — h = 0 — at every
iterate, stationary or not.) The gradient at X is computed once per iteration and reused by
the next step.

The paper gives no parameters for these methods; the defaults (penalties as multiples of the
gradient's Lipschitz constant L) are ours and stated per class.
"""

from __future__ import annotations

import math

import torch

from orthoplug.geometry._linalg import sym
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.nonsmooth import SeparableTerm, Zero
from orthoplug.oracles import NonFiniteError, Oracle, all_finite
from orthoplug.solvers.base import IterativeSolver, Run, SolverResult
from orthoplug.solvers.splitting import linearised_x_step, nonneg_rounding

__all__ = ["SplittingSolver"]


class SplittingSolver(IterativeSolver):
    """Base of LADMM, RADMM and PSM: the ``(X, Y, Λ)`` state, the output point, the checks.

    Subclasses implement :meth:`iterate_splitting` (one iteration on ``run.x``, ``run.y``,
    ``run.lam`` given ``∇f(X)``). The run's tracker holds the reported point (:meth:`output`),
    kept up to date by :meth:`step`.

    Args:
        h: the separable term (:mod:`orthoplug.nonsmooth`).
        penalty: the coupling weight as a multiple of L (β = ρ = ``penalty · L``).
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options.

    Raises:
        ValueError: ``h`` not a separable term, ``penalty ≤ 0``; at run time, a geometry other
            than St(n, r), an oracle without a Lipschitz constant, or ``h(x0) = ∞`` (e.g.
            negative entries under the nonnegativity indicator).
    """

    name = "splitting"

    def __init__(self, h: SeparableTerm | None = None, *, penalty: float = 2.0, **kwargs):
        super().__init__(**kwargs)
        self.h = Zero() if h is None else h
        if not isinstance(self.h, SeparableTerm):
            raise ValueError(f"h must be a term of orthoplug.nonsmooth, got {h!r}")
        if not (math.isfinite(penalty) and penalty > 0):
            raise ValueError(f"penalty must be a finite number > 0, got {penalty!r}")
        self.penalty = float(penalty)

    def prepare(self, oracle: Oracle, x0: torch.Tensor, geometry) -> Oracle:
        if not isinstance(geometry, StiefelGeometry) or x0.ndim != 2:
            raise ValueError(f"{self.name} runs on one St(n, r) matrix")
        if not oracle.lipschitz:
            raise ValueError(f"{self.name} needs an oracle with a Lipschitz constant (its steps "
                             f"are 1/(L + β))")
        if not math.isfinite(float(self.h.value(torch.as_tensor(x0)))):
            raise ValueError(f"infeasible initial point for {self.h!r}: h(x0) = inf")
        return oracle

    def setup(self, run: Run) -> None:
        run.lip = float(run.oracle.lipschitz)
        run.beta = self.penalty * run.lip
        run.x = run.tracker.x.clone()
        run.y = self.h.prox(run.x, 1.0 / run.beta)
        run.lam = torch.zeros_like(run.x)
        run.grad_at = run.grad = None
        run.tracker.set_point(self.output(run))

    def output(self, run: Run) -> torch.Tensor:
        """The reported point: X, or its nonnegative rounding for an indicator h."""
        return nonneg_rounding(run.x) if self.h.is_indicator else run.x

    def measure(self, run: Run) -> tuple[float, float, float]:
        """Cost and violation at :meth:`output` (the tracker's point); the "gradient norm" slot
        holds the stationarity ``max(‖X − Y‖_F, ‖P_X(∇f(X) + Λ)‖_F)`` (module docstring)."""
        x = run.tracker.x
        cost = float(run.tracker.value()) + float(self.h.value(x))
        if not math.isfinite(cost):
            raise NonFiniteError("non-finite cost")
        d = self._gradient(run) + self.multiplier(run)
        tangent = d - run.x @ sym(run.x.mT @ d)
        stationarity = max(float(torch.linalg.norm(run.x - run.y)),
                           float(torch.linalg.norm(tangent)))
        return cost, stationarity, float(run.geometry.violation(x))

    def multiplier(self, run: Run) -> torch.Tensor:
        """``Λ ∈ ∂h(Y)`` (of the smoothed h for RADMM) at the current iterate: the ADMM
        multiplier ``run.lam``; the penalty method overrides it."""
        return run.lam

    @staticmethod
    def _gradient(run: Run) -> torch.Tensor:
        """``∇f(X)`` at the current X, computed (and counted) once per X."""
        if run.grad_at is not run.x:
            run.grad_at, run.grad = run.x, run.tracker.gradient_at(run.x)
        return run.grad

    def step(self, run: Run) -> None:
        g = self._gradient(run)
        self.iterate_splitting(run, g)
        if not (all_finite(run.x) and all_finite(run.y)):
            raise NonFiniteError(f"non-finite {self.name} iterate")
        run.tracker.set_point(self.output(run))

    def iterate_splitting(self, run: Run, g: torch.Tensor) -> None:  # pragma: no cover
        """One iteration of the method on ``run.x``, ``run.y``, ``run.lam`` given
        ``g = ∇f(X)`` (implemented by each subclass)."""
        raise NotImplementedError

    @staticmethod
    def x_step(run: Run, g: torch.Tensor, beta: float) -> torch.Tensor:
        """``polar(X − (∇f + Λ + β(X − Y))/(L + β))``: one linearised step on the augmented
        Lagrangian, projected onto St(n, r) (``Λ = 0`` for the penalty method)."""
        return linearised_x_step(run.x, run.y, run.lam, g, beta, run.lip)

    def finalize(self, run: Run, result: SolverResult) -> None:
        """``info["residual"]``, ``info["y_objective"]`` and ``info["y_orthogonality"]`` (see
        the module docstring); ``y_objective`` is NaN where f is not finite at Y (a run
        stopped on a non-finite value ends with its result, not an error)."""
        y = run.y
        gram = y.mT @ y - torch.eye(y.shape[1], dtype=y.dtype, device=y.device)
        try:
            y_objective = float(run.oracle.value(y)) + float(self.h.value(y))
        except NonFiniteError:
            y_objective = math.nan
        result.info.update(residual=float(torch.linalg.norm(run.x - y)),
                           y_objective=y_objective,
                           y_orthogonality=float(torch.linalg.norm(gram)))

    def info(self, run: Run | None = None) -> dict:
        return {"h_term": repr(self.h), "penalty": self.penalty,
                "beta": None if run is None else run.beta}
