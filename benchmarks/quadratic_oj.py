r"""``min tr(XᵀCX)``, ``C ≻ 0``, over O(J) and iSt: the direct pencil solve against the bare LAPACK
route and pymanopt's ConjugateGradient / TrustRegions; the Lanczos method on banded sparse C.

Dense part (``C = make_spd(n)``, J with the +1 and −1 entries shuffled): square O(J) and
iSt(n, k) with ``k = n/10`` and ``n/4`` (``k₊ = round(k·p/n)``), ``p = 3n/4`` and ``p = n/4``.

* ``hyperbolic_trace_min`` (validation, two rank-k updates for ``LᵀJL``, ``eigh`` on the wanted
  index range, a triangular product, the value at X) and the *bare LAPACK route*
  (``np.linalg.cholesky``, ``Lᵀ(JL)`` by one GEMM, ``scipy.linalg.eigh`` on the same index range /
  ``np.linalg.eigh`` for the square case, ``X = J L U |θ|^{-1/2}``) run interleaved, in a random
  order in each round and each call after a 2 ms sleep, ``--repeats`` times each
  (``--repeats-large`` for n ≥ 1000). Reported: the ratios of the median wall times, of the
  median CPU times and of the fastest wall times. On a loaded machine a descheduled call loses
  wall time but not CPU time (one thread), and with interleaved calls of a few milliseconds the
  preemptions can lock onto one of the two methods: the CPU-time ratio is the robust one there.
* pymanopt ConjugateGradient and TrustRegions (NumPy cost, gradient and Hessian of the quadratic)
  from a seeded random point, until the relative certificate gap is ``≤ --target``: the cost
  function stops the run at the first evaluation below the target, so the time is the time to the
  target; a run that does not get there within ``--cap`` seconds reports its best gap.

Sparse part (``C = make_banded_spd(n, 2)``, n = 1e4 and 1e5, k = 20, ``k₊ = k₋ = 10``): the
iterative method's time, C-solves, residual, feasibility and peak memory (tracemalloc peak of the
Python-visible allocations, and the growth of the process's peak RSS, which also counts SuperLU's
factor), then CG and TR given the same sparse C for ``--sparse-cap`` seconds from the J-orthonormal
start made of unit vectors (a random iSt point of that size is an n×n construction). At n = 1e4 the
answer is checked against a second Lanczos run with ``tol = 1e-13``.

One thread, one process::

    python benchmarks/quadratic_oj.py --out docs/results/quadratic-oj.json
    python benchmarks/quadratic_oj.py --quick
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy / scipy load their BLAS

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402

import numpy as np  # noqa: E402
import scipy.linalg  # noqa: E402, F401  (loaded before threadpool_limits sees the BLAS)


class _Reached(Exception):
    pass


def _bare(c: np.ndarray, j: np.ndarray, lo: int, hi: int):
    """Cholesky, GEMM, eigh on the index range, eigenvectors of the pencil."""
    import scipy.linalg as sla

    low = np.linalg.cholesky(c)
    m = low.T @ (j[:, None] * low)
    if hi - lo + 1 == j.size:
        theta, u = np.linalg.eigh(m)
    else:
        theta, u = sla.eigh(m, subset_by_index=[lo, hi], check_finite=False)
    return (j[:, None] * (low @ u)) / np.sqrt(np.abs(theta))


def _timed(fn, *args) -> tuple[float, float]:
    """(wall, CPU) seconds of ``fn(*args)``, after a 2 ms sleep (the call then starts on a fresh
    time slice); the CPU time is the less load-sensitive figure on a shared machine (one thread:
    it is the work done)."""
    time.sleep(0.002)
    t0, c0 = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - t0, time.process_time() - c0


def _pymanopt_run(manifold, c, cert: float, target: float, cap: float, x0, method: str) -> dict:
    """Time to ``(f − cert)/cert ≤ target`` (or the best gap within ``cap`` seconds)."""
    import pymanopt

    best = [np.inf]
    t0 = [0.0]

    @pymanopt.function.numpy(manifold)
    def cost(x):
        f = float(np.sum(x * (c @ x)))
        best[0] = min(best[0], (f - cert) / cert)
        if best[0] <= target:
            raise _Reached
        return f

    @pymanopt.function.numpy(manifold)
    def euclidean_gradient(x):
        return 2.0 * (c @ x)

    @pymanopt.function.numpy(manifold)
    def euclidean_hessian(x, v):
        return 2.0 * (c @ v)

    problem = pymanopt.Problem(manifold, cost, euclidean_gradient=euclidean_gradient,
                               euclidean_hessian=euclidean_hessian)
    optimizer = (pymanopt.optimizers.ConjugateGradient if method == "CG"
                 else pymanopt.optimizers.TrustRegions)(
        max_time=cap, max_iterations=10**9, min_gradient_norm=0.0, verbosity=0)
    t0[0] = time.perf_counter()
    try:
        optimizer.run(problem, initial_point=x0)
        reached = False
    except _Reached:
        reached = True
    seconds = time.perf_counter() - t0[0]
    return {"reached": reached, "seconds": seconds if reached else None,
            "cap": cap, "best_gap": best[0]}


def dense_rows(args) -> list[dict]:
    from orthoplug.adapters.pymanopt import IndefiniteStiefel, JOrthogonal
    from orthoplug.linalg import hyperbolic_trace_min
    from orthoplug.problems.hevp import make_spd

    cases = [(n, None) for n in args.square] + [
        (n, k) for n in args.stiefel for k in (n // 10, n // 4)]
    rows = []
    print(f"{'set':>10s} {'n':>5s} {'k':>5s} {'p':>5s} {'new ms':>9s} {'bare ms':>9s} "
          f"{'ratio':>6s} {'cpu rat':>7s} {'min rat':>7s} {'gap':>9s} {'viol':>8s} {'CG s':>10s} "
          f"{'TR s':>10s} {'speed-up':>8s}")
    for n, k in cases:
        for p in (3 * n // 4, n // 4):
            rng = np.random.default_rng(args.seed + n + p)
            c = make_spd(n, seed=args.seed + n)
            j = rng.permutation([1.0] * p + [-1.0] * (n - p))
            if k is None:
                jk, manifold = j, JOrthogonal(n, signature=j)
            else:
                kp = round(k * p / n)
                jk = rng.permutation([1.0] * kp + [-1.0] * (k - kp))
                manifold = IndefiniteStiefel(n, k, signature=j, k_signature=jk)
            kp, km, q = int((jk > 0).sum()), int((jk < 0).sum()), n - p
            new, bare = [], []
            for _ in range(args.repeats if n < 1000 else args.repeats_large):
                # interleaved, in a random order each round
                for which in rng.permutation(2):
                    if which:
                        new.append(_timed(hyperbolic_trace_min, c, j, jk))
                    else:
                        bare.append(_timed(_bare, c, j, q - km, q + kp - 1))
            sol = hyperbolic_trace_min(c, j, jk)
            x = sol.x
            viol = float(np.linalg.norm(x.T @ (j[:, None] * x) - np.diag(jk)) / np.sum(x * x))
            gap = (sol.value - sol.certificate) / sol.certificate
            np.random.seed(args.seed)
            x0 = manifold.random_point()
            runs = {m: _pymanopt_run(manifold, c, sol.certificate, args.target, args.cap, x0, m)
                    for m in ("CG", "TR")}
            t_new, t_bare = (float(np.median([t[0] for t in ts])) for ts in (new, bare))
            cpu_new, cpu_bare = (float(np.median([t[1] for t in ts])) for ts in (new, bare))
            min_new, min_bare = (min(t[0] for t in ts) for ts in (new, bare))
            reached = [r["seconds"] for r in runs.values() if r["reached"]]
            speedup = min(reached) / t_new if reached else None
            row = {"set": "O(J)" if k is None else "iSt", "n": n, "k": kp + km, "p": p,
                   "k_plus": kp, "new_s": t_new, "bare_s": t_bare, "ratio": t_new / t_bare,
                   "new_cpu_s": cpu_new, "bare_cpu_s": cpu_bare, "cpu_ratio": cpu_new / cpu_bare,
                   "min_wall_ratio": min_new / min_bare,
                   "new_all_wall_cpu_s": new, "bare_all_wall_cpu_s": bare, "gap": gap,
                   "violation": viol,
                   "certificate": sol.certificate, "pymanopt": runs,
                   "speedup_vs_best_pymanopt": speedup}
            rows.append(row)

            def fmt(r):
                return f"{r['seconds']:10.3f}" if r["reached"] else f"  >{r['cap']:g}s"
            print(f"{row['set']:>10s} {n:5d} {kp + km:5d} {p:5d} {1e3 * t_new:9.2f} "
                  f"{1e3 * t_bare:9.2f} {t_new / t_bare:6.2f} {cpu_new / cpu_bare:7.2f} "
                  f"{min_new / min_bare:7.2f} "
                  f"{gap:9.1e} {viol:8.1e} "
                  f"{fmt(runs['CG'])} {fmt(runs['TR'])} "
                  f"{'-' if speedup is None else f'{speedup:8.0f}'}", flush=True)
    return rows


def sparse_rows(args) -> list[dict]:
    from orthoplug.adapters.pymanopt import IndefiniteStiefel
    from orthoplug.linalg import hyperbolic_trace_min
    from orthoplug.problems.hevp import make_banded_spd

    rows = []
    for n in args.sparse:
        c = make_banded_spd(n, bandwidth=2, seed=args.seed)
        rng = np.random.default_rng(args.seed + n)
        j = rng.permutation([1.0] * (n // 2) + [-1.0] * (n - n // 2))
        jk = np.array([1.0] * 10 + [-1.0] * 10)
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        tracemalloc.start()
        t0 = time.perf_counter()
        sol = hyperbolic_trace_min(c, j, jk, tol=args.tol)
        seconds = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0  # KiB on Linux
        x = sol.x
        viol = float(np.linalg.norm(x.T @ (j[:, None] * x) - np.diag(jk)) / np.sum(x * x))
        row = {"n": n, "k": 20, "bandwidth": 2, "nnz": int(c.nnz), "seconds": seconds,
               "solves": sol.operator_applications, "residual": sol.residual,
               "violation": viol, "value": sol.value, "certificate": sol.certificate,
               "tracemalloc_peak_mb": peak / 2**20, "rss_peak_growth_mb": rss / 1024,
               "nk_doubles_mb": n * 20 * 8 / 2**20}
        if n <= args.check_below:
            tight = hyperbolic_trace_min(c, j, jk, tol=1e-13)
            row["value_tol_1e-13"] = tight.value
            row["rel_diff_vs_tol_1e-13"] = abs(sol.value - tight.value) / tight.value
        pos, neg = list(np.flatnonzero(j > 0)), list(np.flatnonzero(j < 0))
        x0 = np.zeros((n, 20))
        for col, s in enumerate(jk):
            x0[(pos if s > 0 else neg).pop(0), col] = 1.0
        manifold = IndefiniteStiefel(n, 20, signature=j, k_signature=jk)
        row["pymanopt"] = {m: _pymanopt_run(manifold, c, sol.certificate, args.target,
                                            args.sparse_cap, x0, m) for m in ("CG", "TR")}
        rows.append(row)
        print(f"sparse n={n}: {seconds:.2f} s, {sol.operator_applications} C-solves, "
              f"residual {sol.residual:.1e}, violation {viol:.1e}, tracemalloc peak "
              f"{peak / 2**20:.0f} MiB (n·k doubles: {row['nk_doubles_mb']:.0f} MiB), peak RSS "
              f"+{rss / 1024:.0f} MiB; CG best gap {row['pymanopt']['CG']['best_gap']:.1e}, "
              f"TR best gap {row['pymanopt']['TR']['best_gap']:.1e} in {args.sparse_cap:g} s",
              flush=True)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--square", type=int, nargs="*", default=[200, 500, 2000])
    parser.add_argument("--stiefel", type=int, nargs="*", default=[120, 400])
    parser.add_argument("--sparse", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--repeats-large", type=int, default=3, help="repeats for n >= 1000")
    parser.add_argument("--target", type=float, default=1e-9)
    parser.add_argument("--cap", type=float, default=20.0)
    parser.add_argument("--sparse-cap", type=float, default=60.0)
    parser.add_argument("--tol", type=float, default=1e-10)
    parser.add_argument("--check-below", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help="n = 200 / 120, sparse n = 1e4, 3 repeats, 5 s caps")
    parser.add_argument("--out", help="write the JSON record here")
    args = parser.parse_args(argv)
    if args.quick:
        args.square, args.stiefel, args.sparse = [200], [120], [10_000]
        args.repeats, args.cap, args.sparse_cap = 3, 5.0, 5.0
    import torch
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    torch.set_num_threads(1)
    record = {"settings": {k: v for k, v in vars(args).items() if k != "out"},
              "machine": platform.platform(), "threads": 1,
              "sparse": sparse_rows(args),  # first: the peak-RSS growth is measured from start
              "dense": dense_rows(args)}
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(record, fh, indent=1)


if __name__ == "__main__":
    main()
