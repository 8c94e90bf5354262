"""Tests budget iterations, never seconds: a finite ``max_time=`` or ``time_limit=`` in a test
is allowed only where the test checks the stop itself, or checks no quality (that a method
runs, stays feasible, respects a bound, or writes its record). Benchmarks measure speed."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

#: (file, test function) → why a finite time limit cannot change what the test asserts
ALLOWED = {
    ("test_baselines_rsdm.py", "test_rcd_sweep_stops_at_the_deadline"): "tests the stop",
    ("test_ultrae.py", "test_time_limit_stops_early"): "tests the stop",
    ("test_release.py", "test_run_clock_leaves_compilation_out"): "tests the clock",
    ("test_bench.py", "test_record_schema_and_scores"): "the toy methods return at once",
    ("test_bench_jobcd.py", "test_method_runs"): "runs, finite, feasible, above the optimum",
    ("test_bench_obcd_rssm.py", "test_method_runs"): "runs, finite, feasible",
    ("test_bench_rsdm.py", "test_method_runs"): "runs, finite, feasible, above the optimum",
    ("test_bench_rsdm.py", "test_qap_scores_the_planted_permutation_as_optimal"):
        "feasible and above the planted optimum",
    ("test_which_solver.py", "_rec"): "builds a record by hand; nothing runs",
    ("test_l1_any_start.py", "test_run_out_of_time_ends_at_the_iteration_under_way"):
        "tests the stop (the clock is replaced by a count of sweeps)",
}


def _is_unbounded(value: ast.expr) -> bool:
    """``math.inf``, ``float("inf")`` or ``float("nan")`` (an argument error under test)."""
    return ((isinstance(value, ast.Attribute) and value.attr == "inf")
            or (isinstance(value, ast.Call) and getattr(value.func, "id", "") == "float"))


def _timed_calls() -> set[tuple[str, str]]:
    found = set()
    for path in sorted(TESTS.rglob("*.py")):
        def visit(node, function, name=path.name):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                function = node.name
            if isinstance(node, ast.Call):
                for keyword in node.keywords:
                    if (keyword.arg in ("max_time", "time_limit")
                            and not _is_unbounded(keyword.value)):
                        found.add((name, function))
            for child in ast.iter_child_nodes(node):
                visit(child, function)

        visit(ast.parse(path.read_text(encoding="utf-8")), None)
    return found


def test_no_quality_assertion_depends_on_the_clock():
    timed = _timed_calls()
    unexplained = sorted(timed - ALLOWED.keys())
    assert not unexplained, ("budget these tests in iterations (max_iterations=...), or add "
                             f"them to ALLOWED with the reason: {unexplained}")
    assert not ALLOWED.keys() - timed, "ALLOWED lists a test that no longer sets a time limit"
