r"""Hyperbolic structural probe problem (HSPP) as a finite sum, meaningful form ``Q = φ(DX)``.

Given data rows ``D_i ∈ ℝⁿ`` (i < m) with Euclidean distances ``T_ij = ‖D_i − D_j‖₂``, find a
J-orthogonal ``X`` such that the ultrahyperbolic distances of the probed rows ``Q_i`` match them:

    f(X) = (1/m²) Σ_{i≠j} (T_ij − d_α(Q_i, Q_j))²  =  (1/m) Σ_i f_i(X),
    f_i(X) = (1/m) Σ_{j≠i} (T_ij − d_α(Q_i, Q_j))²            (N = m components),

subject to ``XᵀJX = J_k`` (square ``O(J)`` or rectangular indefinite Stiefel ``X ∈ ℝ^{n×k}``).

Geometry (JOBCD papers, App. F.1). Split ``x = (s; t)`` by the signature of ``Q``'s columns
(``s``: the +1 entries, ``t``: the −1 entries, ``t ≠ 0``); ``⟨x, y⟩_q = xᵀ J_k y``.
``φ(x) = (s; √(α² + ‖s‖²) · t/‖t‖)`` maps onto ``U^{p,q}_α = {⟨x, x⟩_q = −α²}``, and with
``u = |⟨x, y⟩_q| / α²``

    d_α(x, y) = α arccosh(u)  if u ≥ 1,     α arccos(u)  otherwise.

Both branches have infinite slope at ``u = 1`` (where ``d = 0``), so ``u`` is clamped to
``[1 + δ, ∞)`` in the first branch and ``[0, 1 − δ]`` in the second (default ``δ = 1e-9``):
the slope is then at most ``α/√(2δ)``; the diagonal ``i = j`` (``u = 1`` exactly) is skipped.

Why ``Q = φ(D X)`` and not the paper's ``Q = φ(D) X``: for square J-orthogonal ``X`` also
``X J Xᵀ = J``, so ``⟨φ(D_i)X, φ(D_j)X⟩_J = φ(D_i) J φ(D_j)ᵀ`` and the paper's objective is
**constant on the feasible set**; only infeasibility or rounding can change it. With the
nonlinear map applied after the linear probe, ``⟨φ(D_iX), φ(D_jX)⟩`` depends on ``X`` through
the norms of the ``s``- and ``t``-parts. ``form="phi(D)X"`` keeps the paper's version for
demonstrating this.

Cost: a minibatch ``idx`` of components needs all ``m`` probed rows (``O(m n k)``) and the
``|idx| × m`` distance block (``O(|idx| m k)``), in row chunks (memory ``O(chunk · m)``). The
gradient in ``Q`` is derived by hand over that block (checked against autograd in
``tests/oracles/test_hspp_gradient.py``), then back-propagated through ``φ`` and ``D X`` by
autograd. If ``X`` requires grad the result comes from autograd and keeps the graph, so double
backward (Hessian-vector products, e.g. for UMCM) works.
"""

from __future__ import annotations

import numpy as np
import torch

from orthoplug.geometry.signature import Signature, make_signature
from orthoplug.oracles import FiniteSumOracle, estimate_lipschitz
from orthoplug.problems.spca import digits_data

__all__ = ["HSPP", "make_hspp_data", "ultrahyperbolic_distance", "phi"]

_FORMS = ("phi(DX)", "phi(D)X")


def make_hspp_data(m: int, n: int, *, source: str = "gaussian", seed: int | None = 0,
                   dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Data rows ``D ∈ ℝ^{m×n}``, scaled so that the mean row norm is 1.

    Args:
        m: number of rows (= components N of the finite sum).
        n: features (the probe's input dimension).
        source: ``"gaussian"`` (i.i.d. standard normal) or ``"digits"`` (scikit-learn's bundled
            8×8 digits, 1797 rows, centred and projected on their top-``n`` principal
            directions, ``n ≤ 64``; rows drawn without replacement).
        seed: random seed (row subset / Gaussian draw).
    """
    if m < 2 or n < 2:
        raise ValueError(f"need m >= 2 rows and n >= 2 features, got m={m}, n={n}")
    rng = np.random.default_rng(seed)
    if source == "gaussian":
        d = rng.standard_normal((m, n))
    elif source == "digits":
        raw = digits_data()
        if m > raw.shape[0] or n > raw.shape[1]:
            raise ValueError(f"digits has {raw.shape[0]} rows and {raw.shape[1]} features; "
                             f"asked for m={m}, n={n}")
        raw = raw - raw.mean(axis=0)
        _, _, vt = np.linalg.svd(raw, full_matrices=False)
        d = raw[rng.choice(raw.shape[0], size=m, replace=False)] @ vt[:n].T
    else:
        raise ValueError(f"source must be 'gaussian' or 'digits', got {source!r}")
    d = d / np.linalg.norm(d, axis=1).mean()
    return torch.as_tensor(d, dtype=dtype)


def phi(x: torch.Tensor, jvec: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """Row-wise ``φ(x) = (s; √(α² + ‖s‖²) t/‖t‖)`` onto ``U^{p,q}_α`` (``jvec``: ±1 per column)."""
    pos, neg = (jvec > 0).to(x.dtype), (jvec < 0).to(x.dtype)
    s2 = (x * x * pos).sum(-1, keepdim=True)
    t_norm = torch.sqrt((x * x * neg).sum(-1, keepdim=True)).clamp_min(1e-300)
    scale = torch.sqrt(alpha * alpha + s2) / t_norm
    return x * (pos + neg * scale)


def ultrahyperbolic_distance(inner: torch.Tensor, alpha: float = 1.0,
                             clamp: float = 1e-9) -> torch.Tensor:
    """``d_α`` from the products ``⟨x, y⟩_q`` of points on ``U^{p,q}_α`` (clamped near u = 1)."""
    u = inner.abs() / (alpha * alpha)
    far = alpha * torch.arccosh(u.clamp_min(1.0 + clamp))
    near = alpha * torch.arccos(u.clamp_max(1.0 - clamp))
    return torch.where(u >= 1.0, far, near)


class HSPP:
    r"""The HSPP objective, its finite-sum oracle, a Lipschitz estimate and a pymanopt problem.

    Args:
        data: ``D`` (m×n tensor; see :func:`make_hspp_data`).
        signature: ``J`` (n entries) — or give ``p`` (J = diag(I_p, −I_{n−p})).
        k_signature: ``J_k`` of ``Q``'s columns for a rectangular probe ``X ∈ ℝ^{n×k}``
            (default: ``J``, square X).
        alpha: curvature radius α > 0 (paper: 1).
        clamp: δ of the clamp of ``u`` near 1.
        form: ``"phi(DX)"`` (default, meaningful) or ``"phi(D)X"`` (the paper's, constant on the
            feasible set for square X).
        targets: ``T`` (m×m); default ``T_ij = ‖D_i − D_j‖₂``.
        chunk: rows of the distance block processed at once (memory ``O(chunk · m)``).
    """

    def __init__(self, data: torch.Tensor, p: int | None = None, *, signature=None,
                 k_signature=None, alpha: float = 1.0, clamp: float = 1e-9,
                 form: str = "phi(DX)", targets: torch.Tensor | None = None, chunk: int = 1024):
        data = torch.as_tensor(data)
        if data.ndim != 2 or data.shape[0] < 2:
            raise ValueError(f"data must be an m×n matrix with m >= 2, got {tuple(data.shape)}")
        m, n = data.shape
        self.j = make_signature(n, p, signature)
        self.jk = self.j if k_signature is None else (
            k_signature if isinstance(k_signature, Signature) else Signature(k_signature))
        if not self.jk.fits_into(self.j):
            raise ValueError(f"J_k = {self.jk} does not fit into J = {self.j}")
        if self.jk.minus == 0:
            raise ValueError("φ needs at least one −1 column in Q (t ∈ ℝ^q with q ≥ 1)")
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0, got {alpha}")
        if not 0 < clamp < 1:
            raise ValueError(f"clamp must be in (0, 1), got {clamp}")
        if form not in _FORMS:
            raise ValueError(f"form must be one of {_FORMS}, got {form!r}")
        if form == "phi(D)X" and self.j.minus == 0:
            raise ValueError("form 'phi(D)X' needs a −1 entry in J")
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        self.data, self.m, self.n = data, m, n
        self.alpha, self.clamp, self.form, self.chunk = float(alpha), float(clamp), form, chunk
        if targets is None:
            targets = torch.cdist(data, data)
        targets = torch.as_tensor(targets, dtype=data.dtype, device=data.device)
        if targets.shape != (m, m):
            raise ValueError(f"targets must be {m}×{m}, got {tuple(targets.shape)}")
        self.targets = targets
        if form == "phi(D)X":
            self._phi_d = phi(data, self.j.like(data), self.alpha)

    @property
    def num_components(self) -> int:
        """Number m of components (data rows) of the finite sum."""
        return self.m

    @property
    def shape(self) -> tuple[int, int]:
        """Shape of X."""
        return (self.n, self.jk.n)

    # ---- objective ---------------------------------------------------------------
    def probe(self, x: torch.Tensor) -> torch.Tensor:
        """``Q`` (m×k): ``φ(D X)`` or, for the paper's form, ``φ(D) X``."""
        if tuple(x.shape) != self.shape:
            raise ValueError(f"X must have shape {self.shape}, got {tuple(x.shape)}")
        d = self.data.to(x)
        if self.form == "phi(D)X":
            return self._phi_d.to(x) @ x
        return phi(d @ x, self.jk.like(x), self.alpha)

    def _rows_residual(self, q: torch.Tensor,
                       rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(Q_rows J, ⟨Q_i, Q_j⟩_q, r)`` of the rows, ``r_ij = T_ij − d_α(Q_i, Q_j)`` and 0 on
        the diagonal ``j = i``."""
        a = q[rows] * self.jk.like(q)
        inner = a @ q.mT
        res = self.targets.to(q)[rows] - ultrahyperbolic_distance(inner, self.alpha, self.clamp)
        diag = (torch.arange(rows.numel(), device=q.device), rows)
        return a, inner, res.index_put(diag, torch.zeros((), dtype=q.dtype, device=q.device))

    def _rows_loss(self, q: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """``Σ_{i∈rows} Σ_{j≠i} (T_ij − d_α(Q_i, Q_j))²`` (unnormalised)."""
        res = self._rows_residual(q, rows)[2]
        return (res * res).sum()

    def _rows_loss_and_grad(self, q: torch.Tensor, rows: torch.Tensor,
                            gq: torch.Tensor) -> torch.Tensor:
        """:meth:`_rows_loss` (the same operations, so the same bits), its gradient in ``Q``
        added to ``gq``: derived by hand, without an autograd graph over the ``|rows| × m``
        block.

        With ``u = |⟨Q_i, Q_j⟩_q| / α²`` and ``u_c`` the clamped ``u``, ``∂d/∂u = α / √(u_c² − 1)``
        (u ≥ 1) or ``−α / √(1 − u_c²)`` (u < 1), and 0 where the clamp is active (as autograd's
        clamp). Then ``G = −2 r ∂d/∂u · sign⟨Q_i, Q_j⟩_q / α²`` (r = 0 on the diagonal) and
        ``∂/∂Q = Gᵀ (Q_rows J)``, plus ``(G Q) J`` on the rows.
        """
        a, inner, res = self._rows_residual(q, rows)
        loss = (res * res).sum()
        u = inner.abs().div_(self.alpha * self.alpha)
        far = u >= 1.0
        active = torch.where(far, u >= 1.0 + self.clamp, u <= 1.0 - self.clamp)
        w = torch.where(far, u.clamp_min(1.0 + self.clamp), u.clamp_max(1.0 - self.clamp))
        w = w.mul_(w).sub_(1.0)  # u_c² − 1: > 0 far, < 0 near
        slope = w.sign().mul_(w.abs_().rsqrt_())  # ∂d/∂u / α
        g = res.mul_(slope.mul_(active).mul_(inner.sign_())).mul_(-2.0 / self.alpha)
        gq.index_add_(0, rows, (g @ q) * self.jk.like(q))
        gq.addmm_(g.mT, a)
        return loss

    def _check_idx(self, idx, device) -> torch.Tensor:
        idx = torch.as_tensor(idx, dtype=torch.long, device=device).reshape(-1)
        if idx.numel() == 0:
            raise ValueError("empty minibatch")
        if int(idx.min()) < 0 or int(idx.max()) >= self.m:
            raise ValueError(f"component indices must lie in [0, {self.m})")
        return idx

    def component_value(self, x: torch.Tensor, idx) -> torch.Tensor:
        """Mean of ``f_i(X)`` over ``idx``."""
        idx = self._check_idx(idx, x.device)
        with torch.set_grad_enabled(x.requires_grad):
            q = self.probe(x)
            total = sum(self._rows_loss(q, c) for c in idx.split(self.chunk))
        return total / (self.m * idx.numel())

    def value(self, x: torch.Tensor) -> torch.Tensor:
        """``f(X)``."""
        return self.component_value(x, torch.arange(self.m, device=x.device))

    def component_value_and_gradient(self, x: torch.Tensor,
                                     idx) -> tuple[torch.Tensor, torch.Tensor]:
        """Means of ``f_i(X)`` and ``∇f_i(X)`` over ``idx`` in one pass: the value is the
        gradient's forward pass (equal to :meth:`component_value` to the last bit). Both keep
        the graph if ``X`` requires grad."""
        idx = self._check_idx(idx, x.device)
        norm = 1.0 / (self.m * idx.numel())
        if x.requires_grad:  # differentiable result (double backward)
            with torch.enable_grad():
                loss = self.component_value(x, idx)
                return loss, torch.autograd.grad(loss, x, create_graph=True)[0]
        with torch.enable_grad():
            xl = x.detach().requires_grad_(True)
            q = self.probe(xl)
            qd = q.detach()
            gq = torch.zeros_like(qd)
            # dL/dQ chunk by chunk by hand, then one backprop through φ
            total = sum(self._rows_loss_and_grad(qd, c, gq) for c in idx.split(self.chunk))
            grad = torch.autograd.grad(q, xl, grad_outputs=gq * norm)[0]
        return total / (self.m * idx.numel()), grad

    def component_gradient(self, x: torch.Tensor, idx) -> torch.Tensor:
        """Mean of ``∇f_i(X)`` over ``idx`` (keeps the graph if ``X`` requires grad)."""
        return self.component_value_and_gradient(x, idx)[1]

    def gradient(self, x: torch.Tensor) -> torch.Tensor:
        """``∇f(X)`` (the mean of all component gradients)."""
        return self.component_gradient(x, torch.arange(self.m, device=x.device))

    def value_and_gradient(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(f(X), ∇f(X))`` in one pass (:meth:`component_value_and_gradient`)."""
        return self.component_value_and_gradient(x, torch.arange(self.m, device=x.device))

    # ---- solver interfaces ---------------------------------------------------------
    def estimate_lipschitz(self, points, *, iterations: int = 15, safety: float = 2.0,
                           generator: torch.Generator | None = None) -> float:
        r"""``safety · max_X ‖∇²f(X)‖₂`` over ``points`` (one X or a list), by power iteration on
        central differences of ``∇f``.

        This is a *local* estimate (σ choice for J-JOBCD / VR-J-JOBCD), not a global Lipschitz
        constant: ``f`` has none (the clamp allows slopes up to ``α/√(2δ)`` in ``d``, and the
        group is unbounded). Use the start point (and, if known, points near the expected
        path); the safety factor covers the growth of the curvature along the path.
        """
        if isinstance(points, torch.Tensor):
            points = [points]
        if not safety >= 1:
            raise ValueError(f"safety must be >= 1, got {safety}")
        oracle = self.oracle()
        best = max(estimate_lipschitz(oracle.gradient, x.detach(), generator, iterations)
                   for x in points)
        return safety * best

    def oracle(self, lipschitz: float | None = None) -> FiniteSumOracle:
        """A :class:`~orthoplug.oracles.core.FiniteSumOracle` with ``N = m`` components
        (``f_i`` as in the module docstring); ``lipschitz`` (e.g. from
        :meth:`estimate_lipschitz`) is what J-JOBCD and VR-J-JOBCD use as σ. Its
        ``value_and_gradient`` is fused (:meth:`component_value_and_gradient`)."""
        return FiniteSumOracle(self.m, self.component_value, self.component_gradient,
                               lipschitz=lipschitz,
                               component_value_and_gradient=self.component_value_and_gradient)

    def pymanopt_problem(self, manifold):
        """A ``pymanopt.Problem`` on ``manifold`` (e.g.
        ``orthoplug.adapters.pymanopt.JOrthogonal``) with this cost and its gradient."""
        import pymanopt

        dtype, device = self.data.dtype, self.data.device

        @pymanopt.function.numpy(manifold)
        def cost(x):
            return float(self.value(torch.as_tensor(x, dtype=dtype, device=device)))

        @pymanopt.function.numpy(manifold)
        def euclidean_gradient(x):
            g = self.gradient(torch.as_tensor(x, dtype=dtype, device=device))
            return g.detach().cpu().numpy()

        return pymanopt.Problem(manifold, cost, euclidean_gradient=euclidean_gradient)
