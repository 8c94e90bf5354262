r"""Data-parallel training with ``torch.distributed``: collectives, shards and replica checks.

Data parallelism keeps one full replica of the parameters on every process (rank) and splits
the data. A replica stays identical to the others only if every rank takes the same decision
at every step, so orthoplug's torch optimizers (:class:`DataParallelOptimizer` is mixed into
each of them) follow three rules when ``torch.distributed`` is initialised:

* **Same random stream everywhere.** An explicit ``seed`` is used as given on every rank (it is
  *not* broadcast: a rank started with another seed is a bug that :meth:`check_replicas`
  reports). ``seed=None`` draws the seed on rank 0 and broadcasts it (:func:`shared_seed`),
  since independent draws would make the replicas diverge at the first step.
* **Decisions from the group's loss.** A loss that decides something (σ backtracking,
  finiteness checks) is averaged over the group (:func:`all_reduce_mean`) before use, so every
  rank accepts or rejects the same step and makes the same number of closure calls (under
  ``DistributedDataParallel`` each closure's ``backward`` is itself a collective).
* **Averaged gradients.** After each closure call the optimizer averages its parameters'
  gradients over the group (``average_gradients=True``, the default). Under DDP they are
  already averaged and this changes nothing but costs one all-reduce of the optimised
  parameters' gradients; pass ``average_gradients=False`` there to save it.

Outside ``torch.distributed`` (not initialised) none of this runs: the optimizers behave, draw
and return exactly as without this module.

Finite sums split over ranks use a :class:`Shard`: the components this rank holds. Batches are
drawn from the *global* index range by generators that agree on every rank; each rank evaluates
the drawn components it holds and the count-weighted partial means are summed over the group,
which gives the same estimate as one process holding all the data.

Backends: gloo for CPU tensors (used by the tests, on ``127.0.0.1``); NCCL for CUDA tensors
(``torch.distributed.init_process_group("nccl")`` with one GPU per rank,
``torch.cuda.set_device(local_rank)`` before building the model). The collectives here run on
CPU tensors for gloo and on the current CUDA device for NCCL.
"""

from __future__ import annotations

import math
import numbers
import zlib
from collections.abc import Callable, Iterable, Sequence

import torch
import torch.distributed as dist

__all__ = [
    "ReplicaDivergenceError",
    "DataParallelOptimizer",
    "Shard",
    "is_distributed",
    "world_size",
    "shared_seed",
    "all_reduce_mean",
    "all_reduce_any",
    "all_reduce_sum_",
    "check_replicas",
    "fingerprint",
]


class ReplicaDivergenceError(RuntimeError):
    """The replicas of the parameters (or of the optimizer's random state) differ across ranks."""


def is_distributed(group=None) -> bool:
    """Whether ``torch.distributed`` is initialised (and ``group``, if given, has > 1 rank)."""
    if not (dist.is_available() and dist.is_initialized()):
        return False
    return group is None or dist.get_world_size(group) > 1


def world_size(group=None) -> int:
    """Number of ranks in ``group`` (1 outside ``torch.distributed``)."""
    return dist.get_world_size(group) if is_distributed() else 1


def _device(group=None) -> torch.device:
    """The device the collectives of ``group``'s backend take tensors on."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def check_seed(seed) -> int | None:
    """``seed`` as an ``int`` (``None`` passes).

    Raises:
        TypeError: a seed that is not an integer (a float would be truncated silently).
        ValueError: a negative seed.
    """
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be None or an integer, got {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    return int(seed)


def shared_seed(seed: int | None, group=None,
                draw: Callable[[], int] = lambda: int(torch.randint(2**62, (1,)).item())) -> int:
    """``seed`` itself if given; otherwise ``draw()``, whose result on the group's first rank is
    broadcast when ``torch.distributed`` is initialised (so every rank uses the same seed).

    Raises:
        TypeError, ValueError: as :func:`check_seed`.
    """
    if check_seed(seed) is not None:
        return int(seed)
    value = int(draw())
    if is_distributed(group):
        t = torch.tensor([value], dtype=torch.int64, device=_device(group))
        src = 0 if group is None else dist.get_global_rank(group, 0)
        dist.broadcast(t, src=src, group=group)
        value = int(t.item())
    return value


def all_reduce_mean(value, group=None) -> float:
    """The mean of the float ``value`` (a number or a one-element tensor) over the group; the
    value itself outside ``torch.distributed``."""
    v = float(value.detach()) if isinstance(value, torch.Tensor) else float(value)
    if not is_distributed(group):
        return v
    t = torch.tensor([v], dtype=torch.float64, device=_device(group))
    dist.all_reduce(t, group=group)
    return float(t.item()) / dist.get_world_size(group)


def all_reduce_any(flag: bool, group=None) -> bool:
    """Whether ``flag`` is true on any rank of the group (``flag`` outside
    ``torch.distributed``)."""
    if not is_distributed(group):
        return bool(flag)
    t = torch.tensor([int(bool(flag))], dtype=torch.int64, device=_device(group))
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return bool(t.item())


def all_reduce_sum_(tensors: Sequence[torch.Tensor], group=None) -> None:
    """Sum ``tensors`` over the group in place: one all-reduce per (device, dtype) bucket."""
    if not is_distributed(group) or not tensors:
        return
    buckets: dict[tuple, list[torch.Tensor]] = {}
    for t in tensors:
        buckets.setdefault((t.device, t.dtype), []).append(t)
    comm = _device(group)
    for (device, _), ts in buckets.items():
        flat = torch.cat([t.reshape(-1) for t in ts]).to(comm)
        dist.all_reduce(flat, group=group)
        flat = flat.to(device)
        offset = 0
        for t in ts:
            t.copy_(flat[offset:offset + t.numel()].view_as(t))
            offset += t.numel()


def fingerprint(value) -> list[float]:
    """A few numbers that change when ``value`` changes (for :func:`check_replicas`).

    Floating tensors give ``Σv`` and ``Σ w_i v_i`` (``w_i = 1 + i/numel``: a permutation of
    the entries changes it) in float64; integer and byte tensors (generator states) and
    ``torch.Generator``\\ s the CRC-32 of their bytes; numbers themselves.
    """
    if isinstance(value, torch.Generator):
        value = value.get_state()
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex():
            v = value.detach().reshape(-1).to(torch.float64)
            w = torch.arange(v.numel(), dtype=torch.float64, device=v.device) / max(v.numel(), 1)
            return [float(v.sum()), float((v * (1.0 + w)).sum())]
        data = value.detach().cpu().contiguous().reshape(-1).numpy().tobytes()
        return [float(zlib.crc32(data))]
    if isinstance(value, int):  # exactly, also beyond 2**53 (seeds)
        return [float(value % 2**53), float(value // 2**53)]
    return [float(value)]


def check_replicas(items: Iterable[tuple[str, object]], group=None, *,
                   rtol: float = 1e-12, context: str = "") -> None:
    """Raise :class:`ReplicaDivergenceError` if the named ``items`` differ across ranks.

    One all-reduce (MAX of each fingerprint and of its negation, that is max and min over the
    ranks) of a handful of numbers per item. Fingerprints agree within
    ``rtol·max(1, |value|)``; every rank sees the same max and min, so all ranks raise together.
    Does nothing outside ``torch.distributed``.
    """
    if not is_distributed(group):
        return
    names, values = [], []
    for name, item in items:
        for v in fingerprint(item):
            names.append(name)
            values.append(v)
    t = torch.tensor(values + [-v for v in values], dtype=torch.float64, device=_device(group))
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    t = t.cpu()
    hi, lo = t[:len(values)], -t[len(values):]
    bad = [(names[i], float(lo[i]), float(hi[i])) for i in range(len(values))
           if not (hi[i] - lo[i] <= rtol * max(1.0, float(hi[i].abs())))
           and not (math.isnan(hi[i]) and math.isnan(lo[i]))]
    if bad:
        listed = "; ".join(f"{n}: min {a:.17g}, max {b:.17g}" for n, a, b in dict(
            (b[0], b) for b in bad).values())
        raise ReplicaDivergenceError(
            f"replicas differ across the {dist.get_world_size(group)} ranks{context}: {listed}. "
            "Give every rank the same seed, the same initial parameters and averaged gradients "
            "(DistributedDataParallel or average_gradients=True).")


class Shard:
    """The components ``indices`` (global numbers in ``0..N-1``) of a finite sum held by this rank.

    Batches are drawn from the global range on every rank alike; :meth:`local` turns a drawn
    batch into the positions of this rank's components in its local data, and :meth:`combine`
    sums the count-weighted local means over the group into the batch mean.

    Args:
        num_components: N, the global number of components.
        indices: this rank's components in the order of its local data (a sequence, ``range``
            or 1-D integer tensor); ``None``: all of them (no sharding). The ranks' shards must
            partition ``0..N-1``; :meth:`validate` checks that.
        group: the process group (default: the whole world).

    Raises:
        ValueError: indices out of range or repeated, or a proper shard while
            ``torch.distributed`` is not initialised.
    """

    def __init__(self, num_components: int, indices=None, group=None):
        self.num_components = int(num_components)
        self.group = group
        if indices is None:
            indices = torch.arange(self.num_components)
        indices = torch.as_tensor(list(indices) if isinstance(indices, range) else indices,
                                  dtype=torch.int64).reshape(-1).cpu()
        if indices.numel() and (int(indices.min()) < 0
                                or int(indices.max()) >= self.num_components):
            raise ValueError(f"shard indices must lie in [0, {self.num_components})")
        self.position = torch.full((self.num_components,), -1, dtype=torch.int64)
        self.position[indices] = torch.arange(indices.numel())
        if int((self.position >= 0).sum()) != indices.numel():
            raise ValueError("shard indices must be distinct")
        self.indices = indices
        self.distributed = is_distributed(group)
        if not self.distributed and indices.numel() != self.num_components:
            raise ValueError(f"this shard holds {indices.numel()} of {self.num_components} "
                             "components but torch.distributed is not initialised")
        self._devices: dict[torch.device, torch.Tensor] = {}

    @classmethod
    def contiguous(cls, num_components: int, group=None) -> Shard:
        """This rank's contiguous block of ``0..N-1`` (block sizes differ by at most one)."""
        rank = dist.get_rank(group) if is_distributed(group) else 0
        blocks = torch.arange(int(num_components)).tensor_split(world_size(group))
        return cls(num_components, blocks[rank], group)

    def validate(self) -> None:
        """Check (one all-reduce of N counters) that the ranks' shards partition ``0..N-1``."""
        if not self.distributed:
            return
        held = (self.position >= 0).to(torch.int64).to(_device(self.group))
        dist.all_reduce(held, group=self.group)
        if not bool((held == 1).all()):
            missing, twice = int((held == 0).sum()), int((held > 1).sum())
            raise ValueError(f"the shards do not partition the {self.num_components} components:"
                             f" {missing} held by no rank, {twice} by several")

    def local(self, idx: torch.Tensor) -> torch.Tensor:
        """Positions, in this rank's local data, of the drawn global ``idx`` that it holds."""
        position = self._devices.get(idx.device)
        if position is None:
            position = self._devices[idx.device] = self.position.to(idx.device)
        pos = position[idx]
        return pos[pos >= 0]

    def combine(self, local_means: Sequence[torch.Tensor | None], count: int, total: int,
                likes: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """``(1/total) Σ_ranks count·local_mean`` for each of ``local_means``: means over a batch
        of ``total`` components of which this rank evaluated ``count`` (the local means are
        ignored when ``count`` is 0). ``likes`` give shapes, dtypes and devices; one
        all-reduce per (device, dtype)."""
        if not self.distributed:
            return [m.detach().to(like, copy=True)
                    for m, like in zip(local_means, likes, strict=True)]
        parts = [torch.zeros_like(like) if count == 0 or m is None
                 else m.detach().to(like) * (count / total)
                 for m, like in zip(local_means, likes, strict=True)]
        all_reduce_sum_(parts, self.group)
        return parts


class DataParallelOptimizer:
    """Mixin of orthoplug's torch optimizers for ``torch.distributed`` (see the module docstring).

    A subclass calls :meth:`_init_data_parallel` in its constructor (and
    :meth:`_initial_replica_check` once its parameters and seed are set), :meth:`_evaluate` for
    each closure call (averaged gradients, group-mean loss) and :meth:`_end_step` at the end of
    each ``step``; :meth:`_random_state` lists its seeds and generators for the replica check.
    With ``replica_check_every`` set, the seeds and generators are also compared at
    construction, so a rank started with another seed is reported before its first step.
    """

    #: the optimizer's random stream, if it has one (compared across ranks)
    generator: torch.Generator | None = None

    def _init_data_parallel(self, process_group, replica_check_every: int | None,
                            average_gradients: bool) -> None:
        if replica_check_every is not None and (
                isinstance(replica_check_every, bool) or not isinstance(replica_check_every, int)
                or replica_check_every < 1):
            raise ValueError(f"replica_check_every must be None or an integer >= 1, "
                             f"got {replica_check_every!r}")
        self.process_group = process_group
        self.replica_check_every = replica_check_every
        self.average_gradients = bool(average_gradients)
        self._data_parallel_steps = 0

    @property
    def data_parallel(self) -> bool:
        """Whether ``torch.distributed`` is initialised with more than one rank in the group."""
        return is_distributed(self.process_group)

    def _params_with_grad(self) -> list[torch.Tensor]:
        return [p for g in self.param_groups for p in g["params"] if p.grad is not None]

    def _average_gradients(self) -> None:
        """Average this optimizer's gradients over the group (in place)."""
        if self.average_gradients and self.data_parallel:
            grads = [p.grad for p in self._params_with_grad()]
            all_reduce_sum_(grads, self.process_group)
            n = dist.get_world_size(self.process_group)
            for g in grads:
                g.div_(n)

    def _evaluate(self, closure, *args):
        """Call ``closure(*args)`` with gradients enabled and average the gradients over the
        group; return ``(loss, group-mean loss as a float)``."""
        with torch.enable_grad():
            loss = closure(*args)
        self._average_gradients()
        return loss, all_reduce_mean(loss, self.process_group)

    def _random_state(self) -> list[tuple[str, object]]:
        """Named generators (or state tensors) to compare across ranks."""
        return [] if self.generator is None else [("generator", self.generator)]

    def _replica_items(self) -> list[tuple[str, object]]:
        items = list(self._random_state())
        for gi, group in enumerate(self.param_groups):
            for pi, p in enumerate(group["params"]):
                items.append((f"parameter {pi} of group {gi} {tuple(p.shape)}", p))
                for key, value in self.state.get(p, {}).items():
                    if isinstance(value, (torch.Tensor, int, float)):
                        items.append((f"state {key!r} of parameter {pi} of group {gi}", value))
        return items

    def check_replicas(self, rtol: float = 1e-12) -> None:
        """Raise :class:`ReplicaDivergenceError` unless every rank holds the same parameters,
        optimizer state and random state (one small all-reduce; a no-op outside
        ``torch.distributed``)."""
        check_replicas(self._replica_items(), self.process_group, rtol=rtol,
                       context=f" after {self._data_parallel_steps} steps of "
                               f"{type(self).__name__}")

    def _initial_replica_check(self) -> None:
        """Compare the seeds and generators once at construction when the replica check is on
        (not the parameters: DDP may broadcast them only after the optimizer is built)."""
        if self.replica_check_every is not None and self.data_parallel:
            check_replicas(self._random_state(), self.process_group,
                           context=f" when {type(self).__name__} was built")

    def _end_step(self) -> None:
        """Count the step; run the replica check every ``replica_check_every`` steps."""
        self._data_parallel_steps += 1
        every = self.replica_check_every
        if every is not None and self.data_parallel and self._data_parallel_steps % every == 0:
            self.check_replicas()
