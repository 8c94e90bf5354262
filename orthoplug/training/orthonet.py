r"""Training an MLP with orthogonal hidden layers on scikit-learn's digits (offline data).

The model is :class:`~orthoplug.problems.stiefel_problems.OrthogonalMLP`: hidden weights
``W_1 ∈ St(hidden, 64)``, ``W_2.. ∈ St(hidden, hidden)`` as geoopt ``ManifoldParameter``\ s on a
``geoopt.Stiefel`` manifold (default ``geoopt.EuclideanStiefel()``), ReLU, an unconstrained
output layer; the data is :func:`~orthoplug.problems.stiefel_problems.digits_data` (pixels scaled
to [−1, 1], stratified seeded train/test split). This is the RSDM paper's orthogonal network
experiment (§7.4, MNIST/CIFAR10 there) at a size that trains in seconds on a CPU.

:func:`train_orthonet` trains it with cross-entropy and minibatches of 16, the Stiefel weights by
``orthoplug.adapters.geoopt.RSDM`` (r-dimensional slices), ``geoopt.optim.RiemannianSGD`` or
``RiemannianAdam`` with learning rate ``lr``, everything else by plain SGD steps of the same
optimizer (its second parameter group, learning rate ``other_lr``: 0.1 by default, ``lr`` for
Adam)::

    from orthoplug.training.orthonet import train_orthonet

    result = train_orthonet("RSDM", epochs=10, lr=0.05, r=64)
    result.accuracy, result.violation, result.history[-1]

Needs scikit-learn (the ``test`` extra).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import geoopt
import torch

from orthoplug.problems.stiefel_problems import OrthogonalMLP, digits_data

__all__ = ["OPTIMIZERS", "OrthonetResult", "accuracy", "make_optimizer", "stiefel_parameters",
           "stiefel_violation", "train_orthonet"]

#: Names accepted by :func:`make_optimizer` / :func:`train_orthonet`: orthoplug's optimizers of
#: Stiefel parameters, geoopt's, and ``"frozen"`` (the control: the Stiefel weights stay at their
#: initialisation, the other parameters train).
OPTIMIZERS = ("RSDM", "OBCD", "RSSM", "RiemannianSGD", "RiemannianAdam", "frozen")
#: the optimizers that take only manifold parameters: the other parameters get plain SGD
_MANIFOLD_ONLY = ("OBCD", "RSSM", "frozen")


class _Split(torch.optim.Optimizer):
    """One optimizer for the Stiefel weights (``None``: frozen) and SGD for the rest; ``step``
    steps the Stiefel weights first, then the rest with the gradients of the closure's last
    call."""

    def __init__(self, stiefel: torch.optim.Optimizer | None, rest: torch.optim.SGD):
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
    """The model's parameters on a ``geoopt.Stiefel`` manifold."""
    return [p for p in model.parameters()
            if isinstance(p, geoopt.ManifoldTensor) and isinstance(p.manifold, geoopt.Stiefel)]


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
                   other_lr: float = 0.1, seed: int = 0,
                   options: dict | None = None) -> torch.optim.Optimizer:
    """``name`` ∈ :data:`OPTIMIZERS` over two groups: the Stiefel weights (``lr``) and the rest
    (``other_lr``; plain SGD for the optimizers that take only manifold parameters). ``r``
    (slice dimension) only concerns RSDM, ``seed`` the random choices of orthoplug's
    optimizers, ``options`` are further options of orthoplug's optimizers. ``step`` takes a
    closure (OBCD's σ test evaluates it again)."""
    options = options or {}
    stiefel = stiefel_parameters(model)
    ids = {id(p) for p in stiefel}
    groups = [{"params": stiefel},
              {"params": [p for p in model.parameters() if id(p) not in ids], "lr": other_lr}]
    if name in _MANIFOLD_ONLY:
        rest = torch.optim.SGD(groups[1:], lr=other_lr)
        if name == "frozen":
            return _Split(None, rest)
        from orthoplug.adapters import geoopt as go

        return _Split(getattr(go, name)(groups[:1], lr=lr, seed=seed, **options), rest)
    if name == "RSDM":
        from orthoplug.adapters.geoopt import RSDM

        return RSDM(groups, lr=lr, r=r, seed=seed, **options)
    if name == "RiemannianSGD":
        return geoopt.optim.RiemannianSGD(groups, lr=lr)
    if name == "RiemannianAdam":
        return geoopt.optim.RiemannianAdam(groups, lr=lr)
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")


def train_orthonet(optimizer: str = "RSDM", *, epochs: int = 10, lr: float = 0.05, r: int = 64,
                   seed: int = 0, time_limit: float | None = None, hidden: int = 128,
                   layers: int = 2, batch_size: int = 16, other_lr: float | None = None,
                   manifold: geoopt.Stiefel | None = None,
                   dtype: torch.dtype = torch.float32,
                   options: dict | None = None) -> OrthonetResult:
    """Train :class:`~orthoplug.problems.stiefel_problems.OrthogonalMLP` on digits.

    Args:
        optimizer: a name in :data:`OPTIMIZERS`.
        epochs: passes over the training set (shuffled with ``seed``).
        lr: learning rate of the Stiefel weights.
        other_lr: learning rate of the other parameters (default 0.1 for the SGD-type
            optimizers, ``lr`` for RiemannianAdam).
        r: RSDM's slice dimension (``2 ≤ r ≤ hidden``).
        seed: data split, weight initialisation, shuffling and RSDM's slices.
        time_limit: stop after the first epoch that ends past this many seconds of training.
        hidden, layers: width and number of Stiefel layers.
        batch_size: minibatch size.
        manifold: the ``geoopt.Stiefel`` manifold of the hidden weights (default
            ``geoopt.EuclideanStiefel()``; RSDM's steps do not depend on the metric).
        dtype: parameter and data dtype.
        options: further options of orthoplug's optimizer (e.g. RSSM's ``schedule``).
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    xtr, ytr, xte, yte = digits_data(seed=seed, dtype=dtype)
    torch.manual_seed(seed)  # the output layer's default initialisation draws from it
    model = OrthogonalMLP(xtr.shape[1], hidden, int(ytr.max()) + 1, layers=layers,
                          manifold=manifold or geoopt.EuclideanStiefel(), seed=seed, dtype=dtype)
    if other_lr is None:
        other_lr = lr if optimizer == "RiemannianAdam" else 0.1
    opt = make_optimizer(optimizer, model, lr=lr, r=r, other_lr=other_lr, seed=seed,
                         options=options)
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
