"""Training tokens per second of each arm of the language-model study, side by side in one run.

    python benchmarks/lm_throughput.py                          # one and two threads, the study's model
    python benchmarks/lm_throughput.py --study 2 --per_head     # the second study's arms
    python benchmarks/lm_throughput.py --rounds 2 --steps 1     # a quick look

Each arm's model and optimizers are those of the study, built by its recipe
(:func:`stiefel_mini.experiments.lm.arms.setup_for`: ``r1_<arm>``, ``r2_<arm>`` for ``--study 2``,
``--per_head``: Muon on Q, K and V per head; preset ``cpu``: a converted GPT-2, 4 layers, width 256,
batches of 16 x 128 tokens), built from one seed; a step is :func:`stiefel_mini.experiments.lm.experiment.train_step` (forward, backward, clipping, every
optimizer's step) on a fixed batch of random tokens (no corpus needed). Rounds are interleaved in
alternating order at each thread count; a rate is the best round's, a ratio the median over rounds
of the per-round ratio of step times to ``adamw``'s, with its range. ``--out PATH`` writes the times,
the provenance and the machine's one-minute load average when it started.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from stiefel_mini.experiments import stats
from stiefel_mini.experiments.config import replace
from stiefel_mini.experiments.lm.arms import setup_for
from stiefel_mini.experiments.lm.config import LM_ARMS, PRESETS
from stiefel_mini.experiments.lm.experiment import train_step
from stiefel_mini.experiments.lm.studies import ROUND1, ROUND2
from stiefel_mini.experiments.records import provenance, save_results


def time_steps(state: tuple, x: torch.Tensor, steps: int) -> float:
    """Seconds per training step over ``steps`` steps."""
    model, opts, params, clip = state
    start = time.perf_counter()
    for _ in range(steps):
        train_step(model, opts, x, x, params, clip)
    return (time.perf_counter() - start) / steps


STUDIES = {1: list(LM_ARMS), 2: [a for a, _ in ROUND2.arms]}
"""The arms of each study, the default ``--arms``."""


def build(arm: str, cfg, study: int, per_head: bool) -> tuple:
    """``(model, optimizers)`` of ``arm`` as study ``study`` trains it."""
    recipe = (ROUND1 if study == 1 else ROUND2).recipe(arm)
    return setup_for(recipe, {"per_head": per_head})(cfg, 0)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--study", type=int, default=1, choices=sorted(STUDIES), help="whose arms (default: the first's)")
    ap.add_argument("--arms", nargs="+", default=None, help="a subset of the study's arms (default: all)")
    ap.add_argument("--per_head", action="store_true", help="study 2: Muon on Q, K and V per head (default: whole)")
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3, help="steps per timed round")
    ap.add_argument("--d_model", type=int, default=PRESETS["cpu"].model.d_model)
    ap.add_argument("--n_layer", type=int, default=PRESETS["cpu"].model.n_layer)
    ap.add_argument("--batch_size", type=int, default=PRESETS["cpu"].batch_size)
    ap.add_argument("--out", default=None, help="also write the times and their provenance to this JSON file")
    args = ap.parse_args(argv)
    args.arms = args.arms or STUDIES[args.study]
    if unknown := [a for a in args.arms if a not in STUDIES[args.study]]:
        ap.error(f"--arms {unknown}: not arms of study {args.study}; choose from {STUDIES[args.study]}")
    if args.per_head and args.study != 2:
        ap.error("--per_head applies to the second study's Muon arms: add --study 2")
    if "adamw" not in args.arms:
        ap.error("--arms must include adamw, the baseline of the ratios")
    base = replace(PRESETS["cpu"], d_model=args.d_model, n_layer=args.n_layer, batch_size=args.batch_size)
    if base.model.d_model % base.model.n_head:
        ap.error(f"--d_model {args.d_model} is not a multiple of the {base.model.n_head} heads")
    tokens = base.batch_size * base.model.context
    x = torch.randint(0, base.model.vocab_size, (base.batch_size, base.model.context),
                      generator=torch.Generator().manual_seed(0))  # (B, T)
    # Other work on the machine slows every arm alike within a round, less so its ratios: say how busy it was.
    record = {"settings": vars(args), "provenance": provenance(base), "load_average": os.getloadavg()[0],
              "cores": os.cpu_count(), "timing": []}
    print(f"GPT-2, {base.model.n_layer} layers, width {base.model.d_model}, {tokens} tokens a step; tokens per "
          f"second (best of {args.rounds} rounds of {args.steps} steps) and step time / adamw's\n")
    print("| threads | " + " | ".join(args.arms) + " | " + " | ".join(f"{a} / adamw" for a in args.arms[1:]) + " |")
    print("|---|" + "---|" * (2 * len(args.arms) - 1))
    for threads in args.threads:
        torch.set_num_threads(threads)
        states = {}
        for arm in args.arms:
            cfg = replace(base, arm=arm)
            model, opts = build(arm, cfg, args.study, args.per_head)
            states[arm] = (model, opts, [p for p in model.parameters() if p.requires_grad], cfg.optimizer.grad_clip)
            time_steps(states[arm], x, 1)  # warm-up: first-call allocations, optimizer state
        times: dict[str, list[float]] = {a: [] for a in args.arms}
        for r in range(args.rounds):
            for arm in args.arms if r % 2 == 0 else args.arms[::-1]:
                times[arm].append(time_steps(states[arm], x, args.steps))
        others = [a for a in args.arms if a != "adamw"]
        print(f"| {threads} | " + " | ".join(f"{tokens / min(times[a]):,.0f}" for a in args.arms) + " | " +
              " | ".join(stats.paired_ratio_text(times[a], times["adamw"]) for a in others) + " |")
        record["timing"].append({"threads": threads, "seconds_per_step": times, "tokens_per_step": tokens})
    if args.out:
        save_results(args.out, record)
    return record


if __name__ == "__main__":
    main()
