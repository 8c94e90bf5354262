"""Long float32 runs of every feasible geoopt optimizer: does the constraint hold?

    OMP_NUM_THREADS=1 python benchmarks/float32_longrun.py                 # 1e5 steps each
    OMP_NUM_THREADS=1 python benchmarks/float32_longrun.py --steps 10000   # shorter
    python benchmarks/float32_longrun.py --only GSJOBCD OBCD --json out.json
    python benchmarks/float32_longrun.py --no-float64 --json docs/results/float32-longrun.json

Problems: ``tr(XᵀCX)`` over O(J), ``J = diag(I_5, −I_5)``, ``C = AAᵀ + I`` (A Gaussian), from a
random point of condition number ``--cond`` (default 1e3); ``−tr(XᵀBBᵀX)`` over St(20, 5) from
the Q factor of a Gaussian. Every optimizer starts from the float32 rounding of the same float64
point (seed ``--seed``) and takes ``--steps`` steps with its defaults (``VRJJOBCD``: σ = 2λ_max(C),
4 components; ``RSDM``: lr = 0.05, r = 5), its default ``stabilize`` unless ``--stabilize`` is
given (``none``: never). Printed per optimizer and checkpoint (every power of ten from 10³ and
the last step): the relative violation (``‖XᵀJX − J‖_F/‖X‖_F²``; ``‖XᵀX − I‖_F`` on Stiefel)
at that step and its largest value over all steps so far (measured after every step, so a
projection that falls on a checkpoint cannot hide the drift before it), the float64 loss at
the float32 iterate, and (unless ``--no-float64``) the same numbers for the float64 run at the
end.
"""

from __future__ import annotations

import argparse
import json
import time

import geoopt
import torch

from orthoplug.adapters.geoopt import (
    GSJOBCD,
    JJOBCD,
    OBCD,
    RSDM,
    RSSM,
    VRJJOBCD,
    CayleyLBFGS,
    ColumnJJacobi,
    JOrthogonal,
)
from orthoplug.geometry.stiefel import StiefelGeometry, qf

J_OPTIMIZERS = ("GSJOBCD", "JJOBCD", "VRJJOBCD", "ColumnJJacobi", "CayleyLBFGS")
STIEFEL_OPTIMIZERS = ("OBCD", "RSDM", "RSSM")
N_J, N_ST, P_ST = 10, 20, 5


def build(name: str, dtype: torch.dtype, cond: float, seed: int, device: str = "cpu",
          stabilize: int | None | str = "default"):
    """``(parameter, C in float64, optimizer)`` of ``name``'s problem in ``dtype`` on
    ``device`` (the data are drawn on the CPU, so every device starts from the same point);
    ``stabilize`` is passed on unless it is ``"default"``."""
    g = torch.Generator().manual_seed(seed)
    if name in J_OPTIMIZERS:
        manifold = JOrthogonal(N_J, p=N_J // 2)
        a = torch.randn(N_J, N_J, generator=g, dtype=torch.float64)
        c = a @ a.T + torch.eye(N_J, dtype=torch.float64)
        x0 = manifold.random(N_J, N_J, cond=cond, dtype=torch.float64, generator=g)
    else:
        manifold = geoopt.EuclideanStiefel()
        b = torch.randn(N_ST, N_ST, generator=g, dtype=torch.float64)
        c = -(b @ b.T)
        x0 = qf(torch.randn(N_ST, P_ST, generator=g, dtype=torch.float64))
    x = geoopt.ManifoldParameter(x0.to(dtype=dtype, device=device), manifold=manifold)
    c = c.to(device)
    options = {} if stabilize == "default" else {"stabilize": stabilize}
    if name == "VRJJOBCD":
        opt = VRJJOBCD([x], num_components=4, sigma_rule=2.0 * float(torch.linalg.eigvalsh(c)[-1]),
                       seed=seed, **options)
    elif name == "ColumnJJacobi":
        opt = ColumnJJacobi([x], c=c, seed=seed, **options)
    elif name == "RSDM":
        opt = RSDM([x], lr=0.05, r=P_ST, seed=seed, **options)
    else:
        opt = {"GSJOBCD": GSJOBCD, "JJOBCD": JJOBCD, "OBCD": OBCD, "RSSM": RSSM,
               "CayleyLBFGS": CayleyLBFGS}[name]([x], seed=seed, **options)
    return x, c, opt


def violation(x: torch.Tensor) -> float:
    """The relative violation of the parameter ``x``."""
    geometry = getattr(x.manifold, "geometry", None) or StiefelGeometry(*x.shape[-2:])
    return float(geometry.relative_violation(x.detach()))


def loss64(x: torch.Tensor, c: torch.Tensor) -> float:
    """The float64 loss at the parameter ``x``."""
    y = x.detach().to(torch.float64)
    return float(torch.trace(y.mT @ c.to(y.device) @ y))


def run(name: str, dtype: torch.dtype, steps: int, cond: float, seed: int,
        stabilize: int | None | str = "default") -> dict:
    x, c, opt = build(name, dtype, cond, seed, stabilize=stabilize)
    cd = c.to(dtype)

    def closure(*_):
        opt.zero_grad()
        loss = torch.trace(x.mT @ cd @ x)
        loss.backward()
        return loss

    checkpoints, worst, start = [], 0.0, time.perf_counter()
    marks = {10 ** e for e in range(3, len(str(steps)))} | {steps}
    for k in range(1, steps + 1):
        opt.step(closure)
        now = violation(x)
        worst = max(worst, now)
        if k in marks:
            checkpoints.append((k, now, loss64(x, c), worst))
    return {"optimizer": name, "dtype": str(dtype), "steps": steps,
            "stabilize": opt.param_groups[0]["stabilize"],
            "seconds": time.perf_counter() - start, "checkpoints": checkpoints}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--cond", type=float, default=1e3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--stabilize", default="default",
                        help="an integer, or 'none' (never); default: each optimizer's default")
    parser.add_argument("--no-float64", action="store_true",
                        help="skip the float64 reference runs")
    args = parser.parse_args()
    names = args.only or list(J_OPTIMIZERS + STIEFEL_OPTIMIZERS)
    stabilize = {"default": "default", "none": None}.get(args.stabilize.lower())
    if stabilize is None and args.stabilize.lower() != "none":
        stabilize = int(args.stabilize)
    results = []
    print(f"{args.steps} steps, O(J) start cond {args.cond:g}, seed {args.seed}")
    for name in names:
        r32 = run(name, torch.float32, args.steps, args.cond, args.seed, stabilize)
        results.append(r32)
        print(f"{name}: float32, stabilize {r32['stabilize']}, {r32['seconds']:.1f} s",
              flush=True)
        for k, viol, loss, worst in r32["checkpoints"]:
            print(f"  float32 step {k:>7d}  violation {viol:.2e} (max so far {worst:.2e})  "
                  f"loss {loss:.9g}", flush=True)
        if not args.no_float64:
            r64 = run(name, torch.float64, args.steps, args.cond, args.seed, stabilize)
            results.append(r64)
            k, viol, loss, worst = r64["checkpoints"][-1]
            print(f"  float64 step {k:>7d}  violation {viol:.2e} (max so far {worst:.2e})  "
                  f"loss {loss:.9g}  ({r64['seconds']:.1f} s)", flush=True)
        if args.json:  # written after every optimizer, so a long run keeps what it finished
            with open(args.json, "w") as fh:
                json.dump({"steps": args.steps, "cond": args.cond, "seed": args.seed,
                           "runs": results}, fh, indent=1)


if __name__ == "__main__":
    main()
