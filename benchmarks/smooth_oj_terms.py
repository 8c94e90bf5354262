r"""Per-iteration terms of orthoplug's default (:class:`~orthoplug.solvers.lbfgs.CayleyLBFGS`) and
pymanopt's ConjugateGradient on one smooth O(J) instance (:mod:`orthoplug.problems.smooth_oj`).

Each term is the CPU time (``time.process_time``, one thread) spent inside a group of calls,
summed over a run of ``--iterations`` iterations and divided by them (median over ``--rounds``
runs of each method, interleaved): the autodiff gradient and the cost values (the problem's own
functions), and for CayleyLBFGS the Cayley solve, the algebra gradient, the violation, a new
secant pair (products and middle matrix), the direction, the oracle's finiteness checks; for CG
the pymanopt manifold's operations. Groups are timed exclusively (a call inside another timed
call counts for the outer one only), except the ``(incl.)`` rows, which include what they call;
``rest`` is the run's time less the exclusive groups (the run loop, the line search and the
L-BFGS glue, Python). The timers add about 1 µs per timed call. The same script runs on an
older checkout (``PYTHONPATH``) for a before/after table, two processes side by side::

    python benchmarks/smooth_oj_terms.py --family lorentz --n 30 --p 1
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy / torch load their BLAS

import argparse  # noqa: E402
import functools  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

_TOTALS: dict[str, float] = {}
_CALLS: dict[str, int] = {}
_DEPTH = [0]


def _timed(name: str, f, inclusive: bool = False):
    """``f`` with its CPU time added to ``_TOTALS[name]`` (exclusive groups: outermost only)."""
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        if _DEPTH[0] and not inclusive:
            return f(*args, **kwargs)
        _DEPTH[0] += not inclusive
        began = time.process_time()
        try:
            return f(*args, **kwargs)
        finally:
            _TOTALS[name] = _TOTALS.get(name, 0.0) + time.process_time() - began
            _CALLS[name] = _CALLS.get(name, 0) + 1
            _DEPTH[0] -= not inclusive
    return wrapper


def _instrument() -> None:
    from orthoplug.adapters import _pymanopt_base
    from orthoplug.geometry import jorthogonal
    from orthoplug.geometry.manifolds import JOrthogonalGeometry
    from orthoplug.oracles import core
    from orthoplug.solvers import lbfgs

    jorthogonal.cayley_step = _timed("Cayley solve", jorthogonal.cayley_step)
    jorthogonal.algebra_gradient = _timed("algebra gradient", jorthogonal.algebra_gradient)
    JOrthogonalGeometry.violation = _timed("violation", JOrthogonalGeometry.violation)
    lbfgs.LBFGSMemory.add = _timed("new pair (products, M, H0)", lbfgs.LBFGSMemory.add)
    lbfgs.LBFGSMemory.direction = _timed("direction H a", lbfgs.LBFGSMemory.direction)
    core.FunctionOracle._checked = staticmethod(_timed("oracle finiteness checks",
                                                       core.FunctionOracle._checked))
    lbfgs.CayleyLBFGS.measure = _timed("evaluation: measure (incl.)", lbfgs.CayleyLBFGS.measure,
                                       True)
    lbfgs.CayleyLBFGS.step = _timed("step (incl.)", lbfgs.CayleyLBFGS.step, True)
    manifold = _pymanopt_base._GeometryManifold
    for name in ("retraction", "transport", "inner_product", "norm",
                 "euclidean_to_riemannian_gradient"):
        setattr(manifold, name, _timed("manifold." + name, getattr(manifold, name)))


def _run(problem_def, x0: np.ndarray, method: str, iterations: int):
    import pymanopt

    from orthoplug.adapters import pymanopt as pm

    problem = problem_def.pymanopt_problem(pm.JOrthogonal(problem_def.n,
                                                          signature=problem_def.signature))
    problem._cost = _timed("cost value", problem._cost)
    problem._euclidean_gradient = _timed("gradient (autodiff)", problem.euclidean_gradient)
    if method == "CG":
        opt = pymanopt.optimizers.ConjugateGradient(max_iterations=iterations,
                                                    min_gradient_norm=0.0, verbosity=0)
    else:
        opt = pm.CayleyLBFGS(max_iterations=iterations, min_gradient_norm=0.0)
    _TOTALS.clear()
    _CALLS.clear()
    began = time.process_time()
    res = opt.run(problem, initial_point=x0)
    return res.iterations, time.process_time() - began, dict(_TOTALS), dict(_CALLS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", default="lorentz")
    parser.add_argument("--n", type=int, default=30)
    parser.add_argument("--p", type=int, default=1)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from orthoplug.adapters.pymanopt import JOrthogonal
    from orthoplug.problems.smooth_oj import smooth_oj_problem

    _instrument()
    prob = smooth_oj_problem(args.family, args.n, args.p, seed=0)
    np.random.seed(1000 + args.start)  # the start of benchmarks/smooth_oj.py
    x0 = JOrthogonal(args.n, args.p).random_point()
    methods = ("default", "CG")
    for method in methods:  # warm-up
        _run(prob, x0, method, 5)
    runs: dict[str, list] = {m: [] for m in methods}
    for r in range(args.rounds):
        for method in (methods if r % 2 == 0 else methods[::-1]):
            runs[method].append(_run(prob, x0, method, args.iterations))
    print(f"{args.family} n={args.n} p={args.p} start={args.start}: µs per iteration, median "
          f"of {args.rounds} runs of {args.iterations} iterations")
    for method, rs in runs.items():
        its = rs[0][0]
        total = float(np.median([r[1] for r in rs])) / its * 1e6
        print(f"{method}: {its} iterations, {total:.0f} µs per iteration")
        rest = total
        for name in sorted({k for r in rs for k in r[2]}):
            value = float(np.median([r[2].get(name, 0.0) for r in rs])) / its * 1e6
            if "(incl.)" not in name:
                rest -= value
            print(f"   {name:36s} {value:8.1f}  ({rs[0][3].get(name, 0) / its:.2f} calls)")
        print(f"   {'rest':36s} {rest:8.1f}")


if __name__ == "__main__":
    main()
