"""solvers.

The σ rules of the block methods' ``sigma_rule`` option are importable from here (and from
:mod:`orthoplug`): ``from orthoplug.solvers import SigmaFit``.
"""

# explicit re-exports ("X as X"), documented in their home module
from orthoplug.solvers.sigma_rules import SigmaBacktracking as SigmaBacktracking
from orthoplug.solvers.sigma_rules import SigmaFit as SigmaFit
from orthoplug.solvers.sigma_rules import SigmaFixed as SigmaFixed
