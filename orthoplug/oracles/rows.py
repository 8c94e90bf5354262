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
        row_value_change: optional ``(X, rows, new_rows) -> F(X') − F(X)``, ``X'`` = X with
            ``X[rows]`` replaced by ``new_rows`` (e.g. ``−2s⟨M[rows], new_rows − X[rows]⟩`` for
            a linear cost, O(rp)). Given, the tracker keeps F current from these changes (a
            line search then prices a trial on the rows instead of evaluating F).
        lipschitz: optional Lipschitz constant of ∇F.

    RSDM-P reads only ``∇F(X)[idx]`` for its r sampled rows, so a cheap ``gradient_rows`` (e.g.
    ``2(X[idx]AAᵀ − (BAᵀ)[idx])`` for Procrustes, O(rp²) instead of O(np²)) is used as is.
    """

    def __init__(self, value: Callable, gradient: Callable, gradient_rows: Callable, *,
                 row_value_change: Callable | None = None, lipschitz: float | None = None):
        super().__init__(value, gradient, lipschitz=lipschitz)
        self._rows = gradient_rows
        self._row_change = row_value_change

    def gradient_rows(self, x, rows):
        """Rows ``rows`` of ``∇f(X)``, from the row function (not checked for finiteness here)."""
        # not checked for finiteness here: RSDM checks the update these rows produce
        return torch.as_tensor(self._rows(x, rows), dtype=x.dtype, device=x.device)

    @property
    def prices_rows(self) -> bool:
        """Whether :meth:`row_value_change` is available."""
        return self._row_change is not None

    def row_value_change(self, x, rows, new_rows) -> float:
        """``F(X') − F(X)`` for ``X[rows] ← new_rows`` (needs ``row_value_change``)."""
        return float(self._row_change(x, rows, new_rows))

    def track(self, x):
        return RowGradientTracker(self, x)


class RowGradientTracker(Tracker):
    """Tracker whose :meth:`gradient_rows` asks the oracle for the rows only; with an oracle's
    ``row_value_change`` it also keeps F current under row changes (:meth:`value_with_rows`,
    ``set_rows(..., value=)``; :meth:`refresh` recomputes it against drift)."""

    row_gradients = True

    def gradient_rows(self, rows):
        if self._grad is not None:
            return self._grad[rows]
        self.count_gradients(int(rows.numel()) / self.x.shape[-2])
        return self.oracle.gradient_rows(self.x, rows)

    def value_with_rows(self, rows: torch.Tensor, new_rows: torch.Tensor) -> float | None:
        """``F`` after ``X[rows] ← new_rows`` without changing X, from the oracle's row price
        (``None`` when the oracle has none: evaluate F after the change instead)."""
        if not self.oracle.prices_rows:
            return None
        return float(self.value()) + self.oracle.row_value_change(self.x, rows, new_rows)

    def set_rows(self, rows, new_rows, value: float | None = None):
        """``X[rows] = new_rows``; ``value``, if given, is F there (from
        :meth:`value_with_rows`)."""
        super().set_rows(rows, new_rows)
        if value is not None:
            self._value = torch.tensor(value, dtype=self.x.dtype, device=self.x.device)

    def refresh(self) -> None:
        """Forget the value kept from row changes (the next :meth:`value` evaluates F)."""
        self._value = None


class StochasticOracle(Oracle):
    """``F(X) = E_ξ f(X; ξ)`` through a sampler of minibatch gradients (streamed data).

    Args:
        sample_gradient: ``(X, batch_size, generator) -> (1/B) Σ_b ∇f(X; ξ_b)`` with fresh
            samples ξ_b drawn with ``generator`` (the solver's CPU ``torch.Generator``: draw
            on the CPU and move the samples to X's device, so the stream is the same on
            every device).
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
