"""The preconditioned J-JOBCD torch optimizer (``JJOBCD(precondition=...)``)."""

from __future__ import annotations

import copy

import geoopt
import pytest
import torch

from orthoplug.adapters import geoopt as go

N, P, MATRICES = 6, 3, 3
OPTIONS = {"adam": dict(precondition="adam"), "rms": dict(precondition="rms"),
           "adam, 3 matchings": dict(precondition="adam", matchings=3)}


def _point(seed: int = 0, cond: float = 3.0) -> geoopt.ManifoldParameter:
    manifold = go.JOrthogonal(N, P)
    x0 = manifold.geometry.random_point((MATRICES,), cond=cond,
                                        generator=torch.Generator().manual_seed(seed))
    return geoopt.ManifoldParameter(x0, manifold=manifold)


def _targets() -> torch.Tensor:
    return _point(seed=1).detach()


def _closure(opt, x, weights=(1.0, 1.0, 1.0), target=None):
    """``Σ_r w_r ‖X_r − T_r‖²``: matrices whose gradients differ in scale by ``w_r``."""
    target = _targets() if target is None else target
    w = torch.tensor(weights, dtype=x.dtype)

    def closure():
        opt.zero_grad()
        value = (w * ((x - target) ** 2).sum(dim=(-2, -1))).sum()
        value.backward()
        return value

    return closure


def _violation(x) -> float:
    return float(torch.linalg.matrix_norm(x.manifold.geometry.gram_error(x.detach())).max())


@pytest.mark.parametrize("name", list(OPTIONS))
def test_feasible_and_decreasing(name):
    x = _point()
    opt = go.JJOBCD([x], sigma_rule=5.0, seed=0, **OPTIONS[name])
    closure = _closure(opt, x)
    first = float(closure().detach())
    for _ in range(100):
        opt.step(closure)
        assert _violation(x) <= 1e-12
    assert float(closure().detach()) < 0.6 * first


@pytest.mark.parametrize("name", list(OPTIONS))
def test_resume_continues_the_same_iterates(name):
    x = _point()
    opt = go.JJOBCD([x], sigma_rule=20.0, seed=4, **OPTIONS[name])
    for _ in range(3):
        opt.step(_closure(opt, x))
    saved, at = copy.deepcopy(opt.state_dict()), x.detach().clone()
    for _ in range(3):
        opt.step(_closure(opt, x))
    y = geoopt.ManifoldParameter(at, manifold=go.JOrthogonal(N, P))
    resumed = go.JJOBCD([y], sigma_rule=20.0, seed=99, **OPTIONS[name])
    resumed.load_state_dict(saved)
    assert resumed.state[y]["precondition_step"] == 3
    for _ in range(3):
        resumed.step(_closure(resumed, y))
    assert torch.equal(y.detach(), x.detach())
    fresh = go.JJOBCD([_point()], sigma_rule=20.0, seed=4, **OPTIONS[name])
    assert not fresh.state  # nothing kept before the first step


def test_adam_direction_is_torch_adams_step():
    """On the linear losses ⟨C_t, X⟩ the preconditioned step equals the plain fixed-σ step on
    ⟨D_t, X⟩, D_t the (negated) step of ``torch.optim.Adam`` at lr 1 for the gradients C_t."""
    gen = torch.Generator().manual_seed(5)
    cs = [torch.randn(MATRICES, N, N, generator=gen, dtype=torch.float64) * s
          for s in (1.0, 10.0, 0.1)]
    y = torch.zeros(MATRICES, N, N, dtype=torch.float64, requires_grad=True)
    adam = torch.optim.Adam([y], lr=1.0, betas=(0.8, 0.99), eps=1e-6)
    directions = []
    for c in cs:
        before = y.detach().clone()
        y.grad = c.clone()
        adam.step()
        directions.append(before - y.detach())
    x, z = _point(), _point()
    pre = go.JJOBCD([x], sigma_rule=5.0, seed=2, precondition="adam", betas=(0.8, 0.99), eps=1e-6)
    plain = go.JJOBCD([z], sigma_rule=5.0, seed=2)
    for c, d in zip(cs, directions, strict=True):
        for opt, p, lin in ((pre, x, c), (plain, z, d)):
            def closure(opt=opt, p=p, lin=lin):
                opt.zero_grad()
                value = (lin * p).sum()
                value.backward()
                return value
            opt.step(closure)
        torch.testing.assert_close(x.detach(), z.detach(), rtol=1e-12, atol=1e-12)
    assert not torch.allclose(x.detach(), _point().detach())


@pytest.mark.parametrize("name", ["adam", "rms"])
def test_steps_do_not_depend_on_each_matrix_gradient_scale(name):
    """Both directions normalise each matrix's gradient: weighting the matrices' losses by
    1, 10³, 10⁻² leaves the iterates unchanged (up to ε), unlike the plain step ∇/σ."""
    runs = {}
    for weights in ((1.0, 1.0, 1.0), (1.0, 1e3, 1e-2)):
        x = _point()
        opt = go.JJOBCD([x], sigma_rule=20.0, seed=3, precondition=name, eps=1e-12)
        for _ in range(5):
            opt.step(_closure(opt, x, weights))
        runs[weights] = x.detach()
    a, b = runs.values()
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    plain = {}
    for weights in ((1.0, 1.0, 1.0), (1.0, 1e3, 1e-2)):
        x = _point()
        opt = go.JJOBCD([x], sigma_rule=2e4, seed=3)
        opt.step(_closure(opt, x, weights))
        plain[weights] = x.detach()
    assert not torch.allclose(*plain.values(), atol=1e-6)


def test_nonfinite_gradient_stops_and_keeps_the_point():
    x = _point()
    opt = go.JJOBCD([x], sigma_rule=20.0, seed=0, precondition="adam")
    for _ in range(2):
        opt.step(_closure(opt, x))
    at, moments = x.detach().clone(), opt.state[x]["exp_avg_sq"].clone()
    good = _closure(opt, x)

    def poisoned():
        value = good()
        x.grad[1, 2, 3] = float("nan")
        return value

    with pytest.raises(FloatingPointError, match="non-finite gradient"):
        opt.step(poisoned)
    assert torch.equal(x.detach(), at)
    assert opt.state[x]["precondition_step"] == 2
    assert torch.equal(opt.state[x]["exp_avg_sq"], moments)


def test_option_errors():
    x = _point()
    with pytest.raises(ValueError, match="needs a fixed sigma"):
        go.JJOBCD([x], precondition="adam")
    with pytest.raises(ValueError, match="precondition must be"):
        go.JJOBCD([x], sigma_rule=1.0, precondition="adagrad")
    with pytest.raises(ValueError, match="betas"):
        go.JJOBCD([x], sigma_rule=1.0, precondition="adam", betas=(1.0, 0.999))
    with pytest.raises(ValueError, match="matchings > 1 needs checked steps"):
        go.JJOBCD([x], sigma_rule=1.0, matchings=2)


def test_weight_decay_pulls_towards_the_compact_subgroup():
    """With a zero loss the direction is ``λX`` alone: ``‖X‖_F²`` falls monotonically towards
    its minimum ``n`` over O(J) (reached on O(p) × O(q)), the points stay J-orthogonal; without
    decay nothing moves."""
    def zero_closure(opt, x):
        def closure():
            opt.zero_grad()
            value = (0.0 * x).sum()
            value.backward()
            return value
        return closure

    x = _point(cond=3.0)
    start = x.detach().clone()
    still = go.JJOBCD([x], sigma_rule=5.0, seed=0, precondition="adam")
    for _ in range(3):
        still.step(zero_closure(still, x))
    assert torch.equal(x.detach(), start)
    opt = go.JJOBCD([x], sigma_rule=5.0, seed=0, precondition="adam", weight_decay=1.0,
                    matchings="all")
    norms = [float((x.detach() ** 2).sum(dim=(-2, -1)).max())]
    for _ in range(60):
        opt.step(zero_closure(opt, x))
        assert _violation(x) <= 1e-12
        norms.append(float((x.detach() ** 2).sum(dim=(-2, -1)).max()))
    assert norms[0] > N + 1.0
    assert all(b <= a + 1e-12 for a, b in zip(norms, norms[1:], strict=False))
    assert norms[-1] == pytest.approx(N, abs=1e-3)


def test_weight_decay_errors():
    x = _point()
    with pytest.raises(ValueError, match="weight_decay"):
        go.JJOBCD([x], sigma_rule=1.0, weight_decay=0.1)
    with pytest.raises(ValueError, match="weight_decay"):
        go.JJOBCD([x], sigma_rule=1.0, precondition="adam", weight_decay=-1.0)
