r"""Hyperbolic eigenvalue problem in its well-posed trace-minimisation form.

``min tr(XᵀCX)`` subject to ``XᵀJX = J`` with ``C ≻ 0`` has the global minimum
``Σ_i |λ_i(JC)|`` (trace minimisation for definite pencils, Kovač-Striko & Veselić 1995).
Over the indefinite Stiefel set ``Xᵀ J_n X = J_k`` (``k₊`` plus and ``k₋`` minus columns) the
minimum is the sum of the ``k₊`` smallest positive eigenvalues of ``J_n C`` plus the ``k₋``
smallest absolute values of its negative eigenvalues.

The papers' literal form ``min −tr(XᵀDᵀDX)`` is unbounded below on the group (``‖X‖_F`` is
unbounded there); :func:`gaussian_data` and :func:`trace_min_certificate` serve the bounded form.
"""

from __future__ import annotations

import numpy as np

from orthoplug.geometry.signature import Signature

__all__ = ["pencil_eigenvalues", "trace_min_certificate", "make_spd"]


def pencil_eigenvalues(c: np.ndarray, signature) -> np.ndarray:
    """Eigenvalues of ``J C`` for ``C ≻ 0`` (real), via ``Lᵀ J L`` with ``C = L Lᵀ``."""
    j = np.asarray(signature.values if isinstance(signature, Signature) else signature, float)
    c = np.asarray(c, dtype=np.float64)
    if c.shape != (j.size, j.size):
        raise ValueError(f"C must be {j.size}×{j.size}, got {c.shape}")
    try:
        low = np.linalg.cholesky(0.5 * (c + c.T))
    except np.linalg.LinAlgError as err:
        raise ValueError("C must be symmetric positive definite") from err
    return np.linalg.eigvalsh(low.T @ (j[:, None] * low))


def trace_min_certificate(c: np.ndarray, signature, k_signature=None) -> float:
    """Global minimum of ``tr(XᵀCX)`` over ``XᵀJX = J`` (or ``Xᵀ J X = J_k``)."""
    lam = pencil_eigenvalues(c, signature)
    pos = np.sort(lam[lam > 0])
    neg = np.sort(-lam[lam < 0])
    if k_signature is None:
        return float(pos.sum() + neg.sum())
    jk = np.asarray(
        k_signature.values if isinstance(k_signature, Signature) else k_signature, float
    )
    kp, km = int((jk > 0).sum()), int((jk < 0).sum())
    if kp > pos.size or km > neg.size:
        raise ValueError("J_k does not fit into J")
    return float(pos[:kp].sum() + neg[:km].sum())


def make_spd(n: int, m: int | None = None, eps: float = 1e-2, seed: int | None = 0) -> np.ndarray:
    """``C = DᵀD/m + εI`` with Gaussian ``D ∈ ℝ^{m×n}`` (default ``m = n``)."""
    rng = np.random.default_rng(seed)
    m = n if m is None else m
    d = rng.standard_normal((m, n))
    return d.T @ d / m + eps * np.eye(n)
