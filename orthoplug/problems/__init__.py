"""Benchmark and test problems with data generators and, where known, certified optima."""
