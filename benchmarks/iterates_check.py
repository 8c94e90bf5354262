"""Save the iterates of the block solvers on fixed seeds, or compare them with a saved file.

A refactoring of a kernel or subproblem that must not change the algorithm is checked by running
this script before (``--save``) and after (``--compare``) the change: every case's point after
each budget must agree to ``--tol`` (default 1e-12, max-abs over the entries).

    python benchmarks/iterates_check.py --save before.npz
    python benchmarks/iterates_check.py --compare before.npz

The cases cover the compiled paths (float64 CPU tensors) and the torch paths (float32, and the
batched pair solves) of GSJOBCD, JJOBCD, OBCD, SparseOBCD and RSSM, and CayleyLBFGS on two
smooth O(J) costs (:mod:`orthoplug.problems.smooth_oj`), through the pymanopt and the geoopt
front-ends.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import autograd.numpy as anp
import geoopt
import numpy as np
import pymanopt
import torch

from orthoplug.adapters import geoopt as go
from orthoplug.adapters import pymanopt as pm
from orthoplug.nonsmooth import L0, L1
from orthoplug.oracles import QuadraticOracle
from orthoplug.problems.hevp import make_spd
from orthoplug.problems.smooth_oj import smooth_oj_problem

N, P = 12, 4
BUDGETS = (5, 40)
_A = np.random.default_rng(0).standard_normal((N, N))
C_PCA = _A @ _A.T
C_SPD = make_spd(N, seed=0)


def _problem(manifold, c: np.ndarray, x0: np.ndarray, oracle):
    """(pymanopt problem of ``tr(XᵀCX)``, start, oracle or ``None`` for autodiff)."""
    @pymanopt.function.autograd(manifold)
    def cost(x):
        return anp.trace(x.T @ c @ x)

    return pymanopt.Problem(manifold, cost), x0, oracle


def _stiefel():
    x0 = np.linalg.qr(np.random.default_rng(1).standard_normal((N, P)))[0]
    return _problem(pymanopt.manifolds.Stiefel(N, P), -C_PCA, x0,
                    QuadraticOracle(torch.from_numpy(C_PCA), scale=-1.0))


def _jorth(oracle: bool):
    def make():
        manifold = pm.JOrthogonal(N, p=5)
        np.random.seed(0)
        return _problem(manifold, C_SPD, manifold.random_point(),
                        QuadraticOracle(torch.from_numpy(C_SPD)) if oracle else None)
    return make


def _smooth(family: str, p: int):
    def make():
        prob = smooth_oj_problem(family, N, p, seed=0)
        manifold = pm.JOrthogonal(N, signature=prob.signature)
        np.random.seed(0)
        return prob.pymanopt_problem(manifold), manifold.random_point(), None
    return make


PYMANOPT: dict[str, tuple[Callable, dict]] = {
    "GSJOBCD-exact": (_jorth(True), dict(side="row")),
    "GSJOBCD-scalar": (_jorth(True), dict(side="row", curvature="scalar")),
    "GSJOBCD-autodiff": (_jorth(False), dict(side="row")),
    "JJOBCD-scalar": (_jorth(True), dict(curvature="scalar")),
    "JJOBCD-one-matching": (_jorth(True), dict(curvature="scalar", matchings=1,
                                               sigma_rule=50.0)),
    "JJOBCD-hessian": (_jorth(False), dict(curvature="hessian", side="column")),
    "OBCD-l1": (_stiefel, dict(h=L1(0.05))),
    "OBCD-l0": (_stiefel, dict(h=L0(0.01))),
    "SparseOBCD-l1": (_stiefel, dict(h=L1(0.05), prox_steps=5, candidates=4)),
    "RSSM": (_stiefel, {}),
    "CayleyLBFGS-lorentz": (_smooth("lorentz", 1), dict(min_gradient_norm=0.0)),
    "CayleyLBFGS-logcosh": (_smooth("logcosh", 6), dict(min_gradient_norm=0.0)),
}


def _pymanopt_case(name: str, budget: int) -> np.ndarray:
    from orthoplug import registry
    make, options = PYMANOPT[name]
    problem, x0, oracle = make()
    solver = registry.get(name.split("-")[0], "pymanopt")(max_iterations=budget, seed=3,
                                                          **options)
    return np.asarray(solver.run(problem, initial_point=x0, oracle=oracle).point)


def _geoopt_case(name: str, dtype: torch.dtype, budget: int) -> np.ndarray:
    from orthoplug import registry
    if name == "OBCD":
        x0 = torch.linalg.qr(torch.randn(N, P, dtype=torch.float64,
                                         generator=torch.Generator().manual_seed(1))).Q
        x = geoopt.ManifoldParameter(x0.to(dtype), manifold=geoopt.Stiefel())
        c, options = torch.from_numpy(-C_PCA).to(dtype), dict(h=L1(0.05))
    else:  # CayleyLBFGS: the Lorentz fit (a quadratic is in its rounding tail by 40 steps)
        p = 1 if name == "CayleyLBFGS" else 5
        manifold = go.JOrthogonal(N, p)
        x0 = manifold.geometry.random_point(generator=torch.Generator().manual_seed(1), cond=3.0)
        x = geoopt.ManifoldParameter(x0.to(dtype), manifold=manifold)
        c, options = torch.from_numpy(C_SPD).to(dtype), {}
    opt = registry.get(name, "geoopt")([x], seed=3, **options)
    lorentz = smooth_oj_problem("lorentz", N, 1, seed=0)

    def closure(*_):
        opt.zero_grad()
        loss = lorentz.torch_cost(x) if name == "CayleyLBFGS" else torch.trace(x.mT @ c @ x)
        loss.backward()
        return loss

    for _ in range(budget):
        opt.step(closure)
    return x.detach().to(torch.float64).numpy().copy()


def run_all() -> dict[str, np.ndarray]:
    """Every case's point after every budget, keyed ``front/case/dtype/budget``."""
    out = {}
    for budget in BUDGETS:
        for name in PYMANOPT:
            out[f"pymanopt/{name}/float64/{budget}"] = _pymanopt_case(name, budget)
        for name in ("GSJOBCD", "JJOBCD", "OBCD", "CayleyLBFGS"):
            for dtype in (torch.float64, torch.float32):
                out[f"geoopt/{name}/{dtype}/{budget}"] = _geoopt_case(name, dtype, budget)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--save")
    group.add_argument("--compare")
    parser.add_argument("--tol", type=float, default=1e-12)
    args = parser.parse_args()
    points = run_all()
    if args.save:
        np.savez(args.save, **points)
        print(f"saved {len(points)} points to {args.save}")
        return
    ref = np.load(args.compare)
    worst = 0.0
    for key, x in points.items():
        diff = float(np.abs(x - ref[key]).max())
        worst = max(worst, diff) if "float32" not in key else worst
        flag = "ok" if diff <= args.tol else "DIFFERENT"
        print(f"{key:45s} max|Δ| = {diff:.2e}  {flag}")
    print(f"worst float64 difference: {worst:.2e}")


if __name__ == "__main__":
    main()
