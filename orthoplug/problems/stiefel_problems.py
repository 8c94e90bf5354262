r"""Stiefel benchmark problems with data generators and closed-form optima (the RSDM paper's set).

* :class:`PCAProblem` — ``F(X) = −s·tr(XᵀAX)`` over St(n, p) (or Gr(n, p)), ``A ≻ 0`` with an
  exponentially decaying spectrum ``λ_i = λ_1·κ^{−(i−1)/(n−1)}`` (condition number κ) and Haar
  eigenvectors, ``A = Q diag(λ) Qᵀ`` (the paper's public code builds ``Q D Q``, which is neither
  PD nor of condition κ). Optimum ``F* = −s Σ_{i≤p} λ_i`` at the top-p eigenvectors.
* :class:`ProcrustesProblem` — ``F(X) = s·‖XA − B‖_F²``; optimum ``X* = UVᵀ`` from the thin SVD
  ``UΣVᵀ = BAᵀ`` and ``F* = s(‖A‖² + ‖B‖² − 2 tr Σ)`` (any n ≥ p).
* :class:`QAPProblem` — Wen–Yin's relaxation ``F(X) = tr(Aᵀ(X⊙X)B(X⊙X)ᵀ)`` on St(n, n); no
  closed form.
* :func:`digits_data` and :class:`OrthogonalMLP` — a small classifier with Stiefel hidden layers
  on scikit-learn's digits (geoopt ``ManifoldParameter``\\ s).

Each problem gives an :class:`~orthoplug.oracles.core.Oracle` (``oracle()``; with cheap
gradient rows where the structure allows, for RSDM-P), a plain value/gradient oracle
(``function_oracle()``) for full-gradient methods, and ``pymanopt_problem(manifold)`` with
hand-written numpy cost and gradient.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from orthoplug.geometry.stiefel import polar, qf
from orthoplug.oracles import FunctionOracle, QuadraticOracle, RowGradientOracle, StochasticOracle
from orthoplug.problems import relative_gap

__all__ = ["PCAProblem", "ProcrustesProblem", "QAPProblem", "digits_data", "OrthogonalMLP"]


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


def _pymanopt_problem(manifold, cost, grad):
    import pymanopt

    @pymanopt.function.numpy(manifold)
    def cost_fn(x):
        return float(cost(torch.from_numpy(np.asarray(x, dtype=np.float64))))

    @pymanopt.function.numpy(manifold)
    def grad_fn(x):
        return grad(torch.from_numpy(np.asarray(x, dtype=np.float64))).numpy()

    return pymanopt.Problem(manifold, cost_fn, euclidean_gradient=grad_fn)


class PCAProblem:
    r"""``min −s·tr(XᵀAX)`` over St(n, p): the top-p eigenspace of an SPD ``A``.

    Build with :meth:`make`. Attributes: ``a`` (n×n), ``eigenvalues`` (descending, length n),
    ``x_star`` (n×p top eigenvectors), ``optimum`` (``F*``), ``scale`` (s).

    Oracles: :meth:`oracle` is a :class:`~orthoplug.oracles.core.QuadraticOracle` (keeps
    ``AX`` current under row changes, so RSDM-P reads gradient rows in O(rp) and updates the
    cache in O(nrp)); :meth:`function_oracle` evaluates ``−2sAX`` in O(n²p) per call;
    :meth:`stochastic_oracle` streams samples ``ξ ~ N(0, A)`` (``F = −s E‖Xᵀξ‖²``).
    """

    def __init__(self, a: torch.Tensor, eigenvalues: torch.Tensor, eigenvectors: torch.Tensor,
                 p: int, scale: float = 0.5):
        self.a, self.eigenvalues, self.p, self.scale = a, eigenvalues, int(p), float(scale)
        self.n = a.shape[0]
        self.x_star = eigenvectors[:, :p].clone()
        self.optimum = -self.scale * float(eigenvalues[:p].sum())
        self._chol = None

    @classmethod
    def make(cls, n: int, p: int, *, cond: float = 1000.0, top: float = 10.0,
             scale: float = 0.5, seed: int = 0, dtype=torch.float64) -> PCAProblem:
        """The paper's recipe: ``λ_i = top·cond^{−(i−1)/(n−1)}``, ``A = Q diag(λ) Qᵀ``, Q Haar.

        Costs one n×n QR (O(n³)).
        """
        if not 1 <= p <= n:
            raise ValueError(f"need 1 <= p <= n, got n={n}, p={p}")
        if not cond >= 1:
            raise ValueError(f"cond must be >= 1, got {cond}")
        expo = torch.arange(n, dtype=dtype) / max(n - 1, 1)
        lam = top * torch.as_tensor(cond, dtype=dtype) ** (-expo)
        return cls.from_spectrum(lam, p, scale=scale, seed=seed, dtype=dtype)

    @classmethod
    def from_spectrum(cls, eigenvalues, p: int, *, scale: float = 0.5, seed: int = 0,
                      dtype=torch.float64) -> PCAProblem:
        """``A = Q diag(λ) Qᵀ`` with Haar Q for given eigenvalues (sorted descending here)."""
        lam = torch.as_tensor(eigenvalues, dtype=dtype).sort(descending=True).values
        n = lam.shape[0]
        if not 1 <= p <= n:
            raise ValueError(f"need 1 <= p <= n, got n={n}, p={p}")
        q = qf(torch.randn(n, n, dtype=dtype, generator=_generator(seed)))
        a = (q * lam) @ q.mT
        return cls(0.5 * (a + a.mT), lam, q, p, scale)

    # ---- cost ------------------------------------------------------------------------------
    def cost(self, x: torch.Tensor) -> torch.Tensor:
        """``F(X) = −s·tr(XᵀAX)``."""
        return -self.scale * (x * (self.a.to(x) @ x)).sum()

    def gradient(self, x: torch.Tensor) -> torch.Tensor:
        """``∇F(X) = −2s·AX``."""
        return -2.0 * self.scale * (self.a.to(x) @ x)

    def relative_gap(self, value) -> float:
        """``|value − F*| / |F*|`` against the closed-form optimum ``F* = −s Σ_{i≤p} λ_i``."""
        return relative_gap(value, self.optimum)

    def target(self, gap: float) -> float:
        """The cost at relative gap ``gap`` above the optimum."""
        return self.optimum + gap * abs(self.optimum)

    # ---- oracles -----------------------------------------------------------------------------
    def oracle(self) -> QuadraticOracle:
        """The quadratic fast-path oracle, ``QuadraticOracle(A, scale=−s)`` (cached ``AX``, gradient
        rows).
        """
        return QuadraticOracle(self.a, scale=-self.scale)

    def function_oracle(self) -> FunctionOracle:
        """A plain value/gradient oracle with the Lipschitz constant ``2s·λ_1`` (no fast path)."""
        lip = 2.0 * self.scale * float(self.eigenvalues[0])
        return FunctionOracle(self.cost, self.gradient, lipschitz=lip)

    def stochastic_oracle(self) -> StochasticOracle:
        """Streamed ``ξ_b ~ N(0, A)``: minibatch gradient ``−(2s/B) Σ_b ξ_b ξ_bᵀ X``, O(npB)."""
        if self._chol is None:
            self._chol = torch.linalg.cholesky(self.a)

        def sample(x, batch_size, generator):
            z = self._chol.to(x) @ torch.randn(self.n, batch_size, dtype=x.dtype,
                                               device=x.device, generator=generator)
            return (-2.0 * self.scale / batch_size) * (z @ (z.mT @ x))

        return StochasticOracle(sample, value=self.cost, gradient=self.gradient)

    def pymanopt_problem(self, manifold=None):
        """A ``pymanopt.Problem`` (numpy cost and gradient) on ``manifold`` (default Stiefel)."""
        if manifold is None:
            from pymanopt.manifolds import Stiefel

            manifold = Stiefel(self.n, self.p)
        return _pymanopt_problem(manifold, self.cost, self.gradient)


class ProcrustesProblem:
    r"""``min s·‖XA − B‖_F²`` over St(n, p), ``A ∈ ℝ^{p×p}``, ``B ∈ ℝ^{n×p}``.

    Build with :meth:`make` (i.i.d. N(0, 1) data; ``scale`` defaults to ``1/(2p)`` as in the
    paper's code). ``x_star = UVᵀ`` and ``optimum = s(‖A‖² + ‖B‖² − 2 tr Σ)`` from the thin SVD
    of ``M = BAᵀ``.

    On St, ``‖XA‖² = ‖A‖²``, so ``F(X) = s(‖A‖² + ‖B‖² − 2⟨X, M⟩)``: the *linear form* (the
    paper: "for feasible methods the problem reduces to a linear function"). ``form="quadratic"``
    evaluates the true ``‖XA − B‖²`` with gradient ``2s(XAAᵀ − M)`` (needed by infeasible methods),
    ``form="linear"`` the linear one with constant gradient ``−2sM``; both agree (values, and
    ``skew(GXᵀ)`` hence every RSDM/RGD step) on the manifold. Gradient rows: O(rp²) resp. O(rp).
    """

    def __init__(self, a: torch.Tensor, b: torch.Tensor, scale: float | None = None):
        self.a, self.b = a, b
        self.n, self.p = b.shape
        self.scale = 1.0 / (2 * self.p) if scale is None else float(scale)
        self.m = b @ a.mT
        self.s = a @ a.mT
        self.x_star = polar(self.m)
        self.const = float((a * a).sum() + (b * b).sum())
        nuclear = float(torch.linalg.matrix_norm(self.m, ord="nuc"))
        self.optimum = self.scale * (self.const - 2.0 * nuclear)

    @classmethod
    def make(cls, n: int, p: int, *, scale: float | None = None, seed: int = 0,
             dtype=torch.float64) -> ProcrustesProblem:
        """An instance with i.i.d. N(0, 1) ``A`` (p×p) and ``B`` (n×p) drawn with ``seed``.

        Raises:
            ValueError: unless ``1 ≤ p ≤ n``.
        """
        if not 1 <= p <= n:
            raise ValueError(f"need 1 <= p <= n, got n={n}, p={p}")
        gen = _generator(seed)
        a = torch.randn(p, p, dtype=dtype, generator=gen)
        b = torch.randn(n, p, dtype=dtype, generator=gen)
        return cls(a, b, scale)

    def cost(self, x: torch.Tensor) -> torch.Tensor:
        """``F(X) = s‖XA − B‖_F²`` (the quadratic form, valid off the manifold too)."""
        r = x @ self.a.to(x) - self.b.to(x)
        return self.scale * (r * r).sum()

    def gradient(self, x: torch.Tensor) -> torch.Tensor:
        """``∇F(X) = 2s(XAAᵀ − M)`` with ``M = BAᵀ``."""
        return 2.0 * self.scale * (x @ self.s.to(x) - self.m.to(x))

    def linear_cost(self, x: torch.Tensor) -> torch.Tensor:
        """The linear form ``s(‖A‖² + ‖B‖² − 2⟨X, M⟩)``, equal to :meth:`cost` on St(n, p)."""
        return self.scale * (self.const - 2.0 * (x * self.m.to(x)).sum())

    def linear_gradient(self, x: torch.Tensor) -> torch.Tensor:
        """The constant gradient ``−2sM`` of :meth:`linear_cost`."""
        return (-2.0 * self.scale) * self.m.to(x)

    def relative_gap(self, value) -> float:
        """``|value − F*| / |F*|`` against the SVD optimum."""
        return relative_gap(value, self.optimum)

    def target(self, gap: float) -> float:
        """The cost at relative gap ``gap`` above the optimum."""
        return self.optimum + gap * abs(self.optimum)

    def _check_form(self, form):
        if form not in ("quadratic", "linear"):
            raise ValueError(f"form must be 'quadratic' or 'linear', got {form!r}")

    def oracle(self, form: str = "quadratic") -> RowGradientOracle:
        """Value, gradient, gradient rows (``2s(X[idx]AAᵀ − M[idx])`` or ``−2sM[idx]``) and the
        cost change of a row change ``X[idx] ← Z`` (``s(‖ZA − B[idx]‖² − ‖X[idx]A − B[idx]‖²)``,
        O(rp²), or ``−2s⟨M[idx], Z − X[idx]⟩``, O(rp)).
        """
        self._check_form(form)
        if form == "linear":
            def linear_change(x, rows, new):
                return (-2.0 * self.scale) * float((self.m.to(x)[rows] * (new - x[rows])).sum())

            return RowGradientOracle(self.linear_cost, self.linear_gradient,
                                     lambda x, rows: (-2.0 * self.scale) * self.m.to(x)[rows],
                                     row_value_change=linear_change)

        def change(x, rows, new):
            a, b = self.a.to(x), self.b.to(x)[rows]
            res_new, res_old = new @ a - b, x[rows] @ a - b
            return self.scale * float((res_new * res_new).sum() - (res_old * res_old).sum())

        return RowGradientOracle(
            self.cost, self.gradient,
            lambda x, rows: 2.0 * self.scale * (x[rows] @ self.s.to(x) - self.m.to(x)[rows]),
            row_value_change=change)

    def function_oracle(self, form: str = "quadratic") -> FunctionOracle:
        """A plain value/gradient oracle of the ``"quadratic"`` or ``"linear"`` form (no row
        access).
        """
        self._check_form(form)
        if form == "linear":
            return FunctionOracle(self.linear_cost, self.linear_gradient)
        return FunctionOracle(self.cost, self.gradient)

    def pymanopt_problem(self, manifold=None, form: str = "quadratic"):
        """A ``pymanopt.Problem`` with NumPy cost and gradient of ``form`` (default manifold:
        pymanopt's Stiefel(n, p)).
        """
        self._check_form(form)
        if manifold is None:
            from pymanopt.manifolds import Stiefel

            manifold = Stiefel(self.n, self.p)
        if form == "linear":
            return _pymanopt_problem(manifold, self.linear_cost, self.linear_gradient)
        return _pymanopt_problem(manifold, self.cost, self.gradient)


class QAPProblem:
    r"""Wen–Yin's QAP relaxation ``F(X) = tr(Aᵀ S B Sᵀ)``, ``S = X⊙X``, on St(n, n).

    ``∇F = 2X ⊙ (A S Bᵀ + Aᵀ S B)`` (O(n³) per gradient). No closed-form optimum: compare against
    a long reference run.
    """

    def __init__(self, a: torch.Tensor, b: torch.Tensor):
        self.a, self.b = a, b
        self.n = a.shape[0]

    @classmethod
    def make(cls, n: int, *, seed: int = 0, dtype=torch.float64) -> QAPProblem:
        """An instance with i.i.d. N(0, 1) ``A`` and ``B`` (n×n) drawn with ``seed``."""
        gen = _generator(seed)
        return cls(torch.randn(n, n, dtype=dtype, generator=gen),
                   torch.randn(n, n, dtype=dtype, generator=gen))

    def cost(self, x: torch.Tensor) -> torch.Tensor:
        """``F(X) = tr(Aᵀ S B Sᵀ)`` with ``S = X⊙X``."""
        s = x * x
        return (self.a.to(x) * (s @ self.b.to(x) @ s.mT)).sum()

    def gradient(self, x: torch.Tensor) -> torch.Tensor:
        """``∇F = 2X ⊙ (A S Bᵀ + Aᵀ S B)`` (O(n³))."""
        a, b = self.a.to(x), self.b.to(x)
        s = x * x
        return 2.0 * x * (a @ s @ b.mT + a.mT @ s @ b)

    def function_oracle(self) -> FunctionOracle:
        """A value/gradient oracle (also available as ``oracle``)."""
        return FunctionOracle(self.cost, self.gradient)

    oracle = function_oracle

    def pymanopt_problem(self, manifold=None):
        """A ``pymanopt.Problem`` with NumPy cost and gradient (default manifold: pymanopt's
        Stiefel(n, n)).
        """
        if manifold is None:
            from pymanopt.manifolds import Stiefel

            manifold = Stiefel(self.n, self.n)
        return _pymanopt_problem(manifold, self.cost, self.gradient)


# ---------------------------------------------------------------------------------------------
# Orthogonal MLP on scikit-learn's digits
# ---------------------------------------------------------------------------------------------


def digits_data(*, test_fraction: float = 0.25, seed: int = 0, dtype=torch.float32):
    """scikit-learn's 8×8 digits scaled to [−1, 1]: ``(x_train, y_train, x_test, y_test)``.

    A stratified split with ``seed``; needs scikit-learn.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x = data.data / 8.0 - 1.0
    xtr, xte, ytr, yte = train_test_split(x, data.target, test_size=test_fraction,
                                          random_state=seed, stratify=data.target)
    return (torch.as_tensor(xtr, dtype=dtype), torch.as_tensor(ytr, dtype=torch.long),
            torch.as_tensor(xte, dtype=dtype), torch.as_tensor(yte, dtype=torch.long))


class OrthogonalMLP(torch.nn.Module):
    r"""``x ↦ W_Lᵀ σ(W_{L−1} ⋯ σ(W_1 x + b_1) ⋯ + b_{L−1}) + b_L`` with Stiefel hidden weights.

    ``W_1 ∈ St(hidden, d)`` (columns orthonormal, ``hidden ≥ d``), ``W_2..W_{L−1} ∈
    St(hidden, hidden)``, all geoopt ``ManifoldParameter``\\ s on ``manifold`` (default
    ``geoopt.EuclideanStiefel()``), initialised at Haar-random points; ReLU; the output layer
    and the biases are ordinary parameters.
    """

    def __init__(self, d: int, hidden: int, classes: int, *, layers: int = 2, manifold=None,
                 seed: int = 0, dtype=torch.float32):
        import geoopt

        super().__init__()
        if hidden < d:
            raise ValueError(f"hidden = {hidden} must be >= d = {d} for St(hidden, d)")
        manifold = manifold or geoopt.EuclideanStiefel()
        gen = _generator(seed)
        shapes = [(hidden, d)] + [(hidden, hidden)] * (layers - 1)
        self.weights = torch.nn.ParameterList([
            geoopt.ManifoldParameter(qf(torch.randn(*s, dtype=torch.float64, generator=gen))
                                     .to(dtype), manifold=manifold) for s in shapes])
        self.biases = torch.nn.ParameterList([
            torch.nn.Parameter(torch.zeros(hidden, dtype=dtype)) for _ in shapes])
        self.out = torch.nn.Linear(hidden, classes, dtype=dtype)
        with torch.no_grad():
            self.out.weight.copy_(torch.randn(classes, hidden, generator=gen)
                                  / math.sqrt(hidden))
            self.out.bias.zero_()

    def forward(self, x):
        for w, b in zip(self.weights, self.biases, strict=True):
            x = torch.relu(x @ w.mT + b)
        return self.out(x)
