"""RSSM's adaptive step rules: Polyak with an estimated optimum, geometric decay with restarts."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from orthoplug.baselines.rsubgrad import RSubGrad
from orthoplug.geometry._linalg import sym
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.geometry.stiefel_block import complement, polar_tall, take_columns
from orthoplug.problems.nonsmooth_problems import SparsePCA, dpcp_instance
from orthoplug.solvers.rssm import RSSM, block_subgradient_sq
from orthoplug.solvers.step_rules import (
    Constant,
    Diminishing,
    Geometric,
    GeometricOnStall,
    Polyak,
    step_rule,
)

DT = torch.float64


def start(rule, f0, epoch_length=1, share=1.0):
    """Start a rule in place at ``f(X₀) = f0`` (γ₀ = 1 for ``step="auto"``)."""
    rule.start(lambda: f0, lambda: 1.0, epoch_length, share)
    return rule


def test_polyak_step_formula_and_level_adjustment():
    rule = Polyak(level=0.5, patience=2, grow=1.5, drop=0.5)  # the classical values
    start(rule, 4.0, 1)
    assert rule.delta == 2.0
    # f = 4, target f̂ = 4 − 2 = 2, ‖ξ‖² = 8: γ = 2/8
    rule.observe(4.0)
    assert rule.polyak_length(4.0, 8.0) == pytest.approx(0.25)
    rule.observe(4.0)  # second iteration without a drop of δ/2 = 1: δ halves
    assert rule.delta == 1.0 and rule.halvings == 1
    rule.observe(3.4)  # drop 0.6 >= δ/2 = 0.5: sufficient, δ grows by 1.5 (cap δ₀ = 2)
    assert rule.best == 3.4 and rule.delta == pytest.approx(1.5)
    rule.observe(1.0)
    assert rule.delta == 2.0  # capped at δ₀
    fresh = Polyak()
    start(fresh, 1.0, 1)
    assert fresh.polyak_length(1.0, 0.0) == 0.0  # zero subgradient and no estimate yet: no step


def test_polyak_block_norm_estimate_is_a_running_average():
    rule = Polyak()
    start(rule, 1.0, 2)
    rule.observe(1.0)
    g1 = rule.polyak_length(1.0, 2.0, share=0.5)  # estimate ‖ξ‖² = 2/0.5 = 4
    assert rule.norm_sq == pytest.approx(4.0)
    assert g1 == pytest.approx((1.0 - (1.0 - 0.5)) / 4.0)
    rule.polyak_length(1.0, 4.0, share=0.5)  # 8 averaged with weight 0.5
    assert rule.norm_sq == pytest.approx(6.0)


@pytest.mark.parametrize("epoch_length", [1, 2, 5])
def test_polyak_level_grows_by_the_same_factor_per_epoch_for_every_block_count(epoch_length):
    """δ grows by ``grow^(1/E)`` per sufficient drop: an epoch of E drops grows it by ``grow``."""
    rule = Polyak(level=0.5, patience=2, grow=1.5, drop=0.5)
    start(rule, 4.0, epoch_length)
    for _ in range(2 * epoch_length):  # two epochs without a drop: δ halves
        rule.observe(4.0)
    assert rule.delta == pytest.approx(1.0) and rule.halvings == 1
    for i in range(epoch_length):  # every iteration drops by 0.8 ≥ δ/2
        rule.observe(4.0 - 0.8 * (i + 1))
        assert rule.delta == pytest.approx(1.5 ** ((i + 1) / epoch_length))
    assert rule.halvings == 1


def test_polyak_default_drop_and_growth():
    """Defaults ``drop = 0.7``, ``grow = 1.2``, ``path = 30``. With ``path=None`` a drop of
    0.6δ is not sufficient (δ halves after ``patience`` epochs), one of 0.7δ is and grows δ
    by ``1.2^(1/E)``; the step uses the new δ."""
    assert (Polyak().grow, Polyak().drop, Polyak().path) == (1.2, 0.7, 30.0)
    rule = Polyak(level=0.5, patience=1, path=None)
    start(rule, 4.0, 2)  # δ₀ = 2
    rule.observe(4.0)
    rule.observe(3.0)  # drop 1.0 < 0.7·2 = 1.4; second iteration of the window: δ halves
    assert rule.delta == 1.0 and rule.halvings == 1 and rule.ref == 3.0
    rule.observe(2.4)  # drop 0.6 < 0.7
    assert rule.delta == 1.0 and rule.ref == 3.0
    rule.observe(2.25)  # drop 0.75 ≥ 0.7·1: δ·1.2^(1/2)
    assert rule.ref == 2.25 and rule.delta == pytest.approx(math.sqrt(1.2))
    # γ = (f − (f_best − δ))/N with N = ‖ξ_C‖²/ω on the first call
    assert rule.polyak_length(2.5, 0.5, share=0.5) == pytest.approx(
        (2.5 - 2.25 + math.sqrt(1.2)) / 1.0)
    for _ in range(20):  # sufficient drops grow δ up to δ₀ and no further
        rule.observe(rule.best - 0.75 * rule.delta)
    assert rule.delta == 2.0 and rule.halvings == 1


def test_polyak_path_rule_halves_only_after_the_path_or_a_flat_epoch():
    """While the best value falls at a steady pace, δ is kept until the path since the last
    change reaches ``B = path·s₀`` (s₀ the first step's length); once ``patience`` epochs
    passed, an epoch without a new best, or whose decrease is at most ``stall`` times the
    level's mean per epoch, halves δ; a sufficient drop keeps the level (and resets the path).
    With ``path=None`` δ halves after ``patience`` epochs whatever the progress."""
    rule = start(Polyak(level=0.5, patience=2, path=3.0), 4.0)  # δ₀ = 2, E = 1
    deltas = []
    for f in (3.9, 3.8, 3.7, 3.6):  # new bests, each 0.1 < 0.7δ below the last
        rule.observe(f)
        deltas.append(rule.delta)
        # f = f_best: γ = δ/‖ξ‖² with ‖ξ‖ = 1, so each step has length δ = 2 (s₀ = 2, B = 6)
        assert rule.polyak_length(f, 1.0) == pytest.approx(rule.delta)
    assert rule.unit == 2.0
    assert deltas == [2.0, 2.0, 2.0, 1.0]  # halved once the path 2 + 2 + 2 reached B
    assert rule.halvings == 1 and rule.ref == 3.6 and rule.travelled == pytest.approx(1.0)
    rule.observe(3.6)  # no new best, but only one epoch of the level
    assert rule.delta == 1.0
    rule.observe(3.6)  # second epoch without a new best: δ halves at once
    assert rule.delta == 0.5 and rule.halvings == 2 and rule.travelled == 0.0
    rule.polyak_length(3.6, 1.0)
    rule.observe(3.25)  # a sufficient drop (0.7δ): δ·1.2, the path restarts
    assert rule.delta == pytest.approx(0.6) and rule.travelled == 0.0 and rule.since == 0
    rule.observe(3.0)  # 0.25 < 0.7δ
    rule.observe(2.99)  # the decrease slowed to 0.01 ≤ stall · mean 0.13 per epoch: δ halves
    assert rule.delta == pytest.approx(0.3) and rule.halvings == 3
    plain = start(Polyak(level=0.5, patience=2, path=None), 4.0)
    for f in (3.9, 3.8):
        plain.observe(f)
    assert plain.delta == 1.0  # two epochs without a sufficient drop


def test_polyak_path_counts_block_steps_as_a_share_of_a_full_step():
    """A block step of length ``γ‖ξ_C‖`` adds ``γ‖ξ_C‖√ω`` to the path and ``s₀ = γ₀‖ξ_C‖/√ω``:
    an epoch of ``1/ω`` orthogonal block steps counts as one full step."""
    rule = start(Polyak(level=0.5, patience=1, path=30.0), 4.0, epoch_length=4, share=0.25)
    rule.observe(4.0)
    gamma = rule.polyak_length(4.0, 1.0, share=0.25)  # N = ‖ξ_C‖²/ω = 4
    assert gamma == pytest.approx(2.0 / 4.0)
    assert rule.unit == pytest.approx(gamma * 1.0 / 0.5)
    assert rule.travelled == pytest.approx(gamma * 1.0 * 0.5)


def test_polyak_with_a_known_optimum_is_polyaks_step():
    """``optimum=f*``: ``γ_k = (f(X_k) − f*)/‖ξ_k‖²``; the RSubGrad iterates are those of
    ``X ← polar(X − γ_k ξ_k)`` written out, and on the sharp DPCP (f* the value on ``S^⊥``)
    the angle falls to round-off."""
    prob = dpcp_instance(40, 28, 160, outlier_ratio=0.5, seed=2)
    oracle = prob.oracle()
    f_star = float(oracle.value(prob.normals))
    x = prob.spectral_point()
    steps = RSubGrad(step_size=Polyak(optimum=f_star), seed=0).iterate(
        oracle, x, StiefelGeometry(40, 12))
    for _ in range(5):
        g = oracle.gradient(x)
        xi = g - x @ sym(x.mT @ g)
        x = polar_tall(x - (float(oracle.value(x)) - f_star) / float((xi * xi).sum()) * xi)
        assert torch.equal(next(steps).x, x)
    for _ in range(60):
        tracker = next(steps)
    assert prob.principal_angle(tracker.x) <= 1e-10
    low = start(Polyak(optimum=1.0), 2.0)
    low.observe(0.5)
    assert low.polyak_length(0.5, 1.0) == 0.0  # f below a wrong f*: no step, never an ascent


@pytest.mark.parametrize("ell", [None, 4])
def test_polyak_default_path_rule_keeps_descending_where_halving_readily_stalls(ell):
    """ℓ1 sparse PCA (weakly convex, not sharp): with ``path=None`` δ halves every
    ``patience`` epochs, the steps become summable and the best value freezes; with the path
    condition the best value still falls after the other froze and ends lower."""
    b = SparsePCA.random(60, 40, 0.0, seed=1).b
    prob = SparsePCA(b, 0.5 * float(torch.linalg.eigvalsh(b.mT @ b)[-1]) / math.sqrt(40))
    gen = torch.Generator().manual_seed(2)
    x0 = torch.linalg.qr(torch.randn(40, 4, dtype=DT, generator=gen))[0]

    def best_values(rule):
        solver = (RSubGrad(step_size=rule, seed=0) if ell is None
                  else RSSM(num_blocks=ell, step_size=rule, seed=0))
        steps = solver.iterate(prob.oracle(), x0, StiefelGeometry(40, 4))
        best = [min(prob.value(next(steps).x) for _ in range(100)) for _ in range(4)]
        return list(itertools.accumulate(best, min))

    plain = best_values(Polyak(path=None))
    path = best_values(Polyak())  # the default: path=30
    assert plain[3] == pytest.approx(plain[2], abs=1e-12)  # frozen for 200 iterations
    assert path[1] < path[0] - 5e-4 and path[3] < plain[3] - 0.01


def test_polyak_target_never_rises_above_the_best_value():
    """``f̂ = f_best − δ`` with ``δ > 0``, and ``f_best`` never increases: on any sequence the
    target stays below every value seen, and ``f_best`` is monotone."""
    gen = torch.Generator().manual_seed(3)
    rule = Polyak(level=0.3, patience=2)
    start(rule, 1.0, 3)
    seen, best = [1.0], 1.0
    for _ in range(300):
        f = float(torch.rand((), dtype=DT, generator=gen)) * best * 1.5
        rule.observe(f)
        seen.append(f)
        assert rule.best == min(seen) <= best
        assert rule.best - rule.delta < min(seen)
        best = rule.best


@pytest.mark.parametrize("share", [1.0, 0.5, 0.2])
def test_polyak_step_is_positive_and_finite_on_any_value_sequence(share):
    """γ_k ≥ δ_k/N_k ≥ 0 (up to the rounding of ``f − f̂``) and finite whatever the values do
    (rises, plateaus, exact repeats, zero): ``f̂ = f_best − δ`` lies below every observed value,
    and δ only halves or grows."""
    gen = torch.Generator().manual_seed(11)
    for patience in (1, 2, 3):
        rule = Polyak(level=0.5, patience=patience)
        f = 2.0
        start(rule, f, 2)
        for k in range(400):
            move = float(torch.randn((), dtype=DT, generator=gen))
            f = 0.0 if k == 200 else max(0.0, f * math.exp(0.3 * move) if k % 7 else f)
            xi_sq = float(torch.rand((), dtype=DT, generator=gen)) * 10.0 ** (k % 5 - 2)
            rule.observe(f)
            gamma = rule.polyak_length(f, xi_sq, share)
            assert math.isfinite(gamma) and gamma >= 0
            assert rule.delta > 0 and f >= rule.best
            eps = torch.finfo(DT).eps
            assert gamma * rule.norm_sq >= rule.delta * (1 - 1e-12) - 4 * eps * f
        assert rule.halvings > 0  # the plateaus and rises did cut δ


def test_geometric_on_stall_rule():
    rule = start(GeometricOnStall(1.0, 0.5, shrink=0.25, patience=1), 0.0)
    assert [rule.length(k, None, None, 1.0) for k in range(3)] == [1.0, 0.5, 0.25]
    x = torch.zeros(3, 2, dtype=DT)
    assert rule.epoch_end(2, 5.0, x) is None  # first epoch end: stored as best
    back = rule.epoch_end(4, 6.0, x + 1.0)  # worse: restart from the stored point
    assert torch.equal(back, x) and rule.restarts == 1
    assert rule.length(4, None, None, 1.0) == pytest.approx(0.25 * 1.0 * 0.5 ** 4)
    assert rule.length(5, None, None, 1.0) == pytest.approx(rule.length(4, None, None, 1.0) * 0.5)
    for bad in [dict(step=0.0, decay=0.5), dict(step=1.0, decay=1.5),
                dict(step=1.0, decay=0.5, shrink=1.0),
                dict(step=1.0, decay=0.5, patience=0)]:
        with pytest.raises(ValueError):
            GeometricOnStall(**bad)
    with pytest.raises(ValueError, match="level"):
        Polyak(level=0.0)
    with pytest.raises(ValueError, match="patience"):
        Polyak(patience=0)
    with pytest.raises(ValueError, match="grow"):
        Polyak(grow=0.9)
    with pytest.raises(ValueError, match="drop"):
        Polyak(drop=0.0)
    for bad in (0.0, -1.0, math.nan, True, "30"):
        with pytest.raises(ValueError, match="path"):
            Polyak(path=bad)
    with pytest.raises(ValueError, match="stall"):
        Polyak(path=30.0, stall=1.5)
    with pytest.raises(ValueError, match="optimum"):
        Polyak(optimum=math.inf)


def test_block_subgradient_norm_matches_formula_15():
    gen = torch.Generator().manual_seed(0)
    x = torch.linalg.qr(torch.randn(9, 6, dtype=DT, generator=gen))[0]
    cols = torch.tensor([1, 4, 5])
    rest = complement(cols, 6)
    g = torch.randn(9, 3, dtype=DT, generator=gen)
    xc = take_columns(x, cols)
    a = xc.mT @ g
    xi = xc @ (0.5 * (a - a.mT)) + g - x @ (x.mT @ g)
    assert block_subgradient_sq(x, cols, rest, g) == pytest.approx(float((xi * xi).sum()),
                                                                   rel=1e-12)


@pytest.mark.parametrize("rule", [Polyak(), Polyak(path=None), GeometricOnStall()])
@pytest.mark.parametrize("ell", [None, 4])
def test_dpcp_recovery_with_adaptive_rules(rule, ell):
    prob = dpcp_instance(60, 40, 300, outlier_ratio=0.5, seed=3)
    x0 = prob.random_point(103)
    geo = StiefelGeometry(60, 20)
    solver = (RSubGrad(step_size=rule, max_iterations=700, seed=0) if ell is None
              else RSSM(num_blocks=ell, step_size=rule, max_iterations=700, seed=0))
    res = solver.run(prob.oracle(), x0, geo)
    assert prob.principal_angle(res.point) <= 1e-6
    assert res.violation <= 1e-12


def test_polyak_needs_fewer_iterations_than_the_papers_geometric_rule():
    prob = dpcp_instance(60, 40, 300, outlier_ratio=0.5, seed=4)
    x0 = prob.spectral_point()
    geo = StiefelGeometry(60, 20)

    def iterations_to(solver, target=1e-6, cap=1500):  # an iteration: ⌈4/2⌉ = 2 block steps
        for k, tracker in enumerate(solver.iterate(prob.oracle(), x0, geo), 1):
            if prob.principal_angle(tracker.x) <= target:
                return k
            if k >= cap:
                return math.inf

    geometric = iterations_to(RSSM(num_blocks=4, step_size=Geometric(decay=0.95), seed=0))
    polyak = iterations_to(RSSM(num_blocks=4, seed=0))  # the default rule
    assert polyak < geometric


def test_restarts_make_epoch_start_values_monotone():
    prob = dpcp_instance(40, 28, 200, outlier_ratio=0.5, seed=5)
    x0 = prob.random_point(6)
    # a far too large constant-ish step: without restarts the iterates wander
    solver = RSSM(num_blocks=4, step_size=GeometricOnStall(2.0, decay=0.999 ** 2, shrink=0.5,
                                                           patience=1), seed=0)
    oracle = prob.oracle()
    starts = []
    run = solver.start(oracle, x0, StiefelGeometry(40, 12))
    for k in range(1, 401):
        solver.step(run)
        tracker = run.tracker
        if k % 2 == 0:  # an epoch (⌈4/2⌉ = 2 block steps) ends, restart applied
            starts.append(float(oracle.value(tracker.x)))
    # after its epoch-end check every epoch starts at a new best or back at the best so far
    assert run.steps.rule.restarts >= 1
    assert all(b <= a + 1e-12 for a, b in zip(starts, starts[1:], strict=False))
    assert starts[-1] == pytest.approx(run.steps.rule.best_value, abs=1e-12)


def test_solver_rule_errors():
    with pytest.raises(ValueError, match="level"):
        RSSM(step_size=Polyak(level=-1.0))
    with pytest.raises(ValueError, match="shrink"):
        RSubGrad(step_size=GeometricOnStall(shrink=2.0))
    with pytest.raises(ValueError, match="step_size must be"):
        RSSM(step_size="polyak-ish")
    for bad in (True, -1.0, math.nan, None):
        with pytest.raises(ValueError, match="step_size must be"):
            RSubGrad(step_size=bad)


def test_geoopt_rssm_adaptive_rules():
    import geoopt

    from orthoplug.adapters.geoopt import RSSM as GoRSSM

    prob = dpcp_instance(30, 20, 120, seed=5)
    y = prob.data
    stiefel = geoopt.EuclideanStiefel()
    for rule in ("polyak", GeometricOnStall()):
        x = geoopt.ManifoldParameter(prob.random_point(6), manifold=stiefel)
        opt = GoRSSM([x], rule, num_blocks=4, seed=0)

        def closure(opt=opt, x=x):
            opt.zero_grad()
            loss = torch.linalg.vector_norm(y.mT @ x, dim=1).mean()
            loss.backward()
            return loss

        closure()
        with pytest.raises(ValueError, match="closure"):
            opt.step()
        for _ in range(1500):
            opt.step(closure)
        assert prob.principal_angle(x.detach()) < 1e-6, rule
        xd = x.detach()
        assert float(torch.linalg.matrix_norm(xd.mT @ xd - torch.eye(10, dtype=DT))) < 1e-12
        # state_dict round trip continues identically
        x2 = geoopt.ManifoldParameter(xd.clone(), manifold=stiefel)
        opt2 = GoRSSM([x2], rule, num_blocks=4, seed=9)
        opt2.load_state_dict(opt.state_dict())

        def closure2(opt2=opt2, x2=x2):
            opt2.zero_grad()
            loss = torch.linalg.vector_norm(y.mT @ x2, dim=1).mean()
            loss.backward()
            return loss

        for _ in range(5):
            opt.step(closure)
            opt2.step(closure2)
        assert torch.equal(x.detach(), x2.detach())


def test_pymanopt_rssm_polyak():
    import autograd.numpy as anp
    import pymanopt

    from orthoplug.adapters.pymanopt import RSSM as PmRSSM

    prob = dpcp_instance(30, 20, 120, seed=5)
    y = prob.data.numpy()
    manifold = pymanopt.manifolds.Stiefel(30, 10)

    @pymanopt.function.autograd(manifold)
    def cost(x):
        return anp.mean(anp.sqrt(anp.sum((y.T @ x) ** 2, axis=1)))

    res = PmRSSM(num_blocks=4, max_iterations=1500, seed=0,  # the default Polyak rule
                 verbosity=0).run(pymanopt.Problem(manifold, cost))
    assert prob.principal_angle(torch.as_tensor(res.point)) < 1e-8


def test_step_rule_shorthands_and_templates():
    """A number is ``Diminishing(γ₀)``, a name the rule with its defaults, an object itself; a
    solver starts a copy per run, so one solver object gives the same run twice."""
    assert isinstance(step_rule(0.3), Diminishing) and step_rule(0.3).step == 0.3
    assert type(step_rule("geometric")) is Geometric and step_rule("geometric").decay == 0.98
    rule = Constant(0.05)
    assert step_rule(rule) is rule
    prob = dpcp_instance(20, 14, 80, seed=1)
    x0 = prob.random_point(2)
    solver = RSSM(num_blocks=3, step_size=Polyak(patience=2), max_iterations=60, seed=0)
    a = solver.run(prob.oracle(), x0, StiefelGeometry(20, 6))
    b = solver.run(prob.oracle(), x0, StiefelGeometry(20, 6))
    assert torch.equal(a.point, b.point)
    assert solver.step_rule.halvings == 0 and math.isnan(solver.step_rule.delta)  # untouched
    # Geometric's β is per epoch: RSSM-4 (epoch = 2 block steps) decays by β^(1/2) per step
    g = Geometric(1.0, decay=0.81)
    g.start(None, None, 2, 0.5)
    assert g.length(2, None, None, 0.5) == pytest.approx(0.81)
