r"""The RSSM paper's problems: DPCP robust subspace recovery and ℓ1-SPCA (RSSM's formulation).

The RSSM paper (Cheung, Wang, Yue, So 2024) states its method for weakly convex nonsmooth f on
St(n, p) and names these applications but reports no experiments, so there is no table to
reproduce: sizes follow the issue (DPCP) and the OBCD paper's "randn" data (SPCA), and the
tables report what such a paper would — final objective, feasibility and, for DPCP, the
distance to the true subspace.

* **DPCP** (``dpcp``; :mod:`orthoplug.problems.nonsmooth_problems`): unit-norm points, inliers in
  a random d-dimensional subspace S of ℝⁿ plus as many Gaussian outliers (5d inliers);
  ``f(X) = (1/m) Σ_j ‖Xᵀy_j‖₂`` over St(n, c), ``c = n − d``, whose minimisers span ``S^⊥``.
  Quick n = 200, d = 160; paper (the issue's sizes) n = 1000, d = 800, 4000 + 4000 points.
  Every method starts from the standard spectral initialisation (bottom-c eigenvectors of
  ``YYᵀ``). Metrics: ``principal_angle`` (largest principal angle between ``span X`` and
  ``S^⊥``, radians) and ``subspace_error`` (``‖XXᵀ − P_{S⊥}‖_F/√2``).
* **ℓ1-SPCA** (``l1-spca-rssm``): ``F(X) = −tr(XᵀCX) + μ‖X‖₁`` with ``C = BᵀB``, B a Gaussian
  m × n matrix scaled to ``‖B‖_F = 1`` and kept factored for the subgradient methods (column
  subgradient ``−2Bᵀ(BX_C) + μ sign(X_C)``), μ = ``0.5 λ₁(C)/√n`` as in the OBCD suite, r = 20.
  Quick 500 × 300, paper 500 × 1000. Metric ``nnz`` (``#{|X_ij| > 1e-6}``).

Methods (same wall-clock limit each):

* DPCP: ``RSubGrad`` with the paper's rule as in ``benchmarks/rssm_dpcp.py``
  (:func:`dpcp_solver`): ``γ₀ = 0.5/‖grad f(X₀)‖_F`` and geometric decay β = 0.95 per epoch;
  ``RSSM-ℓ`` for ℓ ∈ {4, 10, 20} with :data:`DPCP_RSSM_RULE` (``Polyak(patience=2,
  path=None)``, the level halved readily, for this sharp f; matching pairs), the fastest RSSM
  configuration measured at the issue's sizes (docs/results.md). pymanopt's smooth solvers are
  not offered: f is nonsmooth exactly at the solution (sharp minimum).
* ℓ1-SPCA: ``RSSM-ℓ`` (ℓ ∈ {4, 10}) and ``RSubGrad`` with the default step rule (best
  evaluated point returned, then the final proximal pass that sets exact zeros), from the
  shared random start, against OBCD and ManPG as in the OBCD suite.

No grids: the paper gives no step sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from orthoplug.baselines.rsubgrad import RSubGrad
from orthoplug.bench.core import Experiment, Instance, Method, Outcome, budget, custom_method
from orthoplug.bench.suites.obcd import (
    L1SPCA,
    CompositeData,
    CompositeExperiment,
    manpg_method,
    obcd_method,
    rsubgrad_method,
    solver_outcome,
    spca_lambda,
)
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.problems import spca
from orthoplug.problems.nonsmooth_problems import DPCP, SparsePCA, dpcp_instance
from orthoplug.solvers.rssm import RSSM, SubgradientSolver
from orthoplug.solvers.step_rules import Geometric, GeometricOnStall, Polyak

__all__ = ["EXPERIMENTS", "DPCPExperiment", "FactoredL1SPCA", "dpcp_solver",
           "dpcp_problem_instance", "rssm_method", "DPCP_RSSM_RULE"]

#: geometric step decay per epoch on DPCP
DPCP_DECAY = 0.95
#: RSSM's step and pair rules in the DPCP experiment
DPCP_RSSM_RULE = {"schedule": "polyak", "patience": 2, "pairs": "matching"}
#: the step rules of :func:`dpcp_solver` by name (β per epoch and patience from its arguments)
DPCP_RULES = {"geometric": lambda decay, patience: Geometric(decay=decay),
              "polyak": lambda decay, patience: Polyak(patience=patience, path=None),
              "polyak-path": lambda decay, patience: Polyak(patience=patience, path=30.0),
              "geometric-on-stall": lambda decay, patience: GeometricOnStall(
                  decay=decay, patience=patience)}


def dpcp_solver(num_blocks: int | None, decay: float = DPCP_DECAY, seed: int = 0,
                schedule: str = "geometric", patience: int = 3,
                **options) -> SubgradientSolver:
    """RSubGrad (``num_blocks=None``) or RSSM-ℓ with the step rule ``schedule`` of
    :data:`DPCP_RULES` (``"default"``: the solvers' default rule): geometric steps decaying by
    ``decay`` per epoch (the same decay per column update for every ℓ), Polyak steps, or
    geometric decay on stall, with ``patience``; ``options`` go to the solver (stopping
    criteria, ``eval_every``, ``pairs``)."""
    if schedule != "default":
        options["step_size"] = DPCP_RULES[schedule](decay, patience)
    if num_blocks is None:
        return RSubGrad(seed=seed, **options)
    return RSSM(num_blocks=num_blocks, seed=seed, **options)


def dpcp_problem_instance(n: int, d: int, num_inliers: int, seed: int) -> Instance:
    """A DPCP :class:`Instance` (outlier ratio 0.5) named by its sizes."""
    prob = dpcp_instance(n, d, num_inliers, outlier_ratio=0.5, seed=seed)
    m = int(prob.data.shape[1])
    return Instance(f"dpcp-{n}x{m}", {"n": n, "d": d, "c": n - d, "m": m,
                                      "outliers": prob.num_outliers}, prob,
                    note="inliers 5d, outlier ratio 0.5, unit-norm points")


class DPCPExperiment(Experiment):
    """DPCP robust subspace recovery (``instance.data`` a :class:`DPCP`)."""

    name = "dpcp"
    suite = "rssm"
    title = "DPCP robust subspace recovery"
    objective_label = "f = (1/m) Σ ‖Xᵀy_j‖₂"
    metrics = ("principal_angle", "subspace_error")
    time_limits = {"quick": 4.0, "paper": 60.0}

    def instances(self, scale: str, seed: int) -> list[Instance]:
        n, d = (200, 160) if scale == "quick" else (1000, 800)
        return [dpcp_problem_instance(n, d, 5 * d, seed)]

    def methods(self, scale: str) -> list[Method]:
        return [custom_method("RSubGrad" if ell is None else f"RSSM-{ell}",
                              "baseline" if ell is None else "orthoplug", _run_dpcp,
                              {"num_blocks": ell, "decay": DPCP_DECAY,
                               **({} if ell is None else DPCP_RSSM_RULE)})
                for ell in (None, 4, 10, 20)]

    def initial_point(self, instance: Instance, seed: int) -> np.ndarray:
        """The spectral start (deterministic; the seed only enters the data)."""
        return instance.data.spectral_point().numpy()

    def evaluate(self, instance: Instance, point) -> dict[str, float]:
        prob: DPCP = instance.data
        x = torch.as_tensor(np.asarray(point), dtype=torch.float64)
        return {"objective": float(prob.oracle().value(x)),
                "violation": float(StiefelGeometry(*x.shape).violation(x)),
                "principal_angle": prob.principal_angle(x),
                "subspace_error": prob.subspace_error(x)}


def _run_dpcp(experiment: DPCPExperiment, instance: Instance, *, seed: int, time_limit: float,
              num_blocks: int | None = None, decay: float = DPCP_DECAY, **rule) -> Outcome:
    solver = dpcp_solver(num_blocks, decay, seed, eval_every=10, **budget(time_limit, rule))
    x0 = torch.as_tensor(experiment.initial_point(instance, seed))
    return solver_outcome(solver, instance.data.oracle(), x0)


@dataclass
class FactoredData(CompositeData):
    """ℓ1-SPCA data with ``C = BᵀB`` also kept factored (:class:`SparsePCA`)."""

    factored: SparsePCA | None = None


class FactoredL1SPCA(L1SPCA):
    """ℓ1-SPCA in RSSM's formulation: subgradient methods use the factored ``B``."""

    name = "l1-spca-rssm"
    suite = "rssm"
    title = "ℓ1-regularised sparse PCA (RSSM's factored formulation)"

    def instances(self, scale: str, seed: int) -> list[Instance]:
        m, n = (500, 300) if scale == "quick" else (500, 1000)
        b = spca.gaussian_data(m, n, seed=seed)
        b /= np.linalg.norm(b)
        c = spca.covariance(b)
        mu = spca_lambda(c, "l1")
        data = FactoredData(spca.l1_spca(c, self.rank, mu), b,
                            SparsePCA(torch.as_tensor(b), mu))
        return [Instance(f"gauss-{m}x{n}", {"m": m, "n": n, "r": self.rank,
                                            "lam": float(f"{mu:.4g}")}, data,
                         note=f"μ = {mu:.3g} = 0.5 λ₁(C)/√n")]

    def subgradient_oracle(self, instance: Instance):
        return instance.data.factored.smooth_oracle()

    def methods(self, scale: str) -> list[Method]:
        return [rssm_method(4), rssm_method(10), rsubgrad_method(), obcd_method("OBCD"),
                manpg_method()]


def _run_rssm(experiment: CompositeExperiment, instance: Instance, *, seed: int,
              time_limit: float, start: str = "random", **options) -> Outcome:
    solver = RSSM(h=experiment.penalty(instance), seed=seed, return_best=True,
                  **budget(time_limit, options))
    return solver_outcome(solver, experiment.subgradient_oracle(instance),
                          experiment.start(instance, start, seed))


def rssm_method(num_blocks: int) -> Method:
    """RSSM-ℓ on ``f + h`` (default step rule, best evaluated point returned)."""
    return custom_method(f"RSSM-{num_blocks}", "orthoplug", _run_rssm,
                         {"num_blocks": num_blocks})


EXPERIMENTS: list[Experiment] = [DPCPExperiment(), FactoredL1SPCA()]
