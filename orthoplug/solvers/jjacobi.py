r"""Column J-Jacobi sweeps for ``f = s·tr(XᵀCX)`` over square O(J): the engine
(:class:`ColumnJacobi`) behind the solver :class:`ColumnJJacobi` (pymanopt door of that name)
and the geoopt :class:`~orthoplug.adapters.geoopt.ColumnJJacobi` optimizer.

One *sweep* is ``n(n−1)/2`` pair rotations (:mod:`orthoplug.kernels.jjacobi`), in one of three
orders:

* ``"cyclic"`` — row-cyclic ``(0,1), (0,2), …, (n−2, n−1)``;
* ``"random"`` — ``n(n−1)/2`` uniformly random pairs (with replacement) from the run's generator;
* ``"greedy"`` — ``n(n−1)/2`` times the best of ``candidates`` random pairs, by relative
  off-diagonal ``a_ij²/|a_ii a_jj|``.

Before each sweep ``W = G X`` is rebuilt from the current X (``C = Gᵀ Σ G``, factored once), so
rounding in W never accumulates past one sweep. Convergence: a cyclic sweep that rotates no pair
(every off-diagonal below ``tol`` relative) leaves X unchanged, so later sweeps would too; the
engine then reports :attr:`ColumnJacobi.converged`. A random or greedy sweep that rotates nothing
is followed by such a cyclic check.

``D ≠ None`` (``f = s·tr(XᵀCXD)``) is not supported here: after ``X ← X V̂`` the cost
``s·tr(V̂ᵀAV̂D)`` depends on ``A_BB``, ``D_BB`` and on the rows ``(AD)_B·`` (a general 2×2
quadratic in V, not a function of ``A_BB`` alone), which would need ``A`` itself; such costs take
GS-JOBCD (row pairs with the exact curvature, or ``side="column"``: scalar majoriser on the
columns of ``Xᵀ∇f``).

**Second-order column model** (:class:`ColumnModel`, J-JOBCD's ``curvature="hessian"``). For a
general f given only by value, gradient and Hessian-vector products, ``V ↦ f(X V)`` is modelled
around ``V = I`` from one gradient and one Hessian-vector product in the direction X; a sweep of
rounds of disjoint column pairs (:func:`~orthoplug.solvers.pairs.round_robin`) minimises the
model pair by pair, which for ``f = tr(XᵀCX)`` is exactly the parallel (round-robin) column
J-Jacobi method.
"""

from __future__ import annotations

import numpy as np
import torch

from orthoplug.geometry.manifolds import JOrthogonalGeometry
from orthoplug.kernels import runs_compiled
from orthoplug.kernels.jjacobi import rotate_pairs, sweep_cyclic
from orthoplug.kernels.jmodel import model_sweep
from orthoplug.oracles import NonFiniteError
from orthoplug.oracles.abilities import QuadraticArrays

from .base import IterativeSolver
from .pairs import random_pairs

__all__ = ["ColumnJacobi", "ColumnJJacobi", "ColumnModel", "ORDERS", "factor_quadratic"]

ORDERS = ("cyclic", "random", "greedy")


def factor_quadratic(c: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """``(G, Σ)`` with ``C = Gᵀ diag(Σ) G``: Cholesky (``Σ = None``: all +1) when C ≻ 0, else
    ``G = |Λ|^{1/2} Uᵀ``, ``Σ = sign Λ`` from ``C = U Λ Uᵀ``, eigenvalues within rounding of 0
    (``|λ| ≤ n·eps·max|λ|``) counted as 0 (so a PSD C gives a PSD A in floating point too)."""
    try:
        return np.linalg.cholesky(c).T.copy(), None
    except np.linalg.LinAlgError:
        lam, u = np.linalg.eigh(c)
        small = np.abs(lam) <= c.shape[0] * np.finfo(c.dtype).eps * np.abs(lam).max()
        return np.sqrt(np.abs(lam))[:, None] * u.T, np.where(small, 0.0, np.sign(lam))


class ColumnJacobi:
    """Sweeps of column J-Jacobi rotations for one ``(C, s, J)`` (square O(J)).

    Args:
        c: symmetric C (n×n NumPy array, float32/float64).
        scale: s in ``f = s·tr(XᵀCX)``.
        jvec: the signature J (length n, ±1).
        order: ``"cyclic"`` (default), ``"random"`` or ``"greedy"``.
        candidates: candidate pairs per greedy choice.
        tol: relative threshold below which a pair's off-diagonal counts as zero (default
            ``max(1e-12, 100·eps)`` of C's dtype: 1e-12 in float64, 1.2e-5 in float32).
        max_boost: cap ``t_max`` on ``|2μ|`` of one hyperbolic rotation (see the kernel module).
        same_sign: also rotate same-sign pairs (Jacobi rotations that keep f; default True).

    Raises:
        ValueError: on a non-square or non-symmetric C, a J of another length, or bad options.
    """

    def __init__(self, c: np.ndarray, scale: float, jvec, *, order: str = "cyclic",
                 candidates: int = 8, tol: float | None = None, max_boost: float = 4.0,
                 same_sign: bool = True):
        c = np.asarray(c)
        if c.ndim != 2 or c.shape[0] != c.shape[1]:
            raise ValueError(f"C must be a square matrix, got shape {c.shape}")
        jv = np.asarray(jvec, dtype=c.dtype).reshape(-1)
        if jv.size != c.shape[0]:
            raise ValueError(f"J has {jv.size} entries but C is {c.shape[0]}×{c.shape[0]}")
        self.check_options(order, candidates, tol, max_boost)
        if tol is None:
            tol = max(1e-12, 100 * float(np.finfo(c.dtype).eps))
        self.g, sig = factor_quadratic(c)
        self.g = self.g.astype(c.dtype, copy=False)
        self.weighted = sig is not None
        self.sig = np.ones(1, dtype=c.dtype) if sig is None else sig.astype(c.dtype)
        self.gt = np.ascontiguousarray(self.g.T)
        self.jv, self.s = jv, float(scale)
        self.order, self.candidates = order, int(candidates)
        self.tol, self.t_max, self.same_sign = float(tol), float(max_boost), bool(same_sign)
        self.n = c.shape[0]
        self.pairs_per_sweep = self.n * (self.n - 1) // 2
        self.converged = False
        self.rotations = 0
        self._check = False

    @staticmethod
    def check_options(order: str, candidates: int, tol: float | None, max_boost: float) -> None:
        """Raise ``ValueError`` naming a bad option (``order``, ``candidates``, ``tol``,
        ``max_boost``) before any work."""
        if order not in ORDERS:
            raise ValueError(f"pairs (the sweep order) must be one of {ORDERS}, got {order!r}")
        if isinstance(candidates, bool) or not isinstance(candidates, int) or candidates < 1 \
                or not (tol is None or tol >= 0) or not max_boost > 0:
            raise ValueError(f"need candidates an int >= 1, tol >= 0, max_boost > 0; got "
                             f"{candidates!r}, {tol}, {max_boost}")

    def _pairs(self, generator: torch.Generator) -> np.ndarray:
        """(G, m, 2) int64 pair groups of one random (m = 1) or greedy sweep."""
        m = 1 if self.order == "random" else self.candidates
        pairs = random_pairs(self.n, self.pairs_per_sweep * m, generator, "cpu")
        return pairs.numpy().reshape(self.pairs_per_sweep, m, 2)

    def sweep(self, x: np.ndarray, generator: torch.Generator) -> np.ndarray:
        """One sweep from the point ``x`` (n×n); returns the new point (a new array).

        Raises:
            ~orthoplug.oracles.core.NonFiniteError: a block or the new point is not finite
                (``x`` is left unchanged).
        """
        if x.shape != (self.n, self.n):
            raise ValueError(f"X must be {self.n}×{self.n}, got {x.shape}")
        m = self.gt.shape[1]
        yt = np.empty((self.n, m + self.n), dtype=self.gt.dtype)
        np.matmul(x.T, self.gt, out=yt[:, :m])  # (G X)ᵀ: rows are the columns of W
        yt[:, m:] = x.T
        args = (yt, m, self.sig, self.weighted, self.jv, self.s, self.tol, self.t_max,
                self.same_sign)
        if self.order == "cyclic" or self._check:
            count = sweep_cyclic(*args)
            self.converged = count == 0
            self._check = False
        else:
            count = rotate_pairs(*args, self._pairs(generator))
            self._check = count == 0
        new = yt[:, m:].T.copy()
        if count < 0 or not np.isfinite(new).all():
            self.converged = False
            raise NonFiniteError("non-finite column rotation")
        self.rotations += count
        return new

    def outcome(self, f0: float, f1: float) -> tuple[bool, str | None]:
        """After a sweep from cost ``f0`` to ``f1``: whether to undo it, and why to stop.

        Every rotation decreases f in exact arithmetic; a sweep that increased it (beyond
        ``1e-12`` relative) means rounding dominates (e.g. an infimum approached only as
        ``‖X‖ → ∞``): the caller keeps the point before it and stops. A converged cyclic sweep
        stops too (it changed nothing). Both front-ends decide here.
        """
        if self.converged:
            return False, (f"converged: a cyclic sweep rotated no pair (off-diagonals "
                           f"≤ {self.tol:g} relative)")
        if f1 > f0 + 1e-12 * max(1.0, abs(f0)):
            return True, ("stopped: a sweep increased f (rounding dominates the remaining "
                          "decrease); kept the point before it")
        return False, None

    def state_dict(self) -> dict:
        """The sweep state (convergence flag, rotation count, pending cyclic check)."""
        return {"converged": self.converged, "rotations": self.rotations, "check": self._check}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""
        self.converged, self.rotations = bool(state["converged"]), int(state["rotations"])
        self._check = bool(state["check"])


class ColumnJJacobi(IterativeSolver):
    """Column J-Jacobi: sweeps of exact column-pair steps for ``f = s·tr(XᵀCX)`` over square
    O(J) (``XᵀJX = J``), the hyperbolic eigenvalue problem's trace minimisation.

    One iteration is one sweep of ``n(n−1)/2`` pair steps ``X ← X V̂`` (``V ∈ O(J_BB)``), each
    minimising f exactly (:class:`ColumnJacobi`: rotations, hyperbolic boosts capped by
    ``max_boost``); ``W = G X`` is rebuilt before every sweep from a factor of C. A sweep costs
    ``O(n³)`` — about one gradient ``2sCX`` — and no gradient is used. The run stops by itself,
    "converged", once a cyclic sweep rotates no pair; a sweep that raised f (rounding
    dominates) is undone and stops the run. Pick it for ``s·tr(XᵀCX)`` given as a
    :class:`~orthoplug.oracles.core.QuadraticOracle` without D on square O(J): it converges in
    a handful of sweeps where the pair methods of :mod:`orthoplug.solvers.jobcd` take many;
    other costs (a D, iSt, a general f) take :class:`~orthoplug.solvers.jobcd.GSJOBCD` or
    :class:`~orthoplug.solvers.jobcd.JJOBCD`.

    Args:
        pairs: the sweep order, ``"cyclic"`` (default), ``"random"`` or ``"greedy"``
            (:class:`ColumnJacobi`; ``"greedy"`` takes the best of ``candidates`` random
            pairs).
        tol: relative threshold below which a pair counts as diagonal (``None``: the dtype's).
        max_boost: largest hyperbolic boost of one pair step.
        same_sign: also rotate the same-sign pairs (Jacobi rotations that keep f).
        candidates: pairs compared per greedy choice.
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options (default
            ``eval_every``: 1 sweep).

    Raises:
        ValueError: (before any work) bad options, a geometry other than square O(J), or an
            oracle that is not a quadratic ``s·tr(XᵀCX)`` without D.
    """

    name = "ColumnJJacobi"

    def __init__(self, *, pairs: str = "cyclic", tol: float | None = None,
                 max_boost: float = 4.0, same_sign: bool = True, candidates: int = 8,
                 **kwargs):
        super().__init__(**kwargs)
        ColumnJacobi.check_options(pairs, candidates, tol, max_boost)
        self.options = dict(order=pairs, tol=tol, max_boost=max_boost, same_sign=same_sign,
                            candidates=candidates)

    def prepare(self, oracle, x0, geometry):
        n, k = x0.shape[-2:]
        if not isinstance(geometry, JOrthogonalGeometry) or n != k or x0.ndim != 2:
            raise ValueError(f"{self.name} needs a single square point on O(J) (a "
                             f"JOrthogonal manifold), got X of shape {tuple(x0.shape)} on "
                             f"{type(geometry).__name__}")
        if not runs_compiled(x0):
            raise ValueError(f"{self.name} runs compiled CPU sweeps (float32 or float64); got "
                             f"X as {x0.dtype} on {x0.device}: move it to the CPU, or use "
                             "GSJOBCD, whose row steps run on any device")
        return oracle

    def setup(self, run):
        tracker = run.tracker
        if not (isinstance(tracker, QuadraticArrays) and tracker.da is None):
            raise ValueError(f"{self.name} needs f = s·tr(XᵀCX): pass "
                             "oracle=QuadraticOracle(C) (without D); got "
                             f"{type(tracker.oracle).__name__}")
        run.jacobi = ColumnJacobi(tracker.ca, tracker.s, run.geometry.jk.values,
                                  **self.options)

    def step(self, run):
        tracker = run.tracker
        x, f0 = tracker.x, float(tracker.value())
        new = run.jacobi.sweep(x.detach().numpy(), run.generator)
        tracker.set_point(torch.from_numpy(new))
        undo, run.finished = run.jacobi.outcome(f0, float(tracker.value()))
        if undo:
            tracker.set_point(x)

    def info(self, run=None):
        out = {"pairs": self.options["order"], **{k: v for k, v in self.options.items()
                                                  if k != "order"}}
        if run is not None:
            out["rotations"] = run.jacobi.rotations
        return out


#: a same-sign pair's model counts as constant on O(2) when ``‖M_BB − S_BB‖ ≤ FLAT·‖S_BB‖``
FLAT = 1e-8


class ColumnModel:
    r"""Second-order model of ``V ↦ f(X V)`` near ``V = I`` for column steps on square O(J).

    With ``W = V − I``, ``M = Xᵀ∇f(X)`` and ``S = sym(Xᵀ ∇²f(X)[X])`` (one gradient and one
    Hessian-vector product in the direction X)

        f(X V) ≈ f(X) + ⟨M, W⟩ + ½ tr(Wᵀ S W).

    The quadratic term assumes ``∇²f(X)[XW] = ∇²f(X)[X]·W`` (a Hessian acting from the left),
    which holds for ``f = s·tr(XᵀCX)`` — then ``M = S = 2s XᵀCX`` and the model is exact for
    every V — and is an approximation otherwise (the caller tests each step on f). For W block
    diagonal over disjoint column pairs B the model separates exactly: pair B sees
    ``⟨M_BB, W_B⟩ + ½ tr(W_Bᵀ S_BB W_B)``, a 2×2 subproblem with the 4×4 curvature ``I₂ ⊗ S_BB``
    (column-major vec), solved over ``O(J_BB)`` after ``S_BB`` is clipped to its PSD part and the
    damping θ added.

    On a same-sign pair (V_B ∈ O(2)) the model is ``⟨M_BB − S_BB, V_B − I⟩`` plus θ: constant
    when ``M_BB = S_BB``, as for the trace cost (``tr(VᵀAV)`` is invariant under orthogonal V).
    There the step takes the classical Jacobi rotation that diagonalises ``S_BB`` instead (a
    gauge choice, free in the model), as column J-Jacobi does: without it the same-sign blocks
    are never diagonalised and the sweeps converge only linearly (about 6× per sweep).

    After a pair step the model is moved to the new point without new derivatives:
    ``m(V₁V₂) = m(V₁) + ⟨M', W₂⟩ + ½ tr(W₂ᵀ S' W₂)`` with ``M' = V₁ᵀ(M + S W₁)``,
    ``S' = V₁ᵀ S V₁`` (exact algebra; for the trace cost M' = S' = 2s (XV₁)ᵀC(XV₁)), so a whole
    sweep of rounds runs on one model in the compiled kernel
    :func:`~orthoplug.kernels.jmodel.model_sweep` (O(n) per pair).

    Args:
        x: the point X (n×n).
        gradient: ``∇f(X)``.
        hessian_x: ``∇²f(X)[X]``.
    """

    def __init__(self, x: torch.Tensor, gradient: torch.Tensor, hessian_x: torch.Tensor):
        xt = x.detach().cpu().numpy().astype(np.float64).T  # the model lives on the host
        self.m = xt @ gradient.detach().cpu().numpy()
        s = xt @ hessian_x.detach().cpu().numpy()
        self.s = 0.5 * (s + s.T)
        #: the model's curvature scale ``mean |S_ii|`` (for damping relative to it)
        self.scale = float(np.abs(np.diagonal(self.s)).mean())

    def sweep(self, rounds: np.ndarray, jvec: np.ndarray,
              theta: float) -> tuple[np.ndarray, float, int]:
        """Minimise the model pair by pair over the rounds ``rounds`` (R, K, 2) of disjoint
        column pairs, θ added to each pair's curvature (the model itself is left unchanged).

        Returns:
            The step V (n×n, J-orthogonal: X ← X V), the model's predicted change (≤ 0 up to
            the Jacobi rotations of constant same-sign pairs, which change it by O(θ)) and the
            number of pairs the one-pair kernel could not solve (left at I).
        """
        v = np.eye(self.m.shape[0])
        predicted, skipped = model_sweep(self.m.copy(), self.s.copy(), v, jvec, rounds,
                                         theta, FLAT)
        return v, predicted, skipped
