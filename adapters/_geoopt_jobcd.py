"""JOBCD as torch optimizers over geoopt ``ManifoldParameter``\\ s on J-manifolds.

Every matrix of a (batched) parameter is updated in each ``step``: ``JJOBCD`` applies one random
perfect matching of the rows per matrix, ``GSJOBCD`` one pair per matrix from the parameter's
:class:`~orthoplug.solvers.pairs.PairQueue`. All pairs of all matrices are solved in one batched
exact call (:func:`orthoplug.solvers.jobcd_steps.jacobi_step`). Rows of different matrices are
disjoint coordinates, so the scalar curvature ``σ‖X[B]‖₂²`` majorises the joint change whenever
σ bounds the Lipschitz constant of the whole loss.

``side="column"`` (square matrices only) takes the pairs among the columns instead: the same
step on the transposed matrix and gradient (see :mod:`orthoplug.solvers.jobcd`).

:class:`ColumnJJacobi` is the column J-Jacobi sweep for a known quadratic loss
``s·tr(XᵀCX)`` (no gradients needed): one sweep of every matrix per ``step()``.

``step(closure)`` needs a closure that zeroes the gradients, computes the loss, calls
``backward()`` and returns the loss (without one, or with one that writes no gradient,
``step`` raises ``ValueError``).

**lr** (every group, default 1; torch's schedulers may change it between steps): the model's
quadratic coefficients are divided by it, ``σ_eff = σ/lr`` and ``θ_eff = θ/lr``, so ``lr = 1`` is
the method itself, a smaller ``lr`` a shorter (more damped) step and ``lr = 0`` no move (the
group is skipped). A checked σ rule tests the model with ``σ_eff``. The start point of
every parameter is checked at its first step (``ValueError`` naming the violation); plain
(Euclidean) parameters are refused: give them their own optimizer (e.g. ``torch.optim.SGD``).

**σ rule** (``sigma_rule``, default ``"fit"`` as in the core solvers): the core solvers' rule
objects (:mod:`orthoplug.solvers.sigma_rules`), one started copy per parameter, its state in the
parameter's ``state``. A checked rule (:class:`~orthoplug.solvers.sigma_rules.SigmaFit`,
:class:`~orthoplug.solvers.sigma_rules.SigmaBacktracking`) tests every step on a second closure
call and redoes it with a larger σ until the loss is below the model, so a step never increases
the loss; a fixed σ (a number, :class:`~orthoplug.solvers.sigma_rules.SigmaFixed`) skips that
check and its closure call. A closure declares no Lipschitz constant, so a rule without
``sigma0`` starts at the core solvers' local estimate (one more closure call, at the first step
only; the first σ is in ``state`` as ``sigma_start`` and in :meth:`_JOBCDOptimizer.info`). A
closure that computes a minibatch loss makes the test noisy: give such a loop a fixed σ or a
``SigmaBacktracking(sigma0=...)``.

**Same method as the core solvers.** With the same ``seed``, start and options — the defaults
included — a single-matrix parameter follows the iterates of the orthoplug/pymanopt solvers of
the same name (``GSJOBCD`` those of the core ``GSJOBCD`` wherever the core takes the scalar
model: ``curvature="scalar"``, a non-quadratic cost or the column side). The exceptions are
what a closure cannot give: the core J-JOBCD's ``curvature="hessian"`` (Hessian-vector
products; :meth:`JJOBCD.info` records the scalar model), the oracle's declared Lipschitz constant
(VR-J-JOBCD's default σ; here ``sigma_rule`` is required) and
``JJOBCD(precondition=...)``, which the core solvers lack. The
draws — pair batches, matchings, PAGE coins and minibatches — come from the generator of the
parameter's device (:meth:`~orthoplug.adapters._torch.OrthoplugOptimizer.generator`), saved in
``state_dict`` with the pair queues, so a resumed optimizer continues bit-identically.

Under ``torch.distributed`` (data parallel, see :mod:`orthoplug.distributed`) the descent check
uses the loss averaged over the process group, the gradients are averaged after each closure
call (unless ``average_gradients=False``), so every rank draws the same pairs, accepts the same
σ and makes the same closure calls; ``replica_check_every=N`` compares the replicas every N
steps.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import geoopt
import numpy as np
import torch

from orthoplug.distributed import Shard
from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry, JOrthogonalGeometry
from orthoplug.kernels import runs_compiled
from orthoplug.oracles import NonFiniteError, all_finite
from orthoplug.solvers.jjacobi import ColumnJacobi
from orthoplug.solvers.jobcd import SIDES
from orthoplug.solvers.jobcd_steps import PageSchedule, jacobi_step
from orthoplug.solvers.pairs import PairQueue, check_matchings, resolve_matchings
from orthoplug.solvers.sigma_rules import SigmaFixed, SigmaRule, as_sigma_rule

from ._geoopt_base import _GeometryManifold
from ._torch import OrthoplugOptimizer, check_number

__all__ = ["GSJOBCD", "JJOBCD", "VRJJOBCD", "ColumnJJacobi"]

#: The preconditioned directions of :class:`JJOBCD` (its ``precondition`` option).
PRECONDITIONERS = ("adam", "rms")


def _check_param(name, p, column: bool):
    """Refuse a parameter the JOBCD optimizers cannot take, saying what to do."""
    manifold = p.manifold if isinstance(p, geoopt.ManifoldTensor) else None
    if not (isinstance(p, geoopt.ManifoldParameter) and isinstance(manifold, _GeometryManifold)
            and isinstance(manifold.geometry, (JOrthogonalGeometry, IndefiniteStiefelGeometry))):
        raise ValueError(
            f"{name} optimises ManifoldParameters on orthoplug's JOrthogonal or "
            f"IndefiniteStiefel manifolds; got {type(p).__name__} on "
            f"{type(manifold).__name__ if manifold is not None else 'no manifold'} (give other "
            "parameters their own optimizer, e.g. torch.optim.SGD or geoopt's RiemannianAdam)")
    if column and p.shape[-1] != p.shape[-2]:
        raise ValueError(f"{name}: column steps need square matrices (O(J)), got a "
                         f"parameter of shape {tuple(p.shape)}")


_INTEGER_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def require_compiled_sweeps(p: torch.Tensor, name: str = "ColumnJJacobi") -> None:
    """Refuse ``p`` unless the compiled (NumPy/numba) sweep takes it (the dispatch rule
    :func:`~orthoplug.kernels.runs_compiled`: CPU float32 and float64 tensors), the only
    tensors :class:`ColumnJJacobi` takes.

    Raises:
        ValueError: a tensor on another device (no silent host round-trip).
        TypeError: another dtype.
    """
    if runs_compiled(p):
        return
    if p.device.type != "cpu":
        raise ValueError(f"{name} runs compiled CPU sweeps; got a parameter on {p.device}: "
                         "move it to the CPU, or use GSJOBCD(side='column'), whose torch step "
                         "runs on any device")
    raise TypeError(f"{name} takes float32 or float64 parameters, got {p.dtype}")


def _indexed(groups):
    """``(key, parameter)`` for every parameter, keyed ``"group.index"`` (stable over a save and
    load, unlike the parameter objects)."""
    return [(f"{gi}.{pi}", p) for gi, group in enumerate(groups)
            for pi, p in enumerate(group["params"])]


class _JOBCDOptimizer(OrthoplugOptimizer):
    """Shared scaffold of the JOBCD optimizers.

    Args:
        params: ManifoldParameters on orthoplug's ``JOrthogonal`` / ``IndefiniteStiefel``.
        sigma_rule: the σ rule (:mod:`orthoplug.solvers.sigma_rules`): an object, ``"fit"``
            (default), ``"backtracking"`` or a number (a fixed σ, no checks), as the core
            solvers' option. One started copy per parameter, its state in the parameter's
            ``state``. Without a ``sigma0`` in the rule the first σ is the core solvers' local
            estimate at the start point (a closure declares no Lipschitz constant):
            :func:`~orthoplug.solvers.sigma_rules.estimate_bb` for adaptive rules, else
            :func:`~orthoplug.solvers.sigma_rules.estimate_lipschitz`, over all parameters
            together, from one extra closure call at a nearby point at the first step.
        theta: proximal weight θ > 0.
        lr: step scale ≥ 0 (``σ_eff = σ/lr``, ``θ_eff = θ/lr``; 0: no move), default 1.
        stabilize: ``projx`` every this many steps (``None``: never).
        seed: seed of the pair draws (``None``: random, the same on every rank).
        side: ``"row"`` or ``"column"`` (square matrices).
        process_group: the ``torch.distributed`` group (default: the world).
        replica_check_every: compare the replicas across ranks every this many steps.
        average_gradients: average the gradients over the group after each closure call.
    """

    def __init__(self, params: Iterable[torch.Tensor | dict],
                 *, sigma_rule: SigmaRule = "fit", theta: float = 1e-6,
                 seed: int | None = None, side: str = "row", lr: float = 1.0,
                 stabilize: int | None = None,
                 process_group: torch.distributed.ProcessGroup | None = None,
                 replica_check_every: int | None = None, average_gradients: bool = True):
        self.sigma_rule = as_sigma_rule(sigma_rule)
        if side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {side!r}")
        self.column = side == "column"
        super().__init__(params, dict(theta=theta, lr=lr, stabilize=stabilize), seed=seed,
                         process_group=process_group, replica_check_every=replica_check_every,
                         average_gradients=average_gradients)
        self._initial_replica_check()

    def _check_group(self, group):
        super()._check_group(group)
        check_number("theta", group["theta"], strict=True)
        for p in group["params"]:
            _check_param(type(self).__name__, p, self.column)

    def info(self) -> dict:
        """The resolved choices (side, σ rule and, once a step was taken, the first σ of the
        first parameter), as ``result.info`` of the core solvers reports them."""
        first = next((self.state[p] for g in self.param_groups for p in g["params"]
                      if "sigma_start" in self.state[p]), {})
        return {"side": "column" if self.column else "row", "sigma_rule": repr(self.sigma_rule),
                "sigma_start": first.get("sigma_start")}

    def _oriented(self, t: torch.Tensor) -> torch.Tensor:
        """Column pairs of X are row pairs of Xᵀ (with the gradient ∇fᵀ)."""
        return t.mT if self.column else t

    def _update(self, p, x, g, jvec, sigma, theta, plan):
        """The new value of ``x`` (oriented, batched) and the predicted change (override)."""
        raise NotImplementedError

    def _plan(self, grads) -> dict:
        """Draws fixed for all proposals of one step (override; default none)."""
        return {}

    def _propose(self, grads, rules, plan) -> tuple[dict, float]:
        """Write the proposal into every parameter with a gradient and a rule (its group's
        ``lr > 0``); returns ({parameter: old value}, total predicted change)."""
        old, predicted = {}, 0.0
        try:
            for group in self.param_groups:
                for p in group["params"]:
                    g = grads.get(p)
                    if g is None or p not in rules:
                        continue
                    geometry = p.manifold.geometry
                    jvec = (geometry.jk if self.column else geometry.j).like(p)
                    lr = group["lr"]
                    new, pred = self._update(p, self._oriented(p.detach()), self._oriented(g),
                                             jvec, rules[p].sigma / lr, group["theta"] / lr,
                                             plan)
                    old[p] = p.detach().clone()
                    p.copy_(self._oriented(new))
                    predicted += pred
        except NonFiniteError:
            self._restore(old)
            raise
        return old, predicted

    def _rules(self) -> dict:
        """The σ rule of every parameter of a group with ``lr > 0`` (``lr`` checked)."""
        return {p: self._rule(group, p) for group in self.param_groups
                if self._check_lr(group["lr"]) > 0 for p in group["params"]
                if "sigma" in self.state[p]}

    @torch.no_grad()
    def step(self, closure=None):
        """One step (with σ backtracking unless σ is fixed); returns the loss before it.

        Raises:
            ValueError: no closure, a closure that wrote no gradient, an infeasible start
                point (first step), or an ``lr`` that is not a finite number ≥ 0.
            FloatingPointError: a non-finite loss or gradient at the current point, a
                non-finite step, or no acceptable step after ``max_backtracks`` doublings of σ
                (the parameters keep their values from before the step).
        """
        self._check_start()
        loss = self._update_once(closure)
        self._end_step()
        return loss

    def _update_once(self, closure):
        """One proposal-test-accept round of every parameter (the body of :meth:`step`);
        returns the loss before it."""
        loss, f0 = self._loss(closure)
        raw = self._grads()
        self._start_rules(closure, raw)
        grads, pending = self._direction(raw)
        rules = self._rules()
        plan = self._plan(grads)
        self._majoriser_step(closure, f0, rules.values(),
                             lambda: self._propose(grads, rules, plan))
        for p, rule in rules.items():
            if rule.checked:
                self.state[p].update(rule.state_dict())
        for p, state in pending.items():
            self.state[p].update(state)
        return loss

    def _direction(self, grads) -> tuple[dict, dict]:
        """The linear term of the step from the gradients, and the per-parameter state to keep
        once the step is taken (override; default: the gradients, no state)."""
        return grads, {}


class JJOBCD(_JOBCDOptimizer):
    """J-JOBCD: one random perfect matching of the rows of every matrix per step.

    One step is one iteration of the core :class:`orthoplug.solvers.jobcd.JJOBCD`: one closure
    call (plus one per checked trial) and every row of every matrix moved once. ``matchings``
    (default 1, as in the core solver; an int or ``"all"``): rounds of a random round robin per
    step, pair after pair on the step's gradient, as the core solver's option of that name
    (more than one needs checked steps — no fixed σ — unless ``precondition`` is set).

    ``precondition`` (default ``None``) replaces the gradient ``G`` in the linear term
    ``M = G[B] X[B]ᵀ`` of every pair by a preconditioned direction ``D`` and keeps the exact
    pair step of the model ``⟨W, D[B] X[B]ᵀ⟩ + σ‖X[B]‖₂²/2 ‖W‖²`` (σ plays the part of 1/lr):

    * ``"adam"``: ``D = m̂ / (√v̂ + ε)`` with Adam's bias-corrected first and second moment
      estimates of every entry of the Euclidean gradient (``betas`` = (β₁, β₂) and ``eps`` as in
      ``torch.optim.Adam``);
    * ``"rms"``: ``D_r = G_r / (√v̂_r + ε)`` per matrix ``r`` of a batched parameter, ``v_r`` the
      bias-corrected exponential average (β₂) of the mean square entry of ``G_r`` (a per-matrix
      σ_r = σ(√v̂_r + ε) on the raw gradient).

    ``weight_decay`` λ ≥ 0 (with ``precondition`` only) adds ``λX``, the gradient of
    ``λ‖X‖_F²/2``, to ``D`` after the preconditioner (decoupled, as in AdamW). On a J-orthogonal
    ``X`` this pulls towards ``O(p) × O(q)`` (where ``‖X‖_F² = n`` is smallest): rotations
    within a block leave ``‖X‖_F`` unchanged (the term adds nothing to the first-order part of
    their angle), so the pull acts through the hyperbolic pairs, whose boosts Adam's per-entry
    normalisation otherwise moves as far as any other entry.

    The new point stays exactly J-orthogonal (``V ∈ O(J_BB)`` on every pair), but the model is
    no majoriser of the loss any more, so a fixed σ (``sigma_rule=σ``) is required, no descent
    check is
    made and no step is guaranteed to decrease the loss. The moments are kept in the
    parameter's ``state`` (saved and resumed with ``state_dict``) and updated only once a step
    is taken.

    Args:
        params: ManifoldParameters on orthoplug's ``JOrthogonal`` / ``IndefiniteStiefel``.
        matchings: rounds of a random round robin per step (1, the default, an int or
            ``"all"``).
        precondition: ``None``, ``"adam"`` or ``"rms"`` (above).
        betas: (β₁, β₂) of the moment estimates.
        eps: ε of the preconditioner.
        weight_decay: λ ≥ 0 of the decoupled ``λX`` term (with ``precondition`` only).
        sigma_rule, theta, seed, side: as in :class:`GSJOBCD` (the options of every JOBCD
            optimizer).
        lr, stabilize, process_group, replica_check_every, average_gradients: as in
            :class:`GSJOBCD`.

    Raises:
        ValueError: an unknown ``precondition`` or ``matchings``, ``precondition`` without a
            fixed σ, ``betas`` / ``eps`` out of range, or a negative ``weight_decay`` (or
            one without ``precondition``).
    """

    def __init__(self, params: Iterable[torch.Tensor | dict],
                 *, matchings: int | str = 1, precondition: str | None = None,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, sigma_rule: SigmaRule = "fit", theta: float = 1e-6,
                 seed: int | None = None, side: str = "row", lr: float = 1.0,
                 stabilize: int | None = None,
                 process_group: torch.distributed.ProcessGroup | None = None,
                 replica_check_every: int | None = None, average_gradients: bool = True):
        check_matchings(matchings)
        if precondition not in (None, *PRECONDITIONERS):
            raise ValueError(f"precondition must be None or one of {PRECONDITIONERS}, got "
                             f"{precondition!r}")
        checked = as_sigma_rule(sigma_rule).checked
        if precondition is not None and checked:
            raise ValueError(f"precondition={precondition!r} needs a fixed sigma_rule=σ (it "
                             "acts as 1/lr): the preconditioned model is no majoriser to "
                             "backtrack on")
        if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1 and eps > 0):
            raise ValueError(f"betas must lie in [0, 1) and eps > 0, got {betas} and {eps}")
        if matchings != 1 and not checked and precondition is None:
            raise ValueError("matchings > 1 needs checked steps (a σ rule other than a fixed "
                             "σ): a σ ≥ L_f majorises one matching on a stale gradient, not "
                             "several")
        if not weight_decay >= 0 or (weight_decay > 0 and precondition is None):
            raise ValueError(f"weight_decay must be >= 0 and > 0 only with a precondition, got "
                             f"{weight_decay} with precondition={precondition!r}")
        self.matchings, self.precondition = matchings, precondition
        self.betas, self.eps = (float(betas[0]), float(betas[1])), float(eps)
        self.weight_decay = float(weight_decay)
        super().__init__(params, sigma_rule=sigma_rule, theta=theta, seed=seed, side=side,
                         lr=lr, stabilize=stabilize, process_group=process_group,
                         replica_check_every=replica_check_every,
                         average_gradients=average_gradients)

    def info(self) -> dict:
        """As the scaffold's, with the model (always the scalar one: a closure gives no
        Hessian-vector products) and the matchings."""
        return {**super().info(), "curvature": "scalar", "matchings": self.matchings}

    def _direction(self, grads):
        if self.precondition is None:
            return grads, {}
        beta1, beta2 = self.betas
        directions, pending = {}, {}
        for p, g in grads.items():
            state = self.state[p]
            t = int(state.get("precondition_step", 0)) + 1
            if self.precondition == "adam":
                m = torch.lerp(state.get("exp_avg", torch.zeros_like(g)), g, 1 - beta1)
                v = torch.lerp(state.get("exp_avg_sq", torch.zeros_like(g)), g * g, 1 - beta2)
                directions[p] = (m / (1 - beta1**t)) / ((v / (1 - beta2**t)).sqrt() + self.eps)
                pending[p] = {"exp_avg": m, "exp_avg_sq": v, "precondition_step": t}
            else:
                square = (g * g).mean(dim=(-2, -1), keepdim=True)
                v = torch.lerp(state.get("matrix_sq", torch.zeros_like(square)), square,
                               1 - beta2)
                directions[p] = g / ((v / (1 - beta2**t)).sqrt() + self.eps)
                pending[p] = {"matrix_sq": v, "precondition_step": t}
            if self.weight_decay > 0:
                directions[p] = directions[p] + self.weight_decay * p.detach()
        return directions, pending

    def _update(self, p, x, g, jvec, sigma, theta, plan):
        rounds = resolve_matchings(self.matchings, x.shape[-2])
        return jacobi_step(x, g, jvec, sigma, theta, self.generator(),
                           matchings=rounds)


class GSJOBCD(_JOBCDOptimizer):
    """GS-JOBCD: per step, one pair update of every matrix (one iteration of the core
    :class:`orthoplug.solvers.jobcd.GSJOBCD` on an oracle without cheap gradient rows: a
    closure's ``backward`` is a full gradient), its pair taken from the parameter's
    :class:`~orthoplug.solvers.pairs.PairQueue` (uniform random pairs, drawn as the core solver
    draws them: the same pairs for a single matrix), with one closure call at the point (plus
    one per checked trial).

    Args:
        params: ManifoldParameters on orthoplug's ``JOrthogonal`` / ``IndefiniteStiefel``.
        sigma_rule: the σ rule: an object, ``"fit"`` (default), ``"backtracking"`` or a number
            (a fixed σ); see the module docstring.
        theta: proximal weight θ > 0.
        seed: seed of the pair draws (``None``: random, the same on every rank).
        side: ``"row"`` (default) or ``"column"`` (square matrices).
        lr: step scale ≥ 0 (``σ_eff = σ/lr``, ``θ_eff = θ/lr``; 0: no move).
        stabilize: ``projx`` every this many steps (``None``: never).
        process_group: the ``torch.distributed`` group (default: the world).
        replica_check_every: compare the replicas across ranks every this many steps.
        average_gradients: average the gradients over the group after each closure call.

    The rules of every option are those of the shared scaffold (``_JOBCDOptimizer``) and of
    :class:`orthoplug.solvers.jobcd.GSJOBCD`.
    """

    def __init__(self, params: Iterable[torch.Tensor | dict],
                 *, sigma_rule: SigmaRule = "fit", theta: float = 1e-6,
                 seed: int | None = None, side: str = "row", lr: float = 1.0,
                 stabilize: int | None = None,
                 process_group: torch.distributed.ProcessGroup | None = None,
                 replica_check_every: int | None = None, average_gradients: bool = True):
        self._queues: dict = {}
        self._saved_queues: dict = {}
        super().__init__(params, sigma_rule=sigma_rule, theta=theta, seed=seed, side=side,
                         lr=lr, stabilize=stabilize, process_group=process_group,
                         replica_check_every=replica_check_every,
                         average_gradients=average_gradients)

    def _queue_of(self, p) -> PairQueue:
        """The pair queue of ``p``, one pair per matrix per entry (made on first use, or from a
        loaded state)."""
        queue = self._queues.get(p)
        if queue is None:
            x = self._oriented(p.detach())
            queue = PairQueue("random", x.shape[-2], p.device, matrices=x[..., 0, 0].numel())
            key = next(k for k, q in _indexed(self.param_groups) if q is p)
            if key in self._saved_queues:
                queue.load_state_dict(self._saved_queues.pop(key))
            self._queues[p] = queue
        return queue

    def _plan(self, grads):
        plan = {}
        for p in grads:
            queue = self._queue_of(p)
            queue.ensure(self.generator())
            plan[p] = torch.as_tensor(queue.next_rows()).to(p.device).reshape(-1, 1, 2)
        return plan

    def _update(self, p, x, g, jvec, sigma, theta, plan):
        return jacobi_step(x, g, jvec, sigma, theta, pairs=plan[p])  # plan: (nb, 1, 2)

    def _extra_state(self):
        saved = dict(self._saved_queues)
        for key, p in _indexed(self.param_groups):
            if p in self._queues:
                saved[key] = self._queues[p].state_dict()
        return {"pair_queues": saved}

    def _load_extra_state(self, state):
        self._queues = {}
        self._saved_queues = dict(state.get("pair_queues", {}))


class VRJJOBCD(JJOBCD):
    """VR-J-JOBCD (PAGE estimator) for a loss ``(1/N) Σ_i f_i``.

    ``step(closure)`` calls ``closure(indices)`` — it must zero the gradients, compute the mean
    loss over the components ``indices`` (a CPU LongTensor; it indexes CUDA data too), call
    ``backward()`` and return it — at the current point, and, for the variance-reduced update,
    also at the previous point (the optimizer swaps the parameters in and out). ``sigma_rule``
    (≥ the Lipschitz constant) is required. The coins and minibatches are the core solver's
    (:class:`~orthoplug.solvers.jobcd_steps.PageSchedule`). The number of component gradients used
    is kept in ``component_gradients``.

    Data parallel (:mod:`orthoplug.distributed`): every rank draws the same PAGE coins and the
    same global batches. Without ``shard`` every rank holds all N components and the gradients
    are averaged as for the other optimizers. With ``shard`` (the global numbers of the
    components this rank holds, in the order of its local data; see
    :meth:`orthoplug.distributed.Shard.contiguous`) ``closure`` receives the *positions in the
    local data* of the drawn components this rank holds — possibly none: the call is still
    made on every rank and its result ignored — and the optimizer sums the count-weighted local
    means over the group, so the step equals one process's on all N components. Do not wrap
    the parameters of a sharded VRJJOBCD in ``DistributedDataParallel`` (its equal-weight
    average would be wrong for unequal counts).

    Args:
        params: ManifoldParameters on orthoplug's ``JOrthogonal`` / ``IndefiniteStiefel``.
        num_components: N, the number of components of the loss.
        sigma_rule: the fixed σ ≥ the Lipschitz constant, a number or a
            :class:`~orthoplug.solvers.sigma_rules.SigmaFixed` (required: ``None``, the core
            solver's default, reads the oracle's declared Lipschitz constant, which a closure
            lacks).
        theta: proximal weight θ > 0.
        batch_size: the large (reset) batch of PAGE (``None``: all N components).
        small_batch: the small batch of the variance-reduced update (``None``: PAGE's rule).
        reset_probability: probability of a large batch (``None``: PAGE's rule).
        seed: seed of the coins, batches and matchings (``None``: random, the same on every
            rank).
        shard: the global numbers of the components this rank holds (``None``: all).
        lr: step scale ≥ 0 (``σ_eff = σ/lr``, ``θ_eff = θ/lr``; 0: no move).
        stabilize: ``projx`` every this many steps (``None``: never).
        process_group: the ``torch.distributed`` group (default: the world).
        replica_check_every: compare the replicas across ranks every this many steps.
        average_gradients: average the gradients over the group after each closure call.
    """

    def __init__(self, params: Iterable[torch.Tensor | dict],
                 *, num_components: int, sigma_rule: SigmaFixed | float | None = None,
                 theta: float = 1e-6,
                 batch_size: int | None = None, small_batch: int | None = None,
                 reset_probability: float | None = None, seed: int | None = None,
                 shard: torch.Tensor | list[int] | None = None, lr: float = 1.0,
                 stabilize: int | None = None,
                 process_group: torch.distributed.ProcessGroup | None = None,
                 replica_check_every: int | None = None, average_gradients: bool = True):
        if sigma_rule is None:
            raise ValueError("VRJJOBCD needs a fixed σ ≥ the Lipschitz constant of the loss: "
                             "pass sigma_rule=σ (a closure declares no Lipschitz constant, "
                             "which the core solver's default takes from its oracle)")
        if as_sigma_rule(sigma_rule).checked:
            raise ValueError(f"VRJJOBCD takes a fixed σ (a number or SigmaFixed), got "
                             f"{sigma_rule!r}: checking a step needs full losses, which the "
                             "estimator avoids")
        check_number("num_components", num_components, integer=True, minimum=1)
        for key, value in (("batch_size", batch_size), ("small_batch", small_batch)):
            if value is not None:
                check_number(key, value, integer=True, minimum=1)
        self.page = PageSchedule(num_components, batch_size, small_batch, reset_probability)
        self.component_gradients = 0
        super().__init__(params, sigma_rule=sigma_rule, theta=theta, seed=seed, lr=lr,
                         stabilize=stabilize, process_group=process_group,
                         replica_check_every=replica_check_every,
                         average_gradients=average_gradients)
        self.shard = None if shard is None else Shard(self.page.num_components, shard,
                                                      process_group)
        if self.shard is not None:
            self.shard.validate()

    def _params(self):
        return [p for g in self.param_groups for p in g["params"]]

    def _grads_at(self, closure, idx):
        """The loss and gradients of the mean over the global components ``idx``.

        Raises:
            ValueError: no closure, or a parameter without a gradient after the closure.
        """
        params = self._params()
        if self.shard is None:
            loss, _ = self._loss(closure, idx)
            grads = self._grads()
        else:
            if closure is None:
                raise ValueError(f"{type(self).__name__}.step needs a closure(indices)")
            local = self.shard.local(idx)
            with torch.enable_grad():
                loss = closure(local)
            self._require_grads(params)
            loss = torch.as_tensor(loss).detach()
            parts = self.shard.combine([loss] + [p.grad for p in params], int(local.numel()),
                                       int(idx.numel()), [loss] + [p.detach() for p in params])
            loss, grads = parts[0], dict(zip(params, parts[1:], strict=True))
            if not all_finite(loss) or not all(all_finite(g) for g in grads.values()):
                raise FloatingPointError(f"{type(self).__name__}: non-finite loss ({float(loss)})"
                                         f" or gradient of the components drawn at step "
                                         f"{self.steps_taken}; the parameters are those "
                                         "before the step")
        self._require_grads([p for p in params if p not in grads])
        self.component_gradients += int(idx.numel())
        return loss, grads

    def _require_grads(self, params) -> None:
        """Raise ``ValueError`` naming the first of ``params`` without a gradient (the PAGE
        estimator needs every parameter's)."""
        for gi, group in enumerate(self.param_groups):
            for pi, p in enumerate(group["params"]):
                if any(q is p for q in params) and p.grad is None:
                    raise ValueError(f"{type(self).__name__}: parameter {pi} of group {gi} "
                                     f"(shape {tuple(p.shape)}) has no gradient after the "
                                     "closure; every parameter must take part in the loss")

    @torch.no_grad()
    def step(self, closure=None):
        """One PAGE step; returns the loss of the first closure call.

        Raises:
            ValueError: no closure, a parameter without a gradient, an infeasible start point
                (first step) or a bad ``lr``.
            FloatingPointError: a non-finite loss, gradient or step (the parameters keep their
                values from before the step).
        """
        self._check_start()
        params = self._params()
        first = "g_est" not in self.state[params[0]]
        if first:
            reset, idx = True, torch.arange(self.page.num_components)
        else:
            reset, idx = self.page.draw(self.generator())
        if reset:
            loss, g_est = self._grads_at(closure, idx)
        else:
            loss, g_new = self._grads_at(closure, idx)
            current = [p.detach().clone() for p in params]
            try:
                for p in params:
                    p.copy_(self.state[p]["x_prev"])
                _, g_old = self._grads_at(closure, idx)
            finally:
                for p, c in zip(params, current, strict=True):
                    p.copy_(c)
            g_est = {p: self.state[p]["g_est"] + g_new[p] - g_old[p] for p in params}
        current = {p: p.detach().clone() for p in params}
        self._start_rules(closure, g_est)  # a fixed σ: no estimate, no closure call
        rules = self._rules()
        # σ is fixed (unchecked rules): one proposal, no loss at the new point
        self._majoriser_step(closure, math.nan, rules.values(),
                             lambda: self._propose(g_est, rules, {}))
        for p in params:
            self.state[p]["g_est"], self.state[p]["x_prev"] = g_est[p], current[p]
        self._end_step()
        return loss

    def _extra_state(self):
        return {"component_gradients": self.component_gradients}

    def _load_extra_state(self, state):
        self.component_gradients = int(state["component_gradients"])


class ColumnJJacobi(OrthoplugOptimizer):
    """Column J-Jacobi sweeps for the quadratic loss ``s·tr(XᵀCX)`` of square O(J) parameters.

    Each ``step()`` applies one sweep of ``n(n−1)/2`` column-pair rotations to every matrix of
    every parameter (in order; batched parameters matrix by matrix), each pair minimising the
    loss exactly (:class:`~orthoplug.solvers.jjacobi.ColumnJacobi`). No gradients are used; a
    ``closure``, if given, is evaluated before the sweep and its loss returned. A sweep that
    raised the loss (rounding dominates) is undone, as in the core solver
    (:meth:`~orthoplug.solvers.jjacobi.ColumnJacobi.outcome`). With the same ``seed`` and
    options — the defaults included — the iterates equal those of ``ColumnJJacobi`` run on
    ``QuadraticOracle(C, scale=s)`` (pymanopt or orthoplug front-end, one sweep per
    iteration).

    Args:
        params: ``ManifoldParameter``\\ s on square orthoplug ``JOrthogonal`` manifolds (n×n).
        c: the symmetric n×n matrix C (a tensor or array).
        scale: s.
        pairs: ``"cyclic"`` (default), ``"random"`` or ``"greedy"``.
        seed: seed of the pair draws (random / greedy orders).
        tol, max_boost, same_sign, candidates: see :class:`~orthoplug.solvers.jjacobi.ColumnJacobi`.
        lr: 0 skips the group's sweep (the parameters do not move); any ``lr > 0`` applies the
            exact sweep (each pair minimises the loss exactly: there is no step length to
            scale). Read at every step, so schedulers may switch a group off and on.
        stabilize: ``projx`` every this many steps (``None``: never).

    The sweeps are compiled CPU kernels on NumPy arrays: parameters must be CPU float32 or
    float64 tensors (:func:`require_compiled_sweeps`; a CUDA parameter is refused, with the
    advice to use ``GSJOBCD(side="column")``, rather than copied to the host and back at every
    step).

    ``converged`` is true once every matrix's last sweep was a cyclic one that rotated no pair.
    Each matrix has its own :class:`~orthoplug.solvers.jjacobi.ColumnJacobi` state (saved in
    ``state_dict``).
    """

    def __init__(self, params: Iterable[torch.Tensor | dict],
                 *, c: torch.Tensor | np.ndarray, scale: float = 1.0,
                 pairs: str = "cyclic",
                 seed: int | None = None, tol: float | None = None, max_boost: float = 4.0,
                 same_sign: bool = True, candidates: int = 8, lr: float = 1.0,
                 stabilize: int | None = None):
        c = torch.as_tensor(c).detach()
        if c.is_complex() or not (c.is_floating_point() or c.dtype in _INTEGER_DTYPES):
            raise TypeError(f"c must be a real matrix, got dtype {c.dtype}")
        if c.ndim != 2 or c.shape[0] != c.shape[1]:
            raise ValueError(f"c must be a square matrix, got shape {tuple(c.shape)}")
        if not bool(torch.isfinite(c).all()):
            raise ValueError("c has non-finite entries")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(
                scale):
            raise ValueError(f"scale must be a finite number, got {scale!r}")
        check_number("candidates", candidates, integer=True, minimum=1)
        self.c = c.cpu().to(torch.float64).numpy()
        self.options = dict(order=pairs, tol=tol, max_boost=max_boost, same_sign=same_sign,
                            candidates=candidates)
        self.scale = float(scale)
        self.engines: dict = {}
        super().__init__(params, dict(lr=lr, stabilize=stabilize), seed=seed)

    def _check_group(self, group):
        super()._check_group(group)
        for p in group["params"]:
            _check_param(type(self).__name__, p, column=True)
            require_compiled_sweeps(p, type(self).__name__)
            self._engine(p, 0)  # validate C and the options against the parameter now

    def _engine(self, p, index: int) -> ColumnJacobi:
        """The sweep state of matrix ``index`` of parameter ``p``."""
        key = (p, index)
        if key not in self.engines:
            dtype = torch.empty((), dtype=p.dtype).numpy().dtype
            self.engines[key] = ColumnJacobi(self.c.astype(dtype), self.scale,
                                             p.manifold.geometry.jk.values, **self.options)
        return self.engines[key]

    @property
    def converged(self) -> bool:
        """True once every matrix's last sweep was cyclic and rotated no pair."""
        return all(e.converged for e in self.engines.values())

    def _value(self, x: np.ndarray) -> float:
        return self.scale * float(np.einsum("ji,jk,ki->", x, self.c.astype(x.dtype), x))

    @torch.no_grad()
    def step(self, closure=None):
        """One sweep of every matrix; returns the closure's loss (``None`` without one).

        Raises:
            FloatingPointError: a non-finite loss or rotation (the parameters are unchanged).
        """
        self._check_start()
        loss = None if closure is None else self._loss(closure)[0]
        new_values = []
        moving = [p for group in self.param_groups if self._check_lr(group["lr"]) > 0
                  for p in group["params"]]
        for p in moving:
            n = p.shape[-1]
            new = []
            for b, x in enumerate(p.detach().cpu().numpy().reshape(-1, n, n)):
                engine = self._engine(p, b)
                try:
                    y = engine.sweep(x, self.generator())
                except NonFiniteError as err:
                    raise FloatingPointError(f"{type(self).__name__}: {err} at step "
                                             f"{self.steps_taken}; the parameters are those "
                                             "before the step") from err
                undo, _ = engine.outcome(self._value(x), self._value(y))
                new.append(x if undo else y)
            new_values.append((p, np.stack(new).reshape(p.shape)))
        for p, value in new_values:
            p.copy_(torch.from_numpy(value).to(p))
        self._end_step()
        return loss

    def _extra_state(self):
        return {"engines": {f"{key}.{b}": self.engines[(p, b)].state_dict()
                            for key, p in _indexed(self.param_groups)
                            for b in range(p[..., 0, 0].numel()) if (p, b) in self.engines}}

    def _load_extra_state(self, state):
        for key, p in _indexed(self.param_groups):
            for b in range(p[..., 0, 0].numel()):
                saved = state["engines"].get(f"{key}.{b}")
                if saved is not None:
                    self._engine(p, b).load_state_dict(saved)
