"""Host solvers (pymanopt, geoopt) on our manifolds reach the trace-minimisation certificate."""

from __future__ import annotations

import io

import autograd.numpy as anp
import geoopt
import numpy as np
import pymanopt
import pytest
import torch
from pymanopt.optimizers import ConjugateGradient, SteepestDescent, TrustRegions

from orthoplug.adapters import geoopt as go
from orthoplug.adapters import pymanopt as pm
from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry, JOrthogonalGeometry
from orthoplug.problems.hevp import make_spd, pencil_eigenvalues, trace_min_certificate


def explicit_minimiser(c, j, jk=None):
    """J-normalised eigenvectors of JC: positive eigenvalues in +1 columns (smallest first)."""
    j = np.asarray(j, float)
    jk = j if jk is None else np.asarray(jk, float)
    lam, vec = np.linalg.eig(j[:, None] * c)
    lam, vec = lam.real, vec.real
    vec = vec / np.sqrt(np.abs(np.einsum("ik,i,ik->k", vec, j, vec)))
    pos = [i for i in np.argsort(lam) if lam[i] > 0]
    neg = [i for i in np.argsort(-lam) if lam[i] < 0]  # closest to 0 first
    cols = [pos.pop(0) if s > 0 else neg.pop(0) for s in jk]
    return vec[:, cols]


SIGS = {
    "sorted": lambda n: [1.0] * (n // 2) + [-1.0] * (n - n // 2),
    "unsorted": lambda n: list(np.random.default_rng(n).permutation(SIGS["sorted"](n))),
}


@pytest.mark.parametrize("n", [5, 6, 7])
@pytest.mark.parametrize("kind", ["sorted", "unsorted"])
def test_certificate_is_attained_and_never_beaten(n, kind):
    j = np.asarray(SIGS[kind](n))
    c = make_spd(n, seed=n)
    cert = trace_min_certificate(c, j)
    assert np.isclose(cert, np.abs(pencil_eigenvalues(c, j)).sum())
    xs = explicit_minimiser(c, j)
    geo = JOrthogonalGeometry(n, signature=j)
    assert geo.relative_violation(torch.from_numpy(xs)) < 1e-12
    assert np.isclose(np.trace(xs.T @ c @ xs), cert, rtol=1e-10)
    samples = geo.random_point((3000,), cond=30.0, generator=torch.Generator().manual_seed(0))
    vals = torch.einsum("bij,ik,bkj->b", samples, torch.from_numpy(c), samples)
    assert vals.min().item() >= cert * (1 - 1e-12)
    # rectangular: k = 3 columns with signature (+, −, +) permuted
    jk = [-1.0, 1.0, 1.0] if kind == "unsorted" else [1.0, 1.0, -1.0]
    cert_k = trace_min_certificate(c, j, jk)
    xk = explicit_minimiser(c, j, jk)
    gk = IndefiniteStiefelGeometry(n, 3, signature=j, k_signature=jk)
    assert gk.relative_violation(torch.from_numpy(xk)) < 1e-12
    assert np.isclose(np.trace(xk.T @ c @ xk), cert_k, rtol=1e-10)
    pts = gk.random_point((3000,), cond=30.0, generator=torch.Generator().manual_seed(1))
    vals = torch.einsum("bij,ik,bkj->b", pts, torch.from_numpy(c), pts)
    assert vals.min().item() >= cert_k * (1 - 1e-12)


def _solve(manifold, c, optimizer, seed):
    @pymanopt.function.autograd(manifold)
    def cost(x):
        return anp.trace(x.T @ c @ x)

    np.random.seed(seed)
    x0 = manifold.random_point()
    return optimizer.run(pymanopt.Problem(manifold, cost), initial_point=x0)


OPTIMIZERS = {
    "SteepestDescent": lambda: SteepestDescent(verbosity=0, max_iterations=20000,
                                               min_gradient_norm=1e-10),
    "ConjugateGradient": lambda: ConjugateGradient(verbosity=0, max_iterations=20000,
                                                   min_gradient_norm=1e-10),
    "TrustRegions": lambda: TrustRegions(verbosity=0, max_iterations=500,
                                         min_gradient_norm=1e-10),
}


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("n", [6, 20, 50])
@pytest.mark.parametrize("kind", ["sorted", "unsorted"])
@pytest.mark.parametrize("seed", [0, 1])
def test_pymanopt_solvers_reach_certificate_on_jorthogonal(optimizer, n, kind, seed):
    c = make_spd(n, seed=100 + n + seed)
    manifold = pm.JOrthogonal(n, signature=SIGS[kind](n))
    cert = trace_min_certificate(c, manifold.signature)
    res = _solve(manifold, c, OPTIMIZERS[optimizer](), seed)
    assert abs(res.cost - cert) / cert <= 1e-8
    assert manifold.violation(res.point) <= 1e-10
    assert manifold.geometry.relative_violation(torch.from_numpy(res.point)) <= 1e-10


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("shape", [(6, 3, 3, 2), (20, 8, 10, 3), (30, 10, None, None)])
def test_pymanopt_solvers_reach_certificate_on_indefinite_stiefel(optimizer, shape):
    n, k, p, kp = shape
    if p is None:  # unsorted signatures
        manifold = pm.IndefiniteStiefel(n, k, signature=SIGS["unsorted"](n),
                                        k_signature=SIGS["unsorted"](k))
    else:
        manifold = pm.IndefiniteStiefel(n, k, p, kp)
    c = make_spd(n, seed=n)
    cert = trace_min_certificate(c, manifold.signature, manifold.geometry.jk.values)
    res = _solve(manifold, c, OPTIMIZERS[optimizer](), 0)
    assert abs(res.cost - cert) / cert <= 1e-8
    assert manifold.violation(res.point) <= 1e-10


def _batched_trace(x, cs):
    return torch.einsum("bij,bik,bkj->b", x, cs, x)


@pytest.mark.parametrize("dtype,tol,viol", [(torch.float64, 1e-6, 1e-10),
                                            (torch.float32, 2e-4, 1e-4)])
@pytest.mark.parametrize("name", ["RiemannianSGD", "RiemannianAdam"])
def test_geoopt_optimizers_on_batched_jorthogonal(name, dtype, tol, viol):
    """Batch of 5 independent 6×6 problems in one ManifoldParameter (float32 tolerance 2e-4)."""
    n, batch = 6, 5
    manifold = go.JOrthogonal(n, 3)
    cs = torch.stack([torch.from_numpy(make_spd(n, seed=s)) for s in range(batch)]).to(dtype)
    certs = torch.tensor([trace_min_certificate(c.double().numpy(), manifold.geometry.j)
                          for c in cs], dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    x = geoopt.ManifoldParameter(manifold.random(batch, n, n, dtype=dtype, generator=gen),
                                 manifold=manifold)
    opt = getattr(geoopt.optim, name)([x], lr=0.05)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1000, gamma=0.5)
    for _ in range(4000):
        opt.zero_grad()
        _batched_trace(x, cs).sum().backward()
        opt.step()
        sched.step()
    with torch.no_grad():
        gap = ((_batched_trace(x, cs).double() - certs) / certs).abs()
        assert gap.max().item() <= tol
        assert manifold.geometry.violation(x).max().item() <= viol

    # state_dict round trip through torch.save: a fresh optimizer continues identically
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer)
    x2 = geoopt.ManifoldParameter(x.detach().clone(), manifold=manifold)
    opt2 = type(opt)([x2], lr=opt.param_groups[0]["lr"])
    opt2.load_state_dict(state)
    for o, p in ((opt, x), (opt2, x2)):
        o.zero_grad()
        _batched_trace(p, cs).sum().backward()
        o.step()
    # (a lost optimizer state would differ by about lr; round-off of the reloaded step counter
    # in the bias corrections gives ~1e-16)
    torch.testing.assert_close(x.detach(), x2.detach(), rtol=1e-12, atol=1e-12)
