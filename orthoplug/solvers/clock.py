"""The run's clock: the one clock an algorithm may read, with JIT compilation taken out.

A solver's ``max_time`` budgets the algorithm's own work. numba compiles a kernel on its first
call in a process (or loads it from its cache); that time depends on the install, the cache and
the machine, not on the algorithm, so :class:`RunClock` subtracts it. One process-wide listener
of numba's ``numba:compiler_lock`` events (numba holds that lock while it compiles a function or
loads it from the cache) adds up the time spent inside them; a clock reports the wall time since
it started less the compilation time added since then.
"""

from __future__ import annotations

import math
import time

from numba.core import event

__all__ = ["RunClock", "compile_seconds"]


class _CompileTimer(event.Listener):
    """Total wall time inside outermost ``numba:compiler_lock`` events (nested ones counted
    once)."""

    def __init__(self) -> None:
        self.total = 0.0
        self._depth = 0
        self._began = 0.0

    def on_start(self, event) -> None:
        if self._depth == 0:
            self._began = time.perf_counter()
        self._depth += 1

    def on_end(self, event) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.total += time.perf_counter() - self._began


_TIMER = _CompileTimer()
event.register("numba:compiler_lock", _TIMER)


def compile_seconds() -> float:
    """Seconds this process has spent compiling (or loading cached) numba kernels so far."""
    return _TIMER.total


class RunClock:
    """Seconds of one run since the clock was made, less JIT compilation.

    Args:
        max_time: the run's time budget in seconds (``math.inf``: none).
    """

    def __init__(self, max_time: float = math.inf) -> None:
        self.max_time = float(max_time)
        self._start = time.perf_counter()
        self._compiled = _TIMER.total

    @property
    def compile_time(self) -> float:
        """Seconds spent compiling (or loading cached) kernels since the clock started."""
        return _TIMER.total - self._compiled

    def elapsed(self) -> float:
        """Seconds since the clock started, less the compilation time."""
        return time.perf_counter() - self._start - self.compile_time

    def out_of_time(self) -> bool:
        """Whether the run has used its ``max_time``."""
        return self.elapsed() >= self.max_time
