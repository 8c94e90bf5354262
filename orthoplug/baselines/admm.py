r"""ADMM for ``min f(X)`` s.t. ``XᵀJX = J_k`` (the JOBCD papers' baseline, App. F.3, corrected).

Splitting ``Y = J X`` turns the quadratic constraint into the bilinear ``XᵀY = J_k`` plus the
linear ``J X = Y``. With multipliers ``Z`` (k×k) and ``W`` (n×k) the augmented Lagrangian is

    Lβ = f(X) + ⟨XᵀY − J_k, Z⟩ + ⟨JX − Y, W⟩ + β/2 ‖XᵀY − J_k‖²_F + β/2 ‖JX − Y‖²_F.

One iteration linearises ``f`` at ``X`` with constant ``l`` (``f(X') ≤ f(X) + ⟨X'−X, ∇f(X)⟩ +
l/2 ‖X'−X‖²``, ``l = L_f``) and minimises the two strongly convex quadratics exactly:

    X⁺ = (l I + β(Y Yᵀ + I))⁻¹ (l X − ∇f(X) − Y Zᵀ − J W + β Y J_k + β J Y)
    Y⁺ = (β(X⁺X⁺ᵀ + I))⁻¹ (β X⁺ J_k + β J X⁺ − X⁺ Z + W)
    Z ← Z + β(X⁺ᵀY⁺ − J_k),   W ← W + β(J X⁺ − Y⁺),

both ``n×n`` symmetric positive definite solves (Cholesky), ``O(n³)`` per iteration. These are
the stationarity conditions of the two subproblems (the paper's closed forms are not: they
transpose ``∇f``, write ``Y Xᵀ`` for ``Y Zᵀ`` and ``J W`` for ``W`` in the Y-step, and its
Y-subproblem has ``‖X − Y‖`` for ``‖XᵀY − J‖``; see the spec, §8.9). The start is the shared
feasible ``X₀`` with ``Y₀ = J X₀`` (the paper's ``Y₀ = X₀`` violates ``Y = JX``), ``Z₀ = W₀ = 0``.

Penalty: the paper's *dynamic* β (:class:`PenaltySchedule`, also used by UMCM): starting from
``β₀ ∈ [1e2, 1e5]``, ``β ← 2β`` at iterations ``t = 0, 5, 10, …`` while ``β ≤ 1e9``.

ADMM is an **infeasible** method: its iterates satisfy the constraint only in the limit, so the
reported cost can lie below the constrained optimum; always read it with the reported violation.

With the paper's dynamic β the method *freezes* once β is large: β passes 1e9 after about
``5·log₂(1e9/β₀)`` iterations, the X-step ``(l I + β(YYᵀ + I))⁻¹(…)`` then moves X by
``O(‖∇f‖/β)`` and the cost stops changing while the constraint is met to rounding. A fixed
``β ≈ L_f`` (``beta={"beta0": L, "every": 0}``) converges (the evidence:
``docs/guide/defaults.md``). The schedule is the paper's; only its defaults are ours.
"""

from __future__ import annotations

import math

import torch

from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry, JOrthogonalGeometry
from orthoplug.oracles import NonFiniteError, Oracle, estimate_lipschitz, finite
from orthoplug.solvers.base import IterativeSolver, Run

__all__ = ["ADMM", "PenaltySchedule", "admm_x_update", "admm_y_update"]

#: the geometries of ``XᵀJ_nX = J_k`` (ADMM, UMCM and CSDM run on these only).
J_GEOMETRIES = (JOrthogonalGeometry, IndefiniteStiefelGeometry)


class PenaltySchedule:
    r"""The dynamic penalty of ADMM and UMCM: ``β_t = β₀ · factor^min(⌈t/every⌉, K)``.

    This is the paper's rule "after iteration t, if ``t % every == 0`` and ``β ≤ max_beta``:
    ``β ← factor·β``" written in closed form, so ``β_t`` (the value used in iteration
    ``t = 0, 1, …``) needs no state: ``K`` is the number of multiplications until β first exceeds
    ``max_beta``. ``every=0`` (or ``factor=1``) gives a fixed penalty ``β₀``.

    Args:
        beta0: initial penalty β₀ > 0 (the paper picks it in [1e2, 1e5]).
        every: iterations between increases (paper: 5); 0 keeps β fixed.
        factor: multiplier ≥ 1 (paper: 2).
        max_beta: increases stop once β exceeds this (paper: 1e9).
    """

    def __init__(self, beta0: float = 1e4, every: int = 5, factor: float = 2.0,
                 max_beta: float = 1e9):
        if not (beta0 > 0 and math.isfinite(beta0)):
            raise ValueError(f"beta0 must be a positive finite number, got {beta0}")
        if every < 0 or int(every) != every:
            raise ValueError(f"every must be a non-negative integer, got {every}")
        if not factor >= 1:
            raise ValueError(f"factor must be >= 1, got {factor}")
        if not max_beta > 0:
            raise ValueError(f"max_beta must be > 0, got {max_beta}")
        self.beta0, self.every, self.factor, self.max_beta = float(beta0), int(every), \
            float(factor), float(max_beta)
        k, beta = 0, self.beta0
        if self.every and self.factor > 1:
            while beta <= self.max_beta:
                beta *= self.factor
                k += 1
        self.max_increases = k

    def __call__(self, t: int) -> float:
        if self.max_increases == 0:
            return self.beta0
        done = min(-(-t // self.every), self.max_increases)  # ⌈t/every⌉ increases so far
        return self.beta0 * self.factor ** done

    @classmethod
    def coerce(cls, beta) -> PenaltySchedule:
        """A schedule from a schedule, a number (β₀ with the paper's dynamic rule) or a dict."""
        if isinstance(beta, PenaltySchedule):
            return beta
        if isinstance(beta, dict):
            return cls(**beta)
        if isinstance(beta, (int, float)):
            return cls(float(beta))
        raise ValueError(f"beta must be a number, a dict of PenaltySchedule options or a "
                         f"PenaltySchedule, got {type(beta).__name__}")

    def __repr__(self) -> str:
        return (f"PenaltySchedule(beta0={self.beta0:g}, every={self.every}, "
                f"factor={self.factor:g}, max_beta={self.max_beta:g})")


def _spd_solve(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``A⁻¹ B`` for symmetric positive definite A (Cholesky)."""
    low, info = torch.linalg.cholesky_ex(a)
    if int(info) != 0:
        raise NonFiniteError("ADMM system matrix is not positive definite (overflow?)")
    return torch.cholesky_solve(b, low)


def admm_x_update(x, y, z, w, g, jn, jk, lip: float, beta: float) -> torch.Tensor:
    """``argmin_X ⟨X−Xᵗ, G⟩ + l/2‖X−Xᵗ‖² + ⟨XᵀY−J_k, Z⟩ + ⟨JX−Y, W⟩ + β/2‖XᵀY−J_k‖² +
    β/2‖JX−Y‖²`` = ``(lI + β(YYᵀ + I))⁻¹ (lXᵗ − G − YZᵀ − JW + βYJ_k + βJY)``.

    ``jn`` (n,) and ``jk`` (k,) are the diagonals of J and J_k.
    """
    a = beta * (y @ y.mT)
    a.diagonal().add_(lip + beta)
    rhs = lip * x - g - y @ z.mT - jn[:, None] * w + beta * (y * jk + jn[:, None] * y)
    return _spd_solve(a, rhs)


def admm_y_update(x, z, w, jn, jk, beta: float) -> torch.Tensor:
    """``argmin_Y ⟨XᵀY−J_k, Z⟩ + ⟨JX−Y, W⟩ + β/2‖XᵀY−J_k‖² + β/2‖JX−Y‖²`` (X = X⁺)
    = ``(β(XXᵀ + I))⁻¹ (βXJ_k + βJX − XZ + W)``."""
    a = beta * (x @ x.mT)
    a.diagonal().add_(beta)
    rhs = beta * (x * jk + jn[:, None] * x) - x @ z + w
    return _spd_solve(a, rhs)


class ADMM(IterativeSolver):
    """Linearised two-block ADMM with the splitting ``Y = JX`` and a dynamic penalty.

    Works for square (O(J)) and rectangular (``XᵀJ_nX = J_k``) problems, single matrices only;
    any oracle (only ``∇f`` is used). The iterates are infeasible: ``result.violation`` reports
    the papers' mean ``|XᵀJX − J|``.

    Args:
        beta: initial penalty β₀ (paper's dynamic rule: doubled every 5 iterations while
            ``β ≤ 1e9``), or a :class:`PenaltySchedule` / dict of its options.
        lipschitz: the linearisation constant ``l``; default: the oracle's Lipschitz constant,
            else a local power-iteration estimate at ``X₀`` (:func:`estimate_lipschitz`).
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options (stopping criteria,
            ``eval_every`` — default 1 —, ``seed``).
    """

    name = "ADMM"

    def __init__(self, *, beta=1e4, lipschitz: float | None = None, **kwargs):
        super().__init__(**kwargs)
        self.schedule = PenaltySchedule.coerce(beta)
        if lipschitz is not None and not lipschitz > 0:
            raise ValueError(f"lipschitz must be > 0, got {lipschitz}")
        self.lipschitz_user = lipschitz

    def prepare(self, oracle: Oracle, x0: torch.Tensor, geometry) -> Oracle:
        if x0.ndim != 2:
            raise ValueError(f"ADMM optimises one n × k matrix, got shape {tuple(x0.shape)}")
        if not isinstance(geometry, J_GEOMETRIES):
            raise ValueError("ADMM needs a J-orthogonal or indefinite Stiefel geometry")
        return oracle

    def setup(self, run: Run) -> None:
        x = run.tracker.x
        run.jn, run.jk = run.geometry.j.like(x), run.geometry.jk.like(x)
        lip = self.lipschitz_user or run.oracle.lipschitz
        if lip is None:
            lip = estimate_lipschitz(run.tracker.gradient_at, x, run.generator)
        run.lip = float(lip)
        run.y = run.jn[:, None] * x
        run.z = torch.zeros(x.shape[-1], x.shape[-1], dtype=x.dtype, device=x.device)
        run.w = torch.zeros_like(x)

    def step(self, run: Run) -> None:
        beta = self.schedule(run.iteration)
        tracker = run.tracker
        x_new = admm_x_update(tracker.x, run.y, run.z, run.w, tracker.gradient(), run.jn,
                              run.jk, run.lip, beta)
        y_new = admm_y_update(x_new, run.z, run.w, run.jn, run.jk, beta)
        z_new = run.z + beta * (x_new.mT @ y_new - torch.diag(run.jk))
        w_new = run.w + beta * (run.jn[:, None] * x_new - y_new)
        for t in (x_new, y_new, z_new, w_new):
            finite(t, "ADMM iterate")
        run.y, run.z, run.w = y_new, z_new, w_new
        tracker.set_point(x_new)

    def info(self, run: Run | None = None) -> dict:
        return {"beta": repr(self.schedule), "lipschitz": None if run is None else run.lip,
                "final_beta": self.schedule(max((run.iteration if run else 1) - 1, 0))}
