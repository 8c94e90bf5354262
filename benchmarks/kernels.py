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


def _jobcd_step_us(n: int, k: int, seed: int,
                   rng: np.random.Generator) -> tuple[float, float, int]:
    """µs per GS-JOBCD pair step at (n, k) (see :func:`jobcd_rows`): compiled and per-pair
    Python path, and the compiled steps per timed call."""
    import torch

    from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry, JOrthogonalGeometry
    from orthoplug.kernels.jobcd import gs_pairs
    from orthoplug.oracles import QuadraticOracle
    from orthoplug.solvers.jobcd import GSJOBCD
    from orthoplug.solvers.pairs import random_pairs

    gen = torch.Generator().manual_seed(seed)
    a = rng.standard_normal((n, n))
    c = a @ a.T / n + np.eye(n)
    geo = JOrthogonalGeometry(n, n // 2) if k == n else \
        IndefiniteStiefelGeometry(n, k, n // 2, k // 2)
    tracker = QuadraticOracle(torch.from_numpy(c)).track(geo.random_point(generator=gen))
    x0, y0, f0 = tracker.xa.copy(), tracker.ya.copy(), tracker._f
    jvec = np.asarray(geo.j.values, dtype=np.float64)
    m = int(np.clip(2**21 // (n * k), 64, 4096))
    pairs = random_pairs(n, 64 * m, gen).numpy()
    no_d = np.empty((0, 0))
    state = {"start": 0}

    def reset():
        np.copyto(tracker.xa, x0)
        np.copyto(tracker.ya, y0)

    def steps():
        reset()
        start = state["start"]
        state["start"] = (start + m) % (pairs.shape[0] - m)
        return gs_pairs(tracker.xa, tracker.ya, tracker.ca, no_d, 1.0, f0, jvec, 1e-6, False,
                        pairs, start, m, 1)

    done, _, status = steps()  # (compiles or loads the kernel)
    assert done == m and status == 0
    step_us = (best_us(steps) - best_us(reset)) / m
    # the per-pair path (one Python step per pair: the path before the kernel, still the one of
    # other devices and dtypes) on the same problem, same kind of pairs
    solver = GSJOBCD(side="row", seed=seed)
    run = solver.start(QuadraticOracle(torch.from_numpy(c)), torch.from_numpy(x0.copy()), geo)
    run.compiled = False
    # one step is ⌊n/2⌋ pair updates: about 64 pair updates per timed call
    iterations = max(1, 64 // GSJOBCD.pairs_per_iteration(n))
    m_py = iterations * GSJOBCD.pairs_per_iteration(n)

    def reset_run():
        np.copyto(run.tracker.xa, x0)
        np.copyto(run.tracker.ya, y0)

    def py_steps():
        reset_run()
        for _ in range(iterations):
            solver.step(run)

    py_steps()
    py_us = (best_us(py_steps, repeat=3) - best_us(reset_run)) / m_py
    return step_us, py_us, m


def jobcd_rows(args: argparse.Namespace, rng: np.random.Generator,
               bandwidth: float) -> list[dict]:
    """µs per compiled GS-JOBCD pair step (random pairs, exact curvature) on
    ``min tr(XᵀCX)`` over O(J) (k = n) and iSt(n, k) (k = n/4), J = diag(I, −I).

    Each timed call resets X and Y = CX to the same random feasible start (its copy time is
    measured and subtracted) and runs ``m`` steps on fresh random pairs, so every step is a
    moving step from a non-converged point. Beside it: one ``dger`` of an n×k array, one
    full-gradient product ``C @ X`` (n×n by n×k, into a preallocated array), and the floor:
    the bytes a pair step must move — Y read and written once (16nk), two rows of C (16n), two
    rows of X read and written (32k) — over the measured bandwidth (at sizes whose Y fits in cache
    the kernel can beat this DRAM floor). Last, the per-pair path (one Python ``step`` per pair,
    the path before the kernel and still the one of other devices and dtypes) on the same
    problem, and its time over the kernel's.
    """
    import torch
    from threadpoolctl import threadpool_limits

    rows = []
    print(f"{'GS-JOBCD':10s} {'n':>5s} {'k':>5s} {'µs/step':>9s} {'dger µs':>9s} "
          f"{'step/dger':>9s} {'C@X µs':>10s} {'C@X/step':>9s} {'floor µs':>9s} "
          f"{'step/floor':>10s} {'per-pair µs':>11s} {'speedup':>8s}")
    for n, k in ((50, 50), (200, 200), (1000, 1000), (200, 50), (1000, 250)):
        step_us, py_us, m = _jobcd_step_us(n, k, args.seed, rng)
        threadpool_limits(1)  # (libraries the first call imported too)
        torch.set_num_threads(1)
        dger = dger_us(n, k, rng)
        c, x, out = rng.standard_normal((n, n)), rng.standard_normal((n, k)), np.empty((n, k))
        grad_us = best_us(lambda c=c, x=x, out=out: np.matmul(c, x, out=out))
        floor_us = 8 * (2 * n * k + 2 * n + 4 * k) / (bandwidth * 1e3)
        rows.append({"family": "jobcd", "n": n, "k": k, "step_us": step_us, "dger_us": dger,
                     "step_per_dger": step_us / dger, "full_gradient_us": grad_us,
                     "full_gradient_per_step": grad_us / step_us, "floor_us": floor_us,
                     "step_per_floor": step_us / floor_us, "steps_per_call": m,
                     "per_pair_path_us": py_us, "speedup_over_per_pair": py_us / step_us})
        print(f"{'':10s} {n:5d} {k:5d} {step_us:9.2f} {dger:9.2f} {step_us / dger:9.2f} "
              f"{grad_us:10.1f} {grad_us / step_us:9.1f} {floor_us:9.2f} "
              f"{step_us / floor_us:10.2f} {py_us:11.2f} {py_us / step_us:8.1f}")
    return rows


FAMILIES["jobcd"] = jobcd_rows


def _obcd_terms(lam1: float, lam0: float) -> dict:
    from orthoplug.nonsmooth import L0, L1, CappedL1, NonNegative, Zero

    return {"zero": Zero(), "l1": L1(lam1), "l0": L0(lam0), "capped-l1": CappedL1(lam1, 0.05),
            "nonneg": NonNegative()}


def obcd_rows(args: argparse.Namespace, rng: np.random.Generator, bandwidth: float) -> list[dict]:
    """µs per OBCD pair step (k = 2, random pairs, exact curvature) on ``f = −tr(XᵀCX)``, r = 20,
    every h: the compiled fast path (``CX`` kept current) and the full-gradient step (the same
    OBCD on a generic oracle recomputing ``∇f = −2CX`` at every step, scalar curvature), beside
    one ``dger`` of the same n×r shape. Floor: a step reads and writes ``Y = CX`` once and reads
    two rows of C, ``16 n r + 16 n`` bytes. Dense random start (every entry of the pair live: the
    search's largest knot count); SPCA's λ as in ``benchmarks/obcd_spca.py``."""
    import torch

    from orthoplug.geometry.stiefel import StiefelGeometry
    from orthoplug.oracles import FunctionOracle, QuadraticOracle
    from orthoplug.problems import spca
    from orthoplug.solvers.obcd import OBCD

    torch.set_num_threads(1)
    r = 20
    rows = []
    for n in args.obcd_sizes:
        c = spca.covariance(torch.from_numpy(rng.standard_normal((2 * n, n))))
        lam1 = 0.5 * float(torch.linalg.eigvalsh(c)[-1]) / n**0.5
        oracle = QuadraticOracle(c, scale=-1.0)
        full = FunctionOracle(oracle.value, oracle.gradient, lipschitz=oracle.lipschitz)
        x0 = torch.linalg.qr(torch.from_numpy(rng.standard_normal((n, r))))[0].contiguous()
        geo = StiefelGeometry(n, r)
        floor_us = (16 * n * r + 16 * n) / (bandwidth * 1e9) * 1e6
        d_us = dger_us(n, r, rng)
        for name, h in _obcd_terms(lam1, 0.5 * lam1 / n**0.5).items():
            if name == "nonneg":  # a feasible start: the nonnegative orthonormal I(n, r)
                x_start = torch.eye(n, r, dtype=torch.float64)
            else:
                x_start = x0

            def per_step(orc, steps, h=h, x_start=x_start, geo=geo):
                """Best µs per block update over 3 runs of about ``steps`` updates (an
                iteration is ``updates_per_iteration`` of them)."""
                per = OBCD(h, seed=0, max_iterations=1).run(orc, x_start, geo).info[
                    "updates_per_iteration"]
                iterations = max(1, steps // per)
                best = float("inf")
                for _ in range(3):
                    t0 = time.perf_counter()
                    res = OBCD(h, seed=0, max_iterations=iterations,
                               eval_every=iterations).run(orc, x_start, geo)
                    best = min(best, (time.perf_counter() - t0) / res.info["block_updates"])
                return best * 1e6

            fast = per_step(oracle, args.obcd_steps)
            slow = per_step(full, max(20, args.obcd_steps // 200))
            rows.append(dict(family="obcd", n=n, r=r, h=name, us_per_step=fast,
                             full_gradient_us=slow, speedup=slow / fast, dger_us=d_us,
                             floor_us=floor_us, us_over_floor=fast / floor_us))
            print(f"obcd n={n:5d} r={r} {name:10s} {fast:9.2f} µs/step  full-gradient "
                  f"{slow:9.1f} µs ({slow / fast:6.1f}×)  dger {d_us:6.2f} µs  floor "
                  f"{floor_us:6.2f} µs  ({fast / floor_us:5.1f}× floor)", flush=True)
    return rows


FAMILIES["obcd"] = obcd_rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", choices=[*FAMILIES, "all"], default="all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the rows as JSON here")
    parser.add_argument("--obcd-sizes", type=int, nargs="+", default=[300, 1000, 3000])
    parser.add_argument("--obcd-steps", type=int, default=20_000,
                        help="OBCD fast-path steps per timing (the full-gradient runs 1/200)")
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
