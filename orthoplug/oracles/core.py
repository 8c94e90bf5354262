r"""The oracle interface every solver is written against.

An :class:`Oracle` describes the smooth objective ``f``: its value and Euclidean gradient, and
optionally structure the block methods exploit. During a run, a solver works through a
:class:`Tracker` (``oracle.track(X)``): it owns the current iterate and keeps whatever caches
make row-block updates cheap.

* :class:`FunctionOracle` — value and gradient callables (pymanopt problems, torch closures).
  Its tracker recomputes the gradient lazily after a change (one evaluation per iteration).
* :class:`QuadraticOracle` — ``f(X) = s·tr(Xᵀ C X D)`` with symmetric C, D. Its tracker keeps
  ``Y = C X`` and updates it in ``O(n k |B|)`` after a change of rows ``B``: the fast path, with
  gradient rows ``2 s Y[B] D`` and the exact block curvature of JOBCD/OBCD.
* :class:`FiniteSumOracle` — ``f = (1/N) Σ f_i`` with minibatch gradients (VR-J-JOBCD, stochastic
  RSDM); ``component_gradient(X, idx)`` returns the mean gradient over ``idx``. With ``shard=``
  it is data parallel over ``torch.distributed`` ranks (:mod:`orthoplug.distributed`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from orthoplug._random import randn
from orthoplug.distributed import Shard

__all__ = [
    "Oracle",
    "FunctionOracle",
    "QuadraticOracle",
    "FiniteSumOracle",
    "Tracker",
    "NonFiniteError",
    "QuadraticTracker",
    "host_array",
    "all_finite",
    "finite",
    "estimate_lipschitz",
]


class NonFiniteError(FloatingPointError):
    """The cost or gradient evaluated to NaN or ±inf.

    Args:
        message: what was not finite.
        iterations: iterations a multi-step call completed before it (see
            :meth:`~orthoplug.solvers.base.IterativeSolver.steps`).
    """

    def __init__(self, message: str = "", iterations: int = 0):
        super().__init__(message)
        self.iterations = iterations


def all_finite(t: torch.Tensor) -> bool:
    """Whether every entry is finite: one reduction (a NaN or ±inf makes the sum non-finite;
    the exact check runs only then, so finite entries whose sum overflows still pass)."""
    if math.isfinite(float(t.detach().sum())):
        return True
    return bool(torch.isfinite(t).all())


def finite(t: torch.Tensor, what: str) -> torch.Tensor:
    """``t`` itself if every entry is finite, else raise :class:`NonFiniteError` naming
    ``what`` (e.g. ``"gradient"``)."""
    if not all_finite(t):
        raise NonFiniteError(f"non-finite {what}")
    return t


def estimate_lipschitz(gradient: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                       generator: torch.Generator | None = None, iterations: int = 20) -> float:
    """Local estimate of ``L_f`` = ‖∇²f(X)‖₂ by power iteration on central differences of ∇f.

    Exact (up to the power iteration) for quadratics; for other costs it is the curvature at
    ``x`` only, not a global bound. Costs ``2·iterations`` calls of ``gradient`` (an oracle's
    ``gradient``, or a tracker's counted ``gradient_at``).
    """
    v = randn(*x.shape, dtype=x.dtype, device=x.device, generator=generator)
    v = v / torch.linalg.norm(v)
    scale = max(float(torch.linalg.norm(x)), 1.0)
    lam = 0.0
    for _ in range(iterations):
        eps = 1e-5 * scale
        hv = (gradient(x + eps * v) - gradient(x - eps * v)) / (2 * eps)
        lam = float(torch.linalg.norm(hv))
        if not (lam > 0 and math.isfinite(lam)):
            break
        v = hv / lam
    return max(lam, 1e-12)


class Oracle:
    """Smooth objective ``f``: subclasses implement :meth:`value` and :meth:`gradient`."""

    #: ``None`` unless the objective is ``s·tr(XᵀCXD)`` (then a :class:`QuadraticOracle`).
    quadratic: QuadraticOracle | None = None
    #: Lipschitz constant of ∇f in the Frobenius norm if known (used for safe scalar curvature).
    lipschitz: float | None = None
    #: The :class:`~orthoplug.distributed.Shard` of a data-parallel objective (else ``None``):
    #: its value and gradient are collectives, so the run loop keeps the ranks in step.
    shard: Shard | None = None
    #: True when :meth:`value_and_gradient` costs about one gradient (the value comes out of
    #: the gradient's forward pass): J-JOBCD then may check a step by the pair at the trial
    #: point and keep its gradient when the step is accepted
    #: (:meth:`~orthoplug.solvers.base.ScalarCurvature.accept_step`).
    fused_value_gradient: bool = False
    #: True when the oracle's ``gradient_columns(X, cols)`` (the
    #: :class:`~orthoplug.oracles.abilities.ColumnGradients` ability) computes only the columns
    #: asked for, at about ``|cols|/p`` of a gradient's cost; RSSM then counts one pass over
    #: the columns as one iteration (``docs/guide/options.md``, "What one iteration is").
    column_gradients: bool = False

    def value(self, x: torch.Tensor) -> torch.Tensor:
        """``f(X)`` as a 0-dimensional tensor on X's device."""
        raise NotImplementedError

    def gradient(self, x: torch.Tensor) -> torch.Tensor:
        """The Euclidean gradient ``∇f(X)``, same shape as X."""
        raise NotImplementedError

    def value_and_gradient(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(f(X), ∇f(X))``; override when both come cheaper together (and then set
        :attr:`fused_value_gradient`)."""
        return self.value(x), self.gradient(x)

    def track(self, x: torch.Tensor) -> Tracker:
        """A :class:`Tracker` holding a copy of X: the run's view of the iterate."""
        return Tracker(self, x)


class FunctionOracle(Oracle):
    """An oracle from callables ``value(X) -> scalar`` and ``gradient(X) -> ∇f(X)``.

    Args:
        value: the cost.
        gradient: its Euclidean gradient.
        hessian: optional ``hessian(X, U) -> ∇²f(X)[U]``, the Euclidean Hessian applied to U.
            Given, the oracle has the :class:`~orthoplug.oracles.abilities.HessianVector`
            ability (a ``hessian_vector`` method); without it, it has not.
        lipschitz: optional Lipschitz constant of the gradient.
        value_and_gradient: optional ``value_and_gradient(X) -> (f(X), ∇f(X))`` in one pass
            (e.g. an autograd forward and backward). Given, it serves
            :meth:`~Oracle.value_and_gradient` and :attr:`~Oracle.fused_value_gradient` is set.
    """

    def __init__(self, value: Callable, gradient: Callable, *, hessian: Callable | None = None,
                 lipschitz: float | None = None, value_and_gradient: Callable | None = None):
        self._value, self._gradient, self._hessian = value, gradient, hessian
        self._value_and_gradient = value_and_gradient
        self.fused_value_gradient = value_and_gradient is not None
        self.lipschitz = lipschitz
        if hessian is not None:  # the ability exists only when a Hessian was given
            self.hessian_vector = self._hessian_vector

    @staticmethod
    def _checked(out, x: torch.Tensor, what: str) -> torch.Tensor:
        """A callable's output as a finite tensor of X's dtype and device: one number for the
        cost, X's shape otherwise.

        Raises:
            ValueError: a cost that is not one number, or a matrix of another shape than X.
            NonFiniteError: non-finite entries.
        """
        t = torch.as_tensor(out, dtype=x.dtype, device=x.device)
        if what == "cost" and t.numel() != 1:
            raise ValueError(f"FunctionOracle: the cost must return one number, got shape "
                             f"{tuple(t.shape)}")
        if what != "cost" and t.shape != x.shape:
            raise ValueError(f"FunctionOracle: the {what} must have the point's shape "
                             f"{tuple(x.shape)}, got {tuple(t.shape)}")
        return finite(t.reshape(()) if what == "cost" else t, what)

    def _hessian_vector(self, x, u):
        return self._checked(self._hessian(x, u), x, "Hessian-vector product")

    def value(self, x):
        return self._checked(self._value(x), x, "cost")

    def gradient(self, x):
        return self._checked(self._gradient(x), x, "gradient")

    def value_and_gradient(self, x):
        if self._value_and_gradient is None:
            return super().value_and_gradient(x)
        value, grad = self._value_and_gradient(x)
        return self._checked(value, x, "cost"), self._checked(grad, x, "gradient")


class QuadraticOracle(Oracle):
    """``f(X) = scale · tr(Xᵀ C X D)`` with symmetric ``C`` (n×n) and ``D`` (k×k, default I).

    ``∇f = 2·scale·C X D`` and the Hessian is ``H = 2·scale·(D ⊗ C)`` (column-major vec), so the
    block curvature for a row block ``B`` with ``Z = X[B]`` is
    ``Q̲ = 2·scale·(Z D Zᵀ) ⊗ C_BB`` (exact model: ``f(X⁺)`` equals it for any row change).
    """

    def __init__(self, c: torch.Tensor, d: torch.Tensor | None = None, scale: float = 1.0):
        c = torch.as_tensor(c)
        if c.is_complex() or c.dtype == torch.bool:
            raise TypeError(f"C must be a real matrix, got dtype {c.dtype}")
        if not c.is_floating_point():  # integer data: exact in float64
            c = c.to(torch.float64)
        if c.ndim != 2 or c.shape[0] != c.shape[1]:
            raise ValueError(f"C must be a square matrix, got shape {tuple(c.shape)}")
        if not _is_finite(c) or not math.isfinite(scale):
            raise ValueError("C and scale must be finite")
        if not _is_symmetric(c):
            raise ValueError("C must be symmetric")
        if d is not None:
            d = torch.as_tensor(d, dtype=c.dtype, device=c.device)
            if d.ndim != 2 or d.shape[0] != d.shape[1] or not torch.allclose(d, d.mT):
                raise ValueError(f"D must be a symmetric square matrix, got {tuple(d.shape)}")
        self.c, self.d, self.scale = c, d, float(scale)
        self.quadratic = self
        self._cd_key = None  # (device, dtype) of the cached C, D (see _cd)
        self._lipschitz: float | None = None
        self._psd: bool | None = None

    def _spectrum(self) -> None:
        """``lipschitz`` and ``curvature_is_psd`` from the eigenvalues of C and D: computed on
        first use only (``eigvalsh`` works on an n×n copy of C, which methods that never ask for
        them, e.g. RSDM, should not pay for)."""
        lam = torch.linalg.eigvalsh(self.c)
        lam_d = torch.ones(1) if self.d is None else torch.linalg.eigvalsh(self.d)
        if self._lipschitz is None:
            self._lipschitz = 2.0 * abs(self.scale) * float(lam.abs().max() * lam_d.abs().max())
        # Q̲ = 2s (Z D Zᵀ) ⊗ C_BB is PSD for every block iff s·C and D are both PSD or both NSD
        self._psd = bool(
            (self.scale >= 0 and lam.min() >= 0 and lam_d.min() >= 0)
            or (self.scale <= 0 and lam.max() <= 0 and lam_d.min() >= 0)
        )

    @property
    def lipschitz(self) -> float:
        """``2|s|·max|λ(C)|·max|λ(D)|``, the Lipschitz constant of ∇f (or the value set)."""
        if self._lipschitz is None:
            self._spectrum()
        return self._lipschitz

    @lipschitz.setter
    def lipschitz(self, value: float | None) -> None:
        self._lipschitz = value

    @property
    def curvature_is_psd(self) -> bool:
        """Whether every block curvature ``Q̲`` is PSD (s·C and D both PSD or both NSD)."""
        if self._psd is None:
            self._spectrum()
        return self._psd

    def _cd(self, x):
        """``C`` and ``D`` on X's device and dtype (the last conversion is kept: a CPU ``C``
        is copied to the GPU once, not at every call)."""
        key = (x.device, x.dtype)
        if self._cd_key != key:
            self._cd_cached = (self.c.to(x), None if self.d is None else self.d.to(x))
            self._cd_key = key
        return self._cd_cached

    def value(self, x):
        c, d = self._cd(x)
        cx = c @ x
        return self.scale * ((x * cx).sum() if d is None else (x * (cx @ d)).sum())

    def gradient(self, x):
        return self.hessian_vector(x, x)

    def hessian_vector(self, x, u):
        """``∇²f(X)[U] = 2·scale·C U D`` (the
        :class:`~orthoplug.oracles.abilities.HessianVector` ability; ``∇f(X)`` is it at
        ``U = X``)."""
        c, d = self._cd(x)
        g = c @ u
        return 2.0 * self.scale * (g if d is None else g @ d)

    def track(self, x):
        """A :class:`QuadraticTracker` at X.

        Raises:
            ValueError: C's size is not X's number of rows, or D's not its number of columns.
        """
        if x.shape[-2] != self.c.shape[0]:
            raise ValueError(f"QuadraticOracle: C is {tuple(self.c.shape)} but the point has "
                             f"{x.shape[-2]} rows")
        if self.d is not None and x.shape[-1] != self.d.shape[0]:
            raise ValueError(f"QuadraticOracle: D is {tuple(self.d.shape)} but the point has "
                             f"{x.shape[-1]} columns")
        return QuadraticTracker(self, x)


class FiniteSumOracle(Oracle):
    """``f(X) = (1/N) Σ_i f_i(X)`` given a minibatch gradient ``component_gradient(X, idx)``.

    Data parallel (``shard=``, under ``torch.distributed``): this rank holds the components
    ``shard`` (global numbers, in the order of its local data; e.g.
    ``Shard.contiguous(N).indices``). Indices passed to :meth:`component_gradient` and drawn by
    the solvers are global and the same on every rank (the solvers' generators share their
    seed); each rank calls the callables on the *positions in its local data* of the drawn
    components it holds (not at all when it holds none), and the count-weighted partial means
    are summed over the group, so every rank gets the mean over all drawn components — the
    value a single process holding all N components computes.

    Args:
        num_components: N (global).
        component_value: ``(X, idx) -> mean of f_i(X) over idx`` (a LongTensor of indices,
            on X's device; local positions when sharded).
        component_gradient: ``(X, idx) -> mean of ∇f_i(X) over idx``.
        component_value_and_gradient: optional ``(X, idx) -> (mean of f_i, mean of ∇f_i)``
            over idx in one pass; given, it serves :meth:`value_and_gradient` and
            :attr:`~Oracle.fused_value_gradient` is set.
        lipschitz: optional Lipschitz constant of ∇f.
        shard: this rank's components (see above); ``None``: all N.
        process_group: the ``torch.distributed`` group of a sharded oracle (default: world).

    Raises:
        ValueError: N < 1, or shards that do not partition ``0..N-1`` (checked at
            construction with one all-reduce).
    """

    def __init__(self, num_components: int, component_value: Callable,
                 component_gradient: Callable, *, lipschitz: float | None = None,
                 shard=None, process_group=None,
                 component_value_and_gradient: Callable | None = None):
        if num_components < 1:
            raise ValueError(f"num_components must be >= 1, got {num_components}")
        self.num_components = int(num_components)
        self._cv, self._cg = component_value, component_gradient
        self._cvg = component_value_and_gradient
        self.fused_value_gradient = component_value_and_gradient is not None
        self.lipschitz = lipschitz
        if shard is not None:
            self.shard = Shard(self.num_components, shard, process_group)
            self.shard.validate()

    def _all(self, x):
        return torch.arange(self.num_components, device=x.device)

    def _means(self, fn: Callable, x: torch.Tensor, idx: torch.Tensor,
               likes: tuple[torch.Tensor, ...], whats: tuple[str, ...]) -> list[torch.Tensor]:
        """The means of ``fn``'s per-component terms over the global ``idx`` (summed over the
        shards when data parallel); ``fn`` returns one mean, or a tuple of them (``likes``
        and ``whats`` name one entry per mean)."""
        def checked(out):
            out = out if len(likes) > 1 else (out,)
            return [finite(torch.as_tensor(o, dtype=x.dtype, device=x.device), what)
                    for o, what in zip(out, whats, strict=True)]

        if self.shard is None:
            return checked(fn(x, idx))
        local = self.shard.local(idx)
        parts = checked(fn(x, local)) if local.numel() else [None] * len(likes)
        return self.shard.combine(parts, int(local.numel()), int(idx.numel()), list(likes))

    def value(self, x):
        return self._means(self._cv, x, self._all(x),
                           (torch.zeros((), dtype=x.dtype, device=x.device),), ("cost",))[0]

    def gradient(self, x):
        return self.component_gradient(x, self._all(x))

    def value_and_gradient(self, x):
        if self._cvg is None:
            return super().value_and_gradient(x)
        value, grad = self._means(self._cvg, x, self._all(x),
                                  (torch.zeros((), dtype=x.dtype, device=x.device), x),
                                  ("cost", "gradient"))
        return value, grad

    def component_gradient(self, x, idx):
        """The mean of ``∇f_i(X)`` over the indices ``idx`` (a LongTensor on X's device)."""
        return self._means(self._cg, x, idx, (x,), ("gradient",))[0]


class Tracker:
    """The current iterate of a run plus lazily computed value and gradient.

    Solvers read ``x``, call :meth:`gradient_rows` / :meth:`gradient` / :meth:`value`, and
    write through :meth:`set_rows` (or :meth:`set_point`), which invalidates the caches.

    **Gradient evaluations** (``gradient_evaluations``, the result's count for every solver)
    are full-gradient equivalents obtained through the tracker: 1 per full gradient, at the
    current point (:meth:`gradient`) or elsewhere (:meth:`gradient_at`); ``|idx|/N`` per
    component mean of a finite sum (:meth:`component_gradient`); ``r/n`` per r rows and
    ``c/p`` per c columns computed by an oracle's row or column function. Minibatch gradients
    of a :class:`~orthoplug.oracles.rows.StochasticOracle` (no N) are counted as samples by the
    solver instead. A solver obtains every gradient through its tracker.
    """

    #: whether :meth:`gradient_rows` costs only the rows asked for (here: no, it computes the
    #: full gradient and gathers); block methods count one pass over the rows as one iteration
    #: when it does (``docs/guide/options.md``, "What one iteration is").
    row_gradients = False
    #: whether ``gradient_columns`` costs only the columns asked for (here: the tracker has no
    #: column access); see :class:`~orthoplug.oracles.columns.ColumnTracker`.
    column_gradients = False

    def __init__(self, oracle: Oracle, x: torch.Tensor):
        self.oracle = oracle
        self.x = x.clone()
        self._value: torch.Tensor | None = None
        self._grad: torch.Tensor | None = None
        self.gradient_evaluations: float = 0

    def count_gradients(self, amount: float) -> None:
        """Add ``amount`` full-gradient equivalents to ``gradient_evaluations``."""
        self.gradient_evaluations += amount

    def gradient_at(self, x: torch.Tensor) -> torch.Tensor:
        """``∇f(x)`` at another point than the current one (counted, not cached)."""
        self.count_gradients(1)
        return self.oracle.gradient(x)

    def value_and_gradient_at(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(f(x), ∇f(x))`` at another point than the current one (one oracle call,
        :meth:`~Oracle.value_and_gradient`; counted as one gradient, not cached: hand both to
        :meth:`set_point` when X moves there)."""
        self.count_gradients(1)
        return self.oracle.value_and_gradient(x)

    def component_gradient(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """The mean gradient of the finite-sum components ``idx`` at ``x`` (counted as
        ``|idx|/N``; the oracle must have the ``FiniteSum`` ability)."""
        self.count_gradients(int(idx.numel()) / self.oracle.num_components)
        return self.oracle.component_gradient(x, idx)

    def value(self) -> torch.Tensor:
        """``f`` at the current point (cached until the point changes)."""
        if self._value is None:
            self._value = self.oracle.value(self.x)
        return self._value

    def gradient(self) -> torch.Tensor:
        """``∇f`` at the current point (cached; counted in ``gradient_evaluations``)."""
        if self._grad is None:
            self._grad = self.oracle.gradient(self.x)
            self.gradient_evaluations += 1
        return self._grad

    def gradient_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """Rows ``rows`` (any index shape) of ∇f at the current point."""
        return self.gradient()[rows]

    def set_rows(self, rows: torch.Tensor, new_rows: torch.Tensor) -> None:
        """``X[rows] = new_rows`` (rows must be distinct)."""
        if rows.ndim == 1:  # (index_copy_: several times faster than index_put_ on r rows)
            self.x.index_copy_(0, rows, new_rows)
        else:
            self.x[rows] = new_rows
        self._value = None
        self._grad = None

    def set_point(self, x: torch.Tensor, value: torch.Tensor | None = None,
                  gradient: torch.Tensor | None = None) -> None:
        """``X = x``; ``value`` and ``gradient``, if given, are ``f(x)`` and ``∇f(x)`` already
        computed (and counted, e.g. by :meth:`value_and_gradient_at`) by the caller."""
        self.x = x.clone()
        self._value = value
        self._grad = gradient

    def add_low_rank(self, u: torch.Tensor, v: torch.Tensor) -> None:
        """``X ← X + U V`` (U: n×r, V: r×k), e.g. RSDM-O's rotation ``X + P(r)ᵀ(Y − I)P(r)X``."""
        self.x = self.x + u @ v
        self._value = None
        self._grad = None


class QuadraticTracker(Tracker):
    """Keeps ``Y = C X`` and ``f`` current under row changes: ``O(n k |B|)`` per change.

    It has the :class:`~orthoplug.oracles.abilities.QuadraticArrays` ability (the state the
    compiled pair loops read and write) and :class:`~orthoplug.oracles.abilities.PairModel`.

    The row-level math runs on the tracker's *arrays* ``xa, ya, ca`` (and ``D``): NumPy views
    sharing memory with the torch tensors ``x, y`` when they live on the CPU (no per-operation
    torch overhead in the block methods' hot loops), the tensors themselves on other devices.
    :meth:`gradient_rows_array`, :meth:`set_rows_array` and :meth:`pair_model_array` take and
    return such arrays; :meth:`gradient_rows` and :meth:`set_rows` are their torch front-ends.
    """

    row_gradients = True

    def __init__(self, oracle: QuadraticOracle, x: torch.Tensor):
        super().__init__(oracle, x)
        c, d = oracle._cd(self.x)
        self.c, self.d = c, d
        self.ca, self.da = host_array(c), (None if d is None else host_array(d))
        self.eye4 = host_array(torch.eye(4, dtype=c.dtype, device=c.device))
        # the compiled pair model and row update (imported here: ``import orthoplug`` loads no
        # numba)
        from orthoplug.kernels import quadratic

        self._kernels = quadratic
        self._gemm = None  # BLAS gemm for the in-place block update of Y (host only)
        if isinstance(self.ca, np.ndarray):  # scratch of the compiled pair model (host only)
            dt = self.ca.dtype
            self._d0 = np.empty((0, 0), dt) if self.da is None else self.da
            self._zw = np.empty((2, 2, x.shape[-1]), dt)
            from scipy.linalg.blas import get_blas_funcs  # (scipy.linalg: slow to import)

            self._gemm = get_blas_funcs("gemm", (self.ca,))
        self.s = oracle.scale
        self.refresh()

    @property
    def x(self) -> torch.Tensor:
        """The current point X (setting it also refreshes its host view ``xa``)."""
        return self._x

    @x.setter
    def x(self, value: torch.Tensor) -> None:
        self._x = value
        self.xa = host_array(value)

    @property
    def y(self) -> torch.Tensor:
        """The cached product ``Y = C X`` (setting it also refreshes its host view ``ya``)."""
        return self._y

    @y.setter
    def y(self, value: torch.Tensor) -> None:
        self._y = value
        self.ya = host_array(value)

    @property
    def on_host(self) -> bool:
        """True when the arrays are NumPy views (CPU tensors)."""
        return isinstance(self.xa, np.ndarray)

    @property
    def cost(self) -> float:
        """f at the current point (kept current by every row update; a compiled loop that
        moved ``xa`` and ``ya`` in place sets it)."""
        return self._f

    @cost.setter
    def cost(self, value: float) -> None:
        self._f = float(value)

    @property
    def curvature_is_psd(self) -> bool:
        """Whether every block curvature ``2s (Z D Zᵀ) ⊗ C_BB`` is PSD (s·C and D both PSD or
        both NSD)."""
        return self.oracle.curvature_is_psd

    def refresh(self) -> None:
        """Recompute ``Y`` and ``f`` from scratch (drift control)."""
        self.y = self.c @ self.x
        self._f = self.s * float((self.xa * self._times_d(self.ya)).sum())

    def _times_d(self, a):
        return a if self.da is None else a @ self.da

    def value_with_rows(self, rows: torch.Tensor, new_rows: torch.Tensor) -> float:
        """``f`` after ``X[rows] ← new_rows`` without changing X:
        ``f + s⟨Δ, (2(CX)[B] + C_BB Δ) D⟩``, O(r²p) for r rows (NaN if not finite)."""
        idx = self._index(rows)
        delta = host_array(new_rows.to(self.x.dtype)) - self.xa[idx]
        w = self._times_d(2.0 * self.ya[idx] + self.ca[idx[:, None], idx[None, :]] @ delta)
        change = float(np.vdot(delta, w) if isinstance(delta, np.ndarray) else (delta * w).sum())
        value = float(self.value()) + self.s * change
        return value if math.isfinite(value) else math.nan

    def _index(self, rows: torch.Tensor):
        return rows.numpy() if self.on_host else rows

    def _tensor(self, a) -> torch.Tensor:
        return torch.from_numpy(a) if isinstance(a, np.ndarray) else a

    def value(self):
        return torch.tensor(self._f, dtype=self.x.dtype, device=self.x.device)

    def gradient(self):
        self.gradient_evaluations += 1
        return self._tensor((2.0 * self.s) * self._times_d(self.ya))

    def gradient_rows_array(self, rows):
        """Rows ``rows`` (an index array of the tracker's kind, any shape) of ``∇f = 2s Y D``."""
        return (2.0 * self.s) * self._times_d(_take(self.ya, rows))

    def gradient_rows(self, rows):
        return self._tensor(self.gradient_rows_array(self._index(rows)))

    def set_rows_array(self, rows, new_rows, value: float | None = None) -> None:
        """``X[rows] = new_rows`` on the arrays (rows: distinct, 1-D); updates ``Y`` and ``f``:
        ``Y += C[B]ᵀ Δ`` and ``f += s⟨Δ D, Y[B] + Y⁺[B]⟩`` with ``Y⁺[B] = Y[B] + C_BB Δ``
        (:func:`~orthoplug.kernels.quadratic.update_rows` on the host for a row pair, else the
        same expressions as matrix products, NumPy's on the host and torch's on other devices:
        the compiled loop reads C's rows once per column of Y, which is faster for two rows
        and many times slower than a matrix product for RSDM's r-row blocks). ``value``, if
        given, is the new ``f`` already priced by :meth:`value_with_rows` (finite): the
        matrix-product path then skips reading ``Y⁺[B]`` back (O(bk), b = len(rows)).

        Raises :class:`NonFiniteError` (and leaves X unchanged, Y and f those of X: a non-finite
        cost found after Y was updated is undone by :meth:`refresh`) if the change or the new
        cost is not finite.
        """
        delta = new_rows - _take(self.xa, rows)
        kq = self._kernels
        if self.on_host and len(rows) == 2:
            with np.errstate(invalid="ignore", over="ignore"):  # a non-finite Δ is refused
                dd = self._times_d(delta)
            status, value = kq.update_rows(self.xa, self.ya, self.ca, self.s, self._f,
                                           int(rows[0]), int(rows[1]), new_rows, delta, dd)
            if status != kq.OK:
                raise NonFiniteError(kq.MESSAGES[status])
            self._f = value
            return
        if not math.isfinite(float(delta.sum())):
            raise NonFiniteError(kq.MESSAGES[kq.NONFINITE_UPDATE])
        c_b = _take(self.ca, rows)  # C[B], r×n
        y_old = _take(self.ya, rows) if value is None else None
        # C symmetric: C[:, B] Δ = C[B]ᵀ Δ; on the host Yᵀ += Δᵀ C[B] in place by BLAS (NumPy's
        # product and sum allocate an n×k temporary and pass over Y twice)
        if self.on_host and self.ya.flags.c_contiguous:
            self._gemm(1.0, delta.T, c_b.T, 1.0, self.ya.T, trans_b=1, overwrite_c=1)
        else:
            self.ya += c_b.T @ delta
        if value is None:  # Y⁺[B] = Y[B] + C_BB Δ read back: O(bk), not the O(b²k) product
            value = self._f + self.s * _dot(self._times_d(delta), y_old + _take(self.ya, rows))
        if not math.isfinite(value):  # X was not written: Y and f back from it
            self.refresh()
            raise NonFiniteError(kq.MESSAGES[kq.NONFINITE_COST])
        self._f = value
        self.xa[rows] = new_rows

    def set_rows(self, rows, new_rows, value: float | None = None):
        """``X[rows] = new_rows`` (:meth:`set_rows_array`; ``value``: f there, if priced)."""
        rows = rows.reshape(-1)
        new_rows = new_rows.reshape(rows.numel(), -1)
        self.set_rows_array(self._index(rows), host_array(new_rows.to(self.x.dtype)), value)

    def set_point(self, x, value=None, gradient=None):
        self.x = x.clone()
        self.refresh()

    def add_low_rank(self, u, v):
        """``X ← X + U V`` keeping ``Y`` and ``f`` current: ``O(n² r + n r k)``."""
        ua, va = host_array(u.to(self.x.dtype)), host_array(v.to(self.x.dtype))
        cu_v = (self.ca @ ua) @ va
        delta = ua @ va
        dv = 2.0 * float((delta * self._times_d(self.ya)).sum())
        dv += float((delta * self._times_d(cu_v)).sum())
        self._f += self.s * dv
        self.x = self._tensor(self.xa + delta)
        self.y = self._tensor(self.ya + cu_v)

    def _block_curvature(self, rows, z, *, psd=True):
        """``Q̲ = 2s (Z D Zᵀ) ⊗ C_BB`` (its PSD part when ``psd``) of a pair ``rows`` (2,) with
        rows ``z`` (2, k), on tensors of other devices (the host runs
        :func:`~orthoplug.kernels.quadratic.pair_model`)."""
        zdz = z @ self._times_d(z).swapaxes(-1, -2)  # (NumPy < 2 has no .mT)
        c_bb = self.ca[rows[..., :, None], rows[..., None, :]]
        q = _kron2((2.0 * self.s) * zdz, c_bb)
        if not math.isfinite(float(q.sum())):
            raise NonFiniteError(self._kernels.MESSAGES[self._kernels.NONFINITE_CURVATURE])
        return self._psd_part(q) if psd else q

    def _psd_part(self, q):
        """The PSD part of the blocks' ``Q̲`` (negative eigenvalues clipped to 0; ``q`` itself
        when every block's is PSD)."""
        if self.curvature_is_psd:
            return q
        lam, v = (np.linalg.eigh(q) if isinstance(q, np.ndarray) else torch.linalg.eigh(q))
        return (v * lam.clip(0.0)[..., None, :]) @ v.swapaxes(-1, -2)

    def pair_model_array(self, rows, prox: float, *, psd: bool = True):
        """The exact model of a step on ONE row pair, on the arrays: ``(Z, M, Q)``.

        ``rows``: an index array (2,) of the tracker's kind; ``Z = X[B]`` (2, k),
        ``M = ∇f(X)[B] Zᵀ`` (2, 2) and ``Q = Q̲ + prox·I₄`` (4, 4) with
        ``Q̲ = 2s (Z D Zᵀ) ⊗ C_BB`` (its PSD part when ``psd``). The shared front half of the
        exact pair steps of GS-JOBCD (``psd=True``, prox θ) and OBCD (``psd=False``, prox α);
        the back half is :meth:`set_rows_array` with ``V Z``. On the host it is
        :func:`~orthoplug.kernels.quadratic.pair_model`, the compiled loops' model.
        """
        if not self.on_host:
            z = _take(self.xa, rows)
            m = self.gradient_rows_array(rows) @ z.T
            return z, m, self._block_curvature(rows, z, psd=psd) + prox * self.eye4
        z, w = self._zw
        q = np.empty((4, 4), self.xa.dtype)
        i, j = rows.tolist()
        kq = self._kernels
        ok, m11, m12, m21, m22 = kq.pair_model(self.xa, self.ya, self.ca, self._d0, self.s, prox,
                                               psd and not self.curvature_is_psd, i, j, z, w, q)
        if not ok:
            raise NonFiniteError(kq.MESSAGES[kq.NONFINITE_CURVATURE])
        return z.copy(), np.array([[m11, m12], [m21, m22]], dtype=q.dtype), q


def _is_finite(c: torch.Tensor, rows: int = 64) -> bool:
    """Whether every entry of ``c`` is finite, checked ``rows`` rows at a time (O(n·rows) extra
    memory)."""
    return all(bool(torch.isfinite(c[i:i + rows]).all()) for i in range(0, c.shape[0], rows))


def _is_symmetric(c: torch.Tensor, rows: int = 64) -> bool:
    """``torch.allclose(c, cᵀ, atol=1e-12·max|c|)`` for a square ``c``, checked ``rows`` rows at
    a time (O(n·rows) extra memory instead of several n×n temporaries)."""
    n = c.shape[0]
    scale = max((float(c[i:i + rows].abs().max()) for i in range(0, n, rows)), default=0.0)
    atol = 1e-12 * scale + 1e-300
    return all(torch.allclose(c[i:i + rows], c[:, i:i + rows].mT, atol=atol)
               for i in range(0, n, rows))


def host_array(t: torch.Tensor):
    """A NumPy view of a CPU tensor (shared memory); other tensors unchanged."""
    return t.detach().numpy() if t.device.type == "cpu" else t


def _kron2(a, b):
    """Batched Kronecker product of 2×2 matrices: (..., 2, 2) ⊗ (..., 2, 2) → (..., 4, 4)."""
    return (a[..., :, None, :, None] * b[..., None, :, None, :]).reshape(*a.shape[:-2], 4, 4)


def _take(a, rows, axis: int = 0):
    """``a[rows]`` (axis 0) or ``a[:, rows]`` (axis 1) for an array of the tracker's kind (NumPy's
    ``take`` is about 3× faster than its fancy indexing on small index arrays)."""
    if isinstance(a, np.ndarray):
        return a.take(rows, axis)
    return a[rows] if axis == 0 else a[:, rows]


def _dot(a, b) -> float:
    """``⟨a, b⟩`` of two arrays of the same shape (C-contiguous NumPy arrays, or tensors)."""
    return float(np.vdot(a, b) if isinstance(a, np.ndarray) else (a * b).sum())
