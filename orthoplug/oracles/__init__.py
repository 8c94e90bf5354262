"""Oracles (cost and gradient access) and trackers (a current point with cached values).

Solvers see a problem only through these: :mod:`~orthoplug.oracles.core` has the base classes
and the quadratic, function and finite-sum oracles, :mod:`~orthoplug.oracles.rows` row and
stochastic access, :mod:`~orthoplug.oracles.columns` column access and ``f + h`` composites,
and :mod:`~orthoplug.oracles.abilities` the declared optional abilities solvers check for.
"""

from .abilities import (
    ColumnAccess,
    ColumnGradients,
    FiniteSum,
    PairModel,
    Refreshable,
    RowGradients,
    StochasticGradients,
    require,
)
from .columns import (
    ColumnOracle,
    ColumnTracker,
    CompositeOracle,
    CompositeTracker,
    partial_subgradient,
    write_columns,
)
from .core import (
    FiniteSumOracle,
    FunctionOracle,
    NonFiniteError,
    Oracle,
    QuadraticOracle,
    QuadraticTracker,
    Tracker,
    all_finite,
    finite,
    host_array,
)
from .rows import RowGradientOracle, RowGradientTracker, StochasticOracle

__all__ = ["Oracle", "FunctionOracle", "QuadraticOracle", "FiniteSumOracle", "Tracker",
           "QuadraticTracker", "NonFiniteError", "host_array", "all_finite", "finite",
           "RowGradientOracle", "RowGradientTracker", "StochasticOracle", "ColumnTracker",
           "ColumnOracle",
           "CompositeOracle", "CompositeTracker", "partial_subgradient", "write_columns",
           "RowGradients", "ColumnGradients", "ColumnAccess", "PairModel", "Refreshable",
           "FiniteSum", "StochasticGradients", "require"]
