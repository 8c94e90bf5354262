r"""The OBCD paper's experiments: ℓ0-SPCA, ℓ1-SPCA and nonnegative PCA on St(n, r).

Problems (:mod:`orthoplug.problems.spca`; data ``A`` scaled to ``A/‖A‖_F``, ``C = AᵀA``, so
``tr C = 1`` and ``f ∈ [−1, 0]``):

* **ℓ0-SPCA** ``−tr(XᵀCX) + λ‖X‖₀`` (the paper's Table 1: final F at the time limit, 30–40 s,
  r = 20, for OBCD and LADMM / RADMM / PSM from "id" and "rnd" starts);
* **ℓ1-SPCA** ``−tr(XᵀCX) + λ‖X‖₁`` (Table 2: final F, 60 s, r = 20; baselines RSSM, LADMM,
  RSubGrad, ADMM, ManPG, all from a random start);
* **NN-PCA** ``−½ tr(XᵀCX)`` s.t. ``X ≥ 0`` (Table 3: f and ``‖min(0, X)‖_F``, 60 s,
  r ∈ {10, 20, 40, 80}; baselines LADMM, PSM, RADMM; curves of ``f + 1000‖min(0, X)‖_F``).

The paper's λ ∈ {10, …, 1000} are degenerate once ``tr C = 1`` (for λ ≥ 1 every ℓ0 optimum is a
signed partial permutation), so λ is set relative to the top eigenvalue ``λ₁(C)``:
``λ_ℓ1 = 0.5 λ₁/√n`` and ``λ_ℓ0 = 0.5 λ₁/n`` (:func:`spca_lambda`). The paper's datasets (w1a,
TDT2, 20News, …) are not bundled; the offline stand-ins are scikit-learn's digits (n = 64),
16×16×3 patches of its sample images (n = 768) and Gaussian matrices (the paper's "randn"
500 × 1000; 500 × 300 as a second quick instance).

Methods, each under the same wall-clock limit:

* ``OBCD`` — random pairs (k = 2), exact block curvature, θ = 1e-5, from ``I(n, r)`` (the
  paper's OBCD-R(id)); ``OBCD-Jacobi`` — n/2 disjoint pairs per iteration; ``OBCD-rnd`` — plain
  OBCD from the shared random start, the start OBCD-sparse gets (what its stages add);
* ``OBCD-sparse`` (:class:`~orthoplug.solvers.sparse_obcd.SparseOBCD`, not in the paper) — from
  the shared random start, a pipeline of stages budgeted in iterations (its class docstring):
  the lowest-F of that start and the diagonal and PCA starts (after an exact column-pair
  rotation sweep, which leaves f unchanged); for continuous h (ℓ1) a polar-prox stage, for ℓ0
  and NN-PCA a linearised-ADMM splitting stage (RADMM's iteration for NN-PCA, with a partition
  search on its rounded points and after it); then OBCD's exact pair steps on the best of 16
  sampled pairs in the compiled loop, with a compiled column sweep every n pair steps; for ℓ0,
  once the pair steps stall, restarts of the splitting from freshly swept starts. Each
  stage's iterations, gradients and share of the decrease are in its result's
  ``info["stages"]``;
* ``ManPG`` (:mod:`orthoplug.baselines.manpg`, t = 1/L) from the shared random start (on NN-PCA
  a random 0/1-column partition, feasible); on ℓ0 it uses the hard-threshold prox (a heuristic:
  ManPG's theory needs a convex, Lipschitz h) and on NN-PCA the projection ``max(0, ·)`` (the
  indicator is convex but not Lipschitz; the polar step can leave ``X ≥ 0``, such trials have
  F = ∞ and are rejected by the line search, so its iterates stay feasible). Not one of the
  paper's NN-PCA baselines;
* ``RSubGrad`` (ℓ1 only; ``∂‖·‖₀ = 0`` off the zeros, so it would solve plain PCA on ℓ0);
* ``sparsepca`` — A-ManPG of the PyPI package ``sparsepca`` (Chen et al.; in the ``bench``
  extra) for the Zou–Hastie–Tibshirani formulation with λ₂ = ∞, ℓ1 only; offered only when the
  package is importable (silently skipped otherwise). Its objective is not ours: it solves
  ``min_{X ∈ St(n, r), Y} −2 tr(XᵀCY) + ‖Y‖²_F + Σ_j λ_j‖Y_{:j}‖₁`` — the orthonormal X and
  the sparse loadings Y are separate matrices (for fixed X, ``Y = soft(CX, λ/2)``; for λ = 0
  it is PCA) — whereas ours asks one matrix to be orthonormal *and* sparse. Its loadings are
  mapped to St(n, r) by the polar factor and scored with our F; it has no time limit and runs
  to its own iteration limit (``maxiter`` 500, 50 at quick scale);
* ``pymanopt-SD`` / ``pymanopt-CG`` (ℓ1 only) — pymanopt's smooth solvers on St(n, r) with the
  a.e. gradient ``−2CX + λ sign(X)`` (a heuristic on a nonsmooth cost). On ℓ0 the a.e. gradient
  of h is 0 (they would solve PCA) and on NN-PCA the indicator has no gradient: without a
  penalty term of our own invention they do not apply, so they are not offered there.

* ``LADMM``, ``RADMM``, ``PSM`` (ℓ0-SPCA and NN-PCA; LADMM also on ℓ1) — the paper's splitting
  baselines (:mod:`orthoplug.baselines.ladmm`, :mod:`~orthoplug.baselines.radmm`,
  :mod:`~orthoplug.baselines.psm`) from the shared random start, with our penalty defaults
  (the paper gives none). Their iterates split X (orthonormal) from Y (sparse / nonnegative);
  they are scored at X, for NN-PCA at its rounding to the feasible set (disjoint column
  supports). On ℓ0 X is dense until ``X = Y`` to 1e-6, so its count is large: the paper
  does not say where it scored them.

The paper's plain ADMM is not implemented. No grids: the paper gives no step sizes for its
baselines.

Scoring (:meth:`CompositeExperiment.evaluate`): ``objective`` = F (NN-PCA: f), ``violation`` =
``‖XᵀX − I‖_F``; metric ``nnz`` = ``#{|X_ij| > 1e-6}``, which is also the ℓ0 term of the
reported ℓ0-SPCA objective ``f + λ·nnz`` (as in the paper, for numerical stability). For NN-PCA
the violation is the *sum* ``‖XᵀX − I‖_F + ‖min(0, X)‖_F`` (both are zero exactly at a feasible
point), with the two parts as metrics ``orthogonality`` and ``nonneg_violation`` and the
paper's curve value ``penalized = f + 1000‖min(0, X)‖_F``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from orthoplug.baselines.ladmm import LADMM
from orthoplug.baselines.manpg import ManPG
from orthoplug.baselines.psm import PSM
from orthoplug.baselines.radmm import RADMM
from orthoplug.baselines.rsubgrad import RSubGrad
from orthoplug.bench.core import (
    Experiment,
    Instance,
    Method,
    Outcome,
    budget,
    custom_method,
    pymanopt_method,
    solver_history,
)
from orthoplug.geometry.stiefel import StiefelGeometry, polar
from orthoplug.problems import spca
from orthoplug.solvers.obcd import OBCD
from orthoplug.solvers.sparse_obcd import SparseOBCD

__all__ = ["EXPERIMENTS", "CompositeExperiment", "L0SPCA", "L1SPCA", "NNPCA", "spca_datasets",
           "spca_lambda", "sparsepca_loadings", "solver_outcome", "obcd_method",
           "sparse_obcd_method", "splitting_methods", "manpg_method",
           "rsubgrad_method", "NEG_PENALTY"]

#: weight of ``‖min(0, X)‖_F`` in the paper's NN-PCA curves
NEG_PENALTY = 1000.0


# ---- data -------------------------------------------------------------------------------------


def spca_datasets(scale: str, seed: int = 0) -> dict[str, np.ndarray]:
    """The SPCA/NN-PCA data matrices (samples × features) of a scale, by table name."""
    out = {"digits": spca.digits_data(), "gauss-500x300": spca.gaussian_data(500, 300, seed=seed)}
    if scale == "paper":
        out["patches-768"] = spca.image_patches(16, 3000, seed=seed)
        out["gauss-500x1000"] = spca.gaussian_data(500, 1000, seed=seed + 1)
    return out


def spca_lambda(c: torch.Tensor, kind: str) -> float:
    """λ relative to ``λ₁(C)``: ``0.5 λ₁/√n`` (``"l1"``) or ``0.5 λ₁/n`` (``"l0"``).

    A fully dense unit column then costs at most ``λ₁/2``, so solutions are neither trivially
    dense nor one nonzero per column.
    """
    n = c.shape[0]
    lam1 = float(torch.linalg.eigvalsh(c)[-1])
    return 0.5 * lam1 / (math.sqrt(n) if kind == "l1" else n)


def sparsepca_loadings(a: np.ndarray, lam: float, r: int,
                       maxiter: int = 500) -> tuple[np.ndarray, int] | None:
    """A-ManPG of the package ``sparsepca`` on ``A/‖A‖_F`` with ℓ1 weight λ per component.

    It has no time limit: ``maxiter`` bounds the run.

    Returns ``(loadings n × r, iterations)``, or ``None`` when the package is not installed.
    """
    try:
        import sparsepca
    except ImportError:
        return None
    a = np.asarray(a, dtype=float) / np.linalg.norm(a)
    out = sparsepca.spca(a, lam * np.ones((r, 1)), np.inf, k=r, normalize=False,
                         maxiter=maxiter, tol=1e-10)
    return np.asarray(out["loadings"]), int(out["iter"])


# ---- experiments ------------------------------------------------------------------------------


@dataclass
class CompositeData:
    """What an instance holds: the problem ``f + h`` and the raw data (``None`` if synthetic)."""

    problem: spca.SPCAProblem
    a: np.ndarray | None = None


class CompositeExperiment(Experiment):
    """``min f(X) + h(X)`` on St(n, r) with ``instance.data`` a :class:`CompositeData`.

    The method runners below only use these hooks, so other suites reuse them on their own
    instances (:mod:`orthoplug.bench.suites.rssm`).
    """

    suite = "obcd"
    metrics: tuple[str, ...] = ("nnz",)

    def oracle(self, instance: Instance):
        """The smooth part f (a quadratic oracle: OBCD's fast path and exact curvature)."""
        return instance.data.problem.oracle

    def subgradient_oracle(self, instance: Instance):
        """The f oracle the subgradient methods use (may offer column access)."""
        return self.oracle(instance)

    def penalty(self, instance: Instance):
        """The separable term h."""
        return instance.data.problem.h

    def start(self, instance: Instance, kind: str, seed: int) -> torch.Tensor:
        """``I(n, r)`` (``"identity"``) or the seeded random feasible start (``"random"``)."""
        return instance.data.problem.initial_point(kind, seed)

    def initial_point(self, instance: Instance, seed: int) -> np.ndarray:
        return self.start(instance, "random", seed).numpy()

    def evaluate(self, instance: Instance, point) -> dict[str, float]:
        prob = instance.data.problem
        x = torch.as_tensor(np.asarray(point), dtype=torch.float64)
        orth = float(StiefelGeometry(*x.shape).violation(x))
        return {"objective": prob.objective(x), "violation": orth, "nnz": spca.count_l0(x)}


class _SPCA(CompositeExperiment):
    """ℓ0/ℓ1-SPCA: r = 20 on every dataset, λ from :func:`spca_lambda`."""

    kind = ""
    rank = 20

    def instances(self, scale: str, seed: int) -> list[Instance]:
        make = spca.l1_spca if self.kind == "l1" else spca.l0_spca
        out = []
        for name, a in spca_datasets(scale, seed).items():
            c = spca.covariance(a)
            r = min(self.rank, c.shape[0])
            lam = spca_lambda(c, self.kind)
            rule = "0.5 λ₁(C)/√n" if self.kind == "l1" else "0.5 λ₁(C)/n"
            sizes = {"m": a.shape[0], "n": c.shape[0], "r": r, "lam": float(f"{lam:.4g}")}
            out.append(Instance(name, sizes,
                                CompositeData(make(c, r, lam), a), note=f"λ = {lam:.3g} = {rule}"))
        return out


class L0SPCA(_SPCA):
    """ℓ0-SPCA ``−tr(XᵀCX) + λ‖X‖₀`` (Table 1)."""

    name = "l0-spca"
    kind = "l0"
    title = "ℓ0-regularised sparse PCA"
    objective_label = "F = −tr(XᵀCX) + λ‖X‖₀"
    time_limits = {"quick": 1.5, "paper": 30.0}

    def methods(self, scale: str) -> list[Method]:
        return [obcd_method("OBCD"), obcd_method("OBCD-Jacobi", pairs="jacobi"),
                obcd_method("OBCD-rnd", start="random"), sparse_obcd_method(), manpg_method(),
                *splitting_methods()]

    def evaluate(self, instance: Instance, point) -> dict[str, float]:
        """As the paper reports it: ``F = f + λ·nnz`` with the thresholded count ``nnz``."""
        scores = super().evaluate(instance, point)
        prob = instance.data.problem
        scores["objective"] = prob.f(np.asarray(point)) + prob.h.lam * scores["nnz"]
        return scores


class L1SPCA(_SPCA):
    """ℓ1-SPCA ``−tr(XᵀCX) + λ‖X‖₁`` (Table 2)."""

    name = "l1-spca"
    kind = "l1"
    title = "ℓ1-regularised sparse PCA"
    objective_label = "F = −tr(XᵀCX) + λ‖X‖₁"
    time_limits = {"quick": 1.5, "paper": 60.0}

    def methods(self, scale: str) -> list[Method]:
        methods = [obcd_method("OBCD"), obcd_method("OBCD-Jacobi", pairs="jacobi"),
                   obcd_method("OBCD-rnd", start="random"), sparse_obcd_method(),
                   manpg_method(), *splitting_methods(("LADMM",)),
                   rsubgrad_method(),
                   pymanopt_method("pymanopt-SD", "pymanopt",
                                   "pymanopt.optimizers:SteepestDescent"),
                   pymanopt_method("pymanopt-CG", "pymanopt",
                                   "pymanopt.optimizers:ConjugateGradient")]
        try:
            import sparsepca  # noqa: F401
        except ImportError:
            return methods
        maxiter = 50 if scale == "quick" else 500
        return [*methods, custom_method("sparsepca", "external", _run_sparsepca,
                                        {"maxiter": maxiter})]

    def pymanopt_problem(self, instance: Instance):
        """F on pymanopt's Stiefel with the a.e. gradient ``2s CX + λ sign(X)`` (numpy)."""
        import pymanopt

        prob = instance.data.problem
        c, s, lam = prob.c.numpy(), prob.scale, prob.h.lam
        manifold = pymanopt.manifolds.Stiefel(prob.n, prob.r)

        @pymanopt.function.numpy(manifold)
        def cost(x):
            return float(s * np.sum(x * (c @ x)) + lam * np.abs(x).sum())

        @pymanopt.function.numpy(manifold)
        def euclidean_gradient(x):
            return 2.0 * s * (c @ x) + lam * np.sign(x)

        return pymanopt.Problem(manifold, cost, euclidean_gradient=euclidean_gradient)


class NNPCA(CompositeExperiment):
    """Nonnegative PCA ``−½ tr(XᵀCX)``, ``X ≥ 0`` (Table 3)."""

    name = "nn-pca"
    title = "nonnegative PCA"
    objective_label = "f = −½ tr(XᵀCX)"
    metrics = ("nnz", "orthogonality", "nonneg_violation", "penalized")
    time_limits = {"quick": 1.5, "paper": 60.0}

    def instances(self, scale: str, seed: int) -> list[Instance]:
        ranks = (10,) if scale == "quick" else (10, 20, 40, 80)
        out = []
        for name, a in spca_datasets(scale, seed).items():
            c = spca.covariance(a)
            for r in (r for r in ranks if r <= c.shape[0]):
                out.append(Instance(f"{name}/r={r}", {"m": a.shape[0], "n": c.shape[0], "r": r},
                                    CompositeData(spca.nn_pca(c, r), a)))
        return out

    def methods(self, scale: str) -> list[Method]:
        return [obcd_method("OBCD"), obcd_method("OBCD-Jacobi", pairs="jacobi"),
                obcd_method("OBCD-rnd", start="random"), sparse_obcd_method(), manpg_method(),
                *splitting_methods()]

    def evaluate(self, instance: Instance, point) -> dict[str, float]:
        x = torch.as_tensor(np.asarray(point), dtype=torch.float64)
        f = instance.data.problem.f(x)
        orth = float(StiefelGeometry(*x.shape).violation(x))
        neg = spca.nonneg_violation(x)
        return {"objective": f, "violation": orth + neg, "nnz": spca.count_l0(x),
                "orthogonality": orth, "nonneg_violation": neg,
                "penalized": f + NEG_PENALTY * neg}


# ---- methods ----------------------------------------------------------------------------------


def solver_outcome(solver, oracle, x0: torch.Tensor) -> Outcome:
    """Run an orthoplug solver on St(n, r) from ``x0``; point, iterations and (time, cost). The
    message is the stop reason, followed for a pipeline of stages (SparseOBCD) by each stage's
    iterations and share of the decrease of F."""
    res = solver.run(oracle, x0, StiefelGeometry(*x0.shape))
    message = res.stop_reason
    if res.info.get("stages"):
        message += "; stages: " + ", ".join(
            f"{s['name']} {s['iterations']} {s['unit']} ({100 * s['decrease_share']:.1f} %)"
            for s in res.info["stages"])
    return Outcome(point=res.point.detach().numpy().copy(), iterations=res.iterations,
                   history=solver_history(res), message=message)


def _run_obcd(experiment: CompositeExperiment, instance: Instance, *, seed: int,
              time_limit: float, start: str = "identity", solver_class: type = OBCD,
              **options) -> Outcome:
    solver = solver_class(experiment.penalty(instance), seed=seed, **budget(time_limit, options))
    return solver_outcome(solver, experiment.oracle(instance),
                          experiment.start(instance, start, seed))


def _run_sparse_obcd(experiment: CompositeExperiment, instance: Instance, *, seed: int,
                     time_limit: float, start: str = "random", **options) -> Outcome:
    return _run_obcd(experiment, instance, seed=seed, time_limit=time_limit, start=start,
                     solver_class=SparseOBCD, **options)


def sparse_obcd_method() -> Method:
    """:class:`~orthoplug.solvers.sparse_obcd.SparseOBCD` from the shared random start (the
    start ManPG gets): its stages (starts, prox or splitting, partition search), then greedy
    pairs and column sweeps."""
    return custom_method("OBCD-sparse", "orthoplug", _run_sparse_obcd, {"eval_every": 10})


def obcd_method(name: str, *, pairs: str = "random", start: str = "identity") -> Method:
    """OBCD (k = 2, exact curvature, θ = 1e-5) from ``I(n, r)`` (``start="identity"``) or the
    shared random start (``"random"``); random pairs (an iteration: n/2 pairs) or Jacobi (an
    iteration: one matching); evaluated every 5 iterations."""
    every = 5
    return custom_method(name, "orthoplug", _run_obcd,
                         {"pairs": pairs, "eval_every": every, "start": start})


def _run_manpg(experiment: CompositeExperiment, instance: Instance, *, seed: int,
               time_limit: float, start: str = "random", **options) -> Outcome:
    solver = ManPG(experiment.penalty(instance), **budget(time_limit, options))
    return solver_outcome(solver, experiment.oracle(instance),
                          experiment.start(instance, start, seed))


def manpg_method() -> Method:
    """ManPG (t = 1/L, growing by 1.01) from the shared random start."""
    return custom_method("ManPG", "baseline", _run_manpg,
                         {"eval_every": 1, "min_gradient_norm": 1e-9})


_SPLITTING = {"LADMM": LADMM, "RADMM": RADMM, "PSM": PSM}


def _run_splitting(experiment: CompositeExperiment, instance: Instance, *, seed: int,
                   time_limit: float, method: str, start: str = "random",
                   **options) -> Outcome:
    solver = _SPLITTING[method](experiment.penalty(instance), **budget(time_limit, options))
    return solver_outcome(solver, experiment.oracle(instance),
                          experiment.start(instance, start, seed))


def splitting_methods(names=("LADMM", "RADMM", "PSM")) -> list[Method]:
    """The paper's splitting baselines (:mod:`orthoplug.baselines.ladmm`, ``radmm``, ``psm``)
    from the shared random start; scored at their orthonormal X (rounded to the feasible set
    for NN-PCA)."""
    return [custom_method(name, "baseline", _run_splitting, {"method": name, "eval_every": 20})
            for name in names]


def _run_rsubgrad(experiment: CompositeExperiment, instance: Instance, *, seed: int,
                  time_limit: float, start: str = "random", **options) -> Outcome:
    solver = RSubGrad(h=experiment.penalty(instance), seed=seed, return_best=True,
                      **budget(time_limit, options))
    return solver_outcome(solver, experiment.subgradient_oracle(instance),
                          experiment.start(instance, start, seed))


def rsubgrad_method() -> Method:
    """RSubGrad (its default step rule), best evaluated point returned, then its final
    proximal pass."""
    return custom_method("RSubGrad", "baseline", _run_rsubgrad, {"eval_every": 10})


def _run_sparsepca(experiment: CompositeExperiment, instance: Instance, *, seed: int,
                   time_limit: float, maxiter: int = 500) -> Outcome:
    prob = instance.data.problem
    t0 = time.perf_counter()
    loadings, iterations = sparsepca_loadings(instance.data.a, prob.h.lam, prob.r, maxiter)
    x = polar(torch.as_tensor(loadings))
    return Outcome(point=x.numpy(), iterations=iterations,
                   history=[(time.perf_counter() - t0, prob.objective(x))],
                   message=f"own iteration limit (maxiter = {maxiter}), not time-limited")


EXPERIMENTS: list[Experiment] = [L0SPCA(), L1SPCA(), NNPCA()]
