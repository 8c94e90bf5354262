"""The optional abilities of oracles and trackers, declared as runtime-checkable protocols.

Every oracle has ``value``, ``gradient``, ``value_and_gradient`` and ``track``; every tracker
has ``x``, ``value()``, ``gradient()``, ``gradient_rows``, ``set_rows``, ``set_point`` and
``add_low_rank`` (:class:`~orthoplug.oracles.core.Tracker`). What a solver needs beyond that it
asks for with :func:`require` (an error naming the missing ability) or tests with
``isinstance(obj, Ability)`` to choose a faster path; nothing probes with ``hasattr``.

An object has an ability when it has the protocol's methods; no registration is needed, so a
user's own oracle gains e.g. :class:`RowGradients` by defining ``gradient_rows(x, rows)``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

__all__ = ["RowGradients", "ColumnGradients", "ColumnAccess", "PairModel", "QuadraticArrays",
           "Refreshable", "FiniteSum", "StochasticGradients", "SubgradientTerm", "HessianVector",
           "require"]


@runtime_checkable
class RowGradients(Protocol):
    """An oracle that computes chosen rows of ∇f without the whole gradient (RSDM-P)."""

    def gradient_rows(self, x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Rows ``rows`` of ``∇f(X)``."""


@runtime_checkable
class ColumnGradients(Protocol):
    """An oracle that computes chosen columns of ∇f (or of a subgradient) only (RSSM)."""

    def gradient_columns(self, x: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """Columns ``cols`` of ``∇f(X)``."""


@runtime_checkable
class ColumnAccess(Protocol):
    """A tracker that reads gradient columns and writes columns of X in place (RSSM)."""

    def gradient_columns(self, cols: torch.Tensor) -> torch.Tensor:
        """Columns ``cols`` of the gradient at the current point."""

    def set_columns(self, cols: torch.Tensor, new: torch.Tensor) -> None:
        """``X[:, cols] = new``."""


@runtime_checkable
class PairModel(Protocol):
    """A tracker with the exact model of a step on a row pair and the matching row update, on
    its arrays (GS-JOBCD's and OBCD's exact pair steps outside the compiled loops)."""

    def pair_model_array(self, rows, prox: float, *, psd: bool = True):
        """``(Z, M, Q)``: the pair's rows, gradient block and exact curvature plus ``prox·I₄``."""

    def set_rows_array(self, rows, new_rows) -> None:
        """``X[rows] = new_rows`` with the cached products updated."""

    def refresh(self) -> None:
        """Recompute the cached products from X (against drift of incremental updates)."""


@runtime_checkable
class QuadraticArrays(Protocol):
    """A tracker of ``f = s·tr(XᵀCXD)`` whose state compiled loops read and update in place
    (GS-JOBCD's and OBCD's pair loops, column J-Jacobi's C;
    :class:`~orthoplug.oracles.core.QuadraticTracker`).

    ``xa``, ``ya``, ``ca``: X, ``Y = C X`` and C as arrays — NumPy views sharing memory with
    CPU tensors (``on_host``), else the tensors; ``da``: D (``None`` for D = I); ``s``: the
    scale; ``cost``: f at the current point, which a loop that moved ``xa`` and ``ya`` in place
    sets; ``curvature_is_psd``: whether every block curvature ``2s (Z D Zᵀ) ⊗ C_BB`` is PSD.
    """

    xa: Any
    ya: Any
    ca: Any
    da: Any
    s: float
    cost: float
    on_host: bool
    curvature_is_psd: bool

    def refresh(self) -> None:
        """Recompute ``Y`` and the cost from X (against drift of incremental updates)."""


@runtime_checkable
class Refreshable(Protocol):
    """A tracker whose incrementally updated caches can be recomputed from X."""

    def refresh(self) -> None:
        """Recompute the cached products from X."""


@runtime_checkable
class FiniteSum(Protocol):
    """An oracle of ``f = (1/N) Σ_i f_i`` with component gradients (VR-J-JOBCD, stochastic
    RSDM)."""

    num_components: int

    def component_gradient(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """The mean gradient of the components ``idx``."""


@runtime_checkable
class StochasticGradients(Protocol):
    """An oracle of ``F = E f(·; ξ)`` that samples minibatch gradients (stochastic RSDM)."""

    def sample_gradient(self, x: torch.Tensor, batch_size: int,
                        generator: torch.Generator) -> torch.Tensor:
        """A minibatch gradient of ``batch_size`` fresh samples."""


@runtime_checkable
class SubgradientTerm(Protocol):
    """A nonsmooth term with a value and a subgradient (RSSM's ``h``; every term of
    :mod:`orthoplug.nonsmooth` has both)."""

    def value(self, x: torch.Tensor) -> torch.Tensor:
        """``h(X)``."""

    def subgradient(self, x: torch.Tensor) -> torch.Tensor:
        """An element of ``∂h(X)``."""


@runtime_checkable
class HessianVector(Protocol):
    """An oracle with Euclidean Hessian-vector products (J-JOBCD's second-order column model;
    :class:`~orthoplug.oracles.core.FunctionOracle` given ``hessian=``, pymanopt problems with
    an autodiff cost or a Euclidean Hessian)."""

    def hessian_vector(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """``∇²f(X)[U]``, the Euclidean Hessian of f at X applied to U (shape of X)."""


def require(obj, ability: type, who: str, what: str = "oracle") -> None:
    """Raise ``TypeError`` unless ``obj`` has ``ability`` (a protocol of this module).

    Args:
        obj: the oracle or tracker.
        ability: the protocol class.
        who: the solver that needs it (named in the message).
        what: ``"oracle"`` or ``"tracker"`` (named in the message).
    """
    if not isinstance(obj, ability):
        names = sorted(n for n in vars(ability) if not n.startswith("_") and
                       callable(getattr(ability, n)))
        raise TypeError(f"{who} needs an {what} with {ability.__name__} ({', '.join(names)}); "
                        f"got {type(obj).__name__}")
