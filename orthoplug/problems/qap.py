r"""The quadratic assignment problem (QAP) and Wen–Yin's relaxation on St(n, n).

Koopmans–Beckmann QAP: ``min_π Σ_ij A_ij B_{π(i)π(j)} = min_P tr(Aᵀ P B Pᵀ)`` over permutation
matrices ``P`` (``P[i, π(i)] = 1``). Wen & Yin (2013), used by the RSDM paper (§7.3, n = 1000,
A and B i.i.d. N(0, 1)), relax it to

    min_{XᵀX = I} F(X) = tr(Aᵀ S B Sᵀ),     S = X ⊙ X  (entrywise square),

since ``S`` of an orthogonal ``X`` is doubly stochastic and equals ``P`` at every signed
permutation ``X``. ``∇F = 2X ⊙ (A S Bᵀ + Aᵀ S B)``; its rows ``idx`` cost ``O(|idx|·n²)`` instead
of O(n³), which :meth:`QAPProblem.oracle` exposes to RSDM-P. A relaxed point is rounded by
:func:`round_to_permutation` (the assignment maximising ``Σ_i S_{i,π(i)}``, scipy's
``linear_sum_assignment``) and scored by :func:`assignment_cost`.

Instances: :meth:`QAPProblem.make` (the paper's i.i.d. Gaussian A, B; no known optimum) and
:meth:`QAPProblem.planted` (graph matching with a planted permutation π*: ``B`` random symmetric,
``A = −P* B P*ᵀ``). For the planted instance the optimum of *both* problems is ``−‖B‖_F²``,
attained at ``P*``: by Cauchy–Schwarz ``tr(Aᵀ S B Sᵀ) = −⟨P* B P*ᵀ, S B Sᵀ⟩ ≥ −‖B‖_F ‖S B Sᵀ‖_F
≥ −‖B‖_F²`` because a doubly stochastic ``S`` has spectral norm 1; for generic B (no
automorphisms) π* is the unique optimal permutation.

QAPLIB (Burkard, Karisch & Rendl 1997), the usual benchmark library, is not bundled and cannot be
downloaded offline; the planted instances stand in for instances with known optima.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from orthoplug.oracles import RowGradientOracle
from orthoplug.problems import relative_gap, stiefel_problems

__all__ = ["QAPProblem", "assignment_cost", "permutation_matrix", "round_to_permutation"]


def permutation_matrix(perm: torch.Tensor, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``P`` with ``P[i, perm[i]] = 1``."""
    perm = torch.as_tensor(perm, dtype=torch.long)
    return torch.eye(perm.numel(), dtype=dtype)[perm]


def assignment_cost(a: torch.Tensor, b: torch.Tensor, perm: torch.Tensor) -> float:
    """``Σ_ij A_ij B_{π(i)π(j)} = tr(Aᵀ P B Pᵀ)`` for ``π = perm`` (O(n²))."""
    perm = torch.as_tensor(perm, dtype=torch.long, device=b.device)
    return float((a * b[perm][:, perm]).sum())


def round_to_permutation(x: torch.Tensor) -> torch.Tensor:
    """The permutation closest to ``S = X ⊙ X``: ``argmax_π Σ_i S_{i,π(i)}`` (Hungarian, O(n³)).

    Returns ``perm`` (LongTensor, ``perm[i]`` = the column assigned to row i).
    """
    s = (x.detach() * x.detach()).cpu().numpy()
    rows, cols = linear_sum_assignment(s, maximize=True)
    perm = np.empty_like(cols)
    perm[rows] = cols
    return torch.as_tensor(perm, dtype=torch.long)


class QAPProblem(stiefel_problems.QAPProblem):
    r"""Wen–Yin's QAP relaxation ``F(X) = tr(Aᵀ(X⊙X)B(X⊙X)ᵀ)`` on St(n, n), with rounding.

    Extends :class:`orthoplug.problems.stiefel_problems.QAPProblem` (cost, gradient,
    ``function_oracle()``, ``pymanopt_problem(manifold=Stiefel(n, n))``) by planted instances,
    an RSDM oracle with gradient rows, and rounding.

    Args:
        a, b: the n×n flow/distance matrices (any; symmetric for :meth:`planted`).
        permutation: the planted permutation π* if known (then ``optimum =
            assignment_cost(π*)``, which is the optimum of the permutation problem and of the
            relaxation when ``A = −P* B P*ᵀ``, see the module docstring).

    Attributes: ``n``, ``permutation`` (π* or ``None``), ``optimum`` (or ``None``), ``x_star``
    (``P*`` or ``None``).
    """

    def __init__(self, a: torch.Tensor, b: torch.Tensor, permutation: torch.Tensor | None = None):
        super().__init__(a, b)
        self.permutation = (None if permutation is None
                            else torch.as_tensor(permutation, dtype=torch.long))
        self.optimum = None if permutation is None else self.assignment_cost(self.permutation)
        self.x_star = (None if permutation is None
                       else permutation_matrix(self.permutation, dtype=a.dtype))

    @classmethod
    def planted(cls, n: int, *, seed: int = 0, dtype=torch.float64) -> QAPProblem:
        """Graph matching with a planted π*: ``B = (G + Gᵀ)/√2``, G i.i.d. N(0, 1) (diagonal
        included), π* uniform, ``A = −P* B P*ᵀ``; ``optimum = −‖B‖_F²`` (O(n²))."""
        if n < 2:
            raise ValueError(f"need n >= 2, got {n}")
        gen = torch.Generator().manual_seed(int(seed))
        g = torch.randn(n, n, dtype=dtype, generator=gen)
        b = (g + g.mT) / 2**0.5
        perm = torch.randperm(n, generator=gen)
        return cls(-b[perm][:, perm], b, permutation=perm)

    # ---- oracles -----------------------------------------------------------------------------
    def gradient_rows(self, x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """``∇F(X)[rows] = 2X[rows] ⊙ ((A[rows] S) Bᵀ + (Aᵀ[rows] S) B)`` in ``O(|rows|·n²)``."""
        a, b = self.a.to(x), self.b.to(x)
        s = x * x
        inner = (a[rows] @ s) @ b.mT + (a[:, rows].mT @ s) @ b
        return 2.0 * x[rows] * inner

    def oracle(self) -> RowGradientOracle:
        """Value, gradient and gradient rows: RSDM-P costs O(r n²) per iteration, not O(n³)."""
        return RowGradientOracle(self.cost, self.gradient, self.gradient_rows)

    # ---- rounding ----------------------------------------------------------------------------
    def assignment_cost(self, perm: torch.Tensor) -> float:
        """The QAP objective of the permutation ``perm`` (``F`` at its permutation matrix)."""
        return assignment_cost(self.a, self.b, perm)

    def round(self, x: torch.Tensor) -> tuple[torch.Tensor, float]:
        """``(perm, assignment_cost(perm))`` for ``perm = round_to_permutation(x)``."""
        perm = round_to_permutation(x)
        return perm, self.assignment_cost(perm)

    def relative_gap(self, value: float) -> float:
        """``|value − optimum| / |optimum|`` (planted instances only)."""
        if self.optimum is None:
            raise ValueError("no known optimum: build the instance with QAPProblem.planted")
        return relative_gap(value, self.optimum)
