"""Step-size rules shared by the solvers and their torch optimizers.

A rule is a small object with its own state (``state_dict`` / ``load_state_dict``), so the
pymanopt/orthoplug front-end keeps one in its :class:`~orthoplug.solvers.base.Run` and a torch
optimizer one per parameter, and both take the same decisions from the same numbers.
"""

from __future__ import annotations

import math

from orthoplug.oracles import NonFiniteError

__all__ = ["SigmaBacktracking"]


class SigmaBacktracking:
    """σ of a scalar majoriser with the sufficient-decrease test of majoriser steps.

    A step proposed with the current σ predicts the change ``predicted`` (the model's, ≤ 0). It
    is accepted iff ``f(X⁺) ≤ f(X) + predicted`` (up to ``1e-12`` relative), so accepted steps
    never increase f. On acceptance σ is multiplied by ``shrink`` (adaptive σ when ``< 1``,
    never below ``1e-12`` times its start); on rejection σ doubles. A non-finite trial value is a
    rejection (a step may overshoot into a region where f is undefined); after more than
    ``max_rejections`` rejections in a row the rule raises
    :class:`~orthoplug.oracles.core.NonFiniteError` naming the last trial value.

    Args:
        sigma: the initial σ (> 0).
        checked: whether steps are tested at all (``False``: a known σ ≥ the Lipschitz constant
            and no adaptation; :meth:`accepts` is then never needed).
        shrink: factor applied to σ after an accepted step, in (0, 1].
        max_rejections: consecutive rejections before giving up.
    """

    def __init__(self, sigma: float, *, checked: bool = True, shrink: float = 1.0,
                 max_rejections: int = 200):
        if not (math.isfinite(sigma) and sigma > 0):
            raise ValueError(f"sigma must be finite and > 0, got {sigma}")
        if not 0 < shrink <= 1:
            raise ValueError(f"shrink must be in (0, 1], got {shrink}")
        self.sigma = float(sigma)
        self.floor = 1e-12 * self.sigma
        self.checked = bool(checked)
        self.shrink = float(shrink)
        self.max_rejections = int(max_rejections)
        self.backtracks = 0
        self.rejections = 0

    def accepts(self, f0: float, f1: float, predicted: float) -> bool:
        """Test ``f(X⁺) = f1`` against ``f(X) = f0`` and the model's change; update σ."""
        if f1 <= f0 + predicted + 1e-12 * max(1.0, abs(f0)):
            if self.shrink < 1.0:
                self.sigma = max(self.sigma * self.shrink, self.floor)
            self.rejections = 0
            return True
        self.sigma *= 2.0
        self.backtracks += 1
        # (adaptive σ rejects routinely: only an unbroken run of rejections means divergence)
        self.rejections += 1
        if self.rejections > self.max_rejections:
            cause = ("the loss at every trial point was not finite (last: "
                     f"{f1})" if not math.isfinite(f1) else
                     f"the curvature estimate diverged (σ = {self.sigma:.3g})")
            raise NonFiniteError(f"no acceptable step after {self.rejections} doublings of "
                                 f"sigma: {cause}")
        return False

    def state_dict(self) -> dict:
        """The rule's state (plain numbers)."""
        return {"sigma": self.sigma, "floor": self.floor, "backtracks": self.backtracks,
                "rejections": self.rejections}

    def load_state_dict(self, state: dict) -> None:
        """Restore a state from :meth:`state_dict`."""
        self.sigma, self.floor = float(state["sigma"]), float(state["floor"])
        self.backtracks, self.rejections = int(state["backtracks"]), int(state["rejections"])
