"""orthoplug: orthogonality and J-orthogonality solvers for pymanopt and geoopt.

The nonsmooth terms and the oracles are importable from the top level::

    from orthoplug import L1, QuadraticOracle, FunctionOracle

The σ rules of the block methods (``SigmaBacktracking``, ``SigmaFit``, ``SigmaFixed`` of
:mod:`orthoplug.solvers.sigma_rules`, the ``sigma_rule`` option) are importable from the top
level too; they are loaded on first use, so ``import orthoplug`` stays light.

:func:`warm_up` compiles every numba kernel once (solvers never count compilation against
their ``max_time``; this moves it to a moment of your choosing).

``import orthoplug`` loads numpy and torch only: the front-ends are in
:mod:`orthoplug.adapters.pymanopt` and :mod:`orthoplug.adapters.geoopt`, the solvers in
:mod:`orthoplug.solvers`, the comparison methods in :mod:`orthoplug.baselines`.
"""

# explicit re-exports ("X as X"); no __all__, so the API reference documents each class once,
# in its home module
from orthoplug._version import __version__ as __version__
from orthoplug.nonsmooth import L0 as L0
from orthoplug.nonsmooth import L1 as L1
from orthoplug.nonsmooth import CappedL1 as CappedL1
from orthoplug.nonsmooth import NonNegative as NonNegative
from orthoplug.nonsmooth import PiecewiseAffine as PiecewiseAffine
from orthoplug.nonsmooth import SeparableTerm as SeparableTerm
from orthoplug.nonsmooth import Zero as Zero
from orthoplug.oracles import ColumnOracle as ColumnOracle
from orthoplug.oracles import CompositeOracle as CompositeOracle
from orthoplug.oracles import FiniteSumOracle as FiniteSumOracle
from orthoplug.oracles import FunctionOracle as FunctionOracle
from orthoplug.oracles import NonFiniteError as NonFiniteError
from orthoplug.oracles import Oracle as Oracle
from orthoplug.oracles import QuadraticOracle as QuadraticOracle
from orthoplug.oracles import RowGradientOracle as RowGradientOracle
from orthoplug.oracles import StochasticOracle as StochasticOracle
from orthoplug.oracles import Tracker as Tracker

#: names served from :mod:`orthoplug.solvers.sigma_rules` on first access (module ``__getattr__``)
_SIGMA_RULES = ("SigmaBacktracking", "SigmaFit", "SigmaFixed")


def __getattr__(name: str):
    if name in _SIGMA_RULES:
        from orthoplug.solvers import sigma_rules

        return getattr(sigma_rules, name)
    raise AttributeError(f"module 'orthoplug' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_SIGMA_RULES])


def warm_up() -> None:
    """Compile (or load from numba's cache) every compiled kernel of the package; see
    :func:`orthoplug.warmup.warm_up`."""
    from orthoplug.warmup import warm_up as _warm_up

    _warm_up()
