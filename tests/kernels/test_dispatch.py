"""Device dispatch: one rule (:func:`orthoplug.kernels.runs_compiled`) picks compiled kernel or
torch path for every solver of both front-ends.

A CUDA device is simulated on the CPU by patching the rule to ``False`` in the module that asks
(the torch path then runs on CPU tensors: its iterates must equal the compiled path's), or by
``meta`` tensors where a solver must refuse a device before any work.
"""

from __future__ import annotations

import ast
from pathlib import Path

import geoopt
import numpy as np
import pytest
import torch

from orthoplug.adapters.geoopt import GSJOBCD as GeooptGSJOBCD
from orthoplug.adapters.geoopt import OBCD as GeooptOBCD
from orthoplug.adapters.geoopt import ColumnJJacobi, JOrthogonal
from orthoplug.baselines.rcd import RCD
from orthoplug.geometry.manifolds import JOrthogonalGeometry
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.kernels import runs_compiled
from orthoplug.nonsmooth import L1, Zero
from orthoplug.oracles import FunctionOracle, QuadraticOracle
from orthoplug.problems.hevp import make_spd
from orthoplug.solvers import jjacobi, jobcd, jobcd_steps, obcd
from orthoplug.solvers.jobcd import GSJOBCD, JJOBCD
from orthoplug.solvers.obcd import OBCD
from orthoplug.solvers.rssm import RSSM
from orthoplug.solvers.sparse_obcd import SparseOBCD
from orthoplug.subproblems import jorth2
from orthoplug.subproblems.jorth2 import solve_jorth2x2
from orthoplug.subproblems.o2 import solve_o2

ROOT = Path(__file__).resolve().parents[2]
DT = torch.float64
N = 8
C = torch.from_numpy(make_spd(N, seed=0))
META = torch.device("meta")


def _simulate_device(monkeypatch, *modules) -> None:
    """Every module's dispatch rule answers "not compiled" (the path of a CUDA tensor)."""
    for module in modules:
        monkeypatch.setattr(module, "runs_compiled", lambda x: False)


def test_the_rule():
    """Compiled for NumPy arrays and CPU float32/float64 tensors; torch for other devices and
    dtypes."""
    cpu64, cpu32 = torch.zeros(4, 4, dtype=DT), torch.zeros(4, 4)
    assert runs_compiled(cpu64) and runs_compiled(cpu32) and runs_compiled(cpu64.numpy())
    assert not runs_compiled(torch.zeros(4, 4, dtype=DT, device=META))
    assert not runs_compiled(cpu64.half())


# ---- the 2×2 subproblems ---------------------------------------------------------------------

@pytest.mark.parametrize("jb", [(1, -1), (-1, 1), (1, 1), (-1, -1)])
def test_jorth2_torch_steps_equal_the_kernel(monkeypatch, jb):
    """solve_jorth2x2 off the CPU runs the kernel's steps in torch: the same minimum value
    (relative 1e-12) and feasibility as the compiled kernel on random instances, float64."""
    gen = np.random.default_rng(4)
    K = 400
    a = gen.standard_normal((K, 4, 4))
    q = torch.from_numpy(a @ a.transpose(0, 2, 1) + 0.1 * np.eye(4))
    p = torch.from_numpy(gen.standard_normal((K, 2, 2)) * 10.0 ** gen.uniform(-3, 3, (K, 1, 1)))
    jbt = torch.tensor([jb] * K)
    compiled = solve_jorth2x2(jbt, p, Qd=q)
    _simulate_device(monkeypatch, jorth2)
    steps = solve_jorth2x2(jbt, p, Qd=q)
    f_c, f_t = (jorth2.subproblem_value(v, p, Qd=q) for v in (compiled, steps))
    assert ((f_t - f_c).abs() / f_c.abs().clamp(min=1.0)).max() <= 1e-12
    jm = torch.diag(torch.tensor(jb, dtype=DT))
    err = (steps.mT @ jm @ steps - jm).abs().amax((1, 2)) / (steps.abs().amax((1, 2)) ** 2)
    assert err.max() <= 1e-14


def test_o2_search_refuses_other_devices():
    """The O(2) search exists compiled only: a tensor on another device is refused by name,
    never copied to the host."""
    p = torch.zeros(3, 2, 2, dtype=DT, device=META)
    z = torch.zeros(3, 2, 4, dtype=DT, device=META)
    with pytest.raises(ValueError, match="compiled O\\(2\\) search on the CPU.*meta"):
        solve_o2(p, z, L1(0.1), s=1.0)


# ---- core solvers (the pymanopt front-end runs them) -------------------------------------------

def _jorth_start():
    geo = JOrthogonalGeometry(N, N // 2)
    return geo, geo.random_point(generator=torch.Generator().manual_seed(1), cond=3.0)


def test_gsjobcd_exact_pairs_take_the_torch_path_with_the_same_iterates(monkeypatch):
    """GS-JOBCD's exact row pairs: the compiled loop on CPU float64, one batched torch solve per
    pair elsewhere; 300 iterations agree to 1e-10."""
    geo, x0 = _jorth_start()
    run = GSJOBCD(side="row", seed=2, max_iterations=300)
    ref = run.run(QuadraticOracle(C), x0, geo)
    assert ref.info["compiled"]
    _simulate_device(monkeypatch, jobcd, jobcd_steps, jorth2)
    res = run.run(QuadraticOracle(C), x0, geo)
    assert not res.info["compiled"]
    torch.testing.assert_close(res.point, ref.point, rtol=0, atol=1e-10)


def test_column_jjacobi_is_cpu_only(monkeypatch):
    """ColumnJJacobi's sweeps are compiled: they run on the CPU and, off it, the solver refuses
    the point at setup (naming the device) instead of copying it to the host."""
    geo, x0 = _jorth_start()
    solver = jjacobi.ColumnJJacobi(seed=0, max_iterations=2)
    assert "rotations" in solver.run(QuadraticOracle(C), x0, geo).info
    _simulate_device(monkeypatch, jjacobi)
    with pytest.raises(ValueError, match="runs compiled CPU sweeps"):
        solver.run(QuadraticOracle(C), x0, geo)


def _hessian_oracle():
    return FunctionOracle(lambda x: torch.trace(x.mT @ C @ x), lambda x: 2.0 * C @ x,
                          hessian=lambda x, u: 2.0 * C @ u)


def test_jjobcd_hessian_model_is_cpu_only(monkeypatch):
    """J-JOBCD's compiled Hessian-model sweep runs on the CPU; asking for it elsewhere is an
    error naming the device requirement (the default scalar model runs anywhere)."""
    geo, x0 = _jorth_start()
    hessian = dict(curvature="hessian", side="column")
    assert JJOBCD(seed=0, max_iterations=1, **hessian).run(
        _hessian_oracle(), x0, geo).info["curvature"] == "hessian"
    _simulate_device(monkeypatch, jobcd)
    res = JJOBCD(seed=0, max_iterations=1).run(_hessian_oracle(), x0, geo)
    assert res.info["curvature"] == "scalar"
    with pytest.raises(ValueError, match="CPU tensor \\(the model sweep is compiled\\)"):
        JJOBCD(max_iterations=1, **hessian).run(_hessian_oracle(), x0, geo)


def _stiefel_start():
    return StiefelGeometry(N, 3), torch.linalg.qr(
        torch.randn(N, 3, dtype=DT, generator=torch.Generator().manual_seed(1))).Q


@pytest.mark.parametrize("solver", [OBCD, SparseOBCD])
def test_obcd_refuses_other_devices(monkeypatch, solver):
    """OBCD and SparseOBCD need the compiled O(2) search: off the CPU they refuse at setup,
    naming dtype and device; OBCD with k > 2 and h = 0 (closed-form polar steps) runs."""
    geo, x0 = _stiefel_start()
    oracle = QuadraticOracle(-C)
    solver(L1(0.05), seed=0, max_iterations=5).run(oracle, x0, geo)
    _simulate_device(monkeypatch, obcd)
    with pytest.raises(ValueError, match="O\\(2\\) breakpoint search runs compiled"):
        solver(L1(0.05), seed=0, max_iterations=5).run(oracle, x0, geo)
    res = OBCD(Zero(), k=3, curvature="scalar", seed=0, max_iterations=5).run(oracle, x0, geo)
    assert res.iterations == 5


def test_rssm_final_prox_refuses_other_devices_before_any_work(monkeypatch):
    """RSSM with a separable h ends with OBCD's proximal pass (compiled O(2) search): off the CPU
    it refuses at setup, naming the option, instead of failing after its iterations; with
    ``final_prox=False`` it runs."""
    geo, x0 = _stiefel_start()
    oracle = QuadraticOracle(-C)
    calls = []
    monkeypatch.setattr(RSSM, "setup", lambda self, run: calls.append(run))
    _simulate_device(monkeypatch, obcd)
    with pytest.raises(ValueError, match="final_prox=True; final_prox=False runs anywhere"):
        RSSM(h=L1(0.05), seed=0, max_iterations=5).run(oracle, x0, geo)
    assert not calls
    monkeypatch.undo()
    _simulate_device(monkeypatch, obcd)
    res = RSSM(h=L1(0.05), final_prox=False, seed=0, max_iterations=5).run(oracle, x0, geo)
    assert res.iterations == 5 and "final_prox" not in res.info


def test_rcd_torch_rounds_equal_the_compiled_rounds(monkeypatch):
    """The RCD baseline: compiled Givens rounds on CPU float64, torch rounds elsewhere, the
    same iterates (1e-10)."""
    import orthoplug.baselines.rcd as rcd_mod

    geo, x0 = _stiefel_start()
    ref = RCD(seed=0, max_iterations=5).run(QuadraticOracle(C), x0, geo)
    _simulate_device(monkeypatch, rcd_mod)
    res = RCD(seed=0, max_iterations=5).run(QuadraticOracle(C), x0, geo)
    torch.testing.assert_close(res.point, ref.point, rtol=0, atol=1e-10)


def test_torch_only_solvers_have_no_compiled_path():
    """RSSM and RSDM are torch code on every device: their modules import no kernel."""
    for name in ("rssm", "rsdm"):
        tree = ast.parse((ROOT / "orthoplug" / "solvers" / f"{name}.py").read_text())
        modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not any(m and m.startswith("orthoplug.kernels") for m in modules), name


# ---- geoopt optimizers -------------------------------------------------------------------------

def _jorth_param(device=None):
    manifold = JOrthogonal(N, 4)
    x0 = manifold.geometry.random_point(generator=torch.Generator().manual_seed(1), cond=3.0)
    return geoopt.ManifoldParameter(x0.to(device) if device else x0, manifold=manifold)


def _steps(opt, x, steps):
    def closure():
        opt.zero_grad()
        loss = torch.trace(x.mT @ C.to(x.device) @ x)
        loss.backward()
        return loss
    for _ in range(steps):
        opt.step(closure)
    return x.detach().clone()


def test_geoopt_gsjobcd_torch_path_equals_compiled_path(monkeypatch):
    """The geoopt GS-JOBCD optimizer's one-pair steps: plain-float solve on the CPU, batched
    torch solve elsewhere; 50 steps agree to 1e-10. (J-JOBCD:
    tests/adapters/test_torch_conventions.py.)"""
    x = _jorth_param()
    ref = _steps(GeooptGSJOBCD([x], seed=3), x, 50)
    _simulate_device(monkeypatch, jobcd_steps, jorth2)
    x = _jorth_param()
    torch.testing.assert_close(_steps(GeooptGSJOBCD([x], seed=3), x, 50), ref, rtol=0,
                               atol=1e-10)


def test_geoopt_cpu_only_optimizers_refuse_other_devices():
    """ColumnJJacobi (compiled sweeps) and OBCD (compiled O(2) search) refuse a parameter on
    another device at construction, with the reason, instead of copying it to the host."""
    x = _jorth_param(META)
    with pytest.raises(ValueError, match="compiled CPU sweeps.*meta.*GSJOBCD"):
        ColumnJJacobi([x], c=C)
    with pytest.raises(TypeError, match="float32 or float64"):
        ColumnJJacobi([geoopt.ManifoldParameter(_jorth_param().detach().half(),
                                                manifold=JOrthogonal(N, 4))], c=C)
    y = geoopt.ManifoldParameter(torch.zeros(N, 3, dtype=DT, device=META),
                                 manifold=geoopt.Stiefel())
    with pytest.raises(ValueError, match="OBCD: the O\\(2\\) breakpoint search.*meta"):
        GeooptOBCD([y], h=L1(0.05))
