"""Separable nonsmooth terms: values, subgradients, proxes, piecewise descriptions, validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from orthoplug.nonsmooth import (
    L0,
    L1,
    CappedL1,
    NonNegative,
    PiecewiseAffine,
    SeparableTerm,
    Zero,
)

D = torch.float64


def phi_ref(term, u):
    """Reference per-entry penalty (own formulas)."""
    u = np.asarray(u, dtype=np.float64)
    if isinstance(term, Zero):
        return np.zeros_like(u)
    if isinstance(term, L1):
        return term.lam * np.abs(u)
    if isinstance(term, L0):
        return term.lam * (u != 0)
    if isinstance(term, CappedL1):
        return term.lam * np.minimum(np.abs(u), term.tau)
    if isinstance(term, NonNegative):
        return np.where(u >= 0, 0.0, np.inf)
    raise AssertionError(term)


TERMS = [Zero(), L1(0.7), L0(0.3), CappedL1(1.3, 0.4), NonNegative(), L1(0.0), CappedL1(0.0, 2.0)]


@pytest.mark.parametrize("term", TERMS, ids=repr)
def test_values(term):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(3, 5, 4, generator=g, dtype=D)
    X[0, 0, 0] = 0.0
    if isinstance(term, NonNegative):
        X = X.abs()
    v = term.value(X)
    assert v.shape == (3,)
    ref = phi_ref(term, X.numpy()).sum((-2, -1))
    assert np.allclose(v.numpy(), ref, rtol=1e-15, atol=1e-15)
    # numpy in, float out; 2-D tensor in, 0-d tensor out
    f = term.value(X[1].numpy())
    assert isinstance(f, float) and math.isclose(f, float(ref[1]), rel_tol=1e-15, abs_tol=1e-15)
    assert term.value(X[1]).shape == ()
    assert torch.equal(term.elementwise(X), torch.from_numpy(phi_ref(term, X.numpy())))


def test_specific_values():
    X = torch.tensor([[0.0, -0.5], [2.0, 0.1]], dtype=D)
    assert float(L1(2.0).value(X)) == pytest.approx(2.0 * 2.6)
    assert float(L0(3.0).value(X)) == pytest.approx(9.0)
    assert float(CappedL1(1.0, 0.3).value(X)) == pytest.approx(0.0 + 0.3 + 0.3 + 0.1)
    assert float(NonNegative().value(X)) == math.inf
    assert float(NonNegative().value(X.abs())) == 0.0
    assert NonNegative().value(np.array([[0.0, 1.0]])) == 0.0
    assert float(Zero().value(X)) == 0.0


@pytest.mark.parametrize("term", TERMS, ids=repr)
def test_piecewise_description_matches_elementwise(term):
    pw = term.piecewise
    assert isinstance(pw, PiecewiseAffine)
    u = torch.cat(
        [
            torch.linspace(-3, 3, 6001, dtype=D),
            torch.tensor(list(pw.thresholds) + [0.0, 1e-300, -1e-300], dtype=D),
        ]
    )
    a, b = pw.evaluate(u), term.elementwise(u)
    assert torch.equal(torch.isinf(a), torch.isinf(b))
    fin = torch.isfinite(a)
    assert torch.allclose(a[fin], b[fin], rtol=0, atol=1e-15)
    # lower semicontinuity: point values are not above the one-sided limits
    for j, t in enumerate(pw.thresholds):
        if not pw.point_feasible[j]:
            continue
        for side in (j, j + 1):
            if pw.feasible[side]:
                assert pw.point_values[j] <= pw.slopes[side] * t + pw.intercepts[side] + 1e-15


def test_piecewise_flags():
    assert L1(1.0).piecewise.continuous and CappedL1(1.0, 1.0).piecewise.continuous
    assert not L0(1.0).piecewise.continuous and not NonNegative().piecewise.continuous
    assert L0(1.0).piecewise.constant_slope and NonNegative().piecewise.constant_slope
    assert not L1(1.0).piecewise.constant_slope
    with pytest.raises(ValueError):
        PiecewiseAffine((0.0,), (1.0,), (0.0,), (True,), (0.0,), (True,))
    with pytest.raises(ValueError):
        PiecewiseAffine((1.0, 0.0), (0, 0, 0), (0, 0, 0), (True,) * 3, (0, 0), (True, True))


def _kink_distance(term, X):
    pw = term.piecewise
    if not pw.thresholds:
        return torch.full_like(X, math.inf)
    th = torch.tensor(pw.thresholds, dtype=X.dtype)
    return (X.unsqueeze(-1) - th).abs().amin(-1)


@pytest.mark.parametrize("term", TERMS, ids=repr)
def test_subgradient_is_the_derivative_away_from_kinks(term):
    g = torch.Generator().manual_seed(1)
    X = torch.randn(400, dtype=D, generator=g) * 2
    if isinstance(term, NonNegative):
        X = X.abs() + 1e-3
    X = X[_kink_distance(term, X) > 1e-3]
    G = term.subgradient(X)
    eps = 1e-6
    fd = (term.elementwise(X + eps) - term.elementwise(X - eps)) / (2 * eps)
    assert torch.allclose(G, fd, atol=1e-8)
    # and of the sum over a matrix
    Xm = X[:40].reshape(8, 5)
    E = torch.randn(8, 5, dtype=D, generator=g)
    dd = (term.value(Xm + eps * E) - term.value(Xm - eps * E)) / (2 * eps)
    assert abs(float(dd) - float((term.subgradient(Xm) * E).sum())) <= 1e-7


def test_subgradient_at_kinks_is_in_the_subdifferential():
    z = torch.zeros(3, dtype=D)
    assert torch.equal(L1(2.0).subgradient(z), z)  # in [-lam, lam]
    assert torch.equal(L0(2.0).subgradient(torch.tensor([0.0, 1.0, -3.0], dtype=D)), z)
    c = CappedL1(2.0, 0.5)
    assert torch.equal(c.subgradient(torch.tensor([0.5, -0.5, 0.0], dtype=D)), z)  # 0 in [0, lam]
    assert torch.equal(
        c.subgradient(torch.tensor([0.2, -0.2, 0.7], dtype=D)),
        torch.tensor([2.0, -2.0, 0.0], dtype=D),
    )
    assert torch.equal(NonNegative().subgradient(torch.tensor([0.0, 1.0, 2.0], dtype=D)), z)
    # deterministic: depends only on X
    X = torch.randn(5, 5, dtype=D)
    for t in TERMS:
        assert torch.equal(t.subgradient(X), t.subgradient(X.clone()))


@pytest.mark.parametrize("term", TERMS, ids=repr)
@pytest.mark.parametrize("t", [0.0, 0.05, 0.7, 3.0])
def test_prox_is_optimal_against_a_1d_grid(term, t):
    g = torch.Generator().manual_seed(2)
    x = torch.cat([torch.randn(60, dtype=D, generator=g) * 2, torch.tensor([0.0, 0.4, -0.4])])
    p = term.prox(x, t)
    assert p.shape == x.shape
    grid = torch.linspace(-8, 8, 32001, dtype=D)
    cand = torch.cat([grid, torch.tensor([0.0] + list(term.piecewise.thresholds), dtype=D)])

    def obj(u, x):
        pen = term.elementwise(u)
        return 0.5 * (u - x) ** 2 + torch.where(torch.isinf(pen), math.inf, t * pen)

    O = obj(cand[None, :], x[:, None])
    best = O.amin(1)
    assert torch.all(obj(p, x) <= best + 1e-12)
    # and close to the grid minimiser (unique minimiser: within the grid spacing)
    if isinstance(term, (L1, Zero, NonNegative)):
        assert torch.all((cand[O.argmin(1)] - p).abs() <= 1e-3)


def test_prox_closed_forms():
    x = torch.tensor([-2.0, -0.3, 0.0, 0.3, 2.0], dtype=D)
    assert torch.allclose(L1(1.0).prox(x, 0.5), torch.tensor([-1.5, 0, 0, 0, 1.5], dtype=D))
    # hard threshold at sqrt(2 t lam) = 1
    assert torch.equal(L0(1.0).prox(x, 0.5), torch.tensor([-2.0, 0, 0, 0, 2.0], dtype=D))
    assert torch.equal(
        L0(0.5).prox(torch.tensor([1.0], dtype=D), 1.0), torch.tensor([0.0], dtype=D)
    )
    assert torch.equal(NonNegative().prox(x, 1.0), torch.tensor([0, 0, 0, 0.3, 2.0], dtype=D))
    assert torch.equal(Zero().prox(x, 1.0), x)
    # capped: small |x| soft-thresholded, large |x| untouched
    c = CappedL1(1.0, 0.5)
    assert torch.allclose(
        c.prox(torch.tensor([0.3, 3.0], dtype=D), 0.1), torch.tensor([0.2, 3.0], dtype=D)
    )


def test_validation_and_repr():
    for bad in (-1.0, math.nan, math.inf, "a", None, True):
        with pytest.raises(ValueError, match="lam"):
            L1(bad)
        with pytest.raises(ValueError, match="lam"):
            L0(bad)
        with pytest.raises(ValueError, match="lam"):
            CappedL1(bad, 1.0)
    for bad in (0.0, -1.0, math.nan, math.inf, "a"):
        with pytest.raises(ValueError, match="tau"):
            CappedL1(1.0, bad)
    with pytest.raises(ValueError, match="step"):
        L1(1.0).prox(torch.ones(2), -1.0)
    with pytest.raises(ValueError, match="step"):
        L1(1.0).prox(torch.ones(2), math.nan)
    assert L1(np.float32(0.5)).lam == 0.5 and L0(2).lam == 2.0
    assert L1(torch.tensor(0.25)).lam == 0.25
    assert repr(L1(0.5)) == "L1(lam=0.5)"
    assert repr(CappedL1(1, 0.2)) == "CappedL1(lam=1.0, tau=0.2)"
    assert repr(Zero()) == "Zero()" and repr(NonNegative()) == "NonNegative()"
    assert L1(0.5) == L1(0.5) and L1(0.5) != L0(0.5) and hash(L1(0.5)) == hash(L1(0.5))
    assert all(isinstance(t, SeparableTerm) for t in TERMS)
    assert NonNegative.is_indicator and not L1.is_indicator


def test_dtypes_are_preserved():
    X = torch.randn(4, 3, dtype=torch.float32)
    for t in TERMS:
        assert t.elementwise(X).dtype == torch.float32
        assert t.subgradient(X).dtype == torch.float32
        assert t.prox(X, 0.1).dtype == torch.float32
