"""UltraE knowledge-graph embedding: J-JOBCD vs RiemannianAdam on the relation matrices.
=====================================================================================

Loads Nations (or ``--dataset kinships|umls|synthetic``), trains UltraE twice from the same
seed — relations by J-JOBCD, then by geoopt's RiemannianAdam; entities by Adam in both — and
prints filtered test MRR / Hits@k, training time and the J-orthogonality violation.

Real data sets need ``pip install "orthoplug[kg]"`` (the triples ship with pykeen). A quick run::

    python examples/ultrae_kg.py --dataset synthetic --epochs 2
"""

from __future__ import annotations

import argparse

import torch

from orthoplug.problems.kg import KG_DATASETS, load_kg, synthetic_kg
from orthoplug.training.ultrae import train_ultrae


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--dataset", default="nations", choices=(*KG_DATASETS, "synthetic"))
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--negatives", type=int, default=50, help="k, negatives per positive")
    parser.add_argument("--dim", type=int, default=36, help="n = p + q")
    parser.add_argument("--p", type=int, default=18, help="positive directions of J")
    parser.add_argument("--entity-lr", type=float, default=5e-2)
    parser.add_argument("--relation-lr", type=float, default=None,
                        help="relation learning rate (default: each optimizer's, see "
                             "train_ultrae)")
    parser.add_argument("--synthetic-entities", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    if args.dataset == "synthetic":
        data = synthetic_kg(args.synthetic_entities, 4, 4 * args.synthetic_entities, args.seed)
    else:
        data = load_kg(args.dataset)
    print(f"{data.name}: {data.num_entities} entities, {data.num_relations} relations, "
          f"{len(data.train)}/{len(data.valid)}/{len(data.test)} triples")
    print(f"{'relations by':<15}{'MRR':>7}{'H@1':>7}{'H@3':>7}{'H@10':>7}{'time/s':>8}"
          f"{'viol':>10}")
    for name in ("JJOBCD", "RiemannianAdam"):
        res = train_ultrae(data, relation_optimizer=name, epochs=args.epochs,
                           batch_size=args.batch_size, num_negatives=args.negatives,
                           dim=args.dim, p=args.p, entity_lr=args.entity_lr,
                           relation_lr=args.relation_lr, seed=args.seed,
                           eval_every=args.epochs)
        m = res.test
        print(f"{name:<15}{m['mrr']:7.3f}{m['hits@1']:7.3f}{m['hits@3']:7.3f}"
              f"{m['hits@10']:7.3f}{res.train_seconds:8.1f}{res.violation:10.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
