r"""Row-partition search for NN-PCA: single-row moves between the columns of a nonnegative
orthonormal X.

A nonnegative orthonormal X (n × r) has disjoint column supports: a partition of the rows.
:func:`partition_moves` moves single rows between columns, each move of exact gain
(:func:`row_move_gains`), with restricted power steps per column (compiled:
:mod:`orthoplug.kernels.obcd`); :func:`partition_search` returns its lowest-F point. The
splitting stage of :class:`~orthoplug.solvers.sparse_obcd.SparseOBCD` refines its rounded
points by it, and SparseOBCD runs it as its ``"partition search"`` stage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch

from orthoplug.kernels.obcd import move_gains, partition_polish, partition_row_moves
from orthoplug.oracles import host_array

__all__ = ["row_move_gains", "partition_moves", "partition_search"]


def row_move_gains(x: np.ndarray, a: np.ndarray, g: np.ndarray) -> np.ndarray:
    """``gain[i, b]``: the increase of ``tr(XᵀAX)`` when row i leaves its column (rescaled) and
    joins column b with the best nonnegative weight, at a nonnegative orthonormal ``x`` (n × r,
    disjoint column supports), ``g = A x``, ``A`` symmetric.

    Leaving column a: ``x_a ← (x_a − x_ia e_i)/√(1 − x_ia²)``, whose form is
    ``(q_a − 2 x_ia g_ia + x_ia² A_ii)/(1 − x_ia²)`` (``q_a = x_aᵀ A x_a``); ``−∞`` if row i
    is the column's only row or carries all but 1e-8 of its mass. Joining column b:
    ``x_b ← α x_b + β e_i``, ``α² + β² = 1``, ``α, β ≥ 0``, whose best form is the top
    eigenvalue of ``[[q_b, g_ib], [g_ib, A_ii]]`` when ``g_ib > 0`` (its eigenvector is then
    nonnegative) and ``max(q_b, A_ii)`` otherwise (an end of the quarter circle: x_b kept, row
    i dropped, or x_b replaced by e_i, its rows dropped). A row outside every
    support only joins; ``gain[i, own column] = −∞``. Compiled
    (:func:`~orthoplug.kernels.obcd.move_gains`; the partition search's moves use the same
    gain).
    """
    out = np.empty(x.shape)
    move_gains(*(np.ascontiguousarray(v, dtype=np.float64) for v in (x, a, g)), out)
    return out


def partition_moves(x: torch.Tensor, oracle, *, max_moves: int = 100000, polish: int = 20,
                    chunk: int = 200, count_gradients: Callable[[float], None] | None = None
                    ) -> Iterator[tuple[torch.Tensor, float, int]]:
    """The local search of :func:`partition_search`, yielding ``(point, its F, moves done)``
    after every ``chunk`` moves and after every polish, so that a run can record its progress
    (and stop it) in between. Arguments as :func:`partition_search`, checked first;
    ``count_gradients(1)`` is called for every full product ``A X`` (a gradient of f, e.g.
    :meth:`~orthoplug.oracles.core.Tracker.count_gradients`)."""
    q = oracle.quadratic
    if q is None:
        raise ValueError("partition search needs a quadratic oracle s·tr(XᵀCX)")
    xa = host_array(x).astype(np.float64, copy=True)
    if (xa < 0).any() or ((xa > 0).sum(axis=1) > 1).any():
        raise ValueError("partition search needs a nonnegative X with disjoint column supports")
    a = np.ascontiguousarray(-float(q.scale) * host_array(q.c).astype(np.float64))
    return _partition_moves(xa, a, oracle, x, max_moves, polish, chunk,
                            count_gradients or (lambda amount: None))


def _partition_moves(xa, a, oracle, x, max_moves, polish, chunk, count_gradients):
    """The generator behind :func:`partition_moves` (arguments checked there)."""

    def point():
        out = torch.from_numpy(xa.copy()).to(dtype=x.dtype, device=x.device)
        return out, float(oracle.value(out)), moves

    moves = 0
    g = a @ xa
    count_gradients(1)
    form = float(np.einsum("ib,ib->", xa, g))
    while moves < max_moves:
        start = form
        while moves < max_moves:
            done = partition_row_moves(xa, a, g, min(chunk, max_moves - moves), 1e-12)
            moves += done
            if done < chunk:
                break
            yield point()
        g = a @ xa  # exact again after the updates
        count_gradients(1)
        partition_polish(xa, a, g, polish)
        form = float(np.einsum("ib,ib->", xa, g))
        yield point()
        if form <= start + 1e-10 * abs(start):
            break


def partition_search(x: torch.Tensor, oracle, *, max_moves: int = 100000, polish: int = 20,
                     chunk: int = 200, stop: Callable[[], bool] | None = None,
                     count_gradients: Callable[[float], None] | None = None
                     ) -> tuple[torch.Tensor, float, int]:
    """Local search over the row partitions of ``{X ≥ 0, XᵀX = I}`` for ``f = s·tr(XᵀCX)``.

    Nonnegative orthonormal columns have disjoint supports, so X is a partition of (some of) the
    rows into r columns, each column a nonnegative unit vector on its rows. Pair steps of OBCD
    only swap rows or rotate inside a column; this search moves one row at a time to another
    column, the move of largest exact gain (:func:`row_move_gains`, ``A = −s·C``), with the
    two columns rescaled as there, until no move gains more than 1e-12 relative (or a move's
    gain, recomputed after it, is not positive: it is then undone); then ``polish`` restricted
    power steps per column (:func:`~orthoplug.kernels.obcd.partition_polish`, ending early
    once no column gains), and again, until a round of moves and
    polish lowers F by less than 1e-10 relative, after ``max_moves`` moves, or after the first
    ``chunk`` of moves or polish where ``stop()`` is true (e.g.
    :meth:`~orthoplug.solvers.base.Run.out_of_time`; ``count_gradients`` as
    :func:`partition_moves`). Every move and every kept
    power step lowers F, and the point stays exactly nonnegative with disjoint supports.
    Cost per move ``O(n r)`` (``A X`` is updated in the two changed columns and recomputed
    after each round); per power step ``O(n · nnz(X))``.

    Returns:
        ``(point, its F, moves done)``.

    Raises:
        ValueError: no quadratic oracle, or ``x`` is not nonnegative with disjoint column
            supports.
    """
    out = (x, float(oracle.value(x)), 0)
    for item in partition_moves(x, oracle, max_moves=max_moves, polish=polish, chunk=chunk,
                                count_gradients=count_gradients):
        out = item
        if stop is not None and stop():
            break
    return out
