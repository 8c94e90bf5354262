r"""Nonsmooth problems over St(n, p) with column-wise subgradients (for RSSM and RSubGrad).

* **Robust subspace recovery / DPCP** (:class:`DPCP`, :func:`dpcp_instance`): data
  ``Y = [y_1 … y_m] ∈ ℝⁿˣᵐ`` — inliers in a d-dimensional subspace S plus Gaussian outliers, all
  scaled to unit norm. The unknown is ``X ∈ St(n, c)``, ``c = n − d``, spanning ``S^⊥``.
  Two objectives:

  - ``"l12"`` (default): ``f(X) = (1/m) Σ_j ‖Xᵀy_j‖₂`` (row norms of ``Z = YᵀX``). Invariant under
    ``X ↦ XQ`` (a function of ``span X``: the Grassmannian DPCP of Zhu et al. 2018); convex,
    ``L ≤ max_j ‖y_j‖``; sharp at ``S^⊥`` when inliers dominate. Subgradient ``(1/m) Y W``, W the
    rows of Z normalised (zero rows stay 0). The columns C need *all* row norms, so the tracker
    caches ``Z`` and refreshes ``Z[:, C]`` after each block step: ``O(n m |C|)`` per step.
  - ``"l1"``: the entrywise ``f(X) = (1/m) ‖YᵀX‖₁`` of the issue. Its inlier part also vanishes
    exactly on ``span X = S^⊥``, so it recovers ``S^⊥`` as well, but it is not invariant under
    rotations inside ``S^⊥`` (the outliers pick a basis) and its subgradient is
    column-separable: ``(1/m) Y sign(YᵀX_C)``.

  We default to ``"l12"``: it is the objective the DPCP recovery theory (Zhu et al. 2018) is
  stated for, its value depends only on the subspace, and in our runs it reached the ``1e-6``
  angle of the acceptance test where ``"l1"`` did not with the same step rule (n = 60, d = 40,
  300 + 300 points, RSubGrad 600 iterations with γ₀ = 10, β = 0.98: largest angle 1.4e-6 vs
  6.5e-6; RSSM ℓ = 4, 1400 iterations, default geometric rule, seeds 0–2: ≤ 2e-7 on all three
  vs 2.6e-7, 2.7e-7 and a stall at 0.18).
  Metrics: :meth:`DPCP.principal_angle` (largest principal angle to ``S^⊥``, computed from the
  sines, accurate for tiny angles) and :meth:`DPCP.subspace_error` (``‖XXᵀ − P_{S⊥}‖_F/√2``).

* **ℓ1 sparse PCA** (:class:`SparsePCA`): ``F(X) = −tr(XᵀCX) + μ‖X‖₁`` with ``C = BᵀB`` kept
  factored (``B`` m × n, scaled to ``‖B‖_F = 1`` by default, so ``tr C = 1`` as in the OBCD
  experiments). Weakly convex (``τ = 2λ_max(C)``). The smooth part is a
  :class:`FactoredQuadraticOracle` (caches ``W = BX``, column gradient ``2s Bᵀ W[:, C]``), the
  nonsmooth part ``orthoplug.nonsmooth.L1(μ)``, combined by
  :class:`~orthoplug.oracles.columns.CompositeOracle`.

* **Orthogonal dictionary learning** (:class:`DictionaryLearning`): ``Y = D₀ S₀`` with
  ``D₀ ∈ O(n)`` and Bernoulli(θ)–Gaussian ``S₀``; ``f(X) = (1/m)‖YᵀX‖₁`` over St(n, p), recovered
  up to a signed permutation.

No oracle forms an ``n × n`` matrix (``SparsePCA.quadratic_oracle`` does, on request, for
solvers that need ``C``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from orthoplug.geometry.stiefel import qf
from orthoplug.geometry.stiefel_block import put_columns, take_columns
from orthoplug.kernels.dpcp import dpcp_block_pass
from orthoplug.oracles import (
    ColumnTracker,
    CompositeOracle,
    Oracle,
    QuadraticOracle,
    Tracker,
    finite,
)

__all__ = [
    "DPCP",
    "DPCPOracle",
    "dpcp_instance",
    "principal_angle",
    "SparsePCA",
    "FactoredQuadraticOracle",
    "DictionaryLearning",
    "L1ColumnOracle",
]


def _generator(seed):
    return torch.Generator().manual_seed(int(seed)) if seed is not None else None


def _unit_columns(a: torch.Tensor) -> torch.Tensor:
    return a / torch.linalg.vector_norm(a, dim=0, keepdim=True).clamp_min(1e-300)


def principal_angle(x: torch.Tensor, basis: torch.Tensor) -> float:
    r"""Largest principal angle between ``span X`` and ``span basis`` (equal dimensions).

    ``sin θ_max = ‖X − B(BᵀX)‖₂`` for orthonormal ``X, B`` (n × c): accurate down to ~1e-16,
    unlike ``arccos`` of the cosines. ``O(n c²)``.
    """
    b = basis.to(x)
    s = torch.linalg.matrix_norm(x - b @ (b.mT @ x), ord=2)
    return float(torch.arcsin(s.clamp(max=1.0)))


# ---------------------------------------------------------------------------------------------
# DPCP
# ---------------------------------------------------------------------------------------------


class DPCPOracle(Oracle):
    r"""DPCP objective on data ``Y`` (n × m) over St(n, c).

    Args:
        data: ``Y`` with the points as columns.
        objective: ``"l12"`` (``(1/m)Σ_j ‖Xᵀy_j‖₂``, default) or ``"l1"`` (``(1/m)‖YᵀX‖₁``).
        compiled: let the tracker of a float64 CPU point take its column subgradients and cache
            updates from the column pass :func:`~orthoplug.kernels.dpcp.dpcp_block_pass`
            (default True; False: torch products only, e.g. as a reference).

    Subgradient rule (depends only on X): ``(1/m) Y W`` with ``W = rows of YᵀX normalised`` (zero
    rows give 0) for ``"l12"``, ``W = sign(YᵀX)`` (``sign(0) = 0``) for ``"l1"``.
    """

    objectives = ("l12", "l1")
    column_gradients = True

    def __init__(self, data: torch.Tensor, objective: str = "l12", *, compiled: bool = True):
        if objective not in self.objectives:
            raise ValueError(f"objective must be one of {self.objectives}, got {objective!r}")
        data = torch.as_tensor(data)
        if data.ndim != 2:
            raise ValueError(f"data must be an n × m matrix, got shape {tuple(data.shape)}")
        self.data, self.y, self.objective = data, data, objective
        self.m = data.shape[1]
        self.compiled = bool(compiled)
        self._yt = None
        self.lipschitz = None  # nonsmooth: no gradient Lipschitz constant

    def _y(self, x):
        if self.y.dtype != x.dtype or self.y.device != x.device:
            self.y = self.data.to(dtype=x.dtype, device=x.device)  # from the original data
        return self.y

    def data_rows(self) -> torch.Tensor:
        """``Yᵀ`` as a C-order float64 CPU tensor (the column pass's layout; made once)."""
        if self._yt is None:
            self._yt = self.data.detach().to("cpu", torch.float64).mT.contiguous()
        return self._yt

    @staticmethod
    def row_norms(z: torch.Tensor, keepdim: bool = False) -> torch.Tensor:
        """``‖z_j‖₂`` per row (a plain reduction: fast for column-major Z as well)."""
        return (z * z).sum(dim=-1, keepdim=keepdim).sqrt()

    @staticmethod
    def z_of(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``Z = YᵀX`` computed as ``(XᵀY)ᵀ`` (column-major result; faster GEMM layout)."""
        return (x.mT @ y).mT

    def g_of(self, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``(1/m) Y W`` computed as ``(WᵀYᵀ)ᵀ/m`` (up to 2× faster for narrow W on CPU)."""
        return (w.mT @ y.mT).mT / self.m

    def value_from_z(self, z: torch.Tensor) -> torch.Tensor:
        """The objective from ``Z = YᵀX``: ``(1/m) Σ_j ‖z_j‖₂`` (``"l12"``) or ``(1/m)‖Z‖₁``
        (``"l1"``).
        """
        if self.objective == "l12":
            return self.row_norms(z).sum() / self.m
        return z.abs().sum() / self.m

    def weights(self, z: torch.Tensor, cols=None) -> torch.Tensor:
        """``W[:, cols]`` of the subgradient ``(1/m) Y W`` from ``Z = YᵀX`` (all columns)."""
        if self.objective == "l12":
            norms = self.row_norms(z, keepdim=True)
            inv = torch.where(norms > 0, 1.0 / norms.clamp_min(1e-300), torch.zeros_like(norms))
            return (z if cols is None else take_columns(z, cols)) * inv
        return torch.sign(z if cols is None else take_columns(z, cols))

    def value(self, x):
        return finite(self.value_from_z(self.z_of(self._y(x), x)), "cost")

    def gradient(self, x):
        y = self._y(x)
        return finite(self.g_of(y, self.weights(self.z_of(y, x))), "subgradient")

    def gradient_columns(self, x, cols):
        """Columns ``cols`` of the subgradient ``(1/m) Y W`` (``O(nm|C|)`` for ``"l1"``)."""
        y = self._y(x)
        if self.objective == "l1":
            return finite(self.g_of(y, torch.sign(self.z_of(y, take_columns(x, cols)))),
                           "subgradient")
        return finite(self.g_of(y, self.weights(self.z_of(y, x), cols)), "subgradient")

    def track(self, x):
        return DPCPTracker(self, x)


class DPCPTracker(ColumnTracker):
    """Caches ``Z = YᵀX`` (m × c); a column update refreshes ``Z[:, C]`` in ``O(n m |C|)``.

    ``Z`` is stored column-major (``Z.mT`` is the C-order ``XᵀY``). On a float64 CPU point (and
    ``oracle.compiled``) the refresh is deferred: ``set_columns`` records the columns, and the
    next ``gradient_columns`` (or ``value``, ``gradient``) refreshes them and computes the value
    and the wanted subgradient columns in one column pass
    (:func:`~orthoplug.kernels.dpcp.dpcp_block_pass`: two BLAS products and a compiled sweep for
    the row norms and weights). Elsewhere ``Z[:, C]`` is refreshed at once by torch products.
    """

    def __init__(self, oracle: DPCPOracle, x: torch.Tensor):
        super().__init__(oracle, x)
        self.refresh()

    def refresh(self) -> None:
        """Recompute ``Z = YᵀX`` and drop the cached value and subgradient."""
        self.compiled = (self.oracle.compiled and self.x.dtype == torch.float64
                         and self.x.device.type == "cpu")
        self.z = self.oracle.z_of(self.oracle._y(self.x), self.x)  # column-major
        self._stale = None  # columns of Z not yet refreshed (compiled path)
        self._value = None
        self._grad = None

    def _compiled_pass(self, cols: torch.Tensor) -> torch.Tensor:
        """Refresh the stale columns of Z, set the value, return ``∂f(X)[:, cols]``."""
        stale = self._stale if self._stale is not None else cols[:0]
        self._stale = None
        o = self.oracle
        value, g = dpcp_block_pass(o._y(self.x), o.data_rows(), self.z.mT,
                                   take_columns(self.x, stale), stale, cols,
                                   o.objective == "l12")
        self._value = finite(torch.tensor(value, dtype=self.x.dtype), "cost")
        return g

    def value(self):
        if self._value is None:
            if self._stale is not None:
                self._compiled_pass(self._stale[:0])
            else:
                self._value = finite(self.oracle.value_from_z(self.z), "cost")
        return self._value

    def gradient(self):
        if self._grad is None:
            if self._stale is not None:
                self._compiled_pass(self._stale[:0])
            o = self.oracle
            self._grad = finite(o.g_of(o._y(self.x), o.weights(self.z)), "subgradient")
            self.gradient_evaluations += 1
        return self._grad

    def gradient_columns(self, cols):
        if self._grad is not None:
            return take_columns(self._grad, cols)
        o = self.oracle
        self.column_evaluations += int(cols.numel())
        self.count_gradients(int(cols.numel()) / self.x.shape[-1])
        if self.compiled:
            return finite(self._compiled_pass(cols), "subgradient")
        return finite(o.g_of(o._y(self.x), o.weights(self.z, cols)), "subgradient")

    def set_columns(self, cols, new):
        if self.compiled:
            if self._stale is not None:  # two writes in a row: refresh the first columns now
                self._compiled_pass(cols[:0])
            put_columns(self.x, cols, new)
            self._stale = cols
        else:
            put_columns(self.x, cols, new)
            put_columns(self.z, cols, self.oracle.z_of(self.oracle._y(new), new))
        self._value = None
        self._grad = None

    def set_rows(self, rows, new_rows):
        super().set_rows(rows, new_rows)
        self.refresh()

    def set_point(self, x):
        self.x = x.clone()
        self.refresh()


@dataclass
class DPCP:
    r"""A DPCP instance: data, ground truth and metrics (see the module docstring).

    Attributes:
        data: ``Y`` (n × m), unit-norm columns: inliers first, then outliers.
        subspace: orthonormal basis of S (n × d).
        normals: orthonormal basis of ``S^⊥`` (n × c): the target span.
        num_inliers, num_outliers.
    """

    data: torch.Tensor
    subspace: torch.Tensor
    normals: torch.Tensor
    num_inliers: int
    num_outliers: int

    @property
    def n(self) -> int:
        """Ambient dimension n."""
        return self.data.shape[0]

    @property
    def c(self) -> int:
        """Codimension c of the inlier subspace (the number of columns of X)."""
        return self.normals.shape[1]

    def oracle(self, objective: str = "l12") -> DPCPOracle:
        """A :class:`DPCPOracle` on the data with ``objective`` ``"l12"`` or ``"l1"``."""
        return DPCPOracle(self.data, objective)

    def principal_angle(self, x: torch.Tensor) -> float:
        """Largest principal angle between ``span X`` and ``S^⊥`` (radians)."""
        return principal_angle(x, self.normals)

    def subspace_error(self, x: torch.Tensor) -> float:
        r"""``‖XXᵀ − P_{S⊥}‖_F/√2 = ‖sin Θ‖_F`` (computed without n × n matrices)."""
        b = self.normals.to(x)
        return float(torch.linalg.matrix_norm(x - b @ (b.mT @ x)))

    def spectral_point(self) -> torch.Tensor:
        r"""The usual DPCP initialisation: the c eigenvectors of ``YYᵀ`` with the smallest
        eigenvalues (the span the inliers avoid).

        Initialisation only: forms the ``n × n`` matrix ``YYᵀ`` once (``O(n²m)`` flops,
        ``O(n²)`` memory); no solver iteration does.
        """
        y = self.data
        _, v = torch.linalg.eigh(y @ y.mT)
        return v[:, : self.c].contiguous()

    def random_point(self, seed: int | None = None) -> torch.Tensor:
        """A random point of St(n, c) (QR of a Gaussian)."""
        g = torch.randn(self.n, self.c, dtype=self.data.dtype, generator=_generator(seed))
        return qf(g)


def dpcp_instance(n: int, d: int, num_inliers: int, *, outlier_ratio: float = 0.5,
                  num_outliers: int | None = None, seed: int | None = 0,
                  dtype: torch.dtype = torch.float64) -> DPCP:
    r"""Random DPCP data: inliers in a random d-dimensional subspace of ℝⁿ plus outliers.

    Inliers ``B_S a`` with ``a ~ N(0, I_d)``, outliers ``N(0, I_n)``, all scaled to unit norm.
    ``outlier_ratio = N_out / (N_in + N_out)`` (the DPCP literature's ratio) unless
    ``num_outliers`` is given. ``O(n (d + c) + n m)`` memory, no n × n matrix.

    Raises:
        ValueError: ``d ∉ [1, n−1]``, ``num_inliers < 1`` or ratio outside ``[0, 1)``.
    """
    if not 1 <= d <= n - 1:
        raise ValueError(f"need 1 <= d <= n - 1, got n={n}, d={d}")
    if num_inliers < 1:
        raise ValueError(f"num_inliers must be >= 1, got {num_inliers}")
    if num_outliers is None:
        if not 0 <= outlier_ratio < 1:
            raise ValueError(f"outlier_ratio must lie in [0, 1), got {outlier_ratio}")
        num_outliers = int(round(num_inliers * outlier_ratio / (1 - outlier_ratio)))
    gen = _generator(seed)
    basis = qf(torch.randn(n, d, dtype=dtype, generator=gen))
    g = torch.randn(n, n - d, dtype=dtype, generator=gen)
    for _ in range(2):  # project twice: orthogonal to S to working accuracy
        g = g - basis @ (basis.mT @ g)
    normals = qf(g)
    inliers = basis @ torch.randn(d, num_inliers, dtype=dtype, generator=gen)
    outliers = torch.randn(n, num_outliers, dtype=dtype, generator=gen)
    data = _unit_columns(torch.cat([inliers, outliers], dim=1))
    return DPCP(data, basis, normals, num_inliers, num_outliers)


# ---------------------------------------------------------------------------------------------
# ℓ1 sparse PCA
# ---------------------------------------------------------------------------------------------


class FactoredQuadraticOracle(Oracle):
    r"""``f(X) = s ‖B X‖_F² = s tr(Xᵀ BᵀB X)`` with ``B`` (m × n) kept factored.

    ``∇f = 2s Bᵀ(BX)``; the tracker caches ``W = BX`` (m × p): column gradient
    ``2s Bᵀ W[:, C]`` and column update ``W[:, C] = B X_C``, both ``O(m n |C|)``.
    ``lipschitz = 2|s| σ_max(B)²``.
    """

    column_gradients = True

    def __init__(self, b: torch.Tensor, scale: float = 1.0):
        b = torch.as_tensor(b)
        if b.ndim != 2:
            raise ValueError(f"B must be a matrix, got shape {tuple(b.shape)}")
        self.b, self.scale = b, float(scale)
        self.lipschitz = 2.0 * abs(self.scale) * float(torch.linalg.matrix_norm(b, ord=2)) ** 2

    def _b(self, x):
        if self.b.dtype != x.dtype or self.b.device != x.device:
            self.b = self.b.to(dtype=x.dtype, device=x.device)
        return self.b

    def value(self, x):
        return finite(self.scale * (self._b(x) @ x).square().sum(), "cost")

    def gradient(self, x):
        b = self._b(x)
        return finite(2.0 * self.scale * ((b @ x).mT @ b).mT, "gradient")

    def gradient_columns(self, x, cols):
        """Columns ``cols`` of ``∇f = 2s Bᵀ(BX)`` in ``O(m n |C|)``."""
        b = self._b(x)
        return finite(2.0 * self.scale * ((b @ take_columns(x, cols)).mT @ b).mT, "gradient")

    def track(self, x):
        return FactoredQuadraticTracker(self, x)


class FactoredQuadraticTracker(ColumnTracker):
    """Caches ``W = BX``; column changes refresh ``W[:, C]``."""

    def __init__(self, oracle: FactoredQuadraticOracle, x: torch.Tensor):
        super().__init__(oracle, x)
        self.refresh()

    def refresh(self):
        self.w = (self.x.mT @ self.oracle._b(self.x).mT).mT  # column-major
        self._value = None
        self._grad = None

    def value(self):
        if self._value is None:
            self._value = finite(self.oracle.scale * self.w.square().sum(), "cost")
        return self._value

    def gradient(self):
        if self._grad is None:
            o = self.oracle
            self._grad = finite(2.0 * o.scale * (self.w.mT @ o._b(self.x)).mT, "gradient")
            self.gradient_evaluations += 1
        return self._grad

    def gradient_columns(self, cols):
        if self._grad is not None:
            return take_columns(self._grad, cols)
        o = self.oracle
        self.column_evaluations += int(cols.numel())
        self.count_gradients(int(cols.numel()) / self.x.shape[-1])
        return finite(2.0 * o.scale * (take_columns(self.w, cols).mT @ o._b(self.x)).mT,
                       "gradient")

    def set_columns(self, cols, new):
        put_columns(self.x, cols, new)
        put_columns(self.w, cols, self.oracle._b(new) @ new)
        self._value = None
        self._grad = None

    def set_rows(self, rows, new_rows):
        Tracker.set_rows(self, rows, new_rows)
        self.refresh()

    def set_point(self, x):
        self.x = x.clone()
        self.refresh()


@dataclass
class SparsePCA:
    r"""ℓ1 sparse PCA ``F(X) = −tr(XᵀCX) + μ‖X‖₁``, ``C = BᵀB`` (see the module docstring).

    Attributes:
        b: the data matrix B (m × n).
        mu: the ℓ1 weight μ ≥ 0.
    """

    b: torch.Tensor
    mu: float

    @classmethod
    def random(cls, m: int, n: int, mu: float, *, seed: int | None = 0,
               dtype: torch.dtype = torch.float64, normalize: bool = True) -> SparsePCA:
        """Gaussian ``B`` (m × n), scaled to ``‖B‖_F = 1`` (``tr C = 1``) when ``normalize``."""
        b = torch.randn(m, n, dtype=dtype, generator=_generator(seed))
        if normalize:
            b = b / torch.linalg.matrix_norm(b)
        return cls(b, float(mu))

    @property
    def n(self) -> int:
        """Number n of features."""
        return self.b.shape[1]

    def smooth_oracle(self) -> FactoredQuadraticOracle:
        """``−‖BX‖_F²`` with column access."""
        return FactoredQuadraticOracle(self.b, -1.0)

    def nonsmooth(self):
        """The ℓ1 term ``μ‖X‖₁`` as :class:`~orthoplug.nonsmooth.L1`."""
        from orthoplug.nonsmooth import L1

        return L1(self.mu)

    def oracle(self) -> CompositeOracle:
        """``F = −‖BX‖² + μ‖X‖₁`` with column subgradients ``−2BᵀBX_C + μ sign(X_C)``."""
        return CompositeOracle(self.smooth_oracle(), self.nonsmooth())

    def quadratic_oracle(self) -> QuadraticOracle:
        """``−tr(XᵀCX)`` as a :class:`QuadraticOracle` (forms the n × n matrix C = BᵀB)."""
        return QuadraticOracle(self.b.mT @ self.b, scale=-1.0)

    def value(self, x: torch.Tensor) -> float:
        """``F(X) = −‖BX‖_F² + μ‖X‖₁``."""
        b = self.b.to(x)
        return float(-(b @ x).square().sum() + self.mu * x.abs().sum())


# ---------------------------------------------------------------------------------------------
# Orthogonal dictionary learning
# ---------------------------------------------------------------------------------------------


class L1ColumnOracle(DPCPOracle):
    r"""``f(X) = (1/m)‖YᵀX‖₁`` (column-separable; the DPCP ``"l1"`` objective on any data)."""

    def __init__(self, data: torch.Tensor):
        super().__init__(data, "l1")


@dataclass
class DictionaryLearning:
    r"""Orthogonal dictionary learning: ``Y = D₀ S₀``, ``D₀ ∈ O(n)``, S₀ Bernoulli(θ)–Gaussian.

    Minimise ``(1/m)‖YᵀX‖₁`` over St(n, p); :meth:`recovery_error` measures how far each column
    of X is from the nearest ``±`` column of ``D₀`` (``1 − max_k |⟨x_i, d_k⟩|``, worst over i).
    """

    data: torch.Tensor
    dictionary: torch.Tensor

    @classmethod
    def random(cls, n: int, m: int, theta: float = 0.3, *, seed: int | None = 0,
               dtype: torch.dtype = torch.float64) -> DictionaryLearning:
        """An instance ``Y = D₀S₀`` with Haar ``D₀`` (n×n) and Bernoulli(θ)–Gaussian ``S₀`` (n×m).

        Raises:
            ValueError: unless ``0 < theta ≤ 1``.
        """
        if not 0 < theta <= 1:
            raise ValueError(f"theta must lie in (0, 1], got {theta}")
        gen = _generator(seed)
        d0 = qf(torch.randn(n, n, dtype=dtype, generator=gen))
        mask = torch.rand(n, m, dtype=dtype, generator=gen) < theta
        s0 = torch.randn(n, m, dtype=dtype, generator=gen) * mask
        return cls(d0 @ s0, d0)

    def oracle(self) -> L1ColumnOracle:
        """The column-separable ``(1/m)‖YᵀX‖₁`` oracle."""
        return L1ColumnOracle(self.data)

    def recovery_error(self, x: torch.Tensor) -> float:
        """``1 − min_i max_k |⟨x_i, d_k⟩|``: how far the worst column of X is from a ± column of
        ``D₀``.
        """
        corr = (self.dictionary.to(x).mT @ x).abs().max(dim=0).values
        return float(1.0 - corr.min())
