r"""Direct and Krylov solution of the quadratic cost over O(J) and the indefinite Stiefel set.

``min tr(Xᵀ C X D)`` subject to ``Xᵀ J X = J_k`` (``J = diag(±1)`` of size n, ``J_k`` of size
k with ``k₊`` plus and ``k₋`` minus entries, ``J_k = J`` for the square group O(J)), with
``C ≻ 0`` and ``D = diag(d) ⪰ 0`` (default ``I``), is a hyperbolic eigenvalue problem: the
minimisers are made of eigenvectors of the definite pencil ``(C, J)``.

**Eigenvalues.** ``C x = θ J x`` ⇔ ``J C x = θ x``. With ``C = L Lᵀ`` the matrix ``JC = J L Lᵀ``
has the eigenvalues of the symmetric ``M = Lᵀ J L``; by Sylvester's law of inertia ``M`` has
exactly ``q`` negative and ``p`` positive eigenvalues (the counts of −1 and +1 in J), and
``|θ| ≥ λ_min(C) > 0``. In ascending order the ``k₋`` negative eigenvalues closest to zero and
the ``k₊`` smallest positive ones are the contiguous index range ``q − k₋ … q + k₊ − 1``.

**Eigenvectors without a solve.** If ``M u = θ u`` then ``x = J L u / √|θ|`` satisfies
``C x = L Lᵀ J L u / √|θ| = θ L u / √|θ| = θ J x``, ``xᵀ J x = uᵀ M u / |θ| = sign θ`` and
``xᵀ C x = θ² / |θ| = |θ|``; distinct ``u`` give J- and C-orthogonal ``x``. So one Cholesky, the
product ``M = L₊ᵀL₊ − L₋ᵀL₋`` (rows of L split by the sign of J: two rank-k updates), one
symmetric eigendecomposition restricted to the wanted index range and one triangular product give
a J-orthonormal minimiser.

**Minimum (certificate).** For ``D = I`` the minimum is the sum of the ``k₊`` smallest positive
and the ``k₋`` smallest ``|negative|`` eigenvalues (trace minimisation for definite pencils,
Kovač-Striko & Veselić 1995; on O(J) all of them, ``Σ|θ|``). For ``D = diag(d) ⪰ 0`` write
the plus columns' part as ``Σ_i d_(i) a_i`` with the weights sorted down,
``d_(1) ≥ … ≥ d_(k₊) ≥ 0``, and ``a_i = x_iᵀ C x_i``: Abel summation gives
``Σ_m (d_(m) − d_(m+1)) Σ_{i≤m} a_i`` with non-negative coefficients, and any ``m`` plus columns
are themselves a point of iSt with signature ``I_m``, so ``Σ_{i≤m} a_i`` is at least the sum of
the ``m`` smallest positive eigenvalues; the same holds for the minus columns. The bound is
attained by eigenvectors: **the largest weight of each sign class takes the smallest |θ|** of
that class. A negative weight is rejected: it asks to maximise ``x_iᵀ C x_i``, which is
unbounded above on the set whenever J has both signs, and the minimum then depends on how the
columns interact (not a pencil eigenvalue problem).

**Large sparse C** (``method="iterative"``): the wanted θ are the extreme eigenvalues
``ν = 1/θ`` of the definite pencil ``(J, C)`` (``J y = ν C y``, ``C ≻ 0``): the ``k₊`` largest
and the ``k₋`` smallest ν. ARPACK's Lanczos in the C-inner product (``eigsh`` mode 2, one C-solve
and one J-product per step; memory ``O(n · ncv)``) finds them, stopping when every Ritz pair's
residual is below ``tol`` relative to its Ritz value. The two Krylov bases are then joined into
``V`` (n×k), C-orthonormalised (``W = V R⁻¹`` with ``RᵀR = VᵀCV``), and a final Rayleigh–Ritz on
``(WᵀJW)`` makes X J-orthonormal to rounding. C-solves use a sparse LU of ``C`` with symmetric
(diagonal) pivoting, whose pivots are positive exactly when ``C ≻ 0`` (a banded C keeps its band,
memory ``O(n · bandwidth)``), a Cholesky factor for a dense array, or conjugate gradients for a
``LinearOperator``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch
from scipy.linalg import blas

from orthoplug.geometry.signature import Signature

__all__ = ["HyperbolicTraceMin", "hyperbolic_trace_min", "pencil_eigenvalues",
           "trace_min_certificate", "METHODS"]

METHODS = ("auto", "dense", "iterative")


@dataclass
class HyperbolicTraceMin:
    """The outcome of :func:`hyperbolic_trace_min`.

    Attributes:
        x: the minimiser, ``n × k`` with ``Xᵀ J X = J_k`` (column i an eigenvector of the pencil
            ``(C, J)`` with ``J``-norm ``J_k[i]``).
        value: ``tr(Xᵀ C X D)`` evaluated at ``x``.
        certificate: the minimum ``Σ_i d_i |θ_i|`` from the pencil eigenvalues (dense: exact up
            to rounding; iterative: from the final Ritz values, which approach it from above
            with an error of order ``residual²``).
        eigenvalues: ``θ_i`` of column i (``C x_i = θ_i J x_i``, ``sign θ_i = J_k[i]``).
        method: ``"dense"`` or ``"iterative"`` (what ran).
        operator_applications: C-solves of the iterative method (0 for dense).
        residual: ``max_i ‖C x_i − θ_i J x_i‖ / (‖C x_i‖ + |θ_i| ‖x_i‖)`` (iterative only;
            ``None`` for dense).
    """

    x: np.ndarray
    value: float
    certificate: float
    eigenvalues: np.ndarray
    method: str
    operator_applications: int = 0
    residual: float | None = None


def _j_vector(signature, name: str) -> np.ndarray:
    """The ±1 diagonal of ``signature`` (a :class:`Signature` or a 1-D sequence) as floats."""
    if isinstance(signature, Signature):
        return np.asarray(signature.values, dtype=np.float64)
    if np.ndim(signature) != 1:
        raise ValueError(f"{name} must be a Signature or a 1-D sequence of ±1, "
                         f"got an array of shape {np.shape(signature)}")
    j = np.asarray(signature, dtype=np.float64)
    if not (j.size and np.all(np.abs(j) == 1.0)):
        try:  # Signature's message names the offending entries
            Signature(j)
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from err
    return j


def _signatures(signature, k_signature) -> tuple[np.ndarray, np.ndarray]:
    """``J`` and ``J_k`` (``J`` when ``k_signature`` is ``None``) as ±1 vectors, checked to fit:
    ``k₊ ≤ p`` and ``k₋ ≤ q``."""
    j = _j_vector(signature, "signature")
    jk = j if k_signature is None else _j_vector(k_signature, "k_signature")
    kp, km = int((jk > 0).sum()), int((jk < 0).sum())
    p, q = int((j > 0).sum()), int((j < 0).sum())
    if kp > p or km > q:
        raise ValueError(f"J_k (k₊={kp}, k₋={km}) does not fit into J (p={p}, q={q}): need "
                         "k₊ <= p and k₋ <= q")
    return j, jk


def _dense_c(c) -> np.ndarray:
    """``C`` as a float64 array (torch tensors and array-likes accepted)."""
    if isinstance(c, torch.Tensor):
        c = c.detach().cpu().numpy()
    return np.asarray(c, dtype=np.float64)


def _check_c(c, n: int):
    """Shape, finiteness and symmetry of ``C`` (any of the accepted kinds); returns it."""
    if isinstance(c, spla.LinearOperator):
        if c.shape != (n, n):
            raise ValueError(f"C must be {n}×{n} (the size of J), got {c.shape}")
        return c
    if sp.issparse(c):
        c = sp.csr_array(c, dtype=np.float64)
        asym = abs(c - c.T)
        scale = abs(c).max() if c.nnz else 0.0
    else:
        c = _dense_c(c)
        if c.ndim != 2 or c.shape[0] != c.shape[1]:
            raise ValueError(f"C must be a square matrix, got shape {c.shape}")
        asym, scale = np.abs(c - c.T), np.abs(c).max(initial=0.0)
    if c.shape != (n, n):
        raise ValueError(f"C must be {n}×{n} (the size of J), got {c.shape}")
    if not np.isfinite(scale):
        raise ValueError("C has non-finite entries")
    if asym.max() > 1e-12 * scale:
        raise ValueError(f"C must be symmetric: max |C − Cᵀ| = {asym.max():.3e} "
                         f"(max |C| = {scale:.3e})")
    return c


def _check_weights(d, k: int) -> np.ndarray | None:
    """``D`` as its diagonal (a length-k vector or a diagonal k×k matrix), ``None`` for I."""
    if d is None:
        return None
    d = _dense_c(d)
    if d.ndim == 2:
        if d.shape != (k, k):
            raise ValueError(f"D must be {k}×{k} (k columns), got {d.shape}")
        if np.any(d - np.diag(np.diag(d))):
            raise ValueError("D must be diagonal (a weight per column); a general D mixes "
                             "columns and is not a pencil eigenvalue problem")
        d = np.diag(d).copy()
    if d.shape != (k,):
        raise ValueError(f"D must be a length-{k} vector or a diagonal {k}×{k} matrix, "
                         f"got shape {d.shape}")
    if not np.all(np.isfinite(d)):
        raise ValueError("D has non-finite entries")
    if np.any(d < 0):
        raise ValueError(f"D must be nonnegative, got weights {d[d < 0][:5].tolist()}: a negative "
                         "weight maximises its column's C-norm, unbounded above on the set when J "
                         "has both signs")
    return d


def _cholesky(c: np.ndarray) -> np.ndarray:
    try:
        return sla.cholesky(c, lower=True, check_finite=False)
    except np.linalg.LinAlgError as err:
        raise ValueError("C must be positive definite (its Cholesky factorisation failed)") from err


def pencil_eigenvalues(c, signature) -> np.ndarray:
    """All eigenvalues of ``J C`` (real, ascending; ``q`` negative, ``p`` positive) for
    ``C ≻ 0``, as the eigenvalues of ``Lᵀ J L`` with ``C = L Lᵀ``.

    Raises:
        ValueError: bad signature, C of the wrong shape, not symmetric, or not positive definite.
    """
    j = _j_vector(signature, "signature")
    low = _cholesky(_check_c(c, j.size))
    return sla.eigh(_lt_j_l(low, j), lower=True, eigvals_only=True, check_finite=False,
                    overwrite_a=True)


def _lt_j_l(low: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Lower triangle of ``Lᵀ J L = L₊ᵀ L₊ − L₋ᵀ L₋`` (two rank-k updates, rows by sign)."""
    pos = j > 0
    m = blas.dsyrk(1.0, low[pos], trans=1, lower=1)
    if not pos.all():
        m = blas.dsyrk(-1.0, low[~pos], beta=1.0, c=m, trans=1, lower=1, overwrite_c=1)
    return m


def _columns(theta: np.ndarray, jk: np.ndarray, d: np.ndarray | None) -> np.ndarray:
    """Which of the ascending ``theta`` (``k₋`` negative, then ``k₊`` positive) each column
    takes: plus columns the positive ones, minus columns the negative ones by increasing |θ|,
    the largest weight of each class first."""
    order = np.empty(jk.size, dtype=np.intp)
    neg = np.flatnonzero(theta < 0)[::-1]  # increasing |θ|
    pos = np.flatnonzero(theta > 0)
    for sign, idx in ((1.0, pos), (-1.0, neg)):
        cols = np.flatnonzero(jk == sign)
        if d is not None:
            cols = cols[np.argsort(-d[cols], kind="stable")]
        order[cols] = idx[: cols.size]
    return order


def _weighted_sum(values: np.ndarray, d: np.ndarray | None) -> float:
    return float(values.sum() if d is None else values @ d)


def _dense(c: np.ndarray, j: np.ndarray, jk: np.ndarray,
           d: np.ndarray | None) -> HyperbolicTraceMin:
    n = j.size
    kp, km = int((jk > 0).sum()), int((jk < 0).sum())
    q = int((j < 0).sum())
    low = _cholesky(c)
    m = _lt_j_l(low, j)
    full = kp + km == n
    theta, u = sla.eigh(m, lower=True, subset_by_index=None if full else [q - km, q + kp - 1],
                        driver="evd" if full else "evr", check_finite=False, overwrite_a=True)
    order = _columns(theta, jk, d)
    theta, u = theta[order], u[:, order]
    x = blas.dtrmm(1.0, low, u, lower=1)
    x *= j[:, None] / np.sqrt(np.abs(theta))
    value = _weighted_sum(np.einsum("ij,ij->j", x, c @ x), d)
    return HyperbolicTraceMin(x, value, _weighted_sum(np.abs(theta), d), theta, "dense")


def _c_solver(c, tol: float):
    """``b ↦ C⁻¹ b`` and a counter of its calls; raises ``ValueError`` unless ``C ≻ 0``
    (factorisations; an operator's definiteness shows in conjugate gradients' curvature)."""
    if isinstance(c, spla.LinearOperator):
        def solve(b):
            y, info = spla.cg(c, b, rtol=tol, maxiter=10 * c.shape[0])
            if info:
                raise ValueError(f"conjugate gradients on C did not reach rtol {tol:g} in "
                                 f"{10 * c.shape[0]} steps: is C positive definite (and not too "
                                 "ill-conditioned for an unpreconditioned solve)?")
            return y
    elif sp.issparse(c):
        lu = spla.splu(sp.csc_matrix(c), permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
                       options={"SymmetricMode": True})
        if not np.array_equal(lu.perm_r, lu.perm_c) or np.any(lu.U.diagonal() <= 0):
            raise ValueError("C must be positive definite (a pivot of its symmetric "
                             "factorisation is not positive)")
        solve = lu.solve
    else:
        factor = (_cholesky(c), True)
        def solve(b):
            return sla.cho_solve(factor, b, check_finite=False)
    count = [0]

    def counted(b):
        count[0] += 1
        return solve(b)

    return counted, count


def _iterative(c, j: np.ndarray, jk: np.ndarray, d: np.ndarray | None, tol: float,
               maxiter: int | None, ncv: int | None, seed: int) -> HyperbolicTraceMin:
    n = j.size
    kp, km = int((jk > 0).sum()), int((jk < 0).sum())
    if max(kp, km) >= n - 1:
        raise ValueError(f"method='iterative' needs k₊, k₋ < n − 1 (Lanczos); got k₊={kp}, "
                         f"k₋={km}, n={n}: use method='dense'")
    solve, count = _c_solver(c, tol=1e-13)
    jop = sp.diags_array(j)
    minv = spla.LinearOperator((n, n), matvec=solve, dtype=np.float64)
    rng = np.random.default_rng(seed)
    blocks = []
    for which, k in (("LA", kp), ("SA", km)):
        if k:
            blocks.append(spla.eigsh(jop, k=k, M=c, Minv=minv, which=which, tol=tol,
                                     maxiter=maxiter, ncv=ncv, v0=rng.standard_normal(n))[1])
    v = np.hstack(blocks)
    del blocks
    cv = np.asarray(c @ v)
    r = sla.cholesky(v.T @ cv, lower=False)  # VᵀCV = RᵀR
    w = sla.solve_triangular(r, v.T, trans=1, lower=False).T  # V R⁻¹
    cw = sla.solve_triangular(r, cv.T, trans=1, lower=False).T
    del v, cv
    nu, y = np.linalg.eigh(w.T @ (j[:, None] * w))
    theta = 1.0 / nu
    rank = np.argsort(theta)  # ascending θ: negatives (from −∞ up), then positives
    theta, y = theta[rank], y[:, rank]
    order = _columns(theta, jk, d)
    theta, y = theta[order], y[:, order]
    y *= np.sqrt(np.abs(theta))  # (Wy)ᵀJ(Wy) = ν = 1/θ
    x = w @ y
    del w
    cx = cw @ y
    del cw
    value = _weighted_sum(np.einsum("ij,ij->j", x, cx), d)
    scale = np.linalg.norm(cx, axis=0) + np.abs(theta) * np.linalg.norm(x, axis=0)
    cx -= theta * (j[:, None] * x)  # the residual C x_i − θ_i J x_i
    res = np.linalg.norm(cx, axis=0) / scale
    return HyperbolicTraceMin(x, value, _weighted_sum(np.abs(theta), d), theta, "iterative",
                              count[0], float(res.max()))


def hyperbolic_trace_min(c, signature, k_signature=None, d=None, *, method: str = "auto",
                         tol: float = 1e-10, maxiter: int | None = None,
                         ncv: int | None = None, seed: int = 0) -> HyperbolicTraceMin:
    """Global minimiser of ``tr(Xᵀ C X D)`` over ``Xᵀ J X = J_k`` for ``C ≻ 0``, ``D ⪰ 0``
    diagonal.

    The columns are eigenvectors of the pencil ``(C, J)`` (see the module docstring for the
    derivation): a plus column of ``J_k`` takes a positive eigenvalue θ, a minus column a
    negative one, the smallest ``|θ|`` going to the largest weight of each class (for ``D = I``,
    in column order). Any order of the ±1 entries of ``J`` and ``J_k`` is accepted.

    Args:
        c: ``C`` (n×n, symmetric positive definite): a dense array or tensor, a
            ``scipy.sparse`` matrix, or a ``scipy.sparse.linalg.LinearOperator``.
        signature: ``J``, a :class:`~orthoplug.geometry.signature.Signature` or a 1-D sequence
            of ±1 of length n.
        k_signature: ``J_k`` (length k ≤ n, ``k₊ ≤ p`` and ``k₋ ≤ q``); ``None``: the square
            group O(J) (``J_k = J``).
        d: the diagonal weights ``D``: a length-k vector or a diagonal k×k matrix, entries ≥ 0;
            ``None``: ``I``.
        method: ``"dense"`` (Cholesky and a symmetric eigendecomposition, ``O(n³)`` time and
            ``O(n²)`` memory), ``"iterative"`` (Lanczos on the pencil ``(J, C)`` with
            C-solves, memory ``O(n·k)`` plus the factor of a sparse C), or ``"auto"``: dense for
            a dense array or tensor, iterative for a sparse matrix or an operator.
        tol: iterative only: ARPACK's relative residual tolerance for each Ritz pair.
        maxiter: iterative only: ARPACK's restart budget (``None``: its default, ``10 n``).
        ncv: iterative only: Lanczos basis size (``None``: ARPACK's default, ``max(2k+1, 20)``).
        seed: iterative only: seed of the Gaussian Lanczos start vectors (one run, one answer).

    Returns:
        A :class:`HyperbolicTraceMin` (minimiser, its value, the certificate, eigenvalues).

    Raises:
        ValueError: before any factorisation, on a bad signature, ``J_k`` that does not fit in
            ``J``, a C of the wrong shape or not symmetric, non-finite entries, a bad D or
            method; then on a C that is not positive definite (the factorisation fails).
        scipy.sparse.linalg.ArpackNoConvergence: iterative, when ``maxiter`` runs out.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    j, jk = _signatures(signature, k_signature)
    d = _check_weights(d, jk.size)
    c = _check_c(c, j.size)
    if not (tol > 0 and np.isfinite(tol)):
        raise ValueError(f"tol must be positive and finite, got {tol!r}")
    if method == "auto":
        method = "iterative" if sp.issparse(c) or isinstance(c, spla.LinearOperator) else "dense"
    if method == "dense":
        if isinstance(c, spla.LinearOperator):
            raise ValueError("method='dense' needs C as a matrix, got a LinearOperator")
        return _dense(c.toarray() if sp.issparse(c) else c, j, jk, d)
    return _iterative(c, j, jk, d, tol, maxiter, ncv, seed)


def trace_min_certificate(c, signature, k_signature=None, d=None) -> float:
    """Global minimum of ``tr(Xᵀ C X D)`` over ``Xᵀ J X = J_k`` (``None``: ``J_k = J``).

    Computed from the eigenvalues alone (no eigenvectors); see :func:`hyperbolic_trace_min`.

    Raises:
        ValueError: as :func:`hyperbolic_trace_min`.
    """
    j, jk = _signatures(signature, k_signature)
    d = _check_weights(d, jk.size)
    q, kp, km = int((j < 0).sum()), int((jk > 0).sum()), int((jk < 0).sum())
    theta = pencil_eigenvalues(c, j)[q - km: q + kp]
    return _weighted_sum(np.abs(theta[_columns(theta, jk, d)]), d)
