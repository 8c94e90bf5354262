"""pymanopt front-ends of the comparison methods (:mod:`orthoplug.baselines`).

Each runs its baseline on a user's own ``pymanopt.Problem``, like the solvers' front-ends::

    import autograd.numpy as anp, pymanopt
    from orthoplug.adapters.pymanopt import ManPG
    from orthoplug import L1

    manifold = pymanopt.manifolds.Stiefel(n, r)
    @pymanopt.function.autograd(manifold)
    def cost(X):
        return -anp.trace(X.T @ C @ X)
    result = ManPG(h=L1(1e-3), lipschitz=2 * lam_max, max_iterations=200).run(
        pymanopt.Problem(manifold, cost))

Stiefel methods (``ManPG``, ``RSubGrad``, ``Landing``, ``PCAL``, ``RCD``, ``LADMM``, ``RADMM``,
``PSM``) take orthoplug's or pymanopt's ``Stiefel`` (and ``SpecialOrthogonalGroup`` as St(n, n));
the J-orthogonality methods (``ADMM``, ``UMCM``, ``CSDM``) take
:class:`~orthoplug.adapters.pymanopt.JOrthogonal` or
:class:`~orthoplug.adapters.pymanopt.IndefiniteStiefel`. The nonsmooth methods take ``h=`` (a
term of :mod:`orthoplug.nonsmooth`; so do RSubGrad and RSSM); the problem's cost is the
smooth part and the result's ``cost`` is ``f + h``. Landing, PCAL, ADMM and UMCM are infeasible
methods: read ``result.violation`` with the cost.
"""

from __future__ import annotations

from orthoplug.baselines import (
    admm,
    csdm,
    ladmm,
    landing,
    manpg,
    pcal,
    psm,
    radmm,
    rcd,
    rsubgrad,
    umcm,
)
from orthoplug.geometry.stiefel import StiefelGeometry

from ._pymanopt_base import SolverOptimizer

__all__ = ["ManPG", "RSubGrad", "Landing", "PCAL", "RCD", "UMCM", "ADMM", "CSDM", "LADMM",
           "RADMM", "PSM"]


class _LipschitzOptimizer(SolverOptimizer):
    """A front-end whose method needs the Lipschitz constant L of ∇f: ``lipschitz=L`` is given
    to the problem's oracle (a structured ``run(problem, oracle=...)`` brings its own)."""

    geometries = (StiefelGeometry,)

    def __init__(self, *args, lipschitz: float | None = None, **kwargs):
        if lipschitz is not None and not lipschitz > 0:
            raise ValueError(f"lipschitz must be > 0, got {lipschitz!r}")
        self.lipschitz = lipschitz
        super().__init__(*args, **kwargs)

    def oracle_for(self, problem):
        oracle = super().oracle_for(problem)
        oracle.lipschitz = self.lipschitz
        return oracle


class ManPG(_LipschitzOptimizer):
    """ManPG (manifold proximal gradient) for ``f + h`` on St(n, r).

    Options (see :class:`orthoplug.baselines.manpg.ManPG`): ``h``, ``step`` (t; default
    ``1/L``, then ``lipschitz`` is required), ``grow``, ``newton_tol``; ``lipschitz``: L of ∇f.
    The log's ``gradient_norm`` is ManPG's ``‖D‖_F / t``.
    """

    solver_class = manpg.ManPG


class LADMM(_LipschitzOptimizer):
    """Linearised ADMM for ``f + h`` on St(n, r).

    Options (see :class:`orthoplug.baselines.ladmm.LADMM`): ``h``, ``penalty``; ``lipschitz``:
    L of ∇f (required without a structured oracle). The log's ``gradient_norm`` is the splitting
    residual ``‖X − Y‖_F``.
    """

    solver_class = ladmm.LADMM


class RADMM(_LipschitzOptimizer):
    """Riemannian ADMM for ``f + h`` on St(n, r).

    Options (see :class:`orthoplug.baselines.radmm.RADMM`): ``h``, ``penalty``, ``smoothing``;
    ``lipschitz``: L of ∇f (required without a structured oracle).
    """

    solver_class = radmm.RADMM


class PSM(_LipschitzOptimizer):
    """Penalty splitting for ``f + h`` on St(n, r).

    Options (see :class:`orthoplug.baselines.psm.PSM`): ``h``, ``penalty``, ``growth``,
    ``max_penalty``; ``lipschitz``: L of ∇f (required without a structured oracle).
    """

    solver_class = psm.PSM


class RSubGrad(SolverOptimizer):
    """The full Riemannian subgradient method on St(n, p) (polar retraction).

    Options: the step rules of RSSM (``step_size``, ``schedule``, ``decay``, ``level``,
    ``patience``, ``shrink``), ``h``, ``return_best`` (see
    :class:`orthoplug.baselines.rsubgrad.RSubGrad`). The problem's autodiff gradient is the
    subgradient.
    """

    solver_class = rsubgrad.RSubGrad
    geometries = (StiefelGeometry,)


class Landing(SolverOptimizer):
    """The landing method (retraction-free, infeasible) from a point of St(n, p).

    Options (see :class:`orthoplug.baselines.landing.Landing`): ``step_size``, ``penalty``,
    ``safe_distance``.
    """

    solver_class = landing.Landing
    geometries = (StiefelGeometry,)


class PCAL(SolverOptimizer):
    """PCAL (proximal linearised augmented Lagrangian, infeasible) from a point of St(n, p).

    Options (see :class:`orthoplug.baselines.pcal.PCAL`): ``penalty``, ``step_size``
    (``"bb"`` or a number).
    """

    solver_class = pcal.PCAL
    geometries = (StiefelGeometry,)


class RCD(SolverOptimizer):
    """Givens-rotation coordinate descent on St(n, p) (one sweep of all row pairs per
    iteration).

    Options (see :class:`orthoplug.baselines.rcd.RCD`): ``step_size``,
    ``gradient="sweep"|"round"``.
    """

    solver_class = rcd.RCD
    geometries = (StiefelGeometry,)


class ADMM(SolverOptimizer):
    """Linearised ADMM with the splitting ``Y = JX`` (infeasible) on O(J) / the indefinite
    Stiefel set.

    Options (see :class:`orthoplug.baselines.admm.ADMM`): ``beta`` (β₀, a
    :class:`~orthoplug.baselines.admm.PenaltySchedule` or a dict of its options),
    ``lipschitz`` (default: a local estimate at the start).
    """

    solver_class = admm.ADMM
    geometries = admm.J_GEOMETRIES


class UMCM(SolverOptimizer):
    """The unconstrained multiplier correction method (Adagrad, infeasible) on O(J) / the
    indefinite Stiefel set.

    Options (see :class:`orthoplug.baselines.umcm.UMCM`): ``lr``, ``lr_decay``, ``beta``,
    ``hvp`` (``"auto"`` uses finite differences of the problem's gradient).
    """

    solver_class = umcm.UMCM
    geometries = admm.J_GEOMETRIES


class CSDM(SolverOptimizer):
    """Adagrad on the reduced hyperbolic-CS parameters of ``X = X₀ Y(ψ)`` (feasible) on O(J) /
    the indefinite Stiefel set.

    Options (see :class:`orthoplug.baselines.csdm.CSDM`): ``lr``, ``lr_decay``, ``layers``.
    """

    solver_class = csdm.CSDM
    geometries = admm.J_GEOMETRIES
