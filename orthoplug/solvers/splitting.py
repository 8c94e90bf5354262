r"""The linearised ADMM step on ``f(X) + h(Y)``, ``X = Y``, X on St(n, r), and the rounding of
its iterates to the nonnegative feasible set: shared by the splitting baselines
(:mod:`orthoplug.baselines.ladmm`, :mod:`~orthoplug.baselines.radmm`,
:mod:`~orthoplug.baselines.psm`) and SparseOBCD's splitting stage
(:mod:`orthoplug.solvers.sparse_starts`).

For ``L_β(X, Y, Λ) = f(X) + h(Y) + ⟨Λ, X − Y⟩ + β/2‖X − Y‖²`` and a Moreau-smoothed h
(``μ ≥ 0``; μ = 0 is plain linearised ADMM), one iteration is

    X⁺ = polar(X − D/(L + β)),   D = ∇f(X) + Λ + β(X − Y)   (tangent: D − X sym(XᵀD)),
    W = X⁺ + Λ/β,   Z = prox_{(1/β + μ) h}(W),   Y⁺ = (Z + μβ W)/(1 + μβ),
    Λ⁺ = Λ + β(X⁺ − Y⁺).
"""

from __future__ import annotations

import math

import torch

from orthoplug.geometry._linalg import sym
from orthoplug.geometry.stiefel import polar
from orthoplug.nonsmooth import SeparableTerm

__all__ = ["linearised_x_step", "linearised_admm_step", "nonneg_rounding"]


def linearised_x_step(x: torch.Tensor, y: torch.Tensor, lam: torch.Tensor, g: torch.Tensor,
                      beta: float, lip: float, tangent: bool = False) -> torch.Tensor:
    """``polar(X − D/(L + β))``, ``D = ∇f + Λ + β(X − Y)``: one linearised step on the augmented
    Lagrangian of ``f(X) + h(Y)``, ``X = Y``, projected onto St(n, r) (``g = ∇f(X)``; ``Λ = 0``
    for a penalty method). ``tangent``: ``D`` replaced by its tangent part
    ``D − X sym(XᵀD)`` (a Riemannian gradient step, as RADMM takes)."""
    d = g + lam + beta * (x - y)
    if tangent:
        d = d - x @ sym(x.mT @ d)
    return polar(x - d / (lip + beta))


def linearised_admm_step(x: torch.Tensor, y: torch.Tensor, lam: torch.Tensor, g: torch.Tensor,
                         h: SeparableTerm, beta: float, lip: float, mu: float = 0.0,
                         tangent: bool = False
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One iteration ``(X, Y, Λ) ↦ (X⁺, Y⁺, Λ⁺)`` of linearised ADMM with a Moreau-smoothed h
    (the module docstring's formulas; μ = 0: plain), ``g = ∇f(X)``; ``tangent`` as
    :func:`linearised_x_step`."""
    x = linearised_x_step(x, y, lam, g, beta, lip, tangent)
    w = x + lam / beta
    y = h.prox(w, 1.0 / beta + mu)
    if mu:
        y = (y + mu * beta * w) / (1.0 + mu * beta)
    return x, y, lam + beta * (x - y)


def nonneg_rounding(x: torch.Tensor) -> torch.Tensor:
    """A point of ``{X ≥ 0, XᵀX = I}`` near ``x`` (n × r, n ≥ r): each row keeps only its largest
    positive entry (rows without one are dropped), each column is normalised; a column left
    empty takes the row with its largest entry among the rows of columns holding two or more.

    Raises:
        ValueError: ``n < r`` (no such point exists).
    """
    n, r = x.shape
    if n < r:
        raise ValueError(f"nonnegative orthonormal n × r matrices need n >= r, got {n} × {r}")
    pos = x.clamp_min(0.0)
    owner = torch.argmax(pos, dim=1)
    keep = pos.max(dim=1).values > 0
    counts = torch.bincount(owner[keep], minlength=r)
    for j in torch.nonzero(counts == 0).flatten().tolist():
        donors = keep & (counts[owner] >= 2) | ~keep
        score = torch.where(donors, x[:, j], torch.full_like(x[:, j], -math.inf))
        i = int(torch.argmax(score))
        if keep[i]:
            counts[owner[i]] -= 1
        owner[i], keep[i] = j, True
        counts[j] += 1
    out = torch.zeros_like(x)
    rows = torch.nonzero(keep).flatten()
    vals = pos[rows, owner[rows]]
    vals = torch.where(vals > 0, vals, torch.ones_like(vals))  # a donated row with x_ij <= 0
    out[rows, owner[rows]] = vals
    return out / torch.linalg.norm(out, dim=0)
