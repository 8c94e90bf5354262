r"""UMCM: the unconstrained multiplier correction method (JOBCD papers' baseline, App. F.4).

For ``min f(X)`` s.t. ``E(X) = XᵀJX − J_k = 0``, the KKT conditions ``∇f = J X Λ`` with
``XᵀJX = J_k`` give the multiplier in closed form, ``Λ(X) = J_k Xᵀ∇f(X)``. Substituting it into
the Lagrangian and adding a quadratic penalty gives the unconstrained problem

    min_X h(X) = f(X) − ½ ⟨Λ(X), E(X)⟩ + β/2 ‖E(X)‖²_F,

which is minimised with ``torch.optim.Adagrad`` (the paper's choice; lr from [5e-4, 5e-3]) under
the dynamic penalty of :class:`~orthoplug.baselines.admm.PenaltySchedule`. With ``G = ∇f(X)``,
``A = J_k XᵀG`` and the Hessian-vector product ``H[V] = ∇²f(X)[V]``,

    ∇h(X) = G − ½ (G E J_k + H[X J_k E] + 2 J X sym(A)) + 2β J X E.

(Only ``sym(Λ)`` meets the symmetric ``E``.) ``∇h`` needs one Hessian-vector product per
iteration, supplied according to ``hvp``:

* ``"closed"``: for a :class:`~orthoplug.oracles.core.QuadraticOracle`
  ``f = s·tr(XᵀCXD)``, ``H[V] = 2s C V D`` (exact, one extra ``n×n`` by ``n×k`` product);
* ``"autograd"``: torch double backward through the oracle's gradient. Supported when the
  oracle's gradient is itself differentiable in torch — e.g. a
  :class:`~orthoplug.oracles.core.FunctionOracle` whose ``gradient`` callable is written in
  torch, or :class:`~orthoplug.problems.hspp.HSPP`'s finite-sum oracle, whose component
  gradients keep the graph when ``X`` requires grad;
* ``"finite-difference"``: central differences ``(∇f(X+εV) − ∇f(X−εV))/2ε`` (two extra
  gradients; any oracle, including pymanopt problems through a FunctionOracle on numpy);
* ``"auto"`` (default): closed form for quadratics, else autograd if the gradient carries a
  graph, else finite differences. ``result.info["hvp"]`` says which one ran.

UMCM is **infeasible** (penalty method): report ``result.violation`` with the cost.

With the paper's dynamic β the penalty gradients ``2βJXE`` soon dominate Adagrad's accumulator,
the effective step on ``f`` vanishes and the cost freezes near the start while the violation
falls; a fixed β and a larger step approach the certificate (the evidence:
``docs/guide/defaults.md``). The method is implemented as described; the paper's schedule is
what stalls it.
"""

from __future__ import annotations

from functools import partial

import torch

from orthoplug.geometry._linalg import sym
from orthoplug.oracles import QuadraticOracle, finite
from orthoplug.solvers.base import IterativeSolver

from .admm import J_GEOMETRIES, PenaltySchedule

__all__ = ["UMCM", "umcm_gradient", "make_adagrad"]

_HVP_MODES = ("auto", "closed", "autograd", "finite-difference")


def make_adagrad(params, step_size: float, step_decay: float = 0.0) -> torch.optim.Adagrad:
    """``torch.optim.Adagrad`` with validated options (shared by UMCM and CSDM)."""
    if not step_size > 0:
        raise ValueError(f"step_size must be > 0, got {step_size}")
    if not step_decay >= 0:
        raise ValueError(f"step_decay must be >= 0, got {step_decay}")
    return torch.optim.Adagrad(params, lr=step_size, lr_decay=step_decay)


def umcm_gradient(x, g, hvp, jn, jk, beta: float) -> torch.Tensor:
    """``∇h(X)`` from ``G = ∇f(X)`` and ``hvp(V) = ∇²f(X)[V]`` (``jn``, ``jk``: diagonals of J,
    J_k)."""
    jx = jn[:, None] * x
    e = x.mT @ jx - torch.diag(jk)
    a = jk[:, None] * (x.mT @ g)
    hv = hvp((x * jk) @ e)
    return g - 0.5 * (g @ (e * jk) + hv + 2.0 * jx @ sym(a)) + 2.0 * beta * jx @ e


class UMCM(IterativeSolver):
    """Unconstrained multiplier correction with Adagrad and a dynamic penalty.

    Args:
        step_size: Adagrad's learning rate (paper: tuned in [5e-4, 5e-3]; default 5e-3).
        step_decay: Adagrad's learning-rate decay (default 0).
        beta: initial penalty (paper's dynamic rule: ×2 every 5 iterations while ``β ≤ 1e9``),
            or a :class:`~orthoplug.baselines.admm.PenaltySchedule` / dict of its options.
        hvp: Hessian-vector products: ``"auto"``, ``"closed"`` (QuadraticOracle only),
            ``"autograd"`` (differentiable oracle gradient) or ``"finite-difference"``.
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options (``eval_every``
            default 1).
    """

    name = "UMCM"

    def __init__(self, *, step_size: float = 5e-3, step_decay: float = 0.0, beta=1e2,
                 hvp: str = "auto", **kwargs):
        super().__init__(**kwargs)
        make_adagrad([torch.zeros(1, requires_grad=True)], step_size, step_decay)  # validate now
        if hvp not in _HVP_MODES:
            raise ValueError(f"hvp must be one of {_HVP_MODES}, got {hvp!r}")
        self.step_size, self.step_decay, self.hvp_mode = float(step_size), float(step_decay), hvp
        self.schedule = PenaltySchedule.coerce(beta)

    def prepare(self, oracle, x0, geometry):
        if x0.ndim != 2:
            raise ValueError(f"UMCM optimises one n × k matrix, got shape {tuple(x0.shape)}")
        if not isinstance(geometry, J_GEOMETRIES):
            raise ValueError("UMCM needs a J-orthogonal or indefinite Stiefel geometry")
        if self.hvp_mode == "closed" and not isinstance(oracle.quadratic, QuadraticOracle):
            raise ValueError("hvp='closed' needs a QuadraticOracle")
        return oracle

    def setup(self, run):
        x, oracle = run.tracker.x, run.oracle
        run.jn, run.jk = run.geometry.j.like(x), run.geometry.jk.like(x)
        mode = self.hvp_mode
        if mode == "auto" and isinstance(oracle.quadratic, QuadraticOracle):
            mode = "closed"
        elif mode in ("auto", "autograd"):
            differentiable = self._differentiable(oracle, x)
            if mode == "autograd" and not differentiable:
                raise ValueError("hvp='autograd' needs an oracle whose gradient is "
                                 "differentiable in torch; use hvp='finite-difference'")
            mode = "autograd" if differentiable else "finite-difference"
        run.mode = mode
        run.param = x.detach().clone().requires_grad_(True)
        run.adagrad = make_adagrad([run.param], self.step_size, self.step_decay)
        run.hvp_count = 0

    @staticmethod
    def _differentiable(oracle, x) -> bool:
        with torch.enable_grad():
            xl = x.detach().clone().requires_grad_(True)
            try:
                g = oracle.gradient(xl)
            except (RuntimeError, TypeError, ValueError):
                return False
        return bool(g.requires_grad)

    @staticmethod
    def _gradient_and_hvp(tracker, mode: str):
        """``(G, hvp)`` at the current point for the Hessian-vector ``mode``."""
        x, oracle = tracker.x, tracker.oracle
        if mode == "closed":
            return tracker.gradient(), partial(oracle.quadratic.hessian_vector, x)
        if mode == "autograd":
            with torch.enable_grad():
                xl = x.detach().clone().requires_grad_(True)
                g = tracker.gradient_at(xl)

            def hvp(v):
                return torch.autograd.grad(g, xl, grad_outputs=v.detach())[0]

            return g.detach(), hvp
        g = tracker.gradient()

        def hvp(v):
            eps = 1e-6 * max(float(torch.linalg.norm(x)), 1.0) / max(
                float(torch.linalg.norm(v)), 1e-300)
            return (tracker.gradient_at(x + eps * v) - tracker.gradient_at(x - eps * v)) / (2 * eps)

        return g, hvp

    def step(self, run):
        tracker = run.tracker
        beta = self.schedule(run.iteration)
        g, hvp = self._gradient_and_hvp(tracker, run.mode)
        grad_h = finite(umcm_gradient(tracker.x, g, hvp, run.jn, run.jk, beta),
                        "UMCM gradient")
        run.hvp_count += 1
        run.param.grad = grad_h
        run.adagrad.step()
        tracker.set_point(finite(run.param.detach(), "UMCM iterate"))

    def info(self, run=None):
        return {"step_size": self.step_size, "beta": repr(self.schedule),
                "hvp": None if run is None else run.mode,
                "hessian_vector_products": 0 if run is None else run.hvp_count,
                "final_beta": self.schedule(max((run.iteration if run else 1) - 1, 0))}
