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
   (Byrd, Nocedal and Schnabel 1994) started from ``H₀ = γ_k P_k + γ_p P_p`` on the Cartan
   decomposition ``o(J) = k ⊕ p``: ``P_k Ω = skew(Ω)`` keeps the entries with ``J_i = J_j``
   (the rotations, the algebra of O(p) × O(q)), ``P_p Ω = sym(Ω)`` those with ``J_i ≠ J_j``
   (the boosts), and each ``γ = Σ_i ⟨s_i, P y_i⟩ / Σ_i ‖P y_i‖²`` is the Barzilai–Borwein ratio
   of the stored pairs' parts in that block (:class:`LBFGSMemory`; one block, ``γ I``, on
   O(n)). Rule: f's curvature along boosts and along rotations can differ by a large factor
   (boosts stretch X, rotations do not), and a scalar ``H₀`` leaves that gap to the ``m``
   pairs; on the Lorentz group O(1, n − 1) the ``n − 1`` boosts are a small share of the
   ``n(n − 1)/2`` directions, so one scalar fits the rotations and misses the boosts. For a
   cost whose Hessian is a scalar on each block, ``H₀`` is its exact inverse.
   ``D = −A`` without pairs, and after a reset when ``D`` is no descent direction;
3. Armijo backtracking on ``t ↦ f(X cay(tD))`` from ``t = min(1, max_step/‖D‖_F)``
   (``cay(Ω) = (I − Ω/2)⁻¹(I + Ω/2)``; ``max_step`` keeps the first trial off the Cayley map's
   singularity at the eigenvalue 2 of Ω), accepting ``f(X⁺) ≤ f(X) + c·t⟨A, D⟩`` with
   ``f(X⁺) < f(X)`` (a step that rounding hides is no progress); a rejected trial
   shrinks t by the minimiser of the quadratic through ``f(X)``, the slope and the trial value,
   clamped to ``[t/10, t/2]``; a non-finite trial value counts as a rejection. The search gives
   up after :data:`MAX_TRIALS` trials or once the predicted decrease ``t|⟨A, D⟩|`` is below the
   rounding ``ε·max(1, |f(X)|)`` of the cost.
   If no trial is accepted the memory is cleared and the next iteration tries the gradient
   direction; if that fails too, f cannot decrease beyond its rounding and the run stops.

Feasibility: ``X⁺ = X cay(tD)`` with ``D = J·(skew matrix)`` exactly (two sign flips of the rows
of a skew matrix), so the factor lies in O(J) up to the rounding of one n×n solve; nothing is
projected.

Cost per iteration: one gradient (counted in ``gradient_evaluations``), one cost value per
line-search trial (usually one), one n×n solve and O(n³) products per trial, and
O(m n²) for the direction and O(m n² + m³) for a new pair with ``m`` pairs (its host part, the
products and the middle matrix, in one compiled call). The violation ``mean |XᵀJX − J|`` (an
n×n product) is computed every :data:`FEASIBILITY_EVERY` iterations and at the result's point,
not at every evaluation.

When to pick it: smooth f on square O(J) with gradients only (or with Hessians that cost several
gradients, as autodiff Hessian-vector products do), when high accuracy is wanted; it is
orthoplug's recommended solver for such problems. For ``tr(XᵀCX)`` with C ≻ 0 use
:class:`~orthoplug.solvers.hyperbolic.HyperbolicEig`; for costs with a cheap 2×2 block structure
the JOBCD family.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import numpy as np
import torch

from orthoplug.geometry import jorthogonal as jo
from orthoplug.geometry.manifolds import JOrthogonalGeometry
from orthoplug.kernels.lbfgs import lbfgs_pair_update
from orthoplug.oracles import NonFiniteError

from .base import IterativeSolver, Run, SolverResult

__all__ = ["CayleyLBFGS", "LBFGSMemory", "cartan_blocks", "check_options", "lbfgs_iteration",
           "armijo_search"]

#: line-search trials per iteration before the memory is cleared
MAX_TRIALS = 40
#: iterations between two computations of the violation ``mean |XᵀJX − J|`` (an n×n product);
#: the Cayley step keeps X on O(J) to the rounding of one solve, so the violation changes by
#: rounding per iteration; it is also computed at the start and for the result
FEASIBILITY_EVERY = 10


def cartan_blocks(parts: list[tuple[torch.Tensor, int]], like: torch.Tensor
                  ) -> torch.Tensor | None:
    """The 0/1 masks of the Cartan blocks of o(J) over stacked algebra coordinates: entries with
    ``J_i = J_j`` (rotations, the skew part of Ω) and with ``J_i ≠ J_j`` (boosts, the
    symmetric part), for :class:`LBFGSMemory`'s ``blocks``.

    Args:
        parts: ``(j, matrices)`` per stacked part: the ±1 signature vector of an n×n algebra
            coordinate block and how many such n×n matrices follow each other.
        like: a tensor with the dtype and device of the masks.

    Returns:
        ``(2, N)`` masks, or None when there is no boost (O(n): one block).
    """
    boost = torch.cat([(j[:, None] != j[None, :]).reshape(-1).repeat(matrices)
                       for j, matrices in parts]).to(dtype=like.dtype, device=like.device)
    return torch.stack((1 - boost, boost)) if bool(boost.any()) else None


class LBFGSMemory:
    """The last ``memory`` secant pairs ``(s_i, y_i)`` and the L-BFGS product ``H a``.

    The initial inverse Hessian is a scalar per block, ``H₀ = Σ_b γ_b P_b``, for coordinate
    blocks given by 0/1 masks ``P_b`` that partition the ``N`` coordinates (one block without
    masks), with the Barzilai–Borwein ratio of the stored pairs' parts in the block,
    ``γ_b = Σ_i ⟨s_i, P_b y_i⟩ / Σ_i ‖P_b y_i‖²`` (a block where this is not positive takes
    ``⟨s, y⟩/⟨y, y⟩`` of the newest pair).

    Pair ``i`` (oldest first) is stored as the rows ``s_i, P_1 y_i, …, P_B y_i`` of a buffer
    ``W`` (a window of ``(1 + B)k`` rows of a buffer of ``2m`` pairs, allocated at the first
    pair; the window moves by one pair when the oldest is dropped and is copied to the front
    when it reaches the end, once per ``m`` pairs). The products ``⟨s_i, y_j⟩`` and
    ``⟨P_b y_i, P_b y_j⟩`` are kept on the host in float64 and extended by one product
    ``W [s; P_b y]ᵀ`` per new pair, from which :meth:`add` forms (in one compiled call,
    :func:`~orthoplug.kernels.lbfgs.lbfgs_pair_update`) the matrix ``M`` of the compact
    representation (Byrd, Nocedal and Schnabel 1994, Theorem 2.2, for a general ``H₀``),
    ``H a = H₀ a + Wᵀ M W a``: for ``R`` the upper triangle of ``S Yᵀ`` and ``Dg`` its diagonal,
    ``M_SS = R⁻ᵀ(Dg + Σ_b γ_b (P_b Y)(P_b Y)ᵀ)R⁻¹``, ``M_{S,b} = −γ_b R⁻ᵀ``,
    ``M_{b,S} = −γ_b R⁻¹`` and zero blocks between the ``P_b Y``. This equals the two-loop
    recursion started from ``H₀``; a direction costs two products with W and no host work.

    Args:
        memory: the number of pairs kept (``m``).
        blocks: ``(B, N)`` 0/1 masks of the blocks of ``H₀`` (every coordinate in exactly one),
            or None for one block (``H₀ = γI``).
    """

    def __init__(self, memory: int, blocks: torch.Tensor | None = None):
        self.memory = memory
        self.blocks = blocks
        self.width = 2 if blocks is None else 1 + blocks.shape[0]  # rows per pair in W
        self.buffer: torch.Tensor | None = None  # (2m, 1 + B, N)
        self.first = 0  # buffer index of the oldest stored pair
        self.count = 0  # pairs stored
        # host products by buffer index (the window [first, first + count) is in use):
        # ⟨s_i, y_j⟩ for i ≤ j (R; zero below the diagonal), ⟨P_b y_i, P_b y_j⟩, ⟨s_i, P_b y_i⟩
        self.sy = np.zeros((2 * memory, 2 * memory))
        self.yy = np.zeros((self.width - 1, 2 * memory, 2 * memory))
        self.syd = np.zeros((self.width - 1, 2 * memory))
        self.middle: torch.Tensor | None = None  # M, rows and columns as those of W
        self.h0: torch.Tensor | float = 1.0  # H₀ as a scalar or an N-vector

    def __len__(self) -> int:
        return self.count

    def clear(self) -> None:
        """Forget every pair (the buffer is kept for reuse)."""
        self.first = self.count = 0

    def _window(self) -> torch.Tensor:
        """W: the stored pairs' rows, oldest first (a view)."""
        return self.buffer[self.first:self.first + self.count].reshape(-1,
                                                                       self.buffer.shape[-1])

    def add(self, s: torch.Tensor, y: torch.Tensor, tol: float = 0.0) -> bool:
        """Append the pair ``(s, y)`` (flat) if ``⟨s, y⟩ > tol·‖s‖‖y‖`` (the curvature
        condition; the solvers pass ``tol = √ε`` of the dtype), dropping the oldest beyond
        ``memory``; return whether it was kept. The three numbers come from the new pair's
        products with the window (computed for the pair anyway)."""
        m, w = self.memory, self.width
        if self.buffer is None:
            self.buffer = torch.zeros(2 * m, w, s.numel(), dtype=s.dtype, device=s.device)
        a, k = self.first, self.count
        if a + k == 2 * m:  # window at the end: to the front
            self.buffer[:k] = self.buffer[a:].clone()
            self.sy[:k, :k] = self.sy[a:, a:]
            self.yy[:, :k, :k] = self.yy[:, a:, a:]
            self.syd[:, :k] = self.syd[:, a:]
            self.first = a = 0
        i = a + k  # buffer index of the new pair
        new = self.buffer[i]
        new[0] = s
        if self.blocks is None:
            new[1] = y
        else:
            torch.mul(y, self.blocks, out=new[1:])
        if k == m:  # the oldest is dropped if the pair is kept
            a += 1
        k = i + 1 - a
        cross = (self.buffer[a:i + 1].reshape(-1, new.shape[-1]) @ new.mT).to(
            "cpu", torch.float64).numpy().reshape(k, w, w)
        ss, sy, yy = cross[-1, 0, 0], cross[-1, 0, 1:].sum(), cross[-1, 1:, 1:].trace()
        if not sy > tol * math.sqrt(ss * yy):
            return False
        self.first, self.count = a, k
        mid, gammas = lbfgs_pair_update(self.sy, self.yy, self.syd, a, k, cross)
        self.middle = torch.as_tensor(mid, dtype=s.dtype, device=s.device)
        if self.blocks is None:
            self.h0 = float(gammas[0])
        else:  # Σ_b γ_b P_b (exact: each entry is one γ)
            self.h0 = (torch.as_tensor(gammas, dtype=s.dtype, device=s.device)[:, None]
                       * self.blocks).sum(0)
        return True

    def state_dict(self) -> dict:
        """A copy of the memory in torch tensors and plain data (``torch.load`` with
        ``weights_only=True`` reads it); :meth:`load_state_dict` restores it exactly."""
        out: dict = {"host": []}
        for key, value in vars(self).items():
            if isinstance(value, np.ndarray):
                out["host"].append(key)
                value = torch.from_numpy(value.copy())
            out[key] = value.clone() if torch.is_tensor(value) else copy.copy(value)
        return out

    def load_state_dict(self, state: dict) -> None:
        """Restore a :meth:`state_dict`."""
        host = state["host"]
        for key, value in state.items():
            if key != "host":
                value = value.clone() if torch.is_tensor(value) else copy.copy(value)
                setattr(self, key, value.numpy() if key in host else value)

    def direction(self, a: torch.Tensor) -> torch.Tensor:
        """``H a`` (any shape with ``N`` entries; at least one pair stored)."""
        flat = a.reshape(-1)
        w = self._window()
        return torch.addmv(self.h0 * flat, w.mT, self.middle @ (w @ flat)).reshape(a.shape)


def check_options(memory: int, max_step: float, sufficient_decrease: float) -> None:
    """Refuse bad options of Cayley L-BFGS (both front-ends), naming the option.

    Raises:
        ValueError: ``memory`` not an integer ≥ 1, ``max_step`` not > 0 or
            ``sufficient_decrease`` outside (0, 1/2) (NaN included).
    """
    if isinstance(memory, bool) or not isinstance(memory, int) or memory < 1:
        raise ValueError(f"memory must be an integer >= 1, got {memory!r}")
    if not max_step > 0:
        raise ValueError(f"max_step must be > 0, got {max_step!r}")
    if not 0 < sufficient_decrease < 0.5:
        raise ValueError("sufficient_decrease must lie in (0, 1/2), got "
                         f"{sufficient_decrease!r}")


def lbfgs_iteration(memory: LBFGSMemory, a: torch.Tensor, max_step: float,
                    search: Callable[[torch.Tensor, float, float], bool],
                    scale: torch.Tensor | None = None) -> tuple[str | None, int]:
    """Direction, reset rule and line search of one iteration, from the algebra gradient ``a``.

    ``D = −H a`` (``−a`` without pairs) is scaled by ``scale`` where given (entrywise, e.g. a
    per-parameter factor), its first trial ``t₀ = min(1, max_step/‖D‖_F)`` taken before the
    scaling; ``search(D, ⟨a, D⟩, t₀)`` moves the point and returns True, or returns False
    leaving it. When ``D`` is no descent direction, or its search fails, the memory is cleared
    (a reset) and the gradient direction is tried once.

    Returns:
        ``(None, resets)`` after a move, else ``(why the run stops, resets)``: a zero (scaled)
        gradient, or no decrease along the gradient beyond the cost's rounding.
    """
    resets = 0
    for _ in range(2):
        d = -memory.direction(a) if memory else -a
        first = min(1.0, max_step / float(torch.linalg.vector_norm(d)))
        if scale is not None:
            d = d * scale
        slope = float((a * d).sum())
        if not slope < 0:
            if not memory:  # A = 0 (where scaled): X is stationary
                return "zero gradient", resets
            memory.clear()
            resets += 1
            continue
        if search(d, slope, first):
            return None, resets
        if not memory:
            break
        memory.clear()
        resets += 1
    return "line search: no decrease along the gradient beyond the cost's rounding", resets


def armijo_search(f0: float, slope: float, t: float, trial: Callable[[float], float],
                  sufficient_decrease: float, eps: float) -> tuple[float | None, int]:
    """Armijo backtracking from the first trial ``t``; ``trial(t)`` puts the point at
    ``X cay(tD)`` and returns its cost (``inf`` if not finite).

    Accepts ``f(X⁺) < f(X)`` with ``f(X⁺) ≤ f(X) + c·t·slope``; a rejected finite trial shrinks
    t by the minimiser of the quadratic through ``f(X)``, the slope and the trial value, clamped
    to ``[t/10, t/2]``, a non-finite one by 10. Gives up after :data:`MAX_TRIALS` trials or
    once ``t|slope|`` is below the rounding ``eps·max(1, |f(X)|)`` of the cost.

    Returns:
        ``(accepted t or None, trials made)``; the point is at the last trial.
    """
    rounding = eps * max(1.0, abs(f0))
    for trials in range(MAX_TRIALS):
        if -t * slope < rounding:  # no trial this short can show a decrease
            return None, trials
        f1 = trial(t)
        if f1 < f0 and f1 <= f0 + sufficient_decrease * t * slope:
            return t, trials + 1
        if math.isfinite(f1):
            curv = f1 - f0 - slope * t
            t_quad = -slope * t * t / (2.0 * curv) if curv > 0 else 0.5 * t
            t = min(0.5 * t, max(0.1 * t, t_quad))
        else:
            t *= 0.1
    return None, MAX_TRIALS


class CayleyLBFGS(IterativeSolver):
    """L-BFGS on O(J) in the Lie algebra with the Cayley retraction (see the module docstring
    for the iteration, its cost and when to pick it).

    Args:
        memory: number of secant pairs kept (``m ≥ 1``).
        max_step: largest Frobenius norm of the first trial step ``tD`` ∈ o(J) of an iteration.
        sufficient_decrease: sufficient-decrease constant ``c`` ∈ (0, 1/2).
        stopping, eval_every, seed, log_verbosity, verbosity, callback, ``**criteria``: as
            :class:`~orthoplug.solvers.base.IterativeSolver` (evaluations every iteration by
            default; the gradient of an evaluation is the one the next step uses).
    """

    name = "CayleyLBFGS"

    def __init__(self, *, memory: int = 10, max_step: float = 1.0,
                 sufficient_decrease: float = 1e-4, **kwargs):
        check_options(memory, max_step, sufficient_decrease)
        super().__init__(**kwargs)
        self.memory = memory
        self.max_step = float(max_step)
        self.sufficient_decrease = float(sufficient_decrease)

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
        run.memory = LBFGSMemory(self.memory, cartan_blocks([(run.geometry.j.like(x), 1)], x))
        run.last = None  # (step s, algebra gradient A) of the last accepted step
        run.curvature_tol = math.sqrt(torch.finfo(x.dtype).eps)
        run.trials = run.resets = run.skipped_pairs = 0
        run.algebra_gradient = None  # (gradient, its algebra gradient A), computed once each
        run.violation, run.violation_at = math.nan, None  # last violation and its iteration

    def info(self, run: Run | None = None) -> dict:
        out = {"memory": self.memory, "max_step": self.max_step,
               "sufficient_decrease": self.sufficient_decrease}
        if run is not None:
            out.update(line_search_trials=run.trials, resets=run.resets,
                       skipped_pairs=run.skipped_pairs, pairs=len(run.memory))
        return out

    def measure(self, run: Run) -> tuple[float, float, float]:
        """The base measures, with the gradient norm read off the algebra gradient (the metric
        is ``⟨XΩ₁, XΩ₂⟩ = tr(Ω₁ᵀΩ₂)``, so ``‖grad f‖ = ‖A‖_F``) and the violation computed
        every :data:`FEASIBILITY_EVERY` iterations (an evaluation in between reports the last
        one computed; :meth:`finalize` computes it at the result's point)."""
        tracker = run.tracker
        if run.violation_at is None or run.iteration - run.violation_at >= FEASIBILITY_EVERY:
            run.violation = float(run.geometry.violation(tracker.x))
            run.violation_at = run.iteration
        return (float(tracker.value()), float(torch.linalg.matrix_norm(self._gradient(run))),
                run.violation)

    def finalize(self, run: Run, result: SolverResult) -> None:
        """The result's violation at its point (the last evaluation's may be older)."""
        if run.violation_at != run.iteration:
            result.violation = float(run.geometry.violation(run.tracker.x))

    @staticmethod
    def _gradient(run: Run) -> torch.Tensor:
        """The algebra gradient ``A`` at the current point, computed once per gradient (the
        evaluation and the next step share it)."""
        g = run.tracker.gradient()
        cached = run.algebra_gradient
        if cached is None or cached[0] is not g:
            run.algebra_gradient = (g, jo.algebra_gradient(run.geometry.j, run.tracker.x, g))
        return run.algebra_gradient[1]

    def step(self, run: Run) -> None:
        a = self._gradient(run)
        if run.last is not None:  # the pair of the last step, if it has positive curvature
            s, a_prev = run.last
            if not run.memory.add(s, (a - a_prev).reshape(-1), run.curvature_tol):
                run.skipped_pairs += 1
        run.last = None
        stop, resets = lbfgs_iteration(run.memory, a, self.max_step,
                                       lambda d, slope, t: self._line_search(run, d, slope, t, a))
        run.resets += resets
        if stop is not None:
            run.finished = stop

    def _line_search(self, run: Run, d: torch.Tensor, slope: float, t: float,
                     a: torch.Tensor) -> bool:
        """:func:`armijo_search` along ``t ↦ X cay(tD)``; moves the tracker and returns True on
        acceptance."""
        tracker = run.tracker
        x = tracker.x
        last: list = []

        def trial(t: float) -> float:
            step = t * d
            x_new = jo.cayley_step(x, step)
            try:
                value = tracker.oracle.value(x_new)
                f1 = float(value)
            except NonFiniteError:
                value, f1 = None, math.inf
            last[:] = [x_new, value, step]
            return f1

        t, trials = armijo_search(float(tracker.value()), slope, t, trial,
                                  self.sufficient_decrease, torch.finfo(x.dtype).eps)
        run.trials += trials
        if t is None:
            return False
        run.last = (last[2].reshape(-1), a)
        tracker.set_point(last[0], value=last[1])
        return True
