r"""Exact, batched, global solver for the 2×2 subproblem of JOBCD.

Problem
-------
For each of K independent instances minimise

    F(V) = ½ vec(V)ᵀ Qd vec(V) + <V, P>     subject to   Vᵀ J_BB V = J_BB,

with ``J_BB = diag(j1, j2)``, ``j ∈ {±1}``, ``Qd`` 4×4 symmetric positive definite, ``P`` 2×2 and
``vec`` column-major: ``vec(V) = [V11, V21, V12, V22]``, ``<A, B> = Σ A∘B``.

Every feasible V lies on a one-parameter *form* ``vec(V) = c·α + s·β``: for ``j1 j2 < 0`` the four
components of O(1,1), ``V = diag(ε1, ε2)·[[cosh μ, sinh μ], [sinh μ, cosh μ]]``; for ``j1 j2 > 0``
the rotations and reflections of O(2). On a form ``F = a c + b s + cq c² + d c s + e s²``.

One algorithm
-------------
The algorithm is the compiled one-instance solver :func:`orthoplug.kernels.jorth2.solve_jorth2`
(conic reduction: on each pair of forms F is a quadratic on a hyperbola or a circle, whose
global minimum is the largest stationary point of a one-dimensional function, found by monotone
Newton iteration; its module docstring derives it). Where an instance runs follows the package's
dispatch rule :func:`orthoplug.kernels.runs_compiled`:

* NumPy-able inputs (CPU float32/float64 tensors): the kernel, one compiled loop over the K
  instances (:func:`~orthoplug.kernels.jorth2.solve_jorth2_batch`, float64);
* tensors on any other device: the same steps elementwise in torch on that device (the same
  starts, Newton iteration and stopping rule, masked per instance, with the rounding unit of the
  tensors' dtype), whose arithmetic is the kernel's own functions
  (:func:`~orthoplug.kernels.jorth2.form_coefficients`,
  :func:`~orthoplug.kernels.jorth2.newton_step`, :func:`~orthoplug.kernels.jorth2.form_value`,
  :func:`~orthoplug.kernels.jorth2.form_point`) evaluated on tensors — one source for the
  formulas, no host round trip.

A hyperbolic form with ``w± = cq ± d + e ≤ 0`` (a ``Qd`` that rounding, or the caller, made
indefinite; F is then unbounded below on that form) makes the kernel return
:data:`~orthoplug.kernels.jorth2.NEEDS_BATCHED`; such instances go to the torch steps, where
that form contributes its ``μ = 0`` point only.

Selection: V = I is returned unless the best point lowers F by more than a margin, so a
stationary point does not move needlessly. The kernel (float64) keeps I whenever
``F(I) ≤ F_best + 1e-14·max(1, |F(I)|)``. The torch steps, which run in the tensors' dtype,
evaluate the change ``ΔF`` itself and move only if it beats both that margin and the rounding
of its own terms (:func:`_decreases`, tol = ``max(1e-14, 8ε)``): in float64 the kernel's
decisions, in float32 no margin of ``8ε·|F|`` — with F's offset s that exceeds a nearly
stationary pair's whole decrease, and the float32 steps froze there. ``log u = μ`` is clamped
to ``±0.3·log(finfo.max)`` so cosh and sinh stay finite.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from orthoplug.kernels import runs_compiled
from orthoplug.kernels.jorth2 import (
    _TOL,
    HYP_AB,
    MAX_NEWTON,
    NEEDS_BATCHED,
    ORTH_AB,
    form_coefficients,
    form_point,
    form_value,
    newton_step,
    solve_jorth2,
    solve_jorth2_batch,
)

__all__ = ["solve_jorth2x2", "solve_jorth2x2_single", "subproblem_value"]


def _largest_root(A, B, G, tau: float, eps: float):
    """:func:`orthoplug.kernels.jorth2.largest_root` elementwise on tensors (same start, Newton
    iteration and stopping rule; each instance stops where the kernel's loop breaks)."""
    if tau > 0:
        t = (G + B) / (2.0 * A)
        done = torch.zeros_like(t, dtype=torch.bool)
    else:
        t = G / torch.hypot(B, G)
        t = torch.where(A > 0.0, torch.minimum(t, G / (2.0 * A)), t)
        done = B == 0.0  # φ = A t² − G t on [0, 1]: closed form below
        closed = torch.where(A > 0.0, torch.clamp(G / (2.0 * A), max=1.0),
                             (G > 0.0).to(t.dtype))
        t = torch.where(done, closed, t)
    scale = B + G * t + A * t * t
    for _ in range(MAX_NEWTON):
        r = torch.hypot(torch.ones_like(t), t) if tau > 0 else torch.sqrt((1.0 - t) * (1.0 + t))
        g, step = newton_step(A, B, G, tau, t, r)
        move = ~done & (r != 0.0) & (g > 0.0) & (step > 0.0)
        t = torch.where(move, t - step, t)
        done = ~move | (step <= 2.0 * eps * t) | (step * g <= eps * eps * scale)
        if bool(done.all()):
            break
    return t


def _hyperbolic_point(a, b, cq, d, e, eps, mu_max):
    """:func:`orthoplug.kernels.jorth2.hyperbolic_point` elementwise; a form with ``w± ≤ 0``
    gives its ``μ = 0`` point."""
    wp, wm = cq + d + e, cq - d + e
    ok = (wp > 0.0) & (wm > 0.0)
    wp, wm = torch.where(ok, wp, 1.0), torch.where(ok, wm, 1.0)
    mu0 = 0.25 * torch.log(wm / wp)
    rho = torch.exp(mu0)
    mp, mm = (a + b) * rho, (a - b) / rho
    pc, ps = 0.5 * (mp + mm), 0.5 * (mp - mm)
    t = _largest_root(torch.sqrt(wp) * torch.sqrt(wm), pc.abs(), ps.abs(), 1.0, eps)
    sgn = torch.where(pc > 0.0, -1.0, 1.0).to(t.dtype)
    y = torch.where(ps > 0.0, -t, t)
    mu = torch.clamp(torch.asinh(sgn * y) + mu0, -mu_max, mu_max)
    return torch.where(ok, sgn * torch.cosh(mu), 1.0), torch.where(ok, sgn * torch.sinh(mu), 0.0)


def _orthogonal_point(a, b, cq, d, e, eps):
    """:func:`orthoplug.kernels.jorth2.orthogonal_point` elementwise."""
    gam = 0.5 * torch.atan2(d, cq - e)
    ch, sh = torch.cos(gam), torch.sin(gam)
    gm, gp = b * ch - a * sh, a * ch + b * sh
    t = _largest_root(torch.hypot(cq - e, d), gm.abs(), gp.abs(), -1.0, eps)
    c = torch.sqrt((1.0 - t) * (1.0 + t))
    c = torch.where(gm > 0.0, -c, c)
    y = torch.where(gp > 0.0, -t, t)
    C, S = y * ch - c * sh, c * ch + y * sh
    nrm = torch.hypot(C, S)
    return C / nrm, S / nrm


def _decreases(pv: torch.Tensor, q: torch.Tensor, v: list[torch.Tensor], f_eye: torch.Tensor,
               tol: float) -> torch.Tensor:
    """Whether moving from I to ``V`` (``v``: its entries V11, V12, V21, V22, each (K,)) lowers
    F by more than the kernel's margin and the rounding of the change (``pv``: vec P, (4, K);
    ``q``: Q, (4, 4, K); ``f_eye``: F(I)).

    The change is evaluated directly, ``ΔF = ⟨g, w⟩ + ½ wᵀQw`` with ``w = vec(V − I)`` and
    ``g = Q vec(I) + vec(P)`` (F's gradient at I), not as ``F(V) − F(I)``: F carries an offset of
    the size of Q (P = M − sI for the JOBCD model), whose rounding (ε·s) would hide every
    decrease below it — in float32 the steps of a nearly stationary pair. Each product in ΔF is
    rounded relative to its own size, so a move is taken iff ``−ΔF`` exceeds both
    ``tol·(Σ (|Q vec(I)| + |vec P|)∘|w| + ½ |w|ᵀ|Q||w|)`` (a computed decrease larger than any
    rounding of its evaluation is a decrease of the model, in every dtype) and the kernel's
    stationarity margin ``1e-14·max(1, |F(I)|)`` (so float64 takes the kernel's decisions).
    """
    w = torch.stack([v[0] - 1.0, v[2], v[1], v[3] - 1.0])  # vec(V − I), column-major
    qe = q[:, 0] + q[:, 3]  # Q vec(I), (4, K)
    qw = torch.einsum("ijk,jk->ik", q, w)
    quad = 0.5 * (w * qw).sum(0)
    change = ((qe + pv) * w).sum(0) + quad
    aw = w.abs()
    scale = ((qe.abs() + pv.abs()) * aw).sum(0) + 0.5 * (aw * torch.einsum(
        "ijk,jk->ik", q.abs(), aw)).sum(0)
    return change < -torch.maximum(tol * scale, _TOL * f_eye.abs().clamp(min=1.0))


def _solve_torch(hyp: bool, P: torch.Tensor, Qd: torch.Tensor) -> torch.Tensor:
    """The kernel's steps for K instances of one group (O(1,1) if ``hyp``, else O(2)) on
    ``P``'s device and dtype."""
    dt, dev = P.dtype, P.device
    finfo = torch.finfo(dt)
    eps, mu_max = finfo.eps, 0.3 * math.log(finfo.max)
    tol = max(1e-14, 8.0 * eps)
    forms = torch.tensor(HYP_AB if hyp else ORTH_AB, dtype=dt, device=dev)
    pv = P.mT.reshape(-1, 4).T  # (4, K), column-major vec
    q = Qd.permute(1, 2, 0)  # (4, 4, K)
    best = torch.full_like(pv[0], math.inf)
    v = [torch.ones_like(best), torch.zeros_like(best), torch.zeros_like(best),
         torch.ones_like(best)]
    for f in range(2):
        a, b, cq, d, e = form_coefficients(forms, f, pv, q)
        if f == 0:  # V = I is c = 1, s = 0 of the first form
            f_eye = a + cq
        C, S = (_hyperbolic_point(a, b, cq, d, e, eps, mu_max) if hyp
                else _orthogonal_point(a, b, cq, d, e, eps))
        val = form_value(a, b, cq, d, e, C, S)
        better = val < best
        best = torch.where(better, val, best)
        v = [torch.where(better, new, old) for new, old in zip(form_point(forms, f, C, S), v,
                                                                  strict=True)]
    keep = ~_decreases(pv, q, v, f_eye, tol) | (best == math.inf)
    out = torch.stack(v, -1).reshape(-1, 2, 2)
    return torch.where(keep[:, None, None], torch.eye(2, dtype=dt, device=dev), out)


def _solve_compiled(jb: torch.Tensor, P: torch.Tensor, Qd: torch.Tensor) -> torch.Tensor:
    """The kernel over the K instances (float64 copies); instances it refuses (``w± ≤ 0``)
    go to the torch steps."""
    K = P.shape[0]
    v = np.empty((K, 2, 2))
    status = np.empty(K, dtype=np.int64)
    solve_jorth2_batch(jb.to(torch.float64).numpy(), P.detach().to(torch.float64).numpy(),
                       Qd.detach().to(torch.float64).contiguous().numpy(), v, status)
    out = torch.from_numpy(v)
    refused = torch.from_numpy(status == NEEDS_BATCHED)  # hyperbolic instances only
    if bool(refused.any()):
        out[refused] = _solve_torch(True, P[refused].to(torch.float64),
                                    Qd[refused].to(torch.float64))
    return out.to(P.dtype)


def _prepare(jb, P, Qd, s, need_jb=True):
    if not isinstance(P, torch.Tensor) or P.dim() != 3 or P.shape[1:] != (2, 2):
        raise ValueError(f"P must be a tensor of shape (K, 2, 2), got {_shape(P)}")
    if not P.is_floating_point():
        raise ValueError(f"P must have a floating dtype, got {P.dtype}")
    K = P.shape[0]
    if (Qd is None) == (s is None):
        raise ValueError("pass exactly one of Qd (K, 4, 4) and s (scalar or (K,))")
    dt, dev = P.dtype, P.device
    if Qd is not None:
        if not isinstance(Qd, torch.Tensor) or Qd.shape[-2:] != (4, 4) or Qd.dim() not in (2, 3) \
                or (Qd.dim() == 3 and Qd.shape[0] != K):
            raise ValueError(f"Qd must have shape (K, 4, 4) = ({K}, 4, 4), got {_shape(Qd)}")
        Qd = Qd.to(dtype=dt, device=dev).expand(K, 4, 4)
    else:
        if isinstance(s, torch.Tensor):
            if s.dim() > 1 or (s.dim() == 1 and s.shape[0] not in (1, K)):
                raise ValueError(f"s must be a scalar or have shape (K,) = ({K},), got {_shape(s)}")
            s = s.to(dtype=dt, device=dev).reshape(-1, 1)
            if not bool((s > 0).all()) or not bool(torch.isfinite(s).all()):
                raise ValueError("s must be positive and finite (Qd = s·I4 must be SPD)")
        else:
            s = float(s)
            if not (0.0 < s < math.inf):
                raise ValueError(f"s must be positive and finite (Qd = s·I4 must be SPD), got {s}")
            s = torch.full((1, 1), s, dtype=dt, device=dev)
    if not need_jb:
        return None, P, Qd, s
    jb = torch.as_tensor(jb, device=dev)
    if jb.dim() == 1 and jb.shape[0] == 2:
        jb = jb.expand(K, 2)
    if jb.dim() != 2 or jb.shape != (K, 2):
        raise ValueError(f"jb must have shape (K, 2) = ({K}, 2), got {_shape(jb)}")
    if jb.is_complex() or jb.dtype == torch.bool or bool((jb.abs() != 1).any()):
        raise ValueError("jb entries must be +1 or -1")
    return jb, P, Qd, s


def _shape(x):
    return tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__


def _values(v, Pv, Q, s):
    """F at vecs v (K, N, 4)."""
    Qv = v * s.unsqueeze(-1) if Q is None else v @ Q
    return ((0.5 * Qv + Pv.unsqueeze(1)) * v).sum(-1)


def solve_jorth2x2(
    jb: torch.Tensor,
    P: torch.Tensor,
    Qd: torch.Tensor | None = None,
    s: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """Global minimiser of ``F(V) = ½ vec(V)ᵀ Qd vec(V) + <V, P>`` over ``Vᵀ J_BB V = J_BB``.

    Args:
        jb: (K, 2) entries ±1, ``J_BB = diag(jb[k, 0], jb[k, 1])``, any real dtype; (2,) broadcasts.
        P: (K, 2, 2) floating; sets the working dtype and device.
        Qd: (K, 4, 4) symmetric positive definite, column-major vec convention, or
        s: scalar or (K,) positive, meaning ``Qd = s·I4``. Exactly one of Qd and s.

    Returns:
        V: (K, 2, 2) with ``Vᵀ J_BB V = J_BB`` minimising F, instance by instance, on ``P``'s
        device and in its dtype: compiled on the CPU, in torch elsewhere (module docstring).
    """
    jb, P, Qd, s = _prepare(jb, P, Qd, s)
    K = P.shape[0]
    if K == 0:
        return P.new_empty((0, 2, 2))
    if Qd is None:
        Qd = s.reshape(-1, 1, 1) * torch.eye(4, dtype=P.dtype, device=P.device).expand(K, 4, 4)
    if runs_compiled(P):
        return _solve_compiled(jb, P, Qd).contiguous()
    hyp = jb[:, 0] != jb[:, 1]  # j1 j2 < 0
    out = P.new_empty((K, 2, 2))
    for flag, mask in ((True, hyp), (False, ~hyp)):
        out[mask] = _solve_torch(flag, P[mask], Qd[mask])
    return out


def subproblem_value(
    V: torch.Tensor,
    P: torch.Tensor,
    Qd: torch.Tensor | None = None,
    s: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """``F(V) = ½ vec(V)ᵀ Qd vec(V) + <V, P>`` (column-major vec), shape (K,).

    V and P are (K, 2, 2); exactly one of Qd (K, 4, 4) and s (scalar or (K,), Qd = s·I4).
    """
    _, P, Qd, s = _prepare(None, P, Qd, s, need_jb=False)
    if not isinstance(V, torch.Tensor) or V.shape != P.shape:
        raise ValueError(f"V must have the shape of P {tuple(P.shape)}, got {_shape(V)}")
    K = P.shape[0]
    v = V.to(P.dtype).mT.reshape(K, 1, 4)
    return _values(v, P.mT.reshape(K, 4), Qd, s).squeeze(-1)


def solve_jorth2x2_single(
    jb: Sequence[float],
    P: Sequence[Sequence[float]],
    Qd: Sequence[Sequence[float]] | None = None,
    s: float | None = None,
) -> tuple[tuple[float, float], tuple[float, float]]:
    r""":func:`solve_jorth2x2` for one instance, in float64, through the compiled kernel
    :func:`orthoplug.kernels.jorth2.solve_jorth2`.

    The same answer as :func:`solve_jorth2x2` without tensors (for one pair a tensor call costs
    more than the kernel's few dozen float operations). If ``w± ≤ 0`` on a hyperbolic form the
    instance takes the torch steps, as there.

    Args:
        jb: ``(j1, j2)``, entries ±1.
        P: 2×2 nested sequence (or array).
        Qd: 4×4 nested sequence or array (column-major vec convention, symmetric positive
            definite), or
        s: positive scalar, meaning ``Qd = s·I4``. Exactly one of Qd and s.

    Returns:
        V as a nested tuple ``((V11, V12), (V21, V22))``.
    """
    j1, j2 = jb
    if abs(j1) != 1 or abs(j2) != 1:
        raise ValueError(f"jb entries must be +1 or -1, got {tuple(jb)}")
    if (Qd is None) == (s is None):
        raise ValueError("pass exactly one of Qd (4×4) and s (scalar)")
    if s is not None:
        if not 0.0 < s < math.inf:
            raise ValueError(f"s must be positive and finite (Qd = s·I4 must be SPD), got {s}")
        q = float(s) * np.eye(4)
    else:
        q = np.asarray(Qd, dtype=np.float64)
        if q.shape != (4, 4):
            raise ValueError(f"Qd must have shape (4, 4), got {q.shape}")
    (p11, p12), (p21, p22) = P
    status, v11, v12, v21, v22 = solve_jorth2(float(j1), float(j2), float(p11), float(p12),
                                              float(p21), float(p22), q)
    if status == NEEDS_BATCHED:
        V = _solve_torch(True, torch.tensor([P], dtype=torch.float64), torch.from_numpy(q)[None])[0]
        return tuple(tuple(row) for row in V.tolist())
    return (v11, v12), (v21, v22)
