"""Pair selection (solvers/pairs.py): the queue serves exactly the draws of random_pairs, in
batches of PAIR_BATCH iterations, or the lexicographic sweep; every iteration gets distinct rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from orthoplug.solvers.pairs import (
    PAIR_BATCH,
    PairQueue,
    cyclic_pairs,
    draw_block_pair,
    matching_pairs,
    random_pairs,
)


@pytest.mark.parametrize(("order", "candidates", "draw_steps"),
                         [("random", 1, PAIR_BATCH), ("greedy", 3, PAIR_BATCH),
                          ("greedy", 8, PAIR_BATCH // 8)])
def test_random_queue_serves_the_batched_draws(order, candidates, draw_steps):
    n, steps = 9, 2 * draw_steps + 5
    queue = PairQueue(order, n, "cpu", candidates, draw_steps=draw_steps)
    gen, ref_gen = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    served = []
    while len(served) < steps * candidates:
        queue.ensure(gen)
        take = min(queue.available(), 7)
        served += queue.block(take).tolist()
        queue.advance(take)
    ref = []
    while len(ref) < len(served):
        ref += random_pairs(n, draw_steps * candidates, ref_gen).tolist()
    assert served == ref[:len(served)]
    assert all(i != j and 0 <= i < n and 0 <= j < n for i, j in served)


def test_cyclic_queue_repeats_the_sweep_and_take_matches_next_rows():
    n = 5
    queue = PairQueue("cyclic", n, "cpu")
    sweep = cyclic_pairs(n).tolist()
    assert sweep == [[i, j] for i in range(n) for j in range(i + 1, n)]
    gen = torch.Generator().manual_seed(0)
    seen = []
    for _ in range(2 * len(sweep) + 3):
        queue.ensure(gen)
        rows, i, j = queue.take()
        assert rows.tolist() == [i, j]
        seen.append([i, j])
    assert seen == (sweep * 3)[:len(seen)]


def test_block_pair_draws_and_matchings_are_uniform_over_pairs():
    ell, draws = 5, 4000
    gen = torch.Generator().manual_seed(1)
    counts = np.zeros((ell, ell))
    for _ in range(draws):
        i, j = draw_block_pair(ell, gen)
        counts[i, j] += 1
    m_counts = np.zeros((ell, ell))
    for _ in range(draws // 2):
        pairs = matching_pairs(ell, gen)
        assert len({b for p in pairs for b in p}) == 2 * len(pairs) == 4
        for i, j in pairs:
            assert i < j
            m_counts[i, j] += 1
    pairs_total = ell * (ell - 1) // 2
    iu = np.triu_indices(ell, 1)
    assert np.all(np.abs(counts[iu] / draws - 1 / pairs_total) < 0.025)
    assert np.all(np.abs(m_counts[iu] / m_counts.sum() - 1 / pairs_total) < 0.025)
