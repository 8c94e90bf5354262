"""Select experiments and methods, run them, and stream the records to ``results.jsonl``."""

from __future__ import annotations

import importlib
import json
import logging
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from orthoplug import warm_up
from orthoplug.bench.core import (
    SCALES,
    Experiment,
    Instance,
    Method,
    Record,
    pymanopt_method,
    resolve,
)

__all__ = ["SUITES", "Plan", "experiments_of", "plan", "run_plan", "read_records", "emit_row",
           "archive_run"]

SUITES = ("jobcd", "obcd", "rsdm", "rssm", "general")
RESULTS = "results.jsonl"
_log = logging.getLogger("orthoplug.bench")


def experiments_of(suite: str) -> list[Experiment]:
    """The experiments of a suite name (``quick`` and ``all`` mean every paper's)."""
    if suite in ("quick", "all"):
        return [e for s in SUITES for e in experiments_of(s)]
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; choose from {('quick', 'all') + SUITES}")
    return list(importlib.import_module(f"orthoplug.bench.suites.{suite}").EXPERIMENTS)


def plugin_methods() -> list[Method]:
    """Registry solvers from entry points (third-party), as generic pymanopt methods."""
    from orthoplug import registry

    return [pymanopt_method(e.name, "plugin", e.pymanopt)
            for e in registry.entries("solver", "pymanopt") if e.source != "builtin"]


def registry_method(name: str, experiment: Experiment) -> Method | None:
    """A registry solver asked for by name, run through its pymanopt front-end on the instances
    of ``experiment`` whose manifold that front-end takes (:func:`_takes`)."""
    from orthoplug import registry

    for e in registry.entries("solver", "pymanopt"):
        if e.name == name:
            method = pymanopt_method(e.name, "plugin" if e.source != "builtin" else "orthoplug",
                                     e.pymanopt)
            method.applies = _takes(e.pymanopt, experiment)
            return method
    return None


def _takes(optimizer_class, experiment: Experiment) -> Callable[[Instance], bool]:
    """Whether an instance's pymanopt manifold is one ``optimizer_class`` takes: for orthoplug's
    optimizers, the geometries they declare (``SolverOptimizer.geometries``; empty: any); a
    third-party optimizer is taken to take every manifold. One problem is built per instance."""
    from orthoplug.adapters.pymanopt import SolverOptimizer, geometry_of

    answers: dict[int, bool] = {}

    def applies(instance: Instance) -> bool:
        if id(instance) not in answers:
            cls = resolve(optimizer_class)
            kinds = cls.geometries if issubclass(cls, SolverOptimizer) else ()
            ok = True
            if kinds:
                try:
                    geometry = geometry_of(experiment.pymanopt_problem(instance).manifold)
                except ValueError:  # a manifold none of ours is built on
                    geometry = None
                ok = isinstance(geometry, kinds)
            answers[id(instance)] = ok
        return answers[id(instance)]

    return applies


def _offers_pymanopt(exp: Experiment) -> bool:
    return type(exp).pymanopt_problem is not Experiment.pymanopt_problem


@dataclass
class Plan:
    """What one invocation runs: per experiment its instances and methods."""

    scale: str
    seeds: list[int]
    tune: bool
    time_limit: float | None
    items: list[tuple[Experiment, list[Instance], list[Method]]]

    def runs(self) -> int:
        """Number of runs in the plan (instances × option settings × seeds)."""
        return sum(len(m.settings(self.tune)) * len(self.seeds)
                   for _, insts, meths in self.items for inst in insts for m in meths
                   if m.runs_on(inst))


def plan(suite: str = "quick", *, problems: Iterable[str] | None = None,
         solvers: Iterable[str] | None = None, scale: str = "quick",
         seeds: Iterable[int] = (0,), tune: bool = False,
         time_limit: float | None = None) -> Plan:
    """Build the run plan; raises ``ValueError`` naming unknown problems or solvers."""
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; choose from {SCALES}")
    exps = experiments_of(suite)
    if problems:
        problems = list(problems)
        known = [e.name for e in exps]
        bad = [p for p in problems if p not in known]
        if bad:
            raise ValueError(f"unknown problem(s) {bad} in suite {suite!r}; known: {known}")
        exps = [e for e in exps if e.name in problems]
    plugins = plugin_methods()
    wanted = list(solvers) if solvers else None
    items, seen = [], set()
    for exp in exps:
        methods = list(exp.methods(scale))
        if _offers_pymanopt(exp):
            methods += [m for m in plugins if m.name not in {x.name for x in methods}]
        if wanted is not None:
            extra = [registry_method(w, exp) for w in wanted
                     if w not in {m.name for m in methods}
                     and _offers_pymanopt(exp)]
            methods = [m for m in methods + [x for x in extra if x] if m.name in wanted]
        seen.update(m.name for m in methods)
        if methods:
            items.append((exp, [], methods))
    if wanted is not None:
        missing = [w for w in wanted if w not in seen]
        if missing:
            raise ValueError(f"solver(s) {missing} not offered by any selected experiment")
    seeds = [int(s) for s in seeds]
    built = []
    for exp, _, methods in items:
        try:
            built.append((exp, exp.instances(scale, seeds[0]), methods))
        except ImportError as err:  # optional data (e.g. the kg extra): skip, loudly
            _log.warning("skipping experiment %s: %s", exp.name, err)
    if wanted is not None:
        runs = {m.name for _, insts, methods in built for m in methods
                for inst in insts if m.runs_on(inst)}
        idle = [w for w in wanted if w not in runs]
        if idle:
            raise ValueError(f"solver(s) {idle} take none of the selected experiments' "
                             f"instances (their manifolds)")
    return Plan(scale, seeds, tune, time_limit, built)


def environment() -> dict:
    """Versions and machine facts written next to the results (ratios need them)."""
    import numpy
    import torch

    versions = {"python": platform.python_version(), "numpy": numpy.__version__,
                "torch": torch.__version__}
    for mod in ("pymanopt", "geoopt", "scipy"):
        try:
            versions[mod] = importlib.import_module(mod).__version__
        except Exception:  # optional packages are reported as missing
            versions[mod] = None
    return {"versions": versions, "machine": platform.machine(), "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "platform": platform.platform()}


def run_plan(p: Plan, out: str | Path, *, progress: bool = True, argv=None) -> list[Record]:
    """Run every (experiment, instance, method setting, seed); write each record to
    ``out/results.jsonl`` (started afresh) as soon as it exists (a crash keeps what finished)."""
    from orthoplug.bench.core import run_method

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"argv": list(argv if argv is not None else sys.argv), "scale": p.scale,
            "seeds": p.seeds, "tune": p.tune, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            **environment()}
    (out / "run.json").write_text(json.dumps(meta, indent=1))
    import geoopt  # noqa: F401  (imported here, not inside the first geoopt run's timing)
    import torch

    # the first torch optimizer imports torch._dynamo (seconds): keep that out of every timing
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.0)
    warm_up()
    bar = _progress(p.runs(), progress)
    records = []
    with open(out / RESULTS, "w") as fh:
        for exp, instances, methods in p.items:
            limit = p.time_limit or exp.time_limits[p.scale]
            for inst in instances:
                for method in (m for m in methods if m.runs_on(inst)):
                    for options in method.settings(p.tune):
                        for seed in p.seeds:
                            bar.set_description(f"{exp.name}/{inst.dataset}/{method.name}")
                            rec = run_method(exp, inst, method, options, seed=seed,
                                             scale=p.scale, time_limit=limit)
                            if rec.status == "error":
                                _log.warning("%s/%s/%s failed: %s", exp.name, inst.dataset,
                                             method.name, rec.message)
                            fh.write(json.dumps(rec.to_json()) + "\n")
                            fh.flush()
                            records.append(rec)
                            bar.update(1)
    bar.close()
    return records


def emit_row(row: dict, out: str | Path | None = None) -> None:
    """Print ``row`` as one JSON line and, with ``out``, append that line to the file (the
    stand-alone benchmark scripts' record format, one row per run)."""
    line = json.dumps(row)
    print(line, flush=True)
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


def read_records(path: str | Path) -> list[dict]:
    """Records of ``DIR/results.jsonl`` (or of a ``.jsonl`` file), validated loosely."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS
    if not path.exists():
        raise FileNotFoundError(f"no results at {path}")
    required = set(Record.__dataclass_fields__)
    out = []
    for k, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        missing = required - set(rec)
        if missing:
            raise ValueError(f"{path}:{k}: record lacks {sorted(missing)}")
        out.append(rec)
    return out


def archive_run(run_dir: str | Path, out: str | Path, *, provenance: str,
                exclude_suites: Iterable[str] = (), max_points: int = 50) -> Path:
    """Write a run's records as one JSON file for ``docs/results``: ``{"command",
    "provenance", "environment", "records"}`` (the command's ``--out`` folder by its name
    alone: no path of this machine).

    Args:
        run_dir: an ``orthoplug-bench`` output folder (``results.jsonl`` and ``run.json``).
        out: the file to write.
        provenance: a sentence on where and how the run was made (shown on the pages).
        exclude_suites: suites whose records are left out.
        max_points: each record's (time, objective) history is thinned to at most this many
            points, evenly spaced in index, the first and last kept.

    Returns:
        The path written.
    """
    run_dir = Path(run_dir)
    meta = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    records = [r for r in read_records(run_dir) if r["suite"] not in set(exclude_suites)]
    for rec in records:
        hist = rec["history"]
        size = len(hist["time"])
        if size > max_points:
            keep = sorted({round(i * (size - 1) / (max_points - 1)) for i in range(max_points)})
            rec["history"] = {k: [v[i] for i in keep] for k, v in hist.items()
                              if k in ("time", "objective")}
    argv = list(meta["argv"])
    if "--out" in argv[:-1]:
        argv[argv.index("--out") + 1] = Path(argv[argv.index("--out") + 1]).name
    out = Path(out)
    out.write_text(json.dumps({"command": " ".join(argv), "provenance": provenance,
                               "environment": {k: v for k, v in meta.items() if k != "argv"},
                               "records": records}, indent=None) + "\n", encoding="utf-8")
    return out


class _Quiet:
    def __init__(self, total):
        self.n, self.total = 0, total

    def set_description(self, text):
        self.text = text

    def update(self, k):
        self.n += k
        _log.info("[%d/%d] %s", self.n, self.total, self.text)

    def close(self):
        pass


def _progress(total: int, enabled: bool):
    if enabled:
        try:
            from tqdm import tqdm

            return tqdm(total=total, unit="run", dynamic_ncols=True)
        except ImportError:
            pass
    return _Quiet(total)
