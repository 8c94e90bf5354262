r"""Knowledge-graph data and filtered link-prediction evaluation.

A knowledge graph (KG) is a set of triples ``(head, relation, tail)``; here every split is an
``int64`` tensor of shape ``(m, 3)`` holding entity and relation ids.

Real data. :func:`load_kg` reads the small benchmark KGs Nations, Kinships and UMLS from the
files that the ``pykeen`` wheel ships as package data (``pykeen/datasets/<name>/{train,valid,
test}.txt``, tab-separated names). The files are located with :mod:`importlib` without
importing ``pykeen`` (which is slow); nothing is ever downloaded. Ids are assigned by sorting
the names that occur in any of the three splits, so they agree across splits.

Evaluation. :func:`evaluate_ranking` is the standard *filtered* protocol: for each test triple
``(h, r, t)`` the true tail is ranked against every entity ``t'`` as ``(h, r, t')`` and the
true head against every ``(h', r, t)``; candidates that form another known true triple are
removed from the ranking. Ties are counted half (the "realistic" rank
``1 + #{better} + #{tied}/2``), so a constant score function gets the rank of a random guess
on average and not the optimistic rank 1. MRR and Hits@k average over both directions.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["KGData", "load_kg", "synthetic_kg", "evaluate_ranking", "KG_DATASETS"]

KG_DATASETS = ("nations", "kinships", "umls")
_SPLITS = ("train", "valid", "test")

ScoreFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class KGData:
    """A knowledge graph split into train, validation and test triples.

    Attributes:
        name (str): Data set name.
        entities, relations (list of str): Names; the id of a name is its position in the list.
        train, valid, test (torch.Tensor): ``int64`` tensors of shape ``(m, 3)`` with rows ``(head,
            relation, tail)``.
    """

    name: str
    entities: list[str]
    relations: list[str]
    train: torch.Tensor
    valid: torch.Tensor
    test: torch.Tensor

    def __post_init__(self):
        for split in _SPLITS:
            t = getattr(self, split)
            if t.dtype != torch.int64 or t.ndim != 2 or t.shape[1] != 3:
                raise ValueError(f"{split} must be an int64 tensor of shape (m, 3), "
                                 f"got {t.dtype} {tuple(t.shape)}")
            if t.numel() and (int(t[:, [0, 2]].min()) < 0
                              or int(t[:, [0, 2]].max()) >= len(self.entities)
                              or int(t[:, 1].min()) < 0
                              or int(t[:, 1].max()) >= len(self.relations)):
                raise ValueError(f"{split} holds ids outside the entity/relation ranges")

    @property
    def num_entities(self) -> int:
        """Number of entities."""
        return len(self.entities)

    @property
    def num_relations(self) -> int:
        """Number of relations."""
        return len(self.relations)

    @property
    def all_triples(self) -> torch.Tensor:
        """Train, validation and test triples stacked (the known set for filtering)."""
        return torch.cat([self.train, self.valid, self.test])


def _pykeen_dataset_dir(name: str) -> Path:
    spec = importlib.util.find_spec("pykeen")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"the {name!r} knowledge graph is read from the files shipped with the "
                          "'pykeen' package, which is not installed; install it with "
                          "pip install \"orthoplug[kg]\"")
    return Path(spec.submodule_search_locations[0]) / "datasets" / name


def _read_triples(path: Path) -> list[tuple[str, str, str]]:
    if not path.is_file():
        raise FileNotFoundError(f"missing knowledge-graph file {path}")
    rows = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 3:
            raise ValueError(f"{path}:{lineno}: expected 3 tab-separated fields, "
                             f"got {len(parts)}")
        rows.append((parts[0].strip(), parts[1].strip(), parts[2].strip()))
    return rows


def load_kg(name: str, *, directory: str | Path | None = None) -> KGData:
    """Load one of the small benchmark knowledge graphs.

    Args:
        name ({"nations", "kinships", "umls"}): Data set (case-insensitive). Sizes (entities,
            relations, train/valid/test triples): Nations 14, 55, 1592/199/201; Kinships 104, 25,
            8544/1068/1074; UMLS 135, 46, 5216/652/661.
        directory (path, optional): Read ``train.txt``, ``valid.txt`` and ``test.txt`` from this
            folder instead of the ``pykeen`` package data (then ``name`` is only a label).

    Returns:
        KGData: Ids sorted by name over all three splits, consistent across splits.

    Raises:
        ValueError: Unknown ``name`` or malformed file.
        ImportError: ``pykeen`` (which holds the files) is not installed.
    """
    if directory is None:
        key = name.lower()
        if key not in KG_DATASETS:
            raise ValueError(f"unknown knowledge graph {name!r}; choose from {KG_DATASETS}")
        folder = _pykeen_dataset_dir(key)
    else:
        key, folder = name, Path(directory)
    raw = {split: _read_triples(folder / f"{split}.txt") for split in _SPLITS}
    entities = sorted({x for rows in raw.values() for h, _, t in rows for x in (h, t)})
    relations = sorted({r for rows in raw.values() for _, r, _ in rows})
    eid = {e: i for i, e in enumerate(entities)}
    rid = {r: i for i, r in enumerate(relations)}

    def encode(rows):
        ids = [(eid[h], rid[r], eid[t]) for h, r, t in rows]
        return torch.tensor(ids, dtype=torch.int64).reshape(-1, 3)

    return KGData(key, entities, relations, *(encode(raw[s]) for s in _SPLITS))


def synthetic_kg(num_entities: int, num_relations: int, num_triples: int,
                 seed: int = 0) -> KGData:
    """A random knowledge graph with learnable structure (for tests and quick demos).

    Entities get a random cyclic order ``π``; relation ``r`` maps the entity at position ``i``
    to the one at position ``i + c_r (mod num_entities)`` with a random shift ``c_r ≠ 0``, so
    every relation is a permutation of the entities and relations compose like rotations
    (held-out triples can be inferred from the others). ``num_triples`` distinct triples are
    drawn without replacement and split 80/10/10 into train/valid/test.

    Args:
        num_entities (int): At least 3.
        num_relations (int): At least 1.
        num_triples (int): Between 10 and ``num_entities * num_relations``.
        seed (int): Seed of the draw.

    Returns:
        KGData
    """
    if num_entities < 3 or num_relations < 1:
        raise ValueError(f"need num_entities >= 3 and num_relations >= 1, got "
                         f"{num_entities} and {num_relations}")
    if not 10 <= num_triples <= num_entities * num_relations:
        raise ValueError(f"num_triples must lie in [10, {num_entities * num_relations}], "
                         f"got {num_triples}")
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(num_entities, generator=gen)
    shifts = torch.randint(1, num_entities, (num_relations,), generator=gen)
    pick = torch.randperm(num_entities * num_relations, generator=gen)[:num_triples]
    pos, rel = pick % num_entities, pick // num_entities
    triples = torch.stack([order[pos], rel, order[(pos + shifts[rel]) % num_entities]], dim=1)
    n_valid = n_test = num_triples // 10
    n_train = num_triples - n_valid - n_test
    return KGData("synthetic", [f"e{i}" for i in range(num_entities)],
                  [f"r{i}" for i in range(num_relations)], triples[:n_train],
                  triples[n_train:n_train + n_valid], triples[n_train + n_valid:])


def _check_triples(name: str, x: torch.Tensor) -> torch.Tensor:
    x = torch.as_tensor(x)
    if x.ndim != 2 or x.shape[1] != 3 or x.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{name} must be an integer tensor of shape (m, 3), "
                         f"got {x.dtype} {tuple(x.shape)}")
    if x.numel() and int(x.min()) < 0:
        raise ValueError(f"{name} holds negative ids")
    return x.long()


@torch.no_grad()
def evaluate_ranking(score_fn: ScoreFn, triples: torch.Tensor, known_triples: torch.Tensor,
                     ks: Sequence[int] = (1, 3, 10), *, num_entities: int | None = None,
                     batch_size: int = 256) -> dict[str, float]:
    """Filtered link-prediction metrics (MRR and Hits@k over head and tail prediction).

    Args:
        score_fn (callable): ``score_fn(h, r, t)`` with ``int64`` tensors that broadcast against
            each other (shapes ``(B, 1)`` and ``(1, E)`` are used) returns a float tensor of the
            broadcast shape; higher means more plausible.
        triples (torch.Tensor): ``(m, 3)`` triples to evaluate.
        known_triples (torch.Tensor): ``(M, 3)`` all true triples (usually train + valid + test);
            candidates forming one of them, other than the evaluated triple itself, are removed from
            the ranking.
        ks (sequence of int): Cut-offs for Hits@k.
        num_entities (int, optional): Number of candidate entities (default: largest entity id in
            ``triples`` and ``known_triples`` plus one).
        batch_size (int): Queries scored at once (memory ``O(batch_size · num_entities)`` scores).

    Returns:
        dict: ``{"mrr": …, "mean_rank": …, "hits@k": … for k in ks}``.
    """
    triples = _check_triples("triples", triples)
    known = _check_triples("known_triples", known_triples)
    if triples.shape[0] == 0:
        raise ValueError("no triples to evaluate")
    if not ks or any(int(k) < 1 for k in ks):
        raise ValueError(f"ks must be positive integers, got {tuple(ks)}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    largest = int(torch.cat([triples[:, [0, 2]], known[:, [0, 2]]]).max()) + 1
    n_e = largest if num_entities is None else int(num_entities)
    if n_e < largest:
        raise ValueError(f"num_entities={n_e} but entity id {largest - 1} occurs")
    n_r = int(torch.cat([triples[:, 1], known[:, 1]]).max()) + 1

    def key(h, r, t):
        return (h * n_r + r) * n_e + t

    known_keys = torch.unique(key(known[:, 0], known[:, 1], known[:, 2]))
    cand = torch.arange(n_e)[None, :]
    ranks = []
    for batch in triples.split(batch_size):
        h, r, t = (batch[:, i:i + 1] for i in range(3))
        for side in ("tail", "head"):
            if side == "tail":
                scores, true, keys = score_fn(h, r, cand), t, key(h, r, cand)
            else:
                scores, true, keys = score_fn(cand, r, t), h, key(cand, r, t)
            scores = torch.broadcast_to(scores, keys.shape)
            if not bool(torch.isfinite(scores).all()):
                raise FloatingPointError(f"score_fn returned non-finite scores ({side} side)")
            target = scores.gather(1, true)
            other = torch.isin(keys, known_keys) | (cand == true)
            better = ((scores > target) & ~other).sum(1)
            tied = ((scores == target) & ~other).sum(1)
            ranks.append(1.0 + better.double() + 0.5 * tied.double())
    rank = torch.cat(ranks)
    out = {"mrr": float((1.0 / rank).mean()), "mean_rank": float(rank.mean())}
    for k in ks:
        out[f"hits@{int(k)}"] = float((rank <= int(k)).double().mean())
    return out
