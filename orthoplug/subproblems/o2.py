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
vanishes, ``kappa = rho / (2 R2)``. For ``kappa >= 8`` the two stationary points are Newton's
from ``beta`` and ``beta + pi``; otherwise the quartic's roots are found by Durand-Kerner
iteration, and every angle is polished by Newton steps (the kernel's module docstring gives the
rules). ``beta, beta + pi`` are always candidates (the exact answer when ``R2 = 0``, e.g.
``Qt = sigma I``). Spurious candidates are harmless: every candidate value is a true objective
value (an upper bound at knots' limits).
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

**Implementation: one algorithm.** The search is the compiled kernel
:func:`orthoplug.kernels.o2.o2_search` (numba, one instance on scalars, the term passed as its
piecewise tables); it also drives the OBCD pair loop (:mod:`orthoplug.kernels.obcd`). A batch
of K instances is one compiled loop over it (:func:`~orthoplug.kernels.o2.o2_search_batch`), so
one instance gives the same V alone or in a batch. The search is sequential per instance
(sorting the knots, scanning the arcs); it has no torch path, and tensors on devices other
than the CPU are refused rather than copied to the host (the dispatch rule
:func:`orthoplug.kernels.runs_compiled`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch

from orthoplug.kernels.o2 import SNAP, o2_search, o2_search_batch
from orthoplug.nonsmooth import PiecewiseAffine, SeparableTerm, Zero

__all__ = ["SNAP", "solve_o2", "solve_o2_single", "search_o2_single", "o2_objective", "solve_polar"]

_EYE4 = np.eye(4)


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
    th: np.ndarray  # (T,) thresholds
    g: np.ndarray  # (T+1,) slopes
    k: np.ndarray  # (T+1,) intercepts
    inf: np.ndarray  # (T+1,) 1.0 where the piece is infeasible
    h0: float  # phi(0)
    shared: bool  # all slopes equal: one set of stationary points per family
    continuous: bool
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
    return _Tables(th, g, k, inf, h0, pw.constant_slope, pw.continuous,
                   np.where(pinf > 0.0, math.inf, pv), knot.reshape(2 * T, 5))


# ----------------------------------------------------------------------------------------------
# objective
# ----------------------------------------------------------------------------------------------
def _objective_np(V, P, Z, h, Qt, s, snap: float) -> np.ndarray:
    """K(V), float64 NumPy; entries of VZ with |.| <= snap*max(1, max_j ||Z_:j||) count as 0."""
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
    return out + np.asarray(h.value(torch.from_numpy(U)), dtype=np.float64)


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
    out = _objective_np(V, P, Z, h, Qt, s, snap)
    out = torch.from_numpy(out).to(device=dev, dtype=out_dtype)
    return out[0] if squeeze else out


def _search(P, Z, h: SeparableTerm, Q) -> np.ndarray:
    """The compiled search over K instances, float64 NumPy: P (K, 2, 2), Z (K, 2, r),
    Q (K, 4, 4)."""
    tab = breakpoint_tables(h)
    V = np.empty(P.shape)
    o2_search_batch(np.ascontiguousarray(P), np.ascontiguousarray(Z), np.ascontiguousarray(Q),
                    tab.th, tab.g, tab.k, tab.inf, tab.pval, tab.knot, tab.h0, tab.shared,
                    tab.continuous, V)
    return V


def solve_o2(P, Z, h, Qt=None, s=None) -> torch.Tensor:
    """Global minimiser over ``O(2)`` of ``K(V) = 1/2 vec(V)^T Qt vec(V) + <V, P> + h(V Z)``.

    Args:
        P: ``(K, 2, 2)`` tensor or array on the CPU (or ``(2, 2)`` for a single instance; then Z
            is ``(2, r)`` and Qt ``(4, 4)``).
        Z: ``(K, 2, r)`` tensor.
        h: a :class:`~orthoplug.nonsmooth.SeparableTerm` (Zero, L1, L0, CappedL1, NonNegative,
            ...).
        Qt: ``(K, 4, 4)`` (or ``(4, 4)``, shared), symmetrised, any inertia; or
        s: scalar or ``(K,)``, meaning ``Qt = s I_4`` (then the quadratic term is the constant
            ``s``).

    Returns:
        V, ``(K, 2, 2)`` in ``O(2)`` (rotation or reflection): a global minimiser, in ``P``'s
        dtype. ``V = I`` when it ties with the best value (relative ``1e-14``) or when no
        feasible ``V`` exists (nonnegativity). For ``l0`` / nonnegativity, entries of ``V Z``
        with modulus ``<= 1e-14 max(1, max_j ||Z_:j||)`` are counted as 0: the caller should set
        such entries of the updated rows to exactly 0.

    Raises:
        ValueError: bad shapes or non-finite entries, or ``P`` on a device other than the CPU
            (the search is compiled; no host round trip is made for another device).

    Cost: ``O(r log r)`` per instance (sorting the knots), one compiled loop over the instances.
    """
    if isinstance(P, torch.Tensor) and P.device.type != "cpu":
        raise ValueError(f"solve_o2 runs the compiled O(2) search on the CPU; got P on "
                         f"{P.device}: move the instances to the CPU")
    P, Z, Qt, s, _, squeeze, out_dtype, _ = _prepare(P, Z, Qt, s, h=h)
    Q = Qt if Qt is not None else s[:, None, None] * _EYE4
    V = torch.from_numpy(_search(P, Z, h, Q)).to(out_dtype)
    return V[0] if squeeze else V


def search_o2_single(P: np.ndarray, Z: np.ndarray, h: SeparableTerm,
                     Qt: np.ndarray | None = None,
                     s: float | None = None) -> tuple[np.ndarray, float]:
    """:func:`solve_o2` for ONE instance on NumPy arrays, with the model decrease.

    ``P`` (2, 2), ``Z`` (2, r), ``Qt`` (4, 4) or the scalar ``s``; returns ``(V, K(I) − K(V))``
    with ``V`` (2, 2) float64 (a new array) and the decrease of the compiled search
    (:func:`~orthoplug.kernels.o2.o2_search`): ``> 0`` when ``V ≠ I``, ``inf`` when ``K(I)``
    is infinite, 0 when ``V = I``. Same answer as :func:`solve_o2` (the same search); this entry
    point only skips the tensor conversions and the shape checks, for OBCD's pair steps outside
    the compiled loop (the greedy order ranks candidates by the decrease).

    Raises:
        ValueError: if an input contains NaN or inf, or not exactly one of ``Qt`` and ``s``.
    """
    if (Qt is None) == (s is None):
        raise ValueError("give exactly one of Qt (4, 4) and s (a scalar); Qt = s I_4")
    Q = float(s) * _EYE4 if Qt is None else Qt
    if not math.isfinite(float(P.sum()) + float(Z.sum()) + float(Q.sum())):
        raise ValueError("P, Z or Qt / s contains NaN or inf")
    tab = breakpoint_tables(h)
    V = np.empty((2, 2))
    dec = o2_search(np.ascontiguousarray(P), np.ascontiguousarray(Z), np.ascontiguousarray(Q),
                    tab.th, tab.g, tab.k, tab.inf, tab.pval, tab.knot, tab.h0, tab.shared,
                    tab.continuous, V)
    return V, float(dec)


def solve_o2_single(P: np.ndarray, Z: np.ndarray, h: SeparableTerm, Qt: np.ndarray | None = None,
                    s: float | None = None) -> np.ndarray:
    """:func:`solve_o2` for ONE instance on NumPy arrays: the ``V`` of
    :func:`search_o2_single`.

    Raises:
        ValueError: if an input contains NaN or inf, or not exactly one of ``Qt`` and ``s``.
    """
    return search_o2_single(P, Z, h, Qt, s)[0]


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
