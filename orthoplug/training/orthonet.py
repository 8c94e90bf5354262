r"""Training an MLP with orthogonal hidden layers on scikit-learn data (offline).

The model is :class:`~orthoplug.problems.stiefel_problems.OrthogonalMLP`: hidden weights
``W_1 ∈ St(hidden, d)``, ``W_2.. ∈ St(hidden, hidden)`` as geoopt ``ManifoldParameter``\ s on a
``geoopt.Stiefel`` manifold (default ``geoopt.EuclideanStiefel()``), ReLU, an unconstrained
output layer; the data is :func:`load_data`'s (by default digits,
:func:`~orthoplug.problems.stiefel_problems.digits_data`: pixels scaled to [−1, 1], stratified
seeded train/test split). This is the RSDM paper's orthogonal network experiment (§7.4,
MNIST/CIFAR10 there) at a size that trains in seconds on a CPU.

:func:`train_orthonet` trains it with cross-entropy and minibatches of 16: the Stiefel weights by
an optimizer of :data:`OPTIMIZERS` with learning rate ``lr``, the other parameters (output layer,
biases) by ``torch.optim.SGD`` or ``torch.optim.Adam`` (``other``, learning rate ``other_lr``)::

    from orthoplug.training.orthonet import train_orthonet

    result = train_orthonet("RSDM", epochs=10, lr=0.05, r=64)
    result.accuracy, result.violation, result.history[-1]
    train_orthonet("RSSM", lr="diminishing", other="adam")    # Adam for the other parameters

The optimizer of the other parameters is part of the method: on digits, Adam there instead of
SGD raised the test accuracy at equal epochs of every method measured, the frozen-weight
control's included (docs/results/orthonet-minibatch.md).

Needs scikit-learn (the ``test`` extra).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import geoopt
import torch

from orthoplug.problems.stiefel_problems import OrthogonalMLP, digits_data

__all__ = ["ADAM_LR", "ADAM_TYPE", "DATASETS", "OPTIMIZERS", "OTHER_OPTIMIZERS", "OrthonetResult",
           "accuracy", "as_unit_signature", "load_data", "make_optimizer", "stiefel_parameters",
           "stiefel_violation", "train_orthonet"]

#: Names accepted by :func:`make_optimizer` / :func:`train_orthonet`: orthoplug's optimizers of
#: Stiefel parameters (``"JJOBCD"``: on the weights declared as ``IndefiniteStiefel`` with
#: ``J = I``, :func:`as_unit_signature`), geoopt's, and ``"frozen"`` (the control: the Stiefel
#: weights stay at their initialisation, the other parameters train).
OPTIMIZERS = ("RSDM", "OBCD", "RSSM", "JJOBCD", "RiemannianSGD", "RiemannianAdam", "frozen")
#: Optimizers of the other (unconstrained) parameters: ``torch.optim.SGD`` or ``torch.optim.Adam``.
OTHER_OPTIMIZERS = ("sgd", "adam")
#: Data sets of :func:`load_data` (scikit-learn's bundled ones: no download).
DATASETS = ("digits", "breast_cancer", "wine")
#: The Adam-type optimizers of :data:`OPTIMIZERS`: one learning rate for all parameters.
ADAM_TYPE = ("RiemannianAdam", "JJOBCD")
#: Adam's learning rate of the other parameters next to an optimizer that is not Adam-type (the
#: rsdm suite's RiemannianAdam learning rate).
ADAM_LR = 3e-3
#: The Stiefel weights' learning rate of each optimizer in the results (OBCD: its own scale, 1;
#: RSSM: the automatic diminishing rule; RSDM and RiemannianSGD: the rsdm suite's; Adam-type:
#: :data:`ADAM_LR`, shared with the other parameters).
STIEFEL_LR: dict[str, float | str] = {
    "frozen": 0.0, "OBCD": 1.0, "RSDM": 0.05, "RSSM": "diminishing", "RiemannianSGD": 0.02,
    "RiemannianAdam": ADAM_LR, "JJOBCD": ADAM_LR}


class _Split(torch.optim.Optimizer):
    """One optimizer for the Stiefel weights (``None``: frozen) and one for the rest; ``step``
    steps the Stiefel weights first, then the rest with the gradients of the closure's last
    call."""

    def __init__(self, stiefel: torch.optim.Optimizer | None, rest: torch.optim.Optimizer):
        self.parts = [o for o in (stiefel, rest) if o is not None]
        self.stiefel = stiefel
        super().__init__([p for o in self.parts for g in o.param_groups for p in g["params"]],
                         {})

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.parts:
            o.zero_grad(set_to_none)

    def step(self, closure):
        loss = closure() if self.stiefel is None else self.stiefel.step(closure)
        self.parts[-1].step()
        return loss


@dataclass
class OrthonetResult:
    """Outcome of :func:`train_orthonet`.

    Attributes:
        optimizer: the optimizer's name.
        accuracy: final test accuracy.
        violation: ``max_W ‖WᵀW − I‖_F`` over the Stiefel weights at the end.
        history: one ``(seconds, mean train loss of the epoch, test accuracy)`` per epoch
            (seconds of training, evaluation excluded).
        epochs: epochs completed (fewer than asked if ``time_limit`` was hit).
        model: the trained model.
    """

    optimizer: str
    accuracy: float
    violation: float
    history: list[tuple[float, float, float]] = field(default_factory=list)
    epochs: int = 0
    model: torch.nn.Module | None = None


def stiefel_parameters(model: torch.nn.Module) -> list[geoopt.ManifoldParameter]:
    """The model's orthonormal weights: its ``geoopt.ManifoldParameter``\\ s (on
    ``geoopt.Stiefel``, or on ``IndefiniteStiefel`` with ``J = I`` after
    :func:`as_unit_signature`)."""
    return [p for p in model.parameters() if isinstance(p, geoopt.ManifoldParameter)]


def as_unit_signature(weights: list[geoopt.ManifoldParameter]) -> None:
    """Re-declare Stiefel weights ``n × k`` on ``IndefiniteStiefel(n, k)`` with ``J_n = I_n``
    and ``J_k = I_k``: the same set ``{XᵀX = I_k}`` (Euclidean metric), on which the JOBCD
    optimizers' pair steps ``X[B] ← V X[B]``, ``V ∈ O(J_BB) = O(2)``, are OBCD's."""
    from orthoplug.adapters.geoopt import IndefiniteStiefel

    for w in weights:
        n, k = w.shape[-2:]
        w.manifold = IndefiniteStiefel(n, k, p=n, k_plus=k)


def stiefel_violation(model: torch.nn.Module) -> float:
    """``max_W ‖WᵀW − I‖_F`` over the model's Stiefel parameters (0 if there are none)."""
    with torch.no_grad():
        return max((float(torch.linalg.matrix_norm(
            w.mT @ w - torch.eye(w.shape[-1], dtype=w.dtype, device=w.device)))
            for w in stiefel_parameters(model)),
            default=0.0)


def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of ``x`` classified as ``y``."""
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def make_optimizer(name: str, model: torch.nn.Module, *, lr: float, r: int = 64,
                   other: str = "sgd", other_lr: float = 0.1, seed: int = 0,
                   options: dict | None = None) -> torch.optim.Optimizer:
    """``name`` ∈ :data:`OPTIMIZERS` for the Stiefel weights (``lr``) and ``other`` ∈
    :data:`OTHER_OPTIMIZERS` for the rest (``other_lr``), as one optimizer whose ``step`` takes a
    closure (OBCD's σ test evaluates it again) and steps the Stiefel weights first.

    ``r`` (slice dimension) only concerns RSDM, ``seed`` the random choices of orthoplug's
    optimizers, ``options`` are further options of orthoplug's optimizers. ``"JJOBCD"``
    re-declares the weights on ``IndefiniteStiefel(n, k)`` with ``J = I``
    (:func:`as_unit_signature`) and takes ``JJOBCD(precondition="adam", sigma_rule=1.0, lr=lr)``:
    Adam's direction in the exact pair steps, ``σ = 1/lr`` (``options`` override these).

    Raises:
        ValueError: an unknown ``name`` or ``other``.
    """
    _check_names(name, other)
    weights = stiefel_parameters(model)
    ids = {id(p) for p in weights}
    rest = [p for p in model.parameters() if id(p) not in ids]
    host = torch.optim.SGD if other == "sgd" else torch.optim.Adam
    return _Split(_stiefel_optimizer(name, weights, lr=lr, r=r, seed=seed,
                                     options=options or {}), host(rest, lr=other_lr))


def _check_names(optimizer: str, other: str | None) -> None:
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    if other is not None and other not in OTHER_OPTIMIZERS:
        raise ValueError(f"other must be one of {OTHER_OPTIMIZERS}, got {other!r}")


def _stiefel_optimizer(name: str, weights: list[geoopt.ManifoldParameter], *, lr: float, r: int,
                       seed: int, options: dict) -> torch.optim.Optimizer | None:
    """The optimizer ``name`` of the Stiefel ``weights`` alone (``None`` for ``"frozen"``)."""
    from orthoplug.adapters import geoopt as go

    if name == "frozen":
        return None
    if name == "RSDM":
        return go.RSDM(weights, lr=lr, r=r, seed=seed, **options)
    if name == "JJOBCD":
        as_unit_signature(weights)
        return go.JJOBCD(weights, lr=lr, seed=seed,
                         **{"precondition": "adam", "sigma_rule": 1.0, **options})
    if name in ("OBCD", "RSSM"):
        return getattr(go, name)(weights, lr=lr, seed=seed, **options)
    return getattr(geoopt.optim, name)(weights, lr=lr)


def load_data(name: str = "digits", *, seed: int = 0, dtype: torch.dtype = torch.float32):
    """``(x_train, y_train, x_test, y_test)`` of a data set in :data:`DATASETS`: digits as
    :func:`~orthoplug.problems.stiefel_problems.digits_data`; the others standardised with the
    training split's mean and standard deviation, a stratified seeded 75/25 split.

    Raises:
        ValueError: an unknown ``name``.
    """
    if name not in DATASETS:
        raise ValueError(f"data must be one of {DATASETS}, got {name!r}")
    if name == "digits":
        return digits_data(seed=seed, dtype=dtype)
    import sklearn.datasets
    from sklearn.model_selection import train_test_split

    x, y = getattr(sklearn.datasets, f"load_{name}")(return_X_y=True)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.25, random_state=seed, stratify=y)
    mean, std = xtr.mean(0), xtr.std(0)
    return tuple(torch.as_tensor(a, dtype=t) for a, t in
                 (((xtr - mean) / std, dtype), (ytr, torch.long), ((xte - mean) / std, dtype),
                  (yte, torch.long)))


def train_orthonet(optimizer: str = "RSDM", *, epochs: int = 10, lr: float = 0.05, r: int = 64,
                   seed: int = 0, time_limit: float | None = None, hidden: int = 128,
                   layers: int = 2, batch_size: int = 16, other: str | None = None,
                   other_lr: float | None = None, manifold: geoopt.Stiefel | None = None,
                   dtype: torch.dtype = torch.float32,
                   options: dict | None = None, data: str = "digits") -> OrthonetResult:
    """Train :class:`~orthoplug.problems.stiefel_problems.OrthogonalMLP` on ``data``.

    Args:
        optimizer: a name in :data:`OPTIMIZERS`.
        epochs: passes over the training set (shuffled with ``seed``).
        lr: learning rate of the Stiefel weights.
        other: optimizer of the other parameters, ``"sgd"`` or ``"adam"`` (default
            ``"adam"`` for the Adam-type optimizers RiemannianAdam and JJOBCD, else ``"sgd"``).
        other_lr: learning rate of the other parameters (default 0.1 for SGD; for Adam ``lr``
            with an Adam-type optimizer, else :data:`ADAM_LR`).
        r: RSDM's slice dimension (``2 ≤ r ≤ hidden``).
        seed: data split, weight initialisation, shuffling and RSDM's slices.
        time_limit: stop after the first epoch that ends past this many seconds of training.
        hidden, layers: width and number of Stiefel layers.
        batch_size: minibatch size.
        manifold: the ``geoopt.Stiefel`` manifold of the hidden weights (default
            ``geoopt.EuclideanStiefel()``; RSDM's steps do not depend on the metric).
        dtype: parameter and data dtype.
        options: further options of orthoplug's optimizer (e.g. RSSM's ``schedule``).
        data: a data set of :data:`DATASETS` (:func:`load_data`); ``hidden`` must be at least
            its number of features.
    """
    _check_names(optimizer, other)
    xtr, ytr, xte, yte = load_data(data, seed=seed, dtype=dtype)
    torch.manual_seed(seed)  # the output layer's default initialisation draws from it
    model = OrthogonalMLP(xtr.shape[1], hidden, int(ytr.max()) + 1, layers=layers,
                          manifold=manifold or geoopt.EuclideanStiefel(), seed=seed, dtype=dtype)
    adam_type = optimizer in ADAM_TYPE
    other = other or ("adam" if adam_type else "sgd")
    if other_lr is None:
        other_lr = 0.1 if other == "sgd" else lr if adam_type else ADAM_LR
    opt = make_optimizer(optimizer, model, lr=lr, r=r, other=other, other_lr=other_lr,
                         seed=seed, options=options)
    gen = torch.Generator().manual_seed(seed)
    result = OrthonetResult(optimizer, 0.0, 0.0, model=model)
    elapsed = 0.0
    for _ in range(epochs):
        start = time.perf_counter()
        perm = torch.randperm(len(xtr), generator=gen)
        total = 0.0
        for k in range(0, len(xtr), batch_size):
            idx = perm[k:k + batch_size]

            def closure(idx=idx):
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(xtr[idx]), ytr[idx])
                loss.backward()
                return loss

            total += float(opt.step(closure).detach()) * len(idx)
        elapsed += time.perf_counter() - start
        result.history.append((elapsed, total / len(xtr), accuracy(model, xte, yte)))
        result.epochs += 1
        if time_limit is not None and elapsed >= time_limit:
            break
    result.accuracy = accuracy(model, xte, yte)
    result.violation = stiefel_violation(model)
    return result
