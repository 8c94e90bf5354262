r"""Exact global solver of the OBCD ``k = 2`` subproblem over ``O(2)``, batched.

Problem (one instance; the functions below solve ``K`` independent instances at once)::

    min_{V in O(2)}  K(V) = 1/2 vec(V)^T Qt vec(V) + <V, P> + h(V Z)

``vec`` is column-major, ``Qt`` (4 x 4) symmetric -- positive definite, semidefinite or indefinite
(OBCD passes ``Q + alpha I`` with ``Q`` possibly the exact curvature of a concave ``f``) -- ``P`` is
2 x 2, ``Z`` is 2 x r and ``h`` a :class:`~orthoplug.nonsmooth.SeparableTerm`.

**One-angle form.** ``O(2)`` is the union of ``Vrot(t) = [[c, s], [-s, c]]`` (det +1, ``e = +1``)
and ``Vref(t) = [[-c, s], [s, c]]`` (det -1, ``e = -1``), ``c = cos t``, ``s = sin t``. With
``m = (e, 0, 0, 1)``, ``v = (0, -e, 1, 0)``: ``vec(V) = c m + s v`` and, per family,

    phi_e(t) = a c + b s + q11 c^2 + q12 c s + q22 s^2 + sum_i h(c x_i + s y_i)
             = rho_ab cos(t - beta) + m0 + R2 cos(2t - gamma) + sum_i h(u_i(t)),

``a = e P11 + P22``, ``b = P12 - e P21``, ``q11 = m'Qt m/2``, ``q22 = v'Qt v/2``, ``q12 = m'Qt v``,
``m0 = (q11 + q22)/2``, ``R2 e^{i gamma} = ((q11 - q22) + i q12)/2``, ``x = [e Z1, Z2]``,
``y = [Z2, -e Z1]`` (``V Z = c x + s y`` row-stacked: 2r coordinates
``u_i = rho_i cos(t - psi_i)``).

**Breakpoint search.** ``h`` is piecewise affine in ``u``
(:class:`~orthoplug.nonsmooth.PiecewiseAffine`: thresholds ``theta_j``, pieces ``g u + k``,
feasibility flags, point values). Coordinate ``i`` crosses ``theta_j`` (when ``|theta_j| < rho_i``)
at the knots ``psi_i -+ arccos(theta_j / rho_i)`` (upward / downward). Between consecutive knots
every coordinate stays on one piece, so on an arc

    phi = (a + A) c + (b + B) s + quadratic(t) + Kc,  A = sum g_i x_i, B = sum g_i y_i, Kc = sum k_i

is smooth; the arc is infeasible when some coordinate sits on an infeasible piece. Starting from
``t0`` (middle of the widest gap between knots) the pieces at ``t0`` are found directly and each
knot carries the change ``(dg x_i, dg y_i, dk, dinfeasible)``; after sorting, exclusive cumulative
sums give every arc's coefficients. Knots closer than ``1e-14`` rad are one group; the value at a
group is the left arc's formula plus, for each member, ``h(theta_j) - (g_left theta_j + k_left)``
(this is where ``l0`` and the indicator differ from their one-sided limits), and the feasibility
count is corrected likewise. As ``phi`` is smooth on open arcs and ``h`` is lower semicontinuous,
the set {knots} u {interior stationary points of feasible arcs} contains a global minimiser.

**Stationary points** of ``rho cos(t - beta) + R2 cos(2t - gamma)``: with ``z = e^{it}``,
``phi' = 0`` iff ``z^4 + kappa e^{i(gamma-beta)} z^3 - kappa e^{i(gamma+beta)} z - e^{2i gamma}``
vanishes, ``kappa = rho / (2 R2)``; its roots are the eigenvalues of the companion matrix (one
batched eigenvalue call), their angles are polished by five Newton steps, and the two
stationary points ``beta, beta + pi`` of the linear part are always added (they are the exact answer
when ``R2 = 0``, e.g. ``Qt = sigma I``, where no eigenvalue problem is solved). Spurious candidates
are harmless: every candidate value is a true objective value (an upper bound at knots' limits).
Terms whose pieces all have the same slope (``l0``, nonnegativity, zero) share one set of stationary
points per family, each located in its arc by counting the knots before it. For ``l1`` and
capped-``l1`` every feasible arc has its own quadratic; arcs whose cheap lower bound (second-order
Taylor bound around the arc's midpoint) exceeds the best knot / midpoint / identity value are
pruned before the eigenvalue call.

**Numerical rules.** Coordinates with ``rho_i <= 1e-14 max(1, max_i rho_i)`` are identically 0.
The returned ``V`` is re-evaluated directly (for a discontinuous ``h`` -- ``l0``, indicators --
entries of ``V Z`` below ``1e-14 max(1, max_i rho_i)`` in modulus count as 0, see
:func:`o2_objective` ``snap``); ``V = I`` is returned when
``K(I) <= K(V) + 1e-14 max(1, |K(V)|)`` (no needless moves), or when no feasible candidate exists
(nonnegativity). After the update the caller is expected to set entries of ``V Z`` with modulus
``< 1e-14`` to exactly 0: knots are merged at ``1e-14``, so residues of that size remain, and a
negative residue would make ``V = I`` infeasible in the next nonnegativity subproblem. The
tolerances are kept that small on purpose: each snap moves the point off the manifold by up to
the tolerance, and with ``1e-12`` ℓ1 runs left St(n, r) by ~1e-12 within 5000 iterations.

**Implementation.** One instance (``K = 1``: :func:`solve_o2_single`, and :func:`solve_o2` with
one instance) runs the compiled search :func:`orthoplug.kernels.o2.o2_search` (numba; the same
algorithm on scalars, with the term passed as its piecewise tables; it also drives the OBCD pair
loop :mod:`orthoplug.kernels.obcd`). ``K > 1`` instances are processed in one vectorised NumPy
float64 pass on the CPU, without a Python loop over instances (its stationary points: companion
eigenvalues, see above; the kernel's: Newton from ``beta``, ``beta + pi`` when ``kappa >= 8``,
else Durand-Kerner roots of the same quartic, then Newton). Torch inputs on any device are
accepted and the result is returned as a torch tensor on the input's device and dtype.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch

from orthoplug.kernels.o2 import LINEAR_ONLY as _LINEAR_ONLY
from orthoplug.kernels.o2 import PREFER_I as _PREFER_I
from orthoplug.kernels.o2 import PRUNE_SLACK as _PRUNE_SLACK
from orthoplug.kernels.o2 import SNAP, o2_search
from orthoplug.kernels.o2 import TIE as _TIE
from orthoplug.kernels.o2 import TWO_PI as _TWO_PI
from orthoplug.kernels.o2 import ZERO_REL as _ZERO_REL
from orthoplug.nonsmooth import PiecewiseAffine, SeparableTerm, Zero

__all__ = ["solve_o2", "solve_o2_single", "o2_objective", "solve_polar"]

_NEWTON_STEPS = 5  # from beta (the linear part's stationary points) Newton needs ~4 to converge
_EYE2 = np.eye(2)
_EYE4 = np.eye(4)
_E = np.array([1.0, -1.0])  # e of the two families (rotation, reflection)
# vec(V) = c m + s v per family: rows m_rot, v_rot, m_ref, v_ref; _M / _V index the m / v rows
_BASIS = np.array([[1.0, 0.0, 0.0, 1.0], [0.0, -1.0, 1.0, 0.0],
                   [-1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
_M, _V = np.array([0, 2]), np.array([1, 3])


# ----------------------------------------------------------------------------------------------
# input handling
# ----------------------------------------------------------------------------------------------
def _as_tensor(name: str, X, device=None) -> torch.Tensor:
    if isinstance(X, torch.Tensor):
        T = X
    elif isinstance(X, np.ndarray | np.generic | list | tuple | float | int):
        T = torch.as_tensor(np.asarray(X, dtype=np.float64))
    else:
        raise ValueError(f"{name} must be a torch tensor or an array, got {type(X).__name__}")
    if T.is_complex() or T.dtype == torch.bool:
        raise ValueError(f"{name} must be real, got dtype {T.dtype}")
    if device is not None and T.device != device:
        T = T.to(device)
    return T


def _np64(T: torch.Tensor) -> np.ndarray:
    return T.detach().to(device="cpu", dtype=torch.float64).numpy()


def _prepare(P, Z, Qt, s, h=None, V=None):
    """Validate; returns float64 NumPy (P, Z, Qt or None, s or None, V or None), squeeze, dtype,
    device."""
    if h is not None and not isinstance(h, SeparableTerm):
        raise ValueError(
            f"h must be an orthoplug.nonsmooth.SeparableTerm (Zero(), L1(lam), ...), got {h!r}"
        )
    P = _as_tensor("P", P)
    out_dtype = P.dtype if P.is_floating_point() else torch.get_default_dtype()
    dev = P.device
    Z = _as_tensor("Z", Z)
    squeeze = P.dim() == 2
    if squeeze:
        P = P.unsqueeze(0)
    if P.dim() != 3 or P.shape[-2:] != (2, 2):
        raise ValueError(f"P must have shape (K, 2, 2) (or (2, 2)), got {tuple(P.shape)}")
    K = P.shape[0]
    if squeeze and Z.dim() == 2:
        Z = Z.unsqueeze(0)
    if Z.dim() != 3 or Z.shape[0] != K or Z.shape[1] != 2:
        raise ValueError(
            f"Z must have shape (K, 2, r) with K = {K} matching P, got {tuple(Z.shape)}"
        )
    if (Qt is None) == (s is None):
        raise ValueError("give exactly one of Qt (K, 4, 4) and s (scalar or (K,)); Qt = s I_4")
    Pn, Zn = _np64(P), _np64(Z)
    Qn = sn = None
    if Qt is not None:
        Qt = _as_tensor("Qt", Qt)
        if squeeze and Qt.dim() == 2:
            Qt = Qt.unsqueeze(0)
        if Qt.dim() == 2 and Qt.shape == (4, 4):
            Qt = Qt.unsqueeze(0).expand(K, 4, 4)
        if Qt.dim() != 3 or Qt.shape != (K, 4, 4):
            raise ValueError(f"Qt must have shape (K, 4, 4) = ({K}, 4, 4), got {tuple(Qt.shape)}")
        Qn = _np64(Qt)
    else:
        s = _as_tensor("s", s)
        if s.dim() == 0:
            s = s.reshape(1).expand(K)
        elif s.shape != (K,):
            raise ValueError(
                f"s must be a scalar or have shape (K,) = ({K},), got {tuple(s.shape)}"
            )
        sn = _np64(s)
    Vn = None
    if V is not None:
        V = _as_tensor("V", V)
        if squeeze and V.dim() == 2:
            V = V.unsqueeze(0)
        if V.shape != (K, 2, 2):
            raise ValueError(f"V must have shape (K, 2, 2) = ({K}, 2, 2), got {tuple(V.shape)}")
        Vn = _np64(V)
    for name, A in (("P", Pn), ("Z", Zn), ("Qt", Qn), ("s", sn), ("V", Vn)):
        if A is not None and not np.isfinite(A).all():
            raise ValueError(f"{name} contains NaN or inf")
    return Pn, Zn, Qn, sn, Vn, squeeze, out_dtype, dev


# ----------------------------------------------------------------------------------------------
# the term, as tables
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Tables:
    T: int
    th: np.ndarray  # (T,) thresholds
    g: np.ndarray  # (T+1,) slopes
    k: np.ndarray  # (T+1,) intercepts
    inf: np.ndarray  # (T+1,) 1.0 where the piece is infeasible
    h0: float  # phi(0)
    shared: bool  # all slopes equal: one set of stationary points per family
    continuous: bool
    track_k: bool  # some knot changes the intercept sum
    track_n: bool  # some knot changes the infeasibility count
    pval: np.ndarray  # (T,) phi(theta_j), +inf where infeasible
    knot: np.ndarray  # (2T, 5): row 2 j + direction (0 up, 1 down): dk, dn, cv, cn, dg


@functools.lru_cache(maxsize=256)
def breakpoint_tables(h: SeparableTerm) -> _Tables:
    """The term's tables (cached per term: building ``h.piecewise`` costs microseconds)."""
    return _tables_of(h.piecewise)


@functools.lru_cache(maxsize=256)
def _tables_of(pw: PiecewiseAffine) -> _Tables:
    """NumPy tables for the breakpoint search, cached per piecewise description."""
    th = np.asarray(pw.thresholds, dtype=np.float64)
    g = np.asarray(pw.slopes, dtype=np.float64)
    k = np.asarray(pw.intercepts, dtype=np.float64)
    inf = 1.0 - np.asarray(pw.feasible, dtype=np.float64)
    pv = np.asarray(pw.point_values, dtype=np.float64)
    pinf = 1.0 - np.asarray(pw.point_feasible, dtype=np.float64)
    T = th.shape[0]
    if 0.0 in pw.thresholds:
        j = pw.thresholds.index(0.0)
        h0 = float(pv[j]) if pw.point_feasible[j] else math.inf
    else:
        j = int(np.sum(th < 0.0))
        h0 = float(k[j]) if pw.feasible[j] else math.inf
    knot = np.zeros((T, 2, 5))
    # upward crossing of theta_j: interval j -> j+1 (left piece j); downward: j+1 -> j
    knot[:, 0, 0] = k[1:] - k[:-1]
    knot[:, 1, 0] = -knot[:, 0, 0]
    knot[:, 0, 1] = inf[1:] - inf[:-1]
    knot[:, 1, 1] = -knot[:, 0, 1]
    knot[:, 0, 2] = pv - (g[:-1] * th + k[:-1])
    knot[:, 1, 2] = pv - (g[1:] * th + k[1:])
    knot[:, 0, 3] = pinf - inf[:-1]
    knot[:, 1, 3] = pinf - inf[1:]
    knot[:, 0, 4] = g[1:] - g[:-1]
    knot[:, 1, 4] = -knot[:, 0, 4]
    track_k = bool(np.any(knot[..., 0] != 0.0))
    track_n = bool(np.any(knot[..., 1] != 0.0))
    return _Tables(
        T,
        th,
        g,
        k,
        inf,
        h0,
        pw.constant_slope,
        pw.continuous,
        track_k,
        track_n,
        np.where(pinf > 0.0, math.inf, pv),
        knot.reshape(2 * T, 5),
    )


# ----------------------------------------------------------------------------------------------
# objective
# ----------------------------------------------------------------------------------------------
def _objective_np(V, P, Z, h, Qt, s, snap: float, tables: bool = True) -> np.ndarray:
    """K(V), float64 NumPy; entries of VZ with |.| <= snap*max(1, max_j ||Z_:j||) count as 0.

    h is evaluated from its piecewise tables (fast) or, with ``tables=False``, by ``h.value``."""
    K = V.shape[0]
    if Qt is not None:
        v = V.transpose(0, 2, 1).reshape(K, 1, 4)
        quad = 0.5 * (v @ Qt @ v.transpose(0, 2, 1)).reshape(K)
    else:
        quad = 0.5 * s * (V * V).sum((1, 2))
    out = quad + (V * P).sum((1, 2))
    if isinstance(h, Zero) or Z.shape[-1] == 0:
        return out
    U = V @ Z
    if snap > 0.0:
        thr = snap * np.maximum(np.sqrt((Z * Z).sum(1)).max(-1), 1.0)
        U = np.where(np.abs(U) <= thr[:, None, None], 0.0, U)
    if tables:
        return out + _h_sum(breakpoint_tables(h), U)
    return out + np.asarray(h.value(torch.from_numpy(U)), dtype=np.float64)


def _h_sum(tab: _Tables, U) -> np.ndarray:
    """sum over the last two axes of phi(U), phi from the term's piecewise description."""
    iv = np.searchsorted(tab.th, U, side="left")  # number of thresholds < U
    val = tab.g[iv] * U + tab.k[iv]
    if tab.inf.any():
        val = np.where(tab.inf[iv] > 0.0, math.inf, val)
    if tab.T:
        j = np.minimum(iv, tab.T - 1)
        val = np.where(U == tab.th[j], tab.pval[j], val)
    return val.sum((-2, -1))


def o2_objective(V, P, Z, h, Qt=None, s=None, *, snap: float = 0.0) -> torch.Tensor:
    """``K(V) = 1/2 vec(V)^T Qt vec(V) + <V, P> + h(V Z)`` for each of the K instances, shape (K,).

    Exactly one of ``Qt`` (K, 4, 4) and ``s`` (scalar or (K,), meaning ``Qt = s I_4``).
    ``snap >= 0``: entries of ``V Z`` with modulus ``<= snap * max(1, max_j ||Z[:, j]||)`` are
    counted as exact zeros (the solver uses ``snap = 1e-14`` for discontinuous ``h``). Evaluated in
    float64, returned in ``P``'s floating dtype on ``P``'s device. ``+inf`` marks infeasibility.
    """
    P, Z, Qt, s, V, squeeze, out_dtype, dev = _prepare(P, Z, Qt, s, h=h, V=V)
    snap = float(snap)
    if not math.isfinite(snap) or snap < 0.0:
        raise ValueError(f"snap must be finite and >= 0, got {snap!r}")
    out = _objective_np(V, P, Z, h, Qt, s, snap, tables=False)
    out = torch.from_numpy(out).to(device=dev, dtype=out_dtype)
    return out[0] if squeeze else out


# ----------------------------------------------------------------------------------------------
# building blocks
# ----------------------------------------------------------------------------------------------
def _mod2pi(x):
    """x mod 2 pi, in [0, 2 pi]."""
    return x - _TWO_PI * np.floor(x * (1.0 / _TWO_PI))


def _stationary_angles(rho, beta, R2, gam) -> np.ndarray:
    """Angles containing all stationary points of ``rho cos(t - beta) + R2 cos(2t - gamma)``.

    Inputs are 1-D of equal length S; returns (S, 2) when the quadratic part is negligible for every
    row, else (S, 6): the angles of the four companion-matrix roots of
    ``z^4 + kappa e^{i(gamma-beta)} z^3 - kappa e^{i(gamma+beta)} z - e^{2 i gamma}`` and
    ``beta + pi``, ``beta``; all refined by Newton steps on ``phi'``.
    """
    lin = np.empty(beta.shape + (2,))
    lin[:, 0] = beta + math.pi
    lin[:, 1] = beta
    quad = R2 > _LINEAR_ONLY * rho
    if not quad.any():
        return lin
    if quad.all():
        rq, bq, Rq, gq = rho, beta, R2, gam
    else:
        rq, bq, Rq, gq = rho[quad], beta[quad], R2[quad], gam[quad]
    kappa = rq / (2.0 * Rq)
    S = kappa.shape[0]
    C = np.zeros((S, 4, 4), dtype=np.complex128)
    C[:, 0, 0] = -kappa * np.exp(1j * (gq - bq))
    C[:, 0, 2] = kappa * np.exp(1j * (gq + bq))
    C[:, 0, 3] = np.exp(2j * gq)
    C[:, 1, 0] = C[:, 2, 1] = C[:, 3, 2] = 1.0
    ang_q = np.angle(np.linalg.eigvals(C))
    if quad.all():
        ang = ang_q
    else:
        ang = np.repeat(beta[:, None], 4, 1)
        ang[quad] = ang_q
    t = np.concatenate([ang, lin], -1)
    r_, b_, R_, g_ = rho[:, None], beta[:, None], R2[:, None], gam[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        for _ in range(_NEWTON_STEPS):
            d1 = -r_ * np.sin(t - b_) - 2.0 * R_ * np.sin(2.0 * t - g_)
            d2 = -r_ * np.cos(t - b_) - 4.0 * R_ * np.cos(2.0 * t - g_)
            step = d1 / d2
            t = np.where(np.abs(step) < 0.3, t - step, t)  # False for nan / inf
    return t


def _harmonic(t, rho, beta, R2, gam):
    return rho * np.cos(t - beta) + R2 * np.cos(2.0 * t - gam)


def _families(P, Z, Qt, s):
    """Per-family data, flattened to N = 2K rows (row 2k + f, f = 0 rotation, 1 reflection).

    vec(V) = c m + s v with m = (e, 0, 0, 1), v = (0, -e, 1, 0) (rows of ``_BASIS``):
    ``a = m . vec(P)``, ``b = v . vec(P)``, ``q11 = m'Qt m/2``, ``q22 = v'Qt v/2``,
    ``q12 = (m'Qt v + v'Qt m)/2``.
    """
    K, _, r = Z.shape
    ab = P.transpose(0, 2, 1).reshape(K, 4) @ _BASIS.T  # (a, b) of the rotation, reflection
    a, b = ab[:, 0::2].reshape(-1), ab[:, 1::2].reshape(-1)
    if Qt is not None:
        W = _BASIS @ Qt @ _BASIS.T
        q11 = 0.5 * W[:, _M, _M].reshape(-1)
        q22 = 0.5 * W[:, _V, _V].reshape(-1)
        q12 = 0.5 * (W[:, _M, _V] + W[:, _V, _M]).reshape(-1)
        m0 = 0.5 * (q11 + q22)
        w = q11 - q22
        R2 = 0.5 * np.hypot(w, q12)
        gam = np.arctan2(q12, w)
    else:
        m0 = np.repeat(s, 2)
        R2 = np.zeros(2 * K)
        gam = np.zeros(2 * K)
    Z1, Z2 = Z[:, None, 0], Z[:, None, 1]
    x = np.empty((K, 2, 2 * r))
    y = np.empty((K, 2, 2 * r))
    np.multiply(_E[:, None], Z1, out=x[:, :, :r])
    x[:, :, r:] = Z2
    y[:, :, :r] = Z2
    np.multiply(-_E[:, None], Z1, out=y[:, :, r:])
    return a, b, m0, R2, gam, x.reshape(2 * K, 2 * r), y.reshape(2 * K, 2 * r)


def _rotation(e, t):
    """V = [[e c, s], [-e s, c]] (e = +1 rotation, -1 reflection)."""
    c, s = np.cos(t), np.sin(t)
    V = np.empty(t.shape + (2, 2))
    V[..., 0, 0] = e * c
    V[..., 0, 1] = s
    V[..., 1, 0] = -e * s
    V[..., 1, 1] = c
    return V


# ----------------------------------------------------------------------------------------------
# the solver
# ----------------------------------------------------------------------------------------------
def _solve_np(P, Z, h: SeparableTerm, Qt, s, single: bool | None = None) -> np.ndarray:
    """float64 NumPy in and out; ``single`` (default: ``K == 1``) picks the one-instance path."""
    with np.errstate(invalid="ignore", divide="ignore"):
        if single if single is not None else P.shape[0] == 1:
            return _search_one(P, Z, h, Qt, s)
        return _search(P, Z, h, Qt, s)


def _arc_state(s0, delta):
    """State of arc j (the arc ending at knot j): s0 + sum of the changes of knots < j."""
    out = np.cumsum(delta, 1)
    out -= delta
    out += s0[:, None]
    return out


def _wsum(A, w):
    """Row sums of ``A`` (weighted by the live-coordinate mask ``w`` when given)."""
    return (A if w is None else A * w).sum(1)


def _smooth(tab: _Tables, a, b, base, R2, gam, sx, sy, nlive):
    """Candidates (values, angles) when no knot exists: one smooth function per family.

    ``sx, sy``: sums of the live coordinates' ``x_i, y_i``; ``nlive``: their number."""
    if tab.T == 0:
        a = a + tab.g[0] * sx
        b = b + tab.g[0] * sy
        base = base + tab.k[0] * nlive
        if tab.inf[0] != 0.0:  # the single piece is infeasible: only rows without live coords
            base = np.where(nlive > 0, math.inf, base)
    rab, bet = np.hypot(a, b), np.arctan2(b, a)
    tc = _stationary_angles(rab, bet, R2, gam)
    return _harmonic(tc, rab[:, None], bet[:, None], R2[:, None], gam[:, None]) + base[:, None], tc


def _search(P, Z, h: SeparableTerm, Qt, s) -> np.ndarray:
    """The batched search: K instances, ragged knot counts handled by masks."""
    K, _, r = Z.shape
    N, R = 2 * K, 2 * r
    tab = breakpoint_tables(h)
    T = tab.T
    a, b, m0, R2, gam, x, y = _families(P, Z, Qt, s)
    KI = _objective_np(np.broadcast_to(_EYE2, (K, 2, 2)), P, Z, h, Qt, s, 0.0)
    rows = np.arange(N)

    if R > 0:
        rho = np.hypot(x, y)
        live = rho > _ZERO_REL * np.maximum(rho.max(1), 1.0)[:, None]
    else:
        rho = x
        live = np.zeros((N, 0), dtype=bool)
    nzero = R - live.sum(1)
    const = np.where(nzero > 0, nzero * tab.h0, 0.0) if tab.h0 != 0.0 else np.zeros(N)
    livef = live.astype(np.float64)

    if T == 0 or not live.any():
        val, tc = _smooth(tab, a, b, m0 + const, R2, gam, _wsum(x, livef), _wsum(y, livef),
                          livef.sum(1))
        return _finish(P, Z, h, Qt, s, val, tc, KI, tab)

    # ------------------------------------------------------------------ knots, sorted from t0
    th = tab.th
    psi = np.arctan2(y, x)
    valid = live[:, :, None] & (np.abs(th) < rho[:, :, None])  # (N, R, T)
    d = np.arccos(np.clip(th / rho[:, :, None], -1.0, 1.0))
    M = R * T * 2
    traw = np.empty((N, R, T, 2))
    traw[..., 0] = psi[:, :, None] - d  # u increases through theta_j here
    traw[..., 1] = psi[:, :, None] + d  # u decreases through theta_j here
    traw = traw.reshape(N, M)  # flat index = i * 2T + 2 j + direction
    validk = np.broadcast_to(valid[..., None], (N, R, T, 2)).reshape(N, M)
    tm = np.where(traw < 0.0, traw + _TWO_PI, traw)  # traw in [-2 pi, 2 pi]
    tm = np.where(validk, np.where(tm < _TWO_PI, tm, 0.0), math.inf)
    order = np.argsort(tm, axis=1)
    rc = rows[:, None]
    srt = tm[rc, order]
    n = validk.sum(1)
    nn = np.maximum(n, 1)[:, None]
    ar = np.arange(M)
    inpos = ar < n[:, None]
    last = ar == (n - 1)[:, None]
    gaps = np.where(inpos, srt[rc, (ar + 1) % nn] + np.where(last, _TWO_PI, 0.0) - srt, -1.0)
    jg = gaps.argmax(1)
    t0 = np.where(n > 0, srt[rows, jg] + 0.5 * gaps[rows, jg], 0.0)
    idx = order[rc, np.where(inpos, (jg[:, None] + 1 + ar) % nn, ar)]
    rel = tm[rc, idx] - t0[:, None]
    rel = np.where(inpos, np.where(rel < 0.0, rel + _TWO_PI, rel), math.inf)
    fam = (a, b, m0 + const, R2, gam)
    knots = (t0, rel, traw[rc, idx], tab.knot[idx % (2 * T)], idx // (2 * T), n, inpos, last)
    return _finish(P, Z, h, Qt, s, *_arcs(tab, fam, x, y, livef, knots, KI), KI, tab)


def _search_one(P, Z, h: SeparableTerm, Qt, s) -> np.ndarray:
    """One instance (K = 1): the compiled search :func:`orthoplug.kernels.o2.o2_search`."""
    tab = breakpoint_tables(h)
    Q = Qt[0] if Qt is not None else float(s[0]) * _EYE4
    V = np.empty((1, 2, 2))
    o2_search(np.ascontiguousarray(P[0]), np.ascontiguousarray(Z[0]), np.ascontiguousarray(Q),
              tab.th, tab.g, tab.k, tab.inf, tab.pval, tab.knot, tab.h0, tab.shared,
              tab.continuous, V[0])
    return V


def _trig(al, be, R2c, cg, sg, c, s, base):
    """``al c + be s + R2 cos(2t - gamma) + base`` from ``c = cos t, s = sin t``."""
    return al * c + be * s + R2c * ((c * c - s * s) * cg + 2.0 * c * s * sg) + base


def _arcs(tab: _Tables, fam, x, y, w, knots, KI):
    """Candidates (values, angles) at the knot groups and inside the feasible arcs.

    ``fam = (a, b, base, R2, gam)`` per row (``base``: m0 plus the zero coordinates' h);
    ``x, y`` (N, R) with live mask ``w`` (None: all live); ``knots`` = (t0, rel, angles, knot
    table rows, coordinate of each knot, knot count n, in-range mask, last-knot mask), sorted by
    ``rel`` (angle after t0)."""
    a, b, base0, R2, gam = fam
    t0, rel, tk, kn, ci, n, inpos, last = knots
    N, M = rel.shape
    rows = np.arange(N)
    rc = rows[:, None]
    ar = np.arange(M)
    nn = np.maximum(n, 1)[:, None]

    # ------------------------------------------------------------------ pieces at t0, arc states
    u0 = x * np.cos(t0)[:, None] + y * np.sin(t0)[:, None]
    iv = np.searchsorted(tab.th, u0, side="left")  # number of thresholds < u0
    zeros = np.zeros((N, 1))
    Kc = _arc_state(_wsum(tab.k[iv], w), kn[..., 0]) if tab.track_k else zeros
    Nn = _arc_state(_wsum(tab.inf[iv], w), kn[..., 1]) if tab.track_n else zeros
    if tab.shared:
        al = (a + tab.g[0] * _wsum(x, w))[:, None]
        be = (b + tab.g[0] * _wsum(y, w))[:, None]
    else:
        g0 = tab.g[iv] if w is None else tab.g[iv] * w
        al = _arc_state(a + (g0 * x).sum(1), kn[..., 4] * x[rc, ci])
        be = _arc_state(b + (g0 * y).sum(1), kn[..., 4] * y[rc, ci])
    base = base0[:, None] + Kc

    # ------------------------------------------------------------------ knot (group) candidates
    cg, sg = np.cos(gam)[:, None], np.sin(gam)[:, None]
    R2c = R2[:, None]
    kval = _trig(al, be, R2c, cg, sg, np.cos(tk), np.sin(tk), base)
    if tab.continuous:
        kval = np.where(inpos, kval, math.inf)
    else:
        # knots closer than _TIE form a group; value at a group = left arc + members' corrections
        newg = np.ones((N, M), dtype=bool)
        newg[:, 1:] = (rel[:, 1:] - rel[:, :-1]) > _TIE
        is_end = np.ones((N, M), dtype=bool)
        is_end[:, :-1] = newg[:, 1:]
        is_end |= last
        end = np.minimum.accumulate(np.where(is_end, ar, M - 1)[:, ::-1], 1)[:, ::-1]
        corr = np.where(inpos[..., None], kn[..., 2:4], 0.0)
        Cc = np.cumsum(corr, 1)
        gsum = Cc[rc, end] - Cc + corr  # sum over the group members from knot j on
        ok = newg & inpos & ((Nn + gsum[..., 1]) < 0.5)
        kval = np.where(ok, kval + gsum[..., 0], math.inf)

    # ------------------------------------------------------------------ arcs
    lo = np.empty_like(rel)
    lo[:, 1:] = rel[:, :-1]
    lo[:, 0] = np.where(n > 0, rel[rows, np.maximum(n - 1, 0)] - _TWO_PI, -math.inf)
    length = rel - lo
    arc_ok = (ar < nn) & (Nn < 0.5) & (length > _TIE)

    if tab.shared:
        al0, be0 = al[:, 0], be[:, 0]
        rab, bet = np.hypot(al0, be0), np.arctan2(be0, al0)
        tc = _stationary_angles(rab, bet, R2, gam)  # (N, C)
        relc = _mod2pi(tc - t0[:, None])
        j = (rel[:, None, :] < relc[:, :, None]).sum(-1)  # arc j ends at the first knot >= relc
        j = np.where(j >= n[:, None], 0, j)
        cval = _harmonic(tc, rab[:, None], bet[:, None], R2c, gam[:, None])
        cval = cval + base0[:, None] + Kc[rc, j % Kc.shape[1]]
        cval = np.where(arc_ok[rc, j], cval, math.inf)
        return np.concatenate([kval, cval], 1), np.concatenate([tk, tc], 1)

    # per-arc quadratics (l1, capped l1). Upper bound ub: best knot, arc midpoint or identity.
    # Lower bound on an arc of half-length l around its midpoint m (Taylor; |phi''| is at most
    # |al| + |be| + 4 R2): phi >= phi(m) - |phi'(m)| l - (|al| + |be| + 4 R2) l^2 / 2.
    # Only arcs whose bound does not exceed ub get the eigenvalue call.
    fin = np.isfinite(length)
    half = np.where(fin, 0.5 * length, math.pi)
    mid = np.where(fin, lo + half, 0.0) + t0[:, None]
    cm, sm = np.cos(mid), np.sin(mid)
    mval = _trig(al, be, R2c, cg, sg, cm, sm, base)
    dval = be * cm - al * sm + 2.0 * R2c * ((cm * cm - sm * sm) * sg - 2.0 * cm * sm * cg)
    lb = mval - np.abs(dval) * half - 0.5 * (np.abs(al) + np.abs(be) + 4.0 * R2c) * half * half
    mval = np.where(arc_ok, mval, math.inf)
    ub = np.minimum(np.minimum(kval.min(1), mval.min(1)).reshape(-1, 2).min(1), KI)
    ub = np.repeat(ub + _PRUNE_SLACK * np.maximum(np.abs(ub), 1.0), 2)
    rr, cc = np.nonzero(arc_ok & (lb <= ub[:, None]))
    aval = np.full((N, M), math.inf)
    aang = np.zeros((N, M))
    if rr.size:
        alq, beq = al[rr, cc], be[rr, cc]
        rq, bq, Rq, gq = np.hypot(alq, beq), np.arctan2(beq, alq), R2[rr], gam[rr]
        tc = _stationary_angles(rq, bq, Rq, gq)
        relc = _mod2pi(tc - t0[rr, None])
        loq, hiq = lo[rr, cc, None], rel[rr, cc, None]
        inside = ((relc > loq) & (relc < hiq)) | ((relc - _TWO_PI > loq) & (relc - _TWO_PI < hiq))
        bq0 = base[rr, cc if base.shape[1] > 1 else 0, None]
        cv = _harmonic(tc, rq[:, None], bq[:, None], Rq[:, None], gq[:, None]) + bq0
        cv = np.where(inside, cv, math.inf)
        bi = cv.argmin(1)
        sel = np.arange(rr.size)
        aval[rr, cc] = cv[sel, bi]
        aang[rr, cc] = tc[sel, bi]
    return np.concatenate([kval, aval], 1), np.concatenate([tk, aang], 1)


def _finish(P, Z, h, Qt, s, val, ang, KI, tab):
    """Pick the best candidate per instance, build V, apply the identity / infeasibility rules."""
    K = P.shape[0]
    bi = val.argmin(1)
    rows = np.arange(2 * K)
    best = val[rows, bi].reshape(K, 2)
    tb = ang[rows, bi].reshape(K, 2)
    fam = best.argmin(1)
    t = tb[np.arange(K), fam]
    V = _rotation(1.0 - 2.0 * fam, t)
    found = np.isfinite(best.min(1))
    Kv = _objective_np(V, P, Z, h, Qt, s, 0.0 if tab.continuous else SNAP)
    with np.errstate(invalid="ignore"):
        ref = np.where(np.isfinite(Kv), np.abs(Kv), np.abs(KI))
        use_I = ~found | ((KI <= Kv + _PREFER_I * np.maximum(ref, 1.0)) & np.isfinite(KI))
    V[use_I] = _EYE2
    return V


def solve_o2(P, Z, h, Qt=None, s=None) -> torch.Tensor:
    """Global minimiser over ``O(2)`` of ``K(V) = 1/2 vec(V)^T Qt vec(V) + <V, P> + h(V Z)``.

    Args:
        P: ``(K, 2, 2)`` tensor (or ``(2, 2)`` for a single instance; then Z is ``(2, r)`` and
            Qt ``(4, 4)``).
        Z: ``(K, 2, r)`` tensor.
        h: a :class:`~orthoplug.nonsmooth.SeparableTerm` (Zero, L1, L0, CappedL1, NonNegative,
            ...).
        Qt: ``(K, 4, 4)`` (or ``(4, 4)``, shared), symmetrised, any inertia; or
        s: scalar or ``(K,)``, meaning ``Qt = s I_4`` (then the quadratic term is the constant
            ``s``).

    Returns:
        V, ``(K, 2, 2)`` in ``O(2)`` (rotation or reflection): a global minimiser, in ``P``'s
        dtype and on ``P``'s device. ``V = I`` when it ties with the best value (relative
        ``1e-14``) or when no feasible ``V`` exists (nonnegativity). For ``l0`` / nonnegativity,
        entries of ``V Z`` with modulus ``<= 1e-14 max(1, max_j ||Z_:j||)`` are counted as 0: the
        caller should set such entries of the updated rows to exactly 0.

    Cost: ``O(r log r)`` per instance (sorting the knots) plus one batched 4 x 4 eigenvalue call;
    all K instances and both families are processed together (no Python loop over instances).
    """
    P, Z, Qt, s, _, squeeze, out_dtype, dev = _prepare(P, Z, Qt, s, h=h)
    if P.shape[0] == 0:
        V = np.zeros((0, 2, 2))
    else:
        V = _solve_np(P, Z, h, Qt, s)
    V = torch.from_numpy(V).to(device=dev, dtype=out_dtype)
    return V[0] if squeeze else V


def solve_o2_single(P: np.ndarray, Z: np.ndarray, h: SeparableTerm, Qt: np.ndarray | None = None,
                    s: float | None = None) -> np.ndarray:
    """:func:`solve_o2` for ONE instance on float64 NumPy arrays, without tensor conversions.

    ``P`` (2, 2), ``Z`` (2, r), ``Qt`` (4, 4) or the scalar ``s``; returns ``V`` (2, 2) (a new
    array). Same answer as :func:`solve_o2` (the same one-instance search); this entry point
    only skips the torch round trip and the shape checks, for the OBCD hot loop.

    Raises:
        ValueError: if an input contains NaN or inf, or not exactly one of ``Qt`` and ``s``.
    """
    if (Qt is None) == (s is None):
        raise ValueError("give exactly one of Qt (4, 4) and s (a scalar); Qt = s I_4")
    Q1, s1 = (None, np.full(1, float(s))) if Qt is None else (Qt[None], None)
    if not math.isfinite(float(P.sum()) + float(Z.sum()) + float((s1 if Qt is None else Q1).sum())):
        raise ValueError("P, Z or Qt / s contains NaN or inf")
    return _solve_np(P[None], Z[None], h, Q1, s1, single=True)[0]


def solve_polar(P) -> torch.Tensor:
    """``argmin_{V in O(k)} <V, P> = -polar(P) = -U W^T`` for ``P = U S W^T``; value ``-||P||_*``.

    Solves the ``h = 0``, ``Qt = sigma I`` subproblem for any block size ``k`` (``P = G - (sigma +
    alpha) I``). ``P`` has shape (..., k, k); batched over the leading dimensions; torch in, torch
    out (any device). The minimiser is unique iff ``P`` is nonsingular.
    """
    P = _as_tensor("P", P)
    if P.dim() < 2 or P.shape[-1] != P.shape[-2] or P.shape[-1] < 1:
        raise ValueError(f"P must have shape (..., k, k) with k >= 1, got {tuple(P.shape)}")
    if not P.is_floating_point():
        P = P.to(torch.get_default_dtype())
    if not bool(torch.isfinite(P).all()):
        raise ValueError("P contains NaN or inf")
    U, _, Wh = torch.linalg.svd(P)
    return -(U @ Wh)
