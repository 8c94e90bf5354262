r"""Pair selection for the pair-based solvers: draws, matchings, round robins and pair queues.

Every row- or column-pair method takes its pairs from here, so one seed gives one stream of
pairs in every solver and front-end that draws the same way:

* :func:`random_pairs` — independent uniform pairs ``i ≠ j`` (GS-JOBCD, OBCD, column J-Jacobi's
  random and greedy sweeps, SparseOBCD), drawn :data:`PAIR_BATCH` iterations at a time;
* :func:`random_matching` — uniformly random perfect matchings (J-JOBCD, OBCD's Jacobi working
  set, RSSM's matching pairs of blocks);
* :func:`round_robin` — all ``n(n−1)/2`` pairs as ``n − 1`` (``n`` for odd n) rounds of disjoint
  pairs (J-JOBCD's sweeps and Hessian model, RCD);
* :class:`PairQueue` — the queue of pairs and cursor of the Gauss–Seidel methods (GS-JOBCD and
  OBCD, both front-ends): random, cyclic or greedy (``candidates`` pairs per iteration).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from orthoplug._random import rand, randint, randperm
from orthoplug.oracles import host_array

__all__ = ["PAIR_BATCH", "random_pairs", "random_matching", "matching_pairs", "draw_block_pair",
           "draw_random_pairs", "cyclic_pairs", "round_robin", "round_robin_pairs",
           "max_matchings", "check_matchings", "resolve_matchings", "PairQueue"]

#: Random pairs are drawn this many iterations at a time (one generator call per batch).
PAIR_BATCH = 1024


def random_pairs(n: int, count: int, generator: torch.Generator, device=None) -> torch.Tensor:
    """``count`` independent uniformly random pairs ``(i, j)``, ``i ≠ j``, of ``range(n)``:
    (count, 2), drawn on the generator's device (two ``randint`` calls), returned on ``device``."""
    i = randint(n, (count,), generator=generator)
    j = randint(n - 1, (count,), generator=generator)
    return torch.stack((i, j + (j >= i)), 1).to(device)


def draw_random_pairs(n: int, generator: torch.Generator, device=None, count: int = PAIR_BATCH,
                      matrices: int = 1) -> torch.Tensor:
    """The next ``count`` iterations' random pairs of ``matrices`` matrices, ``(count, matrices,
    2)``: one uniform pair per matrix and iteration (:func:`random_pairs`, one call)."""
    return random_pairs(n, count * matrices, generator, device).reshape(count, matrices, 2)


def random_matching(n: int, generator: torch.Generator, device=None,
                    batch: tuple[int, ...] = (), pairs: int | None = None) -> torch.Tensor:
    """Uniformly random perfect matchings of ``range(n)``: ``(*batch, ⌊n/2⌋, 2)``; odd n: one idles.

    ``pairs`` keeps only the first pairs of each matching (``pairs=1``: one uniformly random
    pair). Drawn on the generator's device, returned on ``device``.
    """
    if not batch:
        perm = randperm(n, generator=generator)
    else:
        keys = rand(*batch, n, generator=generator)
        perm = keys.argsort(dim=-1)
    m = n // 2 if pairs is None else min(pairs, n // 2)
    return perm[..., : 2 * m].reshape(*batch, m, 2).to(device)


def matching_pairs(ell: int, generator: torch.Generator) -> list[tuple[int, int]]:
    """The ``⌊ℓ/2⌋`` disjoint pairs ``i < j`` of a uniformly random matching of ``ℓ`` indices
    (:func:`random_matching`: consecutive entries of one ``randperm``; for odd ℓ one index sits
    out) as Python ints. Each pair, taken alone, is uniform over the ℓ(ℓ−1)/2 pairs, as with
    :func:`draw_block_pair` (RSSM's two block orders)."""
    return [(min(a, b), max(a, b)) for a, b in random_matching(ell, generator).tolist()]


@functools.lru_cache(maxsize=64)
def _unordered_pairs(ell: int) -> tuple[tuple[int, int], ...]:
    return tuple((i, j) for i in range(ell) for j in range(i + 1, ell))


def draw_block_pair(ell: int, generator: torch.Generator) -> tuple[int, int]:
    """A uniformly random unordered pair ``i < j`` of ``ℓ`` indices (one of ℓ(ℓ−1)/2, one
    ``randint`` on the generator's device): RSSM's block pair, both front-ends."""
    pairs = _unordered_pairs(ell)
    return pairs[int(randint(len(pairs), (1,), generator=generator))]


@functools.lru_cache(maxsize=8)
def cyclic_pairs(n: int, device=None) -> torch.Tensor:
    """The cyclic order's sweep: all pairs ``i < j`` in lexicographic order, (C(n, 2), 2)
    (cached: do not modify it)."""
    return torch.triu_indices(n, n, 1, device=device).T.contiguous()


def round_robin(n: int, device=None) -> torch.Tensor:
    """All ``n(n−1)/2`` pairs of ``range(n)`` as rounds of disjoint pairs: (n−1, n/2, 2) for even
    n, (n, (n−1)/2, 2) for odd n (each round then leaves one index out).

    Circle method on ``m = n + (n odd)`` players; pairs with the dummy player are dropped.
    """
    m = n + (n % 2)
    k = torch.arange(m - 1, device=device)[:, None]
    i = torch.arange(1, m // 2, device=device)[None, :]
    first = torch.stack([k[:, 0], torch.full_like(k[:, 0], m - 1)], dim=-1)[:, None, :]
    rest = torch.stack([(k + i) % (m - 1), (k - i) % (m - 1)], dim=-1)
    pairs = torch.cat([first, rest], dim=1)  # (m−1, m/2, 2)
    if m != n:  # drop the pair holding the dummy player m−1 = n (it is always `first`)
        pairs = pairs[:, 1:, :]
    return pairs


def max_matchings(n: int) -> int:
    """Matchings of a round robin of ``n`` rows (every pair once): ``n − 1``, or ``n`` for odd n."""
    return n - 1 + n % 2


def check_matchings(matchings: int | str) -> None:
    """Raise ``ValueError`` unless ``matchings`` is an int >= 1 or ``"all"`` (J-JOBCD's
    option, both front-ends)."""
    if not (matchings == "all" or (isinstance(matchings, int) and not isinstance(matchings, bool)
                                   and matchings >= 1)):
        raise ValueError(f"matchings must be an int >= 1 or 'all', got {matchings!r}")


def resolve_matchings(matchings: int | str, n: int) -> int:
    """J-JOBCD's matchings per gradient for ``n`` rows: ``"all"`` is :func:`max_matchings`, an
    int itself."""
    return max_matchings(n) if matchings == "all" else int(matchings)


def round_robin_pairs(perm: np.ndarray, matchings: int) -> np.ndarray:
    """The first ``matchings`` rounds of :func:`round_robin` on the labels ``perm`` (nb, n) of the
    rows of each of nb matrices: (nb, matchings·⌊n/2⌋, 2) int64, round by round. Within a round
    the pairs are disjoint; :func:`max_matchings` rounds contain every pair exactly once."""
    nb, n = perm.shape
    if not 1 <= matchings <= max_matchings(n):
        raise ValueError(f"matchings must be in [1, {max_matchings(n)}] for n = {n}, "
                         f"got {matchings}")
    labels = round_robin(n)[:matchings].reshape(-1, 2).numpy()
    return np.ascontiguousarray(perm[:, labels].astype(np.int64))


class PairQueue:
    """The pair order of the Gauss–Seidel pair methods: a queue of pairs and a cursor.

    ``"random"`` and ``"greedy"``: uniform pairs with replacement, ``i ≠ j``, drawn
    ``draw_steps × candidates × matrices`` at a time (:func:`random_pairs`, one generator call
    per batch); ``"cyclic"``: ``(0, 1), (0, 2), …, (n−2, n−1)``, repeated (no draws). An
    iteration consumes ``candidates`` consecutive entries (greedy: the best of them is taken).
    GS-JOBCD and OBCD (both front-ends of each) read their pairs from it.

    Args:
        order: ``"random"``, ``"cyclic"`` or ``"greedy"`` (random, ``candidates`` per step).
        n: rows to pair.
        device: device of the pairs.
        candidates: pairs consumed per iteration.
        matrices: matrices paired at once (the torch optimizers' batched parameters): each
            entry of the queue is then ``(matrices, 2)``, one pair per matrix (random order
            only).
        draw_steps: iterations per random draw (default :data:`PAIR_BATCH`).
    """

    def __init__(self, order: str, n: int, device, candidates: int = 1, matrices: int = 1,
                 draw_steps: int = PAIR_BATCH):
        self.cyclic, self.n, self.device, self.candidates = order == "cyclic", n, device, candidates
        if matrices > 1 and self.cyclic:
            raise ValueError("a cyclic pair queue pairs one matrix")
        self.matrices, self.draw_steps = matrices, draw_steps
        self.rows = np.empty((0, 2), dtype=np.int64)
        self.list = None
        self.cursor = 0
        if self.cyclic:
            self._set(cyclic_pairs(n, device))

    def _set(self, pairs: torch.Tensor) -> None:
        if self.matrices > 1:
            pairs = pairs.reshape(-1, self.matrices, 2)
        self.rows = host_array(pairs.contiguous())  # NumPy on the CPU (the kernels read it)
        self.list = None  # Python ints for the per-pair path, made on first use
        self.cursor = 0

    @property
    def count(self) -> int:
        """Entries in the queue (used or not)."""
        return self.rows.shape[0]

    def available(self) -> int:
        """Iterations the queued entries still serve (:meth:`ensure` first)."""
        return (self.count - self.cursor) // self.candidates

    def ensure(self, generator: torch.Generator) -> None:
        """Make at least ``candidates`` entries available: past the end, random pairs are drawn
        anew and cyclic ones start over."""
        if self.cursor + self.candidates > self.count:
            if self.cyclic:
                self.cursor = 0
            else:
                self._set(random_pairs(self.n, self.draw_steps * self.candidates * self.matrices,
                                       generator))  # on the CPU, where the queue keeps them

    def block(self, steps: int):
        """The entries of the next ``steps`` iterations (at most :meth:`available`), without
        moving the cursor (a compiled loop reads them; :meth:`advance` by what it took)."""
        return self.rows[self.cursor: self.cursor + steps * self.candidates]

    def advance(self, steps: int) -> None:
        """Move the cursor past ``steps`` iterations' entries."""
        self.cursor += steps * self.candidates

    def next_rows(self):
        """The next entry (NumPy or tensor: ``(2,)``, or ``(matrices, 2)``)."""
        k = self.cursor
        self.cursor = k + 1
        return self.rows[k]

    def take(self) -> tuple[Any, int, int]:
        """The next pair of one matrix: its index row and ``(i, j)`` as ints."""
        if self.list is None:
            self.list = self.rows.tolist()
        i, j = self.list[self.cursor]
        return self.next_rows(), i, j

    def state_dict(self) -> dict:
        """The queued pairs and the cursor."""
        return {"pairs": torch.as_tensor(self.rows).clone(), "cursor": self.cursor}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""
        self._set(state["pairs"].to(self.device))
        self.cursor = int(state["cursor"])
