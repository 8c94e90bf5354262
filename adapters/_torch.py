"""The scaffold every orthoplug torch optimizer is built on (no algorithm lives here).

:class:`OrthoplugOptimizer` does what each geoopt-side optimizer needs around the algorithm's
step, which it takes from :mod:`orthoplug.solvers`:

* **the closure**: :meth:`~OrthoplugOptimizer._loss` calls it with gradients enabled, averages
  the gradients and the loss over the ``torch.distributed`` group (:mod:`orthoplug.distributed`)
  and raises ``FloatingPointError`` naming a non-finite loss; :meth:`~OrthoplugOptimizer._grads`
  copies the gradients and names the parameter of a non-finite one;
* **the random stream**: one CPU generator seeded with ``seed`` (the same on every rank:
  ``seed=None`` is drawn on rank 0 and broadcast); draws are moved to the parameters' device, so
  the steps do not depend on the device (:mod:`orthoplug._random`); the seed and the generator's
  state are part of ``state_dict``, so a resumed optimizer draws the same numbers as an
  uninterrupted one (:meth:`~OrthoplugOptimizer.generator`);
* **per-run counters** (``state["step"]`` per parameter is torch's; the optimizer's own number of
  steps is ``self.steps_taken``, saved too);
* the replica check of :class:`~orthoplug.distributed.DataParallelOptimizer`;
* **torch.optim conventions**: every group has an ``lr`` (a finite number ≥ 0, read at every
  step, so ``torch.optim.lr_scheduler`` works; ``lr = 0`` never moves a parameter) and a
  ``stabilize`` (``k``: every ``k`` steps each manifold parameter is replaced by its
  ``projx``, as geoopt's ``stabilize``; ``None``: never); ``add_param_group`` checks a new group
  as the constructor checks its groups (:meth:`~OrthoplugOptimizer._check_group`); a key of a
  group dict overrides the constructor's value for that group if it is a per-group option (a
  key of ``defaults``), and any other key is refused, naming the class, the key and the
  per-group options (an optimizer-wide option, e.g. ``seed``, is named as one to give to the
  constructor);
* **start checks**: at its first step every manifold parameter must be feasible to
  :func:`~orthoplug.geometry.manifolds.feasibility_tol` of its dtype, else
  :class:`~orthoplug.geometry.manifolds.InfeasiblePointError` (a ``ValueError``) names the
  parameter and the violation (:meth:`~OrthoplugOptimizer._check_start`).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable

import geoopt
import torch

from orthoplug.distributed import DataParallelOptimizer, shared_seed
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.solvers.sigma_rules import (
    SigmaBacktracking,
    cost_rounding,
    estimate_bb,
    estimate_lipschitz,
    start_sigma_rule,
)

from ._geoopt_base import _GeometryManifold

__all__ = ["STABILIZE", "OrthoplugOptimizer"]

_STATE_KEY = "orthoplug"

#: Default ``stabilize`` of the optimizers whose steps never correct round-off (OBCD, RSDM:
#: products with orthogonal matrices, each adding a few ε to ‖XᵀX − I‖ with random signs). The
#: violation then random-walks, ≈ a·ε·√k after k steps (a between 0.4 and 2.3 in float32 on
#: St(20, 5), ``docs/results/float32.md``), so a ``projx`` every T steps bounds it by about
#: a·ε·√T plus the projection's own rounding, whatever the run length, and costs one O(np²)
#: factorisation per T steps. T = 1000 keeps that bound near 30·a·ε, about 50 times below the
#: feasibility tolerance √ε of the start checks
#: (:func:`~orthoplug.geometry.manifolds.feasibility_tol`), and the factorisation a small
#: fraction of T gradients. The rule is dtype-blind: in float64 the projection moves X by
#: rounding errors only (about ε·√T).
STABILIZE = 1000


def parameter_geometry(p: torch.Tensor):
    """The orthoplug geometry of a parameter's manifold (``None`` for a Euclidean one): the
    manifold's own for orthoplug's geoopt manifolds, :class:`StiefelGeometry` for
    ``geoopt.Stiefel``.

    Raises:
        ValueError: a manifold other than these and ``geoopt.Euclidean``.
    """
    if not isinstance(p, geoopt.ManifoldTensor) or isinstance(p.manifold, geoopt.Euclidean):
        return None
    manifold = p.manifold
    if isinstance(manifold, _GeometryManifold):
        return manifold.geometry
    if isinstance(manifold, geoopt.Stiefel):
        if p.ndim < 2 or p.shape[-1] > p.shape[-2]:
            raise ValueError(f"a Stiefel parameter must have shape (..., n, k) with k <= n, got "
                             f"{tuple(p.shape)}")
        return StiefelGeometry(p.shape[-2], p.shape[-1])
    raise ValueError(f"unsupported manifold {type(manifold).__name__}: orthoplug's optimizers "
                     "take orthoplug's manifolds, geoopt.Stiefel and (where documented) "
                     "Euclidean parameters")


#: the parameter dtypes of every orthoplug optimizer (torch.linalg has no half-precision CPU
#: kernels, and a float16 constraint would hold to 1e-3 at best)
DTYPES = (torch.float32, torch.float64)


def check_number(name: str, value, *, minimum: float = 0.0, strict: bool = False,
                 integer: bool = False, maximum: float = math.inf):
    """``value`` checked: a finite real (an ``int`` when ``integer``) ``≥ minimum`` (``>`` when
    ``strict``) and ``≤ maximum``; returned unchanged.

    Raises:
        TypeError: not a number (or not an integer when one is needed).
        ValueError: out of range or not finite.
    """
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise TypeError(f"{name} must be {'an integer' if integer else 'a real number'}, got "
                        f"{value!r}")
    if not (math.isfinite(value) and (value > minimum if strict else value >= minimum)
            and value <= maximum):
        bound = f"{'>' if strict else '>='} {minimum:g}" + (
            f" and <= {maximum:g}" if maximum < math.inf else "")
        raise ValueError(f"{name} must be finite and {bound}, got {value!r}")
    return value


def _describe(value) -> str:
    if torch.is_tensor(value):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return repr(value) if value is None else type(value).__name__


class OrthoplugOptimizer(DataParallelOptimizer, torch.optim.Optimizer):
    """Base class of orthoplug's torch optimizers (see the module docstring).

    Args:
        params: parameters or parameter groups.
        defaults: the per-group defaults.
        seed: seed of the random draws (``None``: random, the same on every rank).
        process_group: the ``torch.distributed`` group (default: the world).
        replica_check_every: compare the replicas across ranks every this many steps.
        average_gradients: average the gradients over the group after each closure call.
    """

    def __init__(self, params, defaults: dict, *, seed: int | None = None, process_group=None,
                 replica_check_every: int | None = None, average_gradients: bool = True):
        self._init_data_parallel(process_group, replica_check_every, average_gradients)
        self.seed = shared_seed(seed, process_group)
        self._generator = torch.Generator()
        self._generator.manual_seed(self.seed)
        self._started: set = set()  # parameters whose start point was checked
        self.steps_taken = 0
        super().__init__(params, {"lr": 1.0, "stabilize": None, **defaults})

    # ---- parameter groups ---------------------------------------------------------------------
    def add_param_group(self, param_group: dict) -> None:
        """torch's ``add_param_group``, then :meth:`_check_group` on the new group (the
        constructor's groups pass through here too); a rejected group is not added.

        Raises:
            ValueError, TypeError: as :meth:`_check_group`.
        """
        super().add_param_group(param_group)
        try:
            self._check_group(self.param_groups[-1])
        except Exception:
            self.param_groups.pop()
            raise

    def _check_group(self, group: dict) -> None:
        """Check a parameter group: ``lr`` and ``stabilize`` here, the rest in subclasses
        (which call this first).

        Raises:
            ValueError, TypeError: a key that is no per-group option, ``lr`` not a finite
                number ≥ 0, ``stabilize`` not ``None`` or an integer ≥ 1, a parameter whose
                dtype is not float32 or float64.
        """
        self._check_group_keys(group)
        self._check_lr(group["lr"])
        if group["stabilize"] is not None:
            check_number("stabilize", group["stabilize"], integer=True, minimum=1)
        for p in group["params"]:
            if p.dtype not in DTYPES:
                raise TypeError(f"{type(self).__name__} takes float32 or float64 parameters, "
                                f"got {p.dtype} (shape {tuple(p.shape)}); keep float32 master "
                                "weights for half-precision models")

    def _check_group_keys(self, group: dict) -> None:
        """Every key of ``group`` is ``params``, a per-group option (a key of ``defaults``) or
        torch's scheduler key ``initial_lr``.

        Raises:
            ValueError: naming the class, the unknown key and the per-group options; a
                constructor option that is optimizer-wide is named as such.
        """
        name = type(self).__name__
        unknown = sorted(set(group) - set(self.defaults) - {"params", "initial_lr"})
        if not unknown:
            return
        wide = sorted(set(inspect.signature(type(self).__init__).parameters)
                      - set(self.defaults) - {"self", "params"})
        key = unknown[0]
        where = (f"{key!r} is an optimizer-wide option of {name}: give it to the constructor "
                 f"(optimizer-wide: {', '.join(wide)})" if key in wide else
                 f"unknown option {key!r} in a parameter group of {name}")
        raise ValueError(f"{where}; the per-group options are "
                         f"{', '.join(sorted(self.defaults))}")

    @staticmethod
    def _check_lr(lr) -> float:
        """``lr`` as a float, checked (a scheduler may have written it)."""
        return float(check_number("lr", lr))

    def _check_start(self) -> None:
        """Check every manifold parameter not checked yet: a feasible point (the geometry's
        ``check_point``, tolerance :func:`~orthoplug.geometry.manifolds.feasibility_tol`).

        Raises:
            InfeasiblePointError: (a ``ValueError``) naming the parameter and its violation.
        """
        for gi, group in enumerate(self.param_groups):
            for pi, p in enumerate(group["params"]):
                if p in self._started:
                    continue
                where = f"{type(self).__name__}: parameter {pi} of group {gi}"
                geometry = parameter_geometry(p)
                if geometry is not None:
                    try:
                        geometry.check_point(p.detach())
                    except ValueError as err:
                        raise type(err)(f"{where} is not a valid start point ({err}); project "
                                        "it first, e.g. with p.manifold.projx") from None
                self._started.add(p)

    # ---- stabilize ----------------------------------------------------------------------------
    @torch.no_grad()
    def stabilize_group(self, group: dict) -> None:
        """Replace the group's manifold parameters by their ``projx``."""
        for p in group["params"]:
            if parameter_geometry(p) is not None:
                p.copy_(p.manifold.projx(p.detach()))

    def stabilize(self) -> None:
        """Replace every manifold parameter by its ``projx`` (geoopt's optimizer API)."""
        for group in self.param_groups:
            self.stabilize_group(group)

    # ---- randomness ---------------------------------------------------------------------------
    def generator(self) -> torch.Generator:
        """The optimizer's random stream: one CPU generator, seeded with ``seed``. Its draws
        (pairs, slices, minibatches) are made on the CPU and moved to the parameters' device;
        a minibatch drawn with it (``torch.randperm(N, generator=opt.generator())[:B]``) takes
        its place in the stream the same way on every device."""
        return self._generator

    def _random_state(self):
        return [("seed", self.seed), ("generator", self._generator)]

    #: rule objects kept in the param groups, saved as plain data (their name and options) so
    #: that ``torch.load(weights_only=True)`` reads a checkpoint: group key → {name: class}
    plain_rules: dict[str, dict[str, type]] = {}

    def state_dict(self) -> dict:
        """torch's state plus the seed, the generator's state and :meth:`_extra_state`; the
        groups' rule objects of :attr:`plain_rules` as plain data."""
        out = super().state_dict()
        for group in out["param_groups"]:
            for key, names in self.plain_rules.items():
                rule = group[key]
                if type(rule) in names.values():
                    group[key] = {"name": rule.name, **rule.options()}
        out[_STATE_KEY] = {"seed": self.seed, "steps_taken": self.steps_taken,
                           "generator": self._generator.get_state(),
                           "extra": self._extra_state()}
        return out

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore torch's state, the seed, the generator and :meth:`_extra_state`; a
        checkpoint saved on any device loads on any other (the generator lives on the CPU).
        """
        state_dict = dict(state_dict)
        ours = state_dict.pop(_STATE_KEY, None)
        groups = []
        for group in state_dict["param_groups"]:
            for key, names in self.plain_rules.items():
                if isinstance(group.get(key), dict):
                    options = dict(group[key])
                    group = {**group, key: names[options.pop("name")](**options)}
            groups.append(group)
        state_dict["param_groups"] = groups
        super().load_state_dict(state_dict)
        if ours is not None:
            self.seed = ours["seed"]
            self.steps_taken = ours["steps_taken"]
            # torch.load(map_location=...) may have moved the bytes: set_state needs CPU bytes
            self._generator.set_state(ours["generator"].to(device="cpu", dtype=torch.uint8))
            self._load_extra_state(ours["extra"])

    def _extra_state(self) -> dict:
        """Optimizer-level state beyond torch's per-parameter ``state`` (override)."""
        return {}

    def _load_extra_state(self, state: dict) -> None:
        """Restore :meth:`_extra_state` (override)."""

    # ---- closures -----------------------------------------------------------------------------
    def _loss(self, closure, *args) -> tuple[torch.Tensor, float]:
        """Call ``closure(*args)`` (gradients enabled; gradients and loss averaged over the
        group); return the loss and its group mean as a float.

        Raises:
            ValueError: without a closure, or a closure that wrote no parameter's gradient.
            FloatingPointError: if the loss is not finite (the parameters are unchanged).
        """
        if closure is None:
            raise ValueError(f"{type(self).__name__}.step needs a closure (zero the gradients, "
                             "compute the loss, call backward, return the loss)")
        params = [p for group in self.param_groups for p in group["params"]]
        before = [(p.grad, None if p.grad is None else p.grad._version) for p in params]
        loss, value = self._evaluate(closure, *args)
        if params and all(p.grad is None or (p.grad is g and p.grad._version == v)
                          for p, (g, v) in zip(params, before, strict=True)):
            raise ValueError(f"{type(self).__name__}: the closure produced no gradient (no "
                             "parameter's .grad was written): it must call loss.backward()")
        if not math.isfinite(value):
            raise FloatingPointError(f"{type(self).__name__}: the closure returned a non-finite "
                                     f"loss ({value}) at step {self.steps_taken}; the "
                                     f"parameters are those before the step")
        return loss, value

    def _evaluate(self, closure, *args):
        """:class:`~orthoplug.distributed.DataParallelOptimizer`'s, with the closure's result
        checked first.

        Raises:
            ValueError: the closure returned something other than one number (e.g. a
                per-sample loss vector or ``None``).
        """
        def checked(*a):
            loss = closure(*a)
            if isinstance(loss, bool) or not (isinstance(loss, (int, float)) or (
                    torch.is_tensor(loss) and loss.numel() == 1 and not loss.is_complex())):
                raise ValueError(f"{type(self).__name__}: the closure must return the loss as "
                                 f"one real number, got {_describe(loss)}")
            return loss

        return super()._evaluate(checked, *args)

    def _grads(self) -> dict[torch.Tensor, torch.Tensor]:
        """A copy of every parameter's gradient (parameters without one are left out).

        Raises:
            FloatingPointError: naming the first parameter with a non-finite gradient.
        """
        out = {}
        for gi, group in enumerate(self.param_groups):
            for pi, p in enumerate(group["params"]):
                if p.grad is None:
                    continue
                g = p.grad.detach().clone()
                if not bool(torch.isfinite(g).all()):
                    raise FloatingPointError(
                        f"{type(self).__name__}: non-finite gradient of parameter {pi} of group "
                        f"{gi} (shape {tuple(p.shape)}) at step {self.steps_taken}; the "
                        f"parameters are those before the step")
                out[p] = g
        return out

    def _majoriser_step(self, closure, f0: float, rules: Iterable,
                        propose: Callable[[], tuple[dict, float]]) -> None:
        """Propose, test, retry: the one acceptance loop of the majoriser steps (JOBCD, OBCD).

        ``propose()`` writes a proposal made with the rules' current σ into the parameters and
        returns ``({parameter: its value before}, predicted change)``; if it fails part-way it
        restores what it wrote and raises. Unless no rule is checked (fixed σ), the loss at the
        proposal is compared by every checked
        :class:`~orthoplug.solvers.sigma_rules.SigmaBacktracking` (the test of the core solvers;
        a rejection doubles σ) and a rejected proposal is undone and made again.

        Raises:
            FloatingPointError: a non-finite proposal, or no acceptable step (the rule gives
                up, naming the last trial loss): the parameters are those before the step.
        """
        checked = [rule for rule in rules if rule.checked]
        while True:
            old: dict = {}
            try:
                old, predicted = propose()
                if not checked:
                    return
                _, f1 = self._evaluate(closure)  # a non-finite trial loss is a rejection
                if all([rule.accepts(f0, f1, predicted) for rule in checked]):
                    return
            except FloatingPointError as err:  # (NonFiniteError included)
                self._restore(old)
                raise FloatingPointError(f"{type(self).__name__}: {err} at step "
                                         f"{self.steps_taken}; the parameters are those "
                                         "before the step") from err
            self._restore(old)

    def _start_rules(self, closure, grads) -> None:
        """Start the optimizer's σ rule (``self.sigma_rule``, the majoriser optimizers) for every
        parameter that has none yet (:func:`~orthoplug.solvers.sigma_rules.start_sigma_rule`; a
        closure declares no Lipschitz constant), the estimate of the first σ taken once for all
        of them together from the closure at a nearby point; the rule's state and first σ
        (``sigma_start``) go into the parameter's ``state``."""
        fresh = [p for p in grads if "sigma" not in self.state[p]]
        if not fresh:
            return
        x = [p.detach().clone() for p in fresh]
        g = [grads[p] for p in fresh]

        def gradient_at(points):
            try:
                for p, value in zip(fresh, points, strict=True):
                    p.copy_(value)
                self._loss(closure)
                out = self._grads()
            finally:
                self._restore(dict(zip(fresh, x, strict=True)))
            return [out[p] for p in fresh]

        def estimate(adaptive: bool) -> float:
            if adaptive:
                return estimate_bb(x, g, gradient_at)
            return estimate_lipschitz(x, g, gradient_at, self._generator)

        cache: dict = {}

        def estimate_once(adaptive: bool) -> float:
            if adaptive not in cache:
                cache[adaptive] = estimate(adaptive)
            return cache[adaptive]

        for p in fresh:
            rule = start_sigma_rule(self.sigma_rule, None, estimate_once, p.dtype)
            self.state[p].update(rule.state_dict(), sigma_start=rule.sigma)

    def _rule(self, group, p) -> SigmaBacktracking:
        """The σ rule of ``p`` continued from the parameter's state."""
        state = self.state[p]
        rule = self.sigma_rule.start(state["sigma"], rtol=cost_rounding(p.dtype))
        rule.load_state_dict(state)
        return rule

    @staticmethod
    def _restore(old: dict) -> None:
        """Write back ``{parameter: value}``."""
        for p, value in old.items():
            p.copy_(value.reshape(p.shape))

    def _end_step(self) -> None:
        """Count the step, apply each group's ``stabilize``, run the replica check."""
        self.steps_taken += 1
        for group in self.param_groups:
            if group["stabilize"] is not None and self.steps_taken % group["stabilize"] == 0:
                self.stabilize_group(group)
        super()._end_step()
