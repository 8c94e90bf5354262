r"""Cayley L-BFGS: limited-memory BFGS on the J-orthogonal group in its Lie algebra.

The problem is ``min f(X)`` over ``O(J) = {XᵀJX = J}`` for a smooth ``f`` with a Euclidean
gradient (no Hessian needed). The method works in the left-trivialisation of the tangent
bundle: a tangent vector ``XΩ`` is stored as its algebra element ``Ω`` ∈ o(J) = {J S : S skew},
the metric is the Frobenius product of the algebra elements (the left-invariant metric of
:mod:`orthoplug.geometry.jorthogonal`) and vectors at different points are compared by left
translation, which is an isometry — so the secant pairs need no transport and BFGS is the
Euclidean one in o(J).

One iteration, with ``A = J skew(J Xᵀ ∇f(X))`` the left-translated Riemannian gradient:

1. pair update: ``s = t·D`` (the last step) and ``y = A − A_prev``; the pair is kept when
   ``⟨s, y⟩ > √ε ‖s‖‖y‖`` (curvature condition; else skipped), the oldest is dropped beyond
   ``memory`` pairs;
2. direction ``D = −H A`` from the compact representation of the L-BFGS inverse Hessian
   (Byrd, Nocedal and Schnabel 1994) with the scaling ``γ = ⟨s, y⟩/⟨y, y⟩`` of the newest pair;
   ``D = −A`` without pairs, and after a reset when ``D`` is no descent direction;
3. Armijo backtracking on ``t ↦ f(X cay(tD))`` from ``t = min(1, max_step/‖D‖_F)``
   (``cay(Ω) = (I − Ω/2)⁻¹(I + Ω/2)``; ``max_step`` keeps the first trial off the Cayley map's
   singularity at the eigenvalue 2 of Ω), accepting ``f(X⁺) ≤ f(X) + c·t⟨A, D⟩`` with
   ``f(X⁺) < f(X)`` (a step that rounding hides is no progress); a rejected trial
   shrinks t by the minimiser of the quadratic through ``f(X)``, the slope and the trial value,
   clamped to ``[t/10, t/2]``; a non-finite trial value counts as a rejection.
   If no trial is accepted the memory is cleared and the next iteration tries the gradient
   direction; if that fails too, f cannot decrease beyond its rounding and the run stops.

Feasibility: ``X⁺ = X cay(tD)`` with ``D = J·(skew matrix)`` exactly (two sign flips of the rows
of a skew matrix), so the factor lies in O(J) up to the rounding of one n×n solve; nothing is
projected.

Cost per iteration: one gradient (counted in ``gradient_evaluations``), one cost value per
line-search trial (usually one), one n×n solve and O(n³) products per trial, and
O(m n² + m³) for the direction with ``m`` pairs.

When to pick it: smooth f on square O(J) with gradients only (or with Hessians that cost several
gradients, as autodiff Hessian-vector products do), when high accuracy is wanted; it is
orthoplug's recommended solver for such problems. For ``tr(XᵀCX)`` with C ≻ 0 use
:class:`~orthoplug.solvers.hyperbolic.HyperbolicEig`; for costs with a cheap 2×2 block structure
the JOBCD family.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.linalg import solve_triangular

from orthoplug.geometry import jorthogonal as jo
from orthoplug.geometry.manifolds import JOrthogonalGeometry
from orthoplug.oracles import NonFiniteError

from .base import IterativeSolver, Run

__all__ = ["CayleyLBFGS", "lbfgs_direction"]

#: line-search trials per iteration before the memory is cleared
MAX_TRIALS = 40


def lbfgs_direction(a: torch.Tensor, s: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``H a`` for the L-BFGS inverse-Hessian approximation of the pairs ``(s_i, y_i)``.

    Compact form (Nocedal and Wright, eq. 7.24): with the pairs as rows of ``S, Y`` (oldest
    first), ``R`` the upper triangle of ``S Yᵀ``, ``Dg`` its diagonal and ``γ = ⟨s, y⟩/⟨y, y⟩`` of
    the newest pair, ``H a = γa + Sᵀ R⁻ᵀ((Dg + γ Y Yᵀ) w − γ Y a) − γ Yᵀ w`` with ``w = R⁻¹ S a``.
    It equals the two-loop recursion's result. The tensor work is two products with the
    ``2m × N`` matrix ``[S; Y]`` (its Gram matrix and its product with ``a``) and one back; the
    ``m × m`` algebra runs on the host in float64 (microseconds, one read-back).

    Args:
        a: the vector, any shape with ``N`` entries.
        s, y: ``(m, N)`` steps and gradient differences, every ``⟨s_i, y_i⟩ > 0``.
    """
    m = s.shape[0]
    flat = a.reshape(-1)
    w_mat = torch.cat((s, y))
    gram = torch.cat((w_mat @ w_mat.mT, (w_mat @ flat)[:, None]), dim=1).cpu().numpy()
    gram = gram.astype(np.float64, copy=False)
    sy, yy, sa, ya = gram[:m, m:2 * m], gram[m:, m:2 * m], gram[:m, -1], gram[m:, -1]
    r = np.triu(sy)
    gamma = sy[-1, -1] / yy[-1, -1]
    w = solve_triangular(r, sa)
    top = solve_triangular(r, (np.diag(np.diag(sy)) + gamma * yy) @ w - gamma * ya, trans=1)
    coef = torch.as_tensor(np.concatenate((top, -gamma * w)), dtype=a.dtype, device=a.device)
    return (gamma * flat + w_mat.mT @ coef).reshape(a.shape)


class CayleyLBFGS(IterativeSolver):
    """L-BFGS on O(J) in the Lie algebra with the Cayley retraction (see the module docstring
    for the iteration, its cost and when to pick it).

    Args:
        memory: number of secant pairs kept (``m ≥ 1``).
        max_step: largest Frobenius norm of the first trial step ``tD`` ∈ o(J) of an iteration.
        armijo: sufficient-decrease constant ``c`` ∈ (0, 1/2).
        stopping, eval_every, seed, log_verbosity, verbosity, callback, **criteria: as
            :class:`~orthoplug.solvers.base.IterativeSolver` (evaluations every iteration by
            default; the gradient of an evaluation is the one the next step uses).
    """

    name = "CayleyLBFGS"

    def __init__(self, *, memory: int = 10, max_step: float = 1.0, armijo: float = 1e-4,
                 **kwargs):
        if isinstance(memory, bool) or not isinstance(memory, int) or memory < 1:
            raise ValueError(f"memory must be an integer >= 1, got {memory!r}")
        if not max_step > 0:
            raise ValueError(f"max_step must be > 0, got {max_step!r}")
        if not 0 < armijo < 0.5:
            raise ValueError(f"armijo must lie in (0, 1/2), got {armijo!r}")
        super().__init__(**kwargs)
        self.memory = memory
        self.max_step = float(max_step)
        self.armijo = float(armijo)

    def prepare(self, oracle, x0, geometry):
        if not isinstance(geometry, JOrthogonalGeometry):
            raise ValueError(f"{self.name} runs on the square J-orthogonal group O(J) (its Lie "
                             f"algebra carries the secant pairs), got {geometry!r}; on the "
                             "indefinite Stiefel set use JJOBCD or pymanopt's "
                             "ConjugateGradient / TrustRegions")
        if x0.ndim != 2:
            raise ValueError(f"{self.name}: the solver takes one n×n matrix, got shape "
                             f"{tuple(x0.shape)}")
        return oracle

    def setup(self, run: Run) -> None:
        x = run.tracker.x
        run.pairs_s: list[torch.Tensor] = []
        run.pairs_y: list[torch.Tensor] = []
        run.last = None  # (step s, algebra gradient A) of the last accepted step
        run.curvature_tol = math.sqrt(torch.finfo(x.dtype).eps)
        run.trials = run.resets = run.skipped_pairs = 0

    def info(self, run: Run | None = None) -> dict:
        out = {"memory": self.memory, "max_step": self.max_step, "armijo": self.armijo}
        if run is not None:
            out.update(line_search_trials=run.trials, resets=run.resets,
                       skipped_pairs=run.skipped_pairs, pairs=len(run.pairs_s))
        return out

    def measure(self, run: Run) -> tuple[float, float, float]:
        """The base measures, with the gradient norm read off the algebra gradient (the metric
        is ``⟨XΩ₁, XΩ₂⟩ = tr(Ω₁ᵀΩ₂)``, so ``‖grad f‖ = ‖A‖_F``)."""
        tracker, geometry = run.tracker, run.geometry
        a = jo.algebra_gradient(geometry.j, tracker.x, tracker.gradient())
        return (float(tracker.value()), float(torch.linalg.matrix_norm(a)),
                float(geometry.violation(tracker.x)))

    def _store_pair(self, run: Run, a: torch.Tensor) -> None:
        """Keep ``(s, A − A_prev)`` of the last step if it has positive curvature."""
        if run.last is None:
            return
        s, a_prev = run.last
        y = (a - a_prev).reshape(-1)
        sy = float(s @ y)
        if sy > run.curvature_tol * float(torch.linalg.vector_norm(s)
                                          * torch.linalg.vector_norm(y)):
            run.pairs_s.append(s)
            run.pairs_y.append(y)
            if len(run.pairs_s) > self.memory:
                del run.pairs_s[0], run.pairs_y[0]
        else:
            run.skipped_pairs += 1

    def _reset(self, run: Run) -> None:
        run.pairs_s.clear()
        run.pairs_y.clear()
        run.resets += 1

    def step(self, run: Run) -> None:
        tracker, j = run.tracker, run.geometry.j
        x = tracker.x
        a = jo.algebra_gradient(j, x, tracker.gradient())
        self._store_pair(run, a)
        run.last = None
        for _ in range(2):
            if run.pairs_s:
                d = -lbfgs_direction(a, torch.stack(run.pairs_s), torch.stack(run.pairs_y))
            else:
                d = -a
            slope = float((a * d).sum())
            if not slope < 0:
                if not run.pairs_s:  # A = 0: X is stationary
                    run.finished = "zero gradient"
                    return
                self._reset(run)
                continue
            if self._line_search(run, d, slope, a):
                return
            if not run.pairs_s:
                break
            self._reset(run)
        run.finished = "line search: no decrease along the gradient beyond the cost's rounding"

    def _line_search(self, run: Run, d: torch.Tensor, slope: float, a: torch.Tensor) -> bool:
        """Armijo backtracking along ``t ↦ X cay(tD)``; moves the tracker and returns True on
        acceptance."""
        tracker = run.tracker
        x, f0 = tracker.x, float(tracker.value())
        t = min(1.0, self.max_step / float(torch.linalg.vector_norm(d)))
        for _ in range(MAX_TRIALS):
            run.trials += 1
            x_new = jo.cayley_step(x, t * d)
            try:
                value = tracker.oracle.value(x_new)
                f1 = float(value)
            except NonFiniteError:
                f1 = math.inf
            if f1 < f0 and f1 <= f0 + self.armijo * t * slope:
                run.last = ((t * d).reshape(-1), a)
                tracker.set_point(x_new, value=value)
                return True
            if math.isfinite(f1):
                curv = f1 - f0 - slope * t
                t_quad = -slope * t * t / (2.0 * curv) if curv > 0 else 0.5 * t
                t = min(0.5 * t, max(0.1 * t, t_quad))
            else:
                t *= 0.1
        return False
