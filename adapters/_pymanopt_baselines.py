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
from orthoplug.nonsmooth import SeparableTerm
from orthoplug.solvers.step_rules import StepRule

from ._pymanopt_base import SolverOptimizer

__all__ = ["ManPG", "RSubGrad", "Landing", "PCAL", "RCD", "UMCM", "ADMM", "CSDM", "LADMM",
           "RADMM", "PSM"]


class _LipschitzOptimizer(SolverOptimizer):
    """A front-end whose method needs the Lipschitz constant L of ∇f: ``lipschitz=L`` is given
    to the problem's oracle (a structured ``run(problem, oracle=...)`` brings its own)."""

    geometries = (StiefelGeometry,)

    def __init__(self, lipschitz: float | None, **options):
        if lipschitz is not None and not lipschitz > 0:
            raise ValueError(f"lipschitz must be > 0, got {lipschitz!r}")
        self.lipschitz = lipschitz
        super().__init__(**options)

    def oracle_for(self, problem):
        oracle = super().oracle_for(problem)
        oracle.lipschitz = self.lipschitz
        return oracle


class ManPG(_LipschitzOptimizer):
    """ManPG (manifold proximal gradient) for ``f + h`` on St(n, r)
    (:class:`orthoplug.baselines.manpg.ManPG`: the math and the rules of every option).

    The log's ``gradient_norm`` is ManPG's ``‖D‖_F / t``.

    Args:
        h: the separable nonsmooth term of :mod:`orthoplug.nonsmooth` (default zero).
        step_size: t (default ``1/L``; then ``lipschitz`` is required).
        grow: factor applied to t after a step without backtracking (1 disables).
        newton_tol: tolerance of ``‖XᵀD + DᵀX‖_F`` in the direction solve.
        lipschitz: L of ∇f, given to the problem's oracle (a structured ``run(problem,
            oracle=...)`` brings its own).
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = manpg.ManPG

    def __init__(self, h: SeparableTerm | None = None, *, step_size: float | None = None,
                 grow: float = 1.01, newton_tol: float = 1e-8, lipschitz: float | None = None,
                 max_time: float = 1000, max_iterations: int = 1000,
                 min_gradient_norm: float = 1e-6, verbosity: int = 0, log_verbosity: int = 0,
                 seed: int | None = None, eval_every: int | None = None,
                 stall_evaluations: int = 0, stall_tolerance: float = 1e-15,
                 target_cost: float | None = None):
        super().__init__(lipschitz, max_time=max_time, max_iterations=max_iterations,
                         min_gradient_norm=min_gradient_norm, verbosity=verbosity,
                         log_verbosity=log_verbosity, seed=seed, eval_every=eval_every,
                         stall_evaluations=stall_evaluations, stall_tolerance=stall_tolerance,
                         target_cost=target_cost,
                         h=h, step_size=step_size, grow=grow, newton_tol=newton_tol)


class LADMM(_LipschitzOptimizer):
    """Linearised ADMM for ``f + h`` on St(n, r)
    (:class:`orthoplug.baselines.ladmm.LADMM`: the math and the rules of every option).

    ``lipschitz`` is required without a structured oracle. The log's ``gradient_norm`` is the
    splitting residual ``‖X − Y‖_F``.

    Args:
        h: the separable nonsmooth term of :mod:`orthoplug.nonsmooth` (default zero).
        penalty: the ADMM penalty as a multiple of L.
        lipschitz: L of ∇f, given to the problem's oracle (a structured ``run(problem,
            oracle=...)`` brings its own).
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = ladmm.LADMM

    def __init__(self, h: SeparableTerm | None = None, *, penalty: float = 2.0,
                 lipschitz: float | None = None,
                 max_time: float = 1000, max_iterations: int = 1000,
                 min_gradient_norm: float = 1e-6, verbosity: int = 0, log_verbosity: int = 0,
                 seed: int | None = None, eval_every: int | None = None,
                 stall_evaluations: int = 0, stall_tolerance: float = 1e-15,
                 target_cost: float | None = None):
        super().__init__(lipschitz, max_time=max_time, max_iterations=max_iterations,
                         min_gradient_norm=min_gradient_norm, verbosity=verbosity,
                         log_verbosity=log_verbosity, seed=seed, eval_every=eval_every,
                         stall_evaluations=stall_evaluations, stall_tolerance=stall_tolerance,
                         target_cost=target_cost,
                         h=h, penalty=penalty)


class RADMM(_LipschitzOptimizer):
    """Riemannian ADMM for ``f + h`` on St(n, r)
    (:class:`orthoplug.baselines.radmm.RADMM`: the math and the rules of every option).

    ``lipschitz`` is required without a structured oracle.

    Args:
        h: the separable nonsmooth term of :mod:`orthoplug.nonsmooth` (default zero).
        smoothing: the Moreau smoothing μ as a multiple of 1/ρ.
        penalty: the ADMM penalty ρ as a multiple of L.
        lipschitz: L of ∇f, given to the problem's oracle (a structured ``run(problem,
            oracle=...)`` brings its own).
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = radmm.RADMM

    def __init__(self, h: SeparableTerm | None = None, *, smoothing: float = 0.1,
                 penalty: float = 2.0, lipschitz: float | None = None,
                 max_time: float = 1000, max_iterations: int = 1000,
                 min_gradient_norm: float = 1e-6, verbosity: int = 0, log_verbosity: int = 0,
                 seed: int | None = None, eval_every: int | None = None,
                 stall_evaluations: int = 0, stall_tolerance: float = 1e-15,
                 target_cost: float | None = None):
        super().__init__(lipschitz, max_time=max_time, max_iterations=max_iterations,
                         min_gradient_norm=min_gradient_norm, verbosity=verbosity,
                         log_verbosity=log_verbosity, seed=seed, eval_every=eval_every,
                         stall_evaluations=stall_evaluations, stall_tolerance=stall_tolerance,
                         target_cost=target_cost,
                         h=h, smoothing=smoothing, penalty=penalty)


class PSM(_LipschitzOptimizer):
    """Penalty splitting for ``f + h`` on St(n, r)
    (:class:`orthoplug.baselines.psm.PSM`: the math and the rules of every option).

    ``lipschitz`` is required without a structured oracle.

    Args:
        h: the separable nonsmooth term of :mod:`orthoplug.nonsmooth` (default zero).
        penalty: the first penalty β as a multiple of L.
        growth: factor ≥ 1 applied to β after every iteration whose ``Y⁺ ≠ X⁺``.
        max_penalty: cap of β as a multiple of L.
        lipschitz: L of ∇f, given to the problem's oracle (a structured ``run(problem,
            oracle=...)`` brings its own).
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = psm.PSM

    def __init__(self, h: SeparableTerm | None = None, *, penalty: float = 1.0,
                 growth: float = 1.01, max_penalty: float = 1e4, lipschitz: float | None = None,
                 max_time: float = 1000, max_iterations: int = 1000,
                 min_gradient_norm: float = 1e-6, verbosity: int = 0, log_verbosity: int = 0,
                 seed: int | None = None, eval_every: int | None = None,
                 stall_evaluations: int = 0, stall_tolerance: float = 1e-15,
                 target_cost: float | None = None):
        super().__init__(lipschitz, max_time=max_time, max_iterations=max_iterations,
                         min_gradient_norm=min_gradient_norm, verbosity=verbosity,
                         log_verbosity=log_verbosity, seed=seed, eval_every=eval_every,
                         stall_evaluations=stall_evaluations, stall_tolerance=stall_tolerance,
                         target_cost=target_cost,
                         h=h, penalty=penalty, growth=growth, max_penalty=max_penalty)


class RSubGrad(SolverOptimizer):
    """The full Riemannian subgradient method on St(n, p) (polar retraction)
    (:class:`orthoplug.baselines.rsubgrad.RSubGrad`: the math and the rules of every option).

    The problem's autodiff gradient is the subgradient; the step rules are RSSM's.

    Args:
        step_size: the step rule: an object of :mod:`orthoplug.solvers.step_rules`
            (``Polyak``, ``Diminishing``, ``Constant``, ``Geometric``, ``GeometricOnStall``), a
            number γ₀ (``Diminishing(γ₀)``) or a rule name; default ``"polyak"``.
        h: the separable nonsmooth term of :mod:`orthoplug.nonsmooth` (default zero).
        return_best: return the best point seen rather than the last.
        final_prox: with a separable ``h``, end with the proximal pass that sets exact zeros.
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = rsubgrad.RSubGrad
    geometries = (StiefelGeometry,)

    def __init__(self, *, step_size: StepRule | float | str = "polyak",
                 h: SeparableTerm | None = None, return_best: bool = False,
                 final_prox: bool = True,
                 max_time: float = 1000, max_iterations: int = 1000,
                 min_gradient_norm: float = 1e-6, verbosity: int = 0, log_verbosity: int = 0,
                 seed: int | None = None, eval_every: int | None = None,
                 stall_evaluations: int = 0, stall_tolerance: float = 1e-15,
                 target_cost: float | None = None):
        super().__init__(max_time=max_time, max_iterations=max_iterations,
                         min_gradient_norm=min_gradient_norm, verbosity=verbosity,
                         log_verbosity=log_verbosity, seed=seed, eval_every=eval_every,
                         stall_evaluations=stall_evaluations, stall_tolerance=stall_tolerance,
                         target_cost=target_cost,
                         step_size=step_size, h=h, return_best=return_best,
                         final_prox=final_prox)


class Landing(SolverOptimizer):
    """The landing method (retraction-free, infeasible) from a point of St(n, p)
    (:class:`orthoplug.baselines.landing.Landing`: the math and the rules of every option).

    Args:
        step_size: η > 0.
        penalty: λ > 0 (attraction to the manifold).
        safe_distance: ε ∈ (0, 1): the iterates keep ``‖XᵀX − I‖_F ≤ ε``.
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = landing.Landing
    geometries = (StiefelGeometry,)

    def __init__(self, *, step_size: float = 0.1, penalty: float = 1.0,
                 safe_distance: float = 0.5,
                 max_time: float = 1000, max_iterations: int = 1000,
                 min_gradient_norm: float = 1e-6, verbosity: int = 0, log_verbosity: int = 0,
                 seed: int | None = None, eval_every: int | None = None,
                 stall_evaluations: int = 0, stall_tolerance: float = 1e-15,
                 target_cost: float | None = None):
        super().__init__(max_time=max_time, max_iterations=max_iterations,
                         min_gradient_norm=min_gradient_norm, verbosity=verbosity,
                         log_verbosity=log_verbosity, seed=seed, eval_every=eval_every,
                         stall_evaluations=stall_evaluations, stall_tolerance=stall_tolerance,
                         target_cost=target_cost,
                         step_size=step_size, penalty=penalty, safe_distance=safe_distance)


class PCAL(SolverOptimizer):
    """PCAL (proximal linearised augmented Lagrangian, infeasible) from a point of St(n, p)
    (:class:`orthoplug.baselines.pcal.PCAL`: the math and the rules of every option).

    Args:
        penalty: λ > 0.
        step_size: ``"bb"`` (Barzilai–Borwein) or a fixed α > 0.
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = pcal.PCAL
    geometries = (StiefelGeometry,)

    def __init__(self, *, penalty: float = 1.0, step_size: float | str = "bb",
                 max_time: float = 1000, max_iterations: int = 1000,
                 min_gradient_norm: float = 1e-6, verbosity: int = 0, log_verbosity: int = 0,
                 seed: int | None = None, eval_every: int | None = None,
                 stall_evaluations: int = 0, stall_tolerance: float = 1e-15,
                 target_cost: float | None = None):
        super().__init__(max_time=max_time, max_iterations=max_iterations,
                         min_gradient_norm=min_gradient_norm, verbosity=verbosity,
                         log_verbosity=log_verbosity, seed=seed, eval_every=eval_every,
                         stall_evaluations=stall_evaluations, stall_tolerance=stall_tolerance,
                         target_cost=target_cost,
                         penalty=penalty, step_size=step_size)


class RCD(SolverOptimizer):
    """Givens-rotation coordinate descent on St(n, p) (one sweep of all row pairs per
    iteration; :class:`orthoplug.baselines.rcd.RCD`: the math and the rules of every option).

    Args:
        step_size: η > 0.
        gradient: ``"sweep"`` (linearised) or ``"round"``.
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = rcd.RCD
    geometries = (StiefelGeometry,)

    def __init__(self, *, step_size: float = 0.1, gradient: str = "sweep",
                 max_time: float = 1000, max_iterations: int = 1000,
                 min_gradient_norm: float = 1e-6, verbosity: int = 0, log_verbosity: int = 0,
                 seed: int | None = None, eval_every: int | None = None,
                 stall_evaluations: int = 0, stall_tolerance: float = 1e-15,
                 target_cost: float | None = None):
        super().__init__(max_time=max_time, max_iterations=max_iterations,
                         min_gradient_norm=min_gradient_norm, verbosity=verbosity,
                         log_verbosity=log_verbosity, seed=seed, eval_every=eval_every,
                         stall_evaluations=stall_evaluations, stall_tolerance=stall_tolerance,
                         target_cost=target_cost,
                         step_size=step_size, gradient=gradient)


class ADMM(SolverOptimizer):
    """Linearised ADMM with the splitting ``Y = JX`` (infeasible) on O(J) / the indefinite
    Stiefel set (:class:`orthoplug.baselines.admm.ADMM`: the math and the rules of every
    option).

    Args:
        beta: β₀, a :class:`~orthoplug.baselines.admm.PenaltySchedule` or a dict of its options.
        lipschitz: the linearisation constant (``None``: a local estimate at the start).
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = admm.ADMM
    geometries = admm.J_GEOMETRIES

    def __init__(self, *, beta: float | admm.PenaltySchedule | dict = 1e4,
                 lipschitz: float | None = None,
                 max_time: float = 1000, max_iterations: int = 1000,
                 min_gradient_norm: float = 1e-6, verbosity: int = 0, log_verbosity: int = 0,
                 seed: int | None = None, eval_every: int | None = None,
                 stall_evaluations: int = 0, stall_tolerance: float = 1e-15,
                 target_cost: float | None = None):
        super().__init__(max_time=max_time, max_iterations=max_iterations,
                         min_gradient_norm=min_gradient_norm, verbosity=verbosity,
                         log_verbosity=log_verbosity, seed=seed, eval_every=eval_every,
                         stall_evaluations=stall_evaluations, stall_tolerance=stall_tolerance,
                         target_cost=target_cost,
                         beta=beta, lipschitz=lipschitz)


class UMCM(SolverOptimizer):
    """The unconstrained multiplier correction method (Adagrad, infeasible) on O(J) / the
    indefinite Stiefel set (:class:`orthoplug.baselines.umcm.UMCM`: the math and the rules of
    every option).

    Args:
        step_size: Adagrad's learning rate.
        step_decay: Adagrad's learning-rate decay.
        beta: initial penalty, a :class:`~orthoplug.baselines.admm.PenaltySchedule` or a dict
            of its options.
        hvp: ``"auto"`` (finite differences of the problem's gradient), ``"closed"``,
            ``"autograd"`` or ``"finite-difference"``.
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = umcm.UMCM
    geometries = admm.J_GEOMETRIES

    def __init__(self, *, step_size: float = 5e-3, step_decay: float = 0.0,
                 beta: float | admm.PenaltySchedule | dict = 1e2, hvp: str = "auto",
                 max_time: float = 1000, max_iterations: int = 1000,
                 min_gradient_norm: float = 1e-6, verbosity: int = 0, log_verbosity: int = 0,
                 seed: int | None = None, eval_every: int | None = None,
                 stall_evaluations: int = 0, stall_tolerance: float = 1e-15,
                 target_cost: float | None = None):
        super().__init__(max_time=max_time, max_iterations=max_iterations,
                         min_gradient_norm=min_gradient_norm, verbosity=verbosity,
                         log_verbosity=log_verbosity, seed=seed, eval_every=eval_every,
                         stall_evaluations=stall_evaluations, stall_tolerance=stall_tolerance,
                         target_cost=target_cost,
                         step_size=step_size, step_decay=step_decay, beta=beta, hvp=hvp)


class CSDM(SolverOptimizer):
    """Adagrad on the reduced hyperbolic-CS parameters of ``X = X₀ Y(ψ)`` (feasible) on O(J) /
    the indefinite Stiefel set (:class:`orthoplug.baselines.csdm.CSDM`: the math and the rules
    of every option).

    Args:
        step_size: Adagrad's learning rate.
        step_decay: Adagrad's learning-rate decay.
        layers: Givens brick layers per orthogonal factor (≥ 1).
        max_time, max_iterations, min_gradient_norm, verbosity, log_verbosity: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer` (pymanopt's options).
        seed, eval_every, stall_evaluations, stall_tolerance, target_cost: as in
            :class:`~orthoplug.adapters.pymanopt.SolverOptimizer`.
    """

    solver_class = csdm.CSDM
    geometries = admm.J_GEOMETRIES

    def __init__(self, *, step_size: float = 5e-3, step_decay: float = 0.0, layers: int = 1,
                 max_time: float = 1000, max_iterations: int = 1000,
                 min_gradient_norm: float = 1e-6, verbosity: int = 0, log_verbosity: int = 0,
                 seed: int | None = None, eval_every: int | None = None,
                 stall_evaluations: int = 0, stall_tolerance: float = 1e-15,
                 target_cost: float | None = None):
        super().__init__(max_time=max_time, max_iterations=max_iterations,
                         min_gradient_norm=min_gradient_norm, verbosity=verbosity,
                         log_verbosity=log_verbosity, seed=seed, eval_every=eval_every,
                         stall_evaluations=stall_evaluations, stall_tolerance=stall_tolerance,
                         target_cost=target_cost,
                         step_size=step_size, step_decay=step_decay, layers=layers)
