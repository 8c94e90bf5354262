"""Submanifold blocks of St(n, p): formula (15), the projection onto M, and host solvers.

The conformance battery (tests/geometry/conformance.py, cases ``StiefelBlock-*``) checks the
manifold axioms for both adapters; this file checks the RSSM-specific mathematics.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from orthoplug.geometry._linalg import skew
from orthoplug.geometry.manifolds import InfeasiblePointError
from orthoplug.geometry.stiefel import polar, qf
from orthoplug.geometry.stiefel_block import (
    StiefelBlockGeometry,
    block_tangent_projection,
    block_update,
    complement,
    partition_columns,
    polar_tall,
)


def _point(n, p, seed):
    return qf(torch.randn(n, p, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)))


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def test_formula_15_is_the_orthogonal_projection_onto_the_block_tangent_space():
    n, p = 12, 7
    x = _point(n, p, 0)
    cols = torch.tensor([1, 4, 5])
    rest = complement(cols, p)
    g = torch.randn(n, 3, dtype=torch.float64, generator=_gen(1))
    xi = block_tangent_projection(x, cols, g)
    # the paper's formula with the explicit n × n matrix I − XXᵀ (small n, test only)
    xc = x[:, cols]
    ref = xc @ skew(xc.mT @ g) + (torch.eye(n, dtype=x.dtype) - x @ x.mT) @ g
    torch.testing.assert_close(xi, ref, rtol=0, atol=1e-14)
    # tangent: X_Cᵀξ skew, X_Rᵀξ = 0; idempotent; G − ξ ⟂ every tangent vector
    s = xc.mT @ xi
    assert torch.linalg.matrix_norm(s + s.mT) < 1e-14
    assert torch.linalg.matrix_norm(x[:, rest].mT @ xi) < 1e-14
    torch.testing.assert_close(block_tangent_projection(x, cols, xi), xi, rtol=0, atol=1e-14)
    eta = block_tangent_projection(x, cols, torch.randn(n, 3, dtype=torch.float64,
                                                         generator=_gen(2)))
    assert abs(float(((g - xi) * eta).sum())) < 1e-13
    # dimension of the tangent space = (n − r) q − q(q+1)/2
    geo = StiefelBlockGeometry(x, cols)
    basis = torch.eye(n * 3, dtype=x.dtype).reshape(-1, n, 3)
    images = torch.stack([geo.proj(xc, b) for b in basis]).reshape(n * 3, -1)
    assert int(torch.linalg.matrix_rank(images, tol=1e-10)) == geo.dim == (n - 4) * 3 - 6


def test_block_update_equals_15_then_projection_and_keeps_orthogonality():
    """The fused update equals polar((I − X_RX_Rᵀ)(X_C − γξ)) with ξ from (15), and the new
    columns are orthonormal and orthogonal to the fixed ones at round-off (200 random trials)."""
    n, p = 40, 12
    worst_cross, worst_gram = 0.0, 0.0
    for trial in range(200):
        x = _point(n, p, trial)
        perm = torch.randperm(p, generator=_gen(trial))
        cols, rest = perm[:5], torch.sort(perm[5:]).values
        g = torch.randn(n, 5, dtype=torch.float64, generator=_gen(1000 + trial))
        gamma = [0.01, 0.3, 2.0][trial % 3]
        new = block_update(x, cols, g, gamma, rest)
        xi = block_tangent_projection(x, cols, g, rest)
        xr = x[:, rest]
        y = x[:, cols] - gamma * xi
        ref = polar(y - xr @ (xr.mT @ y))
        assert torch.allclose(new, ref, rtol=0, atol=1e-13)
        worst_cross = max(worst_cross, float(torch.linalg.matrix_norm(xr.mT @ new)))
        worst_gram = max(worst_gram, float(torch.linalg.matrix_norm(
            new.mT @ new - torch.eye(5, dtype=x.dtype))))
    assert worst_cross < 5e-15
    assert worst_gram < 1e-14


def test_reorthogonalisation_repairs_inherited_cross_error():
    """Inject ‖X_RᵀX_C‖ ≈ 1e-8: one corrected step brings it to round-off; the paper's formula
    alone (``project_step=False``) keeps it at the 1e-8 level."""
    n, p = 50, 10
    x = _point(n, p, 3)
    cols, rest = torch.tensor([2, 3, 7]), torch.tensor([0, 1, 4, 5, 6, 8, 9])
    x[:, cols] += 1e-8 * torch.randn(n, 3, dtype=torch.float64, generator=_gen(4))
    x[:, cols] = polar(x[:, cols])
    before = float(torch.linalg.matrix_norm(x[:, rest].mT @ x[:, cols]))
    assert before > 1e-9
    g = torch.randn(n, 3, dtype=torch.float64, generator=_gen(5))
    fixed = block_update(x, cols, g, 0.1, rest)
    plain = block_update(x, cols, g, 0.1, rest, project_step=False)
    assert float(torch.linalg.matrix_norm(x[:, rest].mT @ fixed)) < 5e-15
    assert float(torch.linalg.matrix_norm(x[:, rest].mT @ plain)) > 0.1 * before


def test_polar_tall_matches_svd_polar_on_both_paths():
    g = torch.randn(30, 6, dtype=torch.float64, generator=_gen(6))
    u, _, wt = torch.linalg.svd(g, full_matrices=False)
    # fast (Gram cond 15) / SVD path (cond 1e12: the polar factor is only determined to ~ε·1e6)
    for sv, tol in (([1.0, 1.1, 1.5, 2.0, 3.0, 3.9], 1e-13), ([1, 1, 1e-3, 10, 1e3, 2], 1e-9)):
        a = u @ torch.diag(torch.tensor(sv, dtype=g.dtype)) @ wt
        q = polar_tall(a)
        torch.testing.assert_close(q, u @ wt, rtol=0, atol=tol)
        assert torch.linalg.matrix_norm(q.mT @ q - torch.eye(6, dtype=g.dtype)) < 1e-14
    batch = torch.randn(3, 30, 6, dtype=torch.float64, generator=_gen(7))
    torch.testing.assert_close(polar_tall(batch), polar(batch), rtol=0, atol=1e-13)


def test_partition_columns_balanced_and_validated():
    blocks = partition_columns(10, 4)
    assert [b.tolist() for b in blocks] == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    assert [b.tolist() for b in partition_columns(5, blocks=[[4, 0], [1, 2, 3]])] == [
        [4, 0], [1, 2, 3]]
    for kwargs, msg in [(dict(num_blocks=1), ">= 2"), (dict(num_blocks=11), "<= p"),
                        (dict(blocks=[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]]), "at least 2"),
                        (dict(blocks=[[0, 1], [1, 2, 3, 4, 5, 6, 7, 8, 9]]), "partition"),
                        (dict(blocks=[[0, 1], [2, 3]]), "partition"),
                        (dict(blocks=[[0, 1, 2, 3, 4, 5, 6, 7, 8, 10], [9]]), "partition"),
                        (dict(blocks=[[], list(range(10))]), "non-empty")]:
        with pytest.raises(ValueError, match=msg):
            partition_columns(10, **kwargs)


def test_geometry_validation_assemble_and_no_n_by_n():
    x = _point(9, 4, 8)
    with pytest.raises(InfeasiblePointError, match="not on St"):
        StiefelBlockGeometry(x + 1e-3, [0, 1])
    for cols, msg in [([], "empty"), ([0, 4], "lie in"), ([1, 1], "distinct")]:
        with pytest.raises(ValueError, match=msg):
            StiefelBlockGeometry(x, cols)
    geo = StiefelBlockGeometry(x, [3, 1])
    y = geo.initial_point
    torch.testing.assert_close(geo.assemble(y), x, rtol=0, atol=0)
    y2 = geo.retr(y, 0.7 * geo.random_tangent(y, generator=_gen(9)))
    full = geo.assemble(y2)
    assert torch.equal(full[:, [0, 2]], x[:, [0, 2]])  # fixed columns bit for bit
    assert torch.linalg.matrix_norm(full.mT @ full - torch.eye(4, dtype=x.dtype)) < 1e-14
    with pytest.raises(InfeasiblePointError, match="infeasible"):
        geo.check_point(y + 1e-3)
    # n = 60000: an n × n temporary would need 28.8 GB, the block step needs O(n p)
    big = torch.linalg.qr(torch.randn(60000, 6, dtype=torch.float64, generator=_gen(10)))[0]
    cols = torch.tensor([0, 5])
    g = torch.randn(60000, 2, dtype=torch.float64, generator=_gen(11))
    new = block_update(big, cols, g, 0.5)
    assert torch.linalg.matrix_norm(big[:, 1:5].mT @ new) < 1e-14


def _block_problem(seed=0):
    n, p = 10, 5
    x = _point(n, p, seed)
    a = torch.randn(n, n, dtype=torch.float64, generator=_gen(seed + 50))
    a = a @ a.mT
    return x, a, [0, 3]


def test_pymanopt_host_solver_optimises_one_block_with_the_rest_frozen():
    import autograd.numpy as anp
    import pymanopt

    from orthoplug.adapters.pymanopt import StiefelBlock

    x, a, cols = _block_problem()
    a_np = a.numpy()
    block = StiefelBlock(x.numpy(), cols)

    @pymanopt.function.autograd(block)
    def cost(y):
        full = block.assemble(y)
        return -anp.trace(full.T @ a_np @ full)

    problem = pymanopt.Problem(block, cost)
    y0 = block.initial_point()
    res = pymanopt.optimizers.ConjugateGradient(verbosity=0, max_iterations=300).run(
        problem, initial_point=y0)
    full = block.assemble(res.point)
    assert res.cost < cost(y0) - 1e-3
    assert np.array_equal(full[:, [1, 2, 4]], x.numpy()[:, [1, 2, 4]])
    assert np.linalg.norm(full.T @ full - np.eye(5)) < 1e-12
    # optimum of the block problem: the top-2 eigenspace of A restricted to range(X_R)^⊥
    xr = x.numpy()[:, [1, 2, 4]]
    w, v = np.linalg.eigh(np.eye(10) - xr @ xr.T)  # projector onto range(X_R)^⊥ (test only)
    q = v[:, w > 0.5]
    top = np.sort(np.linalg.eigvalsh(q.T @ a_np @ q))[-2:].sum() + np.trace(xr.T @ a_np @ xr)
    assert abs(-res.cost - top) < 1e-6 * top
    # exact Hessian: TrustRegions converges to the same value
    res_tr = pymanopt.optimizers.TrustRegions(verbosity=0, max_iterations=50).run(
        problem, initial_point=y0)
    assert abs(-res_tr.cost - top) < 1e-8 * top


def test_geoopt_host_solver_riemannian_adam_on_one_block():
    import geoopt

    from orthoplug.adapters.geoopt import StiefelBlock

    x, a, cols = _block_problem(1)
    block = StiefelBlock(x, cols)
    y = geoopt.ManifoldParameter(block.origin(), manifold=block)
    opt = geoopt.optim.RiemannianAdam([y], lr=2e-2)
    f0 = None
    for _ in range(300):
        opt.zero_grad()
        full = block.assemble(y)
        loss = -torch.trace(full.mT @ a @ full)
        f0 = float(loss.detach()) if f0 is None else f0
        loss.backward()
        opt.step()
    full = block.assemble(y.detach())
    assert float(-torch.trace(full.mT @ a @ full)) < f0 - 1e-2
    assert torch.equal(full[:, [1, 2, 4]], x[:, [1, 2, 4]])
    assert torch.linalg.matrix_norm(full.mT @ full - torch.eye(5, dtype=x.dtype)) < 1e-12
    block.assert_check_point_on_manifold(y.detach())


def test_polar_falls_back_to_float64_when_the_single_precision_svd_fails(monkeypatch):
    """LAPACK's float32 SVD can fail to converge on a nearly orthonormal matrix (seen with one
    MKL thread at 1000 × 40): the polar factor is then taken in float64 and returned in float32,
    orthonormal to float32 rounding; a non-finite matrix is named instead."""
    gen = torch.Generator().manual_seed(0)
    a = (qf(torch.randn(60, 8, dtype=torch.float64, generator=gen))
         + 1e-4 * torch.randn(60, 8, dtype=torch.float64, generator=gen))
    expected = polar(a)
    svd = torch.linalg.svd

    def failing_svd(x, *args, **kwargs):
        if x.dtype == torch.float32:
            raise torch.linalg.LinAlgError("linalg.svd: The algorithm failed to converge")
        return svd(x, *args, **kwargs)

    monkeypatch.setattr(torch.linalg, "svd", failing_svd)
    q = polar(a.float())
    assert q.dtype == torch.float32
    assert float((q.mT @ q - torch.eye(8)).abs().max()) <= 1e-6
    assert float((q.double() - expected).abs().max()) <= 1e-6
    with pytest.raises(FloatingPointError, match="non-finite"):
        polar(torch.full((6, 2), float("nan")))
