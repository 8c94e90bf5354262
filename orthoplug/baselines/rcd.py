r"""RCD: Riemannian coordinate descent with Givens rotations (Han, Jawanpuria & Mishra 2024).

For a row pair (i, j) the rotation ``x_i ← cos θ x_i + sin θ x_j``,
``x_j ← −sin θ x_i + cos θ x_j`` changes F at rate ``dF/dθ = g_i·x_j − g_j·x_i`` (rows of
G = ∇F and X); RCD takes ``θ = −η (g_i·x_j − g_j·x_i)``. This is RSDM-P with r = 2 and the
exponential retraction (up to the factor 2 of the skew part). One iteration is a sweep over all
n(n−1)/2 pairs, arranged as n−1 rounds of ⌊n/2⌋ disjoint pairs (a round-robin schedule, randomly
relabelled every sweep) so that each round is one vectorised update:

* ``gradient="sweep"`` (default, the linearised variant): G is evaluated once per sweep;
  O(n²p) per sweep plus one gradient. On float64 CPU tensors the rounds run in a compiled
  kernel (:func:`orthoplug.kernels.rcd.givens_rounds`), other devices keep the torch rounds.
* ``gradient="round"``: the rows of G are re-read before every round (exact coordinate
  gradients; a full gradient per round unless the oracle tracks gradient rows).

Stays feasible (products of rotations). A sweep stops after the round during which the run's
``max_time`` runs out (compiled: after the first round, then after the chunk of rounds,
:data:`SWEEP_CHUNK` row entries, during which it runs out).
"""

from __future__ import annotations

import math

import torch

from orthoplug._random import randperm
from orthoplug.kernels import runs_compiled
from orthoplug.kernels.rcd import givens_rounds
from orthoplug.oracles import finite
from orthoplug.solvers.base import IterativeSolver
from orthoplug.solvers.pairs import round_robin

__all__ = ["RCD"]

#: row-entry rotations per call of the compiled sweep (the time limit is checked between calls)
SWEEP_CHUNK = 1 << 17


class RCD(IterativeSolver):
    """Givens-rotation coordinate descent on St(n, p); one iteration = one sweep of all pairs.

    Args:
        step_size: η > 0.
        gradient: ``"sweep"`` (linearised, default) or ``"round"``.
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options.
    """

    name = "RCD"

    def __init__(self, *, step_size: float = 0.1, gradient: str = "sweep", **kwargs):
        super().__init__(**kwargs)
        if not (isinstance(step_size, (int, float)) and math.isfinite(step_size)
                and step_size > 0):
            raise ValueError(f"step_size must be a finite number > 0, got {step_size!r}")
        if gradient not in ("sweep", "round"):
            raise ValueError(f"gradient must be 'sweep' or 'round', got {gradient!r}")
        self.step_size, self.gradient = float(step_size), gradient

    def prepare(self, oracle, x0, geometry):
        if x0.ndim != 2 or x0.shape[-2] < 2:
            raise ValueError(f"{self.name} takes one n×p matrix with n >= 2, "
                             f"got {tuple(x0.shape)}")
        return oracle

    def setup(self, run):
        x = run.tracker.x
        run.rounds = round_robin(x.shape[-2], x.device)

    def _rotate(self, x, g, i, j):
        xi, xj, gi, gj = x[i], x[j], g[0], g[1]
        theta = -self.step_size * ((gi * xj).sum(-1) - (gj * xi).sum(-1))
        c, s = torch.cos(theta)[:, None], torch.sin(theta)[:, None]
        return c * xi + s * xj, c * xj - s * xi

    def _compiled_sweep(self, x, g, rounds, out_of_time) -> None:
        """The sweep's rounds in the compiled kernel (float64 CPU arrays), in calls of about
        :data:`SWEEP_CHUNK` row-entry rotations (the first call: one round) with
        ``out_of_time()`` (:meth:`~orthoplug.solvers.base.Run.out_of_time`) checked between
        calls."""
        n_rounds = rounds.shape[0]
        per_call = max(1, SWEEP_CHUNK // max(1, rounds.shape[1] * x.shape[1]))
        first, last = 0, 1
        while first < n_rounds:
            givens_rounds(x, g, rounds, first, last, self.step_size)
            if out_of_time():  # a partial sweep is still feasible
                return
            first, last = last, min(n_rounds, last + per_call)

    def step(self, run):
        tracker = run.tracker
        n = tracker.x.shape[-2]
        relabel = randperm(n, generator=run.generator, device=tracker.x.device)
        rounds = relabel[run.rounds]
        if self.gradient == "sweep":
            x, g = tracker.x.clone(), tracker.gradient()
            if runs_compiled(x) and x.dtype == g.dtype == torch.float64:
                self._compiled_sweep(x.numpy(), g.contiguous().numpy(), rounds.numpy(),
                                     run.out_of_time)
            else:
                for pairs in rounds:
                    i, j = pairs[:, 0], pairs[:, 1]
                    x[i], x[j] = self._rotate(x, (g[i], g[j]), i, j)
                    if run.out_of_time():  # a partial sweep is feasible
                        break
            finite(x, "RCD sweep")
            tracker.set_point(x)
            return
        for pairs in rounds:
            i, j = pairs[:, 0], pairs[:, 1]
            rows = torch.cat([i, j])
            g = tracker.gradient_rows(rows)
            k = i.shape[0]
            new_i, new_j = self._rotate(tracker.x, (g[:k], g[k:]), i, j)
            new = torch.cat([new_i, new_j])
            finite(new, "RCD update")
            tracker.set_rows(rows, new)
            if run.out_of_time():
                break

    def info(self, run=None):
        return {"step_size": self.step_size, "gradient": self.gradient}
