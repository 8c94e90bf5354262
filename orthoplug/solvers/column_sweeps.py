r"""Column rotations around OBCD (:mod:`orthoplug.solvers.obcd`) for a column-invariant f.

OBCD's step ``X[B] ← V X[B]`` rotates two *rows*. For ``f = s·tr(XᵀCX)`` (no ``D``) the cost
is also invariant under *column* rotations ``X ← X Q``, ``Q ∈ O(r)``, which only change the
separable term h. A row-pair method reaches such a change only through many pair steps, each of
which also moves f.

* :func:`column_rotations` — Jacobi sweeps over ⌊r/2⌋ disjoint column pairs ``(a, b)``, each set
  to ``X[:, (a, b)] Rᵀ`` with ``R = argmin_{R ∈ O(2)} h(R X[:, (a, b)]ᵀ)``: the exact O(2)
  search of :func:`~orthoplug.subproblems.o2.solve_o2` with ``P = 0`` and no curvature. f is
  unchanged, h never increases (``R = I`` on ties), feasibility is kept exactly (an orthogonal
  map of two columns). On float64 CPU tensors the sweep is compiled
  (:func:`~orthoplug.kernels.obcd.column_pairs`, one search per pair; SparseOBCD's pair loop
  runs it in place on the tracker's X and CX).
"""

from __future__ import annotations

import numpy as np
import torch

from orthoplug.kernels import runs_compiled
from orthoplug.kernels.obcd import column_pairs
from orthoplug.nonsmooth import SeparableTerm, Zero
from orthoplug.oracles import host_array
from orthoplug.subproblems.o2 import SNAP, breakpoint_tables, solve_o2

from .pairs import random_matching

__all__ = ["column_invariant", "column_rotations"]


def column_invariant(oracle) -> bool:
    """Whether ``f(XQ) = f(X)`` for every ``Q ∈ O(r)``: a quadratic ``s·tr(XᵀCX)`` with no
    ``D`` (or ``D = d·I``)."""
    q = oracle.quadratic
    if q is None:
        return False
    if q.d is None:
        return True
    d = torch.as_tensor(q.d)
    return bool(torch.equal(d, d[0, 0] * torch.eye(d.shape[0], dtype=d.dtype, device=d.device)))


def column_rotations(x: torch.Tensor, h: SeparableTerm, generator: torch.Generator,
                     sweeps: int = 1) -> torch.Tensor:
    """``sweeps`` Jacobi sweeps of exact column-pair rotations minimising ``h(X Q)``.

    Each sweep draws a random perfect matching of the r columns and solves the ⌊r/2⌋
    independent problems ``min_{R ∈ O(2)} h(R W)``, ``W = X[:, (a, b)]ᵀ`` (2 × n), in one batched
    call; pairs are disjoint and h is separable, so the sweep's decrease of h is the sum of
    theirs. Cost ``O(r n log n)`` per sweep; no n × n matrix.

    Returns a new n × r matrix with ``h`` no larger than at ``x`` and the same ``XXᵀ``. Entries
    below the O(2) search's tolerance (1e-14) are set to 0, as OBCD does after its row updates.

    Raises:
        ValueError: ``x`` is not a 2-D matrix with at least 2 columns, or ``sweeps < 1``.
    """
    if x.ndim != 2 or x.shape[1] < 2:
        raise ValueError(f"column rotations need an n × r matrix with r >= 2, got shape "
                         f"{tuple(x.shape)}")
    if sweeps < 1:
        raise ValueError(f"sweeps must be >= 1, got {sweeps}")
    x = x.clone()
    if isinstance(h, Zero):
        return x
    if runs_compiled(x) and x.dtype == torch.float64:  # the compiled sweep, in place
        xa = x.contiguous().numpy()
        for _ in range(sweeps):
            _column_sweep(xa, np.empty((0, xa.shape[1])), h, generator)
        return torch.from_numpy(xa)
    for _ in range(sweeps):
        pairs = random_matching(x.shape[1], generator, x.device)  # (m, 2)
        w = x.mT[pairs]  # (m, 2, n)
        v = solve_o2(torch.zeros(pairs.shape[0], 2, 2, dtype=x.dtype, device=x.device), w, h,
                     s=0.0)
        new = v @ w
        new[new.abs() < SNAP] = 0.0
        x.mT[pairs.reshape(-1)] = new.reshape(-1, x.shape[0])
    return x


def _column_sweep(xa: np.ndarray, ya: np.ndarray, h: SeparableTerm,
                  generator: torch.Generator) -> float:
    """One compiled sweep (:func:`~orthoplug.kernels.obcd.column_pairs`) over a random
    matching of the columns of the float64 array ``xa``, in place (``ya = C xa`` rotated too,
    unless it has no rows); returns the predicted decrease of h."""
    pairs = host_array(random_matching(xa.shape[1], generator, torch.device("cpu")))
    tab = breakpoint_tables(h)
    return column_pairs(xa, ya, np.ascontiguousarray(pairs, dtype=np.int64), tab.th, tab.g,
                        tab.k, tab.inf, tab.pval, tab.knot, tab.h0, tab.shared, tab.continuous)
