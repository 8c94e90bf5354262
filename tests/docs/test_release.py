"""Release checks that run in the test suite (the wheel itself is built and installed by
``.ci/check_install.sh``): one version, every package discovered, every kernel warmed up, and a
run clock that leaves compilation out."""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import time
from pathlib import Path

import numba
import pytest
from numba.core.registry import CPUDispatcher

import orthoplug
from orthoplug.solvers.clock import RunClock

ROOT = Path(__file__).resolve().parents[2]


def test_version_is_the_distributions():
    assert orthoplug.__version__ == importlib.metadata.version("orthoplug")


def test_every_source_folder_is_a_discovered_package():
    setuptools = pytest.importorskip("setuptools")
    found = set(setuptools.find_packages(str(ROOT), include=["orthoplug", "orthoplug.*"]))
    folders = {".".join(path.parent.relative_to(ROOT).parts)
               for path in (ROOT / "orthoplug").rglob("*.py") if "__pycache__" not in path.parts}
    assert folders <= found, f"folders without __init__.py: {sorted(folders - found)}"
    assert (ROOT / "orthoplug" / "py.typed").exists()


def _entry_kernels() -> dict[str, CPUDispatcher]:
    """The compiled kernels that Python code calls: every numba dispatcher that a module outside
    ``orthoplug.kernels`` holds (kernels called only from other kernels are compiled into their
    callers, or loaded with them from the cache)."""
    found = {}
    for info in pkgutil.walk_packages(orthoplug.__path__, "orthoplug."):
        if info.name.endswith("__main__") or info.name.startswith("orthoplug.kernels"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, CPUDispatcher):
                found[f"{value.py_func.__module__}.{value.py_func.__name__}"] = value
    return found


def test_warm_up_compiles_every_kernel():
    kernels = _entry_kernels()
    assert len(kernels) >= 10
    orthoplug.warm_up()
    cold = sorted(name for name, kernel in kernels.items() if not kernel.signatures)
    assert not cold, f"kernels warm_up() leaves uncompiled: {cold}"


def test_run_clock_leaves_compilation_out():
    @numba.njit(cache=False)
    def fresh(a):  # a new function: its first call compiles inside the clock
        return a + 1.0

    began = time.perf_counter()
    clock = RunClock(max_time=1e9)
    assert fresh(1.0) == 2.0  # compiles: counted as compilation, not as the run's time
    elapsed = clock.elapsed()
    wall = time.perf_counter() - began
    assert clock.compile_time > 0.0
    assert 0.0 <= elapsed <= wall - clock.compile_time
    outer = RunClock()
    assert outer.compile_time == 0.0 and not outer.out_of_time()
