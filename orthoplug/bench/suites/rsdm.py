r"""The RSDM paper's Stiefel experiments (Riemannian random submanifold descent, ICML 2025).

Paper: "Efficient Optimization with Orthogonality Constraint: a Randomized Riemannian Submanifold
Method" (public code ``andyjm3/RSDM``). Every method starts from the same ``X0 = qf(randn(n, p))``
and is scored by ``optgap(X) = |F(X) − F*| / |F*|`` against the closed-form optimum, as in the
paper's convergence plots (optgap vs wall time, target 1e-6).

Experiments:

* ``procrustes`` — ``F(X) = ‖XA − B‖_F² / (2p)`` over St(n, p), A (p×p) and B (n×p) i.i.d.
  N(0, 1); ``X* = UVᵀ`` from the thin SVD ``UΣVᵀ = BAᵀ``, ``F* = (‖A‖² + ‖B‖² − 2 tr Σ)/(2p)``.
  Paper sizes n = p = 2000, r = 900 (also n = p = 200, r = 150). The paper (Fig. 2a-b) reports
  RSDM competitive with the best baselines (RGD and Landing are best per iteration, Fig. 6): on
  St the cost is linear in X, so a full gradient is cheap; RCD is far slower in wall time (its
  sweeps loop over all n² index pairs) and was dropped from the n = 2000 plot.
* ``pca`` — ``F(X) = −½ tr(XᵀAX)``, A SPD with condition number 1000 and exponentially decaying
  eigenvalues ``λ_i = 10·1000^{−(i−1)/(n−1)}`` (``A = Q diag(λ) Qᵀ``, Q Haar);
  ``F* = −½ Σ_{i≤p} λ_i`` at the top-p eigenvectors. Paper sizes n = 2000, p = 1500, r = 700
  (also n = 3000, p = 2500, r = 1000). The paper (Fig. 2c-d) reports RSDM fastest in wall time
  (and per iteration), switching from sublinear to linear convergence near the optimum.

Methods (rows):

* ``RSDM-P`` / ``RSDM-O`` — orthoplug's :class:`~orthoplug.solvers.rsdm.RSDM` (permutation /
  Haar sampling, fixed step, QR retraction on O(r)) on the structured oracles: for PCA a
  :class:`~orthoplug.oracles.core.QuadraticOracle` keeping ``AX`` current (gradient rows in
  O(rp), cache update O(nrp)), for Procrustes the linear form's gradient rows ``−M[idx]/p``.
* ``RSDM-P (pymanopt front-end)`` — the same solver through ``orthoplug.adapters.pymanopt.RSDM``
  on the pymanopt problem (full gradients through pymanopt's numpy functions): the difference to
  ``RSDM-P`` is the price of the generic interface.
* ``pymanopt-SD`` / ``pymanopt-CG`` — pymanopt's steepest descent and conjugate gradient (their
  own line searches) on pymanopt's ``Stiefel`` (QR retraction).
* ``geoopt-RSGD`` / ``geoopt-RAdam`` — geoopt's Riemannian SGD / Adam on ``EuclideanStiefel``
  (geoopt's Stiefel with the QR retraction of the paper's RGD; the canonical one solves an n×n
  system per step), gradients by autograd.
* ``Landing``, ``PCAL``, ``RCD`` — the paper's baselines from :mod:`orthoplug.baselines`
  (Landing and PCAL are infeasible: their objective is evaluated on X as is, with the
  violation ``‖XᵀX − I‖_F`` beside it; RCD is Givens-rotation coordinate descent, one sweep per
  iteration).

Feasible methods see Procrustes in its linear form ``(‖A‖² + ‖B‖² − 2⟨X, BAᵀ⟩)/(2p)`` (equal to
``‖XA − B‖²/(2p)`` on St, as the paper notes); the infeasible ones the quadratic form, which is
also what :meth:`RSDMExperiment.evaluate` scores for every method.

Step sizes: the defaults in :data:`DEFAULTS` were tuned at the quick sizes on the grids in
:data:`GRIDS` (the paper's grid {0.01, 0.05, 0.1, 0.5, 1, 1.5, 2}, extended by {3, 5} for RSDM
and by smaller rates for Adam; penalty grids for Landing and PCAL; PCAL's Barzilai–Borwein step
or a fixed one), and are used unchanged at the paper sizes. On the QAP relaxation RSDM runs the
paper's Armijo line search from η = 0.1 with the classical growth γ = 2 of its memory
(``Armijo(growth=2.0)``; the library default 1.25 serves smooth narrow Stiefel problems, where
γ = 2 overshoots): on this nonconvex cost the larger first trials explore more basins
(docs/results/quick-suite-before-after.md). PCAL's BB step blows up on the square
Procrustes instance (its columns collapse: ``‖XᵀX − I‖_F ≈ n``), so there it runs with a small
fixed step. ``benchmarks/rsdm_stiefel.py`` (time to a target gap, and per-iteration scaling)
shares :data:`SIZES`, :data:`DEFAULTS`, :data:`GRIDS` and the problem constructors with this
module.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch

from orthoplug.baselines.landing import Landing
from orthoplug.baselines.pcal import PCAL
from orthoplug.baselines.rcd import RCD
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
from orthoplug.geometry.stiefel import StiefelGeometry, qf
from orthoplug.oracles import Oracle
from orthoplug.problems import qap
from orthoplug.problems.stiefel_problems import PCAProblem, ProcrustesProblem
from orthoplug.solvers.rsdm import RSDM
from orthoplug.solvers.steps import Armijo

__all__ = ["SIZES", "DEFAULTS", "GRIDS", "EXPERIMENTS", "RSDMExperiment", "ProcrustesExperiment",
           "PCAExperiment", "QAPExperiment", "OrthonetExperiment", "random_stiefel"]

#: (n, p, r) per scale and experiment; "paper" are the paper's sizes
SIZES: dict[str, dict[str, tuple[int, int, int]]] = {
    "paper": {"pca": (2000, 1500, 700), "procrustes": (2000, 2000, 900),
              "qap": (1000, 1000, 400)},
    "quick": {"pca": (400, 300, 140), "procrustes": (400, 400, 180), "qap": (100, 100, 40)},
}
#: tuned options per experiment and method (see the module docstring)
DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    "pca": {"RSDM-P": {"step_size": 1.5}, "RSDM-O": {"step_size": 1.5},
            "geoopt-RSGD": {"lr": 0.1}, "geoopt-RAdam": {"lr": 0.01},
            "Landing": {"step_size": 0.1, "penalty": 1.0},
            "PCAL": {"penalty": 1.5}, "RCD": {"step_size": 0.5}},
    "procrustes": {"RSDM-P": {"step_size": 1.0}, "RSDM-O": {"step_size": 1.0},
                   "geoopt-RSGD": {"lr": 0.5}, "geoopt-RAdam": {"lr": 0.01},
                   "Landing": {"step_size": 0.5, "penalty": 1.0},
                   "PCAL": {"penalty": 2.0, "step_size": 0.02}, "RCD": {"step_size": 1.0}},
    "qap": {"RSDM-P": {"step_size": 0.1, "line_search": Armijo(growth=2.0)},
            "RSDM-O": {"step_size": 0.1, "line_search": Armijo(growth=2.0)},
            "geoopt-RSGD": {"lr": 1e-3}, "geoopt-RAdam": {"lr": 0.01}},
}
_PAPER_STEPS = (0.01, 0.05, 0.1, 0.5, 1.0, 1.5, 2.0)
_PENALTIES = (0.1, 0.5, 1.0, 1.5, 2.0)
#: step-size (and penalty) grids searched when tuning
GRIDS: dict[str, list[dict[str, Any]]] = {
    "RSDM-P": [{"step_size": s} for s in (0.1, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0)],
    "RSDM-O": [{"step_size": s} for s in (0.1, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0)],
    "geoopt-RSGD": [{"lr": s} for s in _PAPER_STEPS],
    "geoopt-RAdam": [{"lr": s} for s in (1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)],
    "Landing": [{"step_size": s, "penalty": lam} for s in (0.05, 0.1, 0.5, 1.0)
                for lam in (0.1, 0.5, 1.0, 2.0)],
    "PCAL": [{"penalty": lam, "step_size": s} for lam in _PENALTIES
             for s in ("bb", 0.01, 0.02, 0.05, 0.1)],
    "RCD": [{"step_size": s} for s in _PAPER_STEPS],
}
#: the Landing and PCAL iterates are infeasible; their history is recorded every this many steps
_INFEASIBLE_EVAL_EVERY = 10


def random_stiefel(n: int, p: int, seed: int) -> torch.Tensor:
    """The papers' start ``qf(randn(n, p))`` (float64) from a torch generator seeded ``seed``."""
    gen = torch.Generator().manual_seed(int(seed))
    return qf(torch.randn(n, p, dtype=torch.float64, generator=gen))


def _solver_runner(solver_class: Callable, *, feasible: bool,
                   eval_every: int | None = None) -> Callable[..., Outcome]:
    """A :func:`~orthoplug.bench.core.custom_method` function running an orthoplug solver.

    ``feasible`` picks the experiment's structured oracle (feasible form, gradient rows) or its
    full-gradient oracle (the true cost off the manifold, for infeasible methods).
    """

    def run(experiment: RSDMExperiment, instance: Instance, *, seed: int, time_limit: float,
            **options) -> Outcome:
        problem = instance.data
        oracle = (experiment.feasible_oracle(problem) if feasible
                  else experiment.infeasible_oracle(problem))
        solver = solver_class(**budget(time_limit, options), seed=seed, eval_every=eval_every)
        x0 = torch.from_numpy(experiment.initial_point(instance, seed))
        result = solver.run(oracle, x0, StiefelGeometry(*x0.shape))
        diverged = result.stop_reason.startswith("stopped on")
        return Outcome(point=result.point.numpy(), iterations=result.iterations,
                       history=solver_history(result), status="diverged" if diverged else "ok",
                       message=result.stop_reason)

    return run


class RSDMExperiment(Experiment):
    """Shared part of the RSDM paper's Stiefel experiments: one instance, ten methods.

    Subclasses set ``name`` etc. and implement :meth:`build`, :meth:`feasible_oracle`,
    :meth:`infeasible_oracle`, :meth:`feasible_cost` and ``pymanopt_problem`` (on pymanopt's
    ``Stiefel``, with the feasible form of the cost).
    """

    suite = "rsdm"
    objective_label = "F(X)"
    time_limits = {"quick": 3.0, "paper": 60.0}
    #: dataset column: ``f"{dataset_prefix}-{n}x{p}"``
    dataset_prefix = ""
    #: one line for the table footnote
    data_note = ""

    # ---- problem hooks -------------------------------------------------------------------
    def build(self, n: int, p: int, seed: int) -> PCAProblem | ProcrustesProblem:
        """The problem object (data and closed-form optimum) for St(n, p)."""
        raise NotImplementedError

    def feasible_oracle(self, problem) -> Oracle:
        """The structured oracle for feasible methods (cheap gradient rows)."""
        raise NotImplementedError

    def infeasible_oracle(self, problem) -> Oracle:
        """A full-gradient oracle of the true cost (valid off the manifold)."""
        raise NotImplementedError

    def feasible_cost(self, problem) -> Callable[[torch.Tensor], torch.Tensor]:
        """The torch cost (feasible form) given to the geoopt methods as their loss."""
        raise NotImplementedError

    # ---- Experiment interface --------------------------------------------------------------
    def instance(self, n: int, p: int, r: int, seed: int) -> Instance:
        """One instance of St(n, p) with slice dimension r (recorded in ``sizes``)."""
        problem = self.build(n, p, seed)
        return Instance(dataset=f"{self.dataset_prefix}-{n}x{p}", sizes={"n": n, "p": p, "r": r},
                        data=problem, optimum=float(problem.optimum), note=self.data_note)

    def instances(self, scale: str, seed: int) -> list[Instance]:
        return [self.instance(*SIZES[scale][self.name], seed=seed)]

    def methods(self, scale: str) -> list[Method]:
        r = SIZES[scale][self.name][2]
        tuned = DEFAULTS[self.name]
        rsdm_p = {"r": r, **tuned["RSDM-P"]}
        return [
            custom_method("RSDM-P", "orthoplug",
                          _solver_runner(partial(RSDM, sampling="permutation"), feasible=True),
                          rsdm_p, GRIDS["RSDM-P"]),
            custom_method("RSDM-O", "orthoplug",
                          _solver_runner(partial(RSDM, sampling="orthogonal"), feasible=True),
                          {"r": r, **tuned["RSDM-O"]}, GRIDS["RSDM-O"]),
            pymanopt_method("RSDM-P (pymanopt front-end)", "orthoplug",
                            "orthoplug.adapters.pymanopt:RSDM", rsdm_p, GRIDS["RSDM-P"]),
            pymanopt_method("pymanopt-SD", "pymanopt", "pymanopt.optimizers:SteepestDescent"),
            pymanopt_method("pymanopt-CG", "pymanopt", "pymanopt.optimizers:ConjugateGradient"),
            torch_method("geoopt-RSGD", "geoopt", "geoopt.optim:RiemannianSGD",
                         tuned["geoopt-RSGD"], GRIDS["geoopt-RSGD"]),
            torch_method("geoopt-RAdam", "geoopt", "geoopt.optim:RiemannianAdam",
                         tuned["geoopt-RAdam"], GRIDS["geoopt-RAdam"]),
            custom_method("Landing", "baseline",
                          _solver_runner(Landing, feasible=False,
                                         eval_every=_INFEASIBLE_EVAL_EVERY),
                          tuned["Landing"], GRIDS["Landing"]),
            custom_method("PCAL", "baseline",
                          _solver_runner(PCAL, feasible=False,
                                         eval_every=_INFEASIBLE_EVAL_EVERY),
                          tuned["PCAL"], GRIDS["PCAL"]),
            custom_method("RCD", "baseline", _solver_runner(RCD, feasible=True),
                          tuned["RCD"], GRIDS["RCD"]),
        ]

    def evaluate(self, instance: Instance, point) -> dict[str, float]:
        """The true cost on X as is (quadratic form for Procrustes) and ``‖XᵀX − I‖_F``."""
        problem = instance.data
        x = torch.as_tensor(np.asarray(point), dtype=torch.float64)
        return {"objective": float(problem.cost(x)),
                "violation": float(StiefelGeometry(*x.shape).violation(x))}

    def initial_point(self, instance: Instance, seed: int) -> np.ndarray:
        return random_stiefel(instance.sizes["n"], instance.sizes["p"], seed).numpy()

    def torch_problem(self, instance: Instance):
        import geoopt

        return geoopt.EuclideanStiefel(), self.feasible_cost(instance.data)


class ProcrustesExperiment(RSDMExperiment):
    """Orthogonal Procrustes ``min ‖XA − B‖²/(2p)`` (see the module docstring)."""

    name = "procrustes"
    title = "Orthogonal Procrustes (RSDM paper, Fig. 2a-b)"
    dataset_prefix = "gauss"
    data_note = "A, B i.i.d. N(0, 1); F* from the SVD of BAᵀ; Landing/PCAL scored off St as is"

    def build(self, n: int, p: int, seed: int) -> ProcrustesProblem:
        return ProcrustesProblem.make(n, p, seed=seed)

    def feasible_oracle(self, problem: ProcrustesProblem) -> Oracle:
        return problem.oracle("linear")

    def infeasible_oracle(self, problem: ProcrustesProblem) -> Oracle:
        return problem.function_oracle("quadratic")

    def feasible_cost(self, problem: ProcrustesProblem) -> Callable[[torch.Tensor], torch.Tensor]:
        return problem.linear_cost

    def pymanopt_problem(self, instance: Instance):
        return instance.data.pymanopt_problem(form="linear")


class PCAExperiment(RSDMExperiment):
    """PCA ``min −½ tr(XᵀAX)`` with a condition-1000 spectrum (see the module docstring)."""

    name = "pca"
    title = "PCA, condition number 1000 (RSDM paper, Fig. 2c-d)"
    dataset_prefix = "cond1000"
    data_note = "A = Q diag(λ) Qᵀ, λ_i = 10·1000^(−(i−1)/(n−1)), Q Haar; F* = −½ Σ_{i≤p} λ_i"

    def build(self, n: int, p: int, seed: int) -> PCAProblem:
        return PCAProblem.make(n, p, cond=1000.0, top=10.0, scale=0.5, seed=seed)

    def feasible_oracle(self, problem: PCAProblem) -> Oracle:
        return problem.oracle()

    def infeasible_oracle(self, problem: PCAProblem) -> Oracle:
        return problem.function_oracle()

    def feasible_cost(self, problem: PCAProblem) -> Callable[[torch.Tensor], torch.Tensor]:
        return problem.cost

    def pymanopt_problem(self, instance: Instance):
        return instance.data.pymanopt_problem()


class QAPExperiment(RSDMExperiment):
    """Wen–Yin QAP relaxation ``min tr(Aᵀ(X⊙X)B(X⊙X)ᵀ)`` over St(n, n) (paper §7.3, Fig. 4).

    The paper's instance (A, B i.i.d. Gaussian, n = 1000) has no known optimum (the paper takes
    a long RGD run as reference), so its rows report F only; a planted instance
    (``A = −P*BP*ᵀ``, optimum ``−‖B‖²`` certified, see :mod:`orthoplug.problems.qap`) adds a
    gap column. Metric ``rounded_gap``: relative gap of the permutation rounded from ``X⊙X``
    (planted only). Methods: the feasible ones; RSDM with Armijo backtracking (a fixed step
    needs the unknown Lipschitz constant of this quartic cost).
    """

    name = "qap"
    title = "Quadratic assignment, Wen–Yin relaxation on St(n, n) (RSDM paper, Fig. 4)"
    metrics = ("rounded_gap",)

    def instances(self, scale: str, seed: int) -> list[Instance]:
        n, _, r = SIZES[scale]["qap"]
        gauss = qap.QAPProblem.make(n, seed=seed)
        planted = qap.QAPProblem.planted(n, seed=seed)
        return [Instance(f"gauss-{n}", {"n": n, "r": r}, gauss,
                         note="A, B i.i.d. N(0, 1) as in the paper: no certified optimum"),
                Instance(f"planted-{n}", {"n": n, "r": r}, planted, optimum=planted.optimum,
                         note="A = −P*BP*ᵀ: optimum −‖B‖²_F certified")]

    def methods(self, scale: str) -> list[Method]:
        r = SIZES[scale]["qap"][2]
        tuned = DEFAULTS["qap"]
        return [
            custom_method(name, "orthoplug",
                          _solver_runner(partial(RSDM, sampling=sampling), feasible=True),
                          {"r": r, **tuned[name]})
            for name, sampling in (("RSDM-P", "permutation"), ("RSDM-O", "orthogonal"))
        ] + [
            pymanopt_method("pymanopt-SD", "pymanopt", "pymanopt.optimizers:SteepestDescent"),
            pymanopt_method("pymanopt-CG", "pymanopt", "pymanopt.optimizers:ConjugateGradient"),
            torch_method("geoopt-RSGD", "geoopt", "geoopt.optim:RiemannianSGD",
                         tuned["geoopt-RSGD"], [{"lr": s} for s in (1e-4, 3e-4, 1e-3, 3e-3)]),
            torch_method("geoopt-RAdam", "geoopt", "geoopt.optim:RiemannianAdam",
                         tuned["geoopt-RAdam"], GRIDS["geoopt-RAdam"]),
        ]

    def evaluate(self, instance: Instance, point) -> dict[str, float]:
        out = super().evaluate(instance, point)
        problem = instance.data
        if problem.permutation is not None:
            _, cost = problem.round(torch.as_tensor(np.asarray(point), dtype=torch.float64))
            out["rounded_gap"] = problem.relative_gap(cost)
        return out

    def initial_point(self, instance: Instance, seed: int) -> np.ndarray:
        return random_stiefel(instance.sizes["n"], instance.sizes["n"], seed).numpy()

    def feasible_oracle(self, problem: qap.QAPProblem) -> Oracle:
        return problem.oracle()

    def feasible_cost(self, problem: qap.QAPProblem) -> Callable[[torch.Tensor], torch.Tensor]:
        return problem.cost

    def pymanopt_problem(self, instance: Instance):
        return instance.data.pymanopt_problem()


class OrthonetExperiment(Experiment):
    """Orthogonal MLP on scikit-learn digits (paper §7.4 on MNIST/CIFAR, offline substitute).

    Two hidden layers with column-orthonormal weights (geoopt ``EuclideanStiefel``), batch 16,
    unconstrained parameters with SGD at 0.1 as in the paper; only the Stiefel learning rate
    differs per optimizer. Objective: test error (1 − accuracy); metric ``accuracy``; violation
    ``max ‖WᵀW − I‖_F`` (float32 training). MNIST and CIFAR10 are not reachable offline.
    """

    name = "orthonet"
    suite = "rsdm"
    title = "Orthogonal MLP on digits (RSDM paper §7.4, digits instead of MNIST/CIFAR10)"
    objective_label = "test error"
    metrics = ("accuracy",)
    feasibility_tol = 1e-3  # float32 weights
    time_limits = {"quick": 6.0, "paper": 60.0}
    #: Stiefel learning rates (10 epochs, seed 0; RiemannianSGD best of {0.02, 0.05, 0.2})
    LR = {"RSDM-P": 0.05, "geoopt-RSGD": 0.02, "geoopt-RAdam": 3e-3}

    def instances(self, scale: str, seed: int) -> list[Instance]:
        hidden = 64 if scale == "quick" else 128
        return [Instance("digits", {"hidden": hidden, "layers": 2, "r": hidden // 2}, None,
                         note="scikit-learn digits, 64-d, stratified 75/25 split")]

    def methods(self, scale: str) -> list[Method]:
        names = {"RSDM-P": "RSDM", "geoopt-RSGD": "RiemannianSGD",
                 "geoopt-RAdam": "RiemannianAdam"}
        return [custom_method(name, "orthoplug" if name == "RSDM-P" else "geoopt",
                              partial(self._train, optimizer=opt), {"lr": self.LR[name]},
                              [{"lr": lr} for lr in (0.01, 0.02, 0.05, 0.1, 0.2)])
                for name, opt in names.items()]

    @staticmethod
    def _train(experiment, instance, *, seed, time_limit, optimizer, lr,
               max_iterations: int | None = None) -> Outcome:
        from orthoplug.training.orthonet import train_orthonet

        sizes = instance.sizes
        epochs = 10**6 if max_iterations is None else max_iterations  # an epoch: an iteration
        res = train_orthonet(optimizer, epochs=epochs, lr=lr, r=sizes["r"], seed=seed,
                             time_limit=time_limit, hidden=sizes["hidden"],
                             layers=sizes["layers"])
        return Outcome(point=res, iterations=res.epochs,
                       history=[(t, 1.0 - acc) for t, _, acc in res.history])

    def evaluate(self, instance: Instance, point) -> dict[str, float]:
        return {"objective": 1.0 - point.accuracy, "violation": point.violation,
                "accuracy": point.accuracy}


EXPERIMENTS: list[Experiment] = [ProcrustesExperiment(), PCAExperiment(), QAPExperiment(),
                                 OrthonetExperiment()]
