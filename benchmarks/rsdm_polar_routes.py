"""The polar step's r×r rotation ``argmax_{Y ∈ SO(r)} ⟨Y, W⟩``: routes, their cost and accuracy.

    OMP_NUM_THREADS=1 python benchmarks/rsdm_polar_routes.py --out rsdm_polar_routes.json
    OMP_NUM_THREADS=1 python benchmarks/rsdm_polar_routes.py --runs 3   # + RSDM runs, both routes

Matrices: the W = CCᵀ/η − S that RSDM's default (polar) step sees on PCA and Procrustes
(``--instances``, each run to the gap 1e-2 with ``rsdm_large``'s setup, a few W kept from the
start, middle and end of the run) and synthetic r×r ones (``--rs``) with log-spaced singular
values of condition κ ∈ {1e2, 1e4, 1e6, 1e8, 1e12}, one with det < 0 and one rank-deficient.
Routes, each in float64 with the SO(r) sign rule (a determinant and, where det < 0, the
smallest singular direction flipped): ``svd`` (``torch.linalg.svd``, the route before; the
fallback of the guard), ``gesdd`` / ``gesvd`` (scipy's LAPACK drivers), ``eigh`` (the
uncorrected ``W V Σ⁻¹ Vᵀ`` from ``eigh(WᵀW)``) and ``orthoplug`` (:func:`_rotation_polar`:
eigh with the first-order correction and its guard). For each: CPU seconds of one call
(best and median of ``--repeats``, the routes interleaved), the orthogonality ``‖YᵀY − I‖_max``,
the objective gap ``(⟨Y_svd, W⟩ − ⟨Y, W⟩)/‖W‖_*`` and ``‖Y − Y_svd‖_max``.

``--runs k``: in this process, RSDM with its default step on the ``--instances`` (to 1e-2),
with :func:`_rotation_polar` and with the SVD route in its place, and pymanopt CG, interleaved
k times (CPU seconds, medians): the before/after of the route on the whole run.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import scipy.linalg
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rsdm_large import limit_threads, run_one  # noqa: E402
from rsdm_stiefel import Bench, Monitor  # noqa: E402

import orthoplug.solvers.rsdm as rsdm  # noqa: E402

ORIGINAL = rsdm._rotation_polar


def _sign_rule(y, u_min, v_min):
    """``y`` with ``2 u_min v_minᵀ`` subtracted where ``det y < 0``."""
    flip = torch.linalg.det(y) < 0
    return y - 2.0 * (flip[..., None, None] * u_min) @ v_min


def scipy_route(driver):
    def route(w):
        u, _, vt = (torch.from_numpy(m) for m in scipy.linalg.svd(
            w.numpy(), lapack_driver=driver, check_finite=False))
        return _sign_rule(u @ vt, u[:, -1:], vt[-1:, :])
    return route


def eigh_uncorrected(w):
    lam, v = torch.linalg.eigh(w.mT @ w)
    u = (w @ v) / lam.clamp_min(0.0).sqrt()
    return _sign_rule(u @ v.mT, u[:, :1], v[:, :1].mT)


ROUTES = {"svd": rsdm._rotation_polar_svd, "gesdd": scipy_route("gesdd"),
          "gesvd": scipy_route("gesvd"), "eigh": eigh_uncorrected, "orthoplug": ORIGINAL}


def captured(kind: str, n: int, p: int, seed: int, keep: int) -> list[torch.Tensor]:
    """``keep`` of the W matrices the default RSDM step sees on the way to the gap 1e-2."""
    seen = []

    def spy(w):
        seen.append(w.detach().clone())
        return ORIGINAL(w)

    bench = Bench(kind, n, p, rsdm.default_slice_dimension(n, p), seed=seed)
    rsdm._rotation_polar = spy
    try:
        run_one(bench, "RSDM", bench.r, 1e-2, 600.0)
    finally:
        rsdm._rotation_polar = ORIGINAL
    picks = sorted({round(i * (len(seen) - 1) / (keep - 1)) for i in range(keep)})
    return [seen[i] for i in picks]


def synthetic(r: int, seed: int) -> list[tuple[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for kappa, negative, zeros in ((1e2, False, 0), (1e4, False, 0), (1e6, False, 0),
                                   (1e8, False, 0), (1e12, False, 0), (1e4, True, 0),
                                   (1e2, False, 3)):
        q1, q2 = (torch.linalg.qr(torch.randn(r, r, dtype=torch.float64, generator=gen))[0]
                  for _ in range(2))
        sv = torch.logspace(0, -math.log10(kappa), r, dtype=torch.float64)
        sv[r - zeros:] = 0.0
        if (float(torch.linalg.det(q1 @ q2.mT)) < 0) != negative:
            q1[:, 0] = -q1[:, 0]
        label = f"synthetic r={r} κ={kappa:.0e}" + (" det<0" if negative else "") + (
            f" rank r−{zeros}" if zeros else "")
        out.append((label, (q1 * sv) @ q2.mT))
    return out


def measure(label: str, w: torch.Tensor, repeats: int) -> dict:
    ref = ROUTES["svd"](w)
    nuclear = float(torch.linalg.svdvals(w).sum())
    times = {name: [] for name in ROUTES}
    for _ in range(repeats):  # interleaved
        for name, route in ROUTES.items():
            t0 = time.process_time()
            route(w)
            times[name].append(time.process_time() - t0)
    row = {"matrix": label, "r": w.shape[-1], "cond": float(torch.linalg.cond(w)),
           "det_negative": bool(torch.linalg.slogdet(w)[0] < 0), "routes": {}}
    for name, route in ROUTES.items():
        y = route(w)
        row["routes"][name] = {
            "best_ms": 1e3 * min(times[name]), "median_ms": 1e3 * statistics.median(times[name]),
            "orthogonality": float((y.mT @ y - torch.eye(w.shape[-1], dtype=w.dtype)).abs().max()),
            "objective_gap": (float((ref * w).sum()) - float((y * w).sum())) / nuclear,
            "max_diff_svd": float((y - ref).abs().max())}
    cells = "  ".join(f"{k} {v['best_ms']:6.1f}ms orth {v['orthogonality']:.0e} "
                      f"gap {v['objective_gap']:+.0e} dY {v['max_diff_svd']:.0e}"
                      for k, v in row["routes"].items())
    print(f"{label} (κ {row['cond']:.1e}{', det<0' if row['det_negative'] else ''}): {cells}",
          flush=True)
    return row


def runs(instances, repeats: int, seed: int) -> list[dict]:
    """RSDM (default step) with each route and CG, interleaved, CPU seconds to 1e-2."""
    Monitor.clock = staticmethod(time.process_time)
    out = []
    for kind, n, p in instances:
        bench = Bench(kind, n, p, rsdm.default_slice_dimension(n, p), seed=seed)
        seconds = {"RSDM (orthoplug route)": [], "RSDM (svd route)": [], "CG": []}
        for _ in range(repeats):
            for label in seconds:
                rsdm._rotation_polar = rsdm._rotation_polar_svd if "svd" in label else ORIGINAL
                try:
                    res = run_one(bench, "CG" if label == "CG" else "RSDM", bench.r, 1e-2, 600.0)
                finally:
                    rsdm._rotation_polar = ORIGINAL
                seconds[label].append(res.times_to_gap.get("1e-02"))
                print(f"  {kind} {n}/{p} {label}: {seconds[label][-1]:.2f} s "
                      f"({res.iterations} iterations)", flush=True)
        med = {k: statistics.median(v) for k, v in seconds.items()}
        print(f"{kind} n={n} p={p}: medians " + ", ".join(f"{k} {v:.2f} s" for k, v in med.items())
              + f"; CG ÷ RSDM: orthoplug route {med['CG'] / med['RSDM (orthoplug route)']:.2f}, "
              f"svd route {med['CG'] / med['RSDM (svd route)']:.2f}", flush=True)
        out.append({"problem": kind, "n": n, "p": p, "seconds": seconds, "median": med})
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", nargs="+", default=["procrustes:2000:1000", "pca:1000:500"],
                        help="kind:n:p whose W are captured (and run with --runs)")
    parser.add_argument("--keep", type=int, default=4, help="W kept per instance")
    parser.add_argument("--rs", nargs="+", type=int, default=[500, 707])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--runs", type=int, default=0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    limit_threads(1)
    instances = [(k, int(n), int(p)) for k, n, p in (s.split(":") for s in args.instances)]
    rows = []
    for kind, n, p in instances:
        for i, w in enumerate(captured(kind, n, p, args.seed, args.keep)):
            rows.append(measure(f"{kind} {n}/{p} W#{i}", w, args.repeats))
    for r in args.rs:
        for label, w in synthetic(r, args.seed):
            rows.append(measure(label, w, args.repeats))
    report = {"args": vars(args), "torch": torch.__version__, "numpy": np.__version__,
              "matrices": rows, "runs": runs(instances, args.runs, args.seed) if args.runs else []}
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
