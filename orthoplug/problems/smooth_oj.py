r"""Smooth non-quadratic costs on the J-orthogonal group O(J), as pymanopt autodiff problems.

Three families, each bounded below on O(J) with a minimiser (the cost grows with ‖X‖):

* ``"quartic"``: ``f(X) = ‖XᵀAX − B‖_F² + tr(XᵀCX)``, A, B symmetric Gaussian scaled by
  ``1/√n``, ``C = MMᵀ/n + 0.1 I`` (M Gaussian);
* ``"logcosh"``: ``f(X) = tr(XᵀCX) + Σ_ij log cosh X_ij`` (C as above) — a Hessian that does
  not act from the left, so no block structure is exact;
* ``"lorentz"``: the J-Procrustes (Lorentz-fit) cost ``f(X) = ‖XP − Q‖_F²`` with ``P`` an
  n×N cloud of Gaussian points, ``Q = X★P + noise·G`` for a random ``X★`` ∈ O(J) of condition
  number 10 (G Gaussian); with ``J = diag(1, −1, …, −1)`` it aligns two point clouds by a
  Lorentz transformation.

:func:`smooth_oj_problem` draws an instance, :func:`lorentz_fit_problem` the Lorentz fit of two
clouds on the hyperboloid; :meth:`SmoothOJProblem.pymanopt_problem` builds the
autograd ``pymanopt.Problem`` (cost, gradient and Hessian by autodiff);
:meth:`SmoothOJProblem.torch_cost` is the same cost on torch tensors (for the torch optimizers).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["FAMILIES", "SmoothOJProblem", "smooth_oj_problem", "lorentz_fit_problem"]

FAMILIES = ("quartic", "logcosh", "lorentz")


@dataclass
class SmoothOJProblem:
    """One instance: the family, the signature (±1 vector) and the data arrays."""

    family: str
    signature: np.ndarray
    data: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """The matrix size (the length of the signature)."""
        return int(self.signature.size)

    def _cost(self, x, xp):
        d = self.data
        if self.family == "quartic":
            r = x.T @ d["A"] @ x - d["B"]
            return xp.sum(r * r) + xp.sum(x * (d["C"] @ x))
        if self.family == "logcosh":
            return xp.sum(x * (d["C"] @ x)) + xp.sum(xp.log(xp.cosh(x)))
        r = x @ d["P"] - d["Q"]
        return xp.sum(r * r)

    def pymanopt_problem(self, manifold):
        """The autograd ``pymanopt.Problem`` on ``manifold``, e.g.
        ``orthoplug.adapters.pymanopt.JOrthogonal(n, signature=problem.signature)`` (problems sit
        below the adapters, so the caller builds the manifold)."""
        import autograd.numpy as anp
        import pymanopt

        @pymanopt.function.autograd(manifold)
        def cost(x):
            return self._cost(x, anp)

        return pymanopt.Problem(manifold, cost)

    def torch_cost(self, x: torch.Tensor) -> torch.Tensor:
        """``f(X)`` on a torch tensor (differentiable by autograd)."""
        data = {k: torch.as_tensor(v, dtype=x.dtype, device=x.device)
                for k, v in self.data.items()}
        return SmoothOJProblem(self.family, self.signature, data)._cost(x, torch)


def smooth_oj_problem(family: str, n: int, p: int, seed: int = 0, *, points: int | None = None,
                      noise: float = 0.1) -> SmoothOJProblem:
    """A seeded instance of ``family`` on O(p, n − p) with ``J = diag(I_p, −I_{n−p})``.

    Args:
        family: one of :data:`FAMILIES`.
        n, p: matrix size and number of +1 entries of J (``1 ≤ p ≤ n``).
        seed: seed of the data.
        points: ``N`` of the ``"lorentz"`` family (default ``2n``).
        noise: noise level of the ``"lorentz"`` family.

    Raises:
        ValueError: an unknown family or a bad ``n``, ``p``.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose from {FAMILIES}")
    if not (isinstance(n, int) and n >= 2 and isinstance(p, int) and 0 <= p <= n):
        raise ValueError(f"need integers n >= 2 and 0 <= p <= n, got n={n!r}, p={p!r}")
    rng = np.random.default_rng(seed)
    signature = np.array([1.0] * p + [-1.0] * (n - p))

    def spd():
        m = rng.standard_normal((n, n))
        return m @ m.T / n + 0.1 * np.eye(n)

    def sym():
        m = rng.standard_normal((n, n))
        return (m + m.T) / (2.0 * np.sqrt(n))

    if family == "quartic":
        data = {"A": sym(), "B": sym(), "C": spd()}
    elif family == "logcosh":
        data = {"C": spd()}
    else:
        from orthoplug.geometry.manifolds import JOrthogonalGeometry

        gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
        x_star = JOrthogonalGeometry(n, signature=signature.tolist()).random_point(
            cond=10.0, generator=gen).numpy()
        big_n = 2 * n if points is None else points
        pts = rng.standard_normal((n, big_n))
        data = {"P": pts, "Q": x_star @ pts + noise * rng.standard_normal((n, big_n))}
    return SmoothOJProblem(family, signature, data)


def lorentz_fit_problem(d: int, points: int, noise: float, seed: int = 0) -> SmoothOJProblem:
    """``min ‖XP − Q‖_F²`` over the Lorentz group O(1, d) (``J = diag(1, −1, …, −1)``).

    The columns of ``P`` lie on the hyperboloid ``{x : xᵀJx = 1, x₀ > 0}``:
    ``x = (cosh r, sinh r · u)`` with ``u`` uniform on the sphere and ``r = |N(0, 1)|``;
    ``Q = X★P + noise·G`` with ``X★`` a random element of O(1, d) of condition number 10 and G
    Gaussian (the clouds are aligned up to noise by a Lorentz transformation).

    Raises:
        ValueError: ``d < 1``, ``points < 1`` or ``noise < 0``.
    """
    if not (isinstance(d, int) and d >= 1 and isinstance(points, int) and points >= 1
            and noise >= 0):
        raise ValueError(f"need integers d >= 1, points >= 1 and noise >= 0, got d={d!r}, "
                         f"points={points!r}, noise={noise!r}")
    from orthoplug.geometry.manifolds import JOrthogonalGeometry

    rng = np.random.default_rng(seed)
    signature = np.array([1.0] + [-1.0] * d)
    u = rng.standard_normal((d, points))
    u /= np.linalg.norm(u, axis=0)
    r = np.abs(rng.standard_normal(points))
    pts = np.vstack((np.cosh(r), np.sinh(r) * u))
    gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
    x_star = JOrthogonalGeometry(d + 1, signature=signature.tolist()).random_point(
        cond=10.0, generator=gen).numpy()
    q = x_star @ pts + noise * rng.standard_normal(pts.shape)
    return SmoothOJProblem("lorentz", signature, {"P": pts, "Q": q})
