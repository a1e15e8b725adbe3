"""Training step of a converted timm ViT and Hugging Face GPT-2 against the unconverted model,
measured side by side in one run.

    python benchmarks/hf_step.py --threads 1
    python benchmarks/hf_step.py --threads 1 --rounds 3 --steps 3    # a quick look

Each model is built three times from one seed (tiny configs, random weights; nothing is
downloaded). One step is forward, backward and optimizer step on a fixed batch: the **original** with
``torch.optim.AdamW`` on every parameter (torch's default implementation), and the **converted**
model (``convert_attention``, Stiefel Q/K frames) with ``StiefelAdam`` on ``param_groups`` (frames
in the frame rule, AdamW on the rest). A third column, **converted, AdamW** (``stiefel=False``, the
same projection modules with plain weights, AdamW on everything), separates the cost of assembling
the Q/K weight from the frames' from that of the frame rule. Rounds are interleaved, in alternating
order (so that no arm always runs first); a time is the best round, a ratio the median over rounds
of the per-round ratio, with its range. Target (issue 37): converted within 1.10x of the original.
``--out PATH`` writes the times, the provenance and the load the run was measured under
(:class:`~stiefel_mini.experiments.machine_load.LoadMeter`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import time

import torch
from torch import nn

from stiefel_mini import StiefelAdam, convert_attention, param_groups
from stiefel_mini.experiments import stats
from stiefel_mini.experiments.machine_load import LoadMeter
from stiefel_mini.experiments.records import provenance, save_results


def gpt2(width: int, depth: int, heads: int) -> tuple[nn.Module, torch.Tensor, callable]:
    """GPT-2 (width, depth, heads; vocabulary 512, 128 tokens, batch 8): next-token loss."""
    import transformers

    cfg = transformers.GPT2Config(n_embd=width, n_layer=depth, n_head=heads, vocab_size=512, n_positions=128,
                                  bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg)
    ids = torch.randint(0, 512, (8, 128), generator=torch.Generator().manual_seed(1))

    def loss(m: nn.Module) -> torch.Tensor:
        return m(ids, labels=ids).loss

    return model, ids, loss


def vit(width: int, depth: int, heads: int) -> tuple[nn.Module, torch.Tensor, callable]:
    """timm VisionTransformer (64 x 64 images, patch 8: 64 tokens and a class token; batch 16)."""
    from timm.models.vision_transformer import VisionTransformer

    model = VisionTransformer(img_size=64, patch_size=8, embed_dim=width, depth=depth, num_heads=heads,
                              num_classes=10, qkv_bias=True)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 3, 64, 64, generator=g), torch.randint(0, 10, (16,), generator=g)

    def loss(m: nn.Module) -> torch.Tensor:
        return nn.functional.cross_entropy(m(x), y)

    return model, x, loss


MODELS = {"gpt2": gpt2, "vit": vit}
ARMS = ("original", "converted", "converted, AdamW")


def arm(name: str, model_fn, width: int, depth: int, heads: int):
    """The model of one arm and its optimizer, from seed 0."""
    torch.manual_seed(0)
    model, _, loss = model_fn(width, depth, heads)
    model.train()
    if name == "original":
        return model, torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1), loss
    if name == "converted":
        convert_attention(model)
        opt = StiefelAdam(param_groups(model, weight_decay=0.1, frame_options={"lr": 1e-2}), lr=1e-4)
        return model, opt, loss
    convert_attention(model, stiefel=False)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1), loss


def time_steps(model: nn.Module, opt, loss, steps: int) -> float:
    """Seconds per training step, over ``steps`` steps."""
    start = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss(model).backward()
        opt.step()
    return (time.perf_counter() - start) / steps


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=5, help="steps per timed round")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--out", default=None, help="also write the times and their provenance to this JSON file")
    args = ap.parse_args(argv)
    if args.width % args.heads:
        ap.error(f"--heads {args.heads} does not divide --width {args.width}")
    if args.threads:
        torch.set_num_threads(args.threads)
    packages = {name: importlib.metadata.version(name) for name in ("timm", "transformers")}
    record = {"settings": vars(args), "provenance": provenance(), "packages": packages, "timing": []}
    print(f"timm {packages['timm']}, transformers {packages['transformers']}; width {args.width}, depth "
          f"{args.depth}, {args.heads} heads, {torch.get_num_threads()} thread(s); "
          f"ms per training step (best of {args.rounds} rounds of {args.steps})\n")
    print("| model | original (AdamW) | converted (StiefelAdam) | converted, AdamW | converted / original "
          "| converted, AdamW / original |")
    print("|---|---|---|---|---|---|")
    with LoadMeter() as meter:
        for name in args.models:
            arms = {a: arm(a, MODELS[name], args.width, args.depth, args.heads) for a in ARMS}
            for a in ARMS:
                time_steps(*arms[a], 1)  # warm-up: first-call allocations, optimizer state
            times: dict[str, list[float]] = {a: [] for a in ARMS}
            for r in range(args.rounds):
                # The order alternates (A B C, C B A, ...), so that an arm gains nothing from its place.
                for a in ARMS if r % 2 == 0 else ARMS[::-1]:
                    times[a].append(time_steps(*arms[a], args.steps))
            best = {a: 1e3 * min(t) for a, t in times.items()}
            print(f"| {name} | {best['original']:.1f} | {best['converted']:.1f} | {best['converted, AdamW']:.1f} | "
                  f"{stats.paired_ratio_text(times['converted'], times['original'])} | "
                  f"{stats.paired_ratio_text(times['converted, AdamW'], times['original'])} |")
            record["timing"].append({"model": name, "seconds_per_step": times})
    record["load"] = meter.record
    print(f"\nload: {meter.record}")
    if args.out:
        save_results(args.out, record)
    return record


if __name__ == "__main__":
    main()
