"""geoopt front-ends for RSSM: the ``StiefelBlock`` manifold and the ``RSSM`` torch optimizer.

``StiefelBlock(X, columns)`` is the submanifold block ``{Y ∈ St(n, |C|) : X_Rᵀ Y = 0}`` as a
``geoopt.Manifold`` — the columns C of a Stiefel point as a ``ManifoldParameter``, the other
columns frozen — so that e.g. ``RiemannianAdam`` optimises one block::

    block = StiefelBlock(X, columns=[0, 3, 4])
    Y = geoopt.ManifoldParameter(block.origin(), manifold=block)
    opt = geoopt.optim.RiemannianAdam([Y], lr=1e-2)
    for _ in range(200):
        opt.zero_grad(); loss = full_cost(block.assemble(Y)); loss.backward(); opt.step()

``RSSM`` optimises ``ManifoldParameter``\\ s on ``geoopt.Stiefel`` (Euclidean or canonical)::

    X = geoopt.ManifoldParameter(geoopt.Stiefel().random(n, p), manifold=geoopt.Stiefel())
    opt = RSSM([X], num_blocks=8, schedule="geometric")
    for _ in range(5000):
        opt.zero_grad(); loss(X).backward(); opt.step()

Each ``step`` draws one uniformly random pair of column blocks per parameter (the same pair for
all matrices of a batched parameter) and updates those columns by
:func:`orthoplug.geometry.stiefel_block.block_update` from the columns C of ``p.grad`` (the
autograd gradient, a valid subgradient of piecewise-smooth losses). The other columns are not
written. ``step(closure)`` is supported (the closure returns the loss after ``backward``); the
adaptive step rules ``schedule="polyak"`` and ``"geometric-restart"`` need it (they read the
loss at the current point).
A non-finite gradient raises :class:`~orthoplug.oracles.core.NonFiniteError` (a
``FloatingPointError``) before anything is written.

Under ``torch.distributed`` (see :mod:`orthoplug.distributed`) ``seed=None`` is drawn on rank 0
and broadcast, and ``step`` averages the gradients over the process group (after the closure,
if one is given; ``average_gradients=False`` skips this under DDP), so all ranks draw the same
blocks and take the same step; ``replica_check_every=N`` compares the replicas every N steps.
"""

from __future__ import annotations

import math

import geoopt
import torch
from geoopt.utils import size2shape

from orthoplug.distributed import DataParallelOptimizer, shared_seed
from orthoplug.geometry.stiefel_block import (
    StiefelBlockGeometry,
    block_update,
    complement,
    partition_columns,
)
from orthoplug.oracles import NonFiniteError
from orthoplug.solvers.rssm import (
    PolyakStep,
    RestartedGeometric,
    StepSchedule,
    block_subgradient_sq,
)

from .geoopt import _GeometryManifold

__all__ = ["RSSM", "StiefelBlock"]


class StiefelBlock(_GeometryManifold):
    """A submanifold block of St(n, p) as a geoopt manifold (points ``n × |C|``, batchable).

    Args:
        point: a point X of St(n, p) (tensor); its columns outside ``columns`` are fixed.
        columns: the variable columns C.

    ``origin()`` returns the columns C of ``point``; :meth:`assemble` the full matrix
    (differentiable). ``expmap`` raises ``NotImplementedError`` (optimizers use ``retr``, the
    polar projection onto the block).
    """

    def __init__(self, point, columns):
        super().__init__(StiefelBlockGeometry(point, columns), 1.0)

    def assemble(self, y: torch.Tensor) -> torch.Tensor:
        """The full ``(..., n, p)`` matrix with ``y`` in columns C (differentiable)."""
        return self.geometry.assemble(y)

    def origin(self, *size, dtype=None, device=None, seed=42):
        """The initial block (columns C of the construction point), broadcast to ``size``."""
        y = self.geometry.initial_point
        if dtype is not None or device is not None:
            y = y.to(dtype=dtype or y.dtype, device=device)
        if size:
            shape = size2shape(*size)
            self._assert_check_shape(shape, "x")
            y = y.expand(shape).clone()
        return geoopt.ManifoldTensor(y, manifold=self)

    def _check_point_on_manifold(self, x, *, atol=1e-5, rtol=1e-5):
        err = self.geometry.gram_error(x)
        if not torch.allclose(err, torch.zeros_like(err), atol=atol, rtol=rtol):
            return False, (f"`XᵀJX != J_k` (J = I) for X = [Y, X_fixed]: YᵀY − I and X_fixedᵀY "
                           f"must vanish; max |error| = {err.abs().max().item():.3e}")
        return True, None

    def _check_vector_on_tangent(self, x, u, *, atol=1e-5, rtol=1e-5):
        res, _ = self.geometry.tangent_residual(x, u)
        if not torch.allclose(res, torch.zeros_like(res), atol=atol, rtol=rtol):
            return False, (f"`YᵀU + UᵀY != 0` or `X_fixedᵀU != 0`: max |error| = "
                           f"{res.abs().max().item():.3e}")
        return True, None


def _check_params(groups):
    for group in groups:
        for p in group["params"]:
            manifold = getattr(p, "manifold", None)
            if not isinstance(p, geoopt.ManifoldParameter) or not isinstance(
                    manifold, geoopt.Stiefel):
                raise ValueError(
                    "RSSM optimises ManifoldParameters on geoopt.Stiefel (EuclideanStiefel or "
                    f"CanonicalStiefel); got {type(p).__name__} on "
                    f"{type(manifold).__name__ if manifold is not None else 'no manifold'}")
            if p.shape[-1] < 2:
                raise ValueError(f"RSSM needs at least 2 columns, got shape {tuple(p.shape)}")


class RSSM(DataParallelOptimizer, torch.optim.Optimizer):
    r"""Randomized submanifold subgradient method over ``geoopt.Stiefel`` parameters.

    Args:
        params: iterable of ``ManifoldParameter``\ s on ``geoopt.Stiefel`` (or param groups).
        lr: ``γ₀ > 0``, or ``"auto"`` (default): ``γ₀ = 0.5/‖grad f(X₀)‖_F`` at the first step
            (RMS over the matrices of a batched parameter), as in the pymanopt front-end.
        num_blocks: ℓ ∈ [2, p] (default ``min(4, p)``); or ``blocks``: an explicit partition.
        schedule: ``"constant"``, ``"diminishing"`` (default, ``γ₀/√(k+1)``), ``"geometric"``
            (``γ₀βᵏ``), a callable ``k -> γ_k``, or the adaptive ``"polyak"``
            (:class:`~orthoplug.solvers.rssm.PolyakStep`; ``lr`` unused) and
            ``"geometric-restart"`` (:class:`~orthoplug.solvers.rssm.RestartedGeometric`),
            which need ``step(closure)``; an epoch is ``⌈ℓ/2⌉`` steps.
        decay: β of the geometric schedules per step (default ``0.98^(2/ℓ)``).
        level: ``"polyak"``'s ``δ₀/|f(X₀)|``.
        patience: epochs without progress before ``"polyak"`` halves δ or
            ``"geometric-restart"`` restarts.
        shrink: ``"geometric-restart"``'s step factor at a restart.
        reorthogonalize: project the step off the fixed columns before the polar factor.
        seed: seed of the pair draws (per parameter, saved in ``state_dict``; ``None``:
            random, the same on every rank).
        process_group: the ``torch.distributed`` group (default: the world).
        replica_check_every: compare the replicas across ranks every this many steps.
        average_gradients: average the gradients over the group in each step.
    """

    def __init__(self, params, lr: float | str = "auto", *, num_blocks: int | None = None,
                 blocks=None, schedule="diminishing", decay: float | None = None,
                 level: float = 0.5, patience: int = 3, shrink: float = 0.5,
                 reorthogonalize: bool = True, seed: int | None = None, process_group=None,
                 replica_check_every: int | None = None, average_gradients: bool = True):
        if isinstance(lr, str) and lr != "auto":
            raise ValueError(f"lr must be a number > 0 or 'auto', got {lr!r}")
        lr0 = 1.0 if lr == "auto" else lr
        if schedule == "polyak":
            PolyakStep(level, patience)
        elif schedule == "geometric-restart":
            RestartedGeometric(lr0, 0.5 if decay is None else decay, shrink, patience)
        else:
            StepSchedule(lr0, schedule, 0.5 if decay is None else decay)
        if num_blocks is not None and (isinstance(num_blocks, bool)
                                       or not isinstance(num_blocks, int) or num_blocks < 2):
            raise ValueError(f"num_blocks must be an integer >= 2, got {num_blocks!r}")
        defaults = dict(lr=lr, num_blocks=num_blocks, blocks=blocks, schedule=schedule,
                        decay=decay, level=level, patience=patience, shrink=shrink,
                        reorthogonalize=reorthogonalize)
        super().__init__(params, defaults)
        _check_params(self.param_groups)
        self._init_data_parallel(process_group, replica_check_every, average_gradients)
        self.seed = shared_seed(seed, process_group, lambda: torch.seed() % (2**62))
        self._index: dict[int, tuple[int, int]] = {}
        for gi, group in enumerate(self.param_groups):  # validate partitions now
            for pi, p in enumerate(group["params"]):
                self._partition(group, p)
                self._index[id(p)] = (gi, pi)
        self._initial_replica_check()

    @staticmethod
    def _partition(group, p):
        ncols = p.shape[-1]
        if group["blocks"] is not None:
            return partition_columns(ncols, blocks=group["blocks"])
        return partition_columns(ncols, group["num_blocks"] or min(4, ncols))

    def _generator(self, p, state):
        gen = torch.Generator()
        if "rng_state" in state:
            # load_state_dict casts state tensors to the parameter's dtype; the bytes survive
            gen.set_state(state["rng_state"].to(device="cpu", dtype=torch.uint8))
        else:
            gi, pi = self._index.get(id(p), (0, 0))
            gen.manual_seed(self.seed + 1000003 * gi + pi)
        return gen

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss, _ = self._evaluate(closure)
        else:
            self._average_gradients()
        updates = []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                if not bool(torch.isfinite(g).all()):
                    raise NonFiniteError("RSSM: non-finite gradient; parameters left unchanged")
                state = self.state[p]
                blocks = self._partition(group, p)
                ell = len(blocks)
                if "lr0" not in state:
                    state["step"] = 0
                    state["lr0"] = self._initial_lr(group, p, g)
                decay = group["decay"] if group["decay"] is not None else 0.98 ** (2.0 / ell)
                gen = self._generator(p, state)
                i = int(torch.randint(ell, (1,), generator=gen))
                j = int(torch.randint(ell - 1, (1,), generator=gen))
                j += j >= i
                cols = torch.cat([blocks[min(i, j)], blocks[max(i, j)]]).to(p.device)
                gc = g[..., cols]
                if group["schedule"] in ("polyak", "geometric-restart"):
                    rule, epoch = self._rule(group, state, ell, decay, loss)
                    if isinstance(rule, RestartedGeometric) and state["step"] > 0 and (
                            state["step"] % epoch == 0):
                        back = rule.epoch_end(state["step"], float(loss), p.detach())
                        if back is not None:  # restart: X ← best, no block step this time
                            updates.append((p, None, back, state, gen, rule))
                            continue
                    if isinstance(rule, PolyakStep):
                        rule.observe(float(loss))
                        rest = complement(cols, p.shape[-1]).to(p.device)
                        gamma = rule(float(loss), block_subgradient_sq(p.detach(), cols, rest, gc),
                                     cols.numel() / p.shape[-1])
                    else:
                        gamma = rule(state["step"])
                else:
                    rule = None
                    gamma = StepSchedule(state["lr0"], group["schedule"], decay)(state["step"])
                new = block_update(p.detach(), cols, gc, gamma,
                                   reorthogonalize=group["reorthogonalize"])
                if not bool(torch.isfinite(new).all()):
                    raise NonFiniteError("RSSM: non-finite update; parameters left unchanged")
                updates.append((p, cols, new, state, gen, rule))
        for p, cols, new, state, gen, rule in updates:
            if cols is None:
                p.copy_(new)
            else:
                p[..., cols] = new
            state["step"] += 1
            state["rng_state"] = gen.get_state()
            if rule is not None:
                state["rule"] = rule.to_state()
        self._end_step()
        return loss

    def _random_state(self):
        return [("seed", self.seed)]

    @staticmethod
    def _rule(group, state, ell: int, decay: float, loss):
        """The parameter's adaptive rule (restored from ``state``) and its epoch length."""
        if loss is None:
            raise ValueError(f"schedule {group['schedule']!r} needs step(closure): it reads "
                             f"the loss at the current point")
        epoch = max(1, math.ceil(ell / 2))
        if group["schedule"] == "polyak":
            if "rule" in state:
                return PolyakStep.from_state(state["rule"]), epoch
            rule = PolyakStep(group["level"], group["patience"])
            rule.start(float(loss), epoch)
            return rule, epoch
        if "rule" in state:
            return RestartedGeometric.from_state(state["rule"]), epoch
        return RestartedGeometric(state["lr0"], decay, group["shrink"], group["patience"]), epoch

    @staticmethod
    def _initial_lr(group, p, g) -> float:
        if group["lr"] != "auto":
            return float(group["lr"])
        x = p.detach()
        xtg = x.mT @ g
        xi = g - x @ (0.5 * (xtg + xtg.mT))
        nmat = max(1, x.numel() // (x.shape[-1] * x.shape[-2]))
        norm = float(torch.linalg.vector_norm(xi)) / nmat ** 0.5
        return 0.5 / norm if norm > 0 else 1.0
