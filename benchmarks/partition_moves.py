"""NN-PCA row-partition moves: the cost of a move with the gains kept between moves (not a test).

:func:`orthoplug.kernels.obcd.partition_row_moves` keeps every row's gains between its moves and
updates only what a move changes (the rows of its two columns, every row's gains into them). A
call of one move builds all gains from scratch, which is what every move cost before the gains
were kept. This script times, in one process, one call of many moves against as many calls of
one move each, from the same start (the nonnegative rounding of a random point), checks that both
end at the same point bit for bit, and reports the cost per move of each and their ratio.

Instances: the NN-PCA covariances of Gaussian data (:func:`orthoplug.problems.spca.gaussian_data`)
at the paper table's sizes (500 × 300, 500 × 1000) and r ∈ {10, 40, 80}.

    OMP_NUM_THREADS=1 python benchmarks/partition_moves.py
    OMP_NUM_THREADS=1 python benchmarks/partition_moves.py --repeats 5 --out moves.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from orthoplug.kernels.obcd import partition_row_moves
from orthoplug.problems import spca
from orthoplug.solvers.splitting import nonneg_rounding

SIZES = ((500, 300, 10), (500, 300, 40), (500, 1000, 10), (500, 1000, 40), (500, 1000, 80))


def _one_call(x: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, int, float]:
    x = x.copy()
    g = a @ x
    start = time.perf_counter()
    moves = partition_row_moves(x, a, g, 10**7, 1e-12)
    return x, moves, time.perf_counter() - start


def _single_moves(x: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, int, float]:
    x = x.copy()
    g = a @ x
    moves = 0
    start = time.perf_counter()
    while partition_row_moves(x, a, g, 1, 1e-12):
        moves += 1
    return x, moves, time.perf_counter() - start


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timings per method (best kept)")
    parser.add_argument("--seed", type=int, default=0, help="data and start seed")
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for m, n, r in SIZES:
        c = spca.covariance(spca.gaussian_data(m, n, seed=args.seed))
        a = np.ascontiguousarray(0.5 * c.numpy())  # A = −s C for f = −½ tr(XᵀCX)
        gen = torch.Generator().manual_seed(args.seed)
        x0 = nonneg_rounding(torch.randn(n, r, dtype=torch.float64, generator=gen)).numpy()
        _one_call(x0, a)  # compile
        kept = [_one_call(x0, a) for _ in range(args.repeats)]
        fresh = [_single_moves(x0, a) for _ in range(args.repeats)]
        same = np.array_equal(kept[0][0], fresh[0][0]) and kept[0][1] == fresh[0][1]
        moves = kept[0][1]
        t_kept, t_fresh = min(k[2] for k in kept), min(f[2] for f in fresh)
        row = {"m": m, "n": n, "r": r, "moves": moves, "same_point": bool(same),
               "us_per_move_kept": 1e6 * t_kept / max(moves, 1),
               "us_per_move_fresh": 1e6 * t_fresh / max(moves, 1),
               "speedup": t_fresh / t_kept}
        rows.append(row)
        print(f"{m}×{n} r={r:3d}: {moves:5d} moves, same point {same}; per move "
              f"{row['us_per_move_kept']:7.1f} µs kept, {row['us_per_move_fresh']:7.1f} µs "
              f"fresh: {row['speedup']:.1f}×", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)
    return rows


if __name__ == "__main__":
    main()
