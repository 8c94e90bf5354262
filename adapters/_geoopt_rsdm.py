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
gradient ``G = p.grad`` (see :mod:`orthoplug.solvers.rsdm`):

    X ← U(Y) X,  Y = Retr_{I_r}(−lr · skew(P(r)G (P(r)X)ᵀ)),

RSDM-P (``sampling="permutation"``, O(pr² + r³) per matrix besides backprop) or RSDM-O
(``"orthogonal"``, O(npr + nr²)). The step only depends on the O(n) gradient ``skew(GXᵀ)``, so
the Stiefel metric (Euclidean or canonical) plays no role. Every other parameter (plain tensors,
``geoopt.Euclidean``) gets exactly RiemannianSGD's update (weight decay, momentum, dampening,
Nesterov); manifold parameters take plain RSDM steps (momentum and weight decay do not apply to
them: ``skew(XXᵀ) = 0``, so weight decay would be a no-op anyway). Parameters on other manifolds
are rejected. ``stabilize=k`` replaces each Stiefel parameter by its ``projx`` every k steps
(default 1000, unlike RiemannianSGD, whose QR retraction re-orthonormalises at every step).

Without ``lr`` (``lr=None``) the Stiefel step needs no tuning: ``step(closure)`` backtracks
(Armijo, with memory) on the loss the closure returns. All Stiefel parameters of the group move
together by ``Y = Retr(−η Γ)`` on their own slices; η is accepted when the loss drops by at
least ``c·η·Σ‖Γ‖²`` and halved otherwise, and the next step starts from ``2η`` after a
first-trial acceptance, else from the accepted η (kept in the group as ``"armijo_step"``, so it
is saved with the state). Such a group holds Stiefel parameters only.

Randomness comes from one ``torch.Generator`` per device, seeded with ``seed`` (random if
``None``); its state is part of :meth:`state_dict`, so a restored optimizer continues with the
same slices (on the same device: a saved state is applied when its device is first used, so a
checkpoint from a GPU loads on a CPU-only host, whose generator then starts from the seed).

Under ``torch.distributed`` (see :mod:`orthoplug.distributed`) ``seed=None`` is drawn on rank 0
and broadcast, and ``step`` averages the gradients over the process group (after the closure,
if one is given; ``average_gradients=False`` skips this under DDP), so every rank draws the same
slices and takes the same step; ``replica_check_every=N`` compares the replicas every N steps.
"""

from __future__ import annotations

import geoopt
import torch
from geoopt.optim.mixin import OptimMixin

from orthoplug.distributed import DataParallelOptimizer, shared_seed
from orthoplug.geometry.submanifold import (
    RETRACTIONS,
    SAMPLINGS,
    retract_identity,
    sample_submanifold,
    submanifold_gradient,
)

__all__ = ["RSDM"]

_STATE_KEY = "rsdm_generators"


def _is_stiefel(p) -> bool:
    return isinstance(getattr(p, "manifold", None), geoopt.Stiefel)


def _is_euclidean(p) -> bool:
    manifold = getattr(p, "manifold", None)
    return manifold is None or isinstance(manifold, geoopt.Euclidean)


class RSDM(DataParallelOptimizer, OptimMixin, torch.optim.Optimizer):
    """Riemannian random submanifold descent with RiemannianSGD's interface.

    Args:
        params: parameters or parameter groups (groups may override every option below).
        lr: step size η > 0 (for Stiefel parameters the RSDM step, for the others SGD's), or
            ``None``: Armijo backtracking on the closure's loss (see the module docstring).
        r: slice dimension, ``2 ≤ r ≤ n`` for every Stiefel parameter of the group (required).
        sampling: ``"permutation"`` (RSDM-P, default) or ``"orthogonal"`` (RSDM-O).
        retraction: on O(r): ``"qr"`` (default), ``"polar"``, ``"cayley"``, ``"exp"``.
        momentum, dampening, weight_decay, nesterov: RiemannianSGD's, for non-manifold
            parameters.
        stabilize: project Stiefel parameters back (``projx``, O(np²)) every this many steps
            (default 1000; ``None``: never). RSDM multiplies by orthogonal matrices and never
            corrects round-off: in float32 ‖XᵀX − I‖ random-walks (≈5e-5 after 10³ steps).
        seed: seed of the slice sampling (``None``: random, the same on every rank).
        process_group: the ``torch.distributed`` group (default: the world).
        replica_check_every: compare the replicas across ranks every this many steps.
        average_gradients: average the gradients over the group in each step.

    Raises:
        ValueError: bad options, ``r`` missing or out of range for a parameter, a parameter on a
            manifold other than Stiefel / Euclidean, or a Euclidean parameter in a group
            without ``lr``.
        RuntimeError: ``step()`` without a closure in a group without ``lr``.
    """

    #: Armijo's first trial, contraction, sufficient-decrease constant and trials per step
    ARMIJO = {"first_trial": 1.0, "contraction": 0.5, "c": 1e-4, "max_trials": 31}

    def __init__(self, params, lr: float | None = None, r: int | None = None, *,
                 sampling: str = "permutation",
                 retraction: str = "qr", momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, stabilize: int | None = 1000,
                 seed: int | None = None, process_group=None,
                 replica_check_every: int | None = None, average_gradients: bool = True):
        defaults = dict(lr=lr, r=r, sampling=sampling, retraction=retraction, momentum=momentum,
                        dampening=dampening, weight_decay=weight_decay, nesterov=nesterov)
        self._init_data_parallel(process_group, replica_check_every, average_gradients)
        self._seed = shared_seed(seed, process_group)
        self._generators: dict[str, torch.Generator] = {}
        self._saved_states: dict[str, torch.Tensor] = {}  # loaded, not yet used
        super().__init__(params, defaults, stabilize=stabilize)
        self._initial_replica_check()

    # ---- validation ----------------------------------------------------------------------------
    def add_param_group(self, param_group: dict):
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        lr, r = group["lr"], group["r"]
        if lr is None:
            group.setdefault("armijo_step", self.ARMIJO["first_trial"])
            if any(not _is_stiefel(p) for p in group["params"]):
                raise ValueError("a group with lr=None (Armijo on the closure's loss) takes "
                                 "Stiefel parameters only: give the other parameters their own "
                                 "group with an lr")
        elif not (isinstance(lr, (int, float)) and lr > 0):
            raise ValueError(f"lr must be > 0 or None, got {lr!r}")
        if isinstance(r, bool) or not isinstance(r, int) or r < 2:
            raise ValueError(f"r must be an integer >= 2, got {r!r}")
        if group["sampling"] not in SAMPLINGS:
            raise ValueError(f"unknown sampling {group['sampling']!r}; choose from {SAMPLINGS}")
        if group["retraction"] not in RETRACTIONS:
            raise ValueError(f"unknown retraction {group['retraction']!r}; "
                             f"choose from {RETRACTIONS}")
        if group["momentum"] < 0 or group["weight_decay"] < 0:
            raise ValueError("momentum and weight_decay must be >= 0")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        for p in group["params"]:
            if _is_stiefel(p):
                n = p.shape[-2]
                if r > n:
                    raise ValueError(f"r = {r} exceeds n = {n} for a Stiefel parameter of shape "
                                     f"{tuple(p.shape)}; give that parameter its own group "
                                     f"with 2 <= r <= n")
            elif not _is_euclidean(p):
                raise ValueError(f"RSDM supports Stiefel manifold parameters (and Euclidean "
                                 f"ones), got {p.manifold!r}")

    # ---- randomness -------------------------------------------------------------------------
    def _generator(self, device: torch.device) -> torch.Generator:
        """The slice generator of ``device``: created on first use, from a loaded state if
        one was saved for that device, else seeded with the optimizer's seed."""
        key = str(device)
        gen = self._generators.get(key)
        if gen is None:
            gen = torch.Generator(device=device)
            saved = self._saved_states.pop(key, None)
            if saved is None:
                gen.manual_seed(self._seed)
            else:  # torch.load(map_location=...) may have moved the bytes: set_state needs CPU
                gen.set_state(saved.to(device="cpu", dtype=torch.uint8))
            self._generators[key] = gen
        return gen

    def _random_state(self):
        return [("seed", self._seed), *((f"generator on {k}", g)
                                        for k, g in sorted(self._generators.items()))]

    def state_dict(self):
        out = super().state_dict()
        out[_STATE_KEY] = {**self._saved_states,
                           **{k: g.get_state() for k, g in self._generators.items()}}
        out[_STATE_KEY + "_seed"] = self._seed
        return out

    def load_state_dict(self, state_dict):
        """Restore the groups, the momentum buffers and the per-device slice generators.

        A generator state is applied when its device is first used, so a checkpoint saved on
        a device this host lacks still loads; parameters moved to another device start that
        device's generator from the seed (the slice sequence restarts).
        """
        state_dict = dict(state_dict)
        gens = state_dict.pop(_STATE_KEY, {})
        self._seed = state_dict.pop(_STATE_KEY + "_seed", self._seed)
        super().load_state_dict(state_dict)
        self._generators = {}
        self._saved_states = dict(gens)

    # ---- the step -----------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss, _ = self._evaluate(closure)
        else:
            self._average_gradients()
        for group in self.param_groups:
            group["step"] = group.get("step", 0) + 1
            if group["lr"] is None:
                if closure is None:
                    raise RuntimeError("RSDM with lr=None backtracks on the loss: call "
                                       "step(closure) with a closure that returns the loss")
                loss = self._armijo_group(group, closure, loss)
                if group["stabilize"] is not None and group["step"] % group["stabilize"] == 0:
                    self.stabilize_group(group)
                continue
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("RSDM does not support sparse gradients")
                if _is_stiefel(p):
                    self._rsdm_step(p, group)
                else:
                    self._sgd_step(p, group)
            if group["stabilize"] is not None and group["step"] % group["stabilize"] == 0:
                self.stabilize_group(group)
        self._end_step()
        return loss

    def _slice(self, p, group):
        """A random slice for ``p``, ``C = P(r)X`` and ``Γ`` from ``p.grad``."""
        x = p.data
        sub = sample_submanifold(group["sampling"], x.shape[-2], group["r"],
                                 batch=tuple(x.shape[:-2]), dtype=x.dtype, device=x.device,
                                 generator=self._generator(x.device))
        c = sub.restrict(x)
        return sub, c, submanifold_gradient(sub.restrict(p.grad), c)

    def _rsdm_step(self, p, group):
        sub, c, gamma = self._slice(p, group)
        sub.apply_(p.data, retract_identity(-group["lr"] * gamma, group["retraction"]), c)

    def _armijo_group(self, group, closure, loss):
        """One backtracking step of all of the group's Stiefel parameters; returns the loss."""
        if loss is None:
            with torch.enable_grad():
                loss = closure()
        f0 = float(loss)
        moves = [(p, p.data.clone(), *self._slice(p, group)) for p in group["params"]
                 if p.grad is not None]
        slope = sum(float((gamma * gamma).sum()) for *_, gamma in moves)
        if not moves or slope == 0.0:
            return loss
        eta = group["armijo_step"]
        for trial in range(self.ARMIJO["max_trials"]):
            for p, x0, sub, c, gamma in moves:
                p.data.copy_(x0)
                sub.apply_(p.data, retract_identity(-eta * gamma, group["retraction"]), c)
            with torch.enable_grad():
                new_loss = closure()
            if float(new_loss) <= f0 - self.ARMIJO["c"] * eta * slope:  # False for NaN
                group["armijo_step"] = 2.0 * eta if trial == 0 else eta
                return new_loss
            eta *= self.ARMIJO["contraction"]
        for p, x0, *_ in moves:  # no acceptable step: stay (the next step starts smaller)
            p.data.copy_(x0)
        group["armijo_step"] = eta
        return loss

    def _sgd_step(self, p, group):
        """RiemannianSGD's update on the Euclidean manifold, step for step."""
        grad = p.grad
        state = self.state[p]
        momentum = group["momentum"]
        if len(state) == 0 and momentum > 0:
            state["momentum_buffer"] = grad.clone()
        grad = grad.add(p, alpha=group["weight_decay"])
        if momentum > 0:
            buf = state["momentum_buffer"]
            buf.mul_(momentum).add_(grad, alpha=1 - group["dampening"])
            grad = grad.add_(buf, alpha=momentum) if group["nesterov"] else buf
        p.add_(-group["lr"] * grad)  # RiemannianSGD's retr(x, −lr·g) = x + (−lr·g), bit for bit

    @torch.no_grad()
    def stabilize_group(self, group):
        """Project the group's Stiefel parameters back onto the manifold (``projx``)."""
        for p in group["params"]:
            if _is_stiefel(p):
                p.copy_(p.manifold.projx(p))
