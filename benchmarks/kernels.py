"""Microseconds per step of the compiled block-coordinate kernels, beside their floors.

Each row is measured in this one process, single-threaded, next to two yardsticks of the same
shape: one in-place BLAS rank-1 update ``A += x yᵀ`` (``scipy.linalg.blas.dger``), the
unavoidable memory traffic of a row step on ``Y = CX``, and one full-gradient step (what the same
iteration costs without the fast path). "floor" is the bytes a step must move divided by the
bandwidth measured here (a large in-place array update), so ``µs ÷ floor`` says how far a kernel
is from the memory floor.

    python benchmarks/kernels.py                     # every family
    python benchmarks/kernels.py --family jobcd --out kernels.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import numpy as np
from scipy.linalg.blas import dger


def best_us(fn: Callable[[], object], *, repeat: int = 5, min_time: float = 0.05) -> float:
    """Best-of-``repeat`` µs per call of ``fn``, each repeat running at least ``min_time`` s."""
    fn()
    calls = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if time.perf_counter() - t0 >= min_time:
            break
        calls *= 2
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6


def dger_us(n: int, k: int, rng: np.random.Generator) -> float:
    """µs of one in-place ``dger`` on an n×k float64 array (Fortran order: no copy)."""
    a = np.asfortranarray(rng.standard_normal((n, k)))
    x, y = rng.standard_normal(n), 1e-9 * rng.standard_normal(k)
    return best_us(lambda: dger(1.0, x, y, a=a, overwrite_a=1))


def bandwidth_gbs(rng: np.random.Generator, mib: int = 64) -> float:
    """Read + write bandwidth (GB/s) of an in-place ``a += b`` over arrays of ``mib`` MiB."""
    a = rng.standard_normal(mib * 2**17)
    b = 1e-12 * rng.standard_normal(a.size)
    us = best_us(lambda: np.add(a, b, out=a), repeat=3)
    return 3 * a.nbytes / (us * 1e-6) / 1e9  # read a, read b, write a


#: family name → function(args, rng, bandwidth) returning a list of row dicts
FAMILIES: dict[str, Callable[[argparse.Namespace, np.random.Generator, float], list[dict]]] = {}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", choices=[*FAMILIES, "all"], default="all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    rng = np.random.default_rng(args.seed)
    bandwidth = bandwidth_gbs(rng)
    print(f"measured bandwidth: {bandwidth:.1f} GB/s (1 thread)")
    rows = []
    for name, family in FAMILIES.items():
        if args.family in (name, "all"):
            rows += family(args, rng, bandwidth)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"bandwidth_gbs": bandwidth, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
