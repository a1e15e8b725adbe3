"""Cost of one optimizer step on a ViT-sized model, and drift off the manifold, measured side by side.

    python benchmarks/optimizer_step.py --threads 2    # widths 256 and 512, depth 6, 4 heads
    python benchmarks/optimizer_step.py --rounds 3 --drift-steps 1000   # a quick look
    python benchmarks/optimizer_step.py --device cuda --widths 256 512 1024 --dtype bfloat16

Every optimizer steps the same parameters with the same fixed gradients. Rounds are interleaved
(A, B, C, A, B, C, ...) so that a change in machine load hits all of them alike; each time is the
best round, and each ratio between two optimizers is the median over rounds of the ratio of their
times in that round, with its range over rounds in brackets (a paired comparison: a slow round
slows both). Ratios in the time columns are to ``torch.optim.AdamW`` (torch's default
implementation) in the same run. Columns:

* ``AdamW``: ``torch.optim.AdamW`` on every parameter, frames included;
* ``StiefelAdam``: the Q/K frames in one ``stiefel=True`` group, AdamW on the rest;
* ``POGO``: ``pogo.POGO`` with ``VectorAdam`` (pogo-torch) on the frames, AdamW on the rest;
* ``geoopt``: ``geoopt.optim.RiemannianAdam`` with the frames on ``geoopt.Stiefel()``;
* ``floor``: AdamW's step plus the five batched products of the frame shape that the frame rule
  needs (``W^T G``, ``W^T M``, ``W S``, ``Y^T Y``, ``Y Z``), the arithmetic no implementation of
  the rule can skip.

POGO and geoopt are optional (``pip install -e '.[bench]'``); a missing one's column is left out.
``--out PATH`` also writes every round's time, the drift table and the run's provenance (command,
commit, versions, device, threads) to a JSON file; the "Which tool should I use?" chapter reads
``results/benchmarks/optimizer_step.json``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import platform
import time
from typing import Callable

import torch
from torch import nn

from stiefel_mini import StiefelAdam, StiefelSelfAttention, orthogonality_error, param_groups
from stiefel_mini.experiments import stats
from stiefel_mini.experiments.records import provenance, save_results


class Block(nn.Module):
    """A pre-norm transformer block: attention and a 4x MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = StiefelSelfAttention(width, heads)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def make_model(
    width: int, depth: int, heads: int, seed: int = 0, device: str = "cpu", dtype: torch.dtype = torch.float32
) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(*[Block(width, heads) for _ in range(depth)]).to(device=device, dtype=dtype)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-2
    return model


def frames_of(model: nn.Module) -> list[nn.Parameter]:
    return [p for m in model.modules() if isinstance(m, StiefelSelfAttention) for p in (m.w_q, m.w_k)]


class Combined:
    """Two optimizers stepped as one: a frame optimizer and AdamW on the other parameters."""

    def __init__(self, *opts: torch.optim.Optimizer) -> None:
        self.opts = opts

    def step(self) -> None:
        for opt in self.opts:
            opt.step()


class Floor:
    """AdamW's step plus the five batched frame-shaped products: the cost floor of the frame rule."""

    def __init__(self, model: nn.Module) -> None:
        self.adamw = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
        W = torch.cat([p.detach().reshape(-1, *p.shape[-2:]) for p in frames_of(model)])  # (B, n, p)
        self.W, self.G = W.clone(), W.clone()
        k = W.shape[-1]
        self.A = W.new_empty(W.shape[0], k, k)  # (B, p, p)
        self.Y = torch.empty_like(W)  # (B, n, p)

    def step(self) -> None:
        self.adamw.step()
        W, G, A, Y = self.W, self.G, self.A, self.Y
        torch.bmm(W.mT, G, out=A)  # W^T G
        torch.bmm(W.mT, G, out=A)  # W^T M
        torch.bmm(W, A, out=Y)  # W S
        torch.bmm(Y.mT, Y, out=A)  # Y^T Y
        torch.bmm(Y, A, out=Y)  # Y Z


def build(name: str, model: nn.Module) -> torch.optim.Optimizer:
    """The optimizers under test, all at lr 1e-3 (frames at 1e-2)."""
    if name == "AdamW":
        return torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    if name == "StiefelAdam":
        return StiefelAdam(param_groups(model, weight_decay=0.1, frame_options={"lr": 1e-2}), lr=1e-3)
    if name == "floor":
        return Floor(model)
    if name == "POGO":
        from pogo import POGO
        from pogo.base import VectorAdam

        frames = frames_of(model)
        ids = {id(p) for p in frames}
        rest = [p for p in model.parameters() if id(p) not in ids]
        # POGO wants row-orthonormal (batch, p, n) frames: ours are (heads, n, p) column frames.
        pogo = POGO(frames, base_optimizer=VectorAdam(), lr=1e-2, rows=False)
        return Combined(pogo, torch.optim.AdamW(rest, lr=1e-3, weight_decay=0.1))
    if name == "geoopt":
        import geoopt

        stiefel = geoopt.Stiefel()
        frames = []
        for m in model.modules():
            if isinstance(m, StiefelSelfAttention):
                for attr in ("w_q", "w_k"):
                    p = getattr(m, attr)
                    mp = geoopt.ManifoldParameter(p.data, manifold=stiefel)
                    mp.grad = p.grad
                    setattr(m, attr, mp)
                    frames.append(mp)
        ids = {id(p) for p in frames}
        rest = [p for p in model.parameters() if id(p) not in ids]
        return geoopt.optim.RiemannianAdam(
            [{"params": frames, "lr": 1e-2, "weight_decay": 0.0}, {"params": rest, "weight_decay": 0.1}],
            lr=1e-3,
        )
    raise ValueError(name)


def sync(device: str) -> None:
    """Wait for queued GPU work, so that wall-clock times cover it."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(opt: torch.optim.Optimizer, steps: int, device: str) -> float:
    sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.step()
    sync(device)
    return (time.perf_counter() - t0) / steps


def bench_step(names: list[str], width: int, args: argparse.Namespace) -> dict[str, list[float]]:
    """Seconds per step of each optimizer, one entry per interleaved round."""
    dtype = getattr(torch, args.dtype)
    opts = {name: build(name, make_model(width, args.depth, args.heads, device=args.device, dtype=dtype))
            for name in names}
    for opt in opts.values():  # warm-up: state allocation and first-call dispatch
        time_steps(opt, 3, args.device)
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(args.rounds):
        for name, opt in opts.items():
            times[name].append(time_steps(opt, args.steps, args.device))
    return times


def drift(name: str, steps: int, width: int, heads: int, device: str) -> tuple[float, float]:
    """Largest ``||W^T W - I||_F`` over the frames of one block after ``steps`` float32 steps,
    evaluated in float64 (the frames' own error) and in float32 (whose rounding of the Gram matrix
    alone is of order 1e-6 for 256 x 64 frames, so it cannot show a smaller error)."""
    model = make_model(width, 1, heads, seed=1, device=device)
    opt = build(name, model)
    attn = model[0].attn
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        for p in (attn.w_q, attn.w_k):
            p.grad = torch.randn(p.shape, generator=gen).to(device)
        opt.step()
    frames = (attn.w_q.detach(), attn.w_k.detach())
    return tuple(max(orthogonality_error(W.to(dtype)).max().item() for W in frames)
                 for dtype in (torch.float64, torch.float32))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--widths", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=10, help="steps per timed round")
    ap.add_argument("--drift-steps", type=int, default=10_000, help="0 skips the drift table")
    ap.add_argument("--skip-timing", action="store_true", help="only the drift table")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="parameter dtype")
    ap.add_argument("--no-others", action="store_true",
                    help="leave out POGO and geoopt (only AdamW, StiefelAdam and the floor)")
    ap.add_argument("--out", default=None, help="also write the measurements and their provenance to this JSON file")
    args = ap.parse_args(argv)
    for width in args.widths:
        if width % args.heads:
            ap.error(f"--widths {width} is not a multiple of --heads {args.heads}: each head's frame has "
                     "width / heads columns; pick widths that the number of heads divides")
    if args.threads:
        torch.set_num_threads(args.threads)

    names = ["AdamW", "StiefelAdam"]
    for name, module in (("POGO", "pogo"), ("geoopt", "geoopt")) if not args.no_others else ():
        if importlib.util.find_spec(module) is None:
            print(f"{module} not installed: the {name} column is left out (pip install -e '.[bench]')")
        else:
            names.append(name)
    names.append("floor")

    where = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else (
        f"{torch.get_num_threads()} threads, {platform.processor() or platform.machine()}")
    print(f"torch {torch.__version__}, {args.device} ({where}), {args.dtype}")
    record = {
        "provenance": provenance(device=args.device),
        "settings": {k: getattr(args, k) for k in ("widths", "depth", "heads", "rounds", "steps", "dtype")}
        | {"threads": torch.get_num_threads()},
        "packages": {name: package_version(module) for name, module in (("POGO", "pogo-torch"), ("geoopt", "geoopt"))
                     if name in names},
        "timing": [],
        "drift": None,
    }

    def save() -> None:  # after every table row, so that an interrupted run keeps what it measured
        if args.out:
            save_results(args.out, record)

    if not args.skip_timing:
        timing_table(names, args, record["timing"], save)
    if args.drift_steps:
        frames = [2 * args.heads, args.widths[0], args.widths[0] // args.heads]  # (B, n, p) of one block
        record["drift"] = {"steps": args.drift_steps, "frames": frames, "rows": []}
        drift_table(names, args, record["drift"]["rows"], save)


def package_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def timing_table(names: list[str], args: argparse.Namespace, rows: list, save: Callable[[], None]) -> None:
    others = [n for n in names if n not in ("AdamW", "StiefelAdam", "floor")]
    print(f"one optimizer step, depth {args.depth}, {args.heads} heads, {args.rounds} interleaved rounds of "
          f"{args.steps} steps; ms (best round), and in brackets the ratio to AdamW; the last columns: median "
          "over rounds of the per-round ratio, and its range\n")
    print("| " + " | ".join(["width", *names, "StiefelAdam / floor", *(f"{n} / StiefelAdam" for n in others)]) + " |")
    print("|---" * (1 + len(names) + 1 + len(others)) + "|")
    for width in args.widths:
        times = bench_step(names, width, args)
        rows.append({"width": width, "seconds_per_step": times})
        save()
        best = {n: min(t) for n, t in times.items()}
        ms = " | ".join(f"{best[n] * 1e3:.2f} ({best[n] / best['AdamW']:.2f}x)" for n in names)
        vs = " | ".join(stats.paired_ratio_text(times[n], times["StiefelAdam"]) for n in others)
        cells = [str(width), ms, stats.paired_ratio_text(times["StiefelAdam"], times["floor"]), *([vs] if others else [])]
        print("| " + " | ".join(cells) + " |", flush=True)


def drift_table(names: list[str], args: argparse.Namespace, rows: list, save: Callable[[], None]) -> None:
    frame_names = [n for n in names if n not in ("AdamW", "floor")]
    print(f"\n||W^T W - I||_F after {args.drift_steps} float32 steps with random gradients "
          f"(frames {args.widths[0]} x {args.widths[0] // args.heads}, worst of {2 * args.heads}):\n")
    print("| optimizer | evaluated in float64 | evaluated in float32 |")
    print("|---|---|---|")
    for name in frame_names:
        e64, e32 = drift(name, args.drift_steps, args.widths[0], args.heads, args.device)
        rows.append({"optimizer": name, "float64": e64, "float32": e32})
        save()
        print(f"| {name} | {e64:.2e} | {e32:.2e} |")


if __name__ == "__main__":
    main()
