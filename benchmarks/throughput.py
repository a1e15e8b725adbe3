"""Training throughput of the CIFAR patch ViT: StiefelAdam (arm A1) against AdamW (arm A0), as a ratio.

Both arms train the same model (same sizes, same initial weights) with the same training step as
the benchmark (:func:`stiefel_mini.experiments.cifar.train.train_step`: crop/flip on tensors, forward,
backward, optimizer step) on random uint8 images, so only the optimizer differs. The arms are timed
in interleaved rounds (A0 A1, then A1 A0, ...), so that a slow spell of a shared machine hits both,
and the reported ratio is the median over rounds of images/s(A1) / images/s(A0). Target: >= 0.90.

    python benchmarks/throughput.py                       # CPU setting of the benchmark, 1 thread
    python benchmarks/throughput.py --preset gpu          # GPU setting (bf16 autocast), on cuda
    python benchmarks/throughput.py --readme benchmarks/README.md   # also write the table there
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from stiefel_mini.experiments import stats
from stiefel_mini.experiments.arms import arm_spec, make_optimizer, optimizer_options
from stiefel_mini.experiments.cifar import config as cifar_config
from stiefel_mini.experiments.cifar import train as cifar_train
from stiefel_mini.experiments.config import parse_config, replace
from stiefel_mini.experiments.records import provenance
from stiefel_mini.experiments.runtime import set_threads

SECTION = "## Training throughput"


@dataclass
class ThroughputConfig:
    """Which model setting to time, and how."""

    preset: str = "cpu"  # a model setting of stiefel_mini.experiments.cifar.config.PLANS ("cpu" or "gpu")
    arms: tuple[str, ...] = ("A0", "A1")  # the first is the reference of the ratio
    rounds: int = 7
    steps: int = 20  # timed steps per arm and round
    warmup: int = 5  # untimed steps per arm before the first round
    threads: int = 1  # CPU intra-op threads (0: torch's default)
    device: str = "auto"
    readme: str | None = None  # markdown file whose "## Training throughput" section is (re)written


def sync(device: torch.device) -> None:
    """Wait for queued GPU work, so that wall-clock times cover it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(cfg: ThroughputConfig) -> dict:
    """Images/s of each arm per round, the per-round ratios to the first arm and their median."""
    set_threads(cfg.threads)
    model_cfg = replace(cifar_config.PLANS[cfg.preset].run, device=cfg.device)
    device = cifar_train.resolve_device(model_cfg.machine.device)
    autocast = model_cfg.machine.bf16 and device.type == "cuda"
    bs = model_cfg.schedule.batch_size
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (bs, 3, 32, 32), dtype=torch.uint8, generator=gen).to(device)
    y = torch.randint(0, 10, (bs,), generator=gen).to(device)
    trainers = {}
    for arm in cfg.arms:
        model = cifar_train.build_model(model_cfg, arm).to(device)
        trainers[arm] = (model, make_optimizer(model, arm, **optimizer_options(model_cfg.optimizer)))

    # On a CPU the clock is the process's CPU time: other jobs on a shared machine then slow
    # neither arm's number. A GPU's work is not CPU time, so there the clock is wall time.
    clock = time.perf_counter if device.type == "cuda" else time.process_time

    def steps(arm: str, n: int) -> float:
        model, opt = trainers[arm]
        sync(device)
        start = clock()
        for _ in range(n):
            cifar_train.train_step(model, opt, x, y, gen, model_cfg.data.augment, autocast)
        sync(device)
        return n * bs / (clock() - start)

    for arm in cfg.arms:
        steps(arm, cfg.warmup)
    per_round = {arm: [] for arm in cfg.arms}
    for r in range(cfg.rounds):
        for arm in cfg.arms if r % 2 == 0 else cfg.arms[::-1]:
            per_round[arm].append(steps(arm, cfg.steps))
    ref = cfg.arms[0]
    rows = []
    for arm in cfg.arms:
        ratio = stats.paired_ratio(per_round[arm], per_round[ref])
        rows.append({"arm": arm, "images_per_s": statistics.median(per_round[arm]),
                     "ratio": ratio["median"], "ratio_min": ratio["low"], "ratio_max": ratio["high"]})
    prov = provenance(cfg, device=device)
    m = model_cfg.model
    model_desc = f"patch {m.patch_size}, d_model {m.d_model}, depth {m.depth}, {m.n_heads} heads, batch {bs}"
    clock_name = "wall-clock" if device.type == "cuda" else "CPU-time (process_time)"
    return {"rows": rows, "per_round": per_round, "model": model_desc, "clock": clock_name, "provenance": prov}


def table(result: dict, cfg: ThroughputConfig) -> str:
    """The markdown section for benchmarks/README.md."""
    prov = result["provenance"]
    where = prov.get("gpu") or f"CPU ({prov['processor'] or prov['machine']}), {prov['torch_threads']} thread(s)"
    lines = [
        SECTION,
        "",
        f"Training steps of the CIFAR patch ViT ({result['model']}; `--preset {cfg.preset}` of",
        "`stiefel_mini.experiments.cifar`), same initial weights, random uint8 images, crop/flip,",
        f"forward, backward and optimizer step. {cfg.rounds} interleaved rounds of {cfg.steps} steps per arm;",
        f"images/s are per {result['clock']} second; the ratio is the median over rounds of",
        "images/s(arm) / images/s(A0), with the range over rounds.",
        "Target: StiefelAdam within 10% of AdamW (ratio >= 0.90).",
        "",
        "| arm | optimizer | images/s (median) | ratio to A0 | range over rounds |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['arm']} | {arm_spec(row['arm']).description.split(': ', 1)[-1]} | "
            f"{row['images_per_s']:.0f} | {row['ratio']:.3f} | {row['ratio_min']:.3f} - {row['ratio_max']:.3f} |"
        )
    lines += [
        "",
        f"Measured on {where}, torch {prov['versions']['torch']}, commit {str(prov['git_commit'])[:7]}"
        f"{' (uncommitted changes)' if prov['git_dirty'] else ''}, {prov['timestamp_utc']}.",
        "Reproduce: `python benchmarks/throughput.py"
        + (f" --preset {cfg.preset}" if cfg.preset != "cpu" else "") + "`.",
        "",
    ]
    return "\n".join(lines)


def write_section(path: Path, section: str) -> None:
    """Replace the ``## Training throughput`` section of ``path`` (up to the next ``## ``), or append it."""
    text = path.read_text() if path.exists() else ""
    start = text.find(SECTION + "\n")
    if start < 0:
        text = text.rstrip("\n") + ("\n\n" if text else "") + section
    else:
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start] + section + (text[end + 1 :] if end >= 0 else "")
    path.write_text(text)


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_config(ThroughputConfig, sys.argv[1:] if argv is None else argv)
    result = measure(cfg)
    section = table(result, cfg)
    print(section)
    if cfg.readme:
        write_section(Path(cfg.readme), section)
    return result


if __name__ == "__main__":
    main()
