"""Compiled kernels: the sequential hot loops of the block methods, on NumPy arrays.

Plain functions over NumPy arrays and scalars, compiled with numba (``cache=True``). One source
per kernel: with ``NUMBA_DISABLE_JIT=1`` the same functions run as ordinary Python, which is how
tests step through them and how a debugger sees them. The solvers above choose between a kernel
(CPU arrays) and the batched torch path (other devices) by where the iterate lives.
"""
