"""Every geoopt optimizer and the torch-path core solvers on a device: do the steps run, stay
feasible, equal the CPU's, and what does a step cost?

    python benchmarks/gpu_check.py                     # CUDA (float32 and float64)
    python benchmarks/gpu_check.py --device cpu        # the same checks on the CPU
    python benchmarks/gpu_check.py --steps 200 --json out.json

For each optimizer (the problems of ``float32_longrun.py``: ``tr(XᵀCX)`` over O(5, 5) from a
start of condition ``--cond``, ``−tr(XᵀBBᵀX)`` over St(20, 5)) and dtype: ``--steps`` steps
on parameters living on ``--device``, then the relative violation and the parameter's device
(nothing may move to the host), and the mean time per step against geoopt's
``RiemannianAdam`` (lr 1e-2, the same loss, the same device and dtype) measured in the same
process, interleaved (RiemannianAdam, optimizer, RiemannianAdam, …, ``--repeats`` rounds,
medians; CUDA synchronised around each timed round), and the gap to the same steps on the CPU
(``max |X_device − X_cpu| / max |X_cpu|``: a solver's iterates may not depend on the device
beyond rounding). An optimizer that refuses the device
(``ColumnJJacobi``: compiled CPU sweeps only) is reported with its message. Then the core
solvers that run on any device (:func:`core_cases`: RSDM with both samplings and both step
rules (polar at r ≤ p, Armijo at r > p), StochasticRSDM on a
finite sum, GS-JOBCD, J-JOBCD, RSSM with an ℓ1 term and ``final_prox=False``), 30 iterations
each, with their gap to the CPU run. Set ``OMP_NUM_THREADS=1`` for CPU timings.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import geoopt
import torch
from float32_longrun import J_OPTIMIZERS, STIEFEL_OPTIMIZERS, build, loss64, violation

from orthoplug import L1, FunctionOracle, QuadraticOracle
from orthoplug.geometry.manifolds import JOrthogonalGeometry
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.oracles import FiniteSumOracle
from orthoplug.solvers.jobcd import GSJOBCD, JJOBCD
from orthoplug.solvers.rsdm import RSDM, StochasticRSDM
from orthoplug.solvers.rssm import RSSM


def _closure(opt, x, c):
    def closure(*_):
        opt.zero_grad()
        loss = torch.trace(x.mT @ c @ x)
        loss.backward()
        return loss
    return closure


def _timed(step, steps: int, device: str) -> float:
    """Seconds per call of ``step`` over ``steps`` calls."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def check(name: str, dtype: torch.dtype, args) -> dict:
    try:
        x, c, opt = build(name, dtype, args.cond, args.seed, args.device)
    except (ValueError, TypeError) as err:
        return {"optimizer": name, "dtype": str(dtype), "refused": str(err)}
    xr, _, _ = build(name, dtype, args.cond, args.seed, args.device)
    adam = geoopt.optim.RiemannianAdam([xr], lr=1e-2)
    cd = c.to(dtype)
    ours, theirs = _closure(opt, x, cd), _closure(adam, xr, cd)
    per_ours, per_adam = [], []
    for _ in range(args.repeats):
        per_adam.append(_timed(lambda: adam.step(theirs), args.steps, args.device))
        per_ours.append(_timed(lambda: opt.step(ours), args.steps, args.device))
    steps = args.steps * args.repeats
    xc, _, opt_cpu = build(name, dtype, args.cond, args.seed, "cpu")
    on_cpu = _closure(opt_cpu, xc, c.cpu().to(dtype))
    for _ in range(steps):
        opt_cpu.step(on_cpu)
    gap = float((x.detach().cpu() - xc.detach()).abs().max() / xc.detach().abs().max())
    return {"optimizer": name, "dtype": str(dtype), "device": str(x.device),
            "steps": steps, "violation": violation(x), "loss": loss64(x, c), "cpu_gap": gap,
            "seconds_per_step": statistics.median(per_ours),
            "adam_seconds_per_step": statistics.median(per_adam),
            "adam_violation": violation(xr)}


def core_cases(device: str, seed: int) -> dict:
    """name → (solver, oracle, geometry, start on ``device``): PCA on St(40, 8) with 200 samples,
    ``tr(XᵀCX)`` over O(6, 6); data drawn on the CPU, so every device gets the same problem."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(200, 40, generator=g, dtype=torch.float64)
    cj = torch.randn(12, 12, generator=g, dtype=torch.float64)
    cj = cj @ cj.T + torch.eye(12, dtype=torch.float64)
    st, jg = StiefelGeometry(40, 8), JOrthogonalGeometry(12, 6)
    x0 = st.random_point(generator=g).to(device)
    xj = jg.random_point(generator=g, cond=3.0).to(device)
    a, c, cj = a.to(device), (a.T @ a / 200).to(device), cj.to(device)
    pca = FunctionOracle(lambda x: -torch.trace(x.T @ c @ x), lambda x: -2 * c @ x)
    batches = FiniteSumOracle(200, lambda x, i: -((a[i] @ x) ** 2).sum(1).mean(),
                              lambda x, i: -2 * a[i].T @ (a[i] @ x) / len(i))
    budget = dict(seed=seed + 1, max_iterations=30)
    return {"RSDM-P": (RSDM(r=6, **budget), pca, st, x0),  # r ≤ p: the polar slice step
            "RSDM-O": (RSDM(r=10, sampling="orthogonal", **budget), pca, st, x0),
            "StochasticRSDM": (StochasticRSDM(r=10, batch_size=20, step_size=0.05, **budget),
                               batches, st, x0),
            "GSJOBCD": (GSJOBCD(**budget), QuadraticOracle(cj), jg, xj),
            "JJOBCD": (JJOBCD(**budget), QuadraticOracle(cj), jg, xj),
            "RSSM-l1": (RSSM(h=L1(0.05), final_prox=False, **budget), pca, st, x0)}


def core_check(args) -> list[dict]:
    """Each core case on ``args.device`` against the CPU: the relative gap of the points."""
    reference = {k: s.run(o, x, geo).point for k, (s, o, geo, x) in
                 core_cases("cpu", args.seed).items()}
    out = []
    for name, (solver, oracle, geometry, x0) in core_cases(args.device, args.seed).items():
        res = solver.run(oracle, x0, geometry)
        ref = reference[name]
        out.append({"solver": name, "device": str(res.point.device),
                    "cpu_gap": float((res.point.cpu() - ref).abs().max() / ref.abs().max()),
                    "violation": res.violation})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cond", type=float, default=100.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("no CUDA device here: pass --device cpu")
    results = []
    print(f"device {args.device}, {args.steps}×{args.repeats} steps each")
    for name in J_OPTIMIZERS + STIEFEL_OPTIMIZERS:
        for dtype in (torch.float32, torch.float64):
            r = check(name, dtype, args)
            results.append(r)
            label = f"{name:14s} {str(dtype)[6:]:8s}"
            if "refused" in r:
                print(f"{label} refused: {r['refused']}")
                continue
            print(f"{label} on {r['device']}: violation {r['violation']:.2e} "
                  f"(RAdam {r['adam_violation']:.2e}), {1e3 * r['seconds_per_step']:.3f} ms/step"
                  f" = {r['seconds_per_step'] / r['adam_seconds_per_step']:.2f}× RAdam,"
                  f" gap to CPU {r['cpu_gap']:.1e}")
    print("core solvers, 30 iterations:")
    core = core_check(args)
    for r in core:
        print(f"{r['solver']:14s} on {r['device']}: gap to CPU {r['cpu_gap']:.1e}, "
              f"violation {r['violation']:.1e}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"geoopt": results, "core": core}, fh, indent=1)


if __name__ == "__main__":
    main()
