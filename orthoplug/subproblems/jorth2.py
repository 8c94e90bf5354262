r"""Exact, batched, global solver for the 2×2 subproblem of JOBCD.

Problem
-------
For each of K independent instances minimise

    F(V) = ½ vec(V)ᵀ Qd vec(V) + <V, P>     subject to   Vᵀ J_BB V = J_BB,

with ``J_BB = diag(j1, j2)``, ``j ∈ {±1}``, ``Qd`` 4×4 symmetric positive definite, ``P`` 2×2 and
``vec`` column-major: ``vec(V) = [V11, V21, V12, V22]``, ``<A, B> = Σ A∘B``.

One-parameter forms
-------------------
Every feasible V lies on a one-parameter *form* ``vec(V) = c·α + s·β`` on which

    F = a c + b s + cq c² + d c s + e s²,
    a = α·vec(P), b = β·vec(P), cq = ½αᵀQdα, d = αᵀQdβ, e = ½βᵀQdβ.

* ``j1 j2 < 0`` (diag(1,−1) and diag(−1,1) give the same group O(1,1)): four components
  ``V = diag(ε1, ε2)·[[cosh μ, sinh μ], [sinh μ, cosh μ]]``, i.e. ``α = (ε1, 0, 0, ε2)``,
  ``β = (0, ε2, ε1, 0)``, ``c = cosh μ``, ``s = sinh μ``, μ ∈ ℝ.
* ``j1 j2 > 0`` (±I, group O(2)): rotations ``[[c, −s], [s, c]]`` (α = (1,0,0,1), β = (0,1,−1,0))
  and reflections ``[[c, s], [s, −c]]`` (α = (1,0,0,−1), β = (0,1,1,0)), ``c = cos φ``,
  ``s = sin φ``.

Hyperbolic case: the quartic in u = e^μ (production path)
---------------------------------------------------------
With ``c = (u + 1/u)/2``, ``s = (u − 1/u)/2`` and ``w± = cq ± d + e = ½ γ±ᵀ Qd γ±`` where
``γ± = α ± β``,

    F(μ) = (a+b)/2 · u + (a−b)/2 · u⁻¹ + w+/4 · u² + w−/4 · u⁻² + (cq − e)/2,
    dF/dμ = 0   ⇔   w+ u⁴ + (a+b) u³ − (a−b) u − w− = 0.

``Qd ≻ 0`` gives ``w± > 0``, so F → +∞ as μ → ±∞ and every form attains its minimum at a
positive root u. Substituting u → −u maps the quartic of (a, b) onto that of (−a, −b), i.e. the
quartic of form (−ε1, −ε2) has the negated roots of form (ε1, ε2). Hence two quartics (ε = (1, 1)
and ε = (1, −1)) give the candidates of all four forms: a root with real part x > 0 is a candidate
u = x of form ε, one with x < 0 is a candidate u = −x of form −ε. Roots are the eigenvalues of the
companion matrices (``torch.linalg.eigvals``, batched); the real part of every root is kept because
near-double roots come back as complex pairs with a tiny imaginary part (extra candidates never
hurt: each candidate is a feasible V and is judged by its value of F).

Companion eigenvalues are accurate relative to the largest root only: when ‖P‖/λ_min(Qd) is large
the roots spread over many decades (u ~ ‖P‖/λ and u ~ λ/‖P‖) and the small ones are lost, even
returned as 0, once the spread (‖P‖/λ)² nears 1/eps (measured: ‖P‖/λ ≳ 1e10 in float64, ≳ 1e4 in
float32). So the reversed quartic
in v = 1/u, ``w− v⁴ + (a−b) v³ − (a+b) v − w+ = 0``, is solved in the same batch, and its roots
give the small u accurately. Each instance therefore solves four 4×4 companion eigenproblems.

Why not the paper's t = tanh μ reduction? With ``c = ±1/√(1−t²)``, ``s = ±t/√(1−t²)`` on
t ∈ (−1, 1), stationarity reads ``d t² + 2wt + d = −(b + at)√(1−t²)`` (w = cq + e); it becomes a
polynomial only after squaring, which mixes in the stationary points of the other sign branch, so
every real root in (−1, 1) must be tried with both signs and the spurious ones rejected. The
u-form needs no squaring, so it has no spurious roots at all. The t-form also loses digits as
``|μ|`` grows: ``1 − t ≈ 2e^{−2|μ|}``, so at ``|μ| = 15`` only about 3 significant digits of
1 − t² survive in float64 and for ``|μ| ≳ 19`` t rounds to exactly ±1, while u = e^μ stays
accurately representable.
The endpoints t → ±1 are u → ∞ and u → 0, where F → +∞ because ``w± > 0`` (Qd ≻ 0), so neither
form needs endpoint candidates. The degenerate coefficient cases of the t-form (a = d = 0 drops its
degree to 2, a = b = 0 turns it into a perfect square with double roots) are ordinary cases of the
u-quartic: its leading and constant coefficients ±w± never vanish. (The tests check the t-form
against this solver.)

Orthogonal case
---------------
* Scalar Q (``Qd = s·I4``, pass ``s=``): ``cq = e = s``, ``d = 0``, so on each form
  ``F = a cos φ + b sin φ + s`` and the minimiser is ``φ* = atan2(−b, −a)``.
* General Qd: ``dF/dφ = g(φ) = b cos φ − a sin φ + d cos 2φ − (cq − e) sin 2φ``. With
  ``τ = tan(φ/2)``, ``(1+τ²)² g = (d−b)τ⁴ + (4(cq−e)−2a)τ³ − 6dτ² + (4(e−cq)−2a)τ + (b+d)``.
  Its leading coefficient is ``g(π)`` and vanishes in common cases (e.g. diagonal Qd with
  symmetric P for the rotation form), which puts a root at τ = ∞ and breaks the companion matrix.
  So the angle is measured from a shift φ0: with ``φ = φ0 + ψ`` the form is the same family with
  rotated basis ``α' = cos φ0·α + sin φ0·β``, ``β' = −sin φ0·α + cos φ0·β``, i.e.
  ``a' = c0 a + s0 b``, ``b' = c0 b − s0 a``, ``(cq−e)' = C2 (cq−e) + S2 d``,
  ``d' = C2 d − S2 (cq−e)`` (c0, s0 = cos, sin φ0; C2, S2 = cos, sin 2φ0), and the leading
  coefficient becomes ``g(φ0 + π)``. φ0 + π is picked among 5 equispaced angles as the one with the
  largest ``|g|``; a nonzero trigonometric polynomial of degree 2 has at most 4 zeros per period,
  so it is nonzero there unless g ≡ 0 (F constant on the form). Candidates ``φ0 + 2 atan(Re τ)``
  for all four roots, plus φ = 0 and φ = π of both families. Since the largest ``|coefficient|``
  ratio is then bounded, root errors are absolute ~eps, which is what an angle needs.

Implementation note: (b, a, d, cq − e) are linear in (vec P, vec Qd) and the quartic coefficients
are linear in them for each fixed shift, so the code forms all coefficients with one or two small
matmuls against constant matrices built once per dtype/device (few tensor ops per call, which is
what costs time for K = 1).

Selection
---------
Every candidate is turned into V and F is evaluated directly from vec(V), Qd and P; the argmin over
all forms × candidates is returned. Candidates include the four diagonal sign matrices (μ = 0,
resp. φ ∈ {0, π}), which lie in both groups; I is candidate 0, and I is returned whenever
``F(I) ≤ F_best + tol·max(1, |F_best|)`` (tol = 1e-14 in float64, a few ulps in float32), so a
stationary point does not move needlessly. log u is clamped to ``±0.3·log(finfo.max)`` before
cosh/sinh are formed (float64: ``|μ| ≤ 212``, float32: ``|μ| ≤ 26``), so u² and Qd-weighted sums
stay finite; any NaN value of F (from a discarded candidate) is mapped to +∞ before the argmin.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

# the forms' (alpha, beta), shared with the compiled one-instance solver (one source)
from orthoplug.kernels.jorth2 import HYP_AB as _HYP_AB
from orthoplug.kernels.jorth2 import NEEDS_BATCHED, solve_jorth2
from orthoplug.kernels.jorth2 import ORTH_AB as _ORTH_AB

__all__ = ["solve_jorth2x2", "solve_jorth2x2_single", "subproblem_value"]

_CACHE: dict[tuple[torch.dtype, torch.device], dict] = {}


def _build_consts() -> dict:
    """Constant matrices (float64, CPU) of the linear maps described in the module docstring."""
    T = torch.tensor
    f64 = torch.float64
    # -- hyperbolic: pairs eps = (1, 1) and (1, -1), each with (alpha, beta)
    h_ab = T(_HYP_AB, dtype=f64)
    gam = torch.stack([h_ab[p, 0] + sg * h_ab[p, 1] for p in (0, 1) for sg in (1, -1)])
    # companion rows r: pair 0 forward, pair 0 reversed, pair 1 forward, pair 1 reversed.
    # row r divides by w[r]; its numerators are (-m[r], 0, m[r^1], w[r^1]), where
    # m = gam @ vec(P) = (a+b, a-b) per pair and w = ½ gam Qd gam^T diag = (w+, w-) per pair.
    mp = torch.zeros(4, 4, 4, dtype=f64)
    mw = torch.zeros(4, 4, 4, dtype=f64)
    for r in range(4):
        mp[:, r, 0] = -gam[r]
        mp[:, r, 2] = gam[r ^ 1]
        mw[r ^ 1, r, 3] = 1.0
    # -- orthogonal: (rotation, reflection) x (alpha, beta); h = (b, a, d, cq - e) per form
    o_ab = T(_ORTH_AB, dtype=f64)
    o_p = torch.zeros(4, 2, 4, dtype=f64)
    o_q = torch.zeros(4, 4, 2, 4, dtype=f64)
    for f in (0, 1):
        al, be = o_ab[f]
        o_p[:, f, 0], o_p[:, f, 1] = be, al
        o_q[:, :, f, 2] = 0.5 * (torch.outer(al, be) + torch.outer(be, al))
        o_q[:, :, f, 3] = 0.5 * (torch.outer(al, al) - torch.outer(be, be))
    # tan-half quartic after the shift phi0 = theta_k - pi, as rows over h' = (b', a', d', dlt'):
    # (lead, -c3, -c2, -c1, -c0) = (d' - b', 2a' - 4dlt', 6d', 2a' + 4dlt', -(b' + d'))
    L = T([[-1, 0, 1, 0], [0, 2, 0, -4], [0, 0, 6, 0], [0, 2, 0, 4], [-1, 0, -1, 0]], dtype=f64)
    phi0 = [2.0 * math.pi * k / 5.0 - math.pi for k in range(5)]
    o_m = []
    for p0 in phi0:
        c0, s0, c2, s2 = math.cos(p0), math.sin(p0), math.cos(2 * p0), math.sin(2 * p0)
        R = T([[c0, -s0, 0, 0], [s0, c0, 0, 0], [0, 0, c2, -s2], [0, 0, s2, c2]], dtype=f64)
        o_m.append((L @ R).T)  # (4, 5): h -> coefficients for this shift
    sub = torch.zeros(4, 4, dtype=f64)
    sub[1, 0] = sub[2, 1] = sub[3, 2] = 1.0
    return {
        # column-major vecs of I, -I, diag(1,-1), diag(-1,1): in O(1,1) and in O(2); I first.
        "diag": T([[1, 0, 0, 1], [-1, 0, 0, -1], [1, 0, 0, -1], [-1, 0, 0, 1]], dtype=f64),
        "h_mp": mp.reshape(4, 16),
        "h_mw": mw.reshape(4, 16),
        "h_mw1": mw.sum(0).reshape(16),
        "h_mq": 0.5 * torch.einsum("ri,rj->ijr", gam, gam).reshape(16, 4),
        "h_ab": h_ab[[0, 0, 1, 1]],  # basis per companion row
        "h_rev": T([[1.0], [-1.0], [1.0], [-1.0]], dtype=f64),  # mu = ±log|root|
        "o_ab": o_ab,
        "o_p": o_p.reshape(4, 8),
        "o_q": o_q.reshape(16, 8),
        "o_m": torch.cat(o_m, 1),  # (4, 25)
        "o_phi0": T(phi0, dtype=f64),
        "e0": T([[1.0], [0.0], [0.0], [0.0]], dtype=f64),
        "sub": sub,
    }


def _consts(dtype: torch.dtype, device: torch.device) -> dict:
    key = (dtype, device)
    c = _CACHE.get(key)
    if c is None:
        c = {k: v.to(dtype=dtype, device=device) for k, v in _build_consts().items()}
        c["mu_max"] = 0.3 * math.log(torch.finfo(dtype).max)
        c["big"] = torch.finfo(dtype).max ** 0.75
        c["tol"] = max(1e-14, 8.0 * torch.finfo(dtype).eps)
        _CACHE[key] = c
    return c


def _roots_re(top: torch.Tensor, C: dict) -> torch.Tensor:
    """Real parts of the roots of monic quartics whose companion first rows are ``top`` (..., 4).

    Entries are clamped to ±finfo.max^¾: LAPACK's balancing fails (LinAlgError) or returns NaN on
    companion entries near overflow, which only absurd scales (‖P‖/λ_min(Qd) ≳ 1e230 in float64)
    produce; the candidates then are merely inaccurate, never non-finite.
    """
    top = top.clamp(-C["big"], C["big"])
    return torch.linalg.eigvals(top.unsqueeze(-2) * C["e0"] + C["sub"]).real


def _hyperbolic(Pv, Q, s, C):
    """Candidates (K, 16, 4) for J_BB = ±diag(1, −1): roots of the u- and 1/u-quartics."""
    K = Pv.shape[0]
    if Q is None:
        w = 2.0 * s  # w± = ½ s |γ±|² = 2s, (K or 1, 1)
        num = Pv @ C["h_mp"] + w * C["h_mw1"]
    else:
        w = Q.reshape(K, 16) @ C["h_mq"]  # (K, 4)
        num = Pv @ C["h_mp"] + w @ C["h_mw"]
    x = _roots_re(num.view(K, 4, 4) / w.unsqueeze(-1), C)  # (K, 4 rows, 4 roots)
    x = x + (x == 0)  # Re = 0 -> harmless candidate u = 1
    mu = (torch.log(x.abs()) * C["h_rev"]).clamp_(-C["mu_max"], C["mu_max"])
    # sign(u) = sign(1/u) picks the form of the pair; V = sign * (cosh mu alpha + sinh mu beta)
    cs = torch.stack((torch.cosh(mu), torch.sinh(mu)), -1) * torch.sign(x).unsqueeze(-1)
    return (cs @ C["h_ab"]).view(K, 16, 4)


def _orthogonal(Pv, Q, s, C):
    """Candidates for J_BB = ±I: closed form (scalar Q, (K, 2, 4)) or shifted tan-half quartics
    ((K, 8, 4))."""
    K = Pv.shape[0]
    if Q is None:
        h = (Pv @ C["o_p"]).view(K, 2, 4)
        phi = torch.atan2(-h[..., 0], -h[..., 1])  # atan2(-b, -a) per form
        cs = torch.stack((torch.cos(phi), torch.sin(phi)), -1).unsqueeze(-2)  # (K, 2, 1, 2)
        return (cs @ C["o_ab"]).view(K, 2, 4)
    h = (Pv @ C["o_p"] + Q.reshape(K, 16) @ C["o_q"]).view(K, 2, 4)
    coef = (h @ C["o_m"]).view(K, 2, 5, 5)  # [form, shift, (lead, -c3, -c2, -c1, -c0)]
    k = coef[..., 0].abs().argmax(-1, keepdim=True)  # shift with the largest leading coefficient
    row = torch.take_along_dim(coef, k.unsqueeze(-1), dim=2).squeeze(2)  # (K, 2, 5)
    lead = row[..., :1]
    lead = lead + (lead == 0)  # g ≡ 0: F constant on the form, any root will do
    x = _roots_re(row[..., 1:] / lead, C)  # tau, (K, 2, 4)
    phi = C["o_phi0"][k] + 2.0 * torch.atan(x)
    cs = torch.stack((torch.cos(phi), torch.sin(phi)), -1)  # (K, 2, 4, 2)
    return (cs @ C["o_ab"]).view(K, 8, 4)


def _values(v, Pv, Q, s):
    """F at candidate vecs v (K, N, 4)."""
    Qv = v * s.unsqueeze(-1) if Q is None else v @ Q
    return ((0.5 * Qv + Pv.unsqueeze(1)) * v).sum(-1)


def _solve_group(hyp, Pv, Q, s, C):
    K = Pv.shape[0]
    cand = _hyperbolic(Pv, Q, s, C) if hyp else _orthogonal(Pv, Q, s, C)
    v = torch.cat((C["diag"].expand(K, 4, 4), cand), dim=1)
    F = torch.nan_to_num(_values(v, Pv, Q, s), nan=math.inf, posinf=math.inf)
    F0 = F[:, 0]  # V = I: preferred within tol (argmin returns the first minimum)
    F0.sub_(C["tol"] * F0.abs().clamp(min=1.0))
    vb = torch.take_along_dim(v, F.argmin(1).view(K, 1, 1), dim=1)  # (K, 1, 4)
    return vb.view(K, 2, 2).mT  # rows of vb.view are the columns of V


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
        V: (K, 2, 2) with ``Vᵀ J_BB V = J_BB`` minimising F, instance by instance. Instances with
        ``j1 j2 < 0`` are solved over O(1,1) (u = e^μ quartics), those with ``j1 j2 > 0`` over O(2)
        (atan2 for scalar Q, tan-half-angle quartics otherwise); see the module docstring.
    """
    jb, P, Qd, s = _prepare(jb, P, Qd, s)
    K = P.shape[0]
    if K == 0:
        return P.new_empty((0, 2, 2))
    C = _consts(P.dtype, P.device)
    Pv = P.mT.reshape(K, 4)
    hyp = jb[:, 0] != jb[:, 1]  # j1 j2 < 0
    nh = int(hyp.sum())
    if nh == K or nh == 0:
        return _solve_group(nh == K, Pv, Qd, s, C).contiguous()
    out = P.new_empty((K, 2, 2))
    for flag, mask in ((True, hyp), (False, ~hyp)):
        Qm = None if Qd is None else Qd[mask]
        sm = None if s is None else (s if s.shape[0] == 1 else s[mask])
        out[mask] = _solve_group(flag, Pv[mask], Qm, sm, C)
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


# ---- one instance: the compiled kernel -------------------------------------------------------


def solve_jorth2x2_single(
    jb: Sequence[float],
    P: Sequence[Sequence[float]],
    Qd: Sequence[Sequence[float]] | None = None,
    s: float | None = None,
) -> tuple[tuple[float, float], tuple[float, float]]:
    r""":func:`solve_jorth2x2` for one instance, in float64, through the compiled kernel
    :func:`orthoplug.kernels.jorth2.solve_jorth2`.

    For one pair the batched solver's cost is per-call tensor overhead; the kernel does a few
    dozen float operations. It takes the same forms, the same candidate rule and tie tolerance
    (V = I whenever ``F(I) ≤ F_best + 1e-14·max(1, |F(I)|)``) and the same μ clamp, but finds each
    pair of forms' global minimum without polynomial roots (see the kernel's module docstring).
    If ``Qd`` is so badly rounded that ``w± ≤ 0`` the instance goes to the batched solver.

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
        V = solve_jorth2x2(torch.tensor([jb]), torch.tensor([P], dtype=torch.float64),
                           Qd=torch.from_numpy(q)[None])[0]
        return tuple(tuple(row) for row in V.tolist())
    return (v11, v12), (v21, v22)
