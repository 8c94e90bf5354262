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
    opt = RSSM([X], num_blocks=8)              # the Polyak rule: reads the loss
    def closure():
        opt.zero_grad(); value = loss(X); value.backward(); return value
    for _ in range(5000):
        opt.step(closure)

Each ``step`` draws one uniformly random pair of column blocks per parameter (the same pair for
all matrices of a batched parameter; :func:`orthoplug.solvers.rssm.draw_block_pair` from the
optimizer's generator, parameters in order) and updates those columns by
:func:`orthoplug.solvers.rssm.block_step` — the step of the core solver, with its step sizes
(:class:`orthoplug.solvers.steps.SubgradientSteps`) — from the columns C of ``p.grad`` (the
autograd gradient, a valid subgradient of piecewise-smooth losses). The other columns are not
written. **One step is one block step** (one update, as torch.optim counts, like the OBCD
optimizer's): it pays the closure's full gradient, so it is one iteration of the core solver
with an oracle that gives no cheaper columns. With the same seed, start and options, N
``step(closure)`` calls on one parameter give the iterates of N block steps of
:class:`orthoplug.solvers.rssm.RSSM` (N iterations of the pymanopt optimizer, whose problem
gradient is a full one; N/⌈ℓ/2⌉ iterations with a column oracle). The step rules count the
steps, with epochs of ``⌈ℓ/2⌉`` steps.
``step(closure)`` is supported (the closure returns the loss after ``backward``); the step
rules that read the loss need it: ``Polyak`` (the default) and ``GeometricOnStall`` (which calls
the closure once more at the end of each epoch, to compare the new point with the best).
A non-finite loss or gradient raises ``FloatingPointError`` naming it before anything is
written.

**Options of the core solver that are not here**, and why: ``refresh_every`` (the polar factor
of the whole iterate every this many block steps) is ``stabilize`` here (geoopt's ``projx`` of
``geoopt.Stiefel``, the same polar factor); ``pairs="matching"`` (the blocks drawn as
random perfect matchings) is not offered: this door draws independent uniform pairs, the core's
default and the paper's rule.

Under ``torch.distributed`` (see :mod:`orthoplug.distributed`) ``seed=None`` is drawn on rank 0
and broadcast, and ``step`` averages the gradients over the process group (after the closure,
if one is given; ``average_gradients=False`` skips this under DDP), so all ranks draw the same
blocks and take the same step; ``replica_check_every=N`` compares the replicas every N steps.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import geoopt
import torch
from geoopt.utils import size2shape

from orthoplug.geometry._linalg import sym
from orthoplug.geometry.stiefel_block import StiefelBlockGeometry, partition_columns
from orthoplug.solvers.rssm import auto_step_size, block_step, column_pair, draw_block_pair
from orthoplug.solvers.step_rules import (
    RULE_NAMES,
    Diminishing,
    StepRule,
    SubgradientSteps,
    step_rule,
)

from ._geoopt_base import _GeometryManifold
from ._torch import OrthoplugOptimizer

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


class RSSM(OrthoplugOptimizer):
    r"""Randomized submanifold subgradient method over ``geoopt.Stiefel`` parameters.

    Args:
        params: iterable of ``ManifoldParameter``\ s on ``geoopt.Stiefel`` (or param groups).
        lr: the step rule and its factor. A rule object of :mod:`orthoplug.solvers.step_rules`
            (``Polyak``, ``Diminishing``, ``Constant``, ``Geometric``, ``GeometricOnStall``) or
            a rule name (default ``"polyak"``) sets the group's ``lr`` to 1.0; a number ``η``
            is ``Diminishing(1.0)`` with ``lr = η``. The step is ``lr · γ_k`` with ``γ_k`` the
            rule's (as in the pymanopt front-end); ``lr`` is read at every step, so torch's
            schedulers scale any rule; ``lr = 0`` skips the group. The rules that read the
            loss (``Polyak``, ``GeometricOnStall``) need ``step(closure)``; an epoch is
            ``⌈ℓ/2⌉`` steps. ``step="auto"`` in a fixed schedule is ``0.5/‖grad f(X₀)‖_F`` at
            the first step (RMS over the matrices of a batched parameter).
        num_blocks: ℓ ∈ [2, p] (default ``min(4, p)``); or ``blocks``: an explicit partition.
        project_step: project the step off the fixed columns before the polar factor.
        stabilize: ``projx`` every this many steps (``None``: never).
        seed: seed of the pair draws (saved in ``state_dict``; ``None``: random, the same on
            every rank).
        process_group: the ``torch.distributed`` group (default: the world).
        replica_check_every: compare the replicas across ranks every this many steps.
        average_gradients: average the gradients over the group in each step.
    """

    plain_rules = {"rule": RULE_NAMES}

    def __init__(self, params: Iterable[torch.Tensor | dict],
                 lr: StepRule | float | str = "polyak", *, num_blocks: int | None = None,
                 blocks: Sequence[Sequence[int]] | None = None,
                 project_step: bool = True, stabilize: int | None = None,
                 seed: int | None = None,
                 process_group: torch.distributed.ProcessGroup | None = None,
                 replica_check_every: int | None = None, average_gradients: bool = True):
        defaults = dict(lr=lr, rule=None, num_blocks=num_blocks, blocks=blocks,
                        project_step=project_step, stabilize=stabilize)
        super().__init__(params, defaults, seed=seed, process_group=process_group,
                         replica_check_every=replica_check_every,
                         average_gradients=average_gradients)
        self._initial_replica_check()

    def _check_group(self, group):
        if group["rule"] is None:
            lr = group["lr"]
            if isinstance(lr, StepRule | str):
                group["rule"], group["lr"] = step_rule(lr, "lr"), 1.0
            else:
                group["rule"] = Diminishing(1.0)
        super()._check_group(group)
        num_blocks = group["num_blocks"]
        if num_blocks is not None and (isinstance(num_blocks, bool)
                                       or not isinstance(num_blocks, int) or num_blocks < 2):
            raise ValueError(f"num_blocks must be an integer >= 2, got {num_blocks!r}")
        for p in group["params"]:
            manifold = p.manifold if isinstance(p, geoopt.ManifoldTensor) else None
            if not isinstance(p, geoopt.ManifoldParameter) or not isinstance(
                    manifold, geoopt.Stiefel):
                raise ValueError(
                    "RSSM optimises ManifoldParameters on geoopt.Stiefel (EuclideanStiefel or "
                    f"CanonicalStiefel); got {type(p).__name__} on "
                    f"{type(manifold).__name__ if manifold is not None else 'no manifold'} "
                    "(give other parameters their own optimizer, e.g. torch.optim.SGD)")
            if p.shape[-1] < 2:
                raise ValueError(f"RSSM needs at least 2 columns, got shape {tuple(p.shape)}")
            self._partition(group, p)  # validate the partition now

    @staticmethod
    def _partition(group, p):
        ncols = p.shape[-1]
        if group["blocks"] is not None:
            return partition_columns(ncols, blocks=group["blocks"])
        return partition_columns(ncols, group["num_blocks"] or min(4, ncols))

    def _steps(self, group, p, g, value) -> SubgradientSteps:
        """The parameter's step sizes: started at its first step (as the core solver's at X₀),
        then restored from ``state``; their factor is the group's current ``lr``."""
        state = self.state[p]
        ell = len(self._partition(group, p))
        x = p.detach()
        steps = SubgradientSteps.build(
            group["rule"], f0=lambda: value,
            auto_step=lambda: auto_step_size(g - x @ sym(x.mT @ g)),
            epoch_length=math.ceil(ell / 2), share=2.0 / ell)
        if "steps" in state:
            steps.load_state_dict(state["steps"])
        else:
            state["step"] = 0
        steps.scale = group["lr"]
        return steps

    @torch.no_grad()
    def step(self, closure=None):
        """One RSSM block step per parameter (see the module docstring); returns the loss of
        ``closure`` (``None`` without one).

        Raises:
            ValueError: an infeasible start point (first step), a bad ``lr``, a closure that
                wrote no gradient, or no closure for a rule that reads the loss.
            FloatingPointError: a non-finite loss or gradient (nothing is written).
        """
        self._check_start()
        if closure is not None:
            loss, value = self._loss(closure)
        else:
            reads = [group["rule"] for group in self.param_groups if group["rule"].reads_values]
            if reads:
                raise ValueError(f"the step rule {reads[0]!r} reads the loss at the current "
                                 "point: call step(closure), or give a rule that does not "
                                 "(e.g. lr=Diminishing())")
            loss, value = None, math.nan
            self._average_gradients()
        grads = self._grads()
        updates = []
        for group in self.param_groups:
            if self._check_lr(group["lr"]) == 0:
                continue
            for p in group["params"]:
                if p not in grads:
                    continue
                g = grads[p]
                steps = self._steps(group, p, g, value)
                blocks = self._partition(group, p)
                key = draw_block_pair(len(blocks), self.generator())
                cols, rest = (t.to(p.device) for t in column_pair(blocks, *key, p.shape[-1]))
                new = block_step(p.detach(), cols, rest, g[..., cols], steps, lambda: value,
                                 project_step=group["project_step"])
                updates.append((p, cols, new, steps))
        for p, cols, new, _ in updates:
            p[..., cols] = new
        new_value = None
        for p, _, _, steps in updates:
            if steps.ends_epoch and new_value is None:  # f at the new point, once
                new_value = self._loss(closure)[1]
            back = steps.finish(lambda v=new_value: v, p.detach())
            if back is not None:
                p.copy_(back)
            state = self.state[p]
            state["step"] += 1
            state["steps"] = steps.state_dict()
        self._end_step()
        return loss
