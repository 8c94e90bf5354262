"""Oracles (cost and gradient access) and trackers (a current point with cached values).

Solvers see a problem only through these: :mod:`~orthoplug.oracles.core` has the base classes
and the quadratic, function and finite-sum oracles, :mod:`~orthoplug.oracles.rows` row and
stochastic access, :mod:`~orthoplug.oracles.columns` column access and ``f + h`` composites,
and :mod:`~orthoplug.oracles.abilities` the declared optional abilities solvers check for.
"""

# explicit re-exports ("X as X"); no __all__, so the API reference documents each object once,
# in its home module
from .abilities import ColumnAccess as ColumnAccess
from .abilities import ColumnGradients as ColumnGradients
from .abilities import FiniteSum as FiniteSum
from .abilities import HessianVector as HessianVector
from .abilities import PairModel as PairModel
from .abilities import QuadraticArrays as QuadraticArrays
from .abilities import Refreshable as Refreshable
from .abilities import RowGradients as RowGradients
from .abilities import StochasticGradients as StochasticGradients
from .abilities import SubgradientTerm as SubgradientTerm
from .abilities import require as require
from .columns import ColumnOracle as ColumnOracle
from .columns import ColumnTracker as ColumnTracker
from .columns import CompositeOracle as CompositeOracle
from .columns import CompositeTracker as CompositeTracker
from .columns import partial_subgradient as partial_subgradient
from .columns import write_columns as write_columns
from .core import FiniteSumOracle as FiniteSumOracle
from .core import FunctionOracle as FunctionOracle
from .core import NonFiniteError as NonFiniteError
from .core import Oracle as Oracle
from .core import QuadraticOracle as QuadraticOracle
from .core import QuadraticTracker as QuadraticTracker
from .core import Tracker as Tracker
from .core import all_finite as all_finite
from .core import estimate_lipschitz as estimate_lipschitz
from .core import finite as finite
from .core import host_array as host_array
from .rows import RowGradientOracle as RowGradientOracle
from .rows import RowGradientTracker as RowGradientTracker
from .rows import StochasticOracle as StochasticOracle
