r"""Cayley L-BFGS as a torch optimizer over geoopt ``ManifoldParameter``\ s on O(J).

Usage (the torch.optim.LBFGS pattern: ``step`` takes a closure)::

    import geoopt, torch
    from orthoplug.adapters.geoopt import CayleyLBFGS, JOrthogonal

    manifold = JOrthogonal(4, p=1)                       # the Lorentz group O(1, 3)
    X = geoopt.ManifoldParameter(manifold.origin(4, 4, dtype=torch.float64), manifold=manifold)
    opt = CayleyLBFGS([X])

    def closure():
        opt.zero_grad()
        loss = ((X @ P - Q) ** 2).sum()
        loss.backward()
        return loss

    for _ in range(100):
        opt.step(closure)

The algorithm is :class:`orthoplug.solvers.lbfgs.CayleyLBFGS` (its module docstring states the
iteration, the pair rule, the line search and the Cayley step; this optimizer calls the same
functions: :func:`~orthoplug.solvers.lbfgs.lbfgs_iteration`,
:func:`~orthoplug.solvers.lbfgs.armijo_search` and :class:`~orthoplug.solvers.lbfgs.LBFGSMemory`
with its curvature condition). All parameters of the optimizer together are one
point of the product of their groups O(J) (a batched parameter ``(..., n, n)`` one factor per
matrix): their algebra gradients ``A = J skew(J Xᵀ ∇f)`` are stacked into one vector of the
product's Lie algebra, which carries one memory of secant pairs, and every parameter moves by
its own Cayley factor ``X ← X cay(t D_X)`` with one step length t found by one line search on
the closure's loss. Each factor lies in O(J) up to one n×n solve's rounding; nothing is
projected.

**One** ``step(closure)`` **is one L-BFGS iteration**: the direction, then Armijo backtracking
with one closure call per trial (usually one). The closure's gradient at the accepted trial is
the next step's gradient, so a step costs one closure call in the usual case, and the first
step one more (the gradient at the start). The loss and gradient are reused only while no
parameter was written in between (torch's version counters; ``stabilize``, a scheduler's
``lr`` change and ``load_state_dict`` are fine); the closure must be deterministic (a
full-batch loss): for a minibatch loss use a stochastic method (JJOBCD, RiemannianAdam).
``step`` returns the loss at the step's start point, as ``torch.optim.LBFGS`` does.

**lr** (every group, default 1; read at every step, so schedulers work): the group's part of the
search direction is multiplied by it, the first trial ``t₀ = min(1, max_step/‖D‖_F)`` taken
from the unscaled direction, so with one group the trial steps are ``lr·t·D``: ``lr = 1`` is the
method (iterates equal to the pymanopt door's from the same start), a smaller ``lr`` a shorter
first trial, ``lr = 0`` freezes the group (every group at 0: nothing moves and the memory is
kept). ``memory``, ``max_step`` and ``sufficient_decrease`` are optimizer-wide (one memory and
one line search for all parameters).

When no trial decreases the loss beyond its rounding, even along the gradient, the parameters
stay where they are (the core solver's stop; :meth:`CayleyLBFGS.info` names it) and later steps
try again from a cleared memory.

Start points are checked at the first step (``InfeasiblePointError``, a ``ValueError``, naming
the violation; tolerance :func:`~orthoplug.geometry.manifolds.feasibility_tol` of the dtype). A
non-finite loss or gradient at the start of a step raises ``FloatingPointError`` naming it
before anything moves; a non-finite trial loss is a rejected trial, and a non-finite gradient
at the accepted trial raises ``FloatingPointError`` with the parameters put back. float32 and
float64 parameters are accepted (one dtype and device for all parameters of an optimizer).
``state_dict`` holds the memory, the last step and the counters, so a resumed optimizer takes
the same steps (it evaluates the closure once more at its first step).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import geoopt
import torch

from orthoplug.geometry import jorthogonal as jo
from orthoplug.geometry.manifolds import JOrthogonalGeometry
from orthoplug.solvers.lbfgs import (
    LBFGSMemory,
    armijo_search,
    cartan_blocks,
    check_options,
    lbfgs_iteration,
)

from ._geoopt_base import _GeometryManifold
from ._torch import OrthoplugOptimizer

__all__ = ["CayleyLBFGS"]


def _check_param(p) -> None:
    """Refuse a parameter that is not on orthoplug's geoopt ``JOrthogonal``, saying what to do."""
    manifold = p.manifold if isinstance(p, geoopt.ManifoldTensor) else None
    if isinstance(manifold, _GeometryManifold) and isinstance(manifold.geometry,
                                                              JOrthogonalGeometry):
        return
    if isinstance(manifold, _GeometryManifold):  # the indefinite Stiefel set
        advice = ("its Lie algebra carries the secant pairs, so the set must be the square group "
                  "O(J); on the indefinite Stiefel set use JJOBCD or geoopt's RiemannianAdam")
    else:
        advice = ("give other parameters their own optimizer, e.g. torch.optim.LBFGS or "
                  "geoopt's RiemannianAdam")
    raise ValueError(f"CayleyLBFGS optimises ManifoldParameters on orthoplug's JOrthogonal; got "
                     f"{type(p).__name__} on "
                     f"{type(manifold).__name__ if manifold is not None else 'no manifold'} "
                     f"({advice})")


class CayleyLBFGS(OrthoplugOptimizer):
    """L-BFGS in the Lie algebra of O(J) with the Cayley step, ``torch.optim.LBFGS``-style (one
    iteration per ``step(closure)``; see the module docstring for the rules).

    Args:
        params: ManifoldParameters on orthoplug's geoopt ``JOrthogonal`` (or groups of them).
        lr: factor ≥ 0 on the group's part of the search direction (1: the method; 0: no
            move), default 1.
        memory: number of secant pairs kept (optimizer-wide).
        max_step: largest Frobenius norm of an iteration's first trial step in o(J).
        sufficient_decrease: sufficient-decrease constant in (0, 1/2).
        stabilize: ``projx`` every this many steps (``None``: never; the Cayley factors keep
            O(J) to rounding).
        seed: the random stream of :class:`~orthoplug.adapters._torch.OrthoplugOptimizer`
            (the method draws nothing).
        process_group: the ``torch.distributed`` group (default: the world).
        replica_check_every: compare the replicas across ranks every this many steps.
        average_gradients: average the gradients over the group after each closure call.

    Raises:
        ValueError: bad options; a parameter not on ``JOrthogonal``; parameters of different
            dtypes or devices; (``step``) no closure, a closure that writes no gradient, an
            infeasible start point.
        FloatingPointError: (``step``) a non-finite loss or gradient; the parameters are those
            before the step.
    """

    def __init__(self, params: Iterable[torch.Tensor | dict], lr: float = 1.0, *,
                 memory: int = 10, max_step: float = 1.0, sufficient_decrease: float = 1e-4,
                 stabilize: int | None = None, seed: int | None = None,
                 process_group: torch.distributed.ProcessGroup | None = None,
                 replica_check_every: int | None = None, average_gradients: bool = True):
        check_options(memory, max_step, sufficient_decrease)
        self.memory = memory
        self.max_step = float(max_step)
        self.sufficient_decrease = float(sufficient_decrease)
        self._lbfgs = LBFGSMemory(memory)  # replaced by _new_memory at the first step
        self._last: tuple[torch.Tensor, torch.Tensor] | None = None  # (s, A) of the last step
        self._layout: tuple[int, ...] | None = None  # parameter sizes the memory belongs to
        self._counts = {"trials": 0, "resets": 0, "skipped_pairs": 0}
        self._stop: str | None = None
        self._cache: tuple | None = None  # (loss, value, grads, versions) at the current point
        super().__init__(params, dict(lr=lr, stabilize=stabilize), seed=seed,
                         process_group=process_group, replica_check_every=replica_check_every,
                         average_gradients=average_gradients)
        self._initial_replica_check()

    def _check_group(self, group: dict) -> None:
        super()._check_group(group)
        first = next((p for g in self.param_groups for p in g["params"]), None)
        for p in group["params"]:
            _check_param(p)
            if (p.dtype, p.device) != (first.dtype, first.device):
                raise ValueError(f"CayleyLBFGS takes parameters of one dtype and device (one "
                                 f"L-BFGS memory): got {p.dtype} on {p.device} besides "
                                 f"{first.dtype} on {first.device}; give them separate "
                                 "optimizers")

    def info(self) -> dict:
        """The options, the line-search trials, resets and skipped pairs so far, the pairs held
        and the reason of the last step that could not move (``None`` if it moved)."""
        return {"memory": self.memory, "max_step": self.max_step,
                "sufficient_decrease": self.sufficient_decrease, **self._counts,
                "pairs": len(self._lbfgs), "stopped": self._stop}

    # ---- state ----------------------------------------------------------------------------------
    def _extra_state(self) -> dict:
        last = None if self._last is None else [t.clone() for t in self._last]
        return {"memory": self._lbfgs.state_dict(), "last": last, "layout": self._layout,
                "counts": dict(self._counts), "stopped": self._stop}

    def _new_memory(self, params) -> LBFGSMemory:
        """An empty memory whose initial inverse Hessian has one scalar per Cartan block of the
        parameters' algebras (:func:`~orthoplug.solvers.lbfgs.cartan_blocks`, as in the core)."""
        parts = [(p.manifold.geometry.j.like(p), p.numel() // p.shape[-1] ** 2) for p in params]
        return LBFGSMemory(self.memory, cartan_blocks(parts, params[0]))

    def _load_extra_state(self, state: dict) -> None:
        self._lbfgs = self._new_memory(self._params())
        self._lbfgs.load_state_dict(state["memory"])
        self._last = None if state["last"] is None else tuple(t.clone() for t in state["last"])
        self._layout = None if state["layout"] is None else tuple(state["layout"])
        self._counts = dict(state["counts"])
        self._stop = state["stopped"]
        self._cache = None

    # ---- the step -------------------------------------------------------------------------------
    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    @staticmethod
    def _versions(params) -> list[tuple[int, int]]:
        """Which tensors, at which version: a write to any parameter changes it (the cached
        gradients hold the parameters, so their ids stay unique)."""
        return [(id(p), p._version) for p in params]

    def _start_point(self, closure, params) -> tuple[torch.Tensor, float, dict]:
        """The loss, its value and the gradients at the current point: those of the last
        accepted trial if no parameter was written since, else from one closure call."""
        cached = self._cache
        if cached is not None and closure is not None and cached[3] == self._versions(params):
            return cached[:3]
        loss, value = self._loss(closure)
        return loss, value, self._grads()

    def _algebra_gradient(self, params, x, grads) -> torch.Tensor:
        """The stacked algebra gradients ``J skew(J Xᵀ G)`` (zero for a parameter without a
        gradient)."""
        parts = [jo.algebra_gradient(p.manifold.geometry.j, xp, grads[p]) if p in grads
                 else torch.zeros_like(xp) for p, xp in zip(params, x, strict=True)]
        return torch.cat([part.reshape(-1) for part in parts])

    @torch.no_grad()
    def step(self, closure=None):
        """One L-BFGS iteration with its line search; returns the loss at the start point.

        Raises:
            ValueError: no closure, a closure that writes no gradient, an infeasible start.
            FloatingPointError: a non-finite loss or gradient (the parameters are those before
                the step).
        """
        self._check_start()
        params = self._params()
        loss, value, grads = self._start_point(closure, params)
        self._cache = None
        x = [p.detach().clone() for p in params]
        a = self._algebra_gradient(params, x, grads)
        layout = tuple(p.numel() for p in params)
        if layout != self._layout:  # new parameters: the pairs no longer apply
            self._lbfgs, self._last, self._layout = self._new_memory(params), None, layout
        if self._last is not None:
            s, a_prev = self._last
            tol = math.sqrt(torch.finfo(a.dtype).eps)
            if not self._lbfgs.add(s, a - a_prev, tol):
                self._counts["skipped_pairs"] += 1
        self._last = None
        lrs = [self._check_lr(group["lr"]) for group in self.param_groups]
        if any(lrs):
            scale = torch.cat([torch.full((p.numel(),), lr, dtype=a.dtype, device=a.device)
                               for group, lr in zip(self.param_groups, lrs, strict=True)
                               for p in group["params"]])

            def search(d, slope, t):
                return self._line_search(closure, params, x, d, slope, t, value, a)

            self._stop, resets = lbfgs_iteration(self._lbfgs, a, self.max_step, search, scale)
            self._counts["resets"] += resets
        self._end_step()
        return loss

    def _line_search(self, closure, params, x, d, slope, t, f0, a) -> bool:
        """:func:`~orthoplug.solvers.lbfgs.armijo_search` along ``X cay(t D_X)`` with one
        closure call per trial; on acceptance keeps the pair's step and the trial's loss and
        gradients, else puts the parameters back."""
        steps = [part.view_as(xp) for part, xp in
                 zip(torch.split(d, [xp.numel() for xp in x]), x, strict=True)]
        last: list = []

        def trial(t: float) -> float:
            for p, xp, dp in zip(params, x, steps, strict=True):
                p.copy_(jo.cayley_step(xp, t * dp))
            loss, f1 = self._evaluate(closure)
            last[:] = [loss, f1]
            return f1 if math.isfinite(f1) else math.inf

        t, trials = armijo_search(f0, slope, t, trial, self.sufficient_decrease,
                                  torch.finfo(a.dtype).eps)
        self._counts["trials"] += trials
        start = dict(zip(params, x, strict=True))
        if t is None:
            self._restore(start)
            return False
        try:
            grads = self._grads()  # names a non-finite gradient at the accepted point
        except FloatingPointError:
            self._restore(start)
            raise
        self._last = (t * d, a)
        self._cache = (*last, grads, self._versions(params))
        return True
