r"""LADMM: linearised ADMM for ``min f(X) + h(X)`` on St(n, r) (a baseline of the OBCD paper).

Lai and Osher's splitting (SOC) with the X-subproblem linearised (He and Yuan 2012): for
``L_β(X, Y, Λ) = f(X) + h(Y) + ⟨Λ, X − Y⟩ + β/2‖X − Y‖²``,

    X⁺ = polar(X − (∇f(X) + Λ + β(X − Y))/(L + β)),
    Y⁺ = prox_{h/β}(X⁺ + Λ/β),
    Λ⁺ = Λ + β(X⁺ − Y⁺),

with β = ``penalty``·L (default 2L, our choice: the paper states none). See
:mod:`~orthoplug.baselines.splitting` for the reported point.
"""

from __future__ import annotations

from orthoplug.baselines.splitting import SplittingSolver
from orthoplug.solvers.splitting import linearised_admm_step

__all__ = ["LADMM"]


class LADMM(SplittingSolver):
    """Linearised ADMM with a fixed penalty β (see the module docstring)."""

    name = "LADMM"

    def iterate_splitting(self, run, g):
        """One iteration (see the module docstring); ``g = ∇f(X)``."""
        run.x, run.y, run.lam = linearised_admm_step(run.x, run.y, run.lam, g, self.h, run.beta,
                                                     run.lip)
