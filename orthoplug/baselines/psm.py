r"""PSM: penalty splitting for ``min f(X) + h(X)`` on St(n, r) (a baseline of the OBCD paper).

The penalty problem ``min f(X) + h(Y) + β/2‖X − Y‖²`` (X on St(n, r)) by alternating one
linearised, projected X-step and an exact Y-step, with β increasing (Chen 2012; Yuan 2024):

    X⁺ = polar(X − (∇f(X) + β(X − Y))/(L + β)),    Y⁺ = prox_{h/β}(X⁺),
    β ← min(growth · β, max_penalty · L)   if Y⁺ ≠ X⁺,

from β₀ = ``penalty``·L (defaults 1·L, growth 1.01 per iteration, cap 10⁴·L: our choices, the
paper states none). The penalty only serves to close ``X − Y``: where the prox leaves X⁺
unchanged (h = 0, or X⁺ ≥ 0 under the nonnegativity indicator) β is kept, so the X-step
``1/(L + β)`` does not shrink for nothing (with h = 0 the method is then the projected gradient
method with step ``1/(L + β)``). See :mod:`~orthoplug.baselines.splitting` for the reported
point and the stationarity measure.
"""

from __future__ import annotations

import torch

from orthoplug.baselines.splitting import SplittingSolver

__all__ = ["PSM"]


class PSM(SplittingSolver):
    """Penalty splitting with a growing penalty (see the module docstring).

    Args:
        growth: factor ≥ 1 applied to β after every iteration whose ``Y⁺ ≠ X⁺``.
        max_penalty: cap of β as a multiple of L.
        **kwargs: :class:`~orthoplug.baselines.splitting.SplittingSolver` options.
    """

    name = "PSM"

    def __init__(self, h=None, *, penalty: float = 1.0, growth: float = 1.01,
                 max_penalty: float = 1e4, **kwargs):
        super().__init__(h, penalty=penalty, **kwargs)
        if not growth >= 1:
            raise ValueError(f"growth must be >= 1, got {growth}")
        if not max_penalty >= penalty:
            raise ValueError(f"max_penalty must be >= penalty = {penalty}, got {max_penalty}")
        self.growth, self.max_penalty = float(growth), float(max_penalty)

    def setup(self, run):
        super().setup(run)
        run.y_penalty = run.beta  # the β of the last Y-step (setup's Y = prox_{h/β}(X₀))

    def iterate_splitting(self, run, g):
        """One iteration (see the module docstring); ``g = ∇f(X)``."""
        beta = run.beta
        run.x = self.x_step(run, g, beta)
        run.y = self.h.prox(run.x, 1.0 / beta)
        run.y_penalty = beta
        if not torch.equal(run.x, run.y):
            run.beta = min(self.growth * beta, self.max_penalty * run.lip)

    def multiplier(self, run):
        """``β(X − Y) ∈ ∂h(Y)`` with the β of the last Y-step (``Y = prox_{h/β}(X)``)."""
        return run.y_penalty * (run.x - run.y)

    def info(self, run=None):
        return {**super().info(run), "growth": self.growth, "max_penalty": self.max_penalty}
