"""UltraE knowledge-graph embedding: data loading, filtered ranking, training with JOBCD."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from orthoplug.problems import kg
from orthoplug.problems.kg import KGData, evaluate_ranking, load_kg, synthetic_kg
from orthoplug.training import ultrae
from orthoplug.training.ultrae import UltraE, corrupt, draw_negatives, train_ultrae

SMALL = dict(dim=8, p=4, num_negatives=10, batch_size=32)


def _constant(h, r, t):
    return torch.zeros(torch.broadcast_shapes(h.shape, r.shape, t.shape), dtype=torch.float64)


@pytest.fixture(scope="module")
def synth():
    return synthetic_kg(30, 4, 120, seed=0)


@pytest.fixture(scope="module")
def trained(synth):
    return train_ultrae(synth, relation_optimizer="JJOBCD", epochs=30, eval_every=10, seed=0,
                        **SMALL)


# ---- data ----------------------------------------------------------------------------------
def test_load_nations_matches_files():
    spec = importlib.util.find_spec("pykeen")
    if spec is None:
        pytest.skip("pykeen (which ships the Nations triples) is not installed")
    imported_before = "pykeen" in sys.modules
    data = load_kg("Nations")
    assert imported_before or "pykeen" not in sys.modules  # located, not imported
    folder = Path(spec.submodule_search_locations[0])
    folder = folder / "datasets" / "nations"
    assert (data.num_entities, data.num_relations) == (14, 55)
    for split in ("train", "valid", "test"):
        lines = [ln.split("\t") for ln in (folder / f"{split}.txt").read_text().splitlines()
                 if ln.strip()]
        ids = getattr(data, split)
        assert ids.shape == (len(lines), 3)
        decoded = [[data.entities[h], data.relations[r], data.entities[t]]
                   for h, r, t in ids.tolist()]
        assert decoded == [[x.strip() for x in ln] for ln in lines]


def test_load_from_directory_consistent_ids(tmp_path):
    (tmp_path / "train.txt").write_text("a\tlikes\tb\nb\tlikes\tc\n")
    (tmp_path / "valid.txt").write_text("c\thates\ta\n")
    (tmp_path / "test.txt").write_text("d\tlikes\ta\n\n")
    data = load_kg("toy", directory=tmp_path)
    assert data.entities == ["a", "b", "c", "d"] and data.relations == ["hates", "likes"]
    assert data.train.tolist() == [[0, 1, 1], [1, 1, 2]]
    assert data.valid.tolist() == [[2, 0, 0]] and data.test.tolist() == [[3, 1, 0]]
    (tmp_path / "test.txt").write_text("d\tlikes\n")
    with pytest.raises(ValueError, match="3 tab-separated"):
        load_kg("toy", directory=tmp_path)


def test_load_errors(monkeypatch):
    with pytest.raises(ValueError, match="unknown knowledge graph"):
        load_kg("freebase")
    monkeypatch.setattr(kg.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match=r"orthoplug\[kg\]"):
        load_kg("umls")


def test_kgdata_validates():
    good = torch.zeros(2, 3, dtype=torch.int64)
    with pytest.raises(ValueError, match="shape"):
        KGData("x", ["a"], ["r"], torch.zeros(2, 2, dtype=torch.int64), good, good)
    with pytest.raises(ValueError, match="outside"):
        KGData("x", ["a"], ["r"], torch.tensor([[0, 0, 1]]), good, good)


def test_synthetic_kg_is_permutation_structured(synth):
    trip = synth.all_triples
    assert trip.shape == (120, 3) and len(torch.unique(trip, dim=0)) == 120
    for r in range(synth.num_relations):  # each relation is a function h -> t
        sub = trip[trip[:, 1] == r]
        assert len(torch.unique(sub[:, 0])) == len(sub) == len(torch.unique(sub[:, 2]))


# ---- evaluation ----------------------------------------------------------------------------
def _brute_force(table, triples, known, ks):
    n_e = table.shape[0]
    known = {tuple(x) for x in known.tolist()}
    ranks = []
    for h, r, t in triples.tolist():
        for side in ("tail", "head"):
            true = table[h, r, t].item()
            better = tied = 0
            for e in range(n_e):
                cand = (h, r, e) if side == "tail" else (e, r, t)
                if cand == (h, r, t) or cand in known:
                    continue
                s = table[cand].item()
                better += s > true
                tied += s == true
            ranks.append(1 + better + tied / 2)
    out = {"mrr": sum(1 / x for x in ranks) / len(ranks)}
    out.update({f"hits@{k}": sum(x <= k for x in ranks) / len(ranks) for k in ks})
    return out


def test_filtered_ranking_matches_brute_force():
    gen = torch.Generator().manual_seed(3)
    n_e, n_r = 9, 3
    table = torch.randint(0, 4, (n_e, n_r, n_e), generator=gen).double()  # many ties
    known = torch.unique(torch.stack([torch.randint(0, n_e, (40,), generator=gen),
                                      torch.randint(0, n_r, (40,), generator=gen),
                                      torch.randint(0, n_e, (40,), generator=gen)], 1), dim=0)
    triples = known[::3]
    got = evaluate_ranking(lambda h, r, t: table[h, r, t], triples, known, ks=(1, 2, 5),
                           batch_size=4)
    want = _brute_force(table, triples, known, (1, 2, 5))
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=1e-12), key


def test_ranking_errors():
    tri = torch.tensor([[0, 0, 1]])
    with pytest.raises(ValueError, match="shape"):
        evaluate_ranking(_constant, torch.tensor([0, 0, 1]), tri)
    with pytest.raises(ValueError, match="num_entities"):
        evaluate_ranking(_constant, tri, tri, num_entities=1)
    with pytest.raises(FloatingPointError):
        evaluate_ranking(lambda h, r, t: _constant(h, r, t) / 0.0, tri, tri)


# ---- model ---------------------------------------------------------------------------------
def test_score_broadcasting_and_manifold():
    model = UltraE(7, 3, 6, 2, generator=torch.Generator().manual_seed(0))
    e = model.embeddings()
    assert torch.allclose((e * model.jvec * e).sum(-1), -torch.ones(7, dtype=e.dtype))
    h, r, t = torch.tensor([[1], [4]]), torch.tensor([[2], [0]]), torch.arange(7)[None]
    grid = model.score(h, r, t)
    flat = model.score(h.expand(2, 7).reshape(-1), r.expand(2, 7).reshape(-1),
                       t.expand(2, 7).reshape(-1))
    assert grid.shape == (2, 7) and torch.allclose(grid, flat.reshape(2, 7))
    assert torch.allclose(model.score(t, r, torch.tensor([[3], [5]])),
                          model.score(t.expand(2, 7), r.expand(2, 7), torch.tensor([[3], [5]])))
    with pytest.raises(IndexError):
        model.score(torch.tensor([7]), torch.tensor([0]), torch.tensor([0]))
    with pytest.raises(ValueError, match="p < dim"):
        UltraE(7, 3, 6, 6)


def test_corrupt_keeps_relation_and_one_side():
    pos = torch.tensor([[0, 1, 2], [3, 0, 4]])
    neg = corrupt(pos, 50, 10, torch.Generator().manual_seed(0))
    assert neg.shape == (2, 50, 3) and (neg[..., 1] == pos[:, None, 1]).all()
    same_h, same_t = neg[..., 0] == pos[:, None, 0], neg[..., 2] == pos[:, None, 2]
    assert (same_h | same_t).all() and (~same_h).any() and (~same_t).any()


def test_loss_in_chunks_equals_one_pass(monkeypatch):
    """Scoring the negatives chunk by chunk gives the loss and gradients of one pass, and equals
    the formula written with score()."""
    model = UltraE(40, 3, 6, 3, generator=torch.Generator().manual_seed(2))
    gen = torch.Generator().manual_seed(3)
    pos = torch.stack([torch.randint(0, 40, (23,), generator=gen),
                       torch.randint(0, 3, (23,), generator=gen),
                       torch.randint(0, 40, (23,), generator=gen)], 1)
    neg = corrupt(pos, 7, 40, gen)

    def value_and_grads():
        model.zero_grad()
        value = model.loss(pos, neg)
        value.backward()
        return value.detach(), [p.grad.clone() for p in model.parameters()]

    whole, whole_grads = value_and_grads()
    by_hand = (torch.nn.functional.softplus(-model.score(pos[:, 0], pos[:, 1], pos[:, 2]))
               + torch.nn.functional.softplus(
                   model.score(neg[..., 0], pos[:, 1:2], neg[..., 2])).sum(-1)).mean()
    assert float(whole) == pytest.approx(float(by_hand.detach()), rel=1e-14)
    monkeypatch.setattr(ultrae, "LOSS_CHUNK_ENTRIES", 5 * 7 * 6)  # chunks of 5 positives
    chunked, chunked_grads = value_and_grads()
    assert float(chunked) == pytest.approx(float(whole), rel=1e-14)
    for a, b in zip(chunked_grads, whole_grads, strict=True):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-14)


def test_draw_negatives_do_not_depend_on_the_split():
    """Any contiguous split of a minibatch (one per rank) draws the same negatives as the whole;
    a chunk's negatives are corrupt() with that chunk's own generator."""
    batch = torch.stack([torch.arange(700) % 13, torch.arange(700) % 3, torch.arange(700) % 11], 1)
    whole = draw_negatives(batch, 5, 40, seed=7, step=3, chunk=256)
    assert whole.shape == (700, 5, 3)
    for cuts in ([0, 350, 700], [0, 255, 256, 513, 700], [0, 1, 699, 700], [0, 0, 700]):
        parts = [draw_negatives(batch, 5, 40, seed=7, step=3, rows=slice(a, b), chunk=256)
                 for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
        assert torch.equal(torch.cat(parts), whole)
    same_h, same_t = whole[..., 0] == batch[:, None, 0], whole[..., 2] == batch[:, None, 2]
    assert (whole[..., 1] == batch[:, None, 1]).all() and (same_h | same_t).all()
    chunks = [draw_negatives(batch, 5, 40, seed=7, step=3, rows=slice(a, a + 256), chunk=256)
              for a in (0, 256, 512)]
    assert not torch.equal(chunks[0][:188], chunks[2])  # chunks have their own generators
    assert not torch.equal(draw_negatives(batch, 5, 40, seed=7, step=4, chunk=256), whole)
    assert not torch.equal(draw_negatives(batch, 5, 40, seed=8, step=3, chunk=256), whole)
    with pytest.raises(ValueError, match="contiguous"):
        draw_negatives(batch, 5, 40, seed=7, step=3, rows=slice(0, 700, 2))


# ---- training ------------------------------------------------------------------------------
def test_jjobcd_training_feasible_learns_and_beats_random(synth, trained):
    assert trained.violation <= 1e-10
    err = trained.model.manifold.geometry.gram_error(trained.model.relation.detach())
    assert torch.linalg.matrix_norm(err).max() <= 1e-10
    losses = [loss for _, loss, _ in trained.history[1:]]
    assert losses[-1] < 0.5 * losses[0]
    fit = evaluate_ranking(trained.model.score, synth.train, synth.all_triples)
    chance = evaluate_ranking(_constant, synth.train, synth.all_triples)
    assert fit["mrr"] > 4.0 * chance["mrr"]
    start = UltraE(30, 4, 8, 4, generator=torch.Generator().manual_seed(0))  # same init
    moved = (trained.model.relation.detach() - start.relation.detach()).abs().max()
    assert moved > 0.1  # the relations were trained, not left at their start
    assert trained.epochs == 30 and len(trained.history) == 4


@pytest.mark.parametrize("name", ["GSJOBCD", "RiemannianSGD", "RiemannianAdam"])
def test_other_relation_optimizers_run(synth, name):
    res = train_ultrae(synth, relation_optimizer=name, epochs=2, seed=1, **SMALL)
    assert res.epochs == 2 and 0 < res.test["mrr"] <= 1
    assert res.violation <= (1e-10 if name == "GSJOBCD" else 1e-8)


def test_sigma0_sets_the_step_scale(synth):
    """JOBCD's step is about ∇/σ: starting the backtracking at a huge σ₀ (always accepted)
    moves the relations ~σ₀-times less than the default σ₀, for the same first gradient."""
    start = UltraE(30, 4, 8, 4, generator=torch.Generator().manual_seed(0)).relation.detach()
    moved = {}
    for sigma0 in (ultrae.DEFAULT_SIGMA0, 1e4):
        res = train_ultrae(synth, relation_optimizer="JJOBCD", epochs=1, batch_size=120,
                           seed=0, evaluate=False, sigma0=sigma0, precondition=None,
                           **{k: v for k, v in SMALL.items() if k != "batch_size"})
        assert res.steps == 1 and res.violation <= 1e-10
        moved[sigma0] = float((res.model.relation.detach() - start).norm())
    assert 0 < moved[1e4] < 1e-3 * moved[ultrae.DEFAULT_SIGMA0]
    with pytest.raises(ValueError, match="sigma0"):
        train_ultrae(synth, sigma0=0.0)


@pytest.mark.parametrize("options", [
    {}, dict(precondition="adam", matchings=1, relation_lr=5e-2),
    dict(precondition="rms", matchings="all", relation_lr=5e-2)])
def test_preconditioned_jjobcd_trains_the_relations(synth, options):
    """The preconditioned J-JOBCD (σ = 1/relation_lr; {}: the default) stays feasible, and the
    relations it trains fit the graph better than relations left at their start (σ = 10⁸), same
    entities' Adam."""
    fits = {}
    for name, kw in (("trained", options), ("frozen", dict(sigma=1e8, precondition=None))):
        res = train_ultrae(synth, relation_optimizer="JJOBCD", epochs=30, eval_every=30, seed=0,
                           **SMALL, **kw)
        assert res.violation <= 1e-12
        fits[name] = evaluate_ranking(res.model.score, synth.train, synth.all_triples)["mrr"]
    start = UltraE(30, 4, 8, 4, generator=torch.Generator().manual_seed(0))  # same init
    before = evaluate_ranking(start.score, synth.train, synth.all_triples)["mrr"]
    assert fits["trained"] > 3.0 * before and fits["trained"] > fits["frozen"] + 0.05


@pytest.mark.parametrize("name", ["JJOBCD", "RiemannianSGD"])
def test_cosine_schedule_scales_the_relation_step(synth, name):
    """``relation_schedule="cosine"`` over two one-minibatch epochs: the first step is the
    constant run's (t = 0), the second, from the same point with the same gradient, moves the
    relations (1 + f)/2 times as far (t = ½; f the floor), for geoopt's lr and J-JOBCD's 1/σ."""
    moves = {}
    for schedule in (None, "cosine"):
        snapshots = []
        res = train_ultrae(synth, relation_optimizer=name, epochs=2, eval_every=1,
                           batch_size=120, seed=0, evaluate=False, relation_schedule=schedule,
                           callback=lambda epoch, model, s=snapshots: s.append(
                               model.relation.detach().clone()),
                           **{k: v for k, v in SMALL.items() if k != "batch_size"})
        assert res.steps == 2 and len(snapshots) == 2
        moves[schedule] = snapshots
    first, second = moves[None], moves["cosine"]
    assert torch.equal(first[0], second[0])
    ratio = float((second[1] - second[0]).norm() / (first[1] - first[0]).norm())
    assert ratio == pytest.approx((1 + ultrae.SCHEDULE_FLOOR) / 2, rel=0.02)


def test_schedule_sets_lr_and_sigma():
    model = UltraE(10, 3, 8, 4, generator=torch.Generator().manual_seed(0))
    floor = ultrae.SCHEDULE_FLOOR
    for name, lr in (("RiemannianAdam", 0.1), ("JJOBCD", 0.01)):
        opt = ultrae._relation_optimizer(name, model, lr, None, 0.1, 0, None, "adam", 4)
        scale = ultrae._schedule(opt, "cosine")
        # the step size: geoopt's lr; a fixed-σ JOBCD's lr/σ (σ_eff = σ/lr, σ = 1/relation_lr)
        sigma = opt.sigma_rule.sigma0 if name == "JJOBCD" else 1.0
        for progress, factor in ((0.0, 1.0), (0.5, (1 + floor) / 2), (1.0, floor),
                                 (2.0, floor)):
            scale(progress)
            assert opt.param_groups[0]["lr"] / sigma == pytest.approx(lr * factor)
    backtracking = ultrae._relation_optimizer("JJOBCD", model, None, None, 0.1, 0, None, None, 1)
    with pytest.raises(ValueError, match="fixed step"):
        ultrae._schedule(backtracking, "cosine")
    with pytest.raises(ValueError, match="relation_schedule"):
        train_ultrae(synthetic_kg(30, 4, 120, seed=0), relation_schedule="linear")


def test_relation_weight_decay_reaches_the_preconditioned_jjobcd(synth):
    """``relation_weight_decay`` is J-JOBCD's decoupled decay: a strong one keeps the relations
    nearer ``O(p) × O(q)`` (smaller ``‖R_r‖_F²``, whose minimum is n) than none."""
    norms = {}
    for decay in (0.0, 3.0):
        res = train_ultrae(synth, epochs=5, eval_every=5, seed=0, evaluate=False,
                           relation_weight_decay=decay, **SMALL)
        assert res.violation <= 1e-12
        norms[decay] = float((res.model.relation.detach() ** 2).sum(dim=(-2, -1)).mean())
    assert SMALL["dim"] <= norms[3.0] < norms[0.0]
    with pytest.raises(ValueError, match="relation_weight_decay"):
        train_ultrae(synth, relation_optimizer="RiemannianAdam", relation_weight_decay=0.1)


def test_deterministic_under_seed(synth, trained):
    again = train_ultrae(synth, relation_optimizer="JJOBCD", epochs=30, eval_every=10, seed=0,
                         **SMALL)
    assert [h[1:] for h in again.history[1:]] == [h[1:] for h in trained.history[1:]]
    assert torch.equal(again.model.relation, trained.model.relation)
    assert torch.equal(again.model.entity, trained.model.entity)
    other = train_ultrae(synth, relation_optimizer="JJOBCD", epochs=1, seed=1, **SMALL)
    assert not torch.equal(other.model.entity, trained.model.entity)


def test_training_errors(synth):
    with pytest.raises(ValueError, match="relation_optimizer"):
        train_ultrae(synth, relation_optimizer="Adagrad")
    with pytest.raises(ValueError, match="epochs"):
        train_ultrae(synth, epochs=0)
    with pytest.raises(TypeError, match="KGData"):
        train_ultrae(synth.train)


def test_time_limit_stops_early(synth):
    res = train_ultrae(synth, epochs=1000, time_limit=0.2, seed=0, **SMALL)
    assert res.epochs < 1000 and res.history[-1][0] >= 0.2
