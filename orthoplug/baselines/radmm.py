r"""RADMM: Riemannian ADMM for ``min f(X) + h(X)`` on St(n, r) (a baseline of the OBCD paper).

Li, Ma and Srivastava (2024): h is replaced by its Moreau envelope ``h_μ``, and each iteration
takes one Riemannian gradient step in X on the augmented Lagrangian
``L_ρ(X, Y, Λ) = f(X) + h_μ(Y) + ⟨Λ, X − Y⟩ + ρ/2‖X − Y‖²``, retracted by the polar factor,
then minimises exactly in Y and updates Λ:

    X⁺ = polar(X − η P_X(∇f(X) + Λ + ρ(X − Y))),   η = 1/(L + ρ),
    W = X⁺ + Λ/ρ,   Z = prox_{(1/ρ + μ) h}(W),   Y⁺ = (Z + μρ W)/(1 + μρ),
    Λ⁺ = Λ + ρ(X⁺ − Y⁺).

The Y-step is exact: ``min_Y h_μ(Y) + ρ/2‖Y − W‖²`` is ``min_{Y,Z} h(Z) + ‖Z − Y‖²/(2μ) +
ρ/2‖Y − W‖²``; for fixed Z the optimal Y is the weighted mean above, and what is left in Z is
``h(Z) + ρ/(2(1 + μρ))‖Z − W‖²``. ``P_X`` is the Euclidean tangent projection of St(n, r).
Defaults ρ = 2L, μ = 0.1/ρ (ours: the paper states none). See
:mod:`~orthoplug.baselines.splitting` for the reported point.
"""

from __future__ import annotations

from orthoplug.baselines.splitting import SplittingSolver
from orthoplug.solvers.splitting import linearised_admm_step

__all__ = ["RADMM"]


class RADMM(SplittingSolver):
    """Riemannian ADMM with a Moreau-smoothed h (see the module docstring).

    Args:
        smoothing: μ as a multiple of 1/ρ (default 0.1).
        **kwargs: :class:`~orthoplug.baselines.splitting.SplittingSolver` options.
    """

    name = "RADMM"

    def __init__(self, h=None, *, smoothing: float = 0.1, **kwargs):
        super().__init__(h, **kwargs)
        if not smoothing > 0:
            raise ValueError(f"smoothing must be > 0, got {smoothing}")
        self.smoothing = float(smoothing)

    def iterate_splitting(self, run, g):
        """One iteration (see the module docstring); ``g = ∇f(X)``."""
        run.x, run.y, run.lam = linearised_admm_step(
            run.x, run.y, run.lam, g, self.h, run.beta, run.lip, self.smoothing / run.beta,
            tangent=True)

    def info(self, run=None):
        return {**super().info(run), "smoothing": self.smoothing}
