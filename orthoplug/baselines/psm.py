r"""PSM: penalty splitting for ``min f(X) + h(X)`` on St(n, r) (a baseline of the OBCD paper).

The penalty problem ``min f(X) + h(Y) + β/2‖X − Y‖²`` (X on St(n, r)) by alternating one
linearised, projected X-step and an exact Y-step, with β increasing (Chen 2012; Yuan 2024):

    X⁺ = polar(X − (∇f(X) + β(X − Y))/(L + β)),    Y⁺ = prox_{h/β}(X⁺),
    β ← min(growth · β, max_penalty · L),

from β₀ = ``penalty``·L (defaults 1·L, growth 1.01 per iteration, cap 10⁴·L: our choices, the
paper states none). See :mod:`~orthoplug.baselines.splitting` for the reported point.
"""

from __future__ import annotations

from orthoplug.baselines.splitting import SplittingSolver

__all__ = ["PSM"]


class PSM(SplittingSolver):
    """Penalty splitting with a growing penalty (see the module docstring).

    Args:
        growth: factor ≥ 1 applied to β after every iteration.
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

    def iterate_splitting(self, run, g):
        """One iteration (see the module docstring); ``g = ∇f(X)``."""
        beta = run.beta
        run.x = self.x_step(run, g, beta)
        run.y = self.h.prox(run.x, 1.0 / beta)
        run.beta = min(self.growth * beta, self.max_penalty * run.lip)

    def info(self, run=None):
        return {**super().info(run), "growth": self.growth, "max_penalty": self.max_penalty}
