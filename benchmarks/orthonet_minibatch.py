"""Minibatch training of orthogonal weights: every optimizer of Stiefel parameters at equal epochs.

    OMP_NUM_THREADS=1 python benchmarks/orthonet_minibatch.py             # 10 epochs, seeds 0-4
    OMP_NUM_THREADS=1 python benchmarks/orthonet_minibatch.py --json out.json --seeds 0 1 2

The model and data are :func:`orthoplug.training.orthonet.train_orthonet`'s (two Stiefel hidden
layers of width 128 on scikit-learn's digits, minibatches of 16, float32, the other parameters by
SGD at 0.1). Each method trains ``--epochs`` epochs from the same initialisation per seed; the
methods are interleaved per seed. ``frozen`` is the control: the Stiefel weights stay at their
initialisation and only the other parameters train, so a method trains its orthogonal weights
iff it ends above it. Printed: the test accuracy per seed, their mean, and the largest
``‖WᵀW − I‖_F``.

No learning rate is tuned here: orthoplug's OBCD and RSSM run with their defaults (OBCD:
``lr = 1``, the Jacobi matching; RSSM: the automatic ``γ₀`` and the diminishing schedule), RSDM
and geoopt's optimizers with the rsdm suite's Stiefel learning rates
(:class:`~orthoplug.bench.suites.rsdm.OrthonetExperiment`).
"""

from __future__ import annotations

import argparse
import json

import torch

from orthoplug.training.orthonet import train_orthonet

#: (label, optimizer, Stiefel lr, options): the control, orthoplug's optimizers (and OBCD's former
#: default working set, which did not train), geoopt's optimizers
METHODS = (
    ("frozen", "frozen", 0.0, {}),
    ("OBCD", "OBCD", 1.0, {}),
    ("OBCD random pair", "OBCD", 1.0, {"pairs": "random"}),
    ("RSDM", "RSDM", 0.05, {}),
    ("RSSM", "RSSM", "diminishing", {}),
    ("geoopt RiemannianSGD", "RiemannianSGD", 0.02, {}),
    ("geoopt RiemannianAdam", "RiemannianAdam", 3e-3, {}),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2, 3, 4])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = {label: {"optimizer": name, "lr": lr, "options": options, "accuracy": [],
                    "violation": []} for label, name, lr, options in METHODS}
    for seed in args.seeds:  # interleaved: every method once per seed
        for label, name, lr, options in METHODS:
            res = train_orthonet(name, epochs=args.epochs, lr=lr, seed=seed,
                                 options=options or None)
            rows[label]["accuracy"].append(res.accuracy)
            rows[label]["violation"].append(res.violation)
            print(f"seed {seed}  {label:<22s} accuracy {res.accuracy:.4f}  "
                  f"violation {res.violation:.1e}", flush=True)
    control = sum(rows["frozen"]["accuracy"]) / len(args.seeds)
    print(f"\n{args.epochs} epochs, seeds {args.seeds}")
    for label, row in rows.items():
        row["mean_accuracy"] = sum(row["accuracy"]) / len(row["accuracy"])
        row["beats_frozen_every_seed"] = all(
            a > f for a, f in zip(row["accuracy"], rows["frozen"]["accuracy"], strict=True))
        print(f"{label:<22s} mean {row['mean_accuracy']:.4f} ({row['mean_accuracy'] - control:+.4f}"
              f" vs frozen)  per seed {[round(a, 4) for a in row['accuracy']]}  "
              f"max violation {max(row['violation']):.1e}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"epochs": args.epochs, "seeds": args.seeds, "methods": rows}, fh,
                      indent=1)


if __name__ == "__main__":
    main()
