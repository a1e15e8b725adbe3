"""The frame rule's time per rank under FSDP2: world size 1 and N side by side, in one run.

    torchrun --nproc_per_node 2 benchmarks/fsdp_step.py --threads 1          # CPU, gloo; widths 256 and 512
    torchrun --nproc_per_node 2 benchmarks/fsdp_step.py --device cuda --widths 1024 2048 --depth 12   # GPUs, nccl

Every rank builds the ViT (:class:`stiefel_mini.vit.PatchViT`, Stiefel Q/K frames) twice from the
same seed: an unsharded copy, on which it does what one process does at world size 1 (every
frame), and a copy sharded with ``fully_shard`` (per block, then the root) over all ranks, on which
it updates only the heads of its shard. Each copy gets its gradients from one forward and backward
pass; then the ranks time, in interleaved rounds that start together (a barrier), ``step()`` of

* ``frame rule``: ``StiefelAdam`` on the frame group alone (its one collective, the all-reduced
  check of the step, included);
* ``its check alone``: that all-reduce of one integer, the latency a sharded frame step adds;
* ``StiefelAdam``: ``StiefelAdam(param_groups(model))``, frames and AdamW on everything else;
* ``AdamW``: ``torch.optim.AdamW`` (torch's default implementation) on the other parameters, the
  groups StiefelAdam hands to AdamW: on DTensors its cost includes DTensor's dispatch of every
  operation, which no sharding halves.

Both copies are stepped on every rank at the same time, so the machine is equally loaded for both.
Times are the best round per rank; the ratio ``sharded / unsharded`` is the median over rounds of
the ratio within a round, with its range. Frames are updated with no communication besides the
check, so the frame rule's ratio should be about ``1 / N`` (each rank holds ``1 / N`` of the heads)
plus the check's share.
``--out PATH`` writes every round's time, the run's provenance and the load it ran under (each rank's
:class:`~stiefel_mini.experiments.machine_load.LoadMeter`, combined: the CPU of all ranks is the benchmark's) to
a JSON file.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F

from stiefel_mini import StiefelAdam, param_groups
from stiefel_mini._distributed import all_true
from stiefel_mini.experiments import stats
from stiefel_mini.experiments.machine_load import LoadMeter
from stiefel_mini.experiments.records import provenance, save_results
from stiefel_mini.vit import PatchViT


def make_model(width: int, args: argparse.Namespace, device: str) -> PatchViT:
    torch.manual_seed(0)
    return PatchViT(image_size=32, patch_size=8, d_model=width, depth=args.depth, n_heads=args.heads,
                    stiefel=True).to(device)


def shard(model: PatchViT, mesh) -> PatchViT:
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def backward(model: PatchViT, device: str, rank: int) -> None:
    """Gradients from one forward and backward pass over 8 random images (seeded by the rank)."""
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(8, 3, 32, 32, generator=g), torch.randint(0, 10, (8,), generator=g)
    F.cross_entropy(model(x.to(device)), y.to(device)).backward()


def optimizers(model: PatchViT) -> dict[str, torch.optim.Optimizer]:
    def groups():
        return param_groups(model, weight_decay=0.05, frame_options={"lr": 1e-2})

    return {"frame rule": StiefelAdam([g for g in groups() if g.get("stiefel")], lr=1e-3),
            "StiefelAdam": StiefelAdam(groups(), lr=1e-3),
            "AdamW": torch.optim.AdamW([g for g in groups() if not g.get("stiefel")], lr=1e-3)}


class Check:
    """The one collective of a sharded frame step alone: the all-reduced "every frame took its step"."""

    def __init__(self, mesh) -> None:
        self.mesh = mesh

    def step(self) -> None:
        all_true(torch.tensor(True), self.mesh)


def sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(opt: torch.optim.Optimizer, steps: int, device: str) -> float:
    """Seconds per ``step()``, the ranks starting together."""
    sync(device)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.step()
    sync(device)
    return (time.perf_counter() - t0) / steps


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--widths", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=10, help="steps per timed round")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per rank (0: torch's default)")
    ap.add_argument("--device", default="cpu", help="cpu (gloo) or cuda (nccl, one GPU per rank)")
    ap.add_argument("--out", default=None, help="also write the measurements and their provenance to this JSON file")
    args = ap.parse_args(argv)
    if "WORLD_SIZE" not in os.environ:
        ap.error("launch it with torchrun, e.g. torchrun --nproc_per_node 2 benchmarks/fsdp_step.py")
    for width in args.widths:
        if width % args.heads:
            ap.error(f"--widths {width} is not a multiple of --heads {args.heads}")
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = args.device.startswith("cuda")
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=300))
    try:
        return run(args, cuda)
    finally:
        dist.destroy_process_group()


def run(args: argparse.Namespace, cuda: bool) -> dict:
    from torch.distributed.device_mesh import init_device_mesh

    rank, world = dist.get_rank(), dist.get_world_size()
    device = "cpu"
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    mesh = init_device_mesh(torch.device(device).type, (world,))
    record = {
        "provenance": provenance(device=device),
        "settings": {k: getattr(args, k) for k in ("widths", "depth", "heads", "rounds", "steps", "device")}
        | {"threads": torch.get_num_threads(), "world_size": world},
        "timing": [],  # per width: seconds per step, per rank, per round
    }
    if rank == 0:
        where = torch.cuda.get_device_name(device) if cuda else (
            f"{torch.get_num_threads()} thread(s) per rank, {platform.processor() or platform.machine()}")
        print(f"torch {torch.__version__}, {world} ranks on {args.device} ({where}); ViT depth {args.depth}, "
              f"{args.heads} heads ({2 * args.depth} frame tensors of {args.heads} heads); {args.rounds} "
              f"interleaved rounds of {args.steps} steps; best round per rank, and the median over rounds of "
              "the per-round ratio with its range\n")
        print(f"| width | rank | step | world size 1, ms | world size {world}, ms | ratio {world} / 1 |")
        print("|---|---|---|---|---|---|")
    with LoadMeter() as meter:
        for width in args.widths:
            everyone = [None] * world
            dist.all_gather_object(everyone, time_width(width, args, device, rank, mesh))
            record["timing"].append({"width": width, "seconds_per_step": everyone})
            if rank != 0:
                continue
            for r, t in enumerate(everyone):
                for what in ("frame rule", "StiefelAdam", "AdamW"):
                    one, many = t[f"{what}/unsharded"], t[f"{what}/sharded"]
                    print(f"| {width} | {r} | {what} | {min(one) * 1e3:.2f} | {min(many) * 1e3:.2f} | "
                          f"{stats.paired_ratio_text(many, one)} |", flush=True)
                print(f"| {width} | {r} | its check alone | | {min(t['check/sharded']) * 1e3:.2f} | |", flush=True)
            if args.out:
                save_results(args.out, record)
    loads = [None] * world
    dist.all_gather_object(loads, meter.record)
    record["load"] = ranks_load(loads)
    if rank == 0 and args.out:
        save_results(args.out, record)
    return record


def ranks_load(loads: list[dict]) -> dict:
    """The load of the whole run from each rank's :class:`LoadMeter` record: rank 0's, with the CPU
    of every rank as the benchmark's and the rest of the machine's CPU without the other ranks."""
    ours = sum(load["process_cores"] for load in loads)
    other = loads[0]["other_cores"]
    if other is not None:
        other = round(max(0.0, other - (ours - loads[0]["process_cores"])), 2)
    return {**loads[0], "process_cores": round(ours, 2), "other_cores": other}


def time_width(width: int, args: argparse.Namespace, device: str, rank: int, mesh) -> dict[str, list[float]]:
    """This rank's seconds per step of each optimizer on each copy, one entry per round."""
    copies = {"unsharded": make_model(width, args, device), "sharded": shard(make_model(width, args, device), mesh)}
    opts = {}
    for name, model in copies.items():
        backward(model, device, rank)
        for what, opt in optimizers(model).items():
            opts[f"{what}/{name}"] = opt
    opts["check/sharded"] = Check(mesh)
    for opt in opts.values():  # warm-up: state allocation and first-call dispatch
        time_steps(opt, 2, device)
    times: dict[str, list[float]] = {key: [] for key in opts}
    for _ in range(args.rounds):
        for key, opt in opts.items():
            times[key].append(time_steps(opt, args.steps, device))
    return times


if __name__ == "__main__":
    main()
