"""The benchmark framework on a toy experiment: records, JSON schema, report, plug-ins, CLI.

Toy problem: ``min −⟨X, M⟩`` over St(6, 3), optimum ``−‖M‖_*`` at the polar factor of M.
"""

from __future__ import annotations

import json
import math

import autograd.numpy as anp
import numpy as np
import pymanopt
import pytest

from orthoplug.bench import cli, report, runner
from orthoplug.bench.core import (
    Experiment,
    Instance,
    Outcome,
    Record,
    custom_method,
    pymanopt_method,
    run_method,
    torch_method,
)

N, P = 6, 3


class Toy(Experiment):
    name = "toy-linear"
    suite = "toy"
    title = "linear cost on St(6, 3)"
    metrics = ("cosine",)
    time_limits = {"quick": 0.2, "paper": 0.5}

    def instances(self, scale, seed):
        m = np.random.default_rng(seed).standard_normal((N, P))
        u, s, vt = np.linalg.svd(m, full_matrices=False)
        return [Instance("gauss", {"n": N, "p": P}, (m, u @ vt), optimum=-float(s.sum()))]

    def methods(self, scale):
        import geoopt

        def exact(exp, inst, *, seed, time_limit, shift=0.0):
            return Outcome(point=inst.data[1], iterations=1, history=[(0.0, inst.optimum)])

        def broken(exp, inst, *, seed, time_limit):
            raise RuntimeError("solver exploded")

        return [custom_method("exact", "test", exact, grid=[{"shift": 0.0}, {"shift": 1.0}]),
                custom_method("broken", "test", broken),
                pymanopt_method("pymanopt-SD", "pymanopt", "pymanopt.optimizers:SteepestDescent"),
                torch_method("geoopt-RSGD", "geoopt", geoopt.optim.RiemannianSGD,
                             {"lr": 0.1})]

    def evaluate(self, inst, point):
        m = inst.data[0]
        x = np.asarray(point)
        return {"objective": -float(np.sum(x * m)),
                "violation": float(np.linalg.norm(x.T @ x - np.eye(P))),
                "cosine": float(np.sum(x * inst.data[1]) / P)}

    def initial_point(self, inst, seed):
        q, _ = np.linalg.qr(np.random.default_rng(seed + 1).standard_normal((N, P)))
        return q

    def pymanopt_problem(self, inst):
        manifold = pymanopt.manifolds.Stiefel(N, P)
        m = inst.data[0]

        @pymanopt.function.autograd(manifold)
        def cost(x):
            return -anp.sum(x * m)

        return pymanopt.Problem(manifold, cost)

    def torch_problem(self, inst):
        import geoopt
        import torch

        m = torch.as_tensor(inst.data[0])
        return geoopt.Stiefel(), lambda x: -(x * m).sum()


@pytest.fixture
def toy(monkeypatch):
    exp = Toy()
    real = runner.experiments_of
    monkeypatch.setattr(runner, "experiments_of",
                        lambda suite: [exp] if suite == "toy" else real(suite))
    return exp


def test_record_schema_and_scores(toy):
    inst = toy.instances("quick", 0)[0]
    methods = {m.name: m for m in toy.methods("quick")}
    rec = run_method(toy, inst, methods["exact"], {}, seed=0, scale="quick", time_limit=0.1)
    data = json.loads(json.dumps(rec.to_json()))  # must survive a JSON round trip
    assert data["status"] == "ok" and data["schema"] == 1
    assert data["gap"] <= 1e-14 and data["violation"] <= 1e-14
    assert data["time_to_target"] == 0.0 and data["metrics"]["cosine"] == pytest.approx(1.0)
    bad = run_method(toy, inst, methods["broken"], {}, seed=0, scale="quick", time_limit=0.1)
    assert bad.status == "error" and "solver exploded" in bad.message
    assert bad.objective is None


#: iteration budgets of the generic methods on the toy problem
ITERATIONS = {"pymanopt-SD": 200, "geoopt-RSGD": 400}


@pytest.mark.parametrize("name", sorted(ITERATIONS))
def test_generic_methods_descend_and_stay_feasible(toy, name):
    inst = toy.instances("quick", 0)[0]
    method = {m.name: m for m in toy.methods("quick")}[name]
    rec = run_method(toy, inst, method, method.options, seed=0, scale="quick",
                     time_limit=math.inf, max_iterations=ITERATIONS[name])
    assert rec.status == "ok", rec.message
    assert rec.iterations <= ITERATIONS[name]
    assert rec.violation <= 1e-10
    f0 = toy.evaluate(inst, toy.initial_point(inst, 0))["objective"]
    assert rec.objective < f0 and rec.gap < 1e-3
    hist = rec.history
    assert len(hist["time"]) == len(hist["objective"]) >= 2
    assert all(b >= a for a, b in zip(hist["time"], hist["time"][1:], strict=False))


def test_run_report_and_rerender(toy, tmp_path):
    plan = runner.plan("toy", scale="quick", seeds=[0, 1], tune=True)
    assert plan.runs() == 2 * (2 + 1 + 1 + 1)  # the grid of "exact" runs twice per seed
    records = runner.run_plan(plan, tmp_path, progress=False)
    saved = runner.read_records(tmp_path)
    assert [r.to_json() for r in records] == saved
    assert json.loads((tmp_path / "run.json").read_text())["seeds"] == [0, 1]
    path = report.render(tmp_path)
    text = path.read_text()
    assert "### toy-linear" in text and "solver exploded" in text
    assert (tmp_path / "toy-linear.png").stat().st_size > 1000
    row = next(line for line in text.splitlines() if "| exact |" in line)
    assert "**" in row  # the exact solution is the best objective
    best = report.best_runs(saved)
    assert len([r for r in best if r["solver"] == "exact"]) == 2  # best of the grid per seed
    before = text
    path.unlink()
    assert cli.main(["report", str(tmp_path)]) == 0
    assert path.read_text() == before


def test_report_rejects_broken_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no results"):
        runner.read_records(tmp_path)
    (tmp_path / "results.jsonl").write_text(json.dumps({"suite": "x"}) + "\n")
    with pytest.raises(ValueError, match="record lacks"):
        runner.read_records(tmp_path)


def test_plugin_solver_appears_in_table(toy, tmp_path, install_plugin):
    install_plugin("""
        import pymanopt
        class MyConjugateGradient(pymanopt.optimizers.ConjugateGradient):
            pass
        SOLVER = {"pymanopt": MyConjugateGradient, "description": "third-party"}
    """, "thirdparty-cg = dummy_orthoplug_plugin:SOLVER")
    plan = runner.plan("toy", scale="quick")
    names = [m.name for m in plan.items[0][2]]
    assert "thirdparty-cg" in names
    records = runner.run_plan(plan, tmp_path, progress=False)
    rec = next(r for r in records if r.solver == "thirdparty-cg")
    assert rec.family == "plugin" and rec.status == "ok" and rec.gap < 1e-3
    assert "| thirdparty-cg |" in report.render(tmp_path).read_text()


def test_selection_errors_and_cli(toy, tmp_path, capsys):
    with pytest.raises(ValueError, match="unknown problem"):
        runner.plan("toy", problems=["nope"])
    with pytest.raises(ValueError, match="not offered"):
        runner.plan("toy", solvers=["no-such-solver"])
    with pytest.raises(ValueError, match="unknown suite"):
        runner.experiments_of("nope")
    plan = runner.plan("toy", solvers=["exact", "OBCD"])  # a registry name joins as pymanopt
    assert [m.name for m in plan.items[0][2]] == ["exact", "OBCD"]
    assert all(m.runs_on(i) for m in plan.items[0][2] for i in plan.items[0][1])
    with pytest.raises(ValueError, match=r"\['GSJOBCD'\] take none"):  # O(J) only; toy is Stiefel
        runner.plan("toy", solvers=["exact", "GSJOBCD"])
    assert cli.main(["--suite", "toy", "--solvers", "nope"]) == 2
    code = cli.main(["--suite", "toy", "--solvers", "exact", "OBCD", "--out", str(tmp_path),
                     "--no-progress", "--time-limit", "0.3"])
    out = capsys.readouterr().out
    assert code == 0 and "| OBCD |" in out
    recs = runner.read_records(tmp_path)
    assert {r["solver"] for r in recs} == {"exact", "OBCD"}
    assert all(math.isfinite(r["objective"]) for r in recs)
    assert recs[0]["time_limit"] == 0.3


def test_archive_run_thins_histories_and_drops_machine_paths(tmp_path):
    out_dir = tmp_path / "deep" / "bench-out"
    out_dir.mkdir(parents=True)
    (out_dir / "run.json").write_text(json.dumps(
        {"argv": ["orthoplug-bench", "--suite", "toy", "--out", str(out_dir)], "scale": "quick"}))
    recs = []
    for suite, points in (("toy", 200), ("other", 3)):
        rec = Record(suite=suite, experiment="e", dataset="d", sizes={}, solver="s",
                     family="f", options={}, seed=0, scale="quick", time_limit=math.inf,
                     status="ok", objective=0.0, violation=0.0, feasible=True)
        rec.history = {"time": list(range(points)), "objective": [-t for t in range(points)]}
        recs.append(rec.to_json())
    (out_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    path = runner.archive_run(out_dir, tmp_path / "run.json", provenance="test",
                              exclude_suites=["other"], max_points=10)
    archived = json.loads(path.read_text())
    assert archived["command"] == "orthoplug-bench --suite toy --out bench-out"
    assert archived["provenance"] == "test" and archived["environment"]["scale"] == "quick"
    assert [r["suite"] for r in archived["records"]] == ["toy"]
    hist = archived["records"][0]["history"]
    assert len(hist["time"]) == 10 and hist["time"][0] == 0 and hist["time"][-1] == 199
    assert hist["objective"] == [-t for t in hist["time"]]
