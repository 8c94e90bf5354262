"""A hyperbolic structural probe on O(p, q), geoopt style: J-JOBCD and VR-J-JOBCD vs RiemannianAdam.
=================================================================================================

::

    python examples/hspp_probe.py                    # m = 200 Gaussian rows, n = 8, 100 steps
    python examples/hspp_probe.py --source digits --m 500 --n 10 --steps 100

Find X with XᵀJX = J (J = diag(I_p, −I_q), p = q = n/2) such that the ultrahyperbolic distances
of the probed rows Q = φ(DX) match the Euclidean distances of the data rows
(``orthoplug.problems.hspp``; f = (1/m) Σ_i f_i, one component per row). X is one
``geoopt.ManifoldParameter`` on orthoplug's ``JOrthogonal`` manifold; the three optimizers are
plain ``torch.optim`` objects driven by closures:

* ``orthoplug.adapters.geoopt.JJOBCD`` — full-batch, ⌊n/2⌋ exact 2×2 J-orthogonal row steps per
  step; σ is doubled until the loss decreases, so f never increases;
* ``orthoplug.adapters.geoopt.VRJJOBCD`` — the same steps on a PAGE variance-reduced gradient from
  minibatches of rows, σ = a local Hessian-norm estimate (``HSPP.estimate_lipschitz``);
* ``geoopt.optim.RiemannianAdam`` — the baseline (Cayley retraction of orthoplug's manifold).

Printed: f after each run, the component gradients it used, and ‖XᵀJX − J‖ (papers' measure).
"""

from __future__ import annotations

import argparse
import time

import geoopt
import torch

from orthoplug.adapters.geoopt import JJOBCD, VRJJOBCD, JOrthogonal
from orthoplug.problems.hspp import HSPP, make_hspp_data


def main(argv: list[str] | None = None) -> int:
    """Train the probe three ways from one start; exit code 1 if a JOBCD run does not decrease f
    or leaves the group."""
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--source", choices=["gaussian", "digits"], default="gaussian")
    parser.add_argument("--m", type=int, default=200, help="data rows (components)")
    parser.add_argument("--n", type=int, default=8, help="features = size of X (even)")
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps per method")
    parser.add_argument("--batch", type=int, default=None, help="VR-J-JOBCD batch (default m/4)")
    parser.add_argument("--adam-lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    prob = HSPP(make_hspp_data(args.m, args.n, source=args.source, seed=args.seed), args.n // 2)
    manifold = JOrthogonal(args.n, args.n // 2)
    x0 = manifold.random(args.n, args.n, dtype=torch.float64,
                         generator=torch.Generator().manual_seed(args.seed))
    sigma = prob.estimate_lipschitz(x0, generator=torch.Generator().manual_seed(args.seed))
    f0 = float(prob.value(x0))
    print(f"HSPP, m={args.m} {args.source} rows, X ∈ O({args.n // 2},{args.n - args.n // 2}): "
          f"f(X0) = {f0:.6f}, σ = {sigma:.3g}")
    print(f"{'optimizer':<22}{'f':>12}{'component grads':>17}{'‖XᵀJX − J‖':>12}{'time [s]':>10}")

    def run(make, batched: bool):
        x = geoopt.ManifoldParameter(x0.clone(), manifold=manifold)
        opt = make(x)
        count = [0]

        def closure(idx=None):
            opt.zero_grad()
            idx = torch.arange(args.m) if idx is None else idx
            loss = prob.component_value(x, idx)
            loss.backward()
            count[0] += idx.numel()
            return loss

        start = time.perf_counter()
        for _ in range(args.steps):
            if batched:
                opt.step(closure)
            else:  # RiemannianAdam: step after backward
                closure()
                opt.step()
        elapsed = time.perf_counter() - start
        with torch.no_grad():
            return float(prob.value(x)), count[0], float(manifold.geometry.violation(x)), elapsed

    batch = args.batch or max(1, args.m // 4)
    results = {
        "J-JOBCD": run(lambda x: JJOBCD([x], seed=args.seed), True),
        "VR-J-JOBCD": run(lambda x: VRJJOBCD([x], num_components=args.m, sigma_rule=sigma,
                                             batch_size=batch, seed=args.seed), True),
        "RiemannianAdam": run(lambda x: geoopt.optim.RiemannianAdam([x], lr=args.adam_lr), False),
    }
    ok = True
    for name, (value, grads, violation, elapsed) in results.items():
        print(f"{name:<22}{value:>12.6f}{grads:>17}{violation:>12.1e}{elapsed:>10.2f}")
        if "JOBCD" in name:
            ok &= value < f0 and violation < 1e-8
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
