r"""Sparse and nonnegative PCA on St(n, r), as in the OBCD paper's experiments.

Data ``A`` (m × n, samples in rows) is scaled to ``A/‖A‖_F`` and ``C = AᵀA`` (so ``tr C = 1`` and
``f ∈ [−1, 0]`` on St(n, r)). Problems (``f`` is a :class:`QuadraticOracle`, ``h`` a term of
:mod:`orthoplug.nonsmooth`):

* ℓ1-SPCA ``−tr(XᵀCX) + λ‖X‖₁``;  ℓ0-SPCA ``−tr(XᵀCX) + λ‖X‖₀``;
* NN-PCA ``−½ tr(XᵀCX)`` s.t. ``X ≥ 0`` (the paper's 1/2 scaling for this one).

Because ``tr C = 1``, λ ≥ 1 makes every ℓ0 optimum a signed partial permutation (one nonzero per
column); the interesting λ are of the order of the eigenvalues of C (ℓ1: ~1e-3, ℓ0: ~1e-5 for
n ~ 1000). ``l0`` counts are ``#{|X_ij| > 1e-6}``; the NN-PCA violation is ``‖min(0, X)‖_F``.

Offline data: :func:`digits_data` (scikit-learn's 8×8 digits, n = 64),
:func:`image_patches` (patches of scikit-learn's two bundled sample images, ``size² · 3``
features, e.g. 16×16×3 → n = 768) and :func:`gaussian_data`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from orthoplug.geometry.stiefel import qf
from orthoplug.nonsmooth import L0, L1, NonNegative, SeparableTerm
from orthoplug.oracles import QuadraticOracle

__all__ = ["SPCAProblem", "covariance", "l1_spca", "l0_spca", "nn_pca", "count_l0",
           "nonneg_violation", "digits_data", "image_patches", "gaussian_data"]


def covariance(a, *, center: bool = False) -> torch.Tensor:
    """``C = ÂᵀÂ`` with ``Â = A/‖A‖_F`` (optionally column-centred first); float64 torch."""
    a = torch.as_tensor(np.asarray(a, dtype=np.float64) if not torch.is_tensor(a) else a,
                        dtype=torch.float64)
    if a.ndim != 2:
        raise ValueError(f"data must be a 2-D (samples × features) array, got {tuple(a.shape)}")
    if center:
        a = a - a.mean(0)
    nrm = torch.linalg.norm(a)
    if not nrm > 0:
        raise ValueError("data matrix is zero")
    a = a / nrm
    c = a.T @ a
    return 0.5 * (c + c.T)


def count_l0(x, threshold: float = 1e-6) -> int:
    """``#{|X_ij| > threshold}`` (the paper's ℓ0 count)."""
    return int((torch.as_tensor(x).abs() > threshold).sum())


def nonneg_violation(x) -> float:
    """``‖min(0, X)‖_F``."""
    return float(torch.linalg.norm(torch.as_tensor(x).clamp_max(0.0)))


@dataclass
class SPCAProblem:
    """``min f(X) + h(X)`` on St(n, r) with ``f = scale·tr(XᵀCX)``."""

    c: torch.Tensor
    r: int
    h: SeparableTerm
    scale: float
    kind: str

    @property
    def n(self) -> int:
        """Number n of features."""
        return self.c.shape[0]

    @property
    def oracle(self) -> QuadraticOracle:
        """The quadratic fast-path oracle of ``f = scale·tr(XᵀCX)``."""
        return QuadraticOracle(self.c, scale=self.scale)

    def f(self, x) -> float:
        """The smooth part ``f(X) = scale·tr(XᵀCX)``."""
        x = torch.as_tensor(x, dtype=self.c.dtype)
        return float(self.scale * (x * (self.c @ x)).sum())

    def objective(self, x) -> float:
        """``F = f + h``."""
        return self.f(x) + float(self.h.value(torch.as_tensor(x, dtype=self.c.dtype)))

    def initial_point(self, kind: str = "identity", seed: int = 0) -> torch.Tensor:
        """``I(n, r)`` (the paper's "id") or the Q factor of a Gaussian matrix ("random");
        for NN-PCA "random" returns a random 0/1-column partition (feasible, nonnegative)."""
        n, r = self.n, self.r
        if kind == "identity":
            return torch.eye(n, r, dtype=self.c.dtype)
        if kind != "random":
            raise ValueError(f"initial point kind must be 'identity' or 'random', got {kind!r}")
        gen = torch.Generator().manual_seed(seed)
        if isinstance(self.h, NonNegative):
            labels = torch.cat([torch.arange(r), torch.randint(r, (n - r,), generator=gen)])
            labels = labels[torch.randperm(n, generator=gen)]
            x = torch.nn.functional.one_hot(labels, r).to(self.c.dtype)
            return x / torch.linalg.norm(x, dim=0)
        return qf(torch.randn(n, r, dtype=self.c.dtype, generator=gen))

    def pca_value(self) -> float:
        """``f`` at the PCA solution (h ignored): ``scale · (sum of the r largest eigenvalues)``."""
        return self.scale * float(torch.linalg.eigvalsh(self.c)[-self.r:].sum())


def _check(c, r):
    c = torch.as_tensor(c, dtype=torch.float64)
    if not (1 <= r <= c.shape[0]):
        raise ValueError(f"need 1 <= r <= n = {c.shape[0]}, got r = {r}")
    return c


def l1_spca(c, r: int, lam: float) -> SPCAProblem:
    """ℓ1-SPCA ``−tr(XᵀCX) + λ‖X‖₁`` (C from :func:`covariance`)."""
    return SPCAProblem(_check(c, r), r, L1(lam), -1.0, "l1")


def l0_spca(c, r: int, lam: float) -> SPCAProblem:
    """ℓ0-SPCA ``−tr(XᵀCX) + λ‖X‖₀``."""
    return SPCAProblem(_check(c, r), r, L0(lam), -1.0, "l0")


def nn_pca(c, r: int) -> SPCAProblem:
    """Nonnegative PCA ``−½ tr(XᵀCX)``, ``X ≥ 0``."""
    return SPCAProblem(_check(c, r), r, NonNegative(), -0.5, "nonneg")


def digits_data() -> np.ndarray:
    """scikit-learn's digits: 1797 × 64 (bundled, offline)."""
    from sklearn.datasets import load_digits

    return load_digits().data.astype(np.float64)


def image_patches(size: int = 16, num_patches: int = 3000, seed: int = 0) -> np.ndarray:
    """Random ``size × size × 3`` patches of scikit-learn's bundled sample images (offline):
    ``num_patches × 3 size²`` (16 → n = 768), values in [0, 1]."""
    from sklearn.datasets import load_sample_images

    rng = np.random.default_rng(seed)
    images = load_sample_images().images
    out = np.empty((num_patches, size * size * 3))
    for t in range(num_patches):
        img = images[t % len(images)]
        i = rng.integers(0, img.shape[0] - size + 1)
        j = rng.integers(0, img.shape[1] - size + 1)
        out[t] = img[i:i + size, j:j + size].reshape(-1) / 255.0
    return out


def gaussian_data(m: int, n: int, seed: int = 0) -> np.ndarray:
    """An m × n standard Gaussian matrix (the paper's "randn")."""
    return np.random.default_rng(seed).standard_normal((m, n))
