r"""The step rules of the JOBCD family (:mod:`orthoplug.solvers.jobcd`): the 2×2 J-orthogonal
solves, the batched pair update, the Jacobi step, and the PAGE schedule of VR-J-JOBCD.

* :func:`solve_pair` / :func:`solve_blocks` — the exact 2×2 step ``V`` (``Vᵀ J_BB V = J_BB``,
  ``W = V − I``) minimising ``⟨W, M⟩ + ½ vec(W)ᵀ Q vec(W) + θ/2 ‖W‖²`` with an exact curvature
  or the scalar ``ς I``: one pair in plain floats, or a batch of pairs
  (:func:`~orthoplug.subproblems.jorth2.solve_jorth2x2`);
* :func:`update_pairs` — the rows ``X[B] ← V X[B]`` of a batch of disjoint pairs and the
  predicted decrease of the majoriser; the dispatch rule :func:`orthoplug.kernels.runs_compiled`
  says whether the compiled kernels (:mod:`orthoplug.kernels.jobcd`) run it (CPU tensors only);
* :func:`jacobi_step` — one J-JOBCD update of every matrix of a batch: all pairs of a random
  matching at once (or rounds of a round robin, one pair after the other);
* :class:`PageSchedule` — the PAGE estimator's batch sizes, coins and minibatches.

The geoopt front-end (:mod:`orthoplug.adapters._geoopt_jobcd`) calls these rules directly.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from orthoplug._random import rand, randperm
from orthoplug.kernels import runs_compiled
from orthoplug.kernels.jobcd import jacobi_pairs, linear_sweep
from orthoplug.kernels.quadratic import MESSAGES, OK
from orthoplug.oracles import NonFiniteError, host_array
from orthoplug.subproblems.jorth2 import solve_jorth2x2, solve_jorth2x2_single
from orthoplug.subproblems.scalar import scalar_model_change, spectral_norm_sq

from .pairs import random_matching, round_robin, round_robin_pairs

__all__ = ["PageSchedule", "jacobi_step", "solve_blocks", "solve_pair", "update_pairs"]


def solve_pair(jb: list[float], m: list[list[float]], *, qd: list[list[float]] | None = None,
               s: float | None = None) -> tuple[tuple[float, float], tuple[float, float]]:
    """Exact 2×2 step ``V`` (nested tuple) for one pair in plain floats.

    ``m = G[B] Zᵀ`` (2×2), ``jb = (j_i, j_j)``; curvature ``qd`` (4×4, θ included) or the scalar
    ``s`` (θ included). ``P = M − mat(Qd vec I)`` as in :func:`solve_blocks`.
    """
    (m11, m12), (m21, m22) = m
    if qd is None:
        return solve_jorth2x2_single(jb, ((m11 - s, m12), (m21, m22 - s)), s=s)
    p = ((m11 - qd[0][0] - qd[0][3], m12 - qd[2][0] - qd[2][3]),
         (m21 - qd[1][0] - qd[1][3], m22 - qd[3][0] - qd[3][3]))
    return solve_jorth2x2_single(jb, p, Qd=qd)


def _with_theta(q: list[list[float]], theta: float) -> list[list[float]]:
    """``q + θ I4`` for a 4×4 nested list (modified in place and returned)."""
    for r in range(4):
        q[r][r] += theta
    return q


def solve_blocks(jvec: torch.Tensor, pairs: torch.Tensor, z: torch.Tensor, m: torch.Tensor,
                 theta: float, *, sigma: float | None = None,
                 q_exact: torch.Tensor | None = None) -> torch.Tensor:
    """Exact 2×2 steps ``V`` for row pairs (K, 2) with rows ``z`` (K, 2, k) and ``m = G[B] Zᵀ``.

    Curvature ``q_exact`` (K, 4, 4) if given, else the scalar ``σ‖Z‖₂² I``; θ is added. A single
    pair (K = 1) on the CPU goes to the plain-float solver :func:`solve_pair`, anything else to
    the batched one (on the tensors' device).
    """
    jb = jvec[pairs]
    eye = torch.eye(2, dtype=z.dtype, device=z.device)
    if q_exact is not None:
        if pairs.shape[0] == 1 and runs_compiled(z):
            v = solve_pair(jb[0].tolist(), m[0].tolist(),
                           qd=_with_theta(q_exact[0].tolist(), theta))
            return torch.tensor([v], dtype=z.dtype, device=z.device)
        qd = q_exact + theta * torch.eye(4, dtype=z.dtype, device=z.device)
        p = m - (qd @ eye.reshape(4)).reshape(-1, 2, 2).mT  # mat(Qd vec I), column-major
        return solve_jorth2x2(jb, p, Qd=qd)
    s = sigma * spectral_norm_sq(z) + theta
    if not bool(torch.isfinite(s).all()):  # rows so large that ‖Z‖₂² overflows
        raise NonFiniteError("non-finite block curvature")
    if pairs.shape[0] == 1 and runs_compiled(z):
        v = solve_pair(jb[0].tolist(), m[0].tolist(), s=float(s[0]))
        return torch.tensor([v], dtype=z.dtype, device=z.device)
    return solve_jorth2x2(jb, m - s[:, None, None] * eye, s=s)


def update_pairs(x: torch.Tensor, g_rows: torch.Tensor, pairs: torch.Tensor, jvec: torch.Tensor,
                 sigma: float, theta: float) -> tuple[torch.Tensor, float]:
    """The scalar-majoriser step of given disjoint row pairs of every matrix in ``x``.

    Args:
        x: the matrices (nb, n, k).
        g_rows: the gradient's rows at the pairs (nb, m, 2, k).
        pairs: row pairs (nb, m, 2), disjoint within each matrix.
        jvec: the signature of the rows (length n, ±1).
        sigma: σ of the curvature ``σ‖Z‖₂² I``.
        theta: proximal weight θ.

    Returns:
        The new matrices (a new tensor) and the scalar majoriser's predicted change
        ``Σ ⟨W_i, M_i⟩ + σ‖Z_i‖₂²/2 ‖W_i‖²`` (≤ 0), so ``f(X⁺) ≤ f(X) + predicted`` when
        σ ≥ L_f.

    Raises:
        ~orthoplug.oracles.core.NonFiniteError: a block curvature or a new row is not finite.
    """
    if runs_compiled(x) and x.dtype == torch.float64:  # the compiled loop
        out = x.detach().clone(memory_format=torch.contiguous_format)
        status, predicted = jacobi_pairs(
            out.numpy(), g_rows.detach().to(torch.float64).contiguous().numpy(),
            pairs.contiguous().numpy(), jvec.detach().to(torch.float64).contiguous().numpy(),
            float(sigma), float(theta))
        if status != OK:
            raise NonFiniteError(MESSAGES[status])
        return out, predicted
    nb, k = x.shape[0], x.shape[-1]
    bidx = torch.arange(nb, device=x.device)[:, None, None]
    z = x[bidx, pairs]  # (nb, m, 2, k)
    zf, mf = z.reshape(-1, 2, k), (g_rows @ z.mT).reshape(-1, 2, 2)
    v = solve_blocks(jvec, pairs.reshape(-1, 2), zf, mf, theta, sigma=sigma)
    new = v @ zf
    if not bool(torch.isfinite(new).all()):
        raise NonFiniteError("non-finite block update")
    out = x.clone()
    out[bidx, pairs] = new.reshape(nb, -1, 2, k)
    return out, scalar_model_change(v, mf, spectral_norm_sq(zf), sigma)


def _sweep_step(xb: torch.Tensor, gb: torch.Tensor, jvec: torch.Tensor, sigma: float,
                theta: float, generator: torch.Generator,
                matchings: int) -> tuple[torch.Tensor, float]:
    """``matchings`` rounds of a random round robin on every matrix of ``xb`` (nb, n, k), in
    sequence on the stale gradient ``gb``: the compiled
    :func:`~orthoplug.kernels.jobcd.linear_sweep` on float64 host copies of CPU tensors (one
    relabeling draw per matrix), or, off the CPU (:func:`~orthoplug.kernels.runs_compiled`), the
    same rounds as batched torch steps (the pairs of a round are disjoint, so a round's pairs in
    sequence equal one batched step)."""
    nb, n, _ = xb.shape
    keys = rand(nb, n, generator=generator)
    if not runs_compiled(xb):  # the same rounds, one batched torch step per round
        perm = keys.argsort(dim=-1).to(xb.device)
        labels = round_robin(n, xb.device)[:matchings]  # (matchings, m, 2)
        bidx = torch.arange(nb, device=xb.device)[:, None, None]
        predicted = 0.0
        for rnd in labels:
            pairs = perm[:, rnd]  # (nb, m, 2)
            xb, change = update_pairs(xb, gb[bidx, pairs], pairs, jvec, sigma, theta)
            predicted += change
        return xb, predicted
    pairs = round_robin_pairs(host_array(keys.argsort(dim=-1)), matchings)
    xa = np.array(host_array(xb.detach()), dtype=np.float64, order="C")
    ga = np.ascontiguousarray(host_array(gb.detach()), dtype=np.float64)
    status, predicted = linear_sweep(xa, ga, host_array(jvec).astype(np.float64), pairs,
                                     float(sigma), float(theta))
    if status != OK:
        raise NonFiniteError(MESSAGES[status])
    return torch.from_numpy(xa).to(dtype=xb.dtype, device=xb.device), predicted


def jacobi_step(x: torch.Tensor, g: torch.Tensor, jvec: torch.Tensor, sigma: float,
                theta: float, generator: torch.Generator | None = None,
                pairs: torch.Tensor | None = None,
                matchings: int = 1) -> tuple[torch.Tensor, float]:
    """One J-JOBCD update of every matrix in ``x`` ``(*batch, n, k)`` from the gradient ``g``.

    Each matrix gets its own random matching
    (:func:`~orthoplug.solvers.pairs.random_matching`, one ``generator`` call for all), or the
    given disjoint ``pairs`` (nb, m, 2) of each of its nb matrices (GS-JOBCD's torch optimizer:
    one queued pair per matrix); all pairs are solved in one batched call
    (:func:`update_pairs`). With ``matchings > 1`` each matrix instead gets that many rounds of
    a random round robin (:func:`~orthoplug.solvers.pairs.round_robin_pairs`;
    :func:`~orthoplug.solvers.pairs.max_matchings` rounds: every pair once),
    applied one pair after the other on the stale gradient ``g``
    (:func:`~orthoplug.kernels.jobcd.linear_sweep`; the predicted change then bounds the true
    one only for σ ≥ matchings·L_f, so the caller must check the step). Returns the new point
    and the predicted change.
    """
    batch, (n, k) = x.shape[:-2], x.shape[-2:]
    xb, gb = x.reshape(-1, n, k), g.reshape(-1, n, k)
    if matchings > 1:
        new, predicted = _sweep_step(xb, gb, jvec, sigma, theta, generator, matchings)
        return new.reshape(*batch, n, k), predicted
    if pairs is None:
        pairs = random_matching(n, generator, x.device, (xb.shape[0],))  # (nb, m, 2)
    bidx = torch.arange(xb.shape[0], device=x.device)[:, None, None]
    new, predicted = update_pairs(xb, gb[bidx, pairs], pairs, jvec, sigma, theta)
    return new.reshape(*batch, n, k), predicted


class PageSchedule:
    """The PAGE estimator's batch sizes, coins and minibatches (VR-J-JOBCD, both front-ends).

    Defaults: ``b = N``, ``b' = ⌈√b⌉``, ``p = b'/(b + b')``.

    Args:
        num_components: N.
        batch_size: b (reset minibatch).
        small_batch: b' (difference minibatch).
        reset_probability: p.

    Raises:
        ValueError: unless ``1 ≤ b, b' ≤ N`` and ``0 ≤ p ≤ 1``.
    """

    def __init__(self, num_components: int, batch_size: int | None = None,
                 small_batch: int | None = None, reset_probability: float | None = None):
        self.num_components = int(num_components)
        self.b = batch_size or self.num_components
        self.b_small = small_batch or math.ceil(math.sqrt(self.b))
        self.p = (reset_probability if reset_probability is not None
                  else self.b_small / (self.b + self.b_small))
        n = self.num_components
        if not (1 <= self.b <= n and 1 <= self.b_small <= n and 0 <= self.p <= 1):
            raise ValueError(f"invalid batch sizes b={self.b}, b'={self.b_small} or "
                             f"probability p={self.p} for N={n}")

    def draw(self, generator: torch.Generator, device=None) -> tuple[bool, torch.Tensor]:
        """One iteration's coin and minibatch (without replacement, drawn on the generator's
        device, returned on ``device``): ``(True, b indices)`` with probability p (reset), else
        ``(False, b' indices)``."""
        u = float(rand((), generator=generator))
        reset = u < self.p
        idx = randperm(self.num_components, generator=generator)
        return reset, idx[: self.b if reset else self.b_small].to(device)
