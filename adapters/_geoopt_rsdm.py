r"""RSDM as a torch optimizer for geoopt Stiefel ``ManifoldParameter``\ s (drop-in RiemannianSGD).

Usage (the only change from RiemannianSGD is the class and ``r``)::

    import geoopt, torch
    from orthoplug.adapters.geoopt import RSDM

    W = geoopt.ManifoldParameter(geoopt.EuclideanStiefel().random(256, 64),
                                 manifold=geoopt.EuclideanStiefel())
    opt = RSDM(model.parameters(), lr=0.5, r=64)     # instead of RiemannianSGD(..., lr=...)
    loss.backward(); opt.step()

For each parameter on ``geoopt.Stiefel`` / ``EuclideanStiefel`` / ``CanonicalStiefel`` /
``EuclideanStiefelExact`` (shape ``(..., n, p)``, columns orthonormal; leading dimensions are
independent matrices, each with its own random slice) one RSDM step is taken from the Euclidean
gradient ``G = p.grad`` (see :mod:`orthoplug.solvers.rsdm`, whose step functions and step-size
rules this optimizer calls):

    X ← U(Y) X,  Y = Retr_{I_r}(−η_k · skew(P(r)G (P(r)X)ᵀ)),   η_k = lr · s(k),

RSDM-P (``sampling="permutation"``, O(pr² + r³) per matrix besides backprop) or RSDM-O
(``"orthogonal"``, O(npr + nr²)); ``s(k)`` is the ``schedule``
(:class:`~orthoplug.solvers.steps.DecaySchedule`, constant by default: with a minibatch loss this
is stochastic RSDM). The step only depends on the O(n) gradient ``skew(GXᵀ)``, so the Stiefel
metric (Euclidean or canonical) plays no role. Every other parameter (plain tensors,
``geoopt.Euclidean``) gets exactly RiemannianSGD's update with the step ``η_k`` (weight decay,
momentum, dampening, Nesterov); manifold parameters take plain RSDM steps (momentum and weight
decay do not apply to them: ``skew(XXᵀ) = 0``, so weight decay would be a no-op anyway).
Parameters on other manifolds are rejected. ``stabilize=k`` replaces each Stiefel parameter by
its ``projx`` every k steps (default 1000, unlike RiemannianSGD, whose QR retraction
re-orthonormalises at every step).

Without ``lr`` (``lr=None``) the Stiefel step needs no tuning: ``step(closure)`` backtracks on
the loss the closure returns with the core solver's default rule (``line_search="auto"``,
:func:`~orthoplug.solvers.rsdm.default_line_search`): the ``"polar"`` step when ``r ≤ p`` for
every Stiefel parameter of the group (about ``p ≥ n/4`` with the default r), else Armijo.
Polar (:class:`~orthoplug.solvers.rsdm.PolarSlice`,
:func:`~orthoplug.solvers.rsdm.polar_search`, with memory): all Stiefel parameters of the group
move together, each on its own slice by ``Y = polar(CCᵀ/(lr·η) − BCᵀ)`` (``B = P(r)G``,
``C = P(r)X``); η is accepted when the loss is at most the majorisation
``f0 + Σ (⟨B, Δ⟩ + ‖Δ‖²/(2·lr·η))``, ``Δ = (Y − I)C``, multiplied by the rule's
``contraction`` otherwise and doubled after a first-trial acceptance. Armijo
(``line_search="armijo"``, :class:`~orthoplug.solvers.steps.Armijo`, with memory):
``Y = Retr(−lr·η Γ)``, accepted when the loss drops by at least ``c·lr·η·Σ‖Γ‖²``, the next step
starting from ``γη`` after a first-trial acceptance (γ the rule's ``growth``), else from the
accepted η. Both rules are the core's objects (:mod:`orthoplug.solvers.steps`), so the
defaults of the two front-ends take the same steps. Such a group holds Stiefel parameters
only and has ``line_search`` set (the rule object) and ``lr = 1.0`` in its dict: ``lr`` is then
a factor on the searched
steps, so torch's schedulers work on it too (``lr = 0``: no move). Every group's direction
comes from the gradient at the start of the step; every group's ``lr`` is read at every step.
Each Stiefel parameter's start point is checked at its first step (``ValueError`` naming the
violation).

Randomness: one CPU generator, seeded with ``seed`` (random if ``None``; see
:class:`~orthoplug.adapters._torch.OrthoplugOptimizer`), whose state is part of
:meth:`state_dict` with the step rules' states, so a restored optimizer continues with the same
slices and steps. Each step draws the slices in parameter order; a closure that draws a
minibatch with ``opt.generator()`` before the step's slices makes the same draws as
:class:`~orthoplug.solvers.rsdm.StochasticRSDM` with a finite-sum oracle: the same seed gives the
same iterates in both front-ends.

A non-finite loss or gradient raises ``FloatingPointError`` naming it, before any parameter
changes (a non-finite trial loss of the line search is a rejected trial).

Under ``torch.distributed`` (see :mod:`orthoplug.distributed`) ``seed=None`` is drawn on rank 0
and broadcast, and ``step`` averages the gradients over the process group (after the closure,
if one is given; ``average_gradients=False`` skips this under DDP), so every rank draws the same
slices and takes the same step; ``replica_check_every=N`` compares the replicas every N steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import geoopt
import torch

from orthoplug.geometry.submanifold import RETRACTIONS, SAMPLINGS, submanifold_gradient
from orthoplug.solvers.rsdm import (
    DEFAULT_FIRST_TRIAL,
    DEFAULT_LINE_SEARCH,
    PolarSlice,
    default_line_search,
    default_slice_dimension,
    polar_search,
    rotation,
    sample_slice,
)
from orthoplug.solvers.steps import (
    LINE_SEARCH_NAMES,
    ArmijoBacktracking,
    DecaySchedule,
    LineSearch,
    as_line_search,
)

from ._torch import STABILIZE, OrthoplugOptimizer, check_number

__all__ = ["RSDM"]


def _manifold(p):
    return p.manifold if isinstance(p, geoopt.ManifoldTensor) else None


def _is_stiefel(p) -> bool:
    return isinstance(_manifold(p), geoopt.Stiefel)


def _is_euclidean(p) -> bool:
    manifold = _manifold(p)
    return manifold is None or isinstance(manifold, geoopt.Euclidean)


class RSDM(OrthoplugOptimizer):
    """Riemannian random submanifold descent with RiemannianSGD's interface.

    Args:
        params: parameters or parameter groups (groups may override every option below).
        lr: step size η ≥ 0 (for Stiefel parameters the RSDM step, for the others SGD's), or
            ``None``: the ``line_search`` on the closure's loss, the group's ``lr`` then a
            factor (1.0) on the searched step (see the module docstring).
        r: slice dimension, ``2 ≤ r ≤ n`` for every Stiefel parameter of the group; default
            ``max(2, round(√(np)/2))`` for each n×p parameter
            (:func:`~orthoplug.solvers.rsdm.default_slice_dimension`, as the pymanopt optimizer).
        sampling: ``"permutation"`` (RSDM-P, default) or ``"orthogonal"`` (RSDM-O).
        retraction: on O(r): ``"qr"`` (default), ``"polar"``, ``"cayley"``, ``"exp"`` (the
            fixed and Armijo steps).
        line_search: ``None`` (default: ``"auto"`` in a group with ``lr=None``, else the fixed
            ``lr``), ``"auto"`` (``"polar"`` if ``r ≤ p`` for every Stiefel parameter of the
            group, else ``"armijo"``), or a rule object of :mod:`orthoplug.solvers.steps` —
            ``PolarSearch(contraction, max_backtracks)``, ``Armijo(contraction,
            sufficient_decrease, max_backtracks, growth)`` — or its name (the rule with its
            defaults), as :class:`~orthoplug.solvers.rsdm.RSDM`'s; the group's dict holds the
            rule object taken. Given with an ``lr``, that ``lr`` is the factor on the searched
            step.
        momentum, dampening, weight_decay, nesterov: RiemannianSGD's, for non-manifold
            parameters.
        schedule, decay_time: the step's decay ``s(k)`` with ``lr`` (as
            :class:`~orthoplug.solvers.rsdm.StochasticRSDM`; default constant).
        stabilize: project Stiefel parameters back (``projx``, O(np²)) every this many steps
            (default 1000, the rule of :data:`~adapters._torch.STABILIZE`; ``None``: never).
            RSDM multiplies by orthogonal matrices and never corrects round-off.
        seed: seed of the slice sampling (``None``: random, the same on every rank).
        process_group: the ``torch.distributed`` group (default: the world).
        replica_check_every: compare the replicas across ranks every this many steps.
        average_gradients: average the gradients over the group in each step.

    Raises:
        ValueError: bad options, ``r`` out of range for a parameter, a parameter on a
            manifold other than Stiefel / Euclidean, or a Euclidean parameter in a group
            with a line search.
        RuntimeError: ``step()`` without a closure in a group without ``lr``.
        FloatingPointError: (``step``) a non-finite loss or gradient; the parameters are those
            before the step.
    """

    plain_rules = {"line_search": LINE_SEARCH_NAMES}

    def __init__(self, params: Iterable[torch.Tensor | dict],
                 lr: float | None = None, r: int | None = None, *,
                 sampling: str = "permutation", retraction: str = "qr",
                 line_search: LineSearch | str | None = None, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
                 schedule: str | Callable[[int], float] = "constant", decay_time: float = 1000.0,
                 stabilize: int | None = STABILIZE, seed: int | None = None,
                 process_group: torch.distributed.ProcessGroup | None = None,
                 replica_check_every: int | None = None, average_gradients: bool = True):
        defaults = dict(lr=lr, line_search=line_search, r=r, sampling=sampling,
                        retraction=retraction,
                        momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov,
                        schedule=schedule, decay_time=decay_time, stabilize=stabilize)
        self._rules: list[ArmijoBacktracking | DecaySchedule] = []  # one per group
        super().__init__(params, defaults, seed=seed, process_group=process_group,
                         replica_check_every=replica_check_every,
                         average_gradients=average_gradients)
        self._initial_replica_check()

    # ---- validation and step rules ----------------------------------------------------------
    def _check_group(self, group: dict):
        group["line_search"] = as_line_search(group["line_search"])
        if group["lr"] is None:
            group["lr"] = 1.0
            group["line_search"] = group["line_search"] or DEFAULT_LINE_SEARCH
        if group["line_search"] and any(not _is_stiefel(p) for p in group["params"]):
            raise ValueError("a group with lr=None or a line_search (backtracking on the "
                             "closure's loss) takes Stiefel parameters only: give the other "
                             "parameters their own group with an lr")
        super()._check_group(group)
        r = group["r"]
        if r is not None and (isinstance(r, bool) or not isinstance(r, int) or r < 2):
            raise ValueError(f"r must be an integer >= 2 or None (the default rule), got {r!r}")
        if group["sampling"] not in SAMPLINGS:
            raise ValueError(f"unknown sampling {group['sampling']!r}; choose from {SAMPLINGS}")
        if group["retraction"] not in RETRACTIONS:
            raise ValueError(f"unknown retraction {group['retraction']!r}; "
                             f"choose from {RETRACTIONS}")
        for key in ("momentum", "dampening", "weight_decay"):
            check_number(key, group[key])
        self._new_rule({**group, "line_search": None})  # the schedule, checked
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        for p in group["params"]:
            if _is_stiefel(p):
                n = p.shape[-2]
                if r is not None and r > n:
                    raise ValueError(f"r = {r} exceeds n = {n} for a Stiefel parameter of shape "
                                     f"{tuple(p.shape)}; give that parameter its own group "
                                     f"with 2 <= r <= n")
            elif not _is_euclidean(p):
                raise ValueError(f"RSDM supports Stiefel manifold parameters (and Euclidean "
                                 f"ones), got {p.manifold!r}")
        if group["line_search"] == "auto":  # the core's rule, for every parameter of the group
            rules = {default_line_search(p.shape[-1], group["r"] or default_slice_dimension(
                *p.shape[-2:])) for p in group["params"] if _is_stiefel(p)}
            group["line_search"] = LINE_SEARCH_NAMES[
                "polar" if rules == {"polar"} else "armijo"]()

    def add_param_group(self, param_group: dict):
        """torch's, with the group checked (:meth:`_check_group`) and its step rule made."""
        super().add_param_group(param_group)
        self._rules.append(self._new_rule(self.param_groups[-1]))

    @staticmethod
    def _new_rule(group: dict) -> ArmijoBacktracking | DecaySchedule:
        """The group's step rule: the line search's backtracking (as the core's), else the
        ``lr`` schedule."""
        if group["line_search"]:
            return group["line_search"].backtracking(DEFAULT_FIRST_TRIAL)
        return DecaySchedule(group["schedule"], group["decay_time"])

    def _extra_state(self) -> dict:
        return {"rules": [rule.state_dict() for rule in self._rules]}

    def _load_extra_state(self, state: dict) -> None:
        self._rules = [self._new_rule(group) for group in self.param_groups]
        for rule, saved in zip(self._rules, state["rules"], strict=True):
            rule.load_state_dict(saved)

    # ---- the step -----------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure=None):
        """One RSDM step of every Stiefel parameter (and SGD's of the others); returns the loss
        (after the line search, where there is one).

        Raises:
            RuntimeError: no closure although a group has ``lr=None``; a sparse gradient.
            FloatingPointError: a non-finite loss or gradient (nothing has changed).
        """
        self._check_start()
        if closure is None:
            if any(group["line_search"] for group in self.param_groups):
                raise RuntimeError("RSDM with lr=None or a line_search backtracks on the loss: "
                                   "call step(closure) with a closure that returns the loss")
            loss, value = None, None
            self._average_gradients()
        else:
            loss, value = self._loss(closure)
        if any(p.grad.is_sparse for p in self._params_with_grad()):
            raise RuntimeError("RSDM does not support sparse gradients")
        grads = self._grads()
        for group, rule in zip(self.param_groups, self._rules, strict=True):
            if self._check_lr(group["lr"]) == 0:
                continue
            if group["line_search"]:
                search = (self._polar_group if group["line_search"].name == "polar"
                          else self._armijo_group)
                accepted = search(group, rule, grads, closure, value)
                if accepted is not None:
                    loss, value = accepted
            else:
                eta = rule.next(group["lr"])
                for p in group["params"]:
                    if p not in grads:
                        continue
                    if _is_stiefel(p):
                        self._rsdm_step(p, grads[p], group, eta)
                    else:
                        self._sgd_step(p, grads[p], group, eta)
        self._end_step()
        return loss

    def _slice(self, p, grad, group):
        """A random slice of ``p``, ``C = P(r)X`` and ``B = P(r)G`` from ``grad`` (the core's
        step)."""
        x = p.data
        r = group["r"] or default_slice_dimension(*x.shape[-2:])
        sub = sample_slice(x, r, group["sampling"], self.generator())
        return sub, sub.restrict(x), sub.restrict(grad)

    def _rsdm_step(self, p, grad, group, eta):
        sub, c, b = self._slice(p, grad, group)
        sub.apply_(p.data, rotation(submanifold_gradient(b, c), eta, group["retraction"]), c)

    def _armijo_group(self, group, rule: ArmijoBacktracking, grads, closure, f0: float):
        """One backtracking step of all of the group's Stiefel parameters; the accepted
        ``(loss, value)``, or ``None`` if no step was taken."""
        moves = [(p, p.data.clone(), sub, c, submanifold_gradient(b, c))
                 for p in group["params"] if p in grads
                 for sub, c, b in [self._slice(p, grads[p], group)]]
        slope = sum(float((gamma * gamma).sum()) for *_, gamma in moves)
        if not moves or slope == 0.0:
            return None
        accepted = []

        lr = group["lr"]

        def attempt(eta: float) -> bool:
            step = lr * eta  # (exactly eta at lr = 1)
            for p, x0, sub, c, gamma in moves:
                p.data.copy_(x0)
                sub.apply_(p.data, rotation(gamma, step, group["retraction"]), c)
            loss, value = self._evaluate(closure)
            if value <= rule.bound(f0, step, slope):  # False for NaN
                accepted.append((loss, value))
                return True
            return False

        if rule.search(attempt):
            return accepted[0]
        for p, x0, *_ in moves:  # no acceptable step: stay (the next step starts smaller)
            p.data.copy_(x0)
        return None

    def _polar_group(self, group, rule: ArmijoBacktracking, grads, closure, f0: float):
        """One :func:`~orthoplug.solvers.rsdm.polar_search` step of all of the group's Stiefel
        parameters (the core's ``"polar"`` rule, the majorisation tested on the closure's loss,
        the step ``lr·η``); the accepted ``(loss, value)``, or ``None`` if no step was taken."""
        moves = [(p, p.data.clone(), *self._slice(p, grads[p], group))
                 for p in group["params"] if p in grads]
        if not moves:
            return None
        accepted = []

        def move(ys, bound: float) -> bool:
            for (p, x0, sub, c, _), y in zip(moves, ys, strict=True):
                p.data.copy_(x0)
                sub.apply_(p.data, y, c)
            loss, value = self._evaluate(closure)
            if value <= bound:  # False for NaN
                accepted.append((loss, value))
                return True
            return False

        if polar_search(rule, [PolarSlice(b, c) for *_, c, b in moves], f0, move,
                        scale=group["lr"]):
            return accepted[0]
        for p, x0, *_ in moves:  # no acceptable step: stay
            p.data.copy_(x0)
        return None

    def _sgd_step(self, p, grad, group, eta):
        """RiemannianSGD's update on the Euclidean manifold, step for step."""
        state = self.state[p]
        momentum = group["momentum"]
        if len(state) == 0 and momentum > 0:
            state["momentum_buffer"] = grad.clone()
        grad = grad.add(p, alpha=group["weight_decay"])
        if momentum > 0:
            buf = state["momentum_buffer"]
            buf.mul_(momentum).add_(grad, alpha=1 - group["dampening"])
            grad = grad.add_(buf, alpha=momentum) if group["nesterov"] else buf
        p.add_(-eta * grad)  # RiemannianSGD's retr(x, −lr·g) = x + (−lr·g), bit for bit

