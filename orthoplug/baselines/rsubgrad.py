r"""RSubGrad: the full Riemannian subgradient method on St(n, p) with the polar retraction.

Li, Chen, Deng, Qu, Zhu, So, "Weakly convex optimization over Stiefel manifold using Riemannian
subgradient-type methods" (SIAM J. Optim. 2021). Iteration k, with ``G ∈ ∂f(X)`` one full
Euclidean (Clarke) subgradient:

    ξ = G − X sym(XᵀG),        X ← polar(X − γ_k ξ),

with the step rules of RSSM (:mod:`orthoplug.solvers.step_rules`: the default Polyak rule,
diminishing, constant, geometric, geometric on stall), and RSSM's final proximal pass for a
separable h. Cost per
iteration: the full subgradient plus ``O(n p²)`` (two ``n × p × p`` products and a polar factor
of an ``n × p`` matrix). It is RSSM with a single block
(ℓ = 2 in the paper's pair notation), the baseline RSSM has to beat.
"""

from __future__ import annotations

from orthoplug.geometry._linalg import sym
from orthoplug.geometry.stiefel_block import polar_tall
from orthoplug.oracles import finite
from orthoplug.solvers.rssm import SubgradientSolver

__all__ = ["RSubGrad"]


class RSubGrad(SubgradientSolver):
    """Riemannian subgradient method with polar retraction (full gradient each iteration).

    Args:
        step_size: the step rule (see :class:`~orthoplug.solvers.rssm.SubgradientSolver`; an
            epoch is one iteration).
        h, return_best, final_prox: see :class:`~orthoplug.solvers.rssm.SubgradientSolver`.
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options (``eval_every``
            default 1: the evaluation reuses the subgradient the next step needs).
    """

    name = "RSubGrad"

    def update(self, run):
        tracker = run.tracker
        x = tracker.x
        g = tracker.gradient()
        xi = g - x @ sym(x.mT @ g)
        gamma = self.step_length(run, lambda: float((xi * xi).sum()), 1.0)
        tracker.set_point(finite(polar_tall(x - gamma * xi), "update"))
