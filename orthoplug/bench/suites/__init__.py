"""Benchmark suites, one module per paper; each defines ``EXPERIMENTS`` (Experiment instances)."""
