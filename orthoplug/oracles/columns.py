"""Oracles and trackers with column access (RSSM's column blocks) and the composite
``f + h`` of a smooth oracle and a separable nonsmooth term."""

from __future__ import annotations

from collections.abc import Callable

import torch

from orthoplug.geometry.stiefel_block import put_columns, take_columns

from .abilities import ColumnAccess, ColumnGradients, SubgradientTerm
from .core import FunctionOracle, Oracle, Tracker, finite

__all__ = ["ColumnTracker", "ColumnOracle", "CompositeOracle", "CompositeTracker",
           "partial_subgradient", "write_columns"]




class ColumnTracker(Tracker):
    """A :class:`Tracker` with column access (``gradient_columns``, ``set_columns``).

    ``gradient_columns(cols)`` calls the oracle's ``gradient_columns(x, cols)`` when the oracle
    computes only those columns (:attr:`column_gradients`), else slices the (cached, counted)
    full gradient. ``column_evaluations`` counts the columns computed by the oracle's column
    function.
    """

    def __init__(self, oracle: Oracle, x: torch.Tensor):
        super().__init__(oracle, x)
        self.column_evaluations = 0

    @property
    def column_gradients(self) -> bool:  # type: ignore[override]
        """Whether :meth:`gradient_columns` costs only the columns asked for: the oracle has the
        :class:`~orthoplug.oracles.abilities.ColumnGradients` ability and declares it
        (:attr:`~orthoplug.oracles.core.Oracle.column_gradients`)."""
        return isinstance(self.oracle, ColumnGradients) and bool(self.oracle.column_gradients)

    def gradient_columns(self, cols: torch.Tensor) -> torch.Tensor:
        """Columns ``cols`` of ``∇f`` at the current point (from the cached gradient, else from the
        oracle's ``gradient_columns``, else from the full gradient).
        """
        if self._grad is not None:
            return take_columns(self._grad, cols)
        if not self.column_gradients:
            return self.gradient()[..., cols]
        self.column_evaluations += int(cols.numel())
        self.count_gradients(int(cols.numel()) / self.x.shape[-1])
        return finite(self.oracle.gradient_columns(self.x, cols), "subgradient")

    def set_columns(self, cols: torch.Tensor, new: torch.Tensor) -> None:
        """``X[:, cols] = new`` (in place) and drop the cached value and gradient."""
        put_columns(self.x, cols, new)
        self._value = None
        self._grad = None


class ColumnOracle(FunctionOracle):
    """A :class:`FunctionOracle` whose tracker has column access.

    Args:
        value: ``X -> f(X)``.
        gradient: ``X -> ∂f(X)`` (a Euclidean (sub)gradient, chosen by a rule depending only
            on X — e.g. autodiff of ``‖·‖₁`` with ``sign(0) = 0``).
        gradient_columns: optional ``(X, cols) -> ∂f(X)[:, cols]`` computing only those
            columns; default: slice of ``gradient``.
    """

    def __init__(self, value: Callable, gradient: Callable,
                 gradient_columns: Callable | None = None, *, lipschitz: float | None = None):
        super().__init__(value, gradient, lipschitz=lipschitz)
        self._gcols = gradient_columns
        self.column_gradients = gradient_columns is not None

    def gradient_columns(self, x, cols):
        """Columns ``cols`` of ``∇f(X)``: the given column function, else the full gradient's
        columns.
        """
        if self._gcols is None:
            return self.gradient(x)[..., cols]
        return torch.as_tensor(self._gcols(x, cols), dtype=x.dtype, device=x.device)

    def track(self, x):
        return ColumnTracker(self, x)


class CompositeOracle(Oracle):
    r"""``F = f + h``: a smooth (or weakly convex) oracle ``f`` plus a separable term ``h``.

    ``h`` is any object with ``value(X)`` and ``subgradient(X)`` (the terms of
    :mod:`orthoplug.nonsmooth`: ``L1``, ``CappedL1``, …). The subgradient is
    ``∇f(X) + ∂h(X)``; since h is separable, its columns C are ``∂h(X_C)`` (``O(n p_C)``).
    The tracker wraps ``f``'s tracker, so its caches (e.g. a factored ``BX``) are kept.
    """

    def __init__(self, smooth: Oracle, nonsmooth):
        if not isinstance(nonsmooth, SubgradientTerm):
            raise ValueError("nonsmooth must have value(X) and subgradient(X) (e.g. "
                             "orthoplug.nonsmooth.L1)")
        self.smooth, self.nonsmooth = smooth, nonsmooth
        self.lipschitz = None
        # the columns of ∂h cost O(n|C|): the columns are cheap when those of ∇f are
        self.column_gradients = isinstance(smooth, ColumnGradients) and smooth.column_gradients

    def _h(self, x):
        return torch.as_tensor(self.nonsmooth.value(x), dtype=x.dtype, device=x.device)

    def value(self, x):
        return finite(self.smooth.value(x) + self._h(x), "cost")

    def gradient(self, x):
        return finite(self.smooth.gradient(x) + self.nonsmooth.subgradient(x), "subgradient")

    def gradient_columns(self, x, cols):
        """Columns ``cols`` of a subgradient of ``f + h``: ``∇f(X)[:, cols] + ∂h(X[:, cols])``."""
        g = (self.smooth.gradient_columns(x, cols) if isinstance(self.smooth, ColumnGradients)
             else self.smooth.gradient(x)[..., cols])
        return finite(g + self.nonsmooth.subgradient(x[..., cols]), "subgradient")

    def track(self, x):
        return CompositeTracker(self, x)


class CompositeTracker(ColumnTracker):
    """Tracker of :class:`CompositeOracle`: delegates ``f`` to the smooth oracle's tracker."""

    def __init__(self, oracle: CompositeOracle, x: torch.Tensor):  # noqa: D107
        self.oracle = oracle
        self.inner = oracle.smooth.track(x)
        self.h = oracle.nonsmooth
        self._value = None
        self._grad = None
        self.column_evaluations = 0

    @property
    def x(self) -> torch.Tensor:  # type: ignore[override]
        """The current point (the smooth part's tracker's)."""
        return self.inner.x

    @property
    def gradient_evaluations(self) -> float:  # type: ignore[override]
        """Gradient evaluations of the smooth part (the one count every solver reports)."""
        return self.inner.gradient_evaluations

    def count_gradients(self, amount: float) -> None:
        """Count on the smooth part's tracker."""
        self.inner.count_gradients(amount)

    def value(self):
        if self._value is None:
            x = self.inner.x
            self._value = finite(self.inner.value() + self.oracle._h(x), "cost")
        return self._value

    def gradient(self):
        if self._grad is None:
            self._grad = finite(self.inner.gradient() + self.h.subgradient(self.inner.x),
                                 "subgradient")
        return self._grad

    def gradient_rows(self, rows):
        return self.gradient()[rows]

    def gradient_columns(self, cols):
        if self._grad is not None:
            return self._grad[..., cols]
        self.column_evaluations += int(cols.numel())
        g = partial_subgradient(self.inner, cols)
        return finite(g + self.h.subgradient(self.inner.x[..., cols]), "subgradient")

    def _invalidate(self):
        self._value = None
        self._grad = None

    def set_columns(self, cols, new):
        write_columns(self.inner, cols, new)
        self._invalidate()

    def set_rows(self, rows, new_rows):
        self.inner.set_rows(rows, new_rows)
        self._invalidate()

    def set_point(self, x):
        self.inner.set_point(x)
        self._invalidate()


def partial_subgradient(tracker, cols: torch.Tensor) -> torch.Tensor:
    """Columns ``cols`` of the tracker's subgradient: its ``gradient_columns`` when it has
    :class:`~orthoplug.oracles.abilities.ColumnAccess`, else the full gradient's columns."""
    if isinstance(tracker, ColumnAccess):
        return tracker.gradient_columns(cols)
    return tracker.gradient()[..., cols]


def write_columns(tracker, cols: torch.Tensor, new: torch.Tensor) -> None:
    """``X[:, cols] = new`` through ``set_columns`` when the tracker has
    :class:`~orthoplug.oracles.abilities.ColumnAccess`, else ``set_point``."""
    if isinstance(tracker, ColumnAccess):
        tracker.set_columns(cols, new)
        return
    x = tracker.x.clone()
    put_columns(x, cols, new)
    tracker.set_point(x)
