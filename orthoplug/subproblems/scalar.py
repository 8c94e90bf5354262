r"""The scalar majoriser of a row-pair step, shared by JOBCD and OBCD.

For rows ``Z = X[B]`` (2×k) and a step ``X[B] ← V Z``, ``W = V − I``, a σ-smooth f satisfies

    f(X⁺) ≤ f(X) + ⟨W, M⟩ + ς/2 ‖W‖²_F,   M = ∇f(X)[B] Zᵀ,  ς = σ‖Z‖₂²,

since ``‖W Z‖_F ≤ ‖Z‖₂ ‖W‖_F``. :func:`spectral_norm_sq` gives ``‖Z‖₂²`` and
:func:`scalar_model_change` the right-hand side's change for a batch of pairs.
"""

from __future__ import annotations

import torch

__all__ = ["spectral_norm_sq", "scalar_model_change"]


def spectral_norm_sq(z: torch.Tensor) -> torch.Tensor:
    """``‖Z_i‖₂²`` for (..., m, k) row blocks; for m = 2 in closed form from the 2×2 Gram
    ``Z Zᵀ = [[a, b], [b, c]]``: ``(a + c)/2 + √(((a − c)/2)² + b²)``."""
    if z.shape[-2] != 2:
        return torch.linalg.matrix_norm(z, ord=2) ** 2
    g = z @ z.mT
    a, b, c = g[..., 0, 0], g[..., 0, 1], g[..., 1, 1]
    return 0.5 * (a + c) + torch.sqrt((0.5 * (a - c)) ** 2 + b * b)


def scalar_model_change(v: torch.Tensor, m: torch.Tensor, zz: torch.Tensor,
                        sigma: float) -> float:
    """``Σ_i ⟨W_i, M_i⟩ + σ‖Z_i‖₂²/2 ‖W_i‖²_F`` with ``W = V − I``, for steps ``v`` and models
    ``m`` (..., 2, 2) and ``zz = ‖Z_i‖₂²`` (...,) (:func:`spectral_norm_sq`)."""
    w = v - torch.eye(2, dtype=v.dtype, device=v.device)
    return float((w * m).sum() + 0.5 * sigma * (zz * (w * w).sum((-2, -1))).sum())
