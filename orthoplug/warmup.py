"""Compile every numba kernel of the package once, before anything is timed.

numba compiles a kernel on its first call in a process and caches the machine code: next to the
sources where that folder is writable, else in the user's cache folder (``NUMBA_CACHE_DIR`` when
set, otherwise numba's per-user cache, e.g. ``~/.cache/numba``), so a read-only install works too.
A cold compile of all kernels takes tens of seconds, a cached load about one. Solvers never count
either against their ``max_time`` (see :class:`orthoplug.solvers.clock.RunClock`);
:func:`warm_up` just moves the cost to a moment of the caller's choosing.
"""

from __future__ import annotations

__all__ = ["warm_up"]


def warm_up() -> None:
    """Compile (or load from numba's cache) every compiled kernel, by running each solver that
    has one for a few iterations on a tiny problem: column J-Jacobi (cyclic and random orders),
    the GS-JOBCD pair loop with its orders and its column pairs (float64 and float32), the
    single and batched 2×2 J-orthogonal solves, the single O(2) solve, J-JOBCD's matching,
    stale-gradient and Hessian-model sweeps, the OBCD pair loop with its greedy order and its
    float32 pair steps (one O(2) search per pair), SparseOBCD's column sweep and partition search
    (and its move gains), the RCD sweep, the DPCP column pass and Cayley L-BFGS's pair update."""
    import torch

    from orthoplug.baselines.rcd import RCD
    from orthoplug.geometry.manifolds import JOrthogonalGeometry
    from orthoplug.geometry.stiefel import StiefelGeometry
    from orthoplug.nonsmooth import L1, NonNegative
    from orthoplug.oracles import FunctionOracle, QuadraticOracle
    from orthoplug.problems.nonsmooth_problems import dpcp_instance
    from orthoplug.solvers.column_sweeps import column_rotations
    from orthoplug.solvers.jjacobi import ColumnJJacobi
    from orthoplug.solvers.jobcd import GSJOBCD, JJOBCD
    from orthoplug.solvers.lbfgs import CayleyLBFGS
    from orthoplug.solvers.obcd import OBCD
    from orthoplug.solvers.row_partition import row_move_gains
    from orthoplug.solvers.rssm import RSSM
    from orthoplug.solvers.sparse_obcd import SparseOBCD
    from orthoplug.subproblems.jorth2 import solve_jorth2x2

    c = torch.eye(4, dtype=torch.float64) + 0.1
    x = torch.eye(4, dtype=torch.float64)
    j_geo, st_geo = JOrthogonalGeometry(4, 2), StiefelGeometry(4, 2)
    for pairs in ("cyclic", "random"):  # the column J-Jacobi sweeps
        ColumnJJacobi(pairs=pairs, seed=0, max_iterations=2).run(QuadraticOracle(c), x, j_geo)
    for options in ({}, {"pairs": "greedy"}):
        GSJOBCD(**options, seed=0, max_iterations=2).run(QuadraticOracle(c), x, j_geo)
    solve_jorth2x2(torch.tensor([[1.0, -1.0], [1.0, 1.0]]),  # the batched 2×2 solve (K = 2)
                   torch.ones(2, 2, 2, dtype=torch.float64), s=1.0)
    weights = torch.diag(torch.arange(1.0, 5.0, dtype=torch.float64))
    for dtype in (torch.float64, torch.float32):  # a non-scalar D: the column pair steps
        GSJOBCD(seed=0, max_iterations=2).run(
            QuadraticOracle(c.to(dtype), weights.to(dtype)), x.to(dtype), j_geo)
    plain = FunctionOracle(lambda y: (y * (c @ y)).sum(), lambda y: 2.0 * (c @ y))
    hessian = FunctionOracle(lambda y: (y * (c @ y)).sum(), lambda y: 2.0 * (c @ y),
                             hessian=lambda y, u: 2.0 * (c @ u))
    GSJOBCD(seed=0, max_iterations=2).run(  # float32: one exact 2×2 solve a step
        QuadraticOracle(c.float()), x.float(), j_geo)
    for options in ({"matchings": 1}, {"matchings": "all"}):  # scalar model
        JJOBCD(**options, seed=0, max_iterations=2).run(plain, x, j_geo)
    JJOBCD(curvature="hessian", side="column", seed=0, max_iterations=2).run(hessian, x, j_geo)
    CayleyLBFGS(max_iterations=3).run(plain, x, j_geo)  # two secant pairs
    for pairs in ("random", "greedy"):
        OBCD(L1(0.1), pairs=pairs, seed=0, max_iterations=2).run(
            QuadraticOracle(-c), x[:, :2], st_geo)
    OBCD(L1(0.1), pairs="greedy", seed=0, max_iterations=2).run(  # float32: the exact pair
        QuadraticOracle(-c.float()), x[:, :2].float(), st_geo)  # steps, one search per pair
    OBCD(L1(0.1), seed=0, max_iterations=2).run(  # one O(2) breakpoint search per step
        FunctionOracle(lambda y: -(y * (c @ y)).sum(), lambda y: -2.0 * (c @ y)), x[:, :2], st_geo)
    column_rotations(x[:, :2].clone(), L1(0.1), torch.Generator().manual_seed(0))
    SparseOBCD(NonNegative(), seed=0, max_iterations=2).run(  # its stages: partition search
        QuadraticOracle(-c), x[:, :2], st_geo)
    row_move_gains(x[:, :2].numpy(), c.numpy(), (c @ x[:, :2]).numpy())
    RCD(seed=0, max_iterations=1).run(QuadraticOracle(-c), x[:, :2], st_geo)
    prob = dpcp_instance(12, 8, 16, outlier_ratio=0.5, seed=0)
    RSSM(num_blocks=2, seed=0, max_iterations=3).run(
        prob.oracle(), prob.spectral_point(), StiefelGeometry(12, 4))
