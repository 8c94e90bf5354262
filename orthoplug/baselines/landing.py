r"""Landing (Ablin & Peyré 2022; Ablin, Vary, Gao & Absil 2023): retraction-free, infeasible.

The landing field on ``ℝ^{n×p}``,

    Λ(X) = skew(G Xᵀ) X + λ X (XᵀX − I_p),    skew(G Xᵀ) X = ½(G XᵀX − X GᵀX),

is followed by plain steps ``X ← X − η'Λ(X)``: the first term decreases F along the orbit of
O(n), the second pulls X towards St(n, p). With ``d = ‖XᵀX − I‖_F`` and ``g = ‖Λ‖_F`` the safe
step keeping ``d ≤ ε`` is

    η_safe = (λd(1−d) + √(λ²d²(1−d)² + g²(ε−d))) / g²,     η' = min(η, η_safe, 1/(2λ)).

Iterates are infeasible (the run reports the violation; only ``X0`` is checked). Cost per
iteration: one gradient plus O(np²) (no n×n matrix, no QR).
"""

from __future__ import annotations

import math

import torch

from orthoplug.oracles import NonFiniteError
from orthoplug.solvers.base import IterativeSolver

__all__ = ["Landing", "landing_field"]


def landing_field(x: torch.Tensor, g: torch.Tensor, penalty: float) -> tuple[torch.Tensor, float]:
    """``(Λ(X), ‖XᵀX − I‖_F)`` for the Euclidean gradient ``g``; O(np²)."""
    xtx = x.mT @ x
    psi = 0.5 * (g @ xtx - x @ (g.mT @ x))
    xtx.diagonal().sub_(1.0)
    return psi + penalty * (x @ xtx), float(torch.linalg.matrix_norm(xtx))


class Landing(IterativeSolver):
    """The landing algorithm with the safe step.

    Args:
        step_size: η > 0.
        penalty: λ > 0 (attraction to the manifold).
        safe_distance: ε ∈ (0, 1): the iterates keep ``‖XᵀX − I‖_F ≤ ε``.
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options.
    """

    name = "Landing"

    def __init__(self, *, step_size: float = 0.1, penalty: float = 1.0,
                 safe_distance: float = 0.5, **kwargs):
        super().__init__(**kwargs)
        for key, val in (("step_size", step_size), ("penalty", penalty)):
            if not (isinstance(val, (int, float)) and math.isfinite(val) and val > 0):
                raise ValueError(f"{key} must be a finite number > 0, got {val!r}")
        if not 0 < safe_distance < 1:
            raise ValueError(f"safe_distance must be in (0, 1), got {safe_distance!r}")
        self.step_size, self.penalty, self.eps = float(step_size), float(penalty), safe_distance

    def prepare(self, oracle, x0, geometry):
        if x0.ndim != 2:
            raise ValueError(f"{self.name} takes one n×p matrix, got {tuple(x0.shape)}")
        return oracle

    def step(self, run):
        tracker = run.tracker
        x = tracker.x
        field, d = landing_field(x, tracker.gradient(), self.penalty)
        g2 = float((field * field).sum())
        if not math.isfinite(g2):
            raise NonFiniteError("non-finite landing field")
        if g2 == 0.0:
            return
        lam = self.penalty
        a = lam * d * (1.0 - d)
        safe = (a + math.sqrt(max(a * a + g2 * (self.eps - d), 0.0))) / g2
        eta = min(self.step_size, safe, 1.0 / (2.0 * lam))
        tracker.set_point(x - eta * field)

    def info(self, run=None):
        return {"step_size": self.step_size, "penalty": self.penalty,
                "safe_distance": self.eps}
