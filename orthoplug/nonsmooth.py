r"""Separable nonsmooth terms ``h(X) = sum_ij phi(X_ij)``.

Each term is a small object with

* ``value(X)``        -- ``h(X)``, summed over the last two dimensions (``+inf`` off the domain);
* ``elementwise(U)``  -- the per-entry penalty ``phi(U_ij)``;
* ``subgradient(X)``  -- one element of the limiting (and Clarke, where finite) subdifferential,
  chosen by a fixed rule that depends only on ``X``;
* ``prox(X, t)``      -- ``argmin_U 1/2 ||U - X||_F^2 + t h(U)`` (entrywise, exact);
* ``piecewise``       -- a :class:`PiecewiseAffine` description of ``phi`` on the real line,
  which is all the breakpoint search of :mod:`orthoplug.subproblems.o2` needs to know.

Implemented: :class:`Zero`, :class:`L1` (``lam |u|``), :class:`L0` (``lam [u != 0]``),
:class:`CappedL1` (``lam min(|u|, tau)``; the OBCD paper prints ``max``, which is not a sparsity
penalty) and :class:`NonNegative` (indicator of ``u >= 0``).

Torch tensors are used throughout; ``value`` also accepts NumPy arrays (and returns a Python float).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

import numpy as np
import torch

__all__ = [
    "PiecewiseAffine",
    "SeparableTerm",
    "Zero",
    "L1",
    "L0",
    "CappedL1",
    "NonNegative",
]


@dataclass(frozen=True)
class PiecewiseAffine:
    r"""A scalar function ``phi: R -> R u {+inf}`` made of finitely many affine pieces.

    The thresholds ``theta_1 < ... < theta_T`` split the line into the open intervals
    ``I_0 = (-inf, theta_1), I_1 = (theta_1, theta_2), ..., I_T = (theta_T, +inf)``.

    * on ``I_j``: ``phi(u) = slopes[j] * u + intercepts[j]`` if ``feasible[j]``, else ``+inf``;
    * at ``theta_j``: ``phi(theta_j) = point_values[j]`` if ``point_feasible[j]``, else ``+inf``.

    The point values may differ from the one-sided limits (``l0``, indicators); for a lower
    semicontinuous ``phi`` they are never above them. With ``T = 0`` ``phi`` is one affine piece.
    """

    thresholds: tuple[float, ...]
    slopes: tuple[float, ...]
    intercepts: tuple[float, ...]
    feasible: tuple[bool, ...]
    point_values: tuple[float, ...]
    point_feasible: tuple[bool, ...]

    def __post_init__(self) -> None:
        T = len(self.thresholds)
        if not (len(self.slopes) == len(self.intercepts) == len(self.feasible) == T + 1):
            raise ValueError("PiecewiseAffine needs T + 1 slopes, intercepts and feasible flags")
        if not (len(self.point_values) == len(self.point_feasible) == T):
            raise ValueError("PiecewiseAffine needs T point values and point_feasible flags")
        if any(b <= a for a, b in zip(self.thresholds[:-1], self.thresholds[1:], strict=True)):
            raise ValueError("PiecewiseAffine thresholds must be strictly increasing")

    @property
    def continuous(self) -> bool:
        """True when ``phi`` is finite and continuous (point values equal both one-sided limits)."""
        if not all(self.feasible) or not all(self.point_feasible):
            return False
        for j, t in enumerate(self.thresholds):
            left = self.slopes[j] * t + self.intercepts[j]
            right = self.slopes[j + 1] * t + self.intercepts[j + 1]
            if not (left == right == self.point_values[j]):
                return False
        return True

    @property
    def constant_slope(self) -> bool:
        """True when every piece has the same slope (then ``sum_i g_i x_i`` never changes)."""
        return all(g == self.slopes[0] for g in self.slopes)

    def evaluate(self, U: torch.Tensor) -> torch.Tensor:
        """``phi`` entrywise from this description (used to cross-check ``elementwise``)."""
        U = torch.as_tensor(U)
        if not U.is_floating_point():
            U = U.to(torch.get_default_dtype())
        th = torch.tensor(self.thresholds, dtype=U.dtype, device=U.device)
        idx = (U.unsqueeze(-1) > th).sum(-1)
        g = torch.tensor(self.slopes, dtype=U.dtype, device=U.device)[idx]
        k = torch.tensor(self.intercepts, dtype=U.dtype, device=U.device)[idx]
        ok = torch.tensor(self.feasible, device=U.device)[idx]
        out = torch.where(ok, g * U + k, torch.full_like(U, math.inf))
        for j, t in enumerate(self.thresholds):
            pv = self.point_values[j] if self.point_feasible[j] else math.inf
            out = torch.where(U == t, torch.full_like(U, pv), out)
        return out


def _check_param(value, name: str, *, positive: bool) -> float:
    """``value`` as a finite float, ``≥ 0`` (or ``> 0`` when ``positive``); errors name ``name``."""
    if isinstance(value, bool) or not isinstance(value, Real | np.floating | np.integer):
        if torch.is_tensor(value) and value.numel() == 1:
            value = value.item()
        else:
            raise ValueError(f"{name} must be a real number, got {value!r}")
    out = float(value)
    if not math.isfinite(out) or out < 0.0 or (positive and out == 0.0):
        raise ValueError(f"{name} must be finite and {'>' if positive else '>='} 0, got {out!r}")
    return out


def _check_lam(lam) -> float:
    return _check_param(lam, "lam", positive=False)


def _check_tau(tau) -> float:
    return _check_param(tau, "tau", positive=True)


def _as_float_tensor(X) -> torch.Tensor:
    if torch.is_tensor(X):
        return X if X.is_floating_point() else X.to(torch.get_default_dtype())
    return torch.as_tensor(np.asarray(X, dtype=np.float64))


def _check_step(t):
    if torch.is_tensor(t):
        if t.is_floating_point() and bool(((t < 0) | ~torch.isfinite(t)).any()):
            raise ValueError("prox step t must be finite and >= 0")
        return t
    if isinstance(t, bool) or not isinstance(t, Real | np.floating | np.integer):
        raise ValueError(f"prox step t must be a real number or a tensor, got {t!r}")
    t = float(t)
    if not math.isfinite(t) or t < 0.0:
        raise ValueError(f"prox step t must be finite and >= 0, got {t!r}")
    return t


class SeparableTerm:
    """Base class: ``h(X) = sum_ij phi(X_ij)`` with ``phi`` described by :attr:`piecewise`."""

    #: True for indicator functions (value 0 or +inf).
    is_indicator: bool = False

    # -- to be provided by subclasses -------------------------------------------------------
    def elementwise(self, U: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        """Per-entry penalty ``phi(U_ij)`` (same shape as ``U``)."""
        raise NotImplementedError

    def subgradient(self, X: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        """One element of the limiting subdifferential of ``h`` at ``X`` (fixed rule)."""
        raise NotImplementedError

    def prox(self, X: torch.Tensor, t) -> torch.Tensor:  # pragma: no cover - abstract
        """``argmin_U 1/2 ||U - X||^2 + t h(U)`` entrywise, ``t >= 0``."""
        raise NotImplementedError

    @property
    def piecewise(self) -> PiecewiseAffine:  # pragma: no cover - abstract
        """Affine pieces of ``phi`` (see :class:`PiecewiseAffine`)."""
        raise NotImplementedError

    def _params(self) -> tuple | None:
        """Parameters defining the term (for ``==``, ``hash`` and ``repr``); ``None``: identity."""
        return None

    # -- shared -------------------------------------------------------------------------------
    def value(self, X):
        """``h(X)``: sum of :meth:`elementwise` over the last two dims (all dims for 1-D input).

        NumPy arrays (and other array-likes) are converted and a Python float is returned; torch
        input with leading batch dimensions gives a tensor of shape ``X.shape[:-2]``.
        """
        if not torch.is_tensor(X):
            return float(self.elementwise(_as_float_tensor(X)).sum())
        E = self.elementwise(_as_float_tensor(X))
        if E.dim() >= 2:
            return E.sum(dim=(-2, -1))
        return E.sum()

    def __call__(self, X):
        return self.value(X)

    def __repr__(self) -> str:
        params = self._params() or ()
        names = self._param_names()
        if len(names) == len(params):
            args = ", ".join(f"{n}={v!r}" for n, v in zip(names, params, strict=True))
        else:
            args = ", ".join(repr(v) for v in params)
        return f"{type(self).__name__}({args})"

    def _param_names(self) -> tuple[str, ...]:
        return ()

    def __eq__(self, other) -> bool:
        if self._params() is None:
            return self is other
        return type(self) is type(other) and self._params() == other._params()

    def __hash__(self) -> int:
        if self._params() is None:
            return id(self)
        return hash((type(self).__name__, self._params()))


class Zero(SeparableTerm):
    """``h = 0``."""

    def _params(self):
        return ()

    def elementwise(self, U):
        return torch.zeros_like(_as_float_tensor(U))

    def subgradient(self, X):
        return torch.zeros_like(_as_float_tensor(X))

    def prox(self, X, t):
        _check_step(t)
        return _as_float_tensor(X).clone()

    @property
    def piecewise(self) -> PiecewiseAffine:
        return PiecewiseAffine((), (0.0,), (0.0,), (True,), (), ())


class L1(SeparableTerm):
    """``h(X) = lam * sum |X_ij|``.

    Subgradient rule: ``lam * sign(X)`` with ``sign(0) = 0``. Prox: soft threshold at ``t lam``.
    """

    def __init__(self, lam: float):
        self.lam = _check_lam(lam)

    def _params(self):
        return (self.lam,)

    def _param_names(self):
        return ("lam",)

    def elementwise(self, U):
        return self.lam * _as_float_tensor(U).abs()

    def subgradient(self, X):
        return self.lam * torch.sign(_as_float_tensor(X))

    def prox(self, X, t):
        t = _check_step(t)
        X = _as_float_tensor(X)
        return torch.sign(X) * torch.clamp(X.abs() - t * self.lam, min=0.0)

    @property
    def piecewise(self) -> PiecewiseAffine:
        lam = self.lam
        return PiecewiseAffine((0.0,), (-lam, lam), (0.0, 0.0), (True, True), (0.0,), (True,))


class L0(SeparableTerm):
    """``h(X) = lam * #{X_ij != 0}`` (lower semicontinuous, not continuous).

    Subgradient rule: 0 (an element of the limiting subdifferential everywhere: it is ``{0}`` on
    the support and ``R`` at zeros). Prox: hard threshold, ``X_ij`` kept iff
    ``|X_ij| > sqrt(2 t lam)`` (at equality both 0 and ``X_ij`` are minimisers; 0 is returned).
    """

    def __init__(self, lam: float):
        self.lam = _check_lam(lam)

    def _params(self):
        return (self.lam,)

    def _param_names(self):
        return ("lam",)

    def elementwise(self, U):
        U = _as_float_tensor(U)
        return self.lam * (U != 0).to(U.dtype)

    def subgradient(self, X):
        return torch.zeros_like(_as_float_tensor(X))

    def prox(self, X, t):
        t = _check_step(t)
        X = _as_float_tensor(X)
        thr = (2.0 * t * self.lam) ** 0.5
        return torch.where(X.abs() > thr, X, torch.zeros_like(X))

    @property
    def piecewise(self) -> PiecewiseAffine:
        lam = self.lam
        return PiecewiseAffine((0.0,), (0.0, 0.0), (lam, lam), (True, True), (0.0,), (True,))


class CappedL1(SeparableTerm):
    """``h(X) = lam * sum min(|X_ij|, tau)``, ``tau > 0`` (continuous; flat for ``|x| >= tau``).

    Subgradient rule: ``lam * sign(x)`` where ``|x| < tau``, 0 where ``|x| >= tau`` (0 belongs to
    the Clarke and the limiting subdifferential at ``|x| = tau``).
    Prox (exact, per entry, ``x >= 0`` by symmetry): the better of
    ``u_A = clip(x - t lam, 0, tau)`` (branch ``|u| <= tau``) and ``u_B = max(x, tau)`` (branch
    ``|u| >= tau``); ties go to ``u_A``.
    """

    def __init__(self, lam: float, tau: float):
        self.lam = _check_lam(lam)
        self.tau = _check_tau(tau)

    def _params(self):
        return (self.lam, self.tau)

    def _param_names(self):
        return ("lam", "tau")

    def elementwise(self, U):
        return self.lam * torch.clamp(_as_float_tensor(U).abs(), max=self.tau)

    def subgradient(self, X):
        X = _as_float_tensor(X)
        return torch.where(X.abs() < self.tau, self.lam * torch.sign(X), torch.zeros_like(X))

    def prox(self, X, t):
        t = _check_step(t)
        X = _as_float_tensor(X)
        ax = X.abs()
        tl = t * self.lam
        ua = torch.clamp(ax - tl, min=0.0).clamp(max=self.tau)
        ub = torch.clamp(ax, min=self.tau)
        fa = 0.5 * (ua - ax) ** 2 + tl * ua
        fb = 0.5 * (ub - ax) ** 2 + tl * self.tau
        return torch.sign(X) * torch.where(fa <= fb, ua, ub)

    @property
    def piecewise(self) -> PiecewiseAffine:
        lam, tau = self.lam, self.tau
        return PiecewiseAffine(
            (-tau, 0.0, tau),
            (0.0, -lam, lam, 0.0),
            (lam * tau, 0.0, 0.0, lam * tau),
            (True, True, True, True),
            (lam * tau, 0.0, lam * tau),
            (True, True, True),
        )


class NonNegative(SeparableTerm):
    """Indicator of ``X >= 0``: value 0 if every entry is ``>= 0``, else ``+inf``.

    Subgradient rule: 0 (valid only on the feasible set, where the normal cone contains 0).
    Prox: projection ``max(X, 0)``.
    """

    is_indicator = True

    def _params(self):
        return ()

    def elementwise(self, U):
        U = _as_float_tensor(U)
        return torch.where(U >= 0, torch.zeros_like(U), torch.full_like(U, math.inf))

    def subgradient(self, X):
        return torch.zeros_like(_as_float_tensor(X))

    def prox(self, X, t):
        _check_step(t)
        return torch.clamp(_as_float_tensor(X), min=0.0)

    @property
    def piecewise(self) -> PiecewiseAffine:
        return PiecewiseAffine((0.0,), (0.0, 0.0), (0.0, 0.0), (False, True), (0.0,), (True,))
