"""Cost of one optimizer step on a ViT-sized model, and drift off the manifold, measured side by side.

    python benchmarks/optimizer_step.py                # widths 256 and 512, depth 6, 4 heads
    python benchmarks/optimizer_step.py --rounds 3 --drift-steps 1000   # a quick look
    python benchmarks/optimizer_step.py --threads 1    # one core

Every optimizer steps the same parameters with the same fixed gradients. Rounds are interleaved
(A, B, C, A, B, C, ...) so that a change in machine load hits all of them alike, and each time is
the best round. Ratios are to ``torch.optim.AdamW`` (default foreach implementation) in the same
run. geoopt is optional (``pip install geoopt``); without it its column is left out.
"""

from __future__ import annotations

import argparse
import platform
import time

import torch
from torch import nn

from stiefel_mini import StiefelAdam, StiefelSelfAttention, orthogonality_error, param_groups


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


def make_model(width: int, depth: int, heads: int, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(*[Block(width, heads) for _ in range(depth)])
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-2
    return model


def build(name: str, model: nn.Module) -> torch.optim.Optimizer:
    """The optimizers under test, all at lr 1e-3 (frames at 1e-2)."""
    if name == "AdamW":
        return torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    if name == "StiefelAdam":
        return StiefelAdam(param_groups(model, weight_decay=0.1, frame_options={"lr": 1e-2}), lr=1e-3)
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


def time_steps(opt: torch.optim.Optimizer, steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.step()
    return (time.perf_counter() - t0) / steps


def bench_step(names: list[str], width: int, depth: int, heads: int, rounds: int, steps: int) -> dict[str, float]:
    opts = {name: build(name, make_model(width, depth, heads)) for name in names}
    for opt in opts.values():  # warm-up: state allocation and first-call dispatch
        time_steps(opt, 2)
    best = {name: float("inf") for name in names}
    for _ in range(rounds):
        for name, opt in opts.items():
            best[name] = min(best[name], time_steps(opt, steps))
    return best


def drift(name: str, steps: int, width: int, heads: int) -> float:
    """Largest ``||W^T W - I||_F`` over the frames of one block after ``steps`` float32 steps."""
    model = make_model(width, 1, heads, seed=1)
    opt = build(name, model)
    attn = model[0].attn
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        for p in (attn.w_q, attn.w_k):
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()
    return max(orthogonality_error(attn.w_q.data).max().item(), orthogonality_error(attn.w_k.data).max().item())


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
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    names = ["AdamW", "StiefelAdam"]
    try:
        import geoopt  # noqa: F401

        names.append("geoopt")
    except ImportError:
        print("geoopt not installed: its column is left out (pip install geoopt)")

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}")
    if not args.skip_timing:
        timing_table(names, args)
    if args.drift_steps:
        drift_table(names, args)


def timing_table(names: list[str], args: argparse.Namespace) -> None:
    print(f"one optimizer step, depth {args.depth}, {args.heads} heads, best of {args.rounds} interleaved rounds\n")
    print("| width | " + " | ".join(f"{n} (ms)" for n in names) + " | " + " | ".join(f"{n} / AdamW" for n in names[1:]) + " |")
    print("|---" * (1 + 2 * len(names) - 1) + "|")
    for width in args.widths:
        best = bench_step(names, width, args.depth, args.heads, args.rounds, args.steps)
        ms = " | ".join(f"{best[n] * 1e3:.2f}" for n in names)
        ratios = " | ".join(f"{best[n] / best['AdamW']:.2f}x" for n in names[1:])
        print(f"| {width} | {ms} | {ratios} |")


def drift_table(names: list[str], args: argparse.Namespace) -> None:
    frame_names = [n for n in names if n != "AdamW"]
    print(f"\n||W^T W - I||_F after {args.drift_steps} float32 steps with random gradients "
          f"(frames {args.widths[0]} x {args.widths[0] // args.heads}, worst of {2 * args.heads}):\n")
    print("| optimizer | drift |")
    print("|---|---|")
    for name in frame_names:
        print(f"| {name} | {drift(name, args.drift_steps, args.widths[0], args.heads):.2e} |")


if __name__ == "__main__":
    main()
