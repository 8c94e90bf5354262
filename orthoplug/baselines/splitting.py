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
(:func:`~orthoplug.solvers.obcd_layer.nonneg_rounding`). ``info["residual"]`` is
``‖X − Y‖_F`` at the end; ``info["y_objective"]`` and ``info["y_orthogonality"]`` give
``F(Y)`` and ``‖YᵀY − I‖_F`` of the (infeasible) sparse iterate, for comparison with papers that
report it. Cost per iteration: one full gradient ``∇f(X)`` (``O(n² r)`` for
``s·tr(XᵀCX)``), one polar factor (``O(n r²)``) and entrywise work.

The paper gives no parameters for these methods; the defaults (penalties as multiples of the
gradient's Lipschitz constant L) are ours and stated per class.
"""

from __future__ import annotations

import math

import torch

from orthoplug.geometry.stiefel import StiefelGeometry, polar
from orthoplug.nonsmooth import SeparableTerm, Zero
from orthoplug.oracles import NonFiniteError
from orthoplug.solvers.base import IterativeSolver
from orthoplug.solvers.obcd_layer import nonneg_rounding

__all__ = ["SplittingSolver"]


class SplittingSolver(IterativeSolver):
    """Base of LADMM, RADMM and PSM: the ``(X, Y, Λ)`` state, the output point, the checks.

    Subclasses implement :meth:`iterate_splitting` (one iteration on ``self.x``, ``self.y``,
    ``self.lam`` given ``∇f(X)``).

    Args:
        h: the separable term (:mod:`orthoplug.nonsmooth`).
        penalty: the coupling weight as a multiple of L (β = ρ = ``penalty · L``).
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options.

    Raises:
        ValueError: ``h`` not a separable term, ``penalty ≤ 0``; at run time, a geometry other
            than St(n, r) or an oracle without a Lipschitz constant.
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
        self.x = self.y = self.lam = None

    def setup(self, tracker, geometry, generator):
        if not isinstance(geometry, StiefelGeometry) or tracker.x.ndim != 2:
            raise ValueError(f"{self.name} runs on one St(n, r) matrix")
        lip = tracker.oracle.lipschitz
        if not lip:
            raise ValueError(f"{self.name} needs an oracle with a Lipschitz constant (its steps "
                             f"are 1/(L + β))")
        self.oracle, self.lip = tracker.oracle, float(lip)
        self.beta = self.penalty * self.lip
        self.x = tracker.x.clone()
        self.y = self.h.prox(self.x, 1.0 / self.beta)
        self.lam = torch.zeros_like(self.x)

    def output(self) -> torch.Tensor:
        """The reported point: X, or its nonnegative rounding for an indicator h."""
        return nonneg_rounding(self.x) if self.h.is_indicator else self.x

    def measure(self, tracker, geometry):
        """Cost and violation at :meth:`output`; the "gradient norm" slot holds the splitting
        residual ``‖X − Y‖_F`` (∞ before the first iteration)."""
        if self.x is not None:
            tracker.set_point(self.output())
        x = tracker.x
        cost = float(tracker.value()) + float(self.h.value(x))
        if not math.isfinite(cost):
            raise NonFiniteError("non-finite cost")
        residual = math.inf if self.x is None else float(torch.linalg.norm(self.x - self.y))
        return cost, residual, float(geometry.violation(x))

    def step(self, tracker, geometry, generator):
        g = self.oracle.gradient(self.x)
        self.iterate_splitting(g)
        if not bool(torch.isfinite(self.x).all() and torch.isfinite(self.y).all()):
            raise NonFiniteError(f"non-finite {self.name} iterate")

    def iterate_splitting(self, g: torch.Tensor) -> None:  # pragma: no cover - abstract
        """One iteration of the method on ``self.x``, ``self.y``, ``self.lam`` given
        ``g = ∇f(X)`` (implemented by each subclass)."""
        raise NotImplementedError

    def x_step(self, g: torch.Tensor, beta: float) -> torch.Tensor:
        """``polar(X − (∇f + Λ + β(X − Y))/(L + β))``: one linearised step on the augmented
        Lagrangian, projected onto St(n, r) (``Λ = 0`` for the penalty method)."""
        d = g + self.lam + beta * (self.x - self.y)
        return polar(self.x - d / (self.lip + beta))

    def run(self, oracle, x0, geometry):
        """As :meth:`IterativeSolver.run`, with ``info["residual"]``, ``info["y_objective"]``
        and ``info["y_orthogonality"]`` (see the module docstring).

        Raises:
            ValueError: as :class:`SplittingSolver` (geometry, Lipschitz constant), an
                infeasible or misshapen ``x0``, or ``h(x0) = ∞`` (e.g. negative entries under
                the nonnegativity indicator).
        """
        self.x = self.y = self.lam = None
        if not math.isfinite(float(self.h.value(torch.as_tensor(x0)))):
            raise ValueError(f"infeasible initial point for {self.h!r}: h(x0) = inf")
        res = super().run(oracle, x0, geometry)
        y = self.y
        gram = y.mT @ y - torch.eye(y.shape[1], dtype=y.dtype, device=y.device)
        res.info.update(residual=float(torch.linalg.norm(self.x - y)),
                        y_objective=float(oracle.value(y)) + float(self.h.value(y)),
                        y_orthogonality=float(torch.linalg.norm(gram)))
        return res

    def info(self):
        return {"h_term": repr(self.h), "penalty": self.penalty,
                "beta": getattr(self, "beta", None)}
