r"""ManPG: manifold proximal gradient for ``min f(X) + h(X)`` on St(n, r) (baseline for OBCD).

Chen, Ma, So, Zhang, "Proximal gradient method for nonsmooth optimization over the Stiefel
manifold" (SIAM J. Optim. 2020). Iteration, with ``t = 1/L`` (L the Lipschitz constant of ∇f):

    D = argmin_D ⟨∇f(X), D⟩ + ‖D‖²/(2t) + h(X + D)   s.t.  XᵀD + DᵀX = 0,
    X⁺ = polar(X + a D),  a = 1, halved until  F(X⁺) ≤ F(X) − a‖D‖²/(2t).

The direction solves the KKT system ``X + D = prox_{t h}(X − t∇f(X) + X Λ)`` for a symmetric
multiplier Λ with ``E(Λ) = XᵀD + DᵀX = 0``, by a regularised semismooth Newton method on
``vech(Λ)`` (warm-started from the previous Λ): the generalised Jacobian is
``δ ↦ Xᵀ(M ⊙ Xδ) + (·)ᵀ``, i.e. ``(I + K) blockdiag_j(Xᵀ diag(M_:j) X)`` restricted to symmetric
δ, with M the derivative mask of the prox (``|·| > tλ`` for ℓ1), plus ``10⁻²‖E‖`` times I,
followed by a backtracking line search on ``‖E‖``. As in the reference code t grows by 1.01 after
steps without backtracking. The reported "gradient norm" is ``‖D‖_F / t`` (ManPG's stationarity
measure; stop with ``min_gradient_norm``).

Cost per iteration: one full gradient (``O(n² r)`` for ``s·tr(XᵀCX)``), the Newton solve
(``O(n r³ + r⁶)`` per Newton step: forming the r blocks and a dense ``r(r+1)/2`` system), a polar
factor (``O(n r²)``) and one cost evaluation per line-search trial.
"""

from __future__ import annotations

import math

import torch

from orthoplug.geometry.stiefel import StiefelGeometry, polar
from orthoplug.nonsmooth import SeparableTerm, Zero
from orthoplug.oracles import NonFiniteError, Oracle, finite
from orthoplug.solvers.base import IterativeSolver, Run

__all__ = ["ManPG", "manpg_direction"]


def _vech_maps(r: int, device):
    """Index maps for ``vech`` (column-major lower triangle, m = r(r+1)/2 entries): the vec
    positions ``(a, b)`` and ``(b, a)`` of each vech entry and the commutation permutation."""
    iu = [(a, b) for b in range(r) for a in range(b, r)]
    p1 = torch.tensor([a + b * r for a, b in iu], device=device)
    p2 = torch.tensor([b + a * r for a, b in iu], device=device)
    idx = torch.arange(r * r, device=device)
    return p1, p2, (idx % r) * r + idx // r


def manpg_direction(x: torch.Tensor, g: torch.Tensor, h: SeparableTerm, t: float,
                    lam0: torch.Tensor | None = None, *, tol: float = 1e-10,
                    max_newton: int = 10, maps=None,
                    reg_factor: float = 1e-2) -> tuple[torch.Tensor, torch.Tensor, int]:
    """ManPG's direction D at X (gradient g, step t) → (D, Λ, Newton steps).

    Newton systems are regularised by ``reg_factor · ‖E(Λ)‖_F`` (the Jacobian is singular when a
    column of the prox has fewer than r nonzeros).
    """
    n, r = x.shape
    p1, p2, perm = maps or _vech_maps(r, x.device)
    offdiag = (p1 != p2).to(x.dtype)
    lam = torch.zeros(r, r, dtype=x.dtype, device=x.device) if lam0 is None else lam0.clone()
    base = x - t * g
    eye_m = torch.eye(p1.numel(), dtype=x.dtype, device=x.device)

    def residual(lam):
        arg = base + x @ lam
        d = h.prox(arg, t) - x
        e = x.mT @ d
        return arg, d, e + e.mT

    arg, d, e = residual(lam)
    nrm = float(torch.linalg.norm(e))
    steps = 0
    while nrm > tol and steps < max_newton:
        mask = (h.prox(arg, t) != 0).to(x.dtype) if not isinstance(h, Zero) else torch.ones_like(
            arg)
        blocks = torch.einsum("ia,ij,ib->jab", x, mask, x)  # Xᵀ diag(M_:j) X
        bd = torch.block_diag(*blocks)
        full = (bd + bd[perm])[p1]  # rows: vech of (I + K) blockdiag(...), column-major vec
        jac = full[:, p1] + full[:, p2] * offdiag  # times the duplication matrix
        rhs = e.mT.reshape(-1)[p1]
        reg = reg_factor * nrm + 1e-12
        step = torch.linalg.solve(jac + reg * eye_m, -rhs)
        dl = torch.zeros(r * r, dtype=x.dtype, device=x.device)
        dl[p1] = step
        dl[p2] = step
        dl = dl.reshape(r, r).mT
        a = 1.0
        while True:
            arg_n, d_n, e_n = residual(lam + a * dl)
            nrm_n = float(torch.linalg.norm(e_n))
            if nrm_n <= (1 - 1e-4 * a) * nrm or a < 1e-6:
                break
            a *= 0.5
        lam, arg, d, e, nrm = lam + a * dl, arg_n, d_n, e_n, nrm_n
        steps += 1
    return d, lam, steps


class ManPG(IterativeSolver):
    """ManPG for ``f + h`` on St(n, r) (see the module docstring).

    Args:
        h: a separable term with an entrywise prox (:mod:`orthoplug.nonsmooth`; ℓ1 is the
            setting of the paper; for ℓ0 the hard-threshold prox makes it a heuristic).
        step_size: t (default ``1/L`` from the oracle's Lipschitz constant, required then).
        grow: factor applied to t after a step without backtracking (1.01; 1 disables).
        newton_tol: tolerance of ``‖XᵀD + DᵀX‖_F`` in the direction solve.
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options.
    """

    name = "ManPG"

    def __init__(self, h: SeparableTerm | None = None, *, step_size: float | None = None,
                 grow: float = 1.01, newton_tol: float = 1e-8, **kwargs):
        super().__init__(**kwargs)
        self.h = Zero() if h is None else h
        if not isinstance(self.h, SeparableTerm):
            raise ValueError(f"h must be a term of orthoplug.nonsmooth, got {h!r}")
        if step_size is not None and not step_size > 0:
            raise ValueError(f"step_size must be > 0, got {step_size}")
        if grow < 1:
            raise ValueError(f"grow must be >= 1, got {grow}")
        self.step_user, self.grow, self.newton_tol = step_size, grow, newton_tol

    def prepare(self, oracle: Oracle, x0: torch.Tensor, geometry) -> Oracle:
        if not isinstance(geometry, StiefelGeometry) or x0.ndim != 2:
            raise ValueError("ManPG runs on one St(n, r) matrix")
        if self.step_user is None and not oracle.lipschitz:
            raise ValueError("ManPG needs step= or an oracle with a Lipschitz constant")
        return oracle

    def setup(self, run: Run) -> None:
        x = run.tracker.x
        run.t = self.step_user or 1.0 / run.oracle.lipschitz
        run.lam = None  # the multiplier Λ, warm start of the next direction solve
        run.maps = _vech_maps(x.shape[1], x.device)
        run.direction_norm = math.inf  # ‖D‖_F / t of the last direction
        run.newton_steps = 0
        run.backtracks = 0

    def measure(self, run: Run) -> tuple[float, float, float]:
        """Cost ``f + h``, ManPG's stationarity ``‖D‖_F / t`` of the last direction (∞ before
        the first step) and the violation."""
        x = run.tracker.x
        cost = float(run.tracker.value()) + float(self.h.value(x))
        if not math.isfinite(cost):
            raise NonFiniteError("non-finite cost")
        return cost, run.direction_norm, float(run.geometry.violation(x))

    def step(self, run: Run) -> None:
        tracker = run.tracker
        x = tracker.x
        f0 = float(tracker.value()) + float(self.h.value(x))
        d, run.lam, steps = manpg_direction(x, tracker.gradient(), self.h, run.t, run.lam,
                                            tol=self.newton_tol, maps=run.maps)
        run.newton_steps += steps
        dd = float((d * d).sum())
        run.direction_norm = math.sqrt(dd) / run.t
        a = 1.0
        for _ in range(40):
            new = finite(polar(x + a * d), "ManPG update")
            tracker.set_point(new)
            if float(tracker.value()) + float(self.h.value(new)) <= f0 - 0.5 * a * dd / run.t:
                break
            a *= 0.5
            run.backtracks += 1
        else:
            tracker.set_point(x)  # no decrease found: keep X (stationary up to round-off)
            return
        if a == 1.0:
            run.t *= self.grow

    def info(self, run: Run | None = None) -> dict:
        if run is None:
            return {"h_term": repr(self.h), "step": self.step_user}
        return {"h_term": repr(self.h), "step": run.t, "newton_steps": run.newton_steps,
                "backtracks": run.backtracks}
