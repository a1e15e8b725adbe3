"""DistributedDataParallel with Stiefel frames: 2 CPU processes on the gloo backend.

DDP all-reduces (averages) gradients before ``StiefelAdam.step``, so every rank applies the same
Riemannian update to the same frame and the frames stay identical without any extra
synchronisation. This test trains a converted model for a few steps on different data per rank
and checks exactly that, plus that the frames stay on the manifold.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from stiefel_mini.groups import frame_parameters, param_groups
from stiefel_mini.geometry import orthogonality_error
from stiefel_mini.convert import convert_attention
from stiefel_mini.optim import StiefelAdam
from tests.rendezvous import rendezvous

WORLD_SIZE, STEPS = 2, 4


class _Tiny(nn.Module):
    """A one-block encoder with an ``nn.MultiheadAttention`` to convert."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.attn(x, x, x, need_weights=False)
        return self.head((x + y).mean(dim=1))  # (B, 3)


def _worker(rank: int, init: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD_SIZE)
    try:
        torch.manual_seed(0)  # same initial model on every rank (DDP also broadcasts rank 0's)
        model = _Tiny()
        report = convert_attention(model)
        ddp = nn.parallel.DistributedDataParallel(model)
        opt = StiefelAdam(param_groups(model, weight_decay=0.05, frame_options={"lr": 0.05}), lr=1e-2)
        g = torch.Generator().manual_seed(100 + rank)  # different data on each rank
        for _ in range(STEPS):
            x, y = torch.randn(8, 5, 16, generator=g), torch.randint(0, 3, (8,), generator=g)
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(ddp(x), y).backward()
            opt.step()
        frames = [p.detach().clone() for p in frame_parameters(model)]
        torch.save({"frames": frames, "report": str(report) if rank == 0 else ""}, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed with gloo is not available")
def test_ddp_two_cpu_ranks_keep_identical_frames_on_the_manifold():
    with tempfile.TemporaryDirectory() as out_dir:
        mp.spawn(_worker, args=(rendezvous(out_dir), out_dir), nprocs=WORLD_SIZE, join=True)
        results = [torch.load(os.path.join(out_dir, f"rank{r}.pt"), weights_only=True) for r in range(WORLD_SIZE)]
    frames0, frames1 = results[0]["frames"], results[1]["frames"]
    assert len(frames0) == 2  # q_weight and k_weight, (4, 4, 16) each
    torch.manual_seed(0)
    initial = _Tiny()
    convert_attention(initial)
    for a, b, w0 in zip(frames0, frames1, frame_parameters(initial)):
        assert torch.equal(a, b), "frames differ between ranks"
        assert not torch.equal(a, w0.detach()), "frames did not train"
        err = orthogonality_error(a).max().item()
        assert err < 1e-5, f"off the manifold: {err:.2e}"
        print(f"frame {tuple(a.shape)}: identical on {WORLD_SIZE} ranks, max ||W W^T - I||_F = {err:.1e}")


def test_importing_the_library_leaves_dtensor_unloaded_and_a_later_dtensor_is_still_recognised():
    code = ("import sys, stiefel_mini; from stiefel_mini import _distributed as d; import torch; "
            "assert 'torch.distributed.tensor' not in sys.modules; assert not d.is_dtensor(torch.ones(1)); "
            "from torch.distributed.tensor import DTensor; "
            "fake = torch.Tensor._make_subclass(DTensor, torch.ones(1)); assert d.is_dtensor(fake)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.path.dirname(os.path.dirname(__file__)))
