"""An MLP with orthogonal hidden layers on scikit-learn's digits: geoopt RSDM vs RiemannianSGD.
============================================================================================

::

    python examples/orthogonal_mlp.py                # hidden 128, 2 Stiefel layers, 10 epochs
    python examples/orthogonal_mlp.py --epochs 20 --r 32 --optimizers RSDM RiemannianAdam

The hidden weights are ``geoopt.ManifoldParameter``\\ s on geoopt's Stiefel manifold; swapping
``geoopt.optim.RiemannianSGD(groups, lr=...)`` for ``orthoplug.adapters.geoopt.RSDM(groups,
lr=..., r=...)`` is the only change (``orthoplug.training.orthonet.make_optimizer``). Each run
prints the test accuracy per epoch and ‖WᵀW − I‖ at the end; the baseline is the other optimizer
trained in the same process from the same initialisation. Needs scikit-learn.
"""

from __future__ import annotations

import argparse

from orthoplug.training.orthonet import OPTIMIZERS, OTHER_OPTIMIZERS, STIEFEL_LR, train_orthonet


def main(argv: list[str] | None = None) -> int:
    """Train one model per optimizer; exit code 1 if a result is not orthonormal or the first
    optimizer's accuracy falls below ``--min-accuracy``."""
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--optimizers", nargs="+", choices=OPTIMIZERS,
                        default=["RSDM", "RiemannianSGD"])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--hidden", type=int, default=128, help="width (>= 64)")
    parser.add_argument("--layers", type=int, default=2, help="Stiefel layers")
    parser.add_argument("--r", type=int, default=64, help="RSDM slice dimension (<= hidden)")
    parser.add_argument("--time-limit", type=float, default=None, help="seconds per run")
    parser.add_argument("--min-accuracy", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--other", choices=OTHER_OPTIMIZERS, default="adam",
                        help="optimizer of the other (unconstrained) parameters")
    args = parser.parse_args(argv)

    results = []
    for name in args.optimizers:
        res = train_orthonet(name, epochs=args.epochs, lr=STIEFEL_LR[name], r=args.r,
                             other=args.other, seed=args.seed, time_limit=args.time_limit,
                             hidden=args.hidden, layers=args.layers)
        results.append(res)
        curve = " ".join(f"{acc:.3f}" for _, _, acc in res.history)
        print(f"{name:<15} lr {STIEFEL_LR[name]!s:<11} test accuracy per epoch: {curve}")
        print(f"{'':<15} final {res.accuracy:.4f} after {res.epochs} epochs "
              f"({res.history[-1][0]:.1f} s), max ‖WᵀW − I‖_F = {res.violation:.1e}")
    ok = results[0].accuracy >= args.min_accuracy and all(r.violation < 1e-4 for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
