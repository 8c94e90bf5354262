r"""Column-block pass of the DPCP objectives (RSSM's partial subgradients).

DPCP on data ``Y = [y_1 … y_m]`` (n × m) over St(n, p) caches ``Z = YᵀX`` (m × p), stored as
its transpose ``Zᵀ`` (p × m, C order: a column of Z is a contiguous row). An RSSM step writes new
columns ``X_A`` (the previous block) and then needs the partial subgradient of the next block B
at the new point. :func:`dpcp_block_pass` does both:

1. ``Zᵀ[A] ← X_Aᵀ Y`` (the cache update; one BLAS product, ``n m |A|`` multiply-adds);
2. the row norms ``‖z_j‖₂``, the value and the weights ``W_B`` (``m × |B|``) at the new point,
   in one compiled sweep over ``Zᵀ`` (:func:`dpcp_weights`, ``O(m p)``):
   ``w_{j,B} = z_{j,B}/‖z_j‖₂`` for ``f = (1/m) Σ_j ‖z_j‖₂`` (zero rows give 0),
   ``sign(z_{j,B})`` for ``f = (1/m) ‖Z‖₁``;
3. ``G_Bᵀ = (1/m) W_Bᵀ Yᵀ`` (one BLAS product, ``n m |B|`` multiply-adds).

The products take the data in the layouts that make them plain row-major GEMMs: ``Y`` (n × m)
for the refresh and a copy ``Yᵀ`` (m × n) for the subgradient (at n = 1000, m = 8000, one
thread, 10–25 % less time than the transposed layouts), and the weights are written as
``W_Bᵀ`` (contiguous rows). They run on the BLAS torch uses (``torch.set_num_threads``
applies), as RSubGrad's full products do. The weight sweep is a plain function over NumPy
arrays compiled with numba (``cache=True``, ``fastmath``: its sums are reassociated, so results
agree with the torch path to rounding); with ``NUMBA_DISABLE_JIT=1`` the same source runs as
Python.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit

__all__ = ["dpcp_block_pass", "dpcp_weights"]


@njit(cache=True, fastmath=True)
def dpcp_weights(zt: np.ndarray, cols: np.ndarray, wt: np.ndarray, row_norms: bool) -> float:
    """The value and the weights ``W[:, cols]ᵀ / m`` of the DPCP subgradient from ``Zᵀ``.

    Args:
        zt: (p, m) float64 ``Zᵀ = XᵀY`` (C order).
        cols: int64 indices of the weight columns wanted (may be empty).
        wt: (``len(cols)``, m) float64 output (C order), overwritten with ``W[:, cols]ᵀ / m``.
        row_norms: True for ``f = (1/m) Σ_j ‖z_j‖₂`` (``W = z_j/‖z_j‖``, 0 for a zero row),
            False for ``f = (1/m) ‖Z‖₁`` (``W = sign(Z)``).

    Returns:
        ``f(X)`` at ``Z``.
    """
    p, m = zt.shape
    scale = 1.0 / m
    if row_norms:
        sq = np.zeros(m)
        for c in range(p):  # row-wise over Zᵀ: contiguous, vectorised over the points
            zc = zt[c]
            for j in range(m):
                sq[j] += zc[j] * zc[j]
        total = 0.0
        for j in range(m):
            norm = math.sqrt(sq[j])
            total += norm
            sq[j] = scale / norm if norm > 0 else 0.0  # now the weight factor of point j
        for b in range(cols.shape[0]):
            zc, wb = zt[cols[b]], wt[b]
            for j in range(m):
                wb[j] = zc[j] * sq[j]
        return total * scale
    total = 0.0
    for c in range(p):
        zc = zt[c]
        for j in range(m):
            total += abs(zc[j])
    for b in range(cols.shape[0]):
        zc, wb = zt[cols[b]], wt[b]
        for j in range(m):
            wb[j] = scale * np.sign(zc[j])
    return total * scale


def dpcp_block_pass(y: torch.Tensor, yt: torch.Tensor, zt: torch.Tensor, x_old: torch.Tensor,
                    cols_old: torch.Tensor, cols_new: torch.Tensor,
                    row_norms: bool) -> tuple[float, torch.Tensor]:
    """Refresh ``Zᵀ[cols_old]``, then the value and the columns ``cols_new`` of the subgradient.

    Args:
        y: (n, m) float64 CPU data ``Y`` (points as columns; C order is the fast layout).
        yt: ``Yᵀ`` (m, n), C order for speed.
        zt: (p, m) float64 CPU ``Zᵀ = XᵀY`` (C order), rows ``cols_old`` stale; updated in place.
        x_old: (n, ``len(cols_old)``) the new columns ``X[:, cols_old]``.
        cols_old: int64 indices of the columns to refresh (may be empty).
        cols_new: int64 indices of the subgradient columns wanted (may be empty).
        row_norms: True for ``f = (1/m) Σ_j ‖z_j‖₂``, False for ``f = (1/m) ‖Z‖₁``.

    Returns:
        ``(f(X), G)`` with ``G = ∂f(X)[:, cols_new]`` (n × ``len(cols_new)``, column-major).

    Raises:
        ValueError: if ``zt`` is not a C-order (p, m) float64 CPU tensor matching ``y``.
    """
    m = y.shape[-1]
    if (zt.ndim != 2 or zt.shape[-1] != m or not zt.is_contiguous()
            or zt.dtype != torch.float64 or zt.device.type != "cpu"):
        raise ValueError(f"zt must be a C-order float64 CPU tensor of shape (p, {m}), got "
                         f"{zt.dtype} {tuple(zt.shape)} on {zt.device}, strides {zt.stride()}")
    if cols_old.numel():
        zt.index_copy_(0, cols_old, x_old.mT @ y)
    wt = np.empty((cols_new.numel(), m))
    value = dpcp_weights(zt.numpy(), cols_new.numpy().astype(np.int64), wt, row_norms)
    return value, (torch.from_numpy(wt) @ yt).mT
