"""GS-JOBCD's column pair steps ``X[:, B] ← X[:, B] V̂`` on the quadratic fast path, against
the formulas: the model of :func:`~orthoplug.kernels.quadratic.column_pair_model` is the exact
change of ``f = s·tr(XᵀCXD)``, the step of :func:`~orthoplug.kernels.jobcd.gs_columns` is the
minimiser over ``O(J_BB)`` (brute force over every component of the 2×2 group), and the loop
keeps ``XᵀJX = J_k``, ``Y = CX`` and f current."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry
from orthoplug.kernels.jobcd import gs_columns
from orthoplug.kernels.quadratic import OK, column_pair_model
from orthoplug.solvers.pairs import cyclic_pairs

N, K = 7, 4


def _instance(seed: int, psd: bool):
    rng = np.random.default_rng(seed)
    geo = IndefiniteStiefelGeometry(N, K, 3, 2)
    x = geo.random_point(cond=2.0, generator=torch.Generator().manual_seed(seed)).numpy()
    a = rng.standard_normal((N, N))
    c = a @ a.T / N + (0.1 * np.eye(N) if psd else -0.8 * np.eye(N))
    b = rng.standard_normal((K, K))
    d = np.diag(rng.uniform(0.5, 2.0, K)) if psd else 0.5 * (b + b.T)
    return geo, x, c, d


def _cost(x, c, d, s):
    return s * np.trace(x.T @ c @ x @ d)


def _group(j1: float, j2: float, t: float) -> list[np.ndarray]:
    """Every element of ``O(diag(j1, j2))`` with parameter t (all components)."""
    if j1 == j2:
        r = np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])
    else:
        r = np.array([[np.cosh(t), np.sinh(t)], [np.sinh(t), np.cosh(t)]])
    signs = [np.diag([e1, e2]) for e1 in (1.0, -1.0) for e2 in (1.0, -1.0)]
    return [sgn @ r for sgn in signs]


def _with_columns(x, a, b, v):
    out = x.copy()
    out[:, [a, b]] = x[:, [a, b]] @ v.T
    return out


@pytest.mark.parametrize("psd", [True, False])
def test_the_column_model_is_the_exact_change_of_f(psd):
    geo, x, c, d = _instance(1, psd)
    s, jk = 0.7, np.array(geo.jk.values, dtype=np.float64)
    y = c @ x
    acol, q = np.empty((K, 2)), np.empty((4, 4))
    for a, b in cyclic_pairs(K).tolist():
        ok, *m = column_pair_model(x, y, d, s, 0.0, False, a, b, acol, q)
        assert ok
        np.testing.assert_allclose(acol[[a, b]], (x.T @ y[:, [a, b]])[[a, b]], rtol=1e-13,
                                   atol=1e-13)
        for t in (0.3, -1.1):
            for v in _group(jk[a], jk[b], t):
                w = (v - np.eye(2)).flatten(order="F")
                model = np.dot(w, np.array(m).reshape(2, 2).flatten(order="F")) + 0.5 * w @ q @ w
                true = _cost(_with_columns(x, a, b, v), c, d, s) - _cost(x, c, d, s)
                assert model == pytest.approx(true, rel=1e-10, abs=1e-12)


def test_a_column_step_is_the_minimiser_over_the_pair_group():
    """PSD case (no clipping, θ tiny): the step's f is at most the best f over a fine grid of
    every component of ``O(J_BB)``, and no grid point beats it."""
    geo, x, c, d = _instance(2, True)
    jk = np.array(geo.jk.values, dtype=np.float64)
    grid = np.linspace(-4.0, 4.0, 4001)
    for a, b in cyclic_pairs(K).tolist():
        xs, ys = x.copy(), c @ x
        f0 = _cost(xs, c, d, 1.0)
        pairs = np.array([[a, b]], dtype=np.int64)
        done, f, status = gs_columns(xs, ys, d, 1.0, f0, jk, 1e-12, False, pairs, 0, 1)
        assert (done, status) == (1, OK)
        best = min(_cost(_with_columns(x, a, b, v), c, d, 1.0)
                   for t in grid for v in _group(jk[a], jk[b], t))
        assert f <= best + 1e-9 * abs(best)
        assert f == pytest.approx(_cost(xs, c, d, 1.0), rel=1e-12)


@pytest.mark.parametrize("psd", [True, False])
def test_the_column_loop_keeps_the_constraint_y_and_f_and_never_increases_f(psd):
    geo, x, c, d = _instance(3, psd)
    jk = np.array(geo.jk.values, dtype=np.float64)
    s = 1.0 if psd else 0.3
    y, f = c @ x, _cost(x, c, d, s)
    pairs = cyclic_pairs(K).numpy()
    for start in range(12):
        f_before = f
        done, f, status = gs_columns(x, y, d, s, f, jk, 1e-6, not psd, pairs, start, 1)
        assert (done, status) == (1, OK)
        assert f <= f_before + 1e-12 * abs(f_before)
    # relative to ‖X‖²: an indefinite C makes f unbounded below, and the steps grow X
    scale = np.linalg.norm(x) ** 2
    jn = np.array(geo.j.values)
    assert np.abs(x.T @ (jn[:, None] * x) - np.diag(jk)).max() <= 1e-13 * scale
    assert np.abs(y - c @ x).max() <= 1e-13 * np.linalg.norm(x) * np.linalg.norm(c)
    assert f == pytest.approx(_cost(x, c, d, s), rel=1e-10)
