"""Minibatch training of orthogonal weights: every optimizer of Stiefel parameters at equal epochs.

    OMP_NUM_THREADS=1 python benchmarks/orthonet_minibatch.py                # digits, seeds 0-9
    OMP_NUM_THREADS=1 python benchmarks/orthonet_minibatch.py --tasks digits-96x3 breast_cancer \\
        --seeds 10 11 12 --json part.json
    python benchmarks/orthonet_minibatch.py --merge part1.json part2.json --json all.json

The model and data are :func:`orthoplug.training.orthonet.train_orthonet`'s (Stiefel hidden
layers, minibatches of 16, float32). A method is the optimizer of the Stiefel weights and the
optimizer of the other parameters (the output layer and the biases): ``torch.optim.SGD`` at 0.1
(``+ SGD``) or ``torch.optim.Adam`` at :data:`~orthoplug.training.orthonet.ADAM_LR` (``+ Adam``;
geoopt's RiemannianAdam and orthoplug's Adam-preconditioned J-JOBCD take that learning rate for
all parameters). Each method trains ``--epochs`` epochs from the same initialisation and
minibatches per seed; the methods are interleaved per seed. ``frozen`` is the control: the
Stiefel weights stay at their initialisation and only the other parameters train.

Tasks (:data:`TASKS`): ``digits`` (St(128, 64) and St(128, 128), the tuned instance) and two
held-out ones no learning rate was chosen on, ``digits-96x3`` (three Stiefel layers of width 96,
seeds from 10 on: other splits too) and ``breast_cancer`` (St(64, 30), St(64, 64), 2 classes).
The learning rates are fixed (:data:`METHODS`): OBCD's default ``lr = 1``, RSSM's
``lr="diminishing"`` (the automatic γ₀, γ_k = γ₀/√(k+1)), the rsdm suite's Stiefel learning
rates (RSDM 0.05, RiemannianSGD 0.02, RiemannianAdam 3e-3), and σ = 1/lr for the J-JOBCD with lr
the host's Adam learning rate.

Printed per task and method: the mean test accuracy ± its standard error over the seeds, the
mean paired difference to geoopt's RiemannianAdam (with Adam on the other parameters) and to the
control with the same optimizer of the other parameters (± the standard error of the mean
difference), and the verdicts of :func:`verdicts`. The JSON file holds the per-seed results, the
summary and one benchmark record per task and method (the mean accuracy; ``experiment``
``"orthonet"``), the evidence format of ``docs/results/recommendations.json``.
"""

from __future__ import annotations

import argparse
import json
import math

import torch

from orthoplug.training.orthonet import ADAM_LR, STIEFEL_LR, train_orthonet

#: (label, Stiefel optimizer, its lr, optimizer of the other parameters)
METHODS = (
    ("frozen + SGD", "frozen", "sgd"),
    ("OBCD + SGD", "OBCD", "sgd"),
    ("RSDM + SGD", "RSDM", "sgd"),
    ("RSSM + SGD", "RSSM", "sgd"),
    ("geoopt RiemannianSGD", "RiemannianSGD", "sgd"),
    ("geoopt RiemannianAdam + SGD", "RiemannianAdam", "sgd"),
    ("frozen + Adam", "frozen", "adam"),
    ("OBCD + Adam", "OBCD", "adam"),
    ("RSDM + Adam", "RSDM", "adam"),
    ("RSSM + Adam", "RSSM", "adam"),
    ("JJOBCD-Adam (J = I)", "JJOBCD", "adam"),
    ("geoopt RiemannianAdam", "RiemannianAdam", "adam"),
)
METHODS = tuple((label, name, STIEFEL_LR[name], other) for label, name, other in METHODS)
REFERENCE = "geoopt RiemannianAdam"
CONTROL = {"sgd": "frozen + SGD", "adam": "frozen + Adam"}
OTHER_LR = {"sgd": 0.1, "adam": ADAM_LR}
#: task → (train_orthonet's data and sizes, default seeds)
TASKS = {
    "digits": (dict(data="digits", hidden=128, layers=2, r=64), list(range(10))),
    "digits-96x3": (dict(data="digits", hidden=96, layers=3, r=48), list(range(10, 20))),
    "breast_cancer": (dict(data="breast_cancer", hidden=64, layers=2, r=32), list(range(10))),
}


def run_task(task: str, seeds: list[int], epochs: int, only: list[str] | None,
             save=None) -> dict:
    """Per-seed results of every method (interleaved per seed, in the order of ``only`` if
    given) on ``task``; ``save(result so far)`` is called after each run."""
    sizes, _ = TASKS[task]
    by_label = {m[0]: m for m in METHODS}
    methods = [by_label[label] for label in only] if only else list(METHODS)
    rows = {label: {"optimizer": name, "lr": lr, "other": other, "other_lr": OTHER_LR[other],
                    "seeds": [], "accuracy": [], "loss": [], "violation": [], "seconds": [],
                    "history": []} for label, name, lr, other in methods}
    result = {"sizes": sizes, "methods": rows}
    for seed in seeds:
        for label, name, lr, other in methods:
            res = train_orthonet(name, epochs=epochs, lr=lr, seed=seed, other=other,
                                 other_lr=OTHER_LR[other], **sizes)
            row = rows[label]
            row["seeds"].append(seed)
            row["accuracy"].append(res.accuracy)
            row["loss"].append(res.history[-1][1])
            row["violation"].append(res.violation)
            row["seconds"].append(res.history[-1][0])
            row["history"].append([[round(t, 3), loss, acc] for t, loss, acc in res.history])
            print(f"{task} seed {seed}  {label:<28s} accuracy {res.accuracy:.4f}  train loss "
                  f"{res.history[-1][1]:.4f}  violation {res.violation:.1e}", flush=True)
            if save is not None:
                save(result)
    return result


def _mean_se(values: list[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else math.nan
    return mean, math.sqrt(var / n)


def _paired(row: dict, base: dict) -> tuple[float, float]:
    """Mean and standard error of ``row − base`` over their common seeds."""
    by_seed = dict(zip(base["seeds"], base["accuracy"], strict=True))
    return _mean_se([a - by_seed[s] for s, a in zip(row["seeds"], row["accuracy"], strict=True)
                     if s in by_seed])


def verdicts(row: dict, reference: dict | None, control: dict | None) -> dict:
    """The stated criteria, on the paired per-seed accuracy differences ``d`` (mean ``d̄``,
    standard error ``se``):

    * *matches RiemannianAdam*: ``d̄ ≥ −se`` against it (not behind by more than one standard
      error); *ahead*: ``d̄ > 2 se``;
    * *beats the control*: ``d̄ > 2 se`` against the frozen control with the same optimizer of
      the other parameters, and the final training loss below the control's on every seed.
    """
    out = {}
    if reference is not None:
        d, se = _paired(row, reference)
        out.update(vs_reference=d, vs_reference_se=se, matches_reference=d >= -se,
                   ahead_of_reference=d > 2 * se)
    if control is not None:
        d, se = _paired(row, control)
        by_seed = dict(zip(control["seeds"], control["loss"], strict=True))
        lower = all(a < by_seed[s] for s, a in zip(row["seeds"], row["loss"], strict=True)
                    if s in by_seed)
        out.update(vs_control=d, vs_control_se=se, loss_below_control_every_seed=lower,
                   beats_control=d > 2 * se and lower)
    return out


def summarise(tasks: dict, epochs: int) -> list[dict]:
    """Add each method's summary to ``tasks`` (printed) and return one benchmark record per task
    and method."""
    records = []
    for task, data in tasks.items():
        rows = data["methods"] = {label: row for label, row in data["methods"].items()
                                  if row["seeds"]}
        seeds = sorted({s for row in rows.values() for s in row["seeds"]})
        print(f"\n{task} ({data['sizes']}), {epochs} epochs, seeds {seeds}")
        for label, row in rows.items():
            mean, se = _mean_se(row["accuracy"])
            control = rows.get(CONTROL[row["other"]])
            summary = {"mean_accuracy": mean, "se": se,
                       "mean_loss": sum(row["loss"]) / len(row["loss"]),
                       "max_violation": max(row["violation"]),
                       **verdicts(row, rows.get(REFERENCE) if label != REFERENCE else None,
                                  control if control is not row else None)}
            row["summary"] = summary
            ref = (f"vs RAdam {summary['vs_reference']:+.4f} ± {summary['vs_reference_se']:.4f}"
                   f"{' matches' if summary['matches_reference'] else ' behind'}"
                   if "vs_reference" in summary else "")
            ctl = (f"vs control {summary['vs_control']:+.4f} ± {summary['vs_control_se']:.4f}"
                   f"{' beats' if summary['beats_control'] else ''}"
                   if "vs_control" in summary else "")
            print(f"{label:<28s} {mean:.4f} ± {se:.4f}  loss {summary['mean_loss']:.4f}  "
                  f"{ref:<34s} {ctl:<32s} max violation {summary['max_violation']:.1e}")
            epochs_run = min(len(h) for h in row["history"])
            curve_t = [sum(h[e][0] for h in row["history"]) / len(row["history"])
                       for e in range(epochs_run)]
            curve_f = [1.0 - sum(h[e][2] for h in row["history"]) / len(row["history"])
                       for e in range(epochs_run)]
            records.append({
                "suite": "rsdm", "experiment": "orthonet", "dataset": task,
                "sizes": data["sizes"], "solver": label, "family": "torch",
                "options": {"lr": row["lr"], "other": row["other"],
                            "other_lr": row["other_lr"]},
                "seed": row["seeds"], "scale": "minibatch", "time_limit": None, "status": "ok",
                "objective": 1.0 - mean, "optimum": None, "gap": None,
                "violation": summary["max_violation"], "iterations": epochs_run,
                "time": curve_t[-1], "target_gap": None, "time_to_target": None,
                "feasible": summary["max_violation"] < 1e-3,
                "note": f"mean over {len(row['seeds'])} seeds", "metrics": {"accuracy": mean},
                "history": {"time": curve_t, "objective": curve_f}, "message": "",
                "schema": 1})
    return records


def merge(files: list[str]) -> tuple[dict, int]:
    """The tasks of several JSON files of this benchmark, seeds concatenated in seed order."""
    tasks: dict = {}
    epochs = None
    for file in files:
        with open(file) as fh:
            saved = json.load(fh)
        if epochs not in (None, saved["epochs"]):
            raise ValueError(f"{file}: {saved['epochs']} epochs, the others {epochs}")
        epochs = saved["epochs"]
        for task, data in saved["tasks"].items():
            into = tasks.setdefault(task, {"sizes": data["sizes"], "methods": {}})
            for label, row in data["methods"].items():
                row = {k: v for k, v in row.items() if k != "summary"}
                if label not in into["methods"]:
                    into["methods"][label] = row
                    continue
                have = into["methods"][label]
                for key in ("seeds", "accuracy", "loss", "violation", "seconds", "history"):
                    have[key] += row[key]
    for data in tasks.values():
        for row in data["methods"].values():
            order = sorted(range(len(row["seeds"])), key=row["seeds"].__getitem__)
            for key in ("seeds", "accuracy", "loss", "violation", "seconds", "history"):
                row[key] = [row[key][i] for i in order]
    return tasks, epochs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--tasks", nargs="*", default=["digits"], choices=list(TASKS))
    parser.add_argument("--seeds", type=int, nargs="*", default=None,
                        help="default: the task's (digits 0-9)")
    parser.add_argument("--only", nargs="*", default=None, choices=[m[0] for m in METHODS],
                        help="method labels, run in this order")
    parser.add_argument("--merge", nargs="*", default=None, help="JSON files to combine")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.merge:
        tasks, epochs = merge(args.merge)
    else:
        torch.set_num_threads(1)
        epochs = args.epochs
        tasks = {}

        def save(partial: dict) -> None:  # the runs so far, should the process be stopped
            if args.json:
                with open(args.json, "w") as fh:
                    json.dump({"epochs": epochs, "tasks": {**tasks, task: partial}}, fh)

        for task in args.tasks:
            tasks[task] = run_task(task, args.seeds or TASKS[task][1], epochs, args.only, save)
    records = summarise(tasks, epochs)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"epochs": epochs, "tasks": tasks, "records": records}, fh, indent=1)


if __name__ == "__main__":
    main()
