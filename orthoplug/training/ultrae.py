r"""UltraE: ultrahyperbolic knowledge-graph embedding with J-orthogonal relations.

Model (JOBCD papers, App. F.2, after Xiong et al., KDD 2022). Entities are points
``e ∈ U^{p,q}_α = {x ∈ ℝ^{p+q} : ⟨x, x⟩_q = −α²}`` with ``⟨x, y⟩_q = xᵀJy``,
``J = diag(I_p, −I_q)``; relation ``r`` acts by a J-orthogonal matrix ``R_r`` (``R_rᵀJR_r = J``),
which maps ``U^{p,q}_α`` onto itself isometrically. A triple is scored by

    s(h, r, t) = σ(ℓ(h, r, t)),    ℓ(h, r, t) = −d_α²(R_r e_h, e_t) + b_h + b_t + δ,

with the ultrahyperbolic distance ``d_α``
(:func:`orthoplug.problems.hspp.ultrahyperbolic_distance`) and the global margin ``δ``.
For a minibatch ``B`` of positive triples, each with ``k`` negatives made by corrupting it,
the loss is::

    L = −(1/|B|) Σ_{(h,r,t)∈B} [ log s(h, r, t) + Σ_{(h',r,t')} log(1 − s(h', r, t')) ]

(summed, not averaged, over the ``k`` negatives, as in the paper). Paper settings, our
defaults: ``n = p + q = 36``, ``p = q = 18``, ``δ = 5``, ``α = 1``, ``k = 50``.

Parametrisation and optimisers.

* Entities are free vectors ``w ∈ ℝⁿ`` mapped by ``e = φ(w)``
  (:func:`orthoplug.problems.hspp.phi`), which lands on ``U^{p,q}_α`` exactly, so the entity
  table and the biases are ordinary Euclidean parameters trained with ``torch.optim.Adam``.
* All relation matrices form one batched :class:`geoopt.ManifoldParameter` of shape
  ``(n_r, n, n)`` on :class:`orthoplug.adapters.geoopt.JOrthogonal`, started at random
  J-orthogonal matrices (condition number ``relation_cond``; 1 gives a random element of
  ``O(p) × O(q)``) and trained with J-JOBCD / GS-JOBCD (every matrix updated in each step,
  feasible by construction) or, for comparison, geoopt's ``RiemannianSGD`` / ``RiemannianAdam``.
* Per minibatch the relation optimiser's ``step(closure)`` runs first; the entity optimiser
  then steps with the gradient of the last closure evaluation. For the JOBCD optimisers with
  adaptive σ that evaluation is at the accepted new relations (a Gauss–Seidel alternation);
  for the Riemannian optimisers it is at the old point (a joint step).

Choices where the paper is ambiguous or inconsistent (documented here, not in the paper):

1. The paper declares ``b ∈ ℝ^{n_r}`` with ``b_h = b(r)`` but writes ``b_h + b_t``; we use one
   bias per *entity* (``b ∈ ℝ^{n_e}``), which is what ``b_h + b_t`` needs.
2. "Corrupting (h, r, t)" is unspecified: each negative replaces the tail (probability ½) or the
   head by a uniformly drawn entity; accidental true triples are not filtered out.
3. The paper trains entities and biases with "ADMM" at lr 5e-4, almost certainly Adam; we use
   Adam and expose the learning rate (default 5e-2, because 5e-4 needs far more epochs than a
   short run allows). Its initialisation is unspecified: ours is ``w ~ N(0, init_scale²)``,
   zero biases, random relations. We do not start the relations at the identity: there
   ``R_r e_h = e_h`` is at distance 0 from the head itself, so every query ranks its own head
   first, and on Nations training did not move the relations far enough to undo this (test
   Hits@1 stayed near 0).
4. ``d_α`` uses ``|⟨x, y⟩_q|``, so ``x`` and ``−x`` are at distance 0 (a pseudo-distance, as in
   the paper). ``d_α²`` has finite slope at ``u = 1``, but the clamped ``arccosh``/``arccos``
   branches are used as in HSPP.
5. ``R_r e_h`` is read with ``e_h`` as a column vector (then ``R_rᵀJR_r = J`` is exactly the
   isometry property); the paper writes ``E_h`` as a row of ``E``.

Every random choice (initialisation, shuffling, negatives, the JOBCD matchings) comes from
seeded ``torch.Generator``\ s, so a run is reproducible for a given seed unless ``time_limit``
cuts it.

The negatives of minibatch ``s`` are drawn by :func:`draw_negatives`: the minibatch is cut into
fixed chunks of :data:`NEGATIVE_CHUNK` positives, and each chunk's negatives come from a generator
seeded by ``(seed, s, chunk)``, so they do not depend on who draws them.

Data parallel. Under ``torch.distributed`` (e.g. ``torchrun --nproc_per_node=2``, see
``examples/distributed_ultrae.py``) :func:`train_ultrae` trains one replica per rank: every rank
draws the same shuffles (same seed), takes its contiguous share of each minibatch
(:func:`rank_share`) and draws only the negatives of the chunks that overlap its share (the same
numbers one process draws for those positives), and the model is wrapped in
``DistributedDataParallel``. Each rank's loss is scaled by ``world · (its share) / (batch
size)``, so DDP's equal-weight gradient average and the optimizers' group-mean loss are exactly
the minibatch's, also for shares of unequal size: a run equals the one-process run on the whole
minibatches, up to rounding.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import geoopt
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from orthoplug.adapters.geoopt import GSJOBCD, JJOBCD, JOrthogonal
from orthoplug.distributed import (
    all_reduce_any,
    all_reduce_mean,
    all_reduce_sum_,
    is_distributed,
)
from orthoplug.problems.hspp import phi, ultrahyperbolic_distance
from orthoplug.problems.kg import KGData, evaluate_ranking
from orthoplug.solvers.pairs import max_matchings
from orthoplug.solvers.sigma_rules import SigmaBacktracking

__all__ = ["UltraE", "UltraEResult", "train_ultrae", "corrupt", "draw_negatives", "rank_share",
           "RELATION_OPTIMIZERS", "NEGATIVE_CHUNK", "LOSS_CHUNK_ENTRIES", "DEFAULT_SIGMA0",
           "DEFAULT_PRECONDITION", "DEFAULT_MATCHINGS", "DEFAULT_RELATION_LR",
           "RELATION_SCHEDULES", "SCHEDULE_FLOOR"]

RELATION_OPTIMIZERS = ("JJOBCD", "GSJOBCD", "RiemannianSGD", "RiemannianAdam")

#: Entries of the largest tensor :meth:`UltraE.loss` builds at once (16 MiB in float64): it
#: scores the triples of that many / (n·max(k, n)) positives at a time.
LOSS_CHUNK_ENTRIES = 2**21

#: Initial σ of the JOBCD relation optimisers' σ backtracking (:func:`train_ultrae`). From the
#: optimisers' own default 1, σ never left 1 on Nations, Kinships and UMLS (no rejected step in
#: 15 epochs), so the relations moved slowly; a σ that also shrinks after accepted steps passes
#: the minibatch check at σ ≈ 0.01–0.03, where the model collapses (Kinships: validation MRR
#: 0.29 → 0.05). See the UltraE section of docs/results.md for the measurements behind 0.1.
DEFAULT_SIGMA0 = 0.1

#: :func:`train_ultrae`'s J-JOBCD: Adam's direction as the linear term of the exact pair steps
#: (:class:`~orthoplug.adapters.geoopt.JJOBCD` ``precondition="adam"``, σ = 1/lr, no descent
#: check), 16 rounds of a random round robin per gradient, lr :data:`DEFAULT_RELATION_LR`
#: ``["JJOBCD"]``. At equal epochs its mean test MRR over three seeds was at least the best
#: geoopt-RAdam's on Nations, Kinships and UMLS (docs/results.md).
#: ``precondition=None`` gives the unpreconditioned J-JOBCD (σ backtracking from ``sigma0``).
DEFAULT_PRECONDITION = "adam"
#: Rounds of a random round robin per gradient of :func:`train_ultrae`'s preconditioned J-JOBCD.
DEFAULT_MATCHINGS = 16
#: ``relation_lr`` of :func:`train_ultrae` when not given: the geoopt optimisers' and the
#: preconditioned J-JOBCD's (σ = 1/lr).
DEFAULT_RELATION_LR = {"RiemannianSGD": 5e-2, "RiemannianAdam": 5e-2, "JJOBCD": 1e-2}

#: Schedules of the relation optimiser's step size (:func:`train_ultrae` ``relation_schedule``).
RELATION_SCHEDULES = (None, "cosine")
#: Smallest fraction of the initial step size that a ``relation_schedule`` reaches (at the end).
SCHEDULE_FLOOR = 0.01

#: Positives per chunk of a minibatch whose negatives :func:`draw_negatives` draws from one
#: generator. Fixed, so that the negatives do not depend on the number of ranks.
NEGATIVE_CHUNK = 256


class UltraE(nn.Module):
    r"""UltraE scoring model (see the module docstring).

    Args:
        num_entities, num_relations (int): Sizes of the knowledge graph.
        dim (int): Embedding dimension ``n = p + q``.
        p (int): Number of ``+1`` entries of ``J`` (``1 ≤ p < dim``; the ``q = dim − p ≥ 1``
            negative directions are needed by ``φ``).
        alpha (float): Curvature radius ``α > 0``.
        margin (float): Global margin ``δ``.
        init_scale (float): Standard deviation of the free entity vectors at initialisation.
        relation_cond (float): 2-norm condition number (≥ 1) of the random initial relation
            matrices.
        clamp (float): Clamp of ``u = |⟨x, y⟩_q|/α²`` around 1 in the distance.
        dtype (torch.dtype): Parameter dtype.
        generator (torch.Generator, optional): Source of the initial entity vectors and relation
            matrices.
    """

    def __init__(self, num_entities: int, num_relations: int, dim: int = 36, p: int = 18, *,
                 alpha: float = 1.0, margin: float = 5.0, init_scale: float = 0.1,
                 relation_cond: float = 1.0, clamp: float = 1e-9,
                 dtype: torch.dtype = torch.float64,
                 generator: torch.Generator | None = None):
        super().__init__()
        if num_entities < 2 or num_relations < 1:
            raise ValueError(f"need >= 2 entities and >= 1 relation, got {num_entities} and "
                             f"{num_relations}")
        if not 1 <= p < dim:
            raise ValueError(f"need 1 <= p < dim (at least one negative direction), "
                             f"got p={p}, dim={dim}")
        if not alpha > 0 or not init_scale > 0:
            raise ValueError(f"alpha and init_scale must be > 0, got {alpha} and {init_scale}")
        self.alpha, self.margin, self.clamp = float(alpha), float(margin), float(clamp)
        self.manifold = JOrthogonal(dim, p)
        self.register_buffer("jvec", self.manifold.geometry.j.like(torch.zeros(dim, dtype=dtype)))
        w = torch.randn(num_entities, dim, generator=generator, dtype=dtype) * init_scale
        self.entity = nn.Parameter(w)
        self.bias = nn.Parameter(torch.zeros(num_entities, dtype=dtype))
        rel = self.manifold.geometry.random_point((num_relations,), cond=relation_cond,
                                                  dtype=dtype, generator=generator)
        self.relation = geoopt.ManifoldParameter(rel, manifold=self.manifold)

    @property
    def num_entities(self) -> int:
        """Number of entities ``n_e``."""
        return self.entity.shape[0]

    @property
    def num_relations(self) -> int:
        """Number of relations ``n_r``."""
        return self.relation.shape[0]

    def embeddings(self) -> torch.Tensor:
        """Entity points ``φ(w)`` on ``U^{p,q}_α``, shape ``(n_e, n)``."""
        return phi(self.entity, self.jvec, self.alpha)

    def score(self, h: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Logits ``ℓ(h, r, t) = −d_α²(R_r e_h, e_t) + b_h + b_t + δ`` (broadcasting ids).

        ``h``, ``r`` and ``t`` are integer tensors that broadcast to a common shape ``S``. When
        ``r`` has a trailing dimension of size 1 (one relation per row, e.g. ``(B, 1)`` against
        candidates ``(1, E)`` or negatives ``(B, k)``), ``R_r`` is gathered once per row, so the
        memory is ``O(|S| n)`` and not ``O(|S| n²)``.
        """
        return self._score(self.embeddings(), h, r, t)

    def _score(self, e: torch.Tensor, h: torch.Tensor, r: torch.Tensor,
               t: torch.Tensor) -> torch.Tensor:
        """:meth:`score` with the entity points ``e`` computed by the caller."""
        shape = torch.broadcast_shapes(h.shape, r.shape, t.shape)
        h, r, t = (x[(None,) * (len(shape) - x.ndim)] for x in (h, r, t))
        if len(shape) > 0 and r.ndim == len(shape) and r.shape[-1] == 1:
            rows = r[..., 0]
        else:  # one relation per element: make every element its own row
            h, t = h.expand(shape).unsqueeze(-1), t.expand(shape).unsqueeze(-1)
            rows = r.expand(shape)
        for name, idx, size in (("h", h, self.num_entities), ("t", t, self.num_entities),
                                ("r", rows, self.num_relations)):
            if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= size):
                raise IndexError(f"{name} ids must lie in [0, {size})")
        moved = e[h] @ self.relation[rows].mT  # rows of R_r e_h
        inner = (moved * self.jvec * e[t]).sum(-1)
        dist = ultrahyperbolic_distance(inner, self.alpha, self.clamp)
        logits = -dist * dist + self.bias[h] + self.bias[t] + self.margin
        return logits.reshape(shape)

    def loss(self, positives: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
        """The UltraE loss of positives ``(B, 3)`` with negatives ``(B, k, 3)`` (same relation).

        The triples are scored in chunks of positives whose ``(rows, n)`` and ``(positives, n,
        n)`` tensors have at most :data:`LOSS_CHUNK_ENTRIES` entries, so no intermediate tensor
        grows with the minibatch (the values are those of one pass over all of them; φ of the
        entity table is computed once).
        """
        if positives.ndim != 2 or positives.shape[1] != 3:
            raise ValueError(f"positives must have shape (B, 3), got {tuple(positives.shape)}")
        if negatives.ndim != 3 or negatives.shape[0] != positives.shape[0] \
                or negatives.shape[2] != 3:
            raise ValueError(f"negatives must have shape ({positives.shape[0]}, k, 3), "
                             f"got {tuple(negatives.shape)}")
        e = self.embeddings()
        dim = e.shape[1]
        size = max(1, LOSS_CHUNK_ENTRIES // (dim * max(negatives.shape[1], dim)))
        terms = [F.softplus(-self._score(e, p[:, 0], p[:, 1], p[:, 2]))
                 + F.softplus(self._score(e, n[..., 0], p[:, 1:2], n[..., 2])).sum(-1)
                 for p, n in zip(positives.split(size), negatives.split(size), strict=True)]
        return torch.cat(terms).mean()

    @torch.no_grad()
    def violation(self) -> float:
        """``max_r ‖R_rᵀJR_r − J‖_F`` over all relation matrices."""
        err = self.manifold.geometry.gram_error(self.relation.detach())
        return float(torch.linalg.matrix_norm(err).max())


def corrupt(triples: torch.Tensor, k: int, num_entities: int,
            generator: torch.Generator) -> torch.Tensor:
    """``k`` negatives per triple ``(B, 3) → (B, k, 3)``: head or tail (½ each) replaced by a
    uniformly drawn entity; the relation is kept."""
    b = triples.shape[0]
    rand = torch.randint(0, num_entities, (b, k), generator=generator)
    tail = torch.rand(b, k, generator=generator) < 0.5
    h, r, t = triples[:, :, None].unbind(1)  # (b, 1) each
    return torch.stack([torch.where(tail, h, rand), r.expand(b, k), torch.where(tail, rand, t)],
                       dim=-1)


def draw_negatives(positives: torch.Tensor, k: int, num_entities: int, seed: int, step: int,
                   rows: slice | None = None, chunk: int = NEGATIVE_CHUNK) -> torch.Tensor:
    """The negatives ``(len(rows), k, 3)`` of the positives ``positives[rows]`` of minibatch
    number ``step``.

    The minibatch ``positives`` ``(B, 3)`` is cut into chunks of ``chunk`` positives; chunk
    ``c`` gets ``corrupt(positives[c·chunk:(c+1)·chunk], k, num_entities, g)`` with ``g`` seeded
    by ``(seed, step, c)``. Only the chunks that overlap ``rows`` are drawn, so a rank drawing
    the negatives of its share gets exactly the numbers that one process drawing the whole
    minibatch gets for those positives, with work proportional to the share (plus at most the
    rest of two chunks).

    Args:
        positives: The whole minibatch ``(B, 3)``.
        k: Negatives per positive.
        num_entities: Entities to draw from.
        seed: Seed of the run.
        step: Number of the minibatch in the run (0, 1, ...).
        rows: Contiguous rows of ``positives`` (step 1); ``None``: all of them.
        chunk: Positives per generator.

    Returns:
        torch.Tensor: ``(len(rows), k, 3)``, the relation of each positive kept.

    Raises:
        ValueError: ``rows`` with a step other than 1, or ``chunk`` < 1.
    """
    b = positives.shape[0]
    start, stop, stride = (rows or slice(None)).indices(b)
    if stride != 1:
        raise ValueError(f"rows must be a contiguous slice (step 1), got step {stride}")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    parts = [positives.new_empty((0, k, 3))]
    for c in range(start // chunk, -(-stop // chunk)):
        lo = c * chunk
        state = np.random.SeedSequence([seed % 2**64, step, c]).generate_state(2, np.uint32)
        gen = torch.Generator().manual_seed(int(state[0]) | int(state[1]) << 32)
        neg = corrupt(positives[lo:lo + chunk], k, num_entities, gen)  # the whole chunk
        parts.append(neg[max(start - lo, 0):stop - lo])
    return torch.cat(parts)


def rank_share(batch_size: int, group=None) -> slice:
    """This rank's contiguous share of a minibatch of ``batch_size`` (sizes differ by at most
    one; the whole batch outside ``torch.distributed``)."""
    if not is_distributed(group):
        return slice(0, batch_size)
    import torch.distributed as dist

    world, rank = dist.get_world_size(group), dist.get_rank(group)
    base, extra = divmod(batch_size, world)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (rank < extra))


class _ScaledLoss(nn.Module):
    """``forward(pos, neg, weight) = weight · model.loss(pos, neg)`` (a module for DDP)."""

    def __init__(self, model: UltraE):
        super().__init__()
        self.model = model

    def forward(self, positives, negatives, weight: float):
        return weight * self.model.loss(positives, negatives)


@dataclass
class UltraEResult:
    """Outcome of :func:`train_ultrae`.

    Attributes:
        history (list of (float, float, float)): ``(training seconds, mean minibatch loss of the
            epoch, validation MRR)`` after every evaluated epoch (evaluation time is not counted in
            the seconds); the first entry is the initial model (loss ``nan``).
        test (dict): Filtered test metrics of the final model (``mrr``, ``mean_rank``,
            ``hits@1/3/10``).
        violation (float): ``max_r ‖R_rᵀJR_r − J‖_F`` of the final relation matrices.
        epochs (int): Epochs completed.
        steps (int): Minibatch steps taken.
        train_seconds (float): Training time (without evaluation).
        model (UltraE): The trained model.
    """

    history: list[tuple[float, float, float]]
    test: dict[str, float]
    violation: float
    epochs: int
    steps: int
    train_seconds: float
    model: UltraE = field(repr=False)


def _schedule(optimizer, schedule: str | None) -> Callable[[float], None]:
    """``scale(progress)``: sets the step size ``lr`` of every group of ``optimizer`` (geoopt's,
    or a fixed-σ JOBCD's: ``σ_eff = σ/lr``) to its initial value times the schedule's factor at
    ``progress`` ∈ [0, 1] (the fraction of the run done)."""
    if schedule is None:
        return lambda progress: None
    if isinstance(optimizer, (GSJOBCD, JJOBCD)) and optimizer.sigma_rule.checked:
        raise ValueError(f"relation_schedule={schedule!r} needs a fixed step: a relation_lr "
                         "(geoopt, preconditioned J-JOBCD) or a fixed sigma (JOBCD)")
    key = "lr"
    initial = [g[key] for g in optimizer.param_groups]

    def scale(progress: float) -> None:
        factor = SCHEDULE_FLOOR + (1.0 - SCHEDULE_FLOOR) * 0.5 * (
            1.0 + math.cos(math.pi * min(max(progress, 0.0), 1.0)))
        for group, value in zip(optimizer.param_groups, initial, strict=True):
            group[key] = value * factor

    return scale


def _relation_optimizer(name: str, model: UltraE, lr: float | None, sigma: float | None,
                        sigma0: float, seed: int, replica_check_every: int | None,
                        precondition: str | None, matchings: int | str,
                        weight_decay: float = 0.0):
    # under DDP the gradients arrive averaged: the optimizer need not average them again
    options = dict(sigma_rule=SigmaBacktracking(sigma0) if sigma is None else sigma, seed=seed,
                   replica_check_every=replica_check_every, average_gradients=False)
    if name == "JJOBCD":
        if precondition is not None and sigma is None:
            options["sigma_rule"] = 1.0 / lr
        if precondition is None:
            matchings = 1
        elif isinstance(matchings, int):  # at most a whole round robin (small dims)
            matchings = min(matchings, max_matchings(model.relation.shape[-1]))
        return JJOBCD([model.relation], precondition=precondition, matchings=matchings,
                      weight_decay=weight_decay, **options)
    if weight_decay:
        raise ValueError(f"relation_weight_decay is an option of the preconditioned J-JOBCD, "
                         f"not of {name}")
    if name == "GSJOBCD":
        return GSJOBCD([model.relation], **options)
    if name == "RiemannianSGD":
        return geoopt.optim.RiemannianSGD([model.relation], lr=lr)
    return geoopt.optim.RiemannianAdam([model.relation], lr=lr)


def train_ultrae(data: KGData, *, relation_optimizer: str = "JJOBCD", epochs: int = 50,
                 batch_size: int = 128, num_negatives: int = 50, entity_lr: float = 5e-2,
                 relation_lr: float | None = None, sigma: float | None = None,
                 sigma0: float = DEFAULT_SIGMA0, dim: int = 36, p: int = 18,
                 alpha: float = 1.0, margin: float = 5.0,
                 init_scale: float = 0.1, relation_cond: float = 1.0,
                 time_limit: float | None = None, seed: int = 0,
                 eval_every: int = 1, dtype: torch.dtype = torch.float64,
                 replica_check_every: int | None = None,
                 evaluate: bool = True, precondition: str | None = DEFAULT_PRECONDITION,
                 matchings: int | str = DEFAULT_MATCHINGS,
                 relation_schedule: str | None = None, relation_weight_decay: float = 0.0,
                 callback: Callable[[int, UltraE], None] | None = None) -> UltraEResult:
    """Train UltraE on ``data.train``; validate on ``data.valid``; report ``data.test``.

    Args:
        data (KGData): The knowledge graph (e.g. from :func:`~orthoplug.problems.kg.load_kg`).
        relation_optimizer: Optimiser of the J-orthogonal relation matrices: ``"JJOBCD"``,
            ``"GSJOBCD"``, ``"RiemannianSGD"`` or ``"RiemannianAdam"``.
        epochs (int): Passes over the shuffled training triples.
        batch_size (int): Positive triples per minibatch.
        num_negatives (int): ``k``, negatives per positive.
        entity_lr (float): Adam learning rate of entity vectors and biases.
        relation_lr (float, optional): Learning rate of ``RiemannianSGD`` / ``RiemannianAdam``
            and of the preconditioned J-JOBCD (``σ = 1/relation_lr`` unless ``sigma`` is given);
            unused by GS-JOBCD and the unpreconditioned J-JOBCD. ``None``:
            :data:`DEFAULT_RELATION_LR` of the optimiser.
        sigma (float, optional): Fixed σ of the JOBCD optimisers; ``None`` (default):
            ``1/relation_lr`` for the preconditioned J-JOBCD, else their σ backtracking with a
            descent check (one extra loss evaluation per step).
        sigma0 (float): Initial σ of that backtracking (doubled on each rejected step; GS-JOBCD
            and J-JOBCD with ``precondition=None``).
        dim, p, alpha, margin (int, int, float, float): ``n``, ``p``, ``α``, ``δ`` of the model.
        init_scale (float): Standard deviation of the initial free entity vectors.
        relation_cond (float): Condition number (≥ 1) of the random initial relation matrices.
        time_limit (float, optional): Stop after the first minibatch that ends past this many
            training seconds.
        seed (int): Seed of initialisation, shuffling, negatives and JOBCD's random pairs.
        eval_every (int): Validate every this many epochs (and after the last one).
        dtype (torch.dtype): Parameter dtype (float64 keeps the relation violation near 1e-13).
        replica_check_every (int, optional): Under ``torch.distributed``: compare the JOBCD
            optimizer's replicas across ranks every this many steps
            (:mod:`orthoplug.distributed`).
        evaluate (bool): ``False`` skips the validation and test rankings (MRRs in the history are
            ``nan``, the test metrics empty): for timing runs, where they would dominate the wall
            time.
        precondition (str, optional): J-JOBCD only: ``"adam"`` (default,
            :data:`DEFAULT_PRECONDITION`) or ``"rms"``, the preconditioned linear term of
            :class:`~orthoplug.adapters.geoopt.JJOBCD` (a fixed σ, no descent check); ``None``:
            the unpreconditioned J-JOBCD (one matching per step, σ backtracking unless ``sigma``).
        matchings (int or str): The preconditioned J-JOBCD's rounds of a random round robin per
            gradient (at most a whole round robin, ``dim − 1``), or ``"all"`` (default
            :data:`DEFAULT_MATCHINGS`; ignored without ``precondition``).
        relation_schedule (str, optional): ``"cosine"``: the relation optimiser's step size
            (``relation_lr``; ``1/sigma`` of a fixed-σ JOBCD) follows ``f + (1 − f)(1 +
            cos πt)/2`` of its initial value before every minibatch, ``f`` =
            :data:`SCHEDULE_FLOOR` and ``t`` the fraction of the run done: of the ``epochs``'
            minibatches, or of ``time_limit`` when that is reached first (the larger). ``None``
            (default): a constant step.
        relation_weight_decay (float): The preconditioned J-JOBCD's decoupled decay λ of
            ``‖R_r‖_F²/2`` (:class:`~orthoplug.adapters.geoopt.JJOBCD` ``weight_decay``: a pull
            of the relations towards ``O(p) × O(q)``).
        callback (callable, optional): ``callback(epoch, model)`` after every evaluated epoch,
            outside the training seconds (e.g. to record the test MRR along the way).

    Returns:
        UltraEResult
    """
    if relation_optimizer not in RELATION_OPTIMIZERS:
        raise ValueError(f"unknown relation_optimizer {relation_optimizer!r}; choose from "
                         f"{RELATION_OPTIMIZERS}")
    if not isinstance(data, KGData):
        raise TypeError(f"data must be a KGData, got {type(data).__name__}")
    if data.train.shape[0] == 0 or data.valid.shape[0] == 0 or data.test.shape[0] == 0:
        raise ValueError("train, valid and test must each hold at least one triple")
    for name, value in (("epochs", epochs), ("batch_size", batch_size),
                        ("num_negatives", num_negatives), ("eval_every", eval_every)):
        if int(value) < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if relation_lr is None:
        relation_lr = DEFAULT_RELATION_LR.get(relation_optimizer)  # None: GS-JOBCD, unused
    if not entity_lr > 0 or (relation_lr is not None and not relation_lr > 0):
        raise ValueError(f"learning rates must be > 0, got {entity_lr} and {relation_lr}")
    if not sigma0 > 0:
        raise ValueError(f"sigma0 must be > 0, got {sigma0}")
    if relation_schedule not in RELATION_SCHEDULES:
        raise ValueError(f"relation_schedule must be one of {RELATION_SCHEDULES}, got "
                         f"{relation_schedule!r}")

    gen = torch.Generator().manual_seed(seed)
    model = UltraE(data.num_entities, data.num_relations, dim, p, alpha=alpha, margin=margin,
                   init_scale=init_scale, relation_cond=relation_cond, dtype=dtype,
                   generator=gen)
    parallel = is_distributed()
    if parallel:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        world = dist.get_world_size()
        # the only buffer (J's diagonal) never changes: no broadcast at every forward (the
        # option was renamed in torch 2.13)
        options = inspect.signature(DistributedDataParallel.__init__).parameters
        no_sync = "forward_sync_buffers" if "forward_sync_buffers" in options else \
            "broadcast_buffers"
        loss_module = DistributedDataParallel(_ScaledLoss(model), **{no_sync: False})
    else:
        world, loss_module = 1, _ScaledLoss(model)
    rel_opt = _relation_optimizer(relation_optimizer, model, relation_lr, sigma, sigma0, seed,
                                  replica_check_every, precondition, matchings,
                                  relation_weight_decay)
    ent_opt = torch.optim.Adam([model.entity, model.bias], lr=entity_lr)
    schedule = _schedule(rel_opt, relation_schedule)
    total_steps = epochs * -(-data.train.shape[0] // batch_size)
    known = data.all_triples

    def validate() -> float:
        if not evaluate:
            return float("nan")
        return evaluate_ranking(model.score, data.valid, known,
                                num_entities=data.num_entities)["mrr"]

    history = [(0.0, float("nan"), validate())]
    elapsed, done, steps = 0.0, 0, 0
    for epoch in range(1, epochs + 1):
        start = time.perf_counter()
        losses = []
        perm = torch.randperm(data.train.shape[0], generator=gen)
        for idx in perm.split(batch_size):
            batch = data.train[idx]
            share = rank_share(len(idx))
            pos = batch[share]
            neg = draw_negatives(batch, num_negatives, data.num_entities, seed, steps, share)
            # the rank's mean, weighted so that the group's mean is the minibatch's
            weight = world * pos.shape[0] / len(idx)

            def closure(pos=pos, neg=neg, weight=weight):
                model.zero_grad(set_to_none=True)
                value = loss_module(pos, neg, weight)
                value.backward()
                return value

            if relation_schedule is not None:
                progress = steps / total_steps
                if time_limit is not None:
                    spent = (elapsed + time.perf_counter() - start) / time_limit
                    # the same step size on every rank
                    progress = max(progress, all_reduce_mean(spent) if parallel else spent)
                schedule(progress)
            losses.append(rel_opt.step(closure).detach())
            ent_opt.step()
            steps += 1
            late = time_limit is not None and elapsed + time.perf_counter() - start > time_limit
            if parallel and time_limit is not None:
                late = all_reduce_any(late)  # every rank stops after the same step
            if late:
                break
        elapsed += time.perf_counter() - start
        done = epoch
        stop = time_limit is not None and elapsed > time_limit
        if parallel and time_limit is not None:
            stop = all_reduce_any(stop)
        if epoch % eval_every == 0 or epoch == epochs or stop:
            epoch_losses = torch.stack(losses).to(torch.float64)
            all_reduce_sum_([epoch_losses])  # ranks' weighted means → the minibatches' means
            mean = sum(epoch_losses.tolist()) / len(losses) / world
            history.append((elapsed, mean, validate()))
            if callback is not None:
                callback(epoch, model)
        if stop:
            break
    test = (evaluate_ranking(model.score, data.test, known, num_entities=data.num_entities)
            if evaluate else {})
    return UltraEResult(history, test, model.violation(), done, steps, elapsed, model)
