"""OBCD's defaults (``pairs=None``, ``sigma_rule="backtracking"``): evidence, not a test.

Two modes:

* ``iterates``: the objective of every OBCD row of the quick suite (ℓ0-/ℓ1-SPCA, NN-PCA; OBCD,
  OBCD-Jacobi, OBCD-rnd, OBCD-sparse) after a fixed iteration budget, printed as hex floats.
  Run it in two checkouts and diff the output: equal lines are equal iterates.
* ``orders``: the pymanopt door on a cost without row gradients (its autodiff cost
  ``−tr(XᵀCX)``), the pair order it took before the default rule (``pairs="random"``: one
  pair per gradient) against the default (``pairs=None``, resolved to ``"jacobi"``: a matching
  per gradient), with the same iteration budget, i.e. the same number of gradients, and the
  random order also with 3 times the budget (more time than the Jacobi run takes: a matching
  solves ⌊n/2⌋ subproblems per gradient); methods interleaved per seed in one process.
  ℓ1-SPCA from a random start and NN-PCA from ``I(n, r)``.

::

    OMP_NUM_THREADS=1 python benchmarks/obcd_defaults.py iterates --iterations 100
    OMP_NUM_THREADS=1 python benchmarks/obcd_defaults.py orders --iterations 200 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json

import autograd.numpy as anp
import pymanopt
import torch

from orthoplug.adapters import pymanopt as pm
from orthoplug.bench.runner import plan
from orthoplug.bench.suites.obcd import spca_datasets, spca_lambda
from orthoplug.problems import spca

ROWS = ["OBCD", "OBCD-Jacobi", "OBCD-rnd", "OBCD-sparse"]


def iterates(iterations: int) -> None:
    """Print ``problem dataset solver iterations objective.hex()`` per quick-suite OBCD row."""
    p = plan("quick", problems=["l0-spca", "l1-spca", "nn-pca"], solvers=ROWS)
    for exp, instances, methods in p.items:
        for inst in instances:
            for m in methods:
                out = m.runner(exp, inst, seed=0, time_limit=1e9,
                               **{**m.options, "max_iterations": iterations})
                objective = exp.evaluate(inst, out.point)["objective"]
                print(exp.name, inst.dataset, m.name, out.iterations, float(objective).hex(),
                      flush=True)


def _problem(c: torch.Tensor, r: int) -> pymanopt.Problem:
    cn = c.numpy()
    manifold = pymanopt.manifolds.Stiefel(c.shape[0], r)

    @pymanopt.function.autograd(manifold)
    def cost(x):
        return -anp.trace(x.T @ cn @ x)

    return pymanopt.Problem(manifold, cost)


def orders(iterations: int, seeds: list[int], r: int) -> list[dict]:
    """F after ``iterations`` gradients for the two pair orders, per dataset, problem, seed."""
    rows = []
    for name, a in spca_datasets("quick").items():
        c = spca.covariance(a)
        n = c.shape[0]
        for kind in ("l1", "nn"):
            prob = (spca.l1_spca(c, r, spca_lambda(c, "l1")) if kind == "l1"
                    else spca.nn_pca(c, r))
            problem = _problem(c, r)
            for seed in seeds:
                x0 = prob.initial_point("random" if kind == "l1" else "identity", seed)
                for label, pairs, budget in (("random (old default)", "random", iterations),
                                             ("random, 3x budget", "random", 3 * iterations),
                                             ("None -> jacobi (default)", None, iterations)):
                    res = pm.OBCD(h=prob.h, pairs=pairs, max_iterations=budget,
                                  seed=seed).run(problem, initial_point=x0.numpy())
                    info = res.solver_result.info
                    rows.append(dict(dataset=name, n=n, r=r, problem=kind, seed=seed,
                                     order=label, resolved=info["pairs"], cost=res.cost,
                                     gradients=res.solver_result.gradient_evaluations,
                                     block_updates=info["block_updates"],
                                     time=res.time))
                    print(f"{name:14s} {kind:3s} seed {seed} {label:25s} F = {res.cost:.6f} "
                          f"gradients {rows[-1]['gradients']:.0f} "
                          f"updates {info['block_updates']} time {res.time:.2f} s", flush=True)
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("iterates", "orders"))
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--r", type=int, default=10)
    ap.add_argument("--out", default=None, help="JSON file for the orders rows")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.mode == "iterates":
        iterates(args.iterations)
        return
    rows = orders(args.iterations, args.seeds, args.r)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
