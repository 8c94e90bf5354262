"""RSDM on Wen–Yin's QAP relaxation, rounded to a permutation and scored against a planted optimum.
================================================================================================

::

    python examples/qap.py                           # n = 40, r = 20
    python examples/qap.py --n 200 --r 50 --sampling orthogonal

The instance is graph matching with a planted permutation π* (B random symmetric,
A = −P*BP*ᵀ), whose optimum −‖B‖²_F is known for the permutation problem and for the
relaxation min_{XᵀX=I} tr(Aᵀ(X⊙X)B(X⊙X)ᵀ) alike (``orthoplug.problems.qap``). RSDM-P reads r
rows of the gradient per step (O(rn²) instead of O(n³)); pymanopt's SteepestDescent from the same
start is the baseline. The relaxation is nonconvex: both usually stop at a local minimum, so the
printed gap of the rounded permutation is the honest outcome, not zero; the check is that no value
falls below the certified optimum.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from pymanopt.optimizers import SteepestDescent

from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.problems.qap import QAPProblem
from orthoplug.solvers.rsdm import RSDM


def main(argv: list[str] | None = None) -> int:
    """Solve one planted instance with RSDM and SteepestDescent; exit code 1 if a value beats
    the certified optimum (which would be a bug)."""
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--r", type=int, default=20, help="RSDM slice dimension (2 <= r <= n)")
    parser.add_argument("--sampling", choices=["permutation", "orthogonal"], default="permutation")
    parser.add_argument("--iterations", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    qap = QAPProblem.planted(args.n, seed=args.seed)
    geometry = StiefelGeometry(args.n, args.n)
    x0 = geometry.random_point(generator=torch.Generator().manual_seed(args.seed + 1))
    print(f"planted QAP, n={args.n}: optimum −‖B‖²_F = {qap.optimum:.6f}")
    print(f"{'solver':<26}{'relaxed F':>13}{'rounded':>13}{'gap':>9}{'π* found':>10}"
          f"{'time [s]':>10}")
    ok = True
    runs = {}
    start = time.perf_counter()
    res = RSDM(args.r, sampling=args.sampling, step_size=0.1, line_search="armijo",
               seed=args.seed, max_iterations=args.iterations, min_gradient_norm=1e-6).run(
        qap.oracle(), x0, geometry)
    runs[f"orthoplug RSDM (r={args.r})"] = (res.point, res.cost, time.perf_counter() - start)
    start = time.perf_counter()
    sd = SteepestDescent(verbosity=0, max_iterations=args.iterations).run(
        qap.pymanopt_problem(), initial_point=x0.numpy())
    runs["pymanopt SteepestDescent"] = (torch.from_numpy(np.asarray(sd.point)), sd.cost,
                                        time.perf_counter() - start)
    for name, (x, relaxed, elapsed) in runs.items():
        perm, rounded = qap.round(x)
        found = float((perm == qap.permutation).double().mean())
        ok &= min(relaxed, rounded) >= qap.optimum - 1e-9 * abs(qap.optimum)
        print(f"{name:<26}{relaxed:>13.4f}{rounded:>13.4f}{qap.relative_gap(rounded):>9.3f}"
              f"{found:>10.0%}{elapsed:>10.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
