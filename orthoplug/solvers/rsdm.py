r"""RSDM: Riemannian random submanifold descent on St(n, p) and Gr(n, p).

Each iteration moves the iterate by a rotation restricted to a random r-dimensional slice of O(n)
(:mod:`orthoplug.geometry.submanifold`):

    X⁺ = U(Y) X = X + P(r)ᵀ (Y − I_r) P(r) X,     Y = Retr_{I_r}(−η Γ),
    Γ = skew(B Cᵀ),  B = P(r) ∇F(X),  C = P(r) X     (formula (4): Γ = P(r) skew(∇F Xᵀ) P(r)ᵀ).

``U(Y)`` is orthogonal, so ``XᵀX`` is preserved exactly up to round-off (start from an
orthonormal ``X0``); the iterate is re-orthonormalised every ``stabilize`` slice steps against
the drift of round-off (default 1000, ``None``: never). For Grassmann (``F(XQ) = F(X)``)
nothing changes but the representation (any orthonormal basis) and the stationarity measure
the run loop reports (the horizontal gradient ``G − XXᵀG``); the same holds for
SO(n) = St(n, n) with ``det = +1``, which every retraction here preserves.

Host synchronisation (torch on a GPU; no GPU was available to measure it). The slice
sampling, the products and the retraction stay on the device; each iteration still reads
back to the host: the finiteness check of the new rows before they are written (one scalar,
:func:`~orthoplug.oracles.core.all_finite`; fixed step: the only sync with a
:class:`~orthoplug.oracles.rows.RowGradientOracle`); with a
:class:`~orthoplug.oracles.core.QuadraticTracker`, the finiteness of Δ and the cost change it
adds to its host-side running value (two scalars); with Armijo or ``"polar"``, ``‖Γ‖²``, the
current cost and one cost per trial, which decide the step (inherent to a line search); the
``"polar"`` step's determinant sign and its rotation's guard (two scalars per trial). The geoopt
front-end checks each gradient's finiteness (one scalar per parameter); its ``lr=None`` step
also reads the closure's loss per trial. The run loop's evaluations (every ``eval_every``
iterations) read the cost, gradient norm and violation.

**Iterations.** One iteration is one pass over the rows, about the work of one full gradient
(``docs/guide/options.md``, "What one iteration is"): ``⌈n/r⌉`` slice steps for RSDM-P when the
tracker reads gradient rows without a full gradient, else one slice step (RSDM-O; RSDM-P on an
oracle without rows; the stochastic variant's minibatch step). ``info`` reports
``slice_steps`` and ``updates_per_iteration``; ``stabilize``, ``refresh_every`` and
``decay_time`` count slice steps.

Per-slice-step cost, for ``X ∈ ℝ^{n×p}`` and slice dimension r (``T_g`` = a full gradient,
``T_rows`` = r rows of it):

=============  ==============================================================================
RSDM-P         sampling O(n); ``B`` = r gradient rows (``T_rows``; a tracker without row
               access computes ``T_g`` and gathers); ``Γ`` O(r²p); retraction O(r³);
               update O(r²p).  Total O(pr² + r³) + ``T_rows``. Quadratic ``s·tr(XᵀCXD)``
               (:class:`~orthoplug.oracles.core.QuadraticOracle`): ``T_rows`` = O(rp) from the
               cached ``CX``, whose update costs O(nrp); Procrustes: O(rp²) or O(rp) (linear
               form), see :mod:`orthoplug.problems.stiefel_problems`.
RSDM-O         sampling O(nr²) (QR); ``B, C`` O(npr) + ``T_g``; retraction O(r³); update
               O(npr) (rank-r).  Total O(npr + nr²) + ``T_g`` (quadratic: the cached ``CX``
               is updated in O(n²r + npr)).
stochastic     as above with ``T_g`` = one minibatch gradient.
line search    per trial in addition: the retraction (Armijo: an r×r QR; polar: the polar
               factor of an r×r matrix, :func:`_rotation_polar`, with ``S`` and ``CCᵀ``
               O(r²p) once per slice step) and ``Y C``
               (O(r³ + r²p)) and the cost, priced on the rows (quadratic trackers O(r²p),
               oracles with a ``row_value_change``), else one cost evaluation.
=============  ==============================================================================

Step size. The default (no ``step_size`` given) needs no tuning: ``line_search="auto"``, by
the shape (:func:`default_line_search`): the ``"polar"`` step when ``r ≤ p`` (about
``p ≥ n/4`` with the default r), else Armijo. The polar step
(:class:`PolarSlice`, :func:`polar_search`) is ``Y = polar(CCᵀ/η − S)`` with ``S = BCᵀ``, the
exact minimiser over SO(r) of the proximal-linear model ``⟨B, Δ⟩ + ‖Δ‖²/(2η)``,
``Δ = (Y − I)C``, with ``1/η`` a Lipschitz estimate kept with memory: a trial is accepted when
``F(X⁺)`` is at most the model's value (a majorisation test), η is halved otherwise and doubled
after a first-trial acceptance, from a first η of 1: a rotation that minimises the model over
the whole slice moves further than a step along ``−Γ``, so it needs about half the slice steps
of the Armijo step, at one r×r polar factor per trial. ``line_search="armijo"``
(:class:`~orthoplug.solvers.steps.Armijo`) is backtracking on the slice with memory,
accepting ``η`` when ``F(X⁺) ≤ F(X) − c·η‖Γ‖²`` (``−‖Γ‖²`` is the slope of
``F(U(Retr(−tΓ))X)`` at ``t = 0``) and shrinking ``η ← βη`` otherwise; the first trial of the
next iteration is ``γη`` (the rule's ``growth``, default 1.25) after a first-trial
acceptance, else the accepted ``η`` (so the step grows or shrinks geometrically to the cost's
scale, from a first trial of 1). The line searches are objects
(``line_search=Armijo(growth=2.0)``), the names shorthands for their defaults. For a
quadratic cost (:class:`~orthoplug.oracles.core.QuadraticTracker`) a trial of either rule is
priced on the slice alone,
``F(X⁺) − F(X) = s⟨Δ, (2(CX)[B] + C_BB Δ)D⟩`` in O(r²p), and only the
accepted one updates the cached ``CX``; likewise with a
:class:`~orthoplug.oracles.rows.RowGradientOracle` given a ``row_value_change`` (Procrustes:
``−2s⟨M[B], Δ⟩`` in O(rp)), whose tracker then keeps F current from the accepted changes.
A fixed η (``step_size=η``, the paper's choice; RSDM tolerates much larger η than Riemannian
gradient descent since only a slice moves) is watched at the run's evaluations: if the cost
has not decreased over :data:`STALL_WINDOW` evaluations while the gradient is not small, a
:class:`RuntimeWarning` names the step and the stagnation.

Both front-ends run the same code: :func:`sample_slice`,
:func:`~orthoplug.geometry.submanifold.submanifold_gradient` and :func:`rotation` make the step,
the step-size rules are the line-search objects of :mod:`orthoplug.solvers.steps` (each run's
:class:`~orthoplug.solvers.steps.ArmijoBacktracking`), :class:`PolarSlice` with
:func:`polar_search`, and :class:`~orthoplug.solvers.steps.DecaySchedule`; the random stream
is one generator (the run's, or the torch optimizer's per device) that draws, per iteration,
the minibatch (stochastic RSDM: first) and then the slice. So the same seed gives the same
iterates in both front-ends.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import torch

from orthoplug._random import randperm
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.geometry.submanifold import (
    RETRACTIONS,
    SAMPLINGS,
    Submanifold,
    retract_identity,
    sample_submanifold,
    submanifold_gradient,
)
from orthoplug.oracles import (
    FiniteSum,
    NonFiniteError,
    QuadraticTracker,
    Refreshable,
    RowGradientTracker,
    StochasticGradients,
    StochasticOracle,
    all_finite,
)

from .base import IterativeSolver, Run
from .steps import (
    LINE_SEARCH_NAMES,
    ArmijoBacktracking,
    DecaySchedule,
    LineSearch,
    StallWatch,
    as_line_search,
)

__all__ = ["RSDM", "StochasticRSDM", "STALL_WINDOW", "default_slice_dimension",
           "sample_slice", "rotation", "PolarSlice", "polar_search", "default_line_search"]

#: first η of the line search when no ``step_size`` is given
DEFAULT_FIRST_TRIAL = 1.0
#: evaluations without a decrease of the cost after which a fixed step warns
STALL_WINDOW = 5
#: the line search of both front-ends when no step size is given (:func:`default_line_search`)
DEFAULT_LINE_SEARCH = "auto"


# ---------------------------------------------------------------------------------------------
# the step (shared with the geoopt optimizer)
# ---------------------------------------------------------------------------------------------


def default_slice_dimension(n: int, p: int) -> int:
    """The default slice dimension ``r = max(2, round(√(np)/2))`` (≤ n/2 for n ≥ 4 since p ≤ n).

    It maximises the decrease per unit of work ``r(r−1)/T(r)`` of the cost model
    ``T(r) = 2nrp + βr²p + γr³`` (the r-row update of a cached gradient ``CX``, the slice
    products, the r×r retractions of the Armijo trials): ``dT/dr·r = 2T`` gives
    ``r = √(2np/γ)``, and ``γ ≈ 8`` flop-equivalents (about 1.5 trials per iteration, each an
    r×r QR of ``8r³/3`` flops at a fraction of the speed of a matrix product).
    """
    if not (isinstance(n, int) and isinstance(p, int) and 1 <= p <= n and n >= 2):
        raise ValueError(f"need integers 1 <= p <= n, n >= 2, got n={n!r}, p={p!r}")
    return max(2, round(math.sqrt(n * p) / 2))


def sample_slice(x: torch.Tensor, r: int, sampling: str,
                 generator: torch.Generator) -> Submanifold:
    """A random slice ``P(r)`` for ``x`` of shape ``(..., n, p)`` (one independent slice per
    leading index), drawn with ``generator``."""
    return sample_submanifold(sampling, x.shape[-2], r, batch=tuple(x.shape[:-2]),
                              dtype=x.dtype, device=x.device, generator=generator)


def rotation(gamma: torch.Tensor, eta: float, retraction: str) -> torch.Tensor:
    """``Y = Retr_{I_r}(−η Γ)``: the slice's rotation for the slice gradient ``Γ``."""
    return retract_identity(-eta * gamma, retraction)


#: The guard of :func:`_rotation_polar`'s eigen route: the largest accepted ``‖F‖_F`` (and,
#: where det < 0, ``‖z‖``), the first-order terms whose squares the route neglects.
_POLAR_EIGH_TOL = 1e-7


def _rotation_polar(w: torch.Tensor) -> torch.Tensor:
    """``argmax_{Y ∈ SO(r)} ⟨Y, w⟩`` (in float64) for each r×r matrix of ``w`` (shape
    ``(..., r, r)``): the polar factor ``UVᵀ`` of ``w = UΣVᵀ`` when its determinant is +1, else
    ``UVᵀ(I − 2v vᵀ)`` with v the right singular vector of the smallest singular value (that
    direction flipped), so that RSDM's steps stay rotations (SO(n) stays SO(n)).

    Eigen route (no SVD): V from the symmetric eigendecomposition of ``WᵀW`` (ascending),
    ``A = WV`` and ``G = AᵀA = D(I + F)D`` with ``D = diag(G)^{1/2}`` (the singular values) and
    F zero on the diagonal. The polar factor is ``polar(W) = A G^{−1/2} Vᵀ`` exactly, and to
    first order in F, ``G^{−1/2} ≈ N`` with ``N_ii = 1/d_i`` and ``N_ij = −F_ij/(d_i + d_j)``
    (i ≠ j), so ``Y = A N Vᵀ``. Forming ``WᵀW`` squares κ(W): ``WVD⁻¹Vᵀ`` alone would be off
    by order ε·κ(W)²; the correction N removes that (G is formed from ``WV``, whose columns are
    exact to ε‖W‖), leaving an error of the SVD's order ε·κ(W) plus the neglected O(‖F‖²).
    Where ``det Y < 0``, v is V's first column corrected to first order from G, the
    eigenvector of G's smallest eigenvalue ``e₀ + z`` with ``z_j = G_j0/(G_00 − G_jj)``
    (j ≥ 1, ``z_0 = 0``): ``v ∝ V(e₀ + z)``, exact to O(‖z‖²) beside G's rounding.

    Guard: the eigen route's result is kept for a matrix when ``‖F‖_F ≤``
    :data:`_POLAR_EIGH_TOL` (1e-7, so the neglected terms are ≤ 1e-14) and, where
    ``det Y < 0``, ``‖z‖ ≤`` the same. Otherwise that matrix's rotation is the SVD's
    (:func:`_rotation_polar_svd`): where the small eigenvalues of WᵀW are within rounding of
    ε·λ_max, so that V is not resolved (``‖F‖_F`` large; W rank-deficient: ``d_i = 0``, F not
    finite), and where the two smallest singular values are too close for the first-order v.
    Cost of the eigen route: one r×r symmetric eigendecomposition, five r×r products, a
    determinant and O(r²), against one r×r SVD, one product and a determinant.
    """
    dtype, w = w.dtype, w.double()
    _, v = torch.linalg.eigh(w.mT @ w)
    a = w @ v
    g = a.mT @ a
    gd = g.diagonal(dim1=-2, dim2=-1)
    d = gd.sqrt()
    f = g / (d[..., :, None] * d[..., None, :])
    f.diagonal(dim1=-2, dim2=-1).zero_()
    corr = -f / (d[..., :, None] + d[..., None, :])
    corr.diagonal(dim1=-2, dim2=-1).copy_(d.reciprocal())
    y = a @ corr @ v.mT
    refuse = ~(torch.linalg.matrix_norm(f) <= _POLAR_EIGH_TOL)  # NaN refuses too
    flip = torch.linalg.det(y) < 0
    if bool(flip.any()):
        z = g[..., 1:, 0] / (g[..., :1, 0] - gd[..., 1:])
        x = v[..., :, 0] + (v[..., :, 1:] @ z[..., None])[..., 0]
        x = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        y = y - 2.0 * (flip[..., None, None] * (y @ x[..., None])) @ x[..., None, :]
        refuse = refuse | (flip & ~(torch.linalg.vector_norm(z, dim=-1) <= _POLAR_EIGH_TOL))
    if bool(refuse.any()):
        y[refuse] = _rotation_polar_svd(w[refuse])
    return y.to(dtype)


def _rotation_polar_svd(w: torch.Tensor) -> torch.Tensor:
    """:func:`_rotation_polar` from the SVD ``w = UΣVᵀ`` of each float64 r×r matrix of ``w``:
    ``UVᵀ``, minus ``2u_r v_rᵀ`` (the smallest singular direction) where ``det(UVᵀ) < 0``."""
    u, _, vt = torch.linalg.svd(w)  # singular values in descending order
    y = u @ vt
    flip = torch.linalg.det(y) < 0
    return y - 2.0 * (flip[..., None, None] * u[..., :, -1:]) @ vt[..., -1:, :]


class PolarSlice:
    r"""The proximal-linear model of one slice step (the ``"polar"`` rule, both front-ends).

    For the slice rows ``C = P(r)X`` and gradient rows ``B = P(r)∇F(X)`` (shape ``(..., r, p)``;
    leading indices are independent slices), the trial with the inverse Lipschitz estimate η is
    the exact minimiser over SO(r) (over O(r) too when ``p < r``) of the model
    ``m_η(Y) = ⟨B, Δ⟩ + ‖Δ‖²/(2η)``, ``Δ = (Y − I)C``: since ``‖YC‖ = ‖C‖``,
    ``m_η(Y) = ⟨Y, S − CCᵀ/η⟩ + const`` with ``S = BCᵀ``, so ``Y = polar(CCᵀ/η − S)``
    (:func:`_rotation_polar`: an r×r eigendecomposition and products, an SVD where its guard
    refuses). ``S`` and ``CCᵀ`` are formed once per slice (O(r²p)); each trial costs the
    polar factor and ``YC`` (O(r³ + r²p)).
    """

    def __init__(self, b: torch.Tensor, c: torch.Tensor):
        self.b, self.c = b, c
        self.s, self.k = b @ c.mT, c @ c.mT

    def trial(self, eta: float) -> tuple[torch.Tensor, float]:
        """``Y = polar(CCᵀ/η − S)`` and its model value ``m_η(Y) = ⟨B, Δ⟩ + ‖Δ‖²/(2η)``
        (summed over the leading indices)."""
        y = _rotation_polar(self.k / eta - self.s)
        delta = y @ self.c - self.c
        return y, float((self.b * delta).sum()) + float((delta * delta).sum()) / (2.0 * eta)


def polar_search(rule: ArmijoBacktracking, slices: list[PolarSlice], f0: float,
                 move: Callable[[list[torch.Tensor], float], bool],
                 scale: float = 1.0) -> bool:
    """The ``"polar"`` rule's backtracking: offer η (from ``rule``) to all ``slices`` at once,
    with the step ``scale·η`` (the geoopt group's ``lr``), and accept when the cost after the
    move is at most the majorisation ``f0 + Σ m(Y)`` (:class:`PolarSlice`); the rule multiplies
    η by its contraction otherwise and doubles it after a first-trial acceptance.
    ``move(ys, bound)`` moves to the trial rotations ``ys`` and returns whether the cost there
    is ≤ ``bound``; after a rejection the caller keeps the start point (the core restores the
    rows at once, the geoopt optimizer before the next trial and after a search without a
    step). A model value ≥ 0 means the slices are stationary to round-off: the search ends
    without a step. Returns whether a step was taken."""

    def attempt(eta: float) -> bool | None:
        trials = [piece.trial(scale * eta) for piece in slices]
        model = sum(value for _, value in trials)
        if not model < 0.0:  # nothing to gain
            return None
        return move([y for y, _ in trials], f0 + model)

    return rule.search(attempt)


def default_line_search(p: int, r: int) -> str:
    """The line search of ``line_search="auto"`` (the default of both front-ends when no step
    size is given) for an n×p iterate and slice dimension r: ``"polar"`` when ``r ≤ p``, else
    ``"armijo"``.

    Rule (shape only): for ``r ≤ p`` the slice rows ``C`` have rank r (generically), so the
    polar step's model ``⟨B, Δ⟩ + ‖(Y − I)C‖²/(2η)`` is proximal in every direction of the
    slice, and its exact minimiser needs 1.5–4× fewer slice steps than the Armijo step; for
    ``r > p`` the proximal term sees only p of the r directions, and the polar step lost to
    Armijo on PCA (up to 2.3× to 1e-3) while winning on Procrustes
    (``docs/results/rsdm_large.md``, §00). With the default r (:func:`default_slice_dimension`)
    the rule is about ``p ≥ n/4``.
    """
    return "polar" if r <= p else "armijo"


def _option_text(spec) -> str | None:
    """A line-search option as plain text for ``info`` (a rule object as its ``repr``)."""
    return spec if spec is None or isinstance(spec, str) else repr(spec)


def _check_positive(name, value):
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


# ---------------------------------------------------------------------------------------------
# Solvers
# ---------------------------------------------------------------------------------------------


class RSDM(IterativeSolver):
    r"""Riemannian random submanifold descent (RSDM-P / RSDM-O) on Stiefel and Grassmann.

    Args:
        r: slice dimension, ``2 ≤ r ≤ n`` (r = 2 with permutation sampling is Riemannian
            coordinate descent with Givens rotations; r = n with orthogonal sampling is a
            full rotation step). Default (``None``): ``r = max(2, round(√(np)/2))``
            (:func:`default_slice_dimension`), the r that maximises the expected decrease
            ``∝ r(r−1)`` per unit of the per-iteration cost ``2nrp + βr²p + γr³``.
        sampling: ``"permutation"`` (RSDM-P, default: r random rows, all by indexing) or
            ``"orthogonal"`` (RSDM-O: Haar-distributed r×n orthonormal rows).
        step_size: a fixed step η > 0 (the paper's rule), or ``None`` (default):
            ``line_search="auto"`` from a first η of 1 (see the module docstring). With a
            ``line_search``, its first η.
        retraction: on O(r) at ``I_r``: ``"qr"`` (default), ``"polar"``, ``"cayley"``, ``"exp"``
            (the fixed and Armijo steps; the polar step is a rotation by construction).
        line_search: the line search, a rule object of :mod:`orthoplug.solvers.steps` —
            :class:`~orthoplug.solvers.steps.PolarSearch` (``"polar"``): the
            proximal-linear slice step ``Y = polar(CCᵀ/η − S)``, ``S = BCᵀ``, the exact
            minimiser over SO(r) of ``⟨B, YC − C⟩ + ‖YC − C‖²/(2η)`` (over O(r) too when
            ``p < r``), with ``1/η`` a Lipschitz estimate (accepted when ``F(X⁺)`` is below
            that model, multiplied by its ``contraction`` otherwise, doubled after a
            first-trial acceptance); on a linear cost (Procrustes on St) every trial is
            accepted and the step tends to the exact block minimiser ``polar(−S)``; one r×r
            polar factor per trial besides the O(r²p) products.
            :class:`~orthoplug.solvers.steps.Armijo` (``"armijo"``): backtracking along
            ``−Γ`` on the slice (its ``contraction``, ``sufficient_decrease``,
            ``max_backtracks`` and ``growth``). A name is that rule with its defaults;
            ``"auto"`` (the default when no ``step_size`` is given): ``"polar"`` when
            ``r ≤ p``, else ``"armijo"`` (:func:`default_line_search`); ``None``: the fixed
            ``step_size``.
        stabilize: replace X by its polar factor every this many slice steps (O(np²));
            default 1000 (as the geoopt optimizer), ``None``: never.
        refresh_every: recompute a quadratic oracle's cached ``CX`` every this many slice
            steps (drift control, O(n²p)); default 10 000.
        **kwargs: :class:`~orthoplug.solvers.base.IterativeSolver` options (stopping criteria,
            ``seed``, ``eval_every`` — default ``⌈1/ρ⌉`` iterations clamped to [10, 1000],
            ``ρ = r(r−1)/(n(n−1))`` the fraction of the O(n) gradient one slice sees).

    The run's ``info`` holds the options, ``step_rule`` (the rule taken: ``"polar"``,
    ``"armijo"`` or ``"fixed"``) and ``line_search_options`` (its options), ``backtracks`` and
    ``skipped_steps`` (line searches), and
    ``row_gradient_evaluations`` (RSDM-P reads of r gradient rows).

    Per-iteration cost (X is n×p): the slice gradient ``skew(B Cᵀ)`` with ``B = P(r)∇F(X)``,
    ``C = P(r)X`` in ``O(r²p)``; the retraction on O(r) in ``O(r³)``; the update
    ``X ← U(Y)X`` in ``O(r²p)`` for RSDM-P (r rows change) and ``O(npr)`` for RSDM-O (plus
    ``O(nr²)`` to sample ``P(r)``). ``∇F``: r rows from a row-gradient or quadratic oracle
    (the quadratic tracker keeps ``CX`` current in ``O(nrp)``), else one full gradient.

    Warns:
        RuntimeWarning: a fixed step made no progress (see :data:`STALL_WINDOW`).
    """

    #: whether a fixed step is watched for stalls (:class:`~orthoplug.solvers.steps.StallWatch`)
    watch_stall = True

    def __init__(self, r: int | None = None, *, sampling: str = "permutation",
                 step_size: float | None = None,
                 retraction: str = "qr", line_search: LineSearch | str | None = None,
                 stabilize: int | None = 1000,
                 refresh_every: int = 10_000, **kwargs):
        super().__init__(**kwargs)
        if r is not None and (isinstance(r, bool) or not isinstance(r, int) or r < 2):
            raise ValueError(f"r must be an integer >= 2 (for r = 1 the step is identically "
                             f"zero) or None (the default rule), got {r!r}")
        if sampling not in SAMPLINGS:
            raise ValueError(f"unknown sampling {sampling!r}; choose from {SAMPLINGS}")
        if retraction not in RETRACTIONS:
            raise ValueError(f"unknown retraction {retraction!r}; choose from {RETRACTIONS}")
        line_search = as_line_search(line_search)
        if step_size is None:  # no step given: a rule that needs no tuning
            step_size, line_search = DEFAULT_FIRST_TRIAL, line_search or DEFAULT_LINE_SEARCH
        _check_positive("step_size", step_size)
        for key, val in (("stabilize", stabilize),
                         ("refresh_every", refresh_every)):
            if val is not None and not (isinstance(val, int) and val >= 0):
                raise ValueError(f"{key} must be an integer >= 0 (0 = never), got {val!r}")
        self.r, self.sampling, self.retraction = r, sampling, retraction
        self.step_size, self.line_search = float(step_size), line_search
        self.stabilize, self.refresh_every = stabilize, refresh_every
        self.name = "RSDM-P" if sampling == "permutation" else "RSDM-O"

    def resolved_line_search(self, p: int, r: int) -> LineSearch | None:
        """The run's line search for an n×p iterate and slice dimension r: the option's
        object, ``"auto"`` resolved by :func:`default_line_search`, or ``None`` (fixed step)."""
        if self.line_search == "auto":
            return LINE_SEARCH_NAMES[default_line_search(p, r)]()
        return self.line_search

    def new_schedule(self) -> DecaySchedule:
        """The fixed step's schedule (constant here)."""
        return DecaySchedule()

    # ---- run hooks ---------------------------------------------------------------------------
    def prepare(self, oracle, x0, geometry):
        if not isinstance(geometry, StiefelGeometry):
            raise ValueError(f"{self.name} supports Stiefel and Grassmann manifolds (and SO(n) "
                             f"as St(n, n)), got {geometry!r}")
        if x0.ndim != 2:
            raise ValueError(f"{self.name}: the solver takes one n×p matrix, got shape "
                             f"{tuple(x0.shape)} (use the geoopt optimizer for batches)")
        if self.r is not None and self.r > x0.shape[-2]:
            raise ValueError(f"r = {self.r} exceeds n = {x0.shape[-2]}: choose 2 <= r <= n")
        return oracle

    def slice_dimension(self, n: int, p: int) -> int:
        """The run's r: the given one, or :func:`default_slice_dimension` for X of shape n×p."""
        return self.r if self.r is not None else default_slice_dimension(n, p)

    def default_eval_every(self, run: Run) -> int:
        """The iterations of ``⌈1/ρ⌉`` slice steps clamped to [10, 1000] (at least 1),
        ``ρ = r(r − 1)/(n(n − 1))``."""
        n, r = run.tracker.x.shape[-2], run.r
        rho = r * (r - 1) / (n * (n - 1))
        return max(1, int(min(1000, max(10, math.ceil(1.0 / rho)))) // run.updates)

    def updates_per_iteration(self, run: Run) -> int:
        """One pass over the rows: ``⌈n/r⌉`` slice steps for RSDM-P when the tracker reads r
        gradient rows without a full gradient
        (:attr:`~orthoplug.oracles.core.Tracker.row_gradients`), else 1 (RSDM-O moves every
        row and reads a full gradient per step)."""
        if self.sampling != "permutation" or not run.tracker.row_gradients:
            return 1
        return math.ceil(run.tracker.x.shape[-2] / run.r)

    def setup(self, run: Run) -> None:
        x = run.tracker.x
        run.r = self.slice_dimension(*x.shape[-2:])
        run.reorth = self.stabilize or 0
        run.refresh = self.refresh_every if isinstance(run.tracker, Refreshable) else 0
        search = self.resolved_line_search(x.shape[-1], run.r)
        run.step_rule = None if search is None else search.name
        run.line_search = None if search is None else search.backtracking(self.step_size)
        run.search_options = {} if search is None else search.options()
        run.schedule = self.new_schedule()
        fixed = self.line_search is None and self.watch_stall
        run.stall = StallWatch(STALL_WINDOW) if fixed else None
        run.row_reads = run.slice_steps = 0

    def info(self, run: Run | None = None) -> dict:
        out = {"r": self.r, "sampling": self.sampling, "step_size": self.step_size,
               "retraction": self.retraction, "line_search": _option_text(self.line_search),
               "step_rule": ("fixed" if self.line_search is None else self.line_search.name
                             if isinstance(self.line_search, LineSearch) else self.line_search)}
        if run is not None:
            rule = run.line_search
            out.update(r=run.r, step_rule=run.step_rule or "fixed",
                       line_search_options=run.search_options,
                       backtracks=0 if rule is None else rule.backtracks,
                       skipped_steps=0 if rule is None else rule.skipped,
                       row_gradient_evaluations=run.row_reads, slice_steps=run.slice_steps,
                       updates_per_iteration=run.updates)
        return out

    def on_evaluation(self, run: Run, cost: float, gradient_norm: float,
                      violation: float) -> dict[str, float]:
        """Warn once if a fixed step has not decreased the cost over :data:`STALL_WINDOW`
        evaluations while the gradient norm is above 1e-6 of its first measured value."""
        stall = run.stall.observe(run.iteration, cost, gradient_norm) if run.stall else None
        if stall is not None:
            warnings.warn(
                f"{self.name} with the fixed step_size={self.step_size:g} made no progress: "
                f"{stall}. The step is likely too large for this cost's scale: leave step_size "
                f"unset (a line search with memory, no tuning) or use a smaller step.",
                RuntimeWarning, stacklevel=3)
        return {}

    # ---- one iteration -----------------------------------------------------------------------
    def slice_and_gradient(self, run: Run) -> tuple[Submanifold, torch.Tensor, torch.Tensor]:
        """Draw a slice; return it, ``C = P(r)X`` and ``B = P(r)∇F(X)`` (RSDM-P: r gradient
        rows from the tracker; RSDM-O: the projected full gradient)."""
        tracker = run.tracker
        sub = sample_slice(tracker.x, run.r, self.sampling, run.generator)
        if sub.rows is not None:
            run.row_reads += 1
            b = tracker.gradient_rows(sub.rows)
        else:
            b = sub.restrict(tracker.gradient())
        return sub, sub.restrict(tracker.x), b

    def step(self, run: Run) -> None:
        tracker = run.tracker
        sub, c, b = self.slice_and_gradient(run)
        if run.step_rule == "polar":
            self._polar_step(run, sub, c, b)
        elif run.step_rule == "armijo":
            self._armijo(run, sub, c, submanifold_gradient(b, c))
        else:
            eta = run.schedule.next(self.step_size)
            self._commit(tracker, sub, c, rotation(submanifold_gradient(b, c), eta,
                                                   self.retraction))
        run.slice_steps += 1
        done = run.slice_steps
        if run.refresh and done % run.refresh == 0:
            tracker.refresh()
        if run.reorth and done % run.reorth == 0:
            tracker.set_point(run.geometry.projx(tracker.x))

    @staticmethod
    def _commit(tracker, sub: Submanifold, c, y) -> None:
        """``X ← U(Y) X`` through the tracker (rows: ``set_rows``; Haar: a rank-r update)."""
        if sub.rows is not None:
            new = y @ c
            if not all_finite(new):
                raise NonFiniteError("non-finite RSDM update")
            tracker.set_rows(sub.rows, new)
        else:
            w = y @ c - c
            if not all_finite(w):
                raise NonFiniteError("non-finite RSDM update")
            tracker.add_low_rank(sub.basis.mT, w)

    def _armijo(self, run: Run, sub: Submanifold, c, gamma) -> None:
        tracker, rule = run.tracker, run.line_search
        f0 = float(tracker.value())
        slope = float((gamma * gamma).sum())
        if slope == 0.0:
            return
        rule.search(lambda eta: _try(tracker, sub, c, rotation(gamma, eta, self.retraction),
                                     rule.bound(f0, eta, slope)))

    @staticmethod
    def _polar_step(run: Run, sub: Submanifold, c, b) -> None:
        """:func:`polar_search` on the slice: ``Y = polar(CCᵀ/η − BCᵀ)``, accepted when
        ``F(X⁺) ≤ F(X) + ⟨B, Δ⟩ + ‖Δ‖²/(2η)``, ``Δ = (Y − I)C``."""
        tracker = run.tracker
        polar_search(run.line_search, [PolarSlice(b, c)], float(tracker.value()),
                     lambda ys, bound: _try(tracker, sub, c, ys[0], bound))


def _try(tracker, sub: Submanifold, c, y, bound: float) -> bool:
    """Move to ``U(Y)X`` if its cost is ≤ bound (and finite); else leave X unchanged."""
    if sub.rows is not None:
        new = y @ c
        if not all_finite(new):
            return False
        priced = _priced_value(tracker, sub.rows, new)
        if priced is not None:  # the trial priced on the slice: X changes only if accepted
            if not priced <= bound:
                return False
            tracker.set_rows(sub.rows, new, value=priced)
            return True
        tracker.set_rows(sub.rows, new)
        try:
            ok = float(tracker.value()) <= bound
        except NonFiniteError:
            ok = False
        if not ok:
            tracker.set_rows(sub.rows, c)
        return ok
    w = y @ c - c
    if not all_finite(w):
        return False
    try:
        ok = float(tracker.oracle.value(tracker.x + sub.basis.mT @ w)) <= bound
    except NonFiniteError:
        ok = False
    if ok:
        tracker.add_low_rank(sub.basis.mT, w)
    return ok


def _priced_value(tracker, rows: torch.Tensor, new: torch.Tensor) -> float | None:
    """``F`` after ``X[rows] ← new`` computed on the rows alone (quadratic trackers, oracles with
    a row price), or ``None`` when only an evaluation of F after the change can tell."""
    if isinstance(tracker, QuadraticTracker | RowGradientTracker):
        return tracker.value_with_rows(rows, new)
    return None


class StochasticRSDM(RSDM):
    r"""Stochastic / mini-batch RSDM for ``F = E f(X; ξ)`` or ``F = (1/N) Σ f_i``.

    Each iteration replaces ∇F by a minibatch mean: ``oracle.sample_gradient(X, B, gen)`` for a
    :class:`~orthoplug.oracles.rows.StochasticOracle` (fresh streamed samples), or
    ``component_gradient(X, idx)`` with ``idx`` B indices drawn without replacement
    (``randperm(N)[:B]``) for a :class:`~orthoplug.oracles.core.FiniteSumOracle`; the minibatch
    is drawn before the slice, with the same generator. Everything else is RSDM (the variance
    σ² of the gradient becomes σ²/B in the bounds). The step is ``η_k = η·s(k)``
    (:class:`~orthoplug.solvers.steps.DecaySchedule`):

    * ``schedule="constant"``: ``s = 1`` (theory: ``η = min{1/L, √(Δ0/L)/(σ√K)}`` for K steps);
    * ``"inverse"``: ``s = 1/(1 + k/t0)``; ``"inverse_sqrt"``: ``s = 1/√(1 + k/t0)``;
    * or a callable ``k -> s``.

    Defaults: ``η = 1``, ``schedule="constant"`` (it converges to a neighbourhood whose size
    scales with ``η σ²/B``; ``"inverse"`` or ``"inverse_sqrt"`` converge; there is no line search
    on estimated costs, so η must suit the cost's scale).

    Args:
        r, sampling, retraction, stabilize: as :class:`RSDM`.
        step_size: η > 0 (default 1).
        batch_size: B ≥ 1 (default 1).
        schedule: as above; ``decay_time``: t0 > 0 (default 1000).

    Cost per iteration: one minibatch gradient plus the RSDM step of the chosen sampling. No
    line search (it would need exact costs). ``info["samples"]`` counts the samples drawn. A
    :class:`~orthoplug.oracles.rows.StochasticOracle` without its exact value and gradient
    (not ``monitored``) reports NaN cost and gradient norm at the evaluations.
    """

    watch_stall = False  # estimated gradients: the cost need not decrease at every evaluation

    def __init__(self, r: int | None = None, *, step_size: float | None = 1.0,
                 batch_size: int = 1,
                 schedule="constant", decay_time: float = 1000.0, **kwargs):
        if kwargs.get("line_search") is not None:
            raise ValueError("StochasticRSDM has no line search (costs are only estimated)")
        super().__init__(r, step_size=1.0 if step_size is None else step_size, **kwargs)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        DecaySchedule(schedule, decay_time)  # validates
        self.batch_size, self.schedule, self.decay_time = batch_size, schedule, float(decay_time)
        self.name = "S" + self.name

    def new_schedule(self) -> DecaySchedule:
        """The step's schedule ``s(k)``."""
        return DecaySchedule(self.schedule, self.decay_time)

    def prepare(self, oracle, x0, geometry):
        if isinstance(oracle, FiniteSum):
            if self.batch_size > oracle.num_components:
                raise ValueError(f"batch_size = {self.batch_size} exceeds the number of "
                                 f"components N = {oracle.num_components}")
        elif not isinstance(oracle, StochasticGradients):
            raise ValueError(f"StochasticRSDM needs a StochasticOracle or a FiniteSumOracle "
                             f"(sample_gradient or component_gradient), got "
                             f"{type(oracle).__name__}")
        return super().prepare(oracle, x0, geometry)

    def setup(self, run: Run) -> None:
        super().setup(run)
        run.samples = 0

    def updates_per_iteration(self, run: Run) -> int:
        """1: one iteration is one slice step on one minibatch gradient."""
        return 1

    def measure(self, run: Run) -> tuple[float, float, float]:
        if isinstance(run.oracle, StochasticOracle) and not run.oracle.monitored:
            return math.nan, math.nan, float(run.geometry.violation(run.tracker.x).max())
        return super().measure(run)

    def info(self, run: Run | None = None) -> dict:
        out = {**super().info(run), "batch_size": self.batch_size,
               "schedule": DecaySchedule(self.schedule, self.decay_time).name,
               "decay_time": self.decay_time}
        if run is not None:
            out["samples"] = run.samples
        return out

    def slice_and_gradient(self, run: Run) -> tuple[Submanifold, torch.Tensor, torch.Tensor]:
        """Draw the minibatch, then the slice; ``B`` is the restricted minibatch gradient."""
        oracle, x = run.oracle, run.tracker.x
        if isinstance(oracle, FiniteSum):
            idx = randperm(oracle.num_components,
                           generator=run.generator)[: self.batch_size].to(x.device)
            g = run.tracker.component_gradient(x, idx)
        else:
            g = oracle.sample_gradient(x, self.batch_size, run.generator)
        run.samples += self.batch_size
        sub = sample_slice(x, run.r, self.sampling, run.generator)
        return sub, sub.restrict(x), sub.restrict(g)
