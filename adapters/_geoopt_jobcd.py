"""JOBCD as torch optimizers over geoopt ``ManifoldParameter``\\ s on J-manifolds.

Every matrix of a (batched) parameter is updated in each ``step``: ``JJOBCD`` applies one random
perfect matching of the rows per matrix, ``GSJOBCD`` one uniformly random row pair per matrix.
All pairs of all matrices are solved in one batched exact call
(:func:`orthoplug.solvers.jobcd.jacobi_step`). Rows of different matrices are disjoint
coordinates, so the scalar curvature ``σ‖X[B]‖₂²`` majorises the joint change whenever σ bounds
the Lipschitz constant of the whole loss.

``side="column"`` (square matrices only) takes the pairs among the columns instead: the same
step on the transposed matrix and gradient (see :mod:`orthoplug.solvers.jobcd`).

:class:`ColumnJJacobi` is the column J-Jacobi sweep for a known quadratic loss
``s·tr(XᵀCX)`` (no gradients needed): one sweep of every matrix per ``step()``.

``step(closure)`` needs a closure that zeroes the gradients, computes the loss, calls
``backward()`` and returns the loss. With ``sigma=None`` σ starts at ``sigma0`` and is doubled
(the step redone) until the loss at the new point is below the model, so a step never increases
the loss; pass ``sigma`` (≥ the Lipschitz constant) to skip that check and its extra closure call.
``sigma_shrink < 1`` (without ``sigma``) makes σ adaptive: multiplied by ``sigma_shrink`` after
each accepted step, doubled on each rejection, so steps stay monotone.

Under ``torch.distributed`` (data parallel, see :mod:`orthoplug.distributed`) the descent check
uses the loss averaged over the process group, the gradients are averaged after each closure
call (unless ``average_gradients=False``), so every rank draws the same pairs, accepts the same
σ and makes the same closure calls; ``replica_check_every=N`` compares the replicas every N
steps.
"""

from __future__ import annotations

import math

import geoopt
import numpy as np
import torch

from orthoplug.distributed import DataParallelOptimizer, Shard, shared_seed
from orthoplug.oracles import NonFiniteError
from orthoplug.solvers.jjacobi import ColumnJacobi
from orthoplug.solvers.jobcd import SIDES, jacobi_step

__all__ = ["GSJOBCD", "JJOBCD", "VRJJOBCD", "ColumnJJacobi"]


def _check_params(name, groups):
    for group in groups:
        for p in group["params"]:
            manifold = getattr(p, "manifold", None)
            geometry = getattr(manifold, "geometry", None)
            if not isinstance(p, geoopt.ManifoldParameter) or not hasattr(geometry, "j"):
                raise ValueError(
                    f"{name} optimises ManifoldParameters on orthoplug's JOrthogonal or "
                    f"IndefiniteStiefel manifolds; got {type(p).__name__} on "
                    f"{type(manifold).__name__ if manifold is not None else 'no manifold'}")


def _check_square(name, groups):
    for group in groups:
        for p in group["params"]:
            if p.shape[-1] != p.shape[-2]:
                raise ValueError(f"{name}: column steps need square matrices (O(J)), got a "
                                 f"parameter of shape {tuple(p.shape)}")


class _JOBCDOptimizer(DataParallelOptimizer, torch.optim.Optimizer):
    """Shared scaffold of the JOBCD optimizers.

    Args:
        params: ManifoldParameters on orthoplug's ``JOrthogonal`` / ``IndefiniteStiefel``.
        sigma: fixed scalar curvature σ ≥ the Lipschitz constant; ``None``: backtracking.
        theta: proximal weight θ > 0.
        sigma0: initial σ of the backtracking.
        max_backtracks: doublings of σ before giving up.
        seed: seed of the pair draws (``None``: random, the same on every rank).
        process_group: the ``torch.distributed`` group (default: the world).
        replica_check_every: compare the replicas across ranks every this many steps.
        average_gradients: average the gradients over the group after each closure call.
    """

    pairs_per_matrix: int | None = None

    def __init__(self, params, *, sigma: float | None = None, theta: float = 1e-6,
                 sigma0: float = 1.0, max_backtracks: int = 60, seed: int | None = None,
                 side: str = "row", sigma_shrink: float = 1.0, process_group=None,
                 replica_check_every: int | None = None, average_gradients: bool = True):
        if sigma is not None and not sigma > 0:
            raise ValueError(f"sigma must be > 0, got {sigma}")
        if not 0 < sigma_shrink <= 1 or (sigma_shrink < 1 and sigma is not None):
            raise ValueError(f"sigma_shrink must be in (0, 1] and < 1 only without a fixed "
                             f"sigma, got {sigma_shrink} with sigma={sigma}")
        self.sigma_shrink = float(sigma_shrink)
        if not theta > 0:
            raise ValueError(f"theta must be > 0, got {theta}")
        if side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {side!r}")
        super().__init__(params, dict(sigma=sigma, theta=theta, sigma0=sigma0))
        _check_params(type(self).__name__, self.param_groups)
        self.column = side == "column"
        if self.column:
            _check_square(type(self).__name__, self.param_groups)
        self.max_backtracks = max_backtracks
        self._init_data_parallel(process_group, replica_check_every, average_gradients)
        self.generator = torch.Generator()
        self.generator.manual_seed(shared_seed(seed, process_group, torch.seed))
        self._initial_replica_check()

    def _sigma(self, group, p) -> float:
        if group["sigma"] is not None:
            return group["sigma"]
        return self.state[p].setdefault("sigma", group["sigma0"])

    def _update_all(self, grads) -> tuple[list, list, float]:
        """New values for every parameter with a gradient; returns (params, old, predicted)."""
        params, old, predicted = [], [], 0.0
        for group in self.param_groups:
            for p in group["params"]:
                g = grads.get(p)
                if g is None:
                    continue
                geometry = p.manifold.geometry
                x = p.detach()
                if self.column:  # column pairs of X = row pairs of Xᵀ (gradient ∇fᵀ)
                    x, g = x.mT, g.mT
                jvec = (geometry.jk if self.column else geometry.j).like(p)
                new, pred = jacobi_step(x, g, jvec, self._sigma(group, p),
                                        group["theta"], self.generator, self.pairs_per_matrix)
                if self.column:
                    new = new.mT
                params.append(p)
                old.append(p.detach().clone())
                p.copy_(new)
                predicted += pred
        return params, old, predicted

    @torch.no_grad()
    def step(self, closure):
        if closure is None:
            raise ValueError(f"{type(self).__name__}.step needs a closure (zero grads, compute "
                             "the loss, call backward, return the loss)")
        loss, f0 = self._evaluate(closure)
        if not math.isfinite(f0):
            raise FloatingPointError(f"{type(self).__name__}: non-finite loss {f0}")
        grads = {p: p.grad.detach().clone() for g in self.param_groups for p in g["params"]
                 if p.grad is not None}
        for g in grads.values():
            if not bool(torch.isfinite(g).all()):
                raise FloatingPointError(f"{type(self).__name__}: non-finite gradient")
        checked = any(g["sigma"] is None for g in self.param_groups)
        for _ in range(self.max_backtracks):
            params, old, predicted = self._update_all(grads)
            if not checked:
                self._end_step()
                return loss
            _, f1 = self._evaluate(closure)
            if f1 <= f0 + predicted + 1e-12 * max(1.0, abs(f0)):
                if self.sigma_shrink < 1:  # adaptive σ: shrink after an accepted step
                    for p in params:
                        self.state[p]["sigma"] = self.sigma_shrink * self.state[p]["sigma"]
                self._end_step()
                return loss
            for p, o in zip(params, old, strict=True):  # reject: restore and double σ
                p.copy_(o)
                self.state[p]["sigma"] = 2.0 * self.state[p].get("sigma", 1.0)
        raise FloatingPointError(f"{type(self).__name__}: no acceptable step after "
                                 f"{self.max_backtracks} doublings of sigma")


class JJOBCD(_JOBCDOptimizer):
    """J-JOBCD: one random perfect matching of the rows of every matrix per step."""


class GSJOBCD(_JOBCDOptimizer):
    """GS-JOBCD: one uniformly random row pair of every matrix per step."""

    pairs_per_matrix = 1


class VRJJOBCD(_JOBCDOptimizer):
    """VR-J-JOBCD (PAGE estimator) for a loss ``(1/N) Σ_i f_i``.

    ``step(closure)`` calls ``closure(indices)`` — it must zero the gradients, compute the mean
    loss over the components ``indices`` (a CPU LongTensor; it indexes CUDA data too), call
    ``backward()`` and return it — at the current point, and, for the variance-reduced update,
    also at the previous point (the optimizer swaps the parameters in and out). ``sigma``
    (≥ the Lipschitz constant) is required. The number of component gradients used is kept in
    ``component_gradients``.

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
    """

    def __init__(self, params, *, num_components: int, sigma: float, theta: float = 1e-6,
                 batch_size: int | None = None, small_batch: int | None = None,
                 reset_probability: float | None = None, seed: int | None = None,
                 shard=None, process_group=None, replica_check_every: int | None = None,
                 average_gradients: bool = True):
        if sigma is None:
            raise ValueError("VRJJOBCD needs sigma (>= the Lipschitz constant of the loss)")
        super().__init__(params, sigma=sigma, theta=theta, seed=seed,
                         process_group=process_group, replica_check_every=replica_check_every,
                         average_gradients=average_gradients)
        if num_components < 1:
            raise ValueError(f"num_components must be >= 1, got {num_components}")
        self.n_comp = int(num_components)
        self.shard = None if shard is None else Shard(self.n_comp, shard, process_group)
        if self.shard is not None:
            self.shard.validate()
        self.b = batch_size or self.n_comp
        self.b_small = small_batch or math.ceil(math.sqrt(self.b))
        self.p_reset = (reset_probability if reset_probability is not None
                        else self.b_small / (self.b + self.b_small))
        if not (1 <= self.b <= self.n_comp and 1 <= self.b_small <= self.n_comp
                and 0 <= self.p_reset <= 1):
            raise ValueError("invalid batch sizes or reset probability")
        self.component_gradients = 0

    def _params(self):
        return [p for g in self.param_groups for p in g["params"]]

    def _grads_at(self, closure, idx):
        """The loss and gradients of the mean over the global components ``idx``."""
        self.component_gradients += int(idx.numel())
        params = self._params()
        if self.shard is None:
            loss, _ = self._evaluate(closure, idx)
            return loss, {p: p.grad.detach().clone() for p in params if p.grad is not None}
        local = self.shard.local(idx)
        with torch.enable_grad():
            loss = closure(local)
        loss = torch.as_tensor(loss).detach()
        parts = self.shard.combine([loss] + [p.grad for p in params], int(local.numel()),
                                   int(idx.numel()), [loss] + [p.detach() for p in params])
        return parts[0], dict(zip(params, parts[1:], strict=True))

    def _sample(self, size):
        return torch.randperm(self.n_comp, generator=self.generator)[:size]

    @torch.no_grad()
    def step(self, closure):
        params = self._params()
        first = "g_est" not in self.state[params[0]]
        if first or float(torch.rand((), generator=self.generator)) < self.p_reset:
            idx = torch.arange(self.n_comp) if first else self._sample(self.b)
            loss, grads = self._grads_at(closure, idx)
            for p in params:
                self.state[p]["g_est"] = grads[p]
        else:
            idx = self._sample(self.b_small)
            loss, g_new = self._grads_at(closure, idx)
            current = [p.detach().clone() for p in params]
            for p in params:
                p.copy_(self.state[p]["x_prev"])
            _, g_old = self._grads_at(closure, idx)
            for p, c in zip(params, current, strict=True):
                p.copy_(c)
                self.state[p]["g_est"] = self.state[p]["g_est"] + g_new[p] - g_old[p]
        for p in params:
            self.state[p]["x_prev"] = p.detach().clone()
        self._update_all({p: self.state[p]["g_est"] for p in params})
        self._end_step()
        return loss


class ColumnJJacobi(torch.optim.Optimizer):
    """Column J-Jacobi sweeps for the quadratic loss ``s·tr(XᵀCX)`` of square O(J) parameters.

    Each ``step()`` applies one sweep of ``n(n−1)/2`` column-pair rotations to every matrix of
    every parameter (in order; batched parameters matrix by matrix), each pair minimising the
    loss exactly (:class:`~orthoplug.solvers.jjacobi.ColumnJacobi`). No gradients are used; a
    ``closure``, if given, is evaluated before the sweep and its loss returned. With the same
    ``seed`` and options the iterates equal those of ``GSJOBCD(side="column")`` run on
    ``QuadraticOracle(C, scale=s)`` (pymanopt or orthoplug front-end).

    Args:
        params: ``ManifoldParameter``\\ s on square orthoplug ``JOrthogonal`` manifolds (n×n).
        c: the symmetric n×n matrix C (a tensor or array).
        scale: s.
        pairs: ``"cyclic"`` (default), ``"random"`` or ``"greedy"``.
        seed: seed of the pair draws (random / greedy orders).
        tol, max_boost, same_sign, candidates: see :class:`~orthoplug.solvers.jjacobi.ColumnJacobi`.

    ``converged`` is true once every matrix's last sweep was a cyclic one that rotated no pair.
    Each matrix has its own :class:`~orthoplug.solvers.jjacobi.ColumnJacobi` state.
    """

    def __init__(self, params, *, c, scale: float = 1.0, pairs: str = "cyclic",
                 seed: int | None = None, tol: float | None = None, max_boost: float = 4.0,
                 same_sign: bool = True, candidates: int = 8):
        super().__init__(params, {})
        _check_params(type(self).__name__, self.param_groups)
        _check_square(type(self).__name__, self.param_groups)
        self.c = torch.as_tensor(c).detach().cpu().to(torch.float64).numpy()
        self.options = dict(order=pairs, tol=tol, max_boost=max_boost, same_sign=same_sign,
                            candidates=candidates)
        self.scale = float(scale)
        self.engines: dict = {}
        for group in self.param_groups:
            for p in group["params"]:
                self._engine(p, 0)  # validate C and the options against every parameter now
        self.generator = torch.Generator()
        self.generator.manual_seed(seed if seed is not None else torch.seed())

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

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                n = p.shape[-1]
                mats = p.detach().cpu().numpy().reshape(-1, n, n)
                try:
                    new = [self._engine(p, b).sweep(x, self.generator)
                           for b, x in enumerate(mats)]
                except NonFiniteError as err:
                    raise FloatingPointError(f"{type(self).__name__}: {err}") from err
                p.copy_(torch.from_numpy(np.stack(new).reshape(p.shape)).to(p))
        return loss
