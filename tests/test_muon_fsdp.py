"""StiefelMuon under FSDP2 (``fully_shard``), 2 CPU processes on gloo: frames sharded by head take the
frame rule on each rank's heads with no communication; a sharded Muon matrix and a non-finite
gradient on one rank raise on every rank.

The model holds frames ``(4, 8, 4)`` (2 heads per rank) and AdamW vectors; the unsharded reference
trains the same model on the whole batch. Each rank averages its half of the batch and FSDP averages
the halves, so gradients differ from the unsharded ones by float32 rounding; the frame rule maps a
gradient to a step of fixed spectral length through a well-conditioned solve, so the frames agree
to about 1e-6 (``ATOL``), far below one step (``frame_lr`` = 0.05).
"""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from stiefel_mini import StiefelMuon
from stiefel_mini.geometry import orthogonality_error, random_stiefel
from stiefel_mini.groups import FrameHolder
from tests.rendezvous import rendezvous

pytestmark = [
    pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                       reason="torch.distributed with gloo is not available"),
    pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning"),
]

WORLD_SIZE, STEPS, BATCH = 2, 4, 8
ATOL = 1e-5


class _Heads(FrameHolder):
    """``x (B, 8) -> sum_h ||x Q_h||^2`` weighted: 4 frames ``(8, 4)`` and a gain per head."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Parameter(random_stiefel(4, 8, 4, generator=torch.Generator().manual_seed(0)).contiguous())
        self.gain = nn.Parameter(torch.linspace(0.5, 2.0, 4))
        self.mark_frames()

    def frame_names(self) -> tuple[str, ...]:
        return ("q",)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (torch.einsum("bi,hij->bhj", x, self.q).square().sum(-1) * self.gain).sum(-1)


def _batch(step: int) -> torch.Tensor:
    return torch.randn(BATCH, 8, generator=torch.Generator().manual_seed(100 + step))


def _train(model, opt, rank: int = 0, world: int = 1) -> None:
    for step in range(STEPS):
        rows = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
        opt.zero_grad(set_to_none=True)
        (-model(_batch(step)[rows]).mean()).backward()
        opt.step()


def _worker(rank: int, init: str, out_dir: str) -> None:
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD_SIZE, timeout=timedelta(seconds=60))
    try:
        out: dict = {}
        model = fully_shard(_Heads())
        opt = StiefelMuon(model.parameters(), frame_lr=0.05, adamw_lr=1e-2)
        out["local_shape"] = tuple(model.q.to_local().shape)
        _train(model, opt, rank, WORLD_SIZE)
        out["q"] = model.q.full_tensor()
        out["multiplier"] = opt.state[model.q]["multiplier"].full_tensor()
        # A sharded Muon matrix is refused.
        lin = fully_shard(nn.Linear(8, 8))
        opt = StiefelMuon(lin.parameters())
        lin(_batch(0)).sum().backward()
        try:
            opt.step()
        except ValueError as e:
            out["sharded_matrix"] = str(e)
        # A NaN gradient on rank 1 only raises on both ranks, and nothing changes.
        model = fully_shard(_Heads())
        opt = StiefelMuon(model.parameters(), frame_lr=0.05)
        (-model(_batch(0)).mean()).backward()
        if rank == 1:
            model.gain.grad.to_local().fill_(float("nan"))
        before = model.q.full_tensor().clone()
        try:
            opt.step()
        except ValueError as e:
            out["nan"] = str(e)
        out["nan_unchanged"] = torch.equal(before, model.q.full_tensor())
        torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out_dir = str(tmp_path_factory.mktemp("muon_fsdp"))
    model = _Heads()
    opt = StiefelMuon(model.parameters(), frame_lr=0.05, adamw_lr=1e-2)
    _train(model, opt)
    reference = {"q": model.q.detach().clone(), "multiplier": opt.state[model.q]["multiplier"]}
    mp.spawn(_worker, args=(rendezvous(out_dir), out_dir), nprocs=WORLD_SIZE, join=True)
    ranks = [torch.load(os.path.join(out_dir, f"rank{r}.pt"), weights_only=False) for r in range(WORLD_SIZE)]
    return reference, ranks


def test_frames_sharded_by_head_train_as_unsharded(runs):
    reference, ranks = runs
    for out in ranks:
        assert out["local_shape"] == (2, 8, 4)
        assert (out["q"] - reference["q"]).abs().max() < ATOL
        assert (out["multiplier"] - reference["multiplier"]).abs().max() < 1e-3
        assert orthogonality_error(out["q"]).max() < 1e-5
    assert (ranks[0]["q"] - random_stiefel(4, 8, 4, generator=torch.Generator().manual_seed(0))).abs().max() > 0.01


def test_a_sharded_muon_matrix_and_a_nan_on_one_rank_raise_on_every_rank(runs):
    _, ranks = runs
    for out in ranks:
        assert "sharded across ranks" in out["sharded_matrix"] and "role='adamw'" in out["sharded_matrix"]
        assert "not finite" in out["nan"] and out["nan_unchanged"]
