"""Data parallel over torch.distributed: 2 gloo processes on 127.0.0.1 against one process.

One spawn runs every case on both ranks (each process: 1 thread, a 60 s collective timeout; the
parent kills them after 150 s). For each optimizer the test checks that the two replicas agree
to 1e-12, that they equal one process training on the full batch with the same seed to 1e-10,
and that a different seed on rank 1 raises ReplicaDivergenceError (the torch optimizers'
replica check, the core solvers' seed check at the start of a data-parallel run).
``train_ultrae`` (J-JOBCD and Adam under DDP, each rank drawing only its share's negatives) is
checked the same way.
"""

from __future__ import annotations

import datetime
import socket
import time

import geoopt
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

import orthoplug.adapters.geoopt as go
from orthoplug.distributed import ReplicaDivergenceError, Shard, check_replicas, fingerprint
from orthoplug.geometry.manifolds import JOrthogonalGeometry
from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.nonsmooth import L1
from orthoplug.oracles import FiniteSumOracle
from orthoplug.problems.kg import synthetic_kg
from orthoplug.solvers.jobcd import VRJJOBCD as CoreVRJJOBCD
from orthoplug.solvers.rsdm import StochasticRSDM
from orthoplug.training.ultrae import UltraE, train_ultrae

F64 = torch.float64
WORLD = 2
N_SAMPLES = 12  # per full batch; each rank holds N_SAMPLES / WORLD
STEPS = 12


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _rank_world():
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _local(data):
    """This rank's contiguous share of the rows of ``data``."""
    rank, world = _rank_world()
    return data.tensor_split(world)[rank]


class _Holder(torch.nn.Module):
    """A module around parameters (for DistributedDataParallel); ``forward`` returns them."""

    def __init__(self, *params):
        super().__init__()
        self.params = torch.nn.ParameterList(params)

    def forward(self):
        return tuple(self.params)


def _maybe_ddp(*params):
    """``forward() -> params`` through DistributedDataParallel when a process group exists."""
    module = _Holder(*params)
    return DistributedDataParallel(module) if dist.is_initialized() else module


def _jorth_case(name, seed, ddp, steps=STEPS, **options):
    """A batched J-orthogonal parameter fitted to targets: f = mean_i Σ_b ‖X_b a_i − t_bi‖²."""
    manifold = go.JOrthogonal(4, 2)
    x = geoopt.ManifoldParameter(manifold.random(2, 4, 4, dtype=F64, generator=_gen(1), cond=2.0),
                                 manifold=manifold)
    a = _local(torch.randn(N_SAMPLES, 4, dtype=F64, generator=_gen(2)))
    t = _local(torch.randn(N_SAMPLES, 2, 4, dtype=F64, generator=_gen(3)))
    model = _maybe_ddp(x) if ddp else _Holder(x)
    opt = getattr(go, name)([x], seed=seed, replica_check_every=3, **options)

    def closure():
        opt.zero_grad()
        loss = ((torch.einsum("bij,nj->nbi", model()[0], a) - t) ** 2).sum((1, 2)).mean()
        loss.backward()
        return loss

    for _ in range(steps):
        opt.step(closure)
    return x.detach()


def _stiefel_data():
    scales = torch.tensor([3.0, 2.0, 1.5, 1.0, 0.5, 0.3, 0.2], dtype=F64)
    return torch.randn(N_SAMPLES, 7, dtype=F64, generator=_gen(4)) * scales


def _stiefel_x(batch=()):
    x0 = torch.linalg.qr(torch.randn(*batch, 7, 3, dtype=F64, generator=_gen(5))).Q
    return geoopt.ManifoldParameter(x0, manifold=geoopt.EuclideanStiefel())


def _pca_loss(y):
    """−½ mean_i ‖y_i‖² + 0.05 mean_i ‖y_i‖₄⁴ for y_i = Xᵀ a_i, the rows of ``y`` (the quartic
    term makes the Hessian non-constant)."""
    return (-0.5 * (y ** 2).sum(-1) + 0.05 * (y ** 4).sum(-1)).mean()


def _obcd_case(seed, steps=STEPS):
    x, d = _stiefel_x((2,)), _local(_stiefel_data())
    opt = go.OBCD([x], h=L1(1e-2), pairs="jacobi", seed=seed, replica_check_every=2)

    def closure():
        opt.zero_grad()
        loss = _pca_loss(torch.einsum("nj,bjk->bnk", d, x)).sum()
        loss.backward()
        return loss

    for _ in range(steps):
        opt.step(closure)
    return x.detach()


def _rsdm_case(seed, steps=STEPS):
    """RSDM as a RiemannianSGD drop-in under DDP (backward outside the optimizer) with an
    extra Euclidean parameter (SGD momentum)."""
    x, d = _stiefel_x(), _local(_stiefel_data())
    w = torch.nn.Parameter(torch.ones(3, dtype=F64))
    model = _maybe_ddp(x, w)
    opt = go.RSDM([x, w], lr=0.2, r=4, momentum=0.5, seed=seed, replica_check_every=4)
    for _ in range(steps):
        opt.zero_grad()
        xm, wm = model()
        loss = _pca_loss(d @ xm) + (((d @ xm).abs() - wm) ** 2).sum(1).mean()
        loss.backward()
        opt.step()
    return torch.cat([x.detach().reshape(-1), w.detach()])


def _rssm_case(seed, steps=STEPS):
    x, d = _stiefel_x(), _local(_stiefel_data())
    opt = go.RSSM([x], num_blocks=3, seed=seed, replica_check_every=1)

    def closure():
        opt.zero_grad()
        loss = _pca_loss(d @ x) + 0.1 * x.abs().sum()  # nonsmooth: a subgradient
        loss.backward()
        return loss

    for _ in range(steps):
        opt.step(closure)
    return x.detach()


def _vr_components():
    a = torch.randn(N_SAMPLES, 4, dtype=F64, generator=_gen(6))
    t = torch.randn(N_SAMPLES, 4, dtype=F64, generator=_gen(7))
    return a, t


_LIPSCHITZ = 2.0 * float((_vr_components()[0] ** 2).sum(1).max())  # of the whole finite sum


def _vr_case(seed, steps=STEPS):
    """Torch VR-J-JOBCD with the components sharded over the ranks."""
    manifold = go.JOrthogonal(4, 2)
    x = geoopt.ManifoldParameter(manifold.random(4, 4, dtype=F64, generator=_gen(8), cond=2.0),
                                 manifold=manifold)
    shard = Shard.contiguous(N_SAMPLES)
    a, t = (v[shard.indices] for v in _vr_components())
    opt = go.VRJJOBCD([x], num_components=N_SAMPLES, sigma_rule=_LIPSCHITZ, batch_size=8,
                      small_batch=3, reset_probability=0.3, seed=seed, shard=shard.indices,
                      replica_check_every=1)

    def closure(idx):
        opt.zero_grad()
        loss = ((a[idx] @ x.mT - t[idx]) ** 2).sum(1).mean()
        loss.backward()
        return loss

    for _ in range(steps):
        opt.step(closure)
    return x.detach()


def _core_oracle(k):
    """A sharded finite sum f_i(X) = ‖Xᵀ a_i − t_i‖² (X: 4 × k) for the core solvers."""
    shard = Shard.contiguous(N_SAMPLES)
    a, t = (v[shard.indices] for v in _vr_components())
    t = t[:, :k]

    def value(x, idx):
        return ((a[idx] @ x - t[idx]) ** 2).sum(1).mean()

    def grad(x, idx):
        return 2.0 * a[idx].mT @ (a[idx] @ x - t[idx]) / len(idx)

    return FiniteSumOracle(N_SAMPLES, value, grad, shard=shard.indices, lipschitz=_LIPSCHITZ)


def _core_vr_case(seed, steps=STEPS):
    geo = JOrthogonalGeometry(4, 2)
    x0 = geo.random_point(cond=2.0, dtype=F64, generator=_gen(9))
    res = CoreVRJJOBCD(batch_size=6, small_batch=3, seed=seed, max_iterations=steps,
                       eval_every=4).run(_core_oracle(4), x0, geo)
    return res.point


def _core_srsdm_case(seed, steps=STEPS):
    x0 = torch.linalg.qr(torch.randn(4, 2, dtype=F64, generator=_gen(10))).Q
    res = StochasticRSDM(3, batch_size=5, step_size=0.05, seed=seed, max_iterations=steps,
                         eval_every=4).run(_core_oracle(2), x0, StiefelGeometry(4, 2))
    return res.point


_ULTRAE = dict(dim=8, p=4, batch_size=32, num_negatives=10)  # 120 triples: 4 minibatches


def _ultrae_case(seed, steps=STEPS):
    """train_ultrae (its default J-JOBCD, entities by Adam, DDP): each rank draws the negatives of
    its share of every minibatch only; ``steps`` a multiple of the 4 minibatches per epoch."""
    data = synthetic_kg(30, 4, 120, seed=0)
    if steps == 0:
        model = UltraE(30, 4, _ULTRAE["dim"], _ULTRAE["p"], generator=_gen(seed))
    else:
        model = train_ultrae(data, epochs=steps // 4, seed=seed, evaluate=False,
                             replica_check_every=2, **_ULTRAE).model
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


CASES = {
    "JJOBCD": lambda seed, steps=STEPS: _jorth_case("JJOBCD", seed, True, steps),
    "CayleyLBFGS": lambda seed, steps=STEPS: _jorth_case("CayleyLBFGS", seed, True, steps),
    "GSJOBCD": lambda seed, steps=STEPS: _jorth_case("GSJOBCD", seed, True, steps,
                                                     average_gradients=False),
    "JJOBCD fixed sigma": lambda seed, steps=STEPS: _jorth_case("JJOBCD", seed, False, steps,
                                                                sigma_rule=50.0),
    "VRJJOBCD": _vr_case,
    "OBCD": _obcd_case,
    "RSDM": _rsdm_case,
    "RSSM": _rssm_case,
    "core VR-J-JOBCD": _core_vr_case,
    "core StochasticRSDM": _core_srsdm_case,
    "UltraE": _ultrae_case,
}
def _start(name):
    """The initial point of a case (no steps)."""
    return CASES[name](0, steps=0)


def _worker(rank, port, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD, timeout=datetime.timedelta(seconds=60))
    try:
        results = {}
        for name, case in CASES.items():
            try:
                results[name] = case(0)
            except ReplicaDivergenceError as err:  # raised on every rank alike
                results[name] = f"{type(err).__name__}: {err}"
        caught = {}
        for name in CASES:
            try:
                CASES[name](rank)  # rank 1 has seed 1
                caught[name] = "not caught"
            except ReplicaDivergenceError as err:
                caught[name] = str(err)
        torch.save({"results": results, "caught": caught}, f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The two ranks' results and, computed meanwhile, one process's on the full batch."""
    out = tmp_path_factory.mktemp("dist")
    ctx = mp.spawn(_worker, args=(_free_port(), str(out)), nprocs=WORLD, join=False)
    try:
        torch.set_num_threads(1)
        single = {name: case(0) for name, case in CASES.items()}  # no process group
        deadline = time.monotonic() + 150
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                pytest.fail("the gloo workers did not finish in 150 s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    return [torch.load(out / f"rank{r}.pt") for r in range(WORLD)], single


@pytest.mark.parametrize("name", list(CASES))
def test_replicas_agree_and_equal_one_process(runs, name):
    ranks, single = runs
    a, b = (r["results"][name] for r in ranks)
    assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor), (a, b)
    assert float((a - b).abs().max()) <= 1e-12
    assert float((a - single[name]).abs().max()) <= 1e-10
    assert float((a - _start(name)).abs().max()) > 1e-3  # the run did move


@pytest.mark.parametrize("name", list(CASES))
def test_different_seed_is_caught(runs, name):
    for r in runs[0]:
        assert "replicas differ" in r["caught"][name], r["caught"][name]
        assert "seed" in r["caught"][name]


def test_helpers_outside_distributed():
    check_replicas([("x", torch.ones(3))])  # no process group: nothing to compare
    assert fingerprint(torch.tensor([1.0, 2.0])) != fingerprint(torch.tensor([2.0, 1.0]))
    assert fingerprint(2**62 + 1) != fingerprint(2**62)
    with pytest.raises(ValueError, match="torch.distributed is not initialised"):
        Shard(10, range(5))
    with pytest.raises(ValueError, match="distinct"):
        Shard(3, [0, 0, 1])
    with pytest.raises(ValueError, match="replica_check_every"):
        go.RSSM([_stiefel_x()], replica_check_every=0)


def test_full_shard_in_any_order_is_the_plain_oracle():
    """One process holding all components in a permuted order: same values and gradients."""
    data = torch.randn(6, 3, dtype=F64, generator=_gen(11))
    perm = torch.tensor([3, 0, 5, 1, 4, 2])

    def oracle(d, shard=None):
        return FiniteSumOracle(6, lambda x, i: ((d[i] @ x) ** 2).sum(1).mean(),
                               lambda x, i: 2.0 * d[i].mT @ (d[i] @ x) / len(i), shard=shard)

    x = torch.randn(3, 2, dtype=F64, generator=_gen(12))
    plain, sharded = oracle(data), oracle(data[perm], perm)
    idx = torch.tensor([1, 4, 5])
    assert torch.allclose(plain.component_gradient(x, idx), sharded.component_gradient(x, idx),
                          rtol=1e-14, atol=0)
    assert float(plain.value(x)) == pytest.approx(float(sharded.value(x)), rel=1e-14)
    expected = 2.0 * data[idx].mT @ (data[idx] @ x) / 3  # by hand
    assert torch.allclose(sharded.component_gradient(x, idx), expected, rtol=1e-14, atol=0)
