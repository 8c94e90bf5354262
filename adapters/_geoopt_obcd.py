"""OBCD as a torch optimizer over geoopt Stiefel ``ManifoldParameter``\\ s.

``OBCD(params, h=L1(1e-3), pairs=None|"jacobi"|"random"|"cyclic")``: each ``step(closure)``
updates every matrix of every (possibly batched) parameter — a random perfect matching of its
rows (``"jacobi"``, what the default ``None`` resolves to), or one row pair per matrix
(uniformly random, ``"random"``,
drawn in batches of 1024 iterations as the core solver does, or the next pair of the
lexicographic sweep, ``"cyclic"``) — by
:func:`orthoplug.solvers.obcd.scalar_pair_step`, the exact O(2) subproblem
of OBCD with the scalar curvature ``ς = σ‖X[B]‖₂²`` (all pairs of a parameter in one batched
solve). The loss is the smooth part ``f``; ``h`` (a separable term of
:mod:`orthoplug.nonsmooth`) is handled exactly by the subproblem. Rows of different matrices are
disjoint coordinates, so the joint surrogate majorises ``f + h`` whenever
σ ≥ max(0, λ_max(∇²loss)) (σ = 0 for concave losses such as SPCA's ``−tr(XᵀCX)``); then each step
gives ``F(X⁺) ≤ F(X) − θ/2 Σ‖V − I‖²``.

The pairs come from the optimizer's generator (:class:`~adapters._torch.OrthoplugOptimizer`,
parameters in order) through the core's draw functions
(:func:`~orthoplug.solvers.pairs.draw_random_pairs`, :func:`~orthoplug.solvers.pairs.cyclic_pairs`,
:func:`~orthoplug.solvers.pairs.random_matching`), so with one parameter holding one matrix, the
same seed, start and options — the defaults included — N ``step(closure)`` calls give the
iterates of N block updates of :class:`orthoplug.solvers.obcd.OBCD` with
``curvature="scalar"`` on a cost without row gradients (e.g. pymanopt's autodiff problem; a
step is one update, as torch.optim counts; the core solver's iteration is ``⌈n/2⌉`` of them
when its oracle reads gradient rows, ``docs/guide/options.md``).

**Pair order** (``pairs=None``, the core solver's default and rule,
:func:`~orthoplug.solvers.obcd.default_pair_order`): ``"random"`` when an update reads gradient
rows without a full gradient, else ``"jacobi"``. A step of this optimizer pays for a full
gradient (the closure's ``backward``) whatever rows it moves, so here the rule always gives
``"jacobi"`` (:meth:`OBCD.info`): one pair would use 2 of the n gradient rows and discard the
rest, so a training loop of T steps would move each row about 2T/n times, while the matching
moves all rows (⌊n/2⌋ disjoint pairs, one batched solve) for the same gradient. The core
solver draws random pairs when its quadratic oracle gives the two gradient rows of a pair in
``O(nr)``.

**lr** (every group, default 1; read at every step, so torch's schedulers work): the
subproblem's quadratic coefficients are divided by it, ``σ_eff = σ/lr`` and ``θ_eff = θ/lr``, so
``lr = 1`` is OBCD itself, a smaller ``lr`` a more damped step and ``lr = 0`` no move (the group
is skipped). Each parameter's start point is checked at its first step (feasible to the dtype's
tolerance, :func:`~orthoplug.geometry.manifolds.feasibility_tol`, and ``h`` finite): a
``ValueError`` names the violation. Plain (Euclidean) parameters are refused: give them their
own optimizer (e.g. ``torch.optim.SGD``).

``step(closure)`` needs a closure that zeroes the gradients, computes the loss, calls
``backward()`` and returns it (``ValueError`` without one or if it writes no gradient).
**σ rule** (``sigma_rule``, default ``"backtracking"`` as in the core solver): the core
solver's rule objects (:mod:`orthoplug.solvers.sigma_rules`), started by
:func:`~orthoplug.solvers.sigma_rules.start_sigma_rule` as the core starts them. A closure
declares no σ, so a rule without ``sigma0`` starts at the core's local estimate at the start
point (one more closure call, at the first step only; the first σ is ``sigma_start`` in the
parameter's state and in :meth:`OBCD.info`). A checked rule
(:class:`~orthoplug.solvers.sigma_rules.SigmaBacktracking`,
:class:`~orthoplug.solvers.sigma_rules.SigmaFit`) redoes a step with a larger σ until the loss
at the new point is below the linear-plus-quadratic model (up to the dtype's rounding,
:func:`~orthoplug.solvers.sigma_rules.cost_rounding`), which costs one extra closure call per
trial; a number (a fixed σ, e.g. 0 for a concave loss) skips the check. One started rule per
parameter, its state in the parameter's ``state`` (``state_dict``). The step
returns the loss at the old point; ``optimizer.last_h`` holds ``h`` at the new point. A
non-finite loss or gradient raises ``FloatingPointError`` naming it, with the parameters left at
their last values.

**Options of the core solver that are not here**, and why: ``curvature="exact"``, the
``"greedy"`` working set with ``candidates`` and ``refresh_every`` need a
:class:`~orthoplug.oracles.core.QuadraticOracle` (the exact block curvature, ranked candidate
pairs and the cached ``CX``), and a closure is an arbitrary loss: here the curvature is
the scalar one, ``σ‖X[B]‖₂²``. ``k > 2`` with ``sweeps`` (the local solve of a k-row block)
evaluates f at many trial points of the block per step, each a closure call here; the
Jacobi matching already moves every row per gradient.

Under ``torch.distributed`` the descent check uses the loss averaged over the process group and
the gradients are averaged after each closure call (see :mod:`orthoplug.distributed`), so all
ranks take the same steps.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import geoopt
import torch

from orthoplug.nonsmooth import SeparableTerm, Zero
from orthoplug.solvers.obcd import default_pair_order, require_compiled_search, scalar_pair_step
from orthoplug.solvers.pairs import cyclic_pairs, draw_random_pairs, random_matching
from orthoplug.solvers.sigma_rules import SigmaRule, as_sigma_rule

from ._torch import STABILIZE, OrthoplugOptimizer, check_number

__all__ = ["OBCD"]


class OBCD(OrthoplugOptimizer):
    """OBCD for ``loss + h`` over geoopt Stiefel parameters (see the module docstring).

    Args:
        params: ManifoldParameters on ``geoopt.Stiefel`` (Euclidean or canonical), shape
            (..., n, r) with n ≥ 2; they must be feasible (and ``h`` finite there) at the first
            step.
        h: separable nonsmooth term (default zero).
        pairs: ``None`` (default: the core solver's rule, which for a closure gives
            ``"jacobi"``), ``"jacobi"`` (a perfect matching of the rows per matrix per step),
            ``"random"`` (one pair per matrix per step) or ``"cyclic"``.
        theta: proximal weight θ > 0 (default 1e-5).
        sigma_rule: the σ rule of ``ς = σ‖X[B]‖₂²``: ``"backtracking"`` (default), ``"fit"``,
            a rule object of :mod:`orthoplug.solvers.sigma_rules` or a number (a fixed σ ≥
            max(0, λ_max(∇²loss)) majorises; no check). Without ``sigma0`` in the rule σ starts
            at a local estimate (module docstring).
        lr: step scale ≥ 0 (``σ_eff = σ/lr``, ``θ_eff = θ/lr``; 0: no move), default 1.
        stabilize: ``projx`` every this many steps (default 1000, the rule of
            :data:`~adapters._torch.STABILIZE`; ``None``: never).
        seed: seed of the pair choices (``None``: random, the same on every rank).
        process_group: the ``torch.distributed`` group (default: the world).
        replica_check_every: compare the replicas across ranks every this many steps.
        average_gradients: average the gradients over the group after each closure call.
    """

    pair_orders = ("jacobi", "random", "cyclic")

    def __init__(self, params: Iterable[torch.Tensor | dict],
                 *, h: SeparableTerm | None = None, pairs: str | None = None,
                 theta: float = 1e-5, sigma_rule: SigmaRule = "backtracking", lr: float = 1.0,
                 stabilize: int | None = STABILIZE, seed: int | None = None,
                 process_group: torch.distributed.ProcessGroup | None = None,
                 replica_check_every: int | None = None, average_gradients: bool = True):
        h = Zero() if h is None else h
        if not isinstance(h, SeparableTerm):
            raise ValueError(f"h must be a separable term of orthoplug.nonsmooth, got {h!r}")
        if pairs is not None and pairs not in self.pair_orders:
            raise ValueError(f"unknown pairs {pairs!r}; choose from None (the core solver's "
                             f"rule) or {self.pair_orders}")
        self.sigma_rule = as_sigma_rule(sigma_rule)
        # every step pays a full gradient (the closure): the rule gives the Jacobi order
        self.pairs = pairs or default_pair_order(2, row_gradients=False)
        self.h = h
        self.last_h = 0.0
        super().__init__(params, dict(theta=theta, lr=lr, stabilize=stabilize), seed=seed,
                         process_group=process_group, replica_check_every=replica_check_every,
                         average_gradients=average_gradients)
        self._initial_replica_check()

    def _check_group(self, group):
        super()._check_group(group)
        check_number("theta", group["theta"], strict=True)
        for p in group["params"]:
            manifold = p.manifold if isinstance(p, geoopt.ManifoldTensor) else None
            if not (isinstance(p, geoopt.ManifoldParameter)
                    and isinstance(manifold, geoopt.Stiefel)):
                raise ValueError("OBCD optimises geoopt ManifoldParameters on geoopt.Stiefel; "
                                 f"got {type(p).__name__} on "
                                 f"{type(manifold).__name__} (give other "
                                 "parameters their own optimizer, e.g. torch.optim.SGD)")
            if p.ndim < 2 or p.shape[-2] < 2:
                raise ValueError(f"OBCD needs matrices with n >= 2 rows, got {tuple(p.shape)}")
            require_compiled_search(p, "OBCD")

    def _check_start(self):
        new = [p for group in self.param_groups for p in group["params"]
               if p not in self._started]
        super()._check_start()
        for p in new:
            if not math.isfinite(float(self.h.value(p.detach()).sum())):
                raise ValueError(f"OBCD: infeasible start point for {self.h!r} (h = inf, e.g. "
                                 "negative entries for NonNegative)")

    def info(self) -> dict:
        """The resolved choices: the pair order, the σ rule and, once a step was taken, the
        first σ of the first parameter (``result.info`` of the core solver reports the same)."""
        first = next((self.state[p] for g in self.param_groups for p in g["params"]
                      if "sigma_start" in self.state[p]), {})
        return {"pairs": self.pairs, "sigma_rule": repr(self.sigma_rule),
                "sigma_start": first.get("sigma_start")}

    def _draw(self, p, n: int, nb: int) -> torch.Tensor:
        """This step's pairs of the parameter's ``nb`` matrices, ``(nb, m, 2)``."""
        state, device = self.state[p], p.device
        gen = self.generator()
        if self.pairs == "jacobi":  # one matrix: the core's draw (randperm)
            return (random_matching(n, gen, device)[None] if nb == 1
                    else random_matching(n, gen, device, (nb,)))
        t = state.get("iteration", 0)
        state["iteration"] = t + 1
        if self.pairs == "cyclic":
            sweep = cyclic_pairs(n, device)
            return sweep[t % sweep.shape[0]].expand(nb, 1, 2)
        if "pairs" not in state or t % state["pairs"].shape[0] == 0:
            state["pairs"] = draw_random_pairs(n, gen, device, matrices=nb)
        # (load_state_dict casts state tensors to the parameter's dtype: indices stay exact)
        return state["pairs"][t % state["pairs"].shape[0]].long()[:, None, :]

    @torch.no_grad()
    def step(self, closure=None):
        """One OBCD step of every parameter; returns the closure's loss at the old point.

        Raises:
            ValueError: no closure, a closure that wrote no gradient, an infeasible start
                point (first step) or a bad ``lr``.
            FloatingPointError: a non-finite loss, gradient or step, or no acceptable σ (the
                parameters keep their values from before the step).
        """
        self._check_start()
        loss, f0 = self._loss(closure)
        grads = self._grads()
        self._start_rules(closure, grads)  # before the draws, as the core solver's setup
        plans = []
        for group in self.param_groups:
            if self._check_lr(group["lr"]) == 0:
                continue
            for p in group["params"]:
                if p not in grads:
                    continue
                n, r = p.shape[-2:]
                x = p.detach().reshape(-1, n, r).clone()  # the point before the step
                pairs = self._draw(p, n, x.shape[0])
                bidx = torch.arange(x.shape[0], device=x.device)[:, None, None]
                z = x[bidx, pairs].reshape(-1, 2, r)
                m = grads[p].reshape(-1, n, r)[bidx, pairs].reshape(-1, 2, r) @ z.mT
                plans.append((group, p, x, bidx, pairs, z, m, self._rule(group, p)))

        def propose():
            old, predicted = {}, 0.0
            try:
                for group, p, x, bidx, pairs, z, m, rule in plans:
                    lr = group["lr"]
                    new, change = scalar_pair_step(z, m, rule.sigma / lr, group["theta"] / lr,
                                                   self.h)
                    out = x.clone()
                    out[bidx, pairs] = new.reshape(*pairs.shape, -1)
                    old[p] = x
                    p.copy_(out.reshape(p.shape))
                    predicted += change
            except FloatingPointError:
                self._restore(old)
                raise
            return old, predicted

        self._majoriser_step(closure, f0, [rule for *_, rule in plans], propose)
        for _, p, *_, rule in plans:
            if rule.checked:
                self.state[p].update(rule.state_dict())
        self.last_h = float(sum(float(self.h.value(p.detach()).sum()) for _, p, *_ in plans))
        self._end_step()
        return loss

