"""UltraE trained data parallel with torch.distributed (J-JOBCD on the relations).
===============================================================================

Launch on one machine with two CPU processes (gloo, loopback)::

    torchrun --standalone --nproc_per_node=2 examples/distributed_ultrae.py --dataset synthetic

Every rank builds the same model from the same seed, draws the same shuffles, and trains on its
share of each minibatch, drawing only that share's negatives (each fixed chunk of a minibatch has
its own seeded generator, so the ranks draw what one process would); ``DistributedDataParallel``
averages the gradients and J-JOBCD decides its σ backtracking on the loss averaged over the
ranks, so the replicas stay identical (checked every ``--replica-check-every`` steps, and once
more at the end) and equal a one-process run on the whole minibatches. Run without
``torchrun`` it is that one-process run::

    python examples/distributed_ultrae.py --dataset synthetic

GPUs (NCCL, not run here: this script and :func:`~orthoplug.training.ultrae.train_ultrae` keep
the model on the CPU): in your own DDP script, start one process per GPU, call
``torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))`` and
``dist.init_process_group("nccl")``, move the model and the data to that device before wrapping
the model in ``DistributedDataParallel``, and build the optimizers as here. Under NCCL the
collectives of :mod:`orthoplug.distributed` (loss means, replica checks) run on the current CUDA
device; nothing else changes.

On CPU with large minibatches, glibc returns the big per-step tensors to the kernel after each
step and faults them in again at the next (20-40 % of the CPU time of a 2048 × 50 step). Setting
``GLIBC_TUNABLES`` to
``glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4000000000`` in the
environment before launching keeps that memory in the processes (as
``benchmarks/distributed_scaling.py`` does).

Real data sets need ``pip install "orthoplug[kg]"``.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist

from orthoplug.distributed import check_replicas
from orthoplug.problems.kg import KG_DATASETS, load_kg, synthetic_kg
from orthoplug.training.ultrae import train_ultrae


def main(argv: list[str] | None = None) -> int:
    """Train, print rank 0's summary; exit status 0 iff the replicas agree and the relations
    are J-orthogonal to 1e-8."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="nations", choices=(*KG_DATASETS, "synthetic"))
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=256, help="global minibatch")
    parser.add_argument("--negatives", type=int, default=50, help="k, negatives per positive")
    parser.add_argument("--dim", type=int, default=36, help="n = p + q")
    parser.add_argument("--p", type=int, default=18, help="positive directions of J")
    parser.add_argument("--synthetic-entities", type=int, default=60)
    parser.add_argument("--replica-check-every", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    launched = "WORLD_SIZE" in os.environ
    if launched:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if launched else 0
    world = dist.get_world_size() if launched else 1
    try:
        if args.dataset == "synthetic":
            data = synthetic_kg(args.synthetic_entities, 4, 4 * args.synthetic_entities,
                                args.seed)
        else:
            data = load_kg(args.dataset)
        res = train_ultrae(data, relation_optimizer="JJOBCD", epochs=args.epochs,
                           batch_size=args.batch_size, num_negatives=args.negatives,
                           dim=args.dim, p=args.p, seed=args.seed, eval_every=args.epochs,
                           replica_check_every=args.replica_check_every)
        model = res.model
        check_replicas(model.named_parameters())  # raises if any rank differs
        if rank == 0:
            m = res.test
            print(f"{data.name}: {data.num_entities} entities, {data.num_relations} relations, "
                  f"{len(data.train)} training triples; {world} process(es)")
            print(f"final training loss {res.history[-1][1]:.6f}  test MRR {m['mrr']:.3f}  "
                  f"H@10 {m['hits@10']:.3f}  {res.steps} steps in {res.train_seconds:.1f} s "
                  f"({res.steps / res.train_seconds:.2f} steps/s)  "
                  f"violation {res.violation:.1e}; replicas identical")
    finally:
        if launched:
            dist.destroy_process_group()
    return 0 if res.violation < 1e-8 else 1


if __name__ == "__main__":
    raise SystemExit(main())
