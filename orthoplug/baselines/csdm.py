r"""CSDM: a reduced hyperbolic-CS parametrisation trained with Adagrad (JOBCD papers' baseline).

After UltraE (Xiong et al., KDD 2022), whose relation matrices are J-orthogonal by construction.
The hyperbolic CS decomposition writes every ``V ∈ O(J)`` as ``U Σ Wᵀ`` with ``U, W``
orthogonal on the +1 and −1 index blocks and ``Σ`` a product of hyperbolic rotations on
disjoint (+, −) index pairs. CSDM keeps this shape but replaces the orthogonal factors by
*cheap* ones:

    Y(ψ) = R_L(θ_L) Σ(μ) R_R(θ_R),     X(ψ) = X₀ Y(ψ),   ψ = (θ_L, μ, θ_R) ∈ ℝ^P unconstrained,

* ``R(θ)`` is a product of ``layers`` brick layers; layer ``ℓ`` is block diagonal with a 2×2
  Givens rotation ``[[cos θ, −sin θ], [sin θ, cos θ]]`` on each pair of *consecutive* indices of
  the same sign (pairs start at offset ``ℓ mod 2`` inside the list of +1 indices and inside the
  list of −1 indices; signs are never mixed, so ``RᵀJR = J``);
* ``Σ(μ)`` has ``[[cosh μ_m, sinh μ_m], [sinh μ_m, cosh μ_m]]`` on the m-th (+, −) index pair
  ``(pos[m], neg[m])``, ``m < min(p, q)`` (the spec's §5 boost core), ``ΣᵀJΣ = J``.

Hence ``YᵀJ_kY = J_k`` for every ψ and ``X(ψ)ᵀJX(ψ) = X₀ᵀJX₀``: the iterates are feasible up to
rounding (``Y(0) = I``, so the run starts at the shared ``X₀``, our choice — the paper does not
say how CSDM is started). ``Y`` acts on the **columns** of ``X₀`` (``Y`` is k×k with signature
``J_k``), and each factor is applied as column-pair updates, ``O(n k)`` per layer; no k×k matrix
is formed. The gradient in ψ is the chain rule ``∂f/∂ψ = ⟨∇f(X), ∂X/∂ψ⟩`` through the column
updates (a hand-written reverse pass), so any oracle works (one ``∇f`` per iteration).

**Coverage.** The family covers only a small part of the group (the paper's "lost degrees of
freedom"): with one layer it has about ``k/2 + min(p,q) + k/2`` parameters against
``dim O(J_k) = k(k−1)/2``; more layers add parameters but the orthogonal factors remain far from
all of ``O(p) × O(q)``. Rotations and boosts lie in the identity component, so ``X(ψ)`` stays in
``X₀``'s connected component. UltraE's Givens **reflections** are not included: they are
discrete choices that Adagrad cannot train and they would break ``Y(0) = I``. The method
therefore stalls at points that are stationary only within the family (e.g. it does not reach
the HEVP certificate); compare ``result.cost`` with a certificate, not with the other methods'
stopping rules.

Not reproducible from the papers, and our choices: the exact factor structure of "CSDM" is not
given (the ICLR version trains it with Adagrad, the NeurIPS one names "Admm"), nor its start,
nor whether reflections are searched. We follow the spec (§6): one Givens layer by default,
``X = X₀ Y(ψ)`` from ``ψ = 0``, Adagrad with lr in [5e-4, 5e-3].
"""

from __future__ import annotations

import numpy as np
import torch

from orthoplug.geometry.signature import Signature
from orthoplug.oracles import finite
from orthoplug.solvers.base import IterativeSolver

from .admm import J_GEOMETRIES
from .umcm import make_adagrad

__all__ = ["CSDM", "CSParametrization"]


def _pairs(idx: np.ndarray, offset: int) -> np.ndarray:
    """Disjoint consecutive pairs of the index list ``idx`` starting at ``offset``: (m, 2)."""
    usable = idx[offset:]
    m = usable.size // 2
    return usable[: 2 * m].reshape(m, 2)


class CSParametrization:
    r"""The map ``ψ ↦ X₀ Y(ψ)`` for a column signature ``J_k`` (see the module docstring).

    Each factor layer acts on disjoint column pairs ``(a, b)`` as
    ``(XM)_a = c X_a + s X_b``, ``(XM)_b = σ s X_a + c X_b`` — a rotation (``c = cos θ``,
    ``s = sin θ``, ``σ = −1``) or a boost (``c = cosh μ``, ``s = sinh μ``, ``σ = +1``) — i.e.
    ``XM = X ∘ c_full + X[:, partner] ∘ s_full`` with one column gather. :meth:`vjp` is the
    hand-written reverse pass (``∂f/∂ψ`` from ``∇f(X)``), cheaper than autograd.

    Args:
        signature: ``J_k`` (a :class:`~orthoplug.geometry.signature.Signature`), the signature of
            the columns that ``Y`` mixes (``J`` itself for square problems).
        layers: Givens brick layers in each of ``R_L`` and ``R_R`` (≥ 1; 1 is UltraE's form).

    Attributes:
        num_parameters: ``P``, the length of ψ, ordered ``(θ_L, μ, θ_R)``.
    """

    def __init__(self, signature: Signature, layers: int = 1):
        if int(layers) != layers or layers < 1:
            raise ValueError(f"layers must be an integer >= 1, got {layers}")
        self.signature = signature
        k = signature.n
        pos, neg = signature.positive_indices(), signature.negative_indices()
        rot = [np.concatenate([_pairs(pos, layer % 2), _pairs(neg, layer % 2)], axis=0)
               for layer in range(int(layers))]
        rot = [p for p in rot if p.size]
        r = min(pos.size, neg.size)
        boost = np.stack([pos[:r], neg[:r]], axis=1).reshape(r, 2)
        # factor layers in the order they act on X₀'s columns: R_L, Σ, R_R (R_R mirrored)
        specs = [(p, -1.0) for p in rot] + ([(boost, 1.0)] if r else []) + \
            [(p, -1.0) for p in reversed(rot)]
        self._layers = []
        start = 0
        for pairs, sigma in specs:
            partner = np.arange(k)
            partner[pairs[:, 0]], partner[pairs[:, 1]] = pairs[:, 1], pairs[:, 0]
            m = pairs.shape[0]
            self._layers.append((torch.as_tensor(pairs[:, 0]), torch.as_tensor(pairs[:, 1]),
                                 torch.as_tensor(partner), sigma, slice(start, start + m)))
            start += m
        self.n_rot = sum(p.shape[0] for p in rot)
        self.n_boost = r
        self.num_parameters = start
        self._cache: list | None = None

    def split(self, psi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(θ_L, μ, θ_R)`` views of ψ."""
        self._check(psi)
        a, b = self.n_rot, self.n_rot + self.n_boost
        return psi[:a], psi[a:b], psi[b:]

    def _check(self, psi):
        if psi.shape != (self.num_parameters,):
            raise ValueError(f"psi must have shape ({self.num_parameters},), got "
                             f"{tuple(psi.shape)}")

    @staticmethod
    def _coefficients(angle, sigma):
        if sigma < 0:  # rotation
            return torch.cos(angle), torch.sin(angle), -torch.sin(angle), torch.cos(angle)
        return torch.cosh(angle), torch.sinh(angle), torch.sinh(angle), torch.cosh(angle)

    @staticmethod
    def _full(ia, ib, c, s, sigma, k, like):
        cf = torch.ones(k, dtype=like.dtype, device=like.device).index_put((ia,), c)
        cf = cf.index_put((ib,), c)
        sf = torch.zeros(k, dtype=like.dtype, device=like.device).index_put((ia,), s)
        return cf, sf.index_put((ib,), sigma * s)

    def apply(self, x0: torch.Tensor, psi: torch.Tensor, *, keep: bool = False) -> torch.Tensor:
        """``X₀ Y(ψ)``, ``O(n k)`` per factor layer (differentiable in ψ and X₀ by autograd).

        ``keep=True`` stores the layer inputs for a following :meth:`vjp`.
        """
        k = self.signature.n
        if x0.shape[-1] != k:
            raise ValueError(f"X0 must have {k} columns, got {x0.shape[-1]}")
        self._check(psi)
        psi = psi.to(x0)
        x = x0
        cache = []
        for ia, ib, partner, sigma, sl in self._layers:
            ia, ib, partner = ia.to(x.device), ib.to(x.device), partner.to(x.device)
            c, s, _, _ = self._coefficients(psi[sl], sigma)
            cf, sf = self._full(ia, ib, c, s, sigma, k, x)
            if keep:
                cache.append((x, cf, sf))
            x = x * cf + x[..., partner] * sf
        self._cache = cache if keep else None
        return x

    def vjp(self, psi: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """``∂⟨G, X(ψ)⟩/∂ψ`` for the point of the last ``apply(..., keep=True)`` at this ψ.

        For a pair layer with coefficients ``(c, s)`` and derivatives ``(c', s')``:
        ``∂f/∂angle = c'(G_a·X_a + G_b·X_b) + s'(G_a·X_b + σ G_b·X_a)``, and ``G`` is pulled
        back as ``G ∘ c_full + (G ∘ s_full)[:, partner]``.
        """
        if self._cache is None:
            raise ValueError("call apply(x0, psi, keep=True) before vjp")
        psi = psi.to(g)
        out = torch.zeros_like(psi)
        for (ia, ib, partner, sigma, sl), (x, cf, sf) in zip(
                reversed(self._layers), reversed(self._cache), strict=True):
            ia, ib, partner = ia.to(g.device), ib.to(g.device), partner.to(g.device)
            _, _, dc, ds = self._coefficients(psi[sl], sigma)
            u = (g * x).sum(dim=-2)
            v = (g * x[..., partner]).sum(dim=-2)
            out[sl] = dc * (u[ia] + u[ib]) + ds * (v[ia] + sigma * v[ib])
            g = g * cf + (g * sf)[..., partner]
        return out

    def matrix(self, psi: torch.Tensor) -> torch.Tensor:
        """The k×k matrix ``Y(ψ)`` (for tests and diagnostics)."""
        k = self.signature.n
        return self.apply(torch.eye(k, dtype=psi.dtype, device=psi.device), psi)


class CSDM(IterativeSolver):
    """Adagrad on the reduced hyperbolic-CS parameters ψ of ``X = X₀ Y(ψ)``.

    Args:
        step_size: Adagrad's learning rate (paper: tuned in [5e-4, 5e-3]; default 5e-3).
        step_decay: Adagrad's learning-rate decay (default 0).
        layers: Givens brick layers per orthogonal factor (default 1, UltraE's reduced form).
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options (``eval_every``
            default 1).

    ``result.info["parameters"]`` is the number of trainable parameters, to compare with the
    group dimension.
    """

    name = "CSDM"

    def __init__(self, *, step_size: float = 5e-3, step_decay: float = 0.0, layers: int = 1,
                 **kwargs):
        super().__init__(**kwargs)
        make_adagrad([torch.zeros(1, requires_grad=True)], step_size, step_decay)  # validate now
        if int(layers) != layers or layers < 1:
            raise ValueError(f"layers must be an integer >= 1, got {layers}")
        self.step_size, self.step_decay = float(step_size), float(step_decay)
        self.layers = int(layers)

    def prepare(self, oracle, x0, geometry):
        if x0.ndim != 2:
            raise ValueError(f"CSDM optimises one n × k matrix, got shape {tuple(x0.shape)}")
        if not isinstance(geometry, J_GEOMETRIES):
            raise ValueError("CSDM needs a J-orthogonal or indefinite Stiefel geometry")
        return oracle

    def setup(self, run):
        x = run.tracker.x
        run.param_map = CSParametrization(run.geometry.jk, self.layers)
        run.x0 = x.detach().clone()
        run.psi = torch.zeros(run.param_map.num_parameters, dtype=x.dtype, device=x.device,
                              requires_grad=True)
        run.adagrad = make_adagrad([run.psi], self.step_size, self.step_decay)
        run.param_map.apply(run.x0, run.psi.detach(), keep=True)  # Y(0) = I: tracker.x

    def step(self, run):
        grad_psi = finite(run.param_map.vjp(run.psi.detach(), run.tracker.gradient()),
                          "CSDM gradient")
        run.psi.grad = grad_psi
        run.adagrad.step()
        new = run.param_map.apply(run.x0, run.psi.detach(), keep=True)
        run.tracker.set_point(finite(new, "CSDM iterate"))

    def info(self, run=None):
        return {"step_size": self.step_size, "layers": self.layers,
                "parameters": None if run is None else run.param_map.num_parameters}
