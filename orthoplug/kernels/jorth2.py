r"""The exact solver of the 2×2 J-orthogonal subproblem (JOBCD's pair step): the one algorithm.

Minimise ``F(V) = ½ vec(V)ᵀ Qd vec(V) + <V, P>`` over ``Vᵀ J_BB V = J_BB``, ``J_BB = diag(j1, j2)``,
for one instance in float64 scalars: O(2) when ``j1 j2 > 0``, the four components of O(1,1)
otherwise, on the forms ``vec(V) = c·α + s·β`` (:data:`HYP_AB`, :data:`ORTH_AB`; column-major
vec) described in :mod:`orthoplug.subproblems.jorth2`. V = I is returned when
``F(I) ≤ F_best + 1e-14·max(1, |F(I)|)``; μ is clamped to ``±0.3·log(finfo.max)``.

No polynomial roots: F restricted to a pair of forms (ε and −ε of O(1,1), or one whole family of
O(2)) is a quadratic on a conic, which reduces to the one-dimensional problem of
:func:`largest_root` (see :func:`hyperbolic_point` and :func:`orthogonal_point`). Both pairs of
forms are solved and the better one is taken, so the result is the global minimum over the whole
group. Large and small μ are the two tails of one monotone Newton
iteration, both to full relative precision.

One source: the formulas :func:`form_coefficients`, :func:`newton_step`, :func:`form_value` and
:func:`form_point` are plain arithmetic functions; the kernels call their compiled versions
(``*_jit``) and the batched torch path of :mod:`orthoplug.subproblems.jorth2` evaluates them
elementwise on tensors (other devices). Compiled with numba (``cache=True``); with
``NUMBA_DISABLE_JIT=1`` the same source runs as Python.
"""

from __future__ import annotations

import math
import sys

import numpy as np
from numba import njit

__all__ = ["HYP_AB", "ORTH_AB", "MAX_NEWTON", "SOLVED", "NEEDS_BATCHED", "solve_jorth2",
           "solve_jorth2_batch", "largest_root", "newton_step", "hyperbolic_point",
           "orthogonal_point", "form_coefficients", "form_value", "form_point", "form_point_jit",
           "chosen"]

# (alpha, beta) of the one-parameter forms, column-major vecs; shared with the torch path.
# Hyperbolic: eps = (1, 1) and eps = (1, -1); the forms -eps are the negated bases.
HYP_AB = (((1, 0, 0, 1), (0, 1, 1, 0)), ((1, 0, 0, -1), (0, -1, 1, 0)))
# Orthogonal: rotation [[c, -s], [s, c]] and reflection [[c, s], [s, -c]].
ORTH_AB = (((1, 0, 0, 1), (0, 1, -1, 0)), ((1, 0, 0, -1), (0, 1, 1, 0)))
_HYP = np.array(HYP_AB, dtype=np.float64)
_ORTH = np.array(ORTH_AB, dtype=np.float64)

#: status of :func:`solve_jorth2`: V is the global minimiser
SOLVED = 0
#: status of :func:`solve_jorth2`: ``Qd`` so badly rounded that ``w± ≤ 0`` on a hyperbolic form;
#: F is unbounded below on that form; the caller takes the torch steps of
#: :mod:`orthoplug.subproblems.jorth2`, where that form contributes its μ = 0 point
NEEDS_BATCHED = 1

# float64 constants (the torch path uses its dtype's)
_EPS = sys.float_info.epsilon
_MU_MAX = 0.3 * math.log(sys.float_info.max)
_TOL = 1e-14
MAX_NEWTON = 200  # Newton steps at most in largest_root (both paths)


def newton_step(A, B, G, tau, t, r):
    """``(φ'(t), φ'(t)/φ''(t))`` of :func:`largest_root`'s φ, with ``r = √(1 + τt²)``.

    Plain arithmetic: compiled for the kernels, evaluated elementwise on tensors by the batched
    torch path.
    """
    g = 2.0 * A * t - tau * B * t / r - G
    return g, g / (2.0 * A - tau * B / (r * r * r))


# the formulas above are plain functions (the torch path evaluates them on tensors); the
# kernels call their compiled versions
newton_step_jit = njit(cache=True)(newton_step)


@njit(cache=True)
def largest_root(A: float, B: float, G: float, tau: float) -> float:
    r"""Global minimiser ``t ≥ 0`` of ``φ(t) = A t² − B √(1 + τ t²) − G t`` (A, B, G ≥ 0).

    τ = +1 (hyperbola, A > 0): t ∈ [0, ∞); τ = −1 (circle): t ∈ [0, 1]. In both cases
    ``φ'(t) = 2At − τBt/√(1+τt²) − G`` is convex on the domain (its last term's second derivative
    is ``3Bt(1+τt²)^{−5/2} ≥ 0``) and ``φ'(0) = −G ≤ 0``, so ``{φ' ≤ 0}`` is an interval
    ``[0, t*]``: φ decreases up to its largest stationary point t* and increases after it, which
    makes t* the global minimiser. Newton's method from any ``t₀ ≥ t*`` then decreases
    monotonically to t* (convex, increasing beyond t*). Starts: ``(G + B)/(2A)`` for τ = +1 (there
    ``φ' ≥ 2At − B − G``), ``min(G/√(B²+G²), G/(2A))`` for τ = −1 (at either bound one positive
    term of φ' alone reaches G). Iteration stops when the Newton decrement or the step reaches
    rounding level.
    """
    if tau > 0:
        t = (G + B) / (2.0 * A)
    elif B == 0.0:  # φ = A t² − G t on [0, 1]
        if A > 0.0:
            return min(1.0, G / (2.0 * A))
        return 1.0 if G > 0.0 else 0.0
    else:
        t = G / math.hypot(B, G)
        if A > 0.0:
            t = min(t, G / (2.0 * A))
    scale = B + G * t + A * t * t
    for _ in range(MAX_NEWTON):
        r = math.hypot(1.0, t) if tau > 0 else math.sqrt((1.0 - t) * (1.0 + t))
        if r == 0.0:  # t = 1 on the circle: B ≪ G, the minimiser is the end point itself
            break
        g, step = newton_step_jit(A, B, G, tau, t, r)
        if not g > 0.0:  # at the root (up to rounding)
            break
        if not step > 0.0:
            break
        t -= step
        if step <= 2.0 * _EPS * t or step * g <= _EPS * _EPS * scale:
            break
    return t


@njit(cache=True)
def hyperbolic_point(a: float, b: float, cq: float, d: float,
                     e: float) -> tuple[bool, float, float]:
    r"""``(ok, C, S)``, ``(C, S) = ±(cosh μ, sinh μ)`` minimising ``F = aC + bS + cq C² + d CS +
    e S²`` over the forms ε and −ε; ``ok`` is False if ``w± = cq ± d + e ≤ 0``.

    With ``u = e^μ = ρ e^ν``, ``ρ = (w−/w+)^{1/4}``, ``k = √(w+ w−)`` the form's value is
    ``F = k/2 (c² + y²) + Pc c + Ps y + (cq − e)/2`` on the hyperbola ``c² − y² = 1``
    (``c = cosh ν``, ``y = sinh ν``; the branch ``c < 0`` is the form −ε), with
    ``Pc, Ps = (m+ ρ ± m−/ρ)/2``, ``m± = a ± b``. The minimum takes the branch with ``Pc c ≤ 0``
    and ``Ps y ≤ 0``; then ``t = |y|`` minimises ``k t² − |Pc| √(1 + t²) − |Ps| t``
    (:func:`largest_root`). Large and small u are the two tails of t, both computed to full
    relative precision.
    """
    wp, wm = cq + d + e, cq - d + e
    if not (wp > 0.0 and wm > 0.0):
        return False, 1.0, 0.0
    mu0 = 0.25 * math.log(wm / wp)
    rho = math.exp(mu0)
    mp, mm = (a + b) * rho, (a - b) / rho
    pc, ps = 0.5 * (mp + mm), 0.5 * (mp - mm)
    t = largest_root(math.sqrt(wp) * math.sqrt(wm), abs(pc), abs(ps), 1.0)
    sgn = -1.0 if pc > 0.0 else 1.0  # branch: c = sgn·cosh ν'
    y = -t if ps > 0.0 else t
    mu = min(max(math.asinh(sgn * y) + mu0, -_MU_MAX), _MU_MAX)
    return True, sgn * math.cosh(mu), sgn * math.sinh(mu)


@njit(cache=True)
def orthogonal_point(a: float, b: float, cq: float, d: float, e: float) -> tuple[float, float]:
    r"""``(C, S) = (cos φ, sin φ)`` minimising ``F = aC + bS + cq C² + d CS + e S²``.

    A trust-region problem on the circle: in the eigenbasis ``e± = ±(cos γ, sin γ)``-rotated
    (``2γ = atan2(d, cq − e)``) of the quadratic part, ``F = R y² + g₋ c + g₊ y + const`` with
    ``R = √((cq−e)² + d²)``, ``c² + y² = 1``; the minimum has ``g₋ c ≤ 0``, ``g₊ y ≤ 0`` and
    ``t = |y|`` minimises ``R t² − |g₋| √(1 − t²) − |g₊| t`` (:func:`largest_root`). For scalar Q
    (R = 0) the start is already the root, ``φ = atan2(−b, −a)``.
    """
    gam = 0.5 * math.atan2(d, cq - e)
    ch, sh = math.cos(gam), math.sin(gam)
    gm, gp = b * ch - a * sh, a * ch + b * sh
    t = largest_root(math.hypot(cq - e, d), abs(gm), abs(gp), -1.0)
    c = math.sqrt((1.0 - t) * (1.0 + t))
    if gm > 0.0:
        c = -c
    y = -t if gp > 0.0 else t
    C, S = y * ch - c * sh, c * ch + y * sh
    nrm = math.hypot(C, S)
    return C / nrm, S / nrm


@njit(cache=True)
def solve_jorth2(j1: float, j2: float, p11: float, p12: float, p21: float, p22: float,
                 q: np.ndarray) -> tuple[int, float, float, float, float]:
    """Global minimiser of ``F(V) = ½ vec(V)ᵀ q vec(V) + <V, P>`` over ``Vᵀ J_BB V = J_BB``.

    Args:
        j1, j2: ``J_BB = diag(j1, j2)``, entries ±1.
        p11, p12, p21, p22: the entries of P.
        q: (4, 4) float64, symmetric positive definite, column-major vec convention
            (``s·I4`` for a scalar curvature gives exactly the scalar formulas).

    Returns:
        ``(status, V11, V12, V21, V22)``; status :data:`SOLVED`, or :data:`NEEDS_BATCHED` (then V
        is I and the caller solves the instance as :data:`NEEDS_BATCHED` says).
    """
    pv = (p11, p21, p12, p22)
    hyp = j1 != j2
    forms = _HYP if hyp else _ORTH
    b11, b12, b21, b22 = 1.0, 0.0, 0.0, 1.0
    f_best, f_eye = math.inf, 0.0
    for f in range(2):
        a, b, cq, d, e = form_coefficients_jit(forms, f, pv, q)
        if f == 0:  # V = I is c = 1, s = 0 of the first form
            f_eye = a + cq
        if hyp:
            ok, C, S = hyperbolic_point(a, b, cq, d, e)
            if not ok:
                return NEEDS_BATCHED, 1.0, 0.0, 0.0, 1.0
        else:
            C, S = orthogonal_point(a, b, cq, d, e)
        val = form_value_jit(a, b, cq, d, e, C, S)
        if val < f_best:
            f_best = val
            b11, b12, b21, b22 = form_point_jit(forms, f, C, S)
    return chosen(f_eye, f_best, b11, b12, b21, b22)


def form_coefficients(forms, f, pv, q):
    """``(a, b, cq, d, e)`` of form ``f``: ``a = α·vec P``, ``b = β·vec P``, ``cq = ½αᵀQα``,
    ``d = αᵀQβ``, ``e = ½βᵀQβ``.

    Plain arithmetic over ``pv[r]`` (vec P) and ``q[r, c]``: floats here, and tensors of a
    batch in the torch path (``pv`` (4, K), ``q`` (4, 4, K)), summed in the same order.
    """
    a = b = cq = d = e = 0.0
    for r in range(4):
        al, be = forms[f, 0, r], forms[f, 1, r]
        a += al * pv[r]
        b += be * pv[r]
        qa = qb = 0.0
        for c in range(4):
            qa += q[r, c] * forms[f, 0, c]
            qb += q[r, c] * forms[f, 1, c]
        cq += al * qa
        d += al * qb
        e += be * qb
    return a, b, 0.5 * cq, d, 0.5 * e


def form_value(a, b, cq, d, e, C, S):
    """``F = aC + bS + cq C² + d CS + e S²`` on a form (plain arithmetic, as above)."""
    return C * (a + cq * C + d * S) + S * (b + e * S)


def form_point(forms: np.ndarray, f: int, C: float, S: float
               ) -> tuple[float, float, float, float]:
    """``(V11, V12, V21, V22)`` of the point ``C·α + S·β`` of form ``f`` (column-major vecs)."""
    return (C * forms[f, 0, 0] + S * forms[f, 1, 0], C * forms[f, 0, 2] + S * forms[f, 1, 2],
            C * forms[f, 0, 1] + S * forms[f, 1, 1], C * forms[f, 0, 3] + S * forms[f, 1, 3])


form_coefficients_jit = njit(cache=True)(form_coefficients)
form_value_jit = njit(cache=True)(form_value)
form_point_jit = njit(cache=True)(form_point)


@njit(cache=True)
def chosen(f_eye: float, f_best: float, b11: float, b12: float, b21: float, b22: float):
    """The tie rule of the 2×2 solvers: ``(SOLVED, V)`` with the best form's V, or V = I when
    no form beats the identity's model value ``f_eye`` by more than the tolerance."""
    if f_eye - _TOL * max(1.0, abs(f_eye)) <= f_best or f_best == math.inf:
        return SOLVED, 1.0, 0.0, 0.0, 1.0
    return SOLVED, b11, b12, b21, b22


@njit(cache=True)
def solve_jorth2_batch(jb: np.ndarray, p: np.ndarray, q: np.ndarray, v: np.ndarray,
                       status: np.ndarray) -> None:
    """:func:`solve_jorth2` for K instances: ``jb`` (K, 2), ``p`` (K, 2, 2), ``q`` (K, 4, 4),
    float64; writes ``v`` (K, 2, 2) and ``status`` (K,)."""
    for k in range(p.shape[0]):
        status[k], v[k, 0, 0], v[k, 0, 1], v[k, 1, 0], v[k, 1, 1] = solve_jorth2(
            jb[k, 0], jb[k, 1], p[k, 0, 0], p[k, 0, 1], p[k, 1, 0], p[k, 1, 1], q[k])
