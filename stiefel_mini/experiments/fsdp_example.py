"""Train a Stiefel ViT with StiefelAdam under FSDP2, with sharded checkpoints; CPU (gloo) or GPU (nccl).

``torch.distributed.fsdp.fully_shard`` is applied to every block and then to the whole model, as
torch's FSDP2 documentation does; ``StiefelAdam(param_groups(model))`` is built afterwards,
unchanged. FSDP2 shards each parameter on dim 0, so the frames, stored
``(n_heads, d_model, d_head)``, are split between heads: each rank holds whole frames and updates
them with no communication. Checkpoints are ``torch.distributed.checkpoint`` directories written
from ``get_state_dict`` and read through ``set_state_dict``, so they load at any world size.

The data are synthetic (random images whose label is the argmax of a fixed random linear map of
their mean patch), so the example needs no download; each step's global batch is split between ranks.

    torchrun --nproc_per_node 2 -m stiefel_mini.experiments.fsdp_example --steps 20 --save ckpt
    torchrun --nproc_per_node 1 -m stiefel_mini.experiments.fsdp_example --steps 40 --resume ckpt
    python -m stiefel_mini.experiments.fsdp_example --steps 20          # one process, unsharded

On a machine with GPUs the same commands use nccl and one GPU per rank. :func:`compare_to_unsharded`
runs 2-rank CPU trainings beside unsharded ones and reports how far apart they end.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from stiefel_mini.groups import frame_parameters, param_groups
from stiefel_mini.experiments.runner import cli, parse_cli
from stiefel_mini.geometry import orthogonality_error
from stiefel_mini.optim import StiefelAdam
from stiefel_mini.vit import PatchViT

__all__ = ["FsdpConfig", "make_model", "shard", "make_optimizer", "batch", "train", "save_checkpoint", "load_checkpoint",
           "full_parameters", "compare_to_unsharded", "main"]

IMAGE_SIZE, PATCH_SIZE, N_CLASSES, DATA_SIZE = 16, 4, 10, 512


@dataclass
class FsdpConfig:
    """The command line's run: model size, steps, and the checkpoint folders (dashes or underscores)."""

    steps: int = 20  # train until this step count
    batch_size: int = 32  # global batch, split between ranks
    heads: int = 4
    d_model: int = 32
    depth: int = 2
    save: str | None = None  # write a sharded checkpoint to this folder at the end
    resume: str | None = None  # continue from the checkpoint in this folder (any world size)


def make_model(n_heads: int = 4, d_model: int = 32, depth: int = 2, seed: int = 0, device: str = "cpu") -> PatchViT:
    """The ViT with Stiefel Q/K frames ``(n_heads, d_model, 8)``, the same on every rank."""
    torch.manual_seed(seed)
    return PatchViT(image_size=IMAGE_SIZE, patch_size=PATCH_SIZE, d_model=d_model, depth=depth, n_heads=n_heads,
                    d_head=8, stiefel=True).to(device)


def shard(model: nn.Module, mesh=None) -> nn.Module:
    """``fully_shard`` every block of ``model``, then the model itself (in place); returns it."""
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def make_optimizer(model: nn.Module, lr: float = 3e-3, frame_lr: float = 0.05) -> StiefelAdam:
    """``StiefelAdam(param_groups(model))``: frames at ``frame_lr``, AdamW at ``lr`` on the rest."""
    return StiefelAdam(param_groups(model, weight_decay=0.05, frame_options={"lr": frame_lr}), lr=lr)


def batch(step: int, size: int, rank: int = 0, world: int = 1, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's rows of step ``step``'s global batch: images ``(size / world, 3, 16, 16)``, labels.

    The data set is ``DATA_SIZE`` random images (seed 0) labelled by the ``argmax`` of a fixed
    random linear map of their patch mean; a step's batch is drawn from it with a generator seeded
    by the step, so every world size sees the same global batch.
    """
    g = torch.Generator().manual_seed(0)
    x = torch.randn(DATA_SIZE, 3, IMAGE_SIZE, IMAGE_SIZE, generator=g)
    teacher = torch.randn(3 * PATCH_SIZE * PATCH_SIZE, N_CLASSES, generator=g)
    patches = x.unfold(2, PATCH_SIZE, PATCH_SIZE).unfold(3, PATCH_SIZE, PATCH_SIZE)  # (N, 3, 4, 4, p, p)
    y = (patches.mean(dim=(2, 3)).flatten(1) @ teacher).argmax(dim=1)
    idx = torch.randint(0, DATA_SIZE, (size,), generator=torch.Generator().manual_seed(10_000 + step))
    rows = idx[rank * size // world:(rank + 1) * size // world]
    return x[rows].to(device), y[rows].to(device)


def train(model: nn.Module, opt: torch.optim.Optimizer, steps: range, batch_size: int = 32, rank: int = 0,
          world: int = 1, device: str = "cpu") -> list[float]:
    """Train on the steps ``steps`` of the synthetic stream; returns this rank's loss at each step.

    Each rank's loss is the mean over its rows; FSDP averages the gradients over ranks, which is the
    gradient of the mean over the global batch when ``world`` divides ``batch_size``.
    """
    losses = []
    for step in steps:
        x, y = batch(step, batch_size, rank, world, device)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def save_checkpoint(path: str, model: nn.Module, opt: torch.optim.Optimizer, step: int) -> None:
    """Write model, optimizer and the step count to the ``torch.distributed.checkpoint`` folder ``path``."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(model, opt)
    with _one_process_is_intended():
        dcp.save({"model": model_sd, "optim": optim_sd, "step": torch.tensor(step)}, checkpoint_id=path)


def load_checkpoint(path: str, model: nn.Module, opt: torch.optim.Optimizer) -> int:
    """Load what :func:`save_checkpoint` wrote, at any world size, into ``model`` and ``opt``; returns the step."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    # get_state_dict gives the layout to load into (on a fresh optimizer it first creates the state).
    model_sd, optim_sd = get_state_dict(model, opt)
    state = {"model": model_sd, "optim": optim_sd, "step": torch.tensor(0)}
    with _one_process_is_intended():
        dcp.load(state, checkpoint_id=path)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return int(state["step"])


@contextlib.contextmanager
def _one_process_is_intended():
    """Without a process group, ``torch.distributed.checkpoint`` warns that it assumes a single
    process; here that is the intent (a checkpoint written or read at world size 1)."""
    with warnings.catch_warnings():
        if not dist.is_initialized():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def full_parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter as a whole tensor on the CPU (gathered from all ranks when sharded: a collective)."""
    return {name: (p.full_tensor() if hasattr(p, "full_tensor") else p.detach()).cpu().clone()
            for name, p in model.named_parameters()}


def _frame_names(model: nn.Module) -> list[str]:
    frames = {id(p) for p in frame_parameters(model)}
    return [name for name, p in model.named_parameters() if id(p) in frames]


def _init_distributed() -> tuple[int, int, str, Any]:
    """Rank, world size, device and a 1-D device mesh; joins the process group torchrun describes."""
    from torch.distributed.device_mesh import init_device_mesh

    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend, timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", rank % torch.cuda.device_count()))
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    else:
        device = "cpu"
    return rank, world, device, init_device_mesh(torch.device(device).type, (world,))


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The CLI (see the module docstring); returns rank 0's losses and the frames' orthogonality error."""
    args, _, _ = parse_cli(FsdpConfig, list(sys.argv[1:] if argv is None else argv),
                           usage="torchrun --nproc_per_node N -m stiefel_mini.experiments.fsdp_example [--field value ...]")
    distributed = "WORLD_SIZE" in os.environ or dist.is_initialized()
    rank, world, device, mesh = _init_distributed() if distributed else (0, 1, "cpu", None)
    model = make_model(args.heads, args.d_model, args.depth, device=device)
    if distributed:
        shard(model, mesh)
    opt = make_optimizer(model)
    start = load_checkpoint(args.resume, model, opt) if args.resume else 0
    losses = train(model, opt, range(start, args.steps), args.batch_size, rank, world, device)
    if args.save:
        save_checkpoint(args.save, model, opt, args.steps)
    params = full_parameters(model)
    err = max(orthogonality_error(params[name]).max().item() for name in _frame_names(model))
    if rank == 0:
        for step, loss in zip(range(start, args.steps), losses):
            if step % 5 == 0 or step == args.steps - 1:
                print(f"step {step:4d}  loss (rank 0's rows) {loss:.4f}")
        print(f"{world} rank(s) on {device}; max ||W^T W - I||_F over the frames: {err:.1e}")
    return {"losses": losses, "orthogonality_error": err, "world_size": world}


def _compare_worker(rank: int, world: int, folder: str, heads: tuple[int, ...], steps: int, resume_at: int) -> None:
    torch.set_num_threads(1)
    # The rendezvous is a file in the run's own folder: a TCP port found free can be taken by another
    # process before the group binds it.
    init = Path(folder, "rendezvous").resolve().as_uri()
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world, timeout=timedelta(seconds=120))
    try:
        out = {}
        for n_heads in heads:
            ckpt = os.path.join(folder, f"ckpt_h{n_heads}")
            model = shard(make_model(n_heads))
            opt = make_optimizer(model)
            train(model, opt, range(resume_at), rank=rank, world=world)
            save_checkpoint(ckpt, model, opt, resume_at)
            train(model, opt, range(resume_at, steps), rank=rank, world=world)
            local = tuple(next(frame_parameters(model)).to_local().shape)
            final = full_parameters(model)
            model = shard(make_model(n_heads))
            opt = make_optimizer(model)
            start = load_checkpoint(ckpt, model, opt)
            train(model, opt, range(start, steps), rank=rank, world=world)
            out[n_heads] = {"final": final, "resumed": full_parameters(model), "local_shape": local}
        if rank == 0:
            torch.save(out, os.path.join(folder, "sharded.pt"))
    finally:
        dist.destroy_process_group()


def compare_to_unsharded(heads: Sequence[int] = (4, 3), world: int = 2, steps: int = 6,
                         resume_at: int = 3) -> list[dict[str, Any]]:
    """Train the ViT on ``world`` CPU ranks (gloo, FSDP2) and in this process unsharded; compare.

    For each head count in ``heads``, the sharded run writes a checkpoint at ``resume_at``,
    continues to ``steps``, and is resumed from the checkpoint in the same processes at the same
    world size; this process loads the same checkpoint unsharded (world size 1) and continues too.
    Returns per head count the largest difference of any parameter between the sharded and the
    unsharded run (``max_abs_diff``), whether the resumed run equals the uninterrupted one bit for
    bit (``resume_exact``), the largest difference of the 1-rank continuation from the unsharded
    run (``reshard_max_abs_diff``), the largest ``||W^T W - I||_F`` of the sharded run's frames and
    the shape of rank 0's shard of the first frame (``local_shape``).
    """
    import torch.multiprocessing as mp

    heads = tuple(heads)

    def max_diff(a: dict, b: dict) -> float:
        return max((a[k].double() - b[k].double()).abs().max().item() for k in a)

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(_compare_worker, args=(world, folder, heads, steps, resume_at), nprocs=world)
        sharded = torch.load(os.path.join(folder, "sharded.pt"), weights_only=True)
        for n_heads in heads:
            model = make_model(n_heads)
            opt = make_optimizer(model)
            train(model, opt, range(steps))
            reference = full_parameters(model)
            model = make_model(n_heads)
            opt = make_optimizer(model)
            start = load_checkpoint(os.path.join(folder, f"ckpt_h{n_heads}"), model, opt)
            train(model, opt, range(start, steps))
            run = sharded[n_heads]
            rows.append({
                "n_heads": n_heads, "world_size": world, "steps": steps, "local_shape": run["local_shape"],
                "max_abs_diff": max_diff(run["final"], reference),
                "resume_exact": all(torch.equal(run["final"][k], run["resumed"][k]) for k in reference),
                "reshard_max_abs_diff": max_diff(full_parameters(model), reference),
                "orthogonality_error": max(orthogonality_error(run["final"][k]).max().item()
                                           for k in _frame_names(model)),
            })
    return rows


if __name__ == "__main__":
    cli(main)
