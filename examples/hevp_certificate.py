"""Trace-minimisation hyperbolic eigenvalue problem with a certified optimum.
==========================================================================

    min tr(XᵀCX)  subject to  XᵀJX = J,   C = DᵀD/m + εI ≻ 0,

has the global minimum Σ|λ_i(JC)|. This script solves it with pymanopt's own solvers on
orthoplug's ``JOrthogonal`` manifold (and geoopt's RiemannianSGD on a batch of problems) and
prints the certificate gap and the constraint violation of each result.

::

    python examples/hevp_certificate.py [--n 40] [--geoopt-steps 3000] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import autograd.numpy as anp
import geoopt
import numpy as np
import pymanopt
import torch
from pymanopt.optimizers import ConjugateGradient, SteepestDescent, TrustRegions

from orthoplug.adapters import geoopt as go
from orthoplug.adapters import pymanopt as pm
from orthoplug.problems.hevp import make_spd, trace_min_certificate


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--n", type=int, default=40, help="matrix size (J has n/2 entries +1)")
    parser.add_argument("--geoopt-steps", type=int, default=3000,
                        help="RiemannianSGD steps on the batch of problems")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    n = args.n
    c = make_spd(n, seed=args.seed)
    manifold = pm.JOrthogonal(n, n // 2)
    cert = trace_min_certificate(c, manifold.signature)

    @pymanopt.function.autograd(manifold)
    def cost(x):
        return anp.trace(x.T @ c @ x)

    problem = pymanopt.Problem(manifold, cost)
    np.random.seed(args.seed)
    x0 = manifold.random_point()
    print(f"min tr(XᵀCX) over O({n // 2},{n - n // 2}); certificate Σ|λ(JC)| = {cert:.10f}")
    print(f"{'solver':<28}{'cost':>18}{'rel. gap':>12}{'violation':>12}{'time [s]':>10}")
    worst = 0.0
    for opt in (SteepestDescent(verbosity=0, max_iterations=20000, min_gradient_norm=1e-10),
                ConjugateGradient(verbosity=0, max_iterations=20000, min_gradient_norm=1e-10),
                TrustRegions(verbosity=0, min_gradient_norm=1e-10)):
        res = opt.run(problem, initial_point=x0)
        gap = (res.cost - cert) / cert
        worst = max(worst, abs(gap))
        print(f"pymanopt {type(opt).__name__:<19}{res.cost:>18.10f}{gap:>12.2e}"
              f"{manifold.violation(res.point):>12.1e}{res.time:>10.2f}")

    # geoopt: a batch of 4 independent problems in one ManifoldParameter
    gm = go.JOrthogonal(n, n // 2)
    cs = torch.stack([torch.from_numpy(make_spd(n, seed=args.seed + b)) for b in range(4)])
    certs = torch.tensor([trace_min_certificate(ci.numpy(), gm.geometry.j) for ci in cs])
    x = geoopt.ManifoldParameter(
        gm.random(4, n, n, dtype=torch.float64, generator=torch.Generator().manual_seed(1)),
        manifold=gm,
    )
    opt = geoopt.optim.RiemannianSGD([x], lr=0.5 / float(torch.linalg.eigvalsh(cs).max()))
    start = time.perf_counter()
    for _ in range(args.geoopt_steps):
        opt.zero_grad()
        torch.einsum("bij,bik,bkj->", x, cs, x).backward()
        opt.step()
    with torch.no_grad():
        vals = torch.einsum("bij,bik,bkj->b", x, cs, x)
        gaps = (vals - certs) / certs
        viol = gm.geometry.violation(x).max().item()
    print(f"geoopt RiemannianSGD (batch 4){vals.mean().item():>16.10f}{gaps.abs().max():>12.2e}"
          f"{viol:>12.1e}{time.perf_counter() - start:>10.2f}")
    print(f"largest pymanopt certificate gap: {worst:.2e}")
    return 0 if worst < 1e-6 else 1


if __name__ == "__main__":
    raise SystemExit(main())
