"""pymanopt front-ends of the JOBCD family (:mod:`orthoplug.solvers.jobcd`) on O(J) and the
indefinite Stiefel set."""

from __future__ import annotations

from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry, JOrthogonalGeometry
from orthoplug.solvers import jobcd

from ._pymanopt_base import SolverOptimizer

__all__ = ["GSJOBCD", "JJOBCD", "VRJJOBCD"]

_J_GEOMETRIES = (JOrthogonalGeometry, IndefiniteStiefelGeometry)


class GSJOBCD(SolverOptimizer):
    """GS-JOBCD as a pymanopt optimizer.

    Options (see :class:`orthoplug.solvers.jobcd.GSJOBCD`): ``theta``, ``sigma``, ``sigma0``,
    ``sigma_shrink``, ``side="auto"|"row"|"column"``, ``pairs="random"|"cyclic"|"greedy"``,
    ``curvature="exact"|"scalar"``, ``jacobi_tol``, ``max_boost``, ``same_sign``, ``candidates``.
    For the quadratic fast path pass ``run(problem, oracle=QuadraticOracle(C, D, scale))``; on
    square O(J) with ``D = None`` that runs column J-Jacobi sweeps (one sweep per iteration).
    With ``curvature="scalar"`` and the same ``side``, ``sigma``/``sigma0``, ``theta`` and
    ``seed`` it takes the same steps as the torch
    :class:`orthoplug.adapters.geoopt.GSJOBCD` (one iteration per ``step``).
    """

    solver_class = jobcd.GSJOBCD
    geometries = _J_GEOMETRIES


class JJOBCD(SolverOptimizer):
    """J-JOBCD (Jacobi, ⌊n/2⌋ pairs per iteration) for pymanopt.

    Options: ``curvature="auto"|"scalar"|"hessian"``, ``theta``, ``sigma``, ``sigma0``,
    ``sigma_shrink``, ``side="auto"|"row"|"column"`` (see
    :class:`orthoplug.solvers.jobcd.JJOBCD`). On square O(J) with a problem that has a Euclidean
    Hessian (an autodiff cost, or ``euclidean_hessian=``) the default is the second-order column
    model (one sweep of all column pairs per iteration, from one gradient and one Hessian-vector
    product); elsewhere, and with ``curvature="scalar"``, the same options and ``seed`` give the
    steps of the torch :class:`orthoplug.adapters.geoopt.JJOBCD`.
    """

    solver_class = jobcd.JJOBCD
    geometries = _J_GEOMETRIES


class VRJJOBCD(SolverOptimizer):
    """VR-J-JOBCD for pymanopt.

    pymanopt has no finite-sum interface: pass ``run(problem, oracle=FiniteSumOracle(...))`` with
    the component gradients (the problem's cost is still used for nothing else). Options:
    ``batch_size``, ``small_batch``, ``reset_probability``, ``sigma``, ``theta``.
    """

    solver_class = jobcd.VRJJOBCD
    geometries = _J_GEOMETRIES
