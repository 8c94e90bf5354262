r"""PCAL: proximal linearised augmented Lagrangian (Gao, Liu & Yuan 2019), column-wise version.

With the closed-form multiplier ``Λ = sym(XᵀG)`` one iteration is

    D = G − XΛ + λ X (XᵀX − I),   D ← D − X diag(diag(XᵀD)),   X ← X − αD,

followed by normalising every column of X to unit length (the diagonal of ``XᵀX = I`` is kept
exactly, the off-diagonal only approximately: an infeasible method). α is fixed or the
Barzilai–Borwein step ``α_k = max(|⟨S, V⟩| / ‖V‖², 10⁻³)`` (``S = X_k − X_{k−1}``,
``V = D_k − D_{k−1}``), starting from ``max(0.1, min(0.01‖D‖_F, 1))``. Cost per iteration: one
gradient plus O(np²).
"""

from __future__ import annotations

import math

import torch

from orthoplug.geometry._linalg import sym
from orthoplug.oracles import finite
from orthoplug.solvers.base import IterativeSolver

__all__ = ["PCAL"]


class PCAL(IterativeSolver):
    """PCAL with a fixed or Barzilai–Borwein step.

    Args:
        penalty: λ > 0.
        step_size: ``"bb"`` (default) or a fixed α > 0.
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options.
    """

    name = "PCAL"

    def __init__(self, *, penalty: float = 1.0, step_size="bb", **kwargs):
        super().__init__(**kwargs)
        if not (isinstance(penalty, (int, float)) and math.isfinite(penalty) and penalty > 0):
            raise ValueError(f"penalty must be a finite number > 0, got {penalty!r}")
        if step_size != "bb" and not (isinstance(step_size, (int, float)) and step_size > 0):
            raise ValueError(f"step_size must be 'bb' or a number > 0, got {step_size!r}")
        self.penalty, self.step_size = float(penalty), step_size

    def prepare(self, oracle, x0, geometry):
        if x0.ndim != 2:
            raise ValueError(f"{self.name} takes one n×p matrix, got {tuple(x0.shape)}")
        return oracle

    def setup(self, run):
        run.previous = None  # (X, D) of the last step, for the Barzilai–Borwein step

    def _direction(self, x, g):
        xtx = x.mT @ x
        xtx.diagonal().sub_(1.0)
        d = g - x @ sym(x.mT @ g) + self.penalty * (x @ xtx)
        return d - x * (x * d).sum(dim=0, keepdim=True)

    def step(self, run):
        tracker = run.tracker
        x = tracker.x
        d = self._direction(x, tracker.gradient())
        if self.step_size != "bb":
            alpha = float(self.step_size)
        elif run.previous is None:
            alpha = max(0.1, min(0.01 * float(torch.linalg.norm(d)), 1.0))
        else:
            s, v = x - run.previous[0], d - run.previous[1]
            vv = float((v * v).sum())
            alpha = max(abs(float((s * v).sum())) / vv, 1e-3) if vv > 0 else 1e-3
        new = x - alpha * d
        new = new / torch.linalg.vector_norm(new, dim=0, keepdim=True)
        finite(new, "PCAL update")
        run.previous = (x, d)
        tracker.set_point(new)

    def info(self, run=None):
        return {"penalty": self.penalty, "step_size": self.step_size}
