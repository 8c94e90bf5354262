"""The compiled GS-JOBCD pair loop and RCD sweep against independent references.

The references below are written from the formulas, not from the kernels: each GS-JOBCD step
forms ``Q̲ = 2s (Z D Zᵀ) ⊗ C_BB`` with ``np.kron`` (PSD part by ``eigh``), solves the 2×2
subproblem with the torch steps of ``solve_jorth2x2`` (the path of non-CPU tensors: the kernel's
algorithm executed elementwise in torch, not the compiled code), writes ``X[B] = V Z`` and
recomputes ``Y = C X`` and f from scratch.
The un-jitted run (``NUMBA_DISABLE_JIT=1``, a subprocess) checks that the kernels are one source:
the same functions run as Python and give the same iterates.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from orthoplug.baselines.rcd import RCD
from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry, JOrthogonalGeometry
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.kernels.jobcd import _scalar_solve, gs_pairs
from orthoplug.kernels.jorth2 import NEEDS_BATCHED, SOLVED, solve_jorth2
from orthoplug.oracles import NonFiniteError, QuadraticOracle
from orthoplug.problems.hevp import make_spd, trace_min_certificate
from orthoplug.solvers.jobcd import GSJOBCD
from orthoplug.solvers.jobcd_steps import update_pairs
from orthoplug.solvers.pairs import PAIR_BATCH, random_matching, random_pairs
from orthoplug.subproblems.jorth2 import _solve_torch, solve_jorth2x2

THETA = 1e-6


def _unsorted(n, seed=0):
    return np.random.default_rng(seed).permutation([1.0] * (n // 2) + [-1.0] * (n - n // 2))


def _exact_v(m, q, j1, j2, theta):
    """The exact 2×2 step of the model ``(M, Q̲)``: PSD part of Q̲ plus θI₄, solved by the torch
    steps."""
    lam, u = np.linalg.eigh(0.5 * (q + q.T))
    q = (u * lam.clip(0.0)) @ u.T + theta * np.eye(4)
    p = m - (q @ np.array([1.0, 0.0, 0.0, 1.0])).reshape(2, 2).T  # mat(Q vec I), column-major
    return _solve_torch(j1 != j2, torch.from_numpy(p[None]), torch.from_numpy(q[None]))[0].numpy()


def _reference_gs(c, d, scale, j, x0, pairs, theta=THETA, jk=None):
    """GS-JOBCD over the given row pairs: 2×2 solves by the torch steps, Y and f recomputed.
    With a non-scalar D (``jk``: the signature of J_k), every ⌊n/2⌋ row pairs are followed by
    ⌊k/2⌋ column pairs ``X[:, B] ← X[:, B] Vᵀ`` in the cyclic order, each with ``A = XᵀCX``,
    ``M = 2s (DA)_BB`` and ``Q̲ = 2s A_BB ⊗ D_BB``."""
    x = x0.copy()
    n, k = x.shape
    dm = np.eye(k) if d is None else d
    columns = d is not None and not np.array_equal(d, d[0, 0] * np.eye(k))
    column_pairs = torch.triu_indices(k, k, 1).T.tolist()
    for t, (i, l) in enumerate(pairs):
        b = [i, l]
        z = x[b]
        y = c @ x
        m = 2 * scale * y[b] @ dm @ z.T
        q = 2 * scale * np.kron(z @ dm @ z.T, c[np.ix_(b, b)])
        x[b] = _exact_v(m, q, j[i], j[l], theta) @ z
        rows_per, cols_per = GSJOBCD.pairs_per_iteration(n), GSJOBCD.pairs_per_iteration(k)
        if columns and (t + 1) % rows_per == 0:
            for u in range(cols_per):
                e = column_pairs[(t // rows_per * cols_per + u) % len(column_pairs)]
                a_mat = x.T @ c @ x
                m = 2 * scale * (dm @ a_mat)[np.ix_(e, e)]
                q = 2 * scale * np.kron(a_mat[np.ix_(e, e)], dm[np.ix_(e, e)])
                x[:, e] = x[:, e] @ _exact_v(m, q, jk[e[0]], jk[e[1]], theta).T
    return x, scale * float(np.sum(x * (c @ x @ dm)))


def _case(name):
    """(oracle C, D, scale, geometry, x0) of the named instance."""
    gen = torch.Generator().manual_seed(3)
    if name.startswith("square"):
        n = 12
        geo = JOrthogonalGeometry(n, n // 2) if name == "square-sorted" else \
            JOrthogonalGeometry(n, signature=list(_unsorted(n)))
        return make_spd(n, seed=1), None, 1.0, geo, geo.random_point(generator=gen)
    n, k = 14, 5
    c = make_spd(n, seed=4)
    if name == "rect-indefinite":
        # indefinite C (the kernel clips Q̲ to its PSD part) on the compact Stiefel case J = I,
        # where the cost stays bounded
        geo = IndefiniteStiefelGeometry(n, k, signature=[1] * n, k_signature=[1] * k)
        c = c - np.eye(n) * np.median(np.linalg.eigvalsh(c))
        return c, make_spd(k, seed=5), -0.7, geo, geo.random_point(generator=gen)
    geo = IndefiniteStiefelGeometry(n, k, signature=list(_unsorted(n, 2)),
                                    k_signature=[1, -1, -1, 1, 1])
    return c, make_spd(k, seed=5), 0.7, geo, geo.random_point(generator=gen)


def _run_pairs(solver_pairs, steps, n, seed):
    """The pairs GS-JOBCD uses in its first ``steps`` iterations, drawn as the solver draws
    them (random: PAIR_BATCH at a time from the run's seeded generator)."""
    if solver_pairs == "cyclic":
        tri = torch.triu_indices(n, n, 1).T.tolist()
        return [tri[t % len(tri)] for t in range(steps)]
    gen = torch.Generator().manual_seed(seed)
    out = []
    while len(out) < steps:
        out += random_pairs(n, PAIR_BATCH, gen).tolist()
    return out[:steps]


@pytest.mark.parametrize("order", ["random", "cyclic"])
@pytest.mark.parametrize("name", ["square-sorted", "square-unsorted", "rect", "rect-indefinite"])
def test_compiled_gs_jobcd_matches_reference(order, name):
    c, d, scale, geo, x0 = _case(name)
    iterations = 250 // GSJOBCD.pairs_per_iteration(x0.shape[0])  # about 250 pair updates
    oracle = QuadraticOracle(torch.from_numpy(c), None if d is None else torch.from_numpy(d),
                             scale=scale)
    assert oracle.curvature_is_psd == (name != "rect-indefinite")
    solver = GSJOBCD(side="row", pairs=order, seed=5, max_iterations=iterations, eval_every=20)
    res = solver.run(oracle, x0, geo)
    assert res.info["compiled"] and res.iterations == iterations
    steps = iterations * GSJOBCD.pairs_per_iteration(x0.shape[0])
    x_ref, f_ref = _reference_gs(c, d, scale, np.array(geo.j.values, float), x0.numpy(),
                                 _run_pairs(order, steps, x0.shape[0], 5),
                                 jk=np.array(geo.jk.values, float))
    assert np.abs(res.point.numpy() - x_ref).max() <= 1e-12 * max(1.0, np.abs(x_ref).max())
    assert abs(res.cost - f_ref) <= 1e-12 * max(1.0, abs(f_ref))
    assert res.violation <= 1e-12
    costs = np.asarray(res.history["cost"])
    assert np.all(np.diff(costs) <= 1e-12 * abs(costs[0]))  # (clipped) majoriser: monotone


def test_compiled_and_per_pair_paths_agree_with_refresh():
    """The per-pair path (other devices and dtypes) and the compiled one give the same iterates,
    with ``refresh_every`` splitting the kernel's chunks (Y and f recomputed every 37 pairs)."""
    c, d, scale, geo, x0 = _case("rect")
    oracle = QuadraticOracle(torch.from_numpy(c), torch.from_numpy(d), scale=scale)
    compiled = GSJOBCD(side="row", seed=1, max_iterations=700, eval_every=300, refresh_every=37)
    res_c = compiled.run(oracle, x0, geo)
    per_pair = GSJOBCD(side="row", seed=1, max_iterations=700, eval_every=300, refresh_every=37)
    per_pair.setup = _without_kernel(per_pair.setup)
    res_p = per_pair.run(oracle, x0, geo)
    assert res_c.info["compiled"] and not res_p.info["compiled"]
    torch.testing.assert_close(res_c.point, res_p.point, rtol=0, atol=1e-12)
    assert res_c.cost == pytest.approx(res_p.cost, rel=1e-12)
    assert res_c.cost == pytest.approx(float(oracle.value(res_c.point)), rel=1e-12)


def _without_kernel(setup):
    def wrapped(run):
        setup(run)
        run.compiled = False
    return wrapped


def test_greedy_order_takes_the_best_candidate():
    """One greedy step over 6 candidates equals the one-candidate step on the candidate whose
    exact model change ``f(X⁺) − f(X) + θ/2 ‖V − I‖²`` is the smallest (Q̲ is exact here)."""
    n = 10
    c = make_spd(n, seed=2)
    j = _unsorted(n, 1)
    geo = JOrthogonalGeometry(n, signature=list(j))
    x0 = geo.random_point(generator=torch.Generator().manual_seed(0)).numpy()
    y0 = c @ x0
    f0 = float(np.sum(x0 * y0))
    cands = np.array([[0, 1], [2, 7], [3, 4], [9, 5], [6, 8], [1, 3]], dtype=np.int64)
    empty = np.empty((0, 0))
    model = []
    for p in range(len(cands)):
        x, y = x0.copy(), y0.copy()
        _, f, _ = gs_pairs(x, y, c, empty, 1.0, f0, j, THETA, False, cands, p, 1, 1)
        b = cands[p]
        v = np.linalg.lstsq(x0[b].T, x[b].T, rcond=None)[0].T  # X⁺[B] = V X[B]
        model.append(f - f0 + 0.5 * THETA * np.sum((v - np.eye(2)) ** 2))
        assert f <= f0 + 1e-12 * abs(f0)
    assert len(set(np.round(model, 10))) == len(model)  # a clear winner
    x, y = x0.copy(), y0.copy()
    _, f, status = gs_pairs(x, y, c, empty, 1.0, f0, j, THETA, False, cands, 0, 1, len(cands))
    xb, yb = x0.copy(), y0.copy()
    _, fb, _ = gs_pairs(xb, yb, c, empty, 1.0, f0, j, THETA, False, cands,
                        int(np.argmin(model)), 1, 1)
    assert status == 0 and f == fb
    np.testing.assert_array_equal(x, xb)
    np.testing.assert_allclose(y, c @ x, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["sorted", "unsorted"])
def test_greedy_order_is_monotone_and_reaches_certificate(kind):
    n = 12
    c = torch.from_numpy(make_spd(n, seed=n))
    geo = JOrthogonalGeometry(n, n // 2) if kind == "sorted" else \
        JOrthogonalGeometry(n, signature=list(_unsorted(n)))
    cert = trace_min_certificate(c.numpy(), geo.j)
    x0 = geo.random_point(generator=torch.Generator().manual_seed(1))
    res = GSJOBCD(side="row", pairs="greedy", candidates=6, seed=0, max_iterations=200_000,
                  target_cost=cert * (1 + 1e-9), eval_every=50).run(QuadraticOracle(c), x0, geo)
    assert (res.cost - cert) / cert <= 1e-8, res.stop_reason
    assert res.violation <= 1e-10
    costs = np.asarray(res.history["cost"])
    assert np.all(np.diff(costs) <= 1e-12 * abs(costs[0]))
    # deterministic given the seed
    again = GSJOBCD(side="row", pairs="greedy", candidates=6, seed=0, max_iterations=res.iterations,
                    eval_every=50).run(QuadraticOracle(c), x0, geo)
    assert torch.equal(again.point, res.point)


def test_greedy_needs_the_compiled_path_and_options_are_checked():
    geo = JOrthogonalGeometry(4, 2)
    oracle = QuadraticOracle(torch.eye(4, dtype=torch.float64))
    with pytest.raises(ValueError, match="greedy.*compiled kernel.*float32"):
        GSJOBCD(side="row", pairs="greedy").run(oracle, torch.eye(4, dtype=torch.float32), geo)
    with pytest.raises(ValueError, match="greedy.*curvature='scalar'"):
        GSJOBCD(side="row", pairs="greedy", curvature="scalar").run(oracle, torch.eye(4,
                                                                          dtype=torch.float64),
                                                        geo)
    with pytest.raises(ValueError, match="candidates"):
        GSJOBCD(side="row", pairs="greedy", candidates=0)
    with pytest.raises(ValueError, match="refresh_every"):
        GSJOBCD(side="row", refresh_every=0)


def _rcd_reference_sweep(x, g, rounds, eta):
    """Today's torch rounds of the linearised RCD sweep (vectorised over each round)."""
    x = x.clone()
    for pairs in rounds:
        i, j = pairs[:, 0], pairs[:, 1]
        xi, xj, gi, gj = x[i], x[j], g[i], g[j]
        theta = -eta * ((gi * xj).sum(-1) - (gj * xi).sum(-1))
        cth, sth = torch.cos(theta)[:, None], torch.sin(theta)[:, None]
        x[i], x[j] = cth * xi + sth * xj, cth * xj - sth * xi
    return x


@pytest.mark.parametrize("n", [9, 16])
def test_compiled_rcd_sweep_matches_torch_rounds(n):
    p = 4
    geo = StiefelGeometry(n, p)
    c = torch.from_numpy(make_spd(n, seed=n))
    oracle = QuadraticOracle(c)
    x0 = torch.linalg.qr(torch.randn(n, p, generator=torch.Generator().manual_seed(0),
                                     dtype=torch.float64))[0]
    sweeps = 5
    res = RCD(step_size=0.05, seed=2, max_iterations=sweeps).run(oracle, x0, geo)
    solver = RCD(step_size=0.05)
    run = solver.start(oracle, x0, geo)
    gen = torch.Generator().manual_seed(2)
    x = x0
    for _ in range(sweeps):  # the run draws one relabelling per sweep from its generator
        rounds = torch.randperm(n, generator=gen)[run.rounds]
        x = _rcd_reference_sweep(x, oracle.gradient(x), rounds, 0.05)
    torch.testing.assert_close(res.point, x, rtol=0, atol=1e-12)
    assert res.violation < 1e-13


def _reference_jacobi(x, g_rows, pairs, j, sigma, theta):
    """J-JOBCD's step from the formulas: per pair ``M = G_B Zᵀ``, ``ς = σ‖Z‖₂² + θ``
    (``np.linalg.norm`` ord 2), the torch steps' solve of ``P = M − ςI``, ``X[B] = V Z``; the
    predicted change."""
    out, predicted = x.copy(), 0.0
    for b in range(x.shape[0]):
        for t, (i, k) in enumerate(pairs[b]):
            z = x[b, [i, k]]
            m = g_rows[b, t] @ z.T
            rho = np.linalg.norm(z, 2) ** 2
            s = sigma * rho + theta
            p = torch.from_numpy((m - s * np.eye(2))[None])
            q = s * torch.eye(4, dtype=torch.float64)[None]
            v = _solve_torch(j[i] != j[k], p, q)[0].numpy()
            w = v - np.eye(2)
            predicted += float(np.sum(w * m) + 0.5 * sigma * rho * np.sum(w * w))
            out[b, [i, k]] = v @ z
    return out, predicted


@pytest.mark.parametrize("k", [4, 9])
def test_jacobi_kernel_against_the_formulas(k):
    """J-JOBCD's compiled step (CPU float64 :func:`update_pairs`) equals the formulas solved by the
    torch steps of the 2×2 solver, rows and predicted change (1e-12), for mixed and same-sign
    pairs of two matrices at once, rectangular and square (float32 takes the batched torch path:
    1e-4); a row so large that ‖Z‖₂² overflows raises NonFiniteError naming the curvature and
    leaves X unchanged."""
    rng = np.random.default_rng(k)
    n, nb = 9, 2
    j = _unsorted(n, k)
    x = rng.standard_normal((nb, n, k))
    g = rng.standard_normal((nb, n, k))
    pairs = random_matching(n, torch.Generator().manual_seed(k), batch=(nb,))
    bidx = np.arange(nb)[:, None, None]
    g_rows = g[bidx, pairs.numpy()]
    for sigma, theta in ((0.7, 1e-6), (3.0, 0.5)):
        new, predicted = update_pairs(torch.from_numpy(x), torch.from_numpy(g_rows), pairs,
                                      torch.from_numpy(j), sigma, theta)
        ref, ref_pred = _reference_jacobi(x, g_rows, pairs.numpy(), j, sigma, theta)
        np.testing.assert_allclose(new.numpy(), ref, rtol=1e-12, atol=1e-12)
        assert abs(predicted - ref_pred) <= 1e-12 * max(1.0, abs(ref_pred))
        assert predicted < 0.0
        new32, pred32 = update_pairs(torch.from_numpy(x).float(), torch.from_numpy(g_rows).float(),
                                     pairs, torch.from_numpy(j), sigma, theta)  # torch path
        assert new32.dtype == torch.float32
        np.testing.assert_allclose(new32.numpy(), ref, rtol=1e-4, atol=1e-4)
        assert abs(pred32 - ref_pred) <= 1e-4 * max(1.0, abs(ref_pred))
    big = x.copy()
    big[0, pairs[0, 0, 0]] = 1e200
    with pytest.raises(NonFiniteError, match="non-finite block curvature"):
        update_pairs(torch.from_numpy(big), torch.from_numpy(g_rows), pairs, torch.from_numpy(j),
                     1.0, 1e-6)



@pytest.mark.parametrize("signs", [(1.0, -1.0), (-1.0, 1.0), (1.0, 1.0), (-1.0, -1.0)])
def test_scalar_solve_is_the_general_solve_at_scalar_curvature(signs):
    """J-JOBCD's pair solve for ``q = ς I₄`` equals :func:`solve_jorth2` with that ``q`` (1e-12)
    on instances whose step is not small (M of the order of ς, and with ς ≫ ‖M‖ on O(1,1)), and
    both leave V = I with the batched-solver status when ς ≤ 0 on O(1,1)."""
    rng = np.random.default_rng(7)
    j1, j2 = signs
    for curv, scale in [(1.0, 1.0), (0.3, 5.0), (50.0, 30.0)] + [(1e4, 1.0)] * (j1 != j2):
        for _ in range(200):
            m = scale * rng.standard_normal(4)
            status, *v = _scalar_solve(j1, j2, curv, *m)
            ref_status, *ref = solve_jorth2(j1, j2, m[0] - curv, m[1], m[2], m[3] - curv,
                                            curv * np.eye(4))
            assert status == ref_status == SOLVED
            np.testing.assert_allclose(v, ref, rtol=1e-12, atol=1e-12)
            vm = np.array(v).reshape(2, 2)  # the step is in O(J_BB)
            jbb = np.diag(signs)
            np.testing.assert_allclose(vm.T @ jbb @ vm, jbb, atol=1e-12 * max(1.0, vm.max() ** 2))
    if j1 != j2:
        assert _scalar_solve(j1, j2, 0.0, 1.0, 2.0, 3.0, 4.0) == (NEEDS_BATCHED, 1.0, 0.0, 0.0, 1.0)


def test_scalar_solve_small_rotation_is_antiparallel_to_the_linear_term():
    """On O(2) with ``q = ς I₄`` the model is ``ς + aC + bS`` on the circle of each form, whose
    minimiser is ``(C, S) = −(a, b)/‖(a, b)‖``; for ς ≫ ‖M‖ the rotation (``a = p₁₁ + p₂₂``,
    ``b = p₂₁ − p₁₂``) wins with a tiny angle, and ``V₂₁ / V₁₁ = b / a`` holds to rounding
    (relative 1e-14), which a solve through ``√(1 − t²)`` at ``t ≈ 1`` would miss."""
    rng = np.random.default_rng(3)
    for curv in (1e3, 1e5, 1e7):
        m11, m12, m21, m22 = rng.standard_normal(4)
        status, v11, v12, v21, v22 = _scalar_solve(1.0, 1.0, curv, m11, m12, m21, m22)
        a, b = m11 + m22 - 2.0 * curv, m21 - m12
        assert status == SOLVED and v11 > 0.0 and v12 == -v21 and v22 == v11
        assert abs(v21 / v11 - b / a) <= 1e-14 * abs(b / a)
        assert abs(math.hypot(v11, v21) - 1.0) <= 1e-15


_TINY_RUNS = textwrap.dedent("""
    import torch
    from orthoplug.baselines.rcd import RCD
    from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry
    from orthoplug.geometry.stiefel import StiefelGeometry
    from orthoplug.problems.hevp import make_spd
    from orthoplug.solvers.jobcd import GSJOBCD, JJOBCD
    from orthoplug.oracles import QuadraticOracle

    def tiny_runs():
        geo = IndefiniteStiefelGeometry(6, 3, 3, 2)
        x0 = geo.random_point(generator=torch.Generator().manual_seed(0))
        oracle = QuadraticOracle(torch.from_numpy(make_spd(6, seed=0)),
                                 torch.from_numpy(make_spd(3, seed=1)))
        out = {}
        for order in ("random", "greedy"):
            res = GSJOBCD(side="row", pairs=order, candidates=3, seed=0, max_iterations=120).run(
                oracle, x0, geo)
            out[order], out[order + "-cost"] = res.point.tolist(), res.cost
        res = RCD(seed=0, max_iterations=3).run(
            QuadraticOracle(torch.from_numpy(make_spd(6, seed=2))),
            torch.eye(6, 2, dtype=torch.float64), StiefelGeometry(6, 2))
        out["rcd"] = res.point.tolist()
        res = JJOBCD(seed=0, max_iterations=40).run(oracle, x0, geo)
        out["jjobcd"], out["jjobcd-cost"] = res.point.tolist(), res.cost
        return out
""")


def test_kernels_run_unjitted_with_the_same_results():
    """``NUMBA_DISABLE_JIT=1`` runs the kernels' source as Python (a subprocess, tiny cases): the
    GS-JOBCD runs (random, greedy), a J-JOBCD run and an RCD run give the compiled results of this
    process."""
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _TINY_RUNS + "\nimport json\nprint(json.dumps(tiny_runs()))"],
        env=env, capture_output=True, text=True, timeout=300, check=True)
    plain = json.loads(proc.stdout.strip().splitlines()[-1])
    namespace: dict = {}
    exec(_TINY_RUNS, namespace)
    compiled = namespace["tiny_runs"]()
    assert plain.keys() == compiled.keys()
    for key, value in compiled.items():
        np.testing.assert_allclose(plain[key], value, rtol=1e-13, atol=1e-13)


@pytest.mark.slow
def test_feasibility_after_a_million_compiled_pair_steps():
    """10⁶ compiled GS-JOBCD pair steps on O(J), n = 100, from a start of condition number 10³,
    with C of condition number 10³ (log-spaced eigenvalues, so the run is still moving at the
    end): the violation stays ≤ 1e-10 (a slow test: ``pytest -m slow``)."""
    n = 100
    rng = np.random.default_rng(7)
    u = np.linalg.qr(rng.standard_normal((n, n)))[0]
    c = (u * np.logspace(0, 3, n)) @ u.T
    geo = JOrthogonalGeometry(n, signature=list(_unsorted(n, 3)))
    x0 = geo.random_point(cond=1e3, generator=torch.Generator().manual_seed(4))
    cert = trace_min_certificate(c, geo.j)
    iterations = 10**6 // GSJOBCD.pairs_per_iteration(n)  # 10⁶ pair updates
    res = GSJOBCD(side="row", seed=0, max_iterations=iterations, eval_every=iterations // 10).run(
        QuadraticOracle(torch.from_numpy(0.5 * (c + c.T))), x0, geo)
    assert res.iterations == iterations
    gap = (res.cost - cert) / cert
    print(f"violation after 1e6 pairs: {res.violation:.3e} (relative "
          f"{float(geo.relative_violation(res.point)):.3e}, start {float(geo.violation(x0)):.3e});"
          f" gap {gap:.3e}")
    assert res.violation <= 1e-10
    assert gap > 1e-12  # still moving: the steps are not all V = I
    costs = np.asarray(res.history["cost"])
    assert np.all(np.diff(costs) <= 1e-12 * abs(costs[0]))


def test_pairs_the_kernel_cannot_solve_go_to_the_batched_solver(monkeypatch):
    """``w± ≤ 0`` (a curvature that rounding made indefinite on a hyperbolic form) is left to
    the batched solver: by the wrapper of the 2×2 kernel, and by GS-JOBCD, which solves such a
    pair on its per-pair path and goes on with the kernel (same iterates as without it)."""
    import orthoplug.solvers.jobcd as jobcd_mod
    from orthoplug.kernels.jobcd import NEEDS_BATCHED_PAIR
    from orthoplug.subproblems.jorth2 import solve_jorth2x2_single

    q = np.diag([1.0, -3.0, -3.0, 1.0])  # w+ = ½(α+β)ᵀq(α+β) < 0 for eps = (1, 1)
    p = [[0.3, -0.2], [0.1, 0.4]]
    v = solve_jorth2x2_single((1, -1), p, Qd=q)
    vb = solve_jorth2x2(torch.tensor([[1, -1]]), torch.tensor([p], dtype=torch.float64),
                        Qd=torch.from_numpy(q)[None])[0]
    assert np.array_equal(np.array(v), vb.numpy())

    c, d, scale, geo, x0 = _case("square-unsorted")
    oracle = QuadraticOracle(torch.from_numpy(c))
    plain = GSJOBCD(side="row", seed=2, max_iterations=300, eval_every=100).run(oracle, x0, geo)
    calls = {"n": 0}
    kernel = jobcd_mod.gs_pairs

    def refusing(x, y, c, d, s, f, jvec, theta, clip, pairs, start, steps, candidates):
        calls["n"] += 1
        if calls["n"] in (1, 3):  # stop as if pair `start + 7` needed the batched solver
            done, f, status = kernel(x, y, c, d, s, f, jvec, theta, clip, pairs, start,
                                     min(steps, 7), candidates)
            return done, f, NEEDS_BATCHED_PAIR if status == 0 and done == 7 else status
        return kernel(x, y, c, d, s, f, jvec, theta, clip, pairs, start, steps, candidates)

    monkeypatch.setattr(jobcd_mod, "gs_pairs", refusing)
    res = GSJOBCD(side="row", seed=2, max_iterations=300, eval_every=100).run(oracle, x0, geo)
    assert calls["n"] > 3 and res.iterations == 300
    torch.testing.assert_close(res.point, plain.point, rtol=0, atol=1e-12)
    assert res.cost == pytest.approx(plain.cost, rel=1e-12)
