"""Cold and warm start of the compiled kernels: what a fresh install pays, and what a run counts.

::

    python benchmarks/cold_start.py                  # empty numba cache, then the filled one
    python benchmarks/cold_start.py --max-time 0.2 --out docs/results/cold-start.json

Each case runs in a fresh process with ``NUMBA_CACHE_DIR`` pointing at a new folder (cold: empty;
warm: filled by the cold process). In each process: a timed OBCD run (ℓ1, 60 × 20 Stiefel) before
anything is compiled, then :func:`orthoplug.warm_up`, then the same run again. Reported per run:
the run's own ``time`` (compilation excluded), its ``compile_time``, the wall time around it and
the iterations done within ``max_time``; and the seconds of ``warm_up()``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
import numpy as np, torch
import orthoplug
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.nonsmooth import L1
from orthoplug.oracles import QuadraticOracle
from orthoplug.solvers.obcd import OBCD

max_time = float(sys.argv[1])
rng = np.random.default_rng(0)
a = rng.standard_normal((200, 60))
c = torch.from_numpy(-(a.T @ a) / 200)
x0 = torch.linalg.qr(torch.from_numpy(rng.standard_normal((60, 20))))[0]
out = {}

def timed(label):
    began = time.perf_counter()
    res = OBCD(L1(0.05), seed=0, max_time=max_time).run(QuadraticOracle(c), x0,
                                                         StiefelGeometry(60, 20))
    out[label] = {"time": res.time, "compile_time": res.compile_time,
                  "wall": time.perf_counter() - began, "iterations": res.iterations}

timed("first run")
began = time.perf_counter()
orthoplug.warm_up()
out["warm_up"] = time.perf_counter() - began
timed("after warm_up")
print(json.dumps(out))
"""


def main(argv: list[str] | None = None) -> int:
    """Run the cold and the warm case; print (and with ``--out`` write) one JSON record."""
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--max-time", type=float, default=0.2)
    parser.add_argument("--out", help="write the record as JSON to this file")
    args = parser.parse_args(argv)
    record = {"max_time": args.max_time}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache, "OMP_NUM_THREADS": "1"}
        for case in ("cold cache", "warm cache"):
            done = subprocess.run([sys.executable, "-c", CHILD, str(args.max_time)], env=env,
                                  capture_output=True, text=True, check=True)
            record[case] = json.loads(done.stdout.strip().splitlines()[-1])
            for label in ("first run", "after warm_up"):
                r = record[case][label]
                print(f"{case:10s} {label:13s}: {r['iterations']:6d} iterations, run time "
                      f"{r['time']:.3f} s, compile {r['compile_time']:6.2f} s, "
                      f"wall {r['wall']:6.2f} s")
            print(f"{case:10s} warm_up(): {record[case]['warm_up']:.2f} s")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(record, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
