"""``orthoplug-bench`` with every clock read as the process's CPU time.

On a shared machine a run's time limit buys whatever share of a core the process gets; reading
the limit (and every time stamp) from ``time.process_time`` instead makes the budgets CPU seconds,
so runs of two versions side by side, or at different loads, compare. Compilation still counts
for nothing (the run clock leaves it out), and the reported times are CPU seconds.

    OMP_NUM_THREADS=1 python benchmarks/cpu_clock_bench.py --suite quick --threads 1 --out DIR
"""

import runpy
import sys
import time

time.perf_counter = time.process_time
time.time = time.process_time
time.monotonic = time.process_time
sys.argv = ["orthoplug-bench", *sys.argv[1:]]
runpy.run_module("orthoplug.bench", run_name="__main__")
