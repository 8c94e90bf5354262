r"""``HyperbolicEig``: the direct solution of ``min s·tr(Xᵀ C X D)`` over O(J) and iSt.

For ``s·C ≻ 0`` and a diagonal ``D ⪰ 0`` the global minimiser is a set of eigenvectors of the
definite pencil ``(C, J)`` (:func:`orthoplug.linalg.hyperbolic_trace_min` states and proves it):
no iterations over the manifold, one Cholesky factorisation and one symmetric eigendecomposition
(``method="dense"``) or a Lanczos run on the pencil (``method="iterative"``). It needs the cost
as a known quadratic (an oracle whose ``quadratic`` is a
:class:`~orthoplug.oracles.core.QuadraticOracle`); any other oracle is rejected.
"""

from __future__ import annotations

import numpy as np
import torch

from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry, JOrthogonalGeometry
from orthoplug.linalg import METHODS, hyperbolic_trace_min
from orthoplug.oracles import Oracle

from .base import SolverResult
from .clock import RunClock

__all__ = ["HyperbolicEig"]


class HyperbolicEig:
    """Global minimiser of ``s·tr(Xᵀ C X D)`` over ``Xᵀ J X = J_k`` by a pencil eigensolve.

    Same ``run(oracle, x0, geometry) -> SolverResult`` as the iterative solvers, without a run
    loop: the result's ``iterations`` is 0 for the dense method and the number of C-solves for the
    iterative one; ``info`` holds ``method``, ``certificate`` (the minimum from the pencil
    eigenvalues), ``certificate_gap`` (cost − certificate), ``eigenvalues`` and ``residual``.

    Args:
        method: ``"auto"`` (dense for the dense C of a
            :class:`~orthoplug.oracles.core.QuadraticOracle`), ``"dense"`` or ``"iterative"``
            (see :func:`~orthoplug.linalg.hyperbolic_trace_min`).
        tol: the iterative method's relative Ritz residual tolerance.
        maxiter: the iterative method's restart budget (``None``: ARPACK's default).

    Raises:
        ValueError: on an unknown method or a non-positive ``tol``.
    """

    name = "HyperbolicEig"

    def __init__(self, method: str = "auto", tol: float = 1e-10, maxiter: int | None = None):
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if not (tol > 0 and np.isfinite(tol)):
            raise ValueError(f"tol must be positive and finite, got {tol!r}")
        self.method, self.tol, self.maxiter = method, float(tol), maxiter

    def run(self, oracle: Oracle, x0: torch.Tensor | None, geometry) -> SolverResult:
        """Solve for the minimiser of ``oracle`` over ``geometry`` (``x0`` only fixes the dtype
        and device of the result; ``None``: float64 on the CPU).

        Raises:
            ValueError: a geometry other than O(J) or iSt; an oracle that is not a known
                quadratic; ``s ≤ 0``, ``C`` not positive definite, or ``D`` not diagonal ⪰ 0.
        """
        if not isinstance(geometry, (JOrthogonalGeometry, IndefiniteStiefelGeometry)):
            raise ValueError(f"{self.name} solves over O(J) or the indefinite Stiefel set, got "
                             f"{type(geometry).__name__}")
        quadratic = oracle.quadratic
        if quadratic is None:
            raise ValueError(f"{self.name} needs the cost as a known quadratic s·tr(XᵀCXD): "
                             "pass oracle=QuadraticOracle(C, D, s)")
        if not quadratic.scale > 0:
            raise ValueError(f"{self.name}: the scale s must be positive (s·C ≻ 0), got "
                             f"{quadratic.scale}; with s ≤ 0 the cost is unbounded below")
        like = x0 if x0 is not None else torch.zeros((), dtype=torch.float64)
        clock = RunClock()
        sol = hyperbolic_trace_min(
            quadratic.scale * quadratic.c.detach().cpu().double().numpy(), geometry.j,
            geometry.jk, None if quadratic.d is None
            else quadratic.d.detach().cpu().double().numpy(),
            method=self.method, tol=self.tol, maxiter=self.maxiter)
        elapsed = clock.elapsed()
        x = torch.from_numpy(sol.x).to(dtype=like.dtype, device=like.device)
        cost, grad = oracle.value_and_gradient(x)
        rg = geometry.egrad2rgrad(x, grad)
        gnorm = float(torch.sqrt(geometry.inner(x, rg, rg).clamp_min(0)))
        cost = float(cost)
        info = {"solver": self.name, "method": sol.method, "certificate": sol.certificate,
                "certificate_gap": cost - sol.certificate, "eigenvalues": sol.eigenvalues.tolist(),
                "residual": sol.residual, "tol": self.tol}
        reason = ("direct solve (dense pencil eigendecomposition)" if sol.method == "dense"
                  else f"Ritz residuals below tol {self.tol:g} (Lanczos on the pencil (J, C))")
        return SolverResult(point=x, cost=cost, iterations=sol.operator_applications,
                            stop_reason=reason, time=elapsed, gradient_norm=gnorm,
                            violation=float(geometry.violation(x)), gradient_evaluations=1,
                            info=info)
