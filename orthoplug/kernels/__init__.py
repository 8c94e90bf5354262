"""Compiled kernels: the sequential hot loops of the block methods, on NumPy arrays.

Plain functions over NumPy arrays and scalars, compiled with numba (``cache=True``). One source
per kernel: with ``NUMBA_DISABLE_JIT=1`` the same functions run as ordinary Python, which is how
tests step through them and how a debugger sees them. The solvers above choose between a kernel
(CPU arrays) and the batched torch path (other devices) by where the iterate lives;
:func:`runs_compiled` is that rule, the only one.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["runs_compiled"]


def runs_compiled(x: torch.Tensor | np.ndarray) -> bool:
    """The dispatch rule of every solver: whether work on ``x`` runs in the compiled kernels.

    True for NumPy arrays and for float32/float64 tensors on the CPU (the kernels read them as
    NumPy views or float64 copies); False for every other device or dtype, whose work stays in
    torch on that device — never a copy to the host and back inside a step.
    """
    if isinstance(x, np.ndarray):
        return True
    return x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)
