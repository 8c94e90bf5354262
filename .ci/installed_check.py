"""Checks an installed orthoplug from outside the source tree (run by ``.ci/check_install.sh``).

``python installed_check.py SOURCE_TREE`` imports every module of the installed package (walked
with ``pkgutil``), checks ``orthoplug.__version__`` against the distribution's metadata, runs one
pymanopt and one geoopt optimizer on tiny problems, and checks that a timed run's clock leaves
numba's compilation out: a first run with ``max_time`` shorter than a cold compile still does
its iterations, before and after :func:`orthoplug.warm_up`. Exits non-zero on any failure.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import sys
import time
from pathlib import Path


def main(source_tree: str) -> int:
    import orthoplug

    location = Path(orthoplug.__file__).resolve()
    source = Path(source_tree).resolve()
    assert source not in location.parents, f"imported from the source tree: {location}"
    print("orthoplug", orthoplug.__version__, "from", location.parent)
    assert orthoplug.__version__ == importlib.metadata.version("orthoplug")
    names = [m.name for m in pkgutil.walk_packages(orthoplug.__path__, "orthoplug.")
             if not m.name.endswith(".__main__")]  # importing __main__ runs the command
    for name in names:
        importlib.import_module(name)
    missing = {"orthoplug.adapters.pymanopt", "orthoplug.adapters.geoopt",
               "orthoplug.oracles"} - set(names)
    assert not missing, f"not installed: {sorted(missing)}"
    print(f"imported {len(names)} modules")

    import numpy as np
    import torch

    from orthoplug.geometry.stiefel import StiefelGeometry
    from orthoplug.nonsmooth import L1
    from orthoplug.oracles import QuadraticOracle
    from orthoplug.solvers.obcd import OBCD

    # a timed run whose kernels are not compiled yet: the clock must leave compilation out
    rng = np.random.default_rng(0)
    a = rng.standard_normal((40, 12))
    c = torch.from_numpy(-(a.T @ a) / 40)
    x0 = torch.linalg.qr(torch.from_numpy(rng.standard_normal((12, 3))))[0]
    for label in ("before warm_up", "after warm_up"):
        began = time.perf_counter()
        solver = OBCD(L1(0.05), seed=0, max_time=0.2)
        res = solver.run(QuadraticOracle(c), x0, StiefelGeometry(12, 3))
        wall = time.perf_counter() - began
        print(f"OBCD {label}: {res.iterations} iterations in {res.time:.3f} s "
              f"(compile {res.compile_time:.2f} s, wall {wall:.2f} s)")
        assert res.iterations >= 20, "the timed run was spent compiling"
        if label == "before warm_up":
            began = time.perf_counter()
            orthoplug.warm_up()
            print(f"orthoplug.warm_up(): {time.perf_counter() - began:.1f} s")

    import autograd.numpy as anp
    import geoopt
    import pymanopt

    from orthoplug.adapters import geoopt as og
    from orthoplug.adapters import pymanopt as op
    from orthoplug.problems.hevp import make_spd, trace_min_certificate

    cm = make_spd(8, seed=1)
    manifold = op.JOrthogonal(8, p=4)

    @pymanopt.function.autograd(manifold)
    def cost(x):
        return anp.trace(x.T @ cm @ x)

    certificate = trace_min_certificate(cm, manifold.signature)
    result = op.GSJOBCD(max_iterations=20000, seed=0, verbosity=0,
                        target_cost=certificate * (1 + 1e-9)).run(pymanopt.Problem(manifold, cost))
    print(f"pymanopt GSJOBCD: cost {result.cost:.10f}, certificate {certificate:.10f}, "
          f"violation {manifold.violation(result.point):.1e}")
    assert result.cost <= certificate * (1 + 1e-8) and manifold.violation(result.point) < 1e-10

    jman = og.JOrthogonal(6, p=3)
    ct = torch.from_numpy(make_spd(6, seed=0))
    param = geoopt.ManifoldParameter(torch.eye(6, dtype=torch.float64), manifold=jman)
    opt = og.JJOBCD([param], seed=0)

    def closure():
        opt.zero_grad()
        loss = torch.einsum("ij,ik,kj->", param, ct, param)
        loss.backward()
        return loss

    first = closure().item()
    for _ in range(200):
        loss = opt.step(closure)
    violation = float(jman.geometry.violation(param.detach()))
    print(f"geoopt JJOBCD: loss {first:.6f} -> {loss.item():.6f}, violation {violation:.1e}")
    assert loss.item() < first and violation < 1e-10
    print("installed package: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
