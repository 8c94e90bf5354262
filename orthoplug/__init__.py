"""orthoplug: orthogonality and J-orthogonality solvers for pymanopt and geoopt.

The nonsmooth terms and the oracles are importable from the top level::

    from orthoplug import L1, QuadraticOracle, FunctionOracle

``import orthoplug`` loads numpy and torch only: the front-ends are in
:mod:`orthoplug.adapters.pymanopt` and :mod:`orthoplug.adapters.geoopt`, the solvers in
:mod:`orthoplug.solvers`, the comparison methods in :mod:`orthoplug.baselines`.
"""

from orthoplug.nonsmooth import (
    L0,
    L1,
    CappedL1,
    NonNegative,
    PiecewiseAffine,
    SeparableTerm,
    Zero,
)
from orthoplug.oracles import (
    ColumnOracle,
    CompositeOracle,
    FiniteSumOracle,
    FunctionOracle,
    NonFiniteError,
    Oracle,
    QuadraticOracle,
    RowGradientOracle,
    StochasticOracle,
    Tracker,
)

__version__ = "0.1.0"

__all__ = ["L0", "L1", "CappedL1", "NonNegative", "PiecewiseAffine", "SeparableTerm", "Zero",
           "Oracle", "FunctionOracle", "QuadraticOracle", "FiniteSumOracle", "RowGradientOracle",
           "ColumnOracle", "CompositeOracle", "StochasticOracle", "Tracker", "NonFiniteError"]
