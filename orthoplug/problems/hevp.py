r"""Hyperbolic eigenvalue problem in its well-posed trace-minimisation form.

``min tr(XᵀCX)`` subject to ``XᵀJX = J`` with ``C ≻ 0`` has the global minimum
``Σ_i |λ_i(JC)|`` (trace minimisation for definite pencils, Kovač-Striko & Veselić 1995).
Over the indefinite Stiefel set ``Xᵀ J_n X = J_k`` (``k₊`` plus and ``k₋`` minus columns) the
minimum is the sum of the ``k₊`` smallest positive eigenvalues of ``J_n C`` plus the ``k₋``
smallest absolute values of its negative eigenvalues.

The papers' literal form ``min −tr(XᵀDᵀDX)`` is unbounded below on the group (``‖X‖_F`` is
unbounded there); :func:`gaussian_data` and :func:`trace_min_certificate` serve the bounded form.

:func:`pencil_eigenvalues` and :func:`trace_min_certificate` live in :mod:`orthoplug.linalg`, next
to the minimiser itself (:func:`orthoplug.linalg.hyperbolic_trace_min`), and are re-exported here.
"""

from __future__ import annotations

import numpy as np

from orthoplug.linalg import pencil_eigenvalues, trace_min_certificate

__all__ = ["pencil_eigenvalues", "trace_min_certificate", "make_spd", "make_banded_spd"]


def make_spd(n: int, m: int | None = None, eps: float = 1e-2, seed: int | None = 0) -> np.ndarray:
    """``C = DᵀD/m + εI`` with Gaussian ``D ∈ ℝ^{m×n}`` (default ``m = n``)."""
    rng = np.random.default_rng(seed)
    m = n if m is None else m
    d = rng.standard_normal((m, n))
    return d.T @ d / m + eps * np.eye(n)


def make_banded_spd(n: int, bandwidth: int = 2, seed: int | None = 0):
    """A sparse banded ``C ≻ 0``: the stiffness matrix of a chain of n unit masses, each tied to
    its neighbours up to ``bandwidth`` apart by springs of stiffness ``U(0, 1]`` and to the
    ground by one of stiffness ``U[0.01, 1)``: ``C = Σ k_ij (e_i − e_j)(e_i − e_j)ᵀ + diag(g)``
    (CSR, ``2·bandwidth + 1`` diagonals; ``λ_min(C) ≥ min g ≥ 0.01``)."""
    import scipy.sparse as sp

    if not 1 <= bandwidth < n:
        raise ValueError(f"bandwidth must be in [1, n), got {bandwidth} for n = {n}")
    rng = np.random.default_rng(seed)
    springs = [1.0 - rng.random(n - i) for i in range(1, bandwidth + 1)]
    diag = rng.uniform(0.01, 1.0, n)
    for i, k in enumerate(springs, 1):
        diag[:-i] += k
        diag[i:] += k
    offsets = [0, *range(1, bandwidth + 1), *range(-1, -bandwidth - 1, -1)]
    return sp.diags_array([diag, *(-k for k in springs), *(-k for k in springs)],
                          offsets=offsets, format="csr")
