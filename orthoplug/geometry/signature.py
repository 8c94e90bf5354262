"""Signatures ``J = diag(j_1, ..., j_n)`` with ``j_i = ±1``, stored as a vector.

A dense ``n × n`` J is never formed: ``J X`` is ``j[:, None] * X`` and ``X J`` is ``X * j``.
The vector is kept as a CPU float64 tensor and moved to the device and dtype of the tensor
it acts on (cached), so a manifold never holds device state that ``model.to()`` would miss.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["Signature", "make_signature"]


class Signature:
    """An immutable ±1 vector describing ``J = diag(j)``.

    Args:
        values: a sequence of ±1 (any order).

    Raises:
        ValueError: if ``values`` is empty, not one-dimensional, or holds entries other than ±1.
    """

    __slots__ = ("_values", "_cache", "plus", "minus")

    def __init__(self, values: Sequence[float] | np.ndarray | torch.Tensor):
        arr = np.asarray(
            values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else values,
            dtype=np.float64,
        )
        if arr.ndim != 1 or arr.size < 1:
            raise ValueError(
                f"signature must be a non-empty 1-D sequence of ±1, got shape {arr.shape}"
            )
        bad = ~np.isin(arr, (-1.0, 1.0))
        if bad.any():
            raise ValueError(
                f"signature entries must be +1 or -1; got {arr[bad][:5].tolist()} "
                f"at positions {np.flatnonzero(bad)[:5].tolist()}"
            )
        self._values = tuple(int(v) for v in arr)
        self._cache: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}
        self.plus = int((arr > 0).sum())
        self.minus = arr.size - self.plus

    @property
    def n(self) -> int:
        """Size n of J."""
        return len(self._values)

    @property
    def values(self) -> tuple[int, ...]:
        """The diagonal of J as a tuple of ±1."""
        return self._values

    @property
    def is_sorted(self) -> bool:
        """True when J = diag(I_p, -I_q)."""
        return all(v > 0 for v in self._values[: self.plus])

    def positive_indices(self) -> np.ndarray:
        """Indices i with ``J_ii = +1``."""
        return np.flatnonzero(np.asarray(self._values) > 0)

    def negative_indices(self) -> np.ndarray:
        """Indices i with ``J_ii = −1``."""
        return np.flatnonzero(np.asarray(self._values) < 0)

    def like(self, x: torch.Tensor) -> torch.Tensor:
        """The vector ``j`` on ``x``'s device with ``x``'s dtype."""
        key = (x.device, x.dtype)
        j = self._cache.get(key)
        if j is None:
            j = torch.tensor(self._values, dtype=x.dtype, device=x.device)
            self._cache[key] = j
        return j

    def left(self, x: torch.Tensor) -> torch.Tensor:
        """``J @ x`` (scales rows)."""
        return self.like(x)[:, None] * x

    def right(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ J`` (scales columns)."""
        return x * self.like(x)

    def dense(self, x: torch.Tensor) -> torch.Tensor:
        """Dense ``diag(j)``; for tests and diagnostics only."""
        return torch.diag(self.like(x))

    def fits_into(self, other: Signature) -> bool:
        """Whether a ``k``-signature can be realised by ``k`` columns of ``other``."""
        return self.plus <= other.plus and self.minus <= other.minus

    def __len__(self) -> int:
        return self.n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Signature) and other._values == self._values

    def __hash__(self) -> int:
        return hash(self._values)

    def __repr__(self) -> str:
        if self.is_sorted:
            return f"Signature(p={self.plus}, q={self.minus})"
        return f"Signature({list(self._values)})"


def make_signature(n: int, p: int | None = None, signature=None, *, name: str = "J") -> Signature:
    """Build ``J`` from ``n`` and either ``p`` (``J = diag(I_p, -I_{n-p})``) or explicit values.

    Raises:
        ValueError: on ``n < 1``, ``p`` outside ``[0, n]``, both or neither of ``p`` and
            ``signature`` given, or a ``signature`` whose length is not ``n``.
    """
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"{name}: dimension must be an integer >= 1, got {n!r}")
    if (p is None) == (signature is None):
        raise ValueError(f"{name}: give exactly one of p (number of +1 entries) or signature")
    if signature is not None:
        sig = signature if isinstance(signature, Signature) else Signature(signature)
        if sig.n != n:
            raise ValueError(f"{name}: signature has length {sig.n}, expected {n}")
        return sig
    if not isinstance(p, (int, np.integer)) or not 0 <= p <= n:
        raise ValueError(f"{name}: p must be an integer in [0, {n}], got {p!r}")
    return Signature([1.0] * int(p) + [-1.0] * (int(n) - int(p)))
