"""Benchmark and test problems with data generators and, where known, certified optima."""

from __future__ import annotations

import math

__all__ = ["relative_gap"]


def relative_gap(value: float | None, optimum: float | None) -> float | None:
    """``|value − optimum| / |optimum|`` (the papers' ``optgap``); ``None`` without an optimum
    or a finite value (the problems' ``relative_gap`` methods and the benchmark records use it).
    """
    if optimum is None or value is None or not math.isfinite(value):
        return None
    return abs(float(value) - optimum) / max(abs(optimum), 1e-300)
