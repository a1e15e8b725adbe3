"""Manifold Muon's frame rule against plain Muon on the same matrices, and StiefelMuon's whole step on a
converted GPT-2 against Muon + AdamW on the unconverted one, side by side in one run.

    python benchmarks/muon_step.py --threads 1
    python benchmarks/muon_step.py --threads 1 --frames 4 --rounds 3 --model_rounds 2   # a quick look

**Frame rule.** ``--frames`` frames of GPT-2 small's shape ``(12, 768, 64)`` (12 layers x Q, K: 24) walk
along a training-like sequence of gradients: each step's gradient is the last one plus a fresh random
part of half its size, averaged into Nesterov momentum as StiefelMuon does. Per step: the **frame
rule** (:func:`~stiefel_mini.manifold_muon.manifold_muon_update`, warm-started from the last step's
multiplier, then :func:`~stiefel_mini.manifold_muon.polar_gram`) against **plain Muon**'s step on the
same momentum matrices (:func:`~stiefel_mini.muon.muon_update`: Newton-Schulz and the scale), in
interleaved rounds; a ratio is the median over rounds of the per-round ratio, with its range. Its
accuracy: ``<G, A>`` of the warm-started step over that of the fully converged solve (``tol=1e-8``,
500 iterations) on the same frame and momentum, and the iterations a step takes with and without
the warm start. Targets (issue 54): at most 3x plain Muon's step, within 1% of the converged ``<G, A>``.

**Whole step.** GPT-2 small (124M, ``GPT2Config()``, random weights, fixed random gradients): one
``StiefelMuon`` step on the converted model (frames: manifold Muon; other matrices: Muon; embeddings
and vectors: AdamW) against ``StiefelMuon`` on the unconverted model, which is Muon on its matrices (Q,
K and V each whole, as the Muon recipe) and AdamW on the rest. Target: at most 1.15x.
``--out PATH`` writes the times, the accuracy and the provenance.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import time

import torch

from stiefel_mini import StiefelMuon, convert_attention, mark_adamw_params
from stiefel_mini.experiments import stats
from stiefel_mini.experiments.records import provenance, save_results
from stiefel_mini.geometry import random_stiefel
from stiefel_mini.manifold_muon import manifold_muon_update, polar_gram
from stiefel_mini.muon import muon_update


class FrameWalk:
    """Frames, their momentum and multiplier, and a gradient that drifts from step to step."""

    def __init__(self, frames: int, heads: int, n: int, p: int, momentum: float = 0.95, seed: int = 0) -> None:
        self.g = torch.Generator().manual_seed(seed)
        self.W = random_stiefel(frames * heads, n, p, generator=self.g)  # (F * H, n, p)
        self.G = torch.randn(self.W.shape, generator=self.g)
        self.buf = torch.zeros_like(self.W)
        self.mu, self.multiplier = momentum, None

    def direction(self) -> torch.Tensor:
        """The next step's Nesterov direction (the gradient drifts by a fresh part of half its size)."""
        self.G = self.G + 0.5 * torch.randn(self.W.shape, generator=self.g)
        self.buf.lerp_(self.G, 1 - self.mu)
        return self.G.lerp(self.buf, self.mu)

    def frame_step(self, U: torch.Tensor, lr: float, warm: bool = True) -> int:
        A, mult, iterations = manifold_muon_update(self.W, U, lr, multiplier=self.multiplier if warm else None)
        self.multiplier = mult
        self.W = polar_gram(self.W + A)
        return iterations


def frame_rule(args) -> dict:
    """Times of the frame rule and of plain Muon per step, the <G, A> ratio, the iterations."""
    walk = FrameWalk(args.frames, 12, 768, 64)
    for _ in range(3):  # warm-up: the multiplier settles, first-call allocations
        walk.frame_step(walk.direction(), args.frame_lr)
    times: dict[str, list[float]] = {"frame rule": [], "plain Muon": []}
    iterations, cold, accuracy = [], [], []
    for r in range(args.rounds):
        U = walk.direction()
        for name in ("frame rule", "plain Muon") if r % 2 == 0 else ("plain Muon", "frame rule"):
            t0 = time.perf_counter()
            if name == "plain Muon":
                muon_update(U, args.frame_lr)
            else:
                W0, m0 = walk.W, walk.multiplier
                iterations.append(walk.frame_step(U, args.frame_lr))
            times[name].append(time.perf_counter() - t0)
        A, _, _ = manifold_muon_update(W0, U, args.frame_lr, multiplier=m0)
        A_star, _, _ = manifold_muon_update(W0, U, args.frame_lr, tol=1e-8, max_iter=500)
        accuracy += ((U * A).sum((-2, -1)) / (U * A_star).sum((-2, -1))).tolist()
        cold.append(manifold_muon_update(W0, U, args.frame_lr).iterations)
    return {"seconds": times, "iterations_warm": iterations, "iterations_cold": cold,
            "objective_over_converged": {"min": min(accuracy), "mean": sum(accuracy) / len(accuracy)}}


def gpt2_small(converted: bool):
    """GPT-2 small with fixed random gradients and its StiefelMuon (converted: frames; else Q|K|V whole)."""
    import transformers

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config())
    if converted:
        convert_attention(model)
    else:
        mark_adamw_params(model)
    g = torch.Generator().manual_seed(1)
    for p in model.parameters():
        p.grad = 1e-3 * torch.randn(p.shape, generator=g)
    qkv = [m.weight for name, m in model.named_modules() if name.endswith("attn.c_attn") and not converted]
    rest = [p for p in model.parameters() if all(p is not q for q in qkv)]
    groups = [{"params": rest}] + ([{"params": qkv, "heads": 1, "fused": 3}] if qkv else [])
    return StiefelMuon(groups, lr=0.02, frame_lr=0.02, adamw_lr=3e-4, in_out=True)


def whole_step(args) -> dict:
    opts = {"converted": gpt2_small(True), "unconverted": gpt2_small(False)}
    for opt in opts.values():
        opt.step()  # warm-up: state, multipliers
    times: dict[str, list[float]] = {k: [] for k in opts}
    for r in range(args.model_rounds):
        for k in opts if r % 2 == 0 else list(opts)[::-1]:
            t0 = time.perf_counter()
            opts[k].step()
            times[k].append(time.perf_counter() - t0)
    return {"seconds": times}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=24, help="frames of shape (12, 768, 64)")
    ap.add_argument("--frame_lr", type=float, default=0.02)
    ap.add_argument("--rounds", type=int, default=11, help="interleaved rounds of the frame rule")
    ap.add_argument("--model_rounds", type=int, default=5, help="interleaved rounds of the GPT-2 small step")
    ap.add_argument("--skip_model", action="store_true", help="only the frame rule")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--out", default=None, help="also write the results and their provenance to this JSON file")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    record = {"settings": vars(args), "provenance": provenance(), "load_average": list(os.getloadavg()),
              "packages": {"transformers": importlib.metadata.version("transformers")}}
    f = record["frame_rule"] = frame_rule(args)
    s = f["seconds"]
    print(f"{args.frames} frames (12, 768, 64), frame lr {args.frame_lr}, {torch.get_num_threads()} thread(s), "
          f"load average {record['load_average'][0]:.1f}; ms per step, best of {args.rounds} rounds\n")
    print("| frame rule | plain Muon | frame rule / plain Muon | <G, A> / converged (min, mean) "
          "| iterations warm / cold (mean) |")
    print("|---|---|---|---|---|")
    o = f["objective_over_converged"]
    print(f"| {1e3 * min(s['frame rule']):.1f} | {1e3 * min(s['plain Muon']):.1f} | "
          f"{stats.paired_ratio_text(s['frame rule'], s['plain Muon'])} | {o['min']:.4f}, {o['mean']:.4f} | "
          f"{sum(f['iterations_warm']) / len(f['iterations_warm']):.1f} / "
          f"{sum(f['iterations_cold']) / len(f['iterations_cold']):.1f} |")
    if not args.skip_model:
        w = record["whole_step"] = whole_step(args)["seconds"]
        print(f"\nGPT-2 small, one StiefelMuon step, s (best of {args.model_rounds} rounds)\n")
        print("| converted (manifold Muon on frames) | unconverted (Muon + AdamW) | converted / unconverted |")
        print("|---|---|---|")
        print(f"| {min(w['converted']):.2f} | {min(w['unconverted']):.2f} | "
              f"{stats.paired_ratio_text(w['converted'], w['unconverted'])} |")
    if args.out:
        save_results(args.out, record)
    return record


if __name__ == "__main__":
    main()
