"""The quadratic fast path's pair model and row update (kernels/quadratic.py) against direct
formulas: the exact model ``Q̲ = 2s (Z D Zᵀ) ⊗ C_BB`` (and its PSD part), ``M = ∇f[B] Zᵀ``, and
``X[B] ← U`` keeping ``Y = C X`` and f exact for any number of rows; a failing update writes
nothing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from orthoplug.kernels.quadratic import (
    NONFINITE_COST,
    NONFINITE_UPDATE,
    OK,
    pair_model,
    update_rows,
)
from orthoplug.oracles import NonFiniteError, QuadraticOracle, QuadraticTracker
from orthoplug.problems.hevp import make_spd


def _problem(n, k, seed, with_d):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n))
    c = a + a.T  # indefinite
    d = make_spd(k, seed=seed) if with_d else np.empty((0, 0))
    x = rng.standard_normal((n, k))
    return rng, c, d, x


def _cost(c, d, s, x):
    return s * float(np.sum(x * (c @ x @ (d if d.size else np.eye(x.shape[1])))))


@pytest.mark.parametrize("with_d", [False, True])
@pytest.mark.parametrize("clip", [False, True])
def test_pair_model_is_the_exact_kronecker_model(with_d, clip):
    n, k, s, prox = 8, 5, -0.7, 0.3
    rng, c, d, x = _problem(n, k, 1, with_d)
    y = c @ x
    dd = d if with_d else np.eye(k)
    z, w, q = np.empty((2, k)), np.empty((2, k)), np.empty((4, 4))
    for _ in range(20):
        i, j = rng.choice(n, 2, replace=False)
        ok, *m = pair_model(x, y, c, d, s, prox, clip, i, j, z, w, q)
        assert ok
        zb = x[[i, j]]
        exact = 2 * s * np.kron(zb @ dd @ zb.T, c[np.ix_([i, j], [i, j])])
        if clip:
            lam, v = np.linalg.eigh(exact)
            exact = (v * lam.clip(0.0)) @ v.T
            assert np.linalg.eigvalsh(q - prox * np.eye(4)).min() >= -1e-12
        np.testing.assert_allclose(q, exact + prox * np.eye(4), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.reshape(m, (2, 2)), 2 * s * (y @ dd)[[i, j]] @ zb.T,
                                   rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(z, zb)
    c_bad = c.copy()
    c_bad[2, 2] = np.inf
    assert not pair_model(x, y, c_bad, d, s, prox, clip, 2, 3, z, w, q)[0]


@pytest.mark.parametrize("rows", [[3, 1], [0, 5], [6, 7]])
@pytest.mark.parametrize("with_d", [False, True])
def test_update_rows_keeps_y_and_the_cost_exact(rows, with_d):
    n, k, s = 8, 4, 1.3
    rng, c, d, x = _problem(n, k, 2, with_d)
    y = c @ x
    f = _cost(c, d, s, x)
    rows = np.array(rows)
    for _ in range(10):
        u = x[rows] + 0.2 * rng.standard_normal((rows.size, k))
        dz = u - x[rows]
        dd = dz @ d if with_d else dz
        status, f = update_rows(x, y, c, s, f, rows[0], rows[1], u, dz, dd)
        assert status == OK
        np.testing.assert_array_equal(x[rows], u)
        np.testing.assert_allclose(y, c @ x, rtol=1e-12, atol=1e-12)
        assert f == pytest.approx(_cost(c, d, s, x), rel=1e-12)
    x0, y0 = x.copy(), y.copy()
    for new, status_expected in ((np.full((rows.size, k), np.nan), NONFINITE_UPDATE),
                                 (np.full((rows.size, k), 1e200), NONFINITE_COST)):
        dz = new - x[rows]
        status, f_out = update_rows(x, y, c, s, f, rows[0], rows[1], new, dz, dz)
        assert (status, f_out) == (status_expected, f)
        assert np.array_equal(x, x0) and np.array_equal(y, y0)  # nothing written


def test_tracker_device_expressions_equal_the_compiled_host_path(monkeypatch):
    """QuadraticTracker's array expressions for tensors on other devices (run here on NumPy
    arrays by declaring the arrays off-host) give the pair model and the row updates of the
    compiled host path."""
    n, k, s = 9, 3, -1.1
    rng, c, d, x0 = _problem(n, k, 4, True)
    oracle = QuadraticOracle(torch.from_numpy(c), torch.from_numpy(d), scale=s)
    steps = [(rng.choice(n, 2, replace=False), 0.1 * rng.standard_normal((2, k)))
             for _ in range(30)]

    def run():
        tracker = oracle.track(torch.from_numpy(x0))
        models = []
        for rows, step in steps:
            for psd in (True, False):
                models.append(tracker.pair_model_array(rows, 0.2, psd=psd))
            tracker.set_rows_array(rows, tracker.xa[rows] + step)
        return tracker, models

    host, host_models = run()
    monkeypatch.setattr(QuadraticTracker, "on_host", property(lambda self: False))
    other, other_models = run()
    for a, b in zip(host_models, other_models, strict=True):
        for u, v in zip(a, b, strict=True):
            np.testing.assert_allclose(u, v, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(host.xa, other.xa)
    np.testing.assert_allclose(other.ya, host.ya, rtol=1e-12, atol=1e-12)
    assert other.cost == pytest.approx(host.cost, rel=1e-12)
    assert host.cost == pytest.approx(_cost(c, d, s, host.xa), rel=1e-12)


@pytest.mark.parametrize("with_d", [False, True])
def test_tracker_block_updates_by_matrix_products_equal_the_compiled_update(with_d):
    """Blocks of other than two rows (RSDM's slices) take the tracker's matrix products on the
    host: X, Y = CX and f equal their definitions to round-off, a priced ``value`` is taken
    as the new f, and a non-finite block leaves X unchanged and Y, f those of X."""
    n, k, s = 30, 4, -0.9
    rng, c, d, x0 = _problem(n, k, 5, with_d)
    oracle = QuadraticOracle(torch.from_numpy(c), torch.from_numpy(d) if with_d else None,
                             scale=s)
    tracker = oracle.track(torch.from_numpy(x0.copy()))
    x, y, f = x0.copy(), c @ x0, _cost(c, d, s, x0)
    for size in (1, 3, 7, 12, 30):
        rows = rng.choice(n, size, replace=False)
        u = x[rows] + 0.3 * rng.standard_normal((size, k))
        x[rows] = u
        y, f = c @ x, _cost(c, d, s, x)
        tracker.set_rows_array(rows, u)
        np.testing.assert_array_equal(tracker.xa, x)
        np.testing.assert_allclose(tracker.ya, y, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(tracker.ya, c @ x, rtol=1e-12, atol=1e-12)
        assert tracker.cost == pytest.approx(f, rel=1e-12)
    rows = rng.choice(n, 5, replace=False)
    u = x[rows] + 0.1
    priced = tracker.value_with_rows(torch.from_numpy(rows), torch.from_numpy(u))
    tracker.set_rows_array(rows, u, value=priced)
    assert tracker.cost == priced == pytest.approx(_cost(c, d, s, tracker.xa), rel=1e-12)
    x1, y1, f1 = tracker.xa.copy(), tracker.ya.copy(), tracker.cost
    for bad in (np.nan, 1e200):  # a non-finite change; a finite change whose cost overflows
        with pytest.raises(NonFiniteError):
            tracker.set_rows_array(rows, np.full((5, k), bad))
        # X is not written; Y and f are X's again (refreshed from X after an overflow)
        assert np.array_equal(tracker.xa, x1)
        np.testing.assert_allclose(tracker.ya, y1, rtol=1e-12, atol=1e-12)
        assert tracker.cost == pytest.approx(f1, rel=1e-12)
