"""Small batched linear-algebra helpers shared by the geometry modules."""

from __future__ import annotations

import torch

from orthoplug._random import randn

__all__ = ["skew", "sym", "haar_orthogonal", "eye_like", "fro_inner"]


def skew(a: torch.Tensor) -> torch.Tensor:
    """``(A - Aᵀ) / 2`` over the last two dimensions."""
    return 0.5 * (a - a.mT)


def sym(a: torch.Tensor) -> torch.Tensor:
    """``(A + Aᵀ) / 2`` over the last two dimensions."""
    return 0.5 * (a + a.mT)


def eye_like(a: torch.Tensor, n: int | None = None) -> torch.Tensor:
    n = a.shape[-1] if n is None else n
    return torch.eye(n, dtype=a.dtype, device=a.device)


def fro_inner(a: torch.Tensor, b: torch.Tensor, keepdim: bool = False) -> torch.Tensor:
    """Frobenius inner product over the last two dimensions."""
    return (a * b).sum(dim=(-2, -1), keepdim=keepdim)


def haar_orthogonal(
    batch: tuple[int, ...],
    n: int,
    *,
    dtype: torch.dtype,
    device: torch.device | str | None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Haar-distributed orthogonal matrices, QR of a Gaussian with the sign of ``diag(R)`` fixed."""
    g = randn(*batch, n, n, dtype=dtype, device=device, generator=generator)
    q, r = torch.linalg.qr(g)
    d = torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))
    d = torch.where(d == 0, torch.ones_like(d), d)
    return q * d[..., None, :]
