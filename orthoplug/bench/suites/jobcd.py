r"""JOBCD paper's experiments: block coordinate descent under J-orthogonality ``XᵀJX = J``.

The paper ("Block Coordinate Descent Methods for Optimization under J-Orthogonality
Constraints with Applications") runs every method from the same random J-orthogonal ``X₀`` for
a fixed time (30/60/90 s; the main tables use 90 s) and tabulates the objective reached, with the
constraint violation ``(1/n²) Σ_ij |XᵀJX − J|_ij`` in parentheses; HSPP also plots
``F(X) − F(X₀)`` against time. Here every run is scored by the same ``evaluate`` (objective and
the papers' violation), with ``J = diag(I_p, −I_{n−p})``, ``p = n/2``, and ``X₀`` of condition
number 10.

Experiments (``EXPERIMENTS``):

* ``hevp-tracemin`` — the well-posed hyperbolic eigenvalue problem
  ``min tr(XᵀCX)`` over O(J), ``C = DᵀD/m + εI`` (ε = 1e-2), whose global minimum
  ``Σ|λ_i(JC)|`` is certified (so the tables show the relative gap and time to a 1e-6 gap).
  Data ``D``: scikit-learn's 8×8 ``digits`` (1797 × 64), ``images`` (10×10×3 patches of the two
  bundled sample images, n = 300, m = 3000) and ``gaussian`` (i.i.d. normal, n = 500, m = 2n),
  features standardised (the paper's cifar / mnist / gisette / ... subsets are not bundled);
  quick scale: digits and a 100 × 50 Gaussian.
* ``hevp-paper`` — the paper's literal form ``min −tr(XᵀDᵀDX)/m`` over O(J). It is **unbounded
  below** (‖X‖_F is unbounded on the group), so the reported objective after the fixed time
  measures how fast a method diverges, as in the paper's tables (entries down to −1e19); no
  optimum; the ``norm`` column is ``‖X‖_F``. Same data as ``hevp-tracemin`` (quick: digits).
  GS-JOBCD runs with the scalar curvature ``σ‖X_B‖₂² I``, σ = L_f: the exact block curvature
  of a negative quadratic is negative, its PSD part zero, and the θ-proximal step overflows.
* ``hspp`` — the hyperbolic structural probe as a finite sum over the ``m`` data rows
  (:class:`~orthoplug.problems.hspp.HSPP`), in the meaningful form ``Q = φ(DX)``: the paper's
  ``Q = φ(D)X`` is constant on the feasible set. Data from
  :func:`~orthoplug.problems.hspp.make_hspp_data` (``gaussian``, ``digits``); paper scale uses
  the paper's w1a size 2477-100-50 for the Gaussian rows (its randn5000, 5000-100-50, costs
  several seconds per full gradient on one CPU core, so the setup of a run alone would eat much
  of the 90 s) and all 1797 digit rows at n = 50; quick scale 150 rows at n = 10.
  VR-J-JOBCD's σ is :meth:`~orthoplug.problems.hspp.HSPP.estimate_lipschitz` at ``X₀`` (a local
  estimate, 5 power iterations, inside the timed run). GS-/J-JOBCD run their default σ rule: no
  σ is known, so σ starts from a Barzilai–Borwein estimate and is refitted after every checked
  step (:class:`~orthoplug.solvers.sigma_rules.SigmaFit`), and J-JOBCD moves every pair once per
  gradient (``matchings="all"``, a compiled round-robin sweep on the stale gradient): one full
  gradient costs ``O(m²k)``, so taking ``n(n−1)/2`` pairs per gradient instead of ``⌊n/2⌋`` is
  what lets JOBCD keep up (``docs/results.md``).

Methods: GS-JOBCD (with the ``QuadraticOracle`` fast path on HEVP: two gradient rows and an
O(nk) update per pair), column J-Jacobi on ``hevp-tracemin`` (``ColumnJJacobi``: sweeps of exact
column-pair steps), J-JOBCD, VR-J-JOBCD (PAGE estimator on a
:class:`~orthoplug.oracles.core.FiniteSumOracle`; on HEVP the finite sum is over the rows of
``D``: ``f_i(X) = ‖D_i X‖² + ε‖X‖²_F``, σ = L_f = 2λ_max(C)), pymanopt's SteepestDescent /
ConjugateGradient (/ TrustRegions on HEVP) on :class:`orthoplug.adapters.pymanopt.JOrthogonal`,
geoopt's RiemannianSGD / RiemannianAdam on :class:`orthoplug.adapters.geoopt.JOrthogonal`, and
the paper's baselines UMCM and ADMM (dynamic β, the paper's rule) and CSDM; on
``hevp-tracemin`` also ADMM with the fixed β = L_f (our addition: the dynamic β freezes ADMM).
Grids (used with tuning): Adagrad learning rates of UMCM / CSDM in the paper's [5e-4, 5e-3],
initial β of ADMM / UMCM in the paper's [1e2, 1e5]; geoopt's learning rates (ours, 1e-3 … 1e-1).
Time limits: 90 s per run at paper scale (the paper's main tables), 1–1.5 s at quick scale.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from itertools import product

import numpy as np
import torch

from orthoplug.baselines.admm import ADMM, PenaltySchedule
from orthoplug.baselines.csdm import CSDM
from orthoplug.baselines.umcm import UMCM
from orthoplug.bench.core import (
    Experiment,
    Instance,
    Method,
    Outcome,
    budget,
    custom_method,
    pymanopt_method,
    solver_history,
    torch_method,
)
from orthoplug.geometry.manifolds import JOrthogonalGeometry
from orthoplug.oracles import FiniteSumOracle, Oracle, QuadraticOracle
from orthoplug.problems import spca
from orthoplug.problems.hevp import trace_min_certificate
from orthoplug.problems.hspp import HSPP, make_hspp_data
from orthoplug.solvers.base import IterativeSolver
from orthoplug.solvers.jjacobi import ColumnJJacobi
from orthoplug.solvers.jobcd import GSJOBCD, JJOBCD, VRJJOBCD
from orthoplug.solvers.lbfgs import CayleyLBFGS

__all__ = ["EXPERIMENTS", "HEVPTraceMin", "HEVPPaper", "HSPPExperiment", "HEVP_SIZES",
           "SOLVERS", "build_solver", "hevp_data", "make_c", "quadratic_pymanopt_problem",
           "solver_method"]

SUITE = "jobcd"
HEVP_EPS = 1e-2
#: (m, n) of each HEVP dataset per scale
HEVP_SIZES = {
    "quick": {"digits": (1797, 64), "gaussian": (100, 50), "images": (500, 48)},
    "paper": {"digits": (1797, 64), "gaussian": (1000, 500), "images": (3000, 300)},
}
#: (m, n) of each HSPP data source per scale
HSPP_SIZES = {
    "quick": {"gaussian": (150, 10), "digits": (150, 10)},
    "paper": {"gaussian": (2477, 100), "digits": (1797, 50)},
}
ADAGRAD_LR_GRID = (5e-4, 1e-3, 2e-3, 5e-3)  # paper: "selected from the range [5e-4, 5e-3]"
BETA0_GRID = (1e2, 1e3, 1e4, 1e5)  # paper, App. F.5: initial β from [1e2, 1e5]
GEOOPT_LR_GRID = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
_PYMANOPT_OPTIONS = {"min_gradient_norm": 1e-13, "min_step_size": 0.0,
                     "max_cost_evaluations": 10**9}


# ---- data -------------------------------------------------------------------------------------
def _standardise(d: np.ndarray) -> np.ndarray:
    """Centre the columns and scale to unit mean variance."""
    d = d - d.mean(axis=0)
    return d / math.sqrt(max((d * d).mean(axis=0).mean(), 1e-300))


def hevp_data(dataset: str, scale: str, seed: int) -> np.ndarray:
    """The HEVP data ``D`` (m × n, sizes from :data:`HEVP_SIZES`) of ``dataset``."""
    try:
        m, n = HEVP_SIZES[scale][dataset]
    except KeyError:
        raise ValueError(f"unknown HEVP dataset {dataset!r} or scale {scale!r}") from None
    if dataset == "gaussian":
        return spca.gaussian_data(m, n, seed)
    if dataset == "images":
        return _standardise(spca.image_patches(math.isqrt(n // 3), m, seed))
    return _standardise(spca.digits_data())


def _gram(d: np.ndarray, eps: float) -> np.ndarray:
    """``DᵀD/m + εI``."""
    return d.T @ d / d.shape[0] + eps * np.eye(d.shape[1])


def make_c(dataset: str, scale: str, seed: int,
           eps: float = HEVP_EPS) -> tuple[np.ndarray, str]:
    """``C = DᵀD/m + εI`` of :func:`hevp_data` and the paper's label ``name(m-n-p)``."""
    d = hevp_data(dataset, scale, seed)
    m, n = d.shape
    return _gram(d, eps), f"{dataset}({m}-{n}-{n // 2})"


# ---- orthoplug solvers and the papers' baselines ------------------------------------------
#: name -> (solver class, default options). ADMM / UMCM take ``beta0`` (a number, or
#: ``"lipschitz"`` for the oracle's L_f) and ``beta_every`` (iterations between doublings of β,
#: default 5 as in the paper; 0 keeps β fixed) instead of a schedule object.
SOLVERS: dict[str, tuple[type[IterativeSolver], dict]] = {
    "GS-JOBCD": (GSJOBCD, {}),
    "ColumnJJacobi": (ColumnJJacobi, {}),
    "CayleyLBFGS": (CayleyLBFGS, {}),
    "J-JOBCD": (JJOBCD, {"eval_every": 10}),
    "VR-J-JOBCD": (VRJJOBCD, {"eval_every": 10}),
    "UMCM": (UMCM, {"step_size": 5e-3, "beta0": 1e2, "eval_every": 50}),
    "ADMM": (ADMM, {"beta0": 1e2, "eval_every": 10}),
    "ADMM-fixed": (ADMM, {"beta0": "lipschitz", "beta_every": 0, "eval_every": 10}),
    "CSDM": (CSDM, {"step_size": 5e-3, "eval_every": 50}),
}
#: orthoplug's own solvers among them (the rest are the papers' baselines)
_JOBCD_NAMES = ("GS-JOBCD", "ColumnJJacobi", "CayleyLBFGS", "J-JOBCD", "VR-J-JOBCD")


def build_solver(name: str, oracle: Oracle, **options) -> IterativeSolver:
    """The solver ``name`` of :data:`SOLVERS` with its defaults updated by ``options``."""
    cls, defaults = SOLVERS[name]
    opts = {**defaults, **options}
    if "beta0" in opts:
        beta0, every = opts.pop("beta0"), opts.pop("beta_every", 5)
        if beta0 == "lipschitz":
            if oracle.lipschitz is None:
                raise ValueError(f"{name}: beta0='lipschitz' needs an oracle with a known L_f")
            beta0 = oracle.lipschitz
        opts["beta"] = PenaltySchedule(float(beta0), every)
    return cls(**opts)


def solver_method(name: str, *, grid: list[dict] | tuple[dict, ...] = (),
                  applies: Callable[[Instance], bool] | None = None, **overrides) -> Method:
    """A :data:`SOLVERS` entry as a benchmark method on the experiment's structured oracle.

    VR-J-JOBCD gets the finite-sum oracle with a Lipschitz constant (its σ).
    """
    vr = name == "VR-J-JOBCD"

    def run(experiment, instance, *, seed, time_limit, **options) -> Outcome:
        x0 = torch.from_numpy(experiment.initial_point(instance, seed))
        oracle = experiment.oracle(instance, x0, finite_sum=vr, lipschitz=vr)
        solver = build_solver(name, oracle, seed=seed, **budget(time_limit, options))
        result = solver.run(oracle, x0, instance.data.geometry)
        return Outcome(point=result.point.detach().cpu().numpy(), iterations=result.iterations,
                       history=solver_history(result), message=result.stop_reason)

    family = "orthoplug" if name in _JOBCD_NAMES else "baseline"
    return custom_method(name, family, run, {**SOLVERS[name][1], **overrides}, grid, applies)


def _common_methods(*, trust_regions: bool, vr: bool, admm_fixed: bool,
                    gs_options: dict | None = None, j_options: dict | None = None,
                    column_jacobi: bool = False) -> list[Method]:
    """The methods shared by the experiments (flags add the ones that apply)."""
    step_grid = [{"step_size": lr} for lr in ADAGRAD_LR_GRID]
    geo_grid = [{"lr": lr} for lr in GEOOPT_LR_GRID]
    methods = [solver_method("GS-JOBCD", **(gs_options or {})),
               solver_method("J-JOBCD", **(j_options or {}))]
    if column_jacobi:
        methods.insert(1, solver_method("ColumnJJacobi"))
    if vr:
        methods.append(solver_method("VR-J-JOBCD"))
    pymanopt = [("SD", "SteepestDescent"), ("CG", "ConjugateGradient")]
    if trust_regions:
        pymanopt.append(("TR", "TrustRegions"))
    methods += [pymanopt_method(f"pymanopt-{short}", "pymanopt", f"pymanopt.optimizers:{cls}",
                                _PYMANOPT_OPTIONS) for short, cls in pymanopt]
    methods += [torch_method("geoopt-RSGD", "geoopt", "geoopt.optim:RiemannianSGD",
                             {"lr": 1e-2}, geo_grid),
                torch_method("geoopt-RAdam", "geoopt", "geoopt.optim:RiemannianAdam",
                             {"lr": 1e-2}, geo_grid),
                solver_method("UMCM", grid=[{"step_size": lr, "beta0": b}
                                            for lr, b in product(ADAGRAD_LR_GRID, BETA0_GRID)]),
                solver_method("ADMM", grid=[{"beta0": b} for b in BETA0_GRID])]
    if admm_fixed:
        methods.append(solver_method("ADMM-fixed"))
    methods.append(solver_method("CSDM", grid=step_grid))
    return methods


def quadratic_pymanopt_problem(manifold, c, sign: float = 1.0, d: np.ndarray | None = None):
    """``s·tr(XᵀCXD)`` as a ``pymanopt.Problem`` with NumPy cost, gradient ``2s·CXD`` and Hessian
    ``2s·CUD`` on ``manifold``.

    Args:
        manifold: a pymanopt manifold of n×k points.
        c: ``C`` (n×n): a dense array or a ``scipy.sparse`` matrix (only products ``C @ X``).
        sign: the scale ``s``.
        d: the diagonal of ``D`` (length k); ``None``: ``D = I``.
    """
    import pymanopt

    w = 1.0 if d is None else np.asarray(d, dtype=np.float64)

    @pymanopt.function.numpy(manifold)
    def cost(x):
        return sign * float(np.sum(x * (c @ x) * w))

    @pymanopt.function.numpy(manifold)
    def euclidean_gradient(x):
        return 2.0 * sign * (c @ x) * w

    @pymanopt.function.numpy(manifold)
    def euclidean_hessian(x, v):
        return 2.0 * sign * (c @ v) * w

    return pymanopt.Problem(manifold, cost, euclidean_gradient=euclidean_gradient,
                            euclidean_hessian=euclidean_hessian)


# ---- experiments ------------------------------------------------------------------------------
class _JOrthogonalExperiment(Experiment):
    """Shared parts: O(J) with ``p = n/2``, the common start and the papers' violation.

    ``instance.data`` has a ``geometry`` (:class:`JOrthogonalGeometry`); subclasses add
    :meth:`oracle` and :meth:`cost` (a torch scalar, differentiable in ``x``).
    """

    suite = SUITE
    #: condition number of the common start X₀ (the paper gives none)
    start_cond = 10.0

    def oracle(self, instance: Instance, x0: torch.Tensor, *, finite_sum: bool = False,
               lipschitz: bool = False) -> Oracle:
        """The structured oracle (``finite_sum``: a FiniteSumOracle; ``lipschitz``: with L_f)."""
        raise NotImplementedError

    def cost(self, instance: Instance, x: torch.Tensor) -> torch.Tensor:
        """The objective at ``x`` as a torch scalar, differentiable in ``x`` (for geoopt's
        optimizers).
        """
        raise NotImplementedError

    def initial_point(self, instance: Instance, seed: int) -> np.ndarray:
        generator = torch.Generator().manual_seed(seed)
        x0 = instance.data.geometry.random_point(cond=self.start_cond, generator=generator)
        return x0.numpy()

    def evaluate(self, instance: Instance, point) -> dict[str, float]:
        x = torch.as_tensor(np.asarray(point, dtype=np.float64))
        with torch.no_grad():
            objective = float(self.cost(instance, x))
        return {"objective": objective,
                "violation": float(instance.data.geometry.violation(x)),
                **self.extra_metrics(x)}

    def extra_metrics(self, x: torch.Tensor) -> dict[str, float]:
        """Values of :attr:`metrics` at a final point."""
        return {}

    @staticmethod
    def _np(instance: Instance) -> tuple[int, int]:
        """``(n, p)`` of the instance's O(J)."""
        return instance.sizes["n"], instance.sizes["p"]

    def torch_problem(self, instance: Instance):
        from orthoplug.adapters.geoopt import JOrthogonal

        return JOrthogonal(*self._np(instance)), lambda x: self.cost(instance, x)


@dataclass
class HEVPData:
    """HEVP data: rows ``d`` (m × n), the quadratic's matrix ``c`` and the geometry."""

    d: torch.Tensor
    c: torch.Tensor
    eps: float
    geometry: JOrthogonalGeometry


class HEVPTraceMin(_JOrthogonalExperiment):
    """``min s·tr(XᵀCX)`` over O(J); ``s = +1`` with ``C = DᵀD/m + εI`` (certified optimum)."""

    name = "hevp-tracemin"
    title = "HEVP, well-posed form: min tr(XᵀCX), XᵀJX = J, C = DᵀD/m + εI ≻ 0"
    objective_label = "tr(XᵀCX)"
    time_limits = {"quick": 1.5, "paper": 90.0}
    datasets = {"quick": ("digits", "gaussian"), "paper": ("images", "digits", "gaussian")}
    sign = 1.0
    eps = HEVP_EPS
    note = "optimum Σ|λ(JC)| certified; ε = 1e-2; features standardised"

    def instances(self, scale: str, seed: int) -> list[Instance]:
        return [self.make_instance(dataset, hevp_data(dataset, scale, seed))
                for dataset in self.datasets[scale]]

    def make_instance(self, dataset: str, d: np.ndarray) -> Instance:
        """The instance of data rows ``d`` (m × n) named ``dataset``."""
        m, n = d.shape
        p = n // 2
        geometry = JOrthogonalGeometry(n, p)
        c = _gram(d, self.eps)
        data = HEVPData(torch.from_numpy(d), torch.from_numpy(c), self.eps, geometry)
        return Instance(dataset, {"m": m, "n": n, "p": p}, data,
                        self.optimum(c, geometry), self.note)

    def optimum(self, c: np.ndarray, geometry: JOrthogonalGeometry) -> float | None:
        """Σ|λ(JC)| (Kovač-Striko & Veselić)."""
        return trace_min_certificate(c, geometry.j)

    def methods(self, scale: str) -> list[Method]:
        return _common_methods(trust_regions=True, vr=True, admm_fixed=True, column_jacobi=True)

    def cost(self, instance: Instance, x: torch.Tensor) -> torch.Tensor:
        return self.sign * (x * (instance.data.c.to(x) @ x)).sum()

    def oracle(self, instance, x0, *, finite_sum=False, lipschitz=False) -> Oracle:
        data: HEVPData = instance.data
        quadratic = QuadraticOracle(data.c, scale=self.sign)
        if not finite_sum:
            return quadratic
        sign, eps = self.sign, data.eps

        def value(x, idx):
            dx = data.d[idx] @ x
            return sign * ((dx * dx).sum() / idx.numel() + eps * (x * x).sum())

        def gradient(x, idx):
            rows = data.d[idx]
            return 2.0 * sign * (rows.mT @ (rows @ x) / idx.numel() + eps * x)

        return FiniteSumOracle(data.d.shape[0], value, gradient, lipschitz=quadratic.lipschitz)

    def pymanopt_problem(self, instance: Instance):
        from orthoplug.adapters.pymanopt import JOrthogonal

        return quadratic_pymanopt_problem(JOrthogonal(*self._np(instance)),
                                          instance.data.c.numpy(), self.sign)


class HEVPPaper(HEVPTraceMin):
    """The paper's literal HEVP ``min −tr(XᵀDᵀDX)/m``: unbounded below on O(J)."""

    name = "hevp-paper"
    title = ("HEVP, the paper's literal form: min −tr(XᵀDᵀDX)/m, XᵀJX = J "
             "(unbounded below: the objective after the time limit measures divergence)")
    objective_label = "−tr(XᵀDᵀDX)/m"
    metrics = ("norm",)
    time_limits = {"quick": 1.0, "paper": 90.0}
    datasets = {"quick": ("digits",), "paper": ("images", "digits", "gaussian")}
    sign = -1.0
    eps = 0.0
    note = "unbounded below (‖X‖_F is unbounded on O(J)); norm = ‖X‖_F"

    def optimum(self, c, geometry) -> None:
        return None

    def methods(self, scale: str) -> list[Method]:
        # exact curvature of −tr(XᵀCX) is negative, its PSD part zero: GS-JOBCD would take
        # θ-proximal (unbounded) steps and overflow at once; σ = L_f gives a valid majoriser
        # (the backtracking rule with the oracle's L_f: fixed, unchecked; J-JOBCD too, whose
        # refitted σ would shrink below L_f and overflow within a dozen iterations)
        fixed = {"sigma_rule": "backtracking"}
        return _common_methods(trust_regions=False, vr=False, admm_fixed=False,
                               gs_options={"curvature": "scalar", **fixed}, j_options=fixed)

    def extra_metrics(self, x: torch.Tensor) -> dict[str, float]:
        return {"norm": float(torch.linalg.norm(x))}


@dataclass
class HSPPData:
    """An :class:`HSPP` problem and its geometry."""

    problem: HSPP
    geometry: JOrthogonalGeometry


class HSPPExperiment(_JOrthogonalExperiment):
    """The hyperbolic structural probe, ``Q = φ(DX)``, α = 1, square X ∈ O(J)."""

    name = "hspp"
    title = "HSPP: min (1/m²) Σ_ij (‖D_i − D_j‖ − d_α(Q_i, Q_j))², Q = φ(DX), XᵀJX = J"
    objective_label = "f(X)"
    time_limits = {"quick": 1.0, "paper": 90.0}
    #: power iterations of VR-J-JOBCD's σ estimate (two full gradients each)
    sigma_iterations = 5

    def instances(self, scale: str, seed: int) -> list[Instance]:
        out = []
        for source, (m, n) in HSPP_SIZES[scale].items():
            p = n // 2
            problem = HSPP(make_hspp_data(m, n, source=source, seed=seed), p)
            out.append(Instance(source, {"m": m, "n": n, "p": p},
                                HSPPData(problem, JOrthogonalGeometry(n, p)),
                                note="Q = φ(DX): the paper's φ(D)X is constant on O(J); α = 1"))
        return out

    def methods(self, scale: str) -> list[Method]:
        # one gradient costs O(m²k): every pair per gradient (matchings="all", module docstring)
        return _common_methods(trust_regions=False, vr=True, admm_fixed=False,
                               j_options={"matchings": "all"})

    def cost(self, instance: Instance, x: torch.Tensor) -> torch.Tensor:
        return instance.data.problem.value(x)

    def oracle(self, instance, x0, *, finite_sum=False, lipschitz=False) -> Oracle:
        """HSPP's finite-sum oracle; with ``lipschitz``, σ from a local estimate at ``x0``."""
        problem: HSPP = instance.data.problem
        sigma = problem.estimate_lipschitz(x0, iterations=self.sigma_iterations) \
            if lipschitz else None
        return problem.oracle(sigma)

    def pymanopt_problem(self, instance: Instance):
        from orthoplug.adapters.pymanopt import JOrthogonal

        return instance.data.problem.pymanopt_problem(JOrthogonal(*self._np(instance)))


class UltraEExperiment(Experiment):
    """Ultrahyperbolic knowledge-graph embedding (:mod:`orthoplug.training.ultrae`).

    One J-orthogonal relation matrix per relation (n = 36, p = 18, α = 1, δ = 5, k = 50
    negatives), trained by J-JOBCD / GS-JOBCD against geoopt's RiemannianSGD / RiemannianAdam on
    the same ``JOrthogonal`` parameter (entities by Adam in every run; J-JOBCD is
    :func:`~orthoplug.training.ultrae.train_ultrae`'s default, Adam-preconditioned pair steps with
    :data:`~orthoplug.training.ultrae.DEFAULT_MATCHINGS` matchings per gradient, its learning rate
    tuned as geoopt's; GS-JOBCD's σ backtracking starts at
    :data:`~orthoplug.training.ultrae.DEFAULT_SIGMA0`). Objective: 1 − filtered
    test MRR (history: 1 − validation MRR per epoch); metrics MRR and Hits@1/3/10; violation
    ``max_r ‖R_rᵀJR_r − J‖_F``. Data: the Nations / Kinships / UMLS triples shipped in pykeen's
    wheel (``pip install "orthoplug[kg]"``; the paper's FB15K / WN18RR subsets are not
    available offline).
    """

    name = "ultrae"
    suite = SUITE
    title = "UltraE knowledge-graph embedding, J-orthogonal relations (n = 36, p = 18)"
    objective_label = "1 − test MRR"
    metrics = ("mrr", "hits@1", "hits@3", "hits@10")
    time_limits = {"quick": 8.0, "paper": 120.0}
    DATASETS = {"quick": ("nations",), "paper": ("nations", "kinships", "umls")}
    OPTIMIZERS = {"J-JOBCD": "JJOBCD", "GS-JOBCD": "GSJOBCD", "geoopt-RSGD": "RiemannianSGD",
                  "geoopt-RAdam": "RiemannianAdam"}

    def instances(self, scale: str, seed: int) -> list[Instance]:
        from orthoplug.problems.kg import load_kg

        out = []
        for name in self.DATASETS[scale]:
            data = load_kg(name)
            out.append(Instance(name, {"entities": data.num_entities,
                                       "relations": data.num_relations,
                                       "train": int(data.train.shape[0])}, data,
                                note="triples from pykeen's package data"))
        return out

    def methods(self, scale: str) -> list[Method]:
        # tuning grids: the learning rate of geoopt and of the preconditioned J-JOBCD (σ = 1/lr);
        # GS-JOBCD's σ (backtracking from σ₀, or fixed)
        grids = {"J-JOBCD": [{"relation_lr": lr} for lr in (5e-3, 1e-2, 2e-2)],
                 "GS-JOBCD": [{"sigma0": 0.1}, {"sigma0": 1.0}, {"sigma": 0.1}, {"sigma": 0.3}]}
        geoopt_grid = [{"relation_lr": lr} for lr in (5e-3, 1e-2, 5e-2, 1e-1)]
        return [custom_method(name, "orthoplug" if "JOBCD" in name else "geoopt",
                              partial(self._train, optimizer=opt), {},
                              grids.get(name, geoopt_grid))
                for name, opt in self.OPTIMIZERS.items()]

    @staticmethod
    def _train(experiment, instance, *, seed, time_limit, optimizer, **options) -> Outcome:
        from orthoplug.training.ultrae import train_ultrae

        res = train_ultrae(instance.data, relation_optimizer=optimizer, epochs=10**6,
                           time_limit=time_limit, seed=seed, **options)
        return Outcome(point=res, iterations=res.epochs,
                       history=[(t, 1.0 - mrr) for t, _, mrr in res.history])

    def evaluate(self, instance: Instance, point) -> dict[str, float]:
        test = point.test
        return {"objective": 1.0 - test["mrr"], "violation": point.violation,
                **{k: test[k] for k in self.metrics}}


EXPERIMENTS: list[Experiment] = [HEVPTraceMin(), HEVPPaper(), HSPPExperiment(),
                                 UltraEExperiment()]
