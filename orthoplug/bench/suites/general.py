r"""Our own instances of the general problem families, next to the papers' suites.

The paper suites reproduce the papers' tables; this suite asks the user's question instead —
which solver for which *kind* of problem — on instances generated here from the suite's seed
(scikit-learn's bundled tabular data, Gaussian and synthetic matrices; nothing is downloaded).
Quick scale fits in about a minute; paper scale uses the sizes named below.

Experiments (``EXPERIMENTS``):

* ``quadratic-oj`` — ``min tr(XᵀCXD)`` over square O(J) (``D = I``) and rectangular iSt(n, k)
  (``D = diag(d)``, ``d`` uniform in [½, 2]), both signatures ``p = 3n/4`` and ``p = n/4``
  (``k₊ = round(k·p/n)``), ``C = DᵀD/n + 10⁻²I`` for a Gaussian ``D``
  (:func:`~orthoplug.problems.hevp.make_spd`). Certified optimum: the hyperbolic eigenvalue
  certificate (:func:`~orthoplug.linalg.trace_min_certificate`). Quick: O(J) n = 40, iSt
  n = 120, k = 12; paper: O(J) n = 200, iSt n = 400, k = 40. Methods: ``HyperbolicEig`` (the
  direct pencil solve), GS-JOBCD (row pairs), ``ColumnJJacobi`` (square O(J) instances only),
  pymanopt CG and TR.
* ``quadratic-sparse`` — the same cost with a banded sparse ``C``
  (:func:`~orthoplug.problems.hevp.make_banded_spd`, bandwidth 2) over iSt(n, 20),
  ``k₊ = k₋ = 10``, J half +1 half −1 (shuffled): ``HyperbolicEig``'s Lanczos path
  (:func:`~orthoplug.linalg.hyperbolic_trace_min` on the sparse matrix) against pymanopt CG and TR
  given the same sparse C (products ``C @ X`` only), all from the J-orthonormal start of unit
  vectors (a random iSt point of this size is an n×n construction). Quick n = 1000 (with the
  dense certificate), paper n = 10⁴ (no certificate: the dense pencil is 10⁴×10⁴; ranked by the
  objective).
* ``smooth-oj`` — a smooth non-quadratic cost over O(J),
  ``f(X) = ½‖XᵀAX − B‖²_F + tr(XᵀCX)`` with ``A``, ``C`` from
  :func:`~orthoplug.problems.hevp.make_spd` and ``B = diag(b)``, ``b`` uniform in [1, 2]
  (bounded below by the certificate of its trace term; no known minimum). Gradient
  ``2AXR + 2CX`` (``R = XᵀAX − B``), Hessian ``2AUR + 2AX(UᵀAX + XᵀAU) + 2CU``. Quick n = 16,
  paper n = 50, both signatures. Methods: :data:`SMOOTH_OJ_METHODS` (one row per method: a new
  solver is one more line there).
* ``l1-spca-general`` — ℓ1-SPCA ``−tr(XᵀCX) + λ‖X‖₁`` on St(n, r) from the shared random start,
  λ = ``0.5 λ₁(C)/√n`` as in the OBCD suite, on scikit-learn's ``breast_cancer`` (569 × 30, r = 5)
  with every feature standardised, and Gaussian data (quick 200 × 100, r = 10; paper
  1000 × 500, r = 20): OBCD (from the random start), OBCD-sparse, ManPG, RSSM-4.
* ``pca-general`` / ``procrustes-general`` — smooth Stiefel problems of the RSDM suite's kinds
  (:class:`~orthoplug.problems.stiefel_problems.PCAProblem` with condition number 1000,
  :class:`~orthoplug.problems.stiefel_problems.ProcrustesProblem`; certified optima from the
  eigenvalues and the SVD) at two shapes, tall ``p = n/5`` and wide ``p = 4n/5``: quick
  n = 300, paper n = 1500. RSDM-P with its defaults (slice dimension
  :func:`~orthoplug.solvers.rsdm.default_slice_dimension`, Armijo steps: no tuning) against
  pymanopt CG.
* ``dpcp-general`` — DPCP with a small codimension (c = n/10: quick n = 100, paper n = 500,
  5d inliers and as many outliers) from the spectral start: RSSM-4 and RSSM-10 with the DPCP
  rule of the RSSM suite, against RSubGrad with geometric steps.

Time limits: 1–2 s per run at quick scale, 20–60 s at paper scale.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from orthoplug.bench.core import (
    Experiment,
    Instance,
    Method,
    Outcome,
    custom_method,
    pymanopt_method,
)
from orthoplug.bench.suites.jobcd import (
    _PYMANOPT_OPTIONS,
    _JOrthogonalExperiment,
    quadratic_pymanopt_problem,
    solver_method,
)
from orthoplug.bench.suites.obcd import (
    L1SPCA,
    CompositeData,
    manpg_method,
    obcd_method,
    sparse_obcd_method,
    spca_lambda,
)
from orthoplug.bench.suites.rsdm import PCAExperiment, ProcrustesExperiment, _solver_runner
from orthoplug.bench.suites.rssm import DPCPExperiment, dpcp_problem_instance, rssm_method
from orthoplug.geometry.manifolds import IndefiniteStiefelGeometry, JOrthogonalGeometry
from orthoplug.linalg import hyperbolic_trace_min, trace_min_certificate
from orthoplug.oracles import FunctionOracle, Oracle, QuadraticOracle
from orthoplug.problems import spca
from orthoplug.problems.hevp import make_banded_spd, make_spd
from orthoplug.solvers.hyperbolic import HyperbolicEig
from orthoplug.solvers.rsdm import RSDM, default_slice_dimension

__all__ = ["EXPERIMENTS", "QuadraticOJ", "SparseQuadratic", "SmoothOJ", "GeneralL1SPCA",
           "GeneralPCA", "GeneralProcrustes", "GeneralDPCP", "SMOOTH_OJ_METHODS",
           "hyperbolic_method", "pymanopt_builtin"]

SUITE = "general"
#: the two signatures of every J-orthogonal family: p = 3n/4 and p = n/4
SIGNATURE_FRACTIONS = (0.75, 0.25)


def pymanopt_builtin(short: str) -> Method:
    """pymanopt's ``SteepestDescent`` / ``ConjugateGradient`` / ``TrustRegions`` (``short``:
    ``"SD"``, ``"CG"``, ``"TR"``) with stopping rules that leave the time limit in charge."""
    cls = {"SD": "SteepestDescent", "CG": "ConjugateGradient", "TR": "TrustRegions"}[short]
    return pymanopt_method(f"pymanopt-{short}", "pymanopt", f"pymanopt.optimizers:{cls}",
                           _PYMANOPT_OPTIONS)


# ---- (a) quadratic trace over O(J) and iSt -----------------------------------------------------
@dataclass
class QuadraticData:
    """``tr(XᵀCXD)`` over ``geometry``: ``c`` (n×n torch), ``weights`` (diagonal of D, or
    ``None`` for ``I``)."""

    c: torch.Tensor
    weights: np.ndarray | None
    geometry: JOrthogonalGeometry | IndefiniteStiefelGeometry


def _run_hyperbolic(experiment, instance: Instance, *, seed: int, time_limit: float,
                    max_iterations: int | None = None) -> Outcome:
    """One direct solve (:class:`~orthoplug.solvers.hyperbolic.HyperbolicEig`): it has no
    start, no iterations to budget and no time limit to respect; ``seed``, ``time_limit`` and
    ``max_iterations`` are accepted for the common method interface only."""
    oracle = experiment.oracle(instance, None)
    result = HyperbolicEig().run(oracle, None, instance.data.geometry)
    return Outcome(point=result.point.numpy(), iterations=result.iterations,
                   history=[(result.time, result.cost)], message=result.stop_reason)


def _square_oj(instance: Instance) -> bool:
    """Whether the instance lives on square O(J) (where column J-Jacobi is defined)."""
    return isinstance(instance.data.geometry, JOrthogonalGeometry)


def hyperbolic_method() -> Method:
    """``HyperbolicEig`` (dense pencil solve) on the experiment's quadratic oracle."""
    return custom_method("HyperbolicEig", "orthoplug", _run_hyperbolic)


class QuadraticOJ(_JOrthogonalExperiment):
    """``min tr(XᵀCXD)`` over square O(J) (``D = I``) and iSt(n, k) (``D`` diagonal ≻ 0)."""

    name = "quadratic-oj"
    suite = SUITE
    title = "quadratic trace min tr(XᵀCXD) over O(J) and iSt(n, k), C ≻ 0, D ⪰ 0 diagonal"
    objective_label = "tr(XᵀCXD)"
    time_limits = {"quick": 1.0, "paper": 20.0}
    #: n of the square O(J) and (n, k) of iSt per scale
    SIZES = {"quick": {"oj": 40, "ist": (120, 12)}, "paper": {"oj": 200, "ist": (400, 40)}}

    def instances(self, scale: str, seed: int) -> list[Instance]:
        sizes = self.SIZES[scale]
        rng = np.random.default_rng(seed)
        out = []
        for frac in SIGNATURE_FRACTIONS:
            n = sizes["oj"]
            p = round(frac * n)
            out.append(self._instance(f"O(J)-{n}-p{p}", {"n": n, "k": n, "p": p},
                                      make_spd(n, seed=seed + n), None,
                                      JOrthogonalGeometry(n, p)))
        for frac in SIGNATURE_FRACTIONS:
            n, k = sizes["ist"]
            p, kp = round(frac * n), round(frac * k)
            out.append(self._instance(f"iSt-{n}x{k}-p{p}", {"n": n, "k": k, "p": p, "k_plus": kp},
                                      make_spd(n, seed=seed + n), rng.uniform(0.5, 2.0, k),
                                      IndefiniteStiefelGeometry(n, k, p, kp)))
        return out

    @staticmethod
    def _instance(dataset: str, sizes: dict, c: np.ndarray, weights: np.ndarray | None,
                  geometry) -> Instance:
        optimum = trace_min_certificate(c, geometry.j, geometry.jk, weights)
        note = ("certified optimum from the pencil (C, J) eigenvalues; C = DᵀD/n + 0.01 I"
                + ("" if weights is None else "; D = diag(d), d ~ U[0.5, 2]"))
        return Instance(dataset, sizes, QuadraticData(torch.from_numpy(c), weights, geometry),
                        optimum, note)

    def methods(self, scale: str) -> list[Method]:
        return [hyperbolic_method(), solver_method("GS-JOBCD"),
                solver_method("ColumnJJacobi", applies=_square_oj), pymanopt_builtin("CG"),
                pymanopt_builtin("TR")]

    def oracle(self, instance: Instance, x0, *, finite_sum: bool = False,
               lipschitz: bool = False) -> Oracle:
        """The :class:`~orthoplug.oracles.core.QuadraticOracle` ``tr(XᵀCXD)``."""
        weights = instance.data.weights
        return QuadraticOracle(instance.data.c,
                               None if weights is None else torch.diag(torch.from_numpy(weights)))

    def cost(self, instance: Instance, x: torch.Tensor) -> torch.Tensor:
        weights = instance.data.weights
        w = 1.0 if weights is None else torch.from_numpy(weights).to(x)
        return (x * (instance.data.c.to(x) @ x) * w).sum()

    def _manifold(self, instance: Instance, frontend):
        geometry = instance.data.geometry
        if isinstance(geometry, JOrthogonalGeometry):
            return frontend.JOrthogonal(geometry.j.n, signature=geometry.j)
        return frontend.IndefiniteStiefel(geometry.j.n, geometry.jk.n, signature=geometry.j,
                                          k_signature=geometry.jk)

    def pymanopt_problem(self, instance: Instance):
        from orthoplug.adapters import pymanopt as frontend

        return quadratic_pymanopt_problem(self._manifold(instance, frontend),
                                          instance.data.c.numpy(), 1.0, instance.data.weights)

    def torch_problem(self, instance: Instance):
        from orthoplug.adapters import geoopt as frontend

        return self._manifold(instance, frontend), lambda x: self.cost(instance, x)


# ---- (b) banded sparse C: the Lanczos path ---------------------------------------------------
@dataclass
class SparseQuadraticData:
    """A sparse ``C`` (scipy CSR) and the iSt geometry."""

    c: object
    geometry: IndefiniteStiefelGeometry


def _run_lanczos(experiment, instance: Instance, *, seed: int, time_limit: float,
                 max_iterations: int | None = None, tol: float = 1e-10) -> Outcome:
    """:func:`~orthoplug.linalg.hyperbolic_trace_min` on the sparse C (Lanczos, C-solves by a
    sparse LU); it stops on its residual ``tol``: ``time_limit`` and ``max_iterations`` are
    accepted for the common interface only, ``seed`` seeds the Lanczos start vectors."""
    geometry = instance.data.geometry
    t0 = time.perf_counter()
    sol = hyperbolic_trace_min(instance.data.c, geometry.j, geometry.jk, method="iterative",
                               tol=tol, seed=seed)
    return Outcome(point=sol.x, iterations=sol.operator_applications,
                   history=[(time.perf_counter() - t0, sol.value)],
                   message=f"Ritz residuals below tol {tol:g}; max residual {sol.residual:.1e}")


class SparseQuadratic(Experiment):
    """``min tr(XᵀCX)`` over iSt(n, 20) with a banded sparse ``C ≻ 0``."""

    name = "quadratic-sparse"
    suite = SUITE
    title = "quadratic trace over iSt(n, 20) with a banded sparse C (Lanczos path)"
    objective_label = "tr(XᵀCX)"
    time_limits = {"quick": 2.0, "paper": 60.0}
    SIZES = {"quick": 1000, "paper": 10_000}
    #: largest n whose dense pencil certificate is computed
    CERTIFY_UP_TO = 2000
    k = 20

    def instances(self, scale: str, seed: int) -> list[Instance]:
        n = self.SIZES[scale]
        c = make_banded_spd(n, bandwidth=2, seed=seed)
        j = np.random.default_rng(seed + n).permutation([1.0] * (n // 2) + [-1.0] * (n - n // 2))
        jk = np.array([1.0] * (self.k // 2) + [-1.0] * (self.k - self.k // 2))
        geometry = IndefiniteStiefelGeometry(n, self.k, signature=j, k_signature=jk)
        certified = n <= self.CERTIFY_UP_TO
        optimum = trace_min_certificate(c.toarray(), j, jk) if certified else None
        note = ("banded (bandwidth 2) spring-chain C; "
                + ("certified optimum from the dense pencil eigenvalues" if certified
                   else "no certificate at this n (ranked by the objective)"))
        return [Instance(f"banded-{n}", {"n": n, "k": self.k, "nnz": int(c.nnz)},
                         SparseQuadraticData(c, geometry), optimum, note)]

    def methods(self, scale: str) -> list[Method]:
        return [custom_method("HyperbolicEig", "orthoplug", _run_lanczos),
                pymanopt_builtin("CG"), pymanopt_builtin("TR")]

    def initial_point(self, instance: Instance, seed: int) -> np.ndarray:
        """Unit vectors ``e_i`` at rows of the matching signs (J-orthonormal; no n×n work)."""
        j, jk = instance.data.geometry.j, instance.data.geometry.jk
        rows = {1: list(j.positive_indices()), -1: list(j.negative_indices())}
        x0 = np.zeros((j.n, jk.n))
        for col, s in enumerate(jk.values):
            x0[rows[s].pop(0), col] = 1.0
        return x0

    def evaluate(self, instance: Instance, point) -> dict[str, float]:
        x = np.asarray(point, dtype=np.float64)
        return {"objective": float(np.sum(x * (instance.data.c @ x))),
                "violation": float(instance.data.geometry.violation(torch.from_numpy(x)))}

    def pymanopt_problem(self, instance: Instance):
        from orthoplug.adapters.pymanopt import IndefiniteStiefel

        geometry = instance.data.geometry
        manifold = IndefiniteStiefel(geometry.j.n, geometry.jk.n, signature=geometry.j,
                                     k_signature=geometry.jk)
        return quadratic_pymanopt_problem(manifold, instance.data.c)


# ---- (c) smooth non-quadratic costs over O(J) --------------------------------------------------
@dataclass
class SmoothOJData:
    """``½‖XᵀAX − B‖² + tr(XᵀCX)``: the matrices as torch tensors and the geometry."""

    a: torch.Tensor
    b: torch.Tensor
    c: torch.Tensor
    geometry: JOrthogonalGeometry

    def arrays(self, x):
        """``(A, B, C)`` in the array type of ``x`` (numpy for pymanopt, torch otherwise)."""
        if isinstance(x, np.ndarray):
            return self.a.numpy(), self.b.numpy(), self.c.numpy()
        return self.a.to(x), self.b.to(x), self.c.to(x)

    def value(self, x):
        """``½‖XᵀAX − B‖²_F + tr(XᵀCX)``."""
        a, b, c = self.arrays(x)
        r = x.T @ a @ x - b
        return 0.5 * (r * r).sum() + (x * (c @ x)).sum()

    def gradient(self, x):
        """``2AXR + 2CX`` with ``R = XᵀAX − B``."""
        a, b, c = self.arrays(x)
        ax = a @ x
        return 2.0 * ax @ (x.T @ ax - b) + 2.0 * (c @ x)

    def hessian(self, x, u):
        """``2AUR + 2AX(UᵀAX + XᵀAU) + 2CU``."""
        a, b, c = self.arrays(x)
        ax, au = a @ x, a @ u
        return 2.0 * au @ (x.T @ ax - b) + 2.0 * ax @ (u.T @ ax + x.T @ au) + 2.0 * (c @ u)


#: the methods of ``smooth-oj``, one row each (a new solver: one more line)
SMOOTH_OJ_METHODS = (
    lambda: solver_method("CayleyLBFGS"),
    lambda: solver_method("J-JOBCD"),
    lambda: solver_method("GS-JOBCD"),
    lambda: pymanopt_builtin("CG"),
    lambda: pymanopt_builtin("TR"),
)


class SmoothOJ(_JOrthogonalExperiment):
    """``min ½‖XᵀAX − B‖²_F + tr(XᵀCX)`` over O(J) (no certified optimum)."""

    name = "smooth-oj"
    suite = SUITE
    title = "smooth non-quadratic cost over O(J): ½‖XᵀAX − B‖² + tr(XᵀCX)"
    objective_label = "f(X)"
    time_limits = {"quick": 1.5, "paper": 30.0}
    SIZES = {"quick": 16, "paper": 50}

    def instances(self, scale: str, seed: int) -> list[Instance]:
        n = self.SIZES[scale]
        rng = np.random.default_rng(seed)
        out = []
        for frac in SIGNATURE_FRACTIONS:
            p = round(frac * n)
            data = SmoothOJData(torch.from_numpy(make_spd(n, seed=seed + 1)),
                                torch.diag(torch.from_numpy(rng.uniform(1.0, 2.0, n))),
                                torch.from_numpy(make_spd(n, seed=seed + 2)),
                                JOrthogonalGeometry(n, p))
            out.append(Instance(f"O(J)-{n}-p{p}", {"n": n, "p": p}, data,
                                note="A, C = DᵀD/n + 0.01 I (Gaussian D), B = diag(U[1, 2])"))
        return out

    def methods(self, scale: str) -> list[Method]:
        return [make() for make in SMOOTH_OJ_METHODS]

    def cost(self, instance: Instance, x: torch.Tensor) -> torch.Tensor:
        return instance.data.value(x)

    def oracle(self, instance: Instance, x0, *, finite_sum: bool = False,
               lipschitz: bool = False) -> Oracle:
        """A :class:`~orthoplug.oracles.core.FunctionOracle` with the Hessian."""
        data = instance.data
        return FunctionOracle(data.value, data.gradient, hessian=data.hessian)

    def pymanopt_problem(self, instance: Instance):
        import pymanopt

        from orthoplug.adapters.pymanopt import JOrthogonal

        data = instance.data
        manifold = JOrthogonal(*self._np(instance))
        return pymanopt.Problem(
            manifold, pymanopt.function.numpy(manifold)(lambda x: float(data.value(x))),
            euclidean_gradient=pymanopt.function.numpy(manifold)(data.gradient),
            euclidean_hessian=pymanopt.function.numpy(manifold)(data.hessian))


# ---- (d) ℓ1-SPCA on tabular and Gaussian data ---------------------------------------------------
def _standardised_columns(a: np.ndarray) -> np.ndarray:
    """Every feature centred and scaled to unit variance (constant features left at 0)."""
    a = a - a.mean(axis=0)
    sd = a.std(axis=0)
    return a / np.where(sd > 0, sd, 1.0)


class GeneralL1SPCA(L1SPCA):
    """ℓ1-SPCA from a random start on standardised tabular data and Gaussian data."""

    name = "l1-spca-general"
    suite = SUITE
    title = "ℓ1-regularised sparse PCA from a random start (tabular and Gaussian data)"
    time_limits = {"quick": 1.5, "paper": 30.0}
    #: (m, n, r) of the Gaussian instance per scale
    GAUSSIAN = {"quick": (200, 100, 10), "paper": (1000, 500, 20)}

    def instances(self, scale: str, seed: int) -> list[Instance]:
        from sklearn.datasets import load_breast_cancer

        m, n, r = self.GAUSSIAN[scale]
        sources = {"breast-cancer": (_standardised_columns(load_breast_cancer().data), 5),
                   f"gauss-{m}x{n}": (spca.gaussian_data(m, n, seed=seed), r)}
        out = []
        for name, (a, rank) in sources.items():
            c = spca.covariance(a)
            lam = spca_lambda(c, "l1")
            out.append(Instance(name, {"m": a.shape[0], "n": c.shape[0], "r": rank,
                                       "lam": float(f"{lam:.4g}")},
                                CompositeData(spca.l1_spca(c, rank, lam), a),
                                note=f"λ = {lam:.3g} = 0.5 λ₁(C)/√n"))
        return out

    def methods(self, scale: str) -> list[Method]:
        return [obcd_method("OBCD", start="random"), sparse_obcd_method(), manpg_method(),
                rssm_method(4)]


# ---- (e) smooth Stiefel problems at two shapes ------------------------------------------------
class _TwoShapes:
    """Mixin for the RSDM suite's experiments: tall (p = n/5) and wide (p = 4n/5) instances,
    RSDM-P with its defaults against pymanopt CG."""

    suite = SUITE
    time_limits = {"quick": 2.0, "paper": 30.0}
    SIZES = {"quick": 300, "paper": 1500}

    def instances(self, scale: str, seed: int) -> list[Instance]:
        n = self.SIZES[scale]
        return [self.instance(n, p, default_slice_dimension(n, p), seed=seed)
                for p in (n // 5, 4 * n // 5)]

    def methods(self, scale: str) -> list[Method]:
        return [custom_method("RSDM-P", "orthoplug", _solver_runner(RSDM, feasible=True)),
                pymanopt_builtin("CG")]


class GeneralPCA(_TwoShapes, PCAExperiment):
    """PCA ``−½ tr(XᵀAX)`` (condition number 1000), tall and wide."""

    name = "pca-general"
    title = "PCA on St(n, p), condition number 1000, p = n/5 and 4n/5"


class GeneralProcrustes(_TwoShapes, ProcrustesExperiment):
    """Orthogonal Procrustes, tall and wide."""

    name = "procrustes-general"
    title = "Orthogonal Procrustes on St(n, p), p = n/5 and 4n/5"


# ---- (f) DPCP with a small codimension ----------------------------------------------------------
class GeneralDPCP(DPCPExperiment):
    """DPCP with codimension c = n/10 (the RSSM suite's has c = n/5)."""

    name = "dpcp-general"
    suite = SUITE
    title = "DPCP robust subspace recovery, codimension n/10"
    time_limits = {"quick": 2.0, "paper": 30.0}
    SIZES = {"quick": 100, "paper": 500}

    def instances(self, scale: str, seed: int) -> list[Instance]:
        n = self.SIZES[scale]
        d = n - n // 10
        return [dpcp_problem_instance(n, d, 5 * d, seed)]

    def methods(self, scale: str) -> list[Method]:
        return [m for m in super().methods(scale) if m.name in ("RSubGrad", "RSSM-4", "RSSM-10")]


EXPERIMENTS: list[Experiment] = [QuadraticOJ(), SparseQuadratic(), SmoothOJ(), GeneralL1SPCA(),
                                 GeneralPCA(), GeneralProcrustes(), GeneralDPCP()]
