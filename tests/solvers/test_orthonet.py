"""Minibatch training of orthogonal weights (:mod:`orthoplug.training.orthonet`): every orthoplug
optimizer of Stiefel parameters trains them, i.e. moves them and ends below the frozen-weight
control's training loss at equal epochs (the control trains only the unconstrained parameters,
with the same optimizer of those, from the same initialisation and minibatches), and the weights
stay orthonormal to float32 precision.
"""

from __future__ import annotations

import geoopt
import pytest
import torch

from orthoplug.adapters.geoopt import JJOBCD, OBCD
from orthoplug.training.orthonet import (
    ADAM_LR,
    OPTIMIZERS,
    as_unit_signature,
    load_data,
    make_optimizer,
    train_orthonet,
)

pytest.importorskip("sklearn")

EPOCHS, HIDDEN = 3, 64
#: orthoplug's optimizers of Stiefel parameters with their defaults (RSDM: the rsdm suite's lr;
#: JJOBCD: Adam's direction, σ = 1/lr, on the weights declared as iSt with J = I)
ORTHOPLUG = {"OBCD": 1.0, "RSDM": 0.05, "RSSM": "diminishing", "JJOBCD": ADAM_LR}
#: optimizer of the other parameters → its learning rate
OTHERS = {"sgd": 0.1, "adam": ADAM_LR}
#: (Stiefel optimizer, optimizer of the other parameters): the SGD-type ones with SGD, all with Adam
PAIRS = [(name, "sgd") for name in ("OBCD", "RSDM", "RSSM")] + [(n, "adam") for n in ORTHOPLUG]


def _train(name, lr, other="sgd", **options):
    return train_orthonet(name, epochs=EPOCHS, lr=lr, hidden=HIDDEN, r=HIDDEN // 2, seed=0,
                          other=other, other_lr=OTHERS[other], options=options or None)


@pytest.fixture(scope="module")
def frozen():
    return {other: _train("frozen", 0.0, other) for other in OTHERS}


@pytest.fixture(scope="module")
def start():
    return train_orthonet("frozen", epochs=0, hidden=HIDDEN, seed=0).model


def test_every_stiefel_optimizer_is_walked():
    assert set(ORTHOPLUG) | {"frozen", "RiemannianSGD", "RiemannianAdam"} == set(OPTIMIZERS)


def test_frozen_control_keeps_the_weights(frozen, start):
    for control in frozen.values():
        for w0, w in zip(start.weights, control.model.weights, strict=True):
            assert (w0.detach() == w.detach()).all()


@pytest.mark.parametrize(("name", "other"), PAIRS)
def test_trains_the_orthogonal_weights(name, other, frozen, start):
    """Every weight moves, and the last epoch's mean training loss is below the control's (the
    same optimizer of the other parameters) by a margin (5 %)."""
    result = _train(name, ORTHOPLUG[name], other)
    control = frozen[other]
    assert result.history[-1][1] < 0.95 * control.history[-1][1], (result.history,
                                                                   control.history)
    for w0, w in zip(start.weights, result.model.weights, strict=True):
        assert float(torch.linalg.matrix_norm(w.detach() - w0.detach())) > 0.1
    assert result.violation < 1e-4


def test_obcd_one_pair_per_step_barely_moves(frozen):
    """The reason for the torch OBCD's Jacobi default: with one random row pair per step (2 of
    the 64 rows of a gradient used) the training loss stays within 5 % of the control's."""
    result = _train("OBCD", 1.0, pairs="random")
    assert result.history[-1][1] >= 0.95 * frozen["sgd"].history[-1][1]


def test_jjobcd_on_the_unit_signature_takes_obcd_steps():
    """On ``IndefiniteStiefel(n, k)`` with ``J = I`` (the set St(n, k)) a J-JOBCD step is an
    OBCD step: the same matchings (one seed), fixed σ and θ give the same iterates of a
    batched weight, a smooth non-quadratic loss, to float64 round-off."""
    gen = torch.Generator().manual_seed(0)
    x0 = torch.linalg.qr(torch.randn(2, 8, 3, dtype=torch.float64, generator=gen))[0]
    c = torch.randn(8, 8, dtype=torch.float64, generator=gen)
    c = c + c.T

    def iterates(optimizer, unit_signature, **options):
        w = geoopt.ManifoldParameter(x0.clone(), manifold=geoopt.EuclideanStiefel())
        if unit_signature:
            as_unit_signature([w])
        opt = optimizer([w], seed=3, theta=1e-5, **options)

        def closure():
            opt.zero_grad()
            loss = (w.mT @ c @ w).diagonal(dim1=-2, dim2=-1).sum() + (w**4).sum()
            loss.backward()
            return loss

        out = []
        for _ in range(5):
            opt.step(closure)
            out.append(w.detach().clone())
        return out

    obcd = iterates(OBCD, False, sigma_rule=20.0)
    jjobcd = iterates(JJOBCD, True, sigma_rule=20.0)
    assert float((obcd[-1] - x0).abs().max()) > 0.1  # the steps move
    for a, b in zip(obcd, jjobcd, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-13)


def test_unit_signature_keeps_the_set():
    w = geoopt.ManifoldParameter(torch.linalg.qr(torch.randn(6, 4, dtype=torch.float64))[0],
                                 manifold=geoopt.EuclideanStiefel())
    as_unit_signature([w])
    geometry = w.manifold.geometry
    assert geometry.shape == (6, 4)
    assert float(geometry.gram_error(w.detach()).abs().max()) < 1e-14
    assert w.manifold.check_point_on_manifold(w)


def test_held_out_data_is_standardised_on_the_training_split():
    xtr, ytr, xte, yte = load_data("breast_cancer", seed=1, dtype=torch.float64)
    assert xtr.shape[1] == xte.shape[1] == 30 and len(xtr) + len(xte) == 569
    torch.testing.assert_close(xtr.mean(0), torch.zeros(30, dtype=torch.float64), atol=1e-12,
                               rtol=0)
    torch.testing.assert_close(xtr.std(0, correction=0), torch.ones(30, dtype=torch.float64))
    assert set(ytr.tolist()) == set(yte.tolist()) == {0, 1}


def test_bad_names_are_refused_before_any_work():
    model = train_orthonet("frozen", epochs=0, hidden=HIDDEN, seed=0).model
    with pytest.raises(ValueError, match="other must be one of"):
        make_optimizer("RSDM", model, lr=0.05, other="rmsprop")
    with pytest.raises(ValueError, match="optimizer must be one of"):
        make_optimizer("Adam", model, lr=0.05)
    with pytest.raises(ValueError, match="data must be one of"):
        load_data("mnist")
    with pytest.raises(ValueError, match="optimizer must be one of"):
        train_orthonet("Adam", epochs=1, data="mnist")
