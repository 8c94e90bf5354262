"""OBCD as a torch optimizer over geoopt Stiefel ``ManifoldParameter``\\ s.

``OBCD(params, h=L1(1e-3), working_set="random"|"jacobi")``: each ``step(closure)`` updates every
matrix of every (possibly batched) parameter — one uniformly random row pair per matrix
(``"random"``) or a random perfect matching of its rows (``"jacobi"``) — by the exact O(2)
subproblem of OBCD with the scalar curvature ``ς = σ‖X[B]‖₂²`` (all pairs in one batched
:func:`~orthoplug.subproblems.o2.solve_o2` call). The loss is the smooth part ``f``; ``h`` (a
separable term of :mod:`orthoplug.nonsmooth`) is handled exactly by the subproblem. Rows of
different matrices are disjoint coordinates, so the joint surrogate majorises ``f + h`` whenever
σ ≥ max(0, λ_max(∇²loss)) (σ = 0 for concave losses such as SPCA's ``−tr(XᵀCX)``); then each step
gives ``F(X⁺) ≤ F(X) − α/2 Σ‖V − I‖²``.

``step(closure)`` needs a closure that zeroes the gradients, computes the loss, calls
``backward()`` and returns it. With ``sigma=None`` σ starts at ``sigma0`` and is doubled (the
step redone) until the loss at the new point is below the linear-plus-quadratic model, which
costs one extra closure call per step; pass ``sigma`` to skip it. The step returns the loss at
the old point; ``optimizer.last_h`` holds ``h`` at the new point.

Under ``torch.distributed`` the descent check uses the loss averaged over the process group and
the gradients are averaged after each closure call (see :mod:`orthoplug.distributed`), so all
ranks take the same steps.
"""

from __future__ import annotations

import math

import geoopt
import torch

from orthoplug.distributed import DataParallelOptimizer, shared_seed
from orthoplug.nonsmooth import SeparableTerm, Zero
from orthoplug.solvers.jobcd import _spectral_sq, random_matching
from orthoplug.solvers.obcd import _snap
from orthoplug.subproblems.o2 import solve_o2

__all__ = ["OBCD"]


class OBCD(DataParallelOptimizer, torch.optim.Optimizer):
    """OBCD for ``loss + h`` over geoopt Stiefel parameters (see the module docstring).

    Args:
        params: ManifoldParameters on ``geoopt.Stiefel`` (Euclidean or canonical), shape
            (..., n, r) with n ≥ 2; they must be feasible (and ``h`` finite there).
        h: separable nonsmooth term (default zero).
        working_set: ``"random"`` (one pair per matrix per step) or ``"jacobi"``.
        alpha: proximal weight α > 0 (default 1e-5).
        sigma: scalar curvature constant σ ≥ max(0, λ_max(∇²loss)); None: backtracking from
            ``sigma0``.
        seed: seed of the pair choices (``None``: random, the same on every rank).
        process_group: the ``torch.distributed`` group (default: the world).
        replica_check_every: compare the replicas across ranks every this many steps.
        average_gradients: average the gradients over the group after each closure call.
    """

    def __init__(self, params, *, h: SeparableTerm | None = None, working_set: str = "random",
                 alpha: float = 1e-5, sigma: float | None = None, sigma0: float = 1.0,
                 max_backtracks: int = 60, seed: int | None = None, process_group=None,
                 replica_check_every: int | None = None, average_gradients: bool = True):
        h = Zero() if h is None else h
        if not isinstance(h, SeparableTerm):
            raise ValueError(f"h must be a separable term of orthoplug.nonsmooth, got {h!r}")
        if working_set not in ("random", "jacobi"):
            raise ValueError(f"unknown working_set {working_set!r}; choose 'random' or 'jacobi'")
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0, got {alpha}")
        if sigma is not None and not sigma >= 0:
            raise ValueError(f"sigma must be >= 0, got {sigma}")
        super().__init__(params, dict(sigma=sigma, alpha=alpha, sigma0=sigma0))
        self.h, self.working_set, self.max_backtracks = h, working_set, max_backtracks
        self._init_data_parallel(process_group, replica_check_every, average_gradients)
        self.generator = torch.Generator()
        self.generator.manual_seed(shared_seed(seed, process_group, torch.seed))
        self.last_h = 0.0
        for group in self.param_groups:
            for p in group["params"]:
                if not (isinstance(p, geoopt.ManifoldParameter)
                        and isinstance(p.manifold, geoopt.Stiefel)):
                    raise ValueError("OBCD optimises geoopt ManifoldParameters on geoopt.Stiefel; "
                                     f"got {type(p).__name__} on "
                                     f"{type(getattr(p, 'manifold', None)).__name__}")
                if p.ndim < 2 or p.shape[-2] < 2:
                    raise ValueError(f"OBCD needs matrices with n >= 2 rows, got {tuple(p.shape)}")
                ok, reason = p.manifold.check_point_on_manifold(p.detach(), explain=True,
                                                                atol=1e-8, rtol=1e-8)
                if not ok:
                    raise ValueError(f"infeasible initial point: {reason}")
                if not math.isfinite(float(self.h.value(p.detach()).sum())):
                    raise ValueError(f"infeasible initial point for {self.h!r} (h = inf, e.g. "
                                     "negative entries for NonNegative)")
        self._initial_replica_check()

    def _sigma(self, group, p) -> float:
        if group["sigma"] is not None:
            return group["sigma"]
        return self.state[p].setdefault("sigma", group["sigma0"])

    def _update(self, p, g, sigma, alpha) -> float:
        """Apply the step to ``p`` in place; return the model's predicted change of the loss."""
        n, r = p.shape[-2:]
        x = p.detach().reshape(-1, n, r)
        gb = g.reshape(-1, n, r)
        nb = x.shape[0]
        pairs = random_matching(n, self.generator, x.device, (nb,),
                                1 if self.working_set == "random" else None)
        bidx = torch.arange(nb, device=x.device)[:, None, None]
        z = x[bidx, pairs].reshape(-1, 2, r)
        m = (gb[bidx, pairs].reshape(-1, 2, r)) @ z.mT
        zz = _spectral_sq(z)
        s = sigma * zz + alpha
        eye = torch.eye(2, dtype=x.dtype, device=x.device)
        v = solve_o2(m - s[:, None, None] * eye, z, self.h, s=s)
        new = v @ z
        if not isinstance(self.h, Zero):
            new = _snap(new)
        if not bool(torch.isfinite(new).all()):
            raise FloatingPointError("OBCD: non-finite block update")
        out = x.clone()
        out[bidx, pairs] = new.reshape(nb, -1, 2, r)
        p.copy_(out.reshape(p.shape))
        w = v - eye
        return float((w * m).sum() + 0.5 * sigma * (zz * (w * w).sum((-2, -1))).sum())

    @torch.no_grad()
    def step(self, closure):
        if closure is None:
            raise ValueError("OBCD.step needs a closure (zero grads, compute the loss, call "
                             "backward, return the loss)")
        loss, f0 = self._evaluate(closure)
        if not math.isfinite(f0):
            raise FloatingPointError(f"OBCD: non-finite loss {f0}")
        params = [(grp, p) for grp in self.param_groups for p in grp["params"]
                  if p.grad is not None]
        grads = {p: p.grad.detach().clone() for _, p in params}
        for g in grads.values():
            if not bool(torch.isfinite(g).all()):
                raise FloatingPointError("OBCD: non-finite gradient")
        checked = any(grp["sigma"] is None for grp, _ in params)
        old = {p: p.detach().clone() for _, p in params}
        for _ in range(self.max_backtracks):
            predicted = sum(self._update(p, grads[p], self._sigma(grp, p), grp["alpha"])
                            for grp, p in params)
            if checked:
                _, f1 = self._evaluate(closure)
                if not f1 <= f0 + predicted + 1e-12 * max(1.0, abs(f0)):
                    for grp, p in params:  # reject: restore and double σ
                        p.copy_(old[p])
                        if grp["sigma"] is None:
                            self.state[p]["sigma"] = 2.0 * self._sigma(grp, p)
                    continue
            self.last_h = float(sum(float(self.h.value(p.detach()).sum()) for _, p in params))
            self._end_step()
            return loss
        raise FloatingPointError(f"OBCD: no acceptable step after {self.max_backtracks} "
                                 "doublings of sigma")
