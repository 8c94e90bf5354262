"""Oracles with row access (RSDM-P reads only sampled rows of the gradient) and stochastic
oracles (minibatch gradients of an expectation)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .core import FunctionOracle, Oracle, Tracker, finite

__all__ = ["RowGradientOracle", "RowGradientTracker", "StochasticOracle"]




class RowGradientOracle(FunctionOracle):
    """An oracle that can also return chosen rows of ∇F without the full gradient.

    Args:
        value: ``X -> F(X)``.
        gradient: ``X -> ∇F(X)``.
        gradient_rows: ``(X, rows) -> ∇F(X)[rows]`` (rows: a LongTensor of distinct indices).
        lipschitz: optional Lipschitz constant of ∇F.

    RSDM-P reads only ``∇F(X)[idx]`` for its r sampled rows, so a cheap ``gradient_rows`` (e.g.
    ``2(X[idx]AAᵀ − (BAᵀ)[idx])`` for Procrustes, O(rp²) instead of O(np²)) is used as is.
    """

    def __init__(self, value: Callable, gradient: Callable, gradient_rows: Callable, *,
                 lipschitz: float | None = None):
        super().__init__(value, gradient, lipschitz=lipschitz)
        self._rows = gradient_rows

    def gradient_rows(self, x, rows):
        """Rows ``rows`` of ``∇f(X)``, from the row function (not checked for finiteness here)."""
        # not checked for finiteness here: RSDM checks the update these rows produce
        return torch.as_tensor(self._rows(x, rows), dtype=x.dtype, device=x.device)

    def track(self, x):
        return RowGradientTracker(self, x)


class RowGradientTracker(Tracker):
    """Tracker whose :meth:`gradient_rows` asks the oracle for the rows only."""

    def gradient_rows(self, rows):
        if self._grad is not None:
            return self._grad[rows]
        self.count_gradients(int(rows.numel()) / self.x.shape[-2])
        return self.oracle.gradient_rows(self.x, rows)


class StochasticOracle(Oracle):
    """``F(X) = E_ξ f(X; ξ)`` through a sampler of minibatch gradients (streamed data).

    Args:
        sample_gradient: ``(X, batch_size, generator) -> (1/B) Σ_b ∇f(X; ξ_b)`` with fresh
            samples ξ_b drawn with ``generator`` (a ``torch.Generator`` on X's device: draw
            with ``device=x.device``).
        value, gradient: optional exact (population) ``F`` and ``∇F``, used only to monitor the
            run (cost, gradient norm, ``target_cost``); without them those are reported as NaN.
    """

    def __init__(self, sample_gradient: Callable, value: Callable | None = None,
                 gradient: Callable | None = None):
        self._sample, self._value, self._gradient = sample_gradient, value, gradient

    @property
    def monitored(self) -> bool:
        """Whether the exact value and gradient were given (a run can report its progress)."""
        return self._value is not None and self._gradient is not None

    def sample_gradient(self, x, batch_size, generator):
        """A minibatch gradient ``(1/B) Σ_b ∇f(X; ξ_b)`` of ``batch_size`` fresh samples drawn with
        ``generator``.
        """
        return finite(torch.as_tensor(self._sample(x, batch_size, generator), dtype=x.dtype,
                                       device=x.device), "stochastic gradient")

    def value(self, x):
        if self._value is None:
            raise NotImplementedError("StochasticOracle without a population value")
        return finite(torch.as_tensor(self._value(x), dtype=x.dtype, device=x.device), "cost")

    def gradient(self, x):
        if self._gradient is None:
            raise NotImplementedError("StochasticOracle without a population gradient")
        return finite(torch.as_tensor(self._gradient(x), dtype=x.dtype, device=x.device),
                       "gradient")
