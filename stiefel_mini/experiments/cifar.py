"""CIFAR-10 patch benchmark: does constraining Q/K to the Stiefel manifold help a small ViT, and why?

A patch transformer (:class:`stiefel_mini.vit.PatchViT`) is trained on real CIFAR-10 under the
optimiser arms of :data:`stiefel_mini.experiments.arms.ARMS` (A0 AdamW, A0' AdamW without decay
on Q/K, A1 StiefelAdam, A3 frozen frames, A4 AdamW with the Q/K learning rate divided by
sqrt(d_model * d_head), A5 AdamW then polar projection, A7 StiefelAdam with a per-element second
moment). Starts are paired: for a given seed, every arm begins from the same weights (the
attention module initialises Q/K as random frames whether or not it constrains them) and sees the
same training subset, batch order and augmentation.

Measured per run: test accuracy and loss, train accuracy, the per-step Frobenius norm of the change
of the Q/K weights ||W_{t+1} - W_t||_F (all blocks together), their drift from initialisation
||W_T - W_0||_F / ||W_0||_F, and the orthogonality error of the final Q/K.

Round 2 (issue 16) adds: a fixed number of optimiser steps whatever the subset size (``steps``), a
learning-rate grid per arm (``lrs`` for the whole-model lr of arms without trained frames,
``frame_lrs`` for the frame lr of StiefelAdam / polar arms), the largest attention logit and the
attention entropy along training (on the current batch at every log point, and per block on 256
fixed test images at each evaluation), and the presets of :data:`ROUND2_PLANS`. Arms at their own
best learning rate are compared by :func:`best_lr_comparison`.

Reference: the paper's CIFAR-10 patch benchmark (abstract: +8.98 pp over AdamW over 12 paired
starts; Q/K steps 24-40x smaller than AdamW's; frozen frames cost 0.28 pp).

CLI (``--preset`` picks a setting, every config field can be overridden as ``--field value``)::

    python -m stiefel_mini.experiments.cifar --preset cpu --data_dir ../shared/data/cifar10-jpeg
    python -m stiefel_mini.experiments.cifar --preset gpu --data_dir DIR
    python -m stiefel_mini.experiments.cifar --preset repro      # tiny synthetic set, for the tests
    python -m stiefel_mini.experiments.cifar --preset r2_lr --data_dir DIR   # round 2 (ROUND2_PLANS)
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from stiefel_mini.experiments import cifar_data
from stiefel_mini.experiments.arms import Arm, arm_spec, make_optimizer, optimizer_options
from stiefel_mini.experiments.config import cli, parse_cli
from stiefel_mini.experiments.records import config_dict, load_results, provenance, save_results
from stiefel_mini.experiments.runtime import generator, progress, set_threads, stream_seed
from stiefel_mini.attention import entropy
from stiefel_mini.experiments.stats import compare, holm
from stiefel_mini.resources import results_path
from stiefel_mini.geometry import orthogonality_error
from stiefel_mini.vit import PatchViT

ALL_ARMS = ("A0", "A0'", "A1", "A3", "A4", "A5", "A7")
"""The arms of the benchmark, by their codes (``arms.ARMS[...].code``); A0 is the paired baseline."""


@dataclass
class CifarConfig:
    """One training run (``arm``, ``seed``, ``train_fraction``) and, for the sweep, the grid to run."""

    # What to run
    arm: str = "A1"
    seed: int = 0
    train_fraction: float = 0.1  # share of the 50k training images, class-balanced, chosen by the seed
    # Sweep grid (``sweep`` and the CLI); ``run`` uses arm / seed / train_fraction above
    arms: tuple[str, ...] = ALL_ARMS
    seeds: tuple[int, ...] = (0, 1, 2)
    train_fractions: tuple[float, ...] = (0.1, 0.3)
    lrs: tuple[float, ...] = ()  # lr grid for arms without trained frames (A0, QK-norm, ...); (): lr only
    frame_lrs: tuple[float, ...] = ()  # frame-lr grid for StiefelAdam / polar arms (A1, A5, A7, ...); (): frame_lr
    out: str | None = None  # results JSON, rewritten after every run; an existing file is resumed
    repro_steps: int = 0  # > 0: the sweep first stores its first grid point, this many steps on the tiny set
    redo_dirty: bool = False  # drop stored runs that record git_dirty: true and run them again
    # Data
    data_dir: str | None = None  # ImageFolder copy; None -> $STIEFEL_MINI_CIFAR_DIR, else torchvision
    test_size: int = 0  # 0 = the whole test split; else a fixed class-balanced subset
    train_eval_size: int = 2000  # un-augmented training images scored for train accuracy
    augment: bool = True
    # Model
    patch_size: int = 8
    d_model: int = 96
    depth: int = 3
    n_heads: int = 4
    d_head: int | None = None
    mlp_ratio: int = 4
    logit_scale: str = "fixed"
    # Optimisation (passed to arms.make_optimizer)
    epochs: int = 6
    steps: int = 0  # > 0: exactly this many optimiser steps whatever the subset size (epochs ignored)
    batch_size: int = 128
    lr: float = 1e-3
    frame_lr: float | None = None  # None: Q/K use lr
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.05
    max_step: float | None = 0.1
    retraction: str = "polar"
    warmup_epochs: float = 1.0  # linear warm-up, then cosine decay to zero
    warmup_share: float | None = None  # warm-up as a share of all steps instead (None: warmup_epochs)
    # Machine
    device: str = "auto"  # "auto": cuda if available, else cpu
    bf16: bool = True  # bf16 autocast of the forward pass on cuda (weights and optimiser stay float32)
    threads: int = 1  # torch intra-op threads on the CPU (0: torch's default)
    eval_every: int = 0  # epochs between test evaluations during training; 0: only at the end
    log_every: int = 20  # steps between recorded training-loss points
    progress: bool = True
    # Random streams: "v0" is the scheme the committed results/cifar files were made with (global torch
    # seed = seed for the weights, Generator(seed) for batches and augmentation, Generator(10_000 + seed)
    # for the training subset, Generator(12_345) for the fixed test / train-eval subsets); "streams" is
    # the package rule (runtime.generator(seed, name)). New studies use "streams".
    seeding: Literal["v0", "streams"] = "v0"


PRESETS: dict[str, CifarConfig] = {
    # Sized to run 7 arms x 3 seeds x 2 fractions (5k and 15k images, 6 epochs) on one shared CPU
    # core in about an hour: a small model trained briefly, far from the paper's scale.
    "cpu": CifarConfig(),
    # The paper's scale: patch 4 (64 tokens), a wider and deeper model, 12 paired seeds.
    "gpu": CifarConfig(
        patch_size=4, d_model=256, depth=6, n_heads=8, d_head=32, epochs=50, batch_size=256,
        seeds=tuple(range(12)), train_fractions=(0.2, 1.0), device="cuda", threads=0,
        eval_every=10, log_every=50,
    ),
    # A few seconds on the tiny synthetic set that the tests write: the stored reproduction record.
    "repro": CifarConfig(
        arm="A1", seed=0, train_fraction=1.0, arms=("A1",), seeds=(0,), train_fractions=(1.0,),
        d_model=32, depth=1, n_heads=2, epochs=3, batch_size=25, lr=3e-3, warmup_epochs=0.5,
        train_eval_size=0, log_every=4, progress=False,
    ),
    # The chapter's live cell: A0 against A1 on 5k real images, well under two minutes on one core.
    "live": CifarConfig(
        arms=("A0", "A1"), seeds=(0,), train_fractions=(0.1,), epochs=4, test_size=2000,
        train_eval_size=1000,
    ),
}

# Round 2 (issue 16). All use the package's random streams, no augmentation (so that a CPU-sized
# model fits its training set: training accuracy above test accuracy) and evaluate every 2 epochs.
# Each is one resumable sweep: re-run the same command to continue. CPU times per run are in
# results/ROUND2_PLAN.md. Set --frame_lr to A1's best frame lr from r2_lr for r2_fitted / r2_ablation.
_R2 = dict(augment=False, seeding="streams", eval_every=2, log_every=50, repro_steps=30)
ROUND2_PLANS: dict[str, CifarConfig] = {
    # Learning-rate sensitivity (Wortsman et al. 2023): A0's lr (100x), A1's frame lr (10,000x; the
    # trust cap max_step = 0.1 binds from about 0.1 up, so 3 and 10 bracket a best found at the first
    # grid's top, 1.0) and QK-norm's lr, 15k images, 10 epochs.
    "r2_lr": CifarConfig(
        out="results/cifar/r2_lr.json", arms=("A0", "A1", "qknorm"), seeds=(0, 1), train_fractions=(0.3,),
        epochs=10, lrs=(3e-4, 1e-3, 3e-3, 1e-2, 3e-2), frame_lrs=(1e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0),
        **_R2),
    # Fitted baselines on all 50k images, 10 epochs, 5 paired seeds (A0 and A1 were run on 3 more,
    # --arms A0 A1 --seeds 5 6 7: round2_status counts them as beyond the plan).
    "r2_fitted": CifarConfig(
        out="results/cifar/r2_fitted.json", arms=("A0", "A1", "A3", "qknorm"), seeds=(0, 1, 2, 3, 4),
        train_fractions=(1.0,), epochs=10, **_R2),
    # Data scaling at a fixed number of optimiser steps (2,000 = 5 epochs of 50k, 51 of 5k).
    "r2_scaling": CifarConfig(
        out="results/cifar/r2_scaling.json", arms=("A0", "A1"), seeds=(0, 1, 2), train_fractions=(0.1, 0.3, 1.0),
        steps=2000, warmup_share=0.1, **_R2),
    # Ablations where frames move (frame lr 0.03): second moment frame / column / element, projector
    # euclidean / canonical / none, and AdamW + polar (A5).
    "r2_ablation": CifarConfig(
        out="results/cifar/r2_ablation.json",
        arms=("A0", "A1", "stiefel_column", "A7", "stiefel_canonical", "stiefel_noproj", "A5"), seeds=(0, 1, 2),
        train_fractions=(0.3,), epochs=10, frame_lr=0.03, **_R2),
    # The mechanism where the frames move: r2_ablation's variants at A1's best frame lr (1.0, the
    # mean step ~3/4 of the trust cap), plus A1 without the cap, on the same paired starts.
    "r3_mechanism": CifarConfig(
        out="results/cifar/r3_mechanism.json",
        arms=("A1", "stiefel_column", "A7", "stiefel_canonical", "stiefel_noproj", "stiefel_nocap"),
        seeds=(0, 1, 2), train_fractions=(0.3,), epochs=10, frame_lr=1.0, **_R2),
    # A5 (AdamW then polar projection, no cap) around its r2_ablation frame lr 0.03, same starts.
    "r3_polar": CifarConfig(
        out="results/cifar/r3_polar.json", arms=("A5",), seeds=(0, 1, 2), train_fractions=(0.3,), epochs=10,
        frame_lrs=(0.01, 0.1, 0.3), **_R2),
    # The GPU study: patch 4, a wider and deeper model, 12 paired seeds (results/cifar/gpu_round2.sh).
    "r2_gpu": CifarConfig(
        out="results/cifar/r2_gpu.json", arms=("A0", "A1", "A3", "qknorm"), seeds=tuple(range(12)),
        train_fractions=(1.0,), patch_size=4, d_model=256, depth=6, n_heads=8, d_head=32, epochs=50,
        batch_size=256, device="cuda", threads=0, augment=True, seeding="streams", eval_every=10, log_every=50,
        repro_steps=30),
    # Seconds, on the tests' tiny image folder: every round-2 code path (lr grid, fixed steps).
    "r2_tiny": CifarConfig(arms=("A0", "A1"), seeds=(0, 1), train_fractions=(0.5, 1.0), lrs=(1e-3, 3e-3),
                           frame_lrs=(1e-2, 0.3), steps=6, warmup_share=0.1, d_model=32, depth=1, n_heads=2,
                           batch_size=25, train_eval_size=50, log_every=2, progress=False, seeding="streams", repro_steps=3),
}
PRESETS.update(ROUND2_PLANS)

REPRO_TINY_SET = {"n_train": 20, "n_test": 10, "seed": 0}
"""Arguments of ``cifar_data.write_tiny_image_folder`` for the repro record (200 + 100 images)."""


# ----------------------------------------------------------------------------------------------------
# Pieces of a run
# ----------------------------------------------------------------------------------------------------


def resolve_device(name: str) -> torch.device:
    """``"auto"`` -> cuda when available, else cpu; anything else is passed to ``torch.device``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def stream(cfg: CifarConfig, name: str) -> torch.Generator:
    """The generator of stream ``name`` (``"batches"``, ``"subset"``, ``"fixed"``) under ``cfg.seeding``.

    ``"fixed"`` is the same for every seed (it picks the test and train-evaluation subsets).
    """
    if cfg.seeding == "streams":
        return generator(0 if name == "fixed" else cfg.seed, name)
    v0 = {"batches": cfg.seed, "subset": 10_000 + cfg.seed, "fixed": 12_345}
    return torch.Generator().manual_seed(v0[name])


def build_model(cfg: CifarConfig, arm: str | Arm | None = None) -> PatchViT:
    """The ViT of ``cfg`` for ``arm`` (default ``cfg.arm``), its weights drawn from torch's global
    generator seeded by the run's seed (the ``"init"`` stream under ``seeding="streams"``), so every
    arm of a seed starts from the same weights."""
    spec = arm_spec(cfg.arm if arm is None else arm)
    torch.manual_seed(stream_seed(cfg.seed, "init") if cfg.seeding == "streams" else cfg.seed)
    return PatchViT(
        patch_size=cfg.patch_size, d_model=cfg.d_model, depth=cfg.depth, n_heads=cfg.n_heads,
        d_head=cfg.d_head, mlp_ratio=cfg.mlp_ratio, **spec.module_flags(cfg.logit_scale),
    )


def train_indices(labels: torch.Tensor, fraction: float, generator: torch.Generator) -> torch.Tensor:
    """The class-balanced training subset of ``fraction`` of the images, drawn from ``generator``.

    Nested in ``fraction`` for a given generator seed, shared by all arms of that seed.
    """
    n_classes = int(labels.max()) + 1
    n = int(round(fraction * labels.numel() / n_classes)) * n_classes
    if n >= labels.numel():
        return torch.arange(labels.numel())
    return cifar_data.balanced_subset(labels, n, generator)


def fixed_subset(labels: torch.Tensor, size: int, generator: torch.Generator) -> torch.Tensor:
    """A class-balanced subset of ``size`` (0 or >= len: all) drawn from ``generator``."""
    if size <= 0 or size >= labels.numel():
        return torch.arange(labels.numel())
    return cifar_data.balanced_subset(labels, size, generator)


def lr_factor(step: int, total: int, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay to zero at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    progress_ = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress_)))


@torch.no_grad()
def evaluate(model: PatchViT, x: torch.Tensor, y: torch.Tensor, device: torch.device, bf16: bool,
             batch_size: int = 1000) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of ``model`` on uint8 images ``x`` (N, 3, 32, 32), labels (N,)."""
    model.eval()
    correct, loss_sum = 0, 0.0
    for start in range(0, x.shape[0], batch_size):
        xb = cifar_data.normalize(x[start : start + batch_size].to(device))
        yb = y[start : start + batch_size].to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16 and device.type == "cuda"):
            logits = model(xb)
        loss_sum += F.cross_entropy(logits.float(), yb, reduction="sum").item()
        correct += (logits.argmax(-1) == yb).sum().item()
    model.train()
    return correct / x.shape[0], loss_sum / x.shape[0]


def train_step(model: PatchViT, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
               gen: torch.Generator, augment: bool, autocast: bool) -> torch.Tensor:
    """One optimiser step on uint8 images ``x`` (B, 3, 32, 32) and labels ``y`` (B,); returns the loss.

    The forward pass runs under bf16 autocast when ``autocast``; the loss, the gradients and the
    optimiser's arithmetic stay in float32 (the weights are float32).
    """
    if augment:
        x = cifar_data.augment(x, gen)
    x = cifar_data.normalize(x)
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=autocast):
        logits = model(x)
    loss = F.cross_entropy(logits.float(), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.detach()


@torch.no_grad()
def attention_stats(model: PatchViT, x: torch.Tensor) -> dict[str, list[float]]:
    """Per block, the largest absolute attention logit and the mean attention entropy (nats).

    ``x``: normalised images ``(B, 3, 32, 32)``. One float32 forward pass records each attention
    module's input; its logits ``(B, H, T, T)`` give ``max_logit`` (max of ``|l_ij|``) and
    ``entropy`` (mean over images, heads and queries of the entropy of ``softmax_j(l_ij)``).
    Returns ``{"max_logit": [...], "entropy": [...]}``, one entry per block.
    """
    inputs: list[torch.Tensor] = []
    modules = model.attention_modules()
    hooks = [m.register_forward_pre_hook(lambda _m, args: inputs.append(args[0])) for m in modules]
    was_training = model.training
    model.eval()
    try:
        model(x.float())
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    out: dict[str, list[float]] = {"max_logit": [], "entropy": []}
    for module, inp in zip(modules, inputs):
        logits = module.logits(inp.float())  # (B, H, T, T)
        out["max_logit"].append(logits.abs().max().item())
        out["entropy"].append(entropy(logits.softmax(-1)).mean().item())
    return out


def swept_lrs(cfg: CifarConfig, arm: str | Arm) -> list[tuple[float, float | None]]:
    """The ``(lr, frame_lr)`` pairs ``arm`` runs at: its grid (``frame_lrs`` for arms whose frames
    StiefelAdam or the polar AdamW step trains, ``lrs`` otherwise), else the config's own values.
    ``frame_lr`` is ``None`` for arms without trained frames (it would be unused)."""
    spec = arm_spec(arm)
    if spec.qk in ("stiefel", "adamw_polar"):
        return [(cfg.lr, float(f)) for f in cfg.frame_lrs] or [(cfg.lr, cfg.frame_lr)]
    return [(float(lr), None) for lr in cfg.lrs] or [(cfg.lr, None)]


def qk_vector(model: PatchViT) -> torch.Tensor:
    """All Q/K weights of the model as one flat float32 vector (a copy)."""
    return torch.cat([p.detach().float().flatten() for p in model.qk_parameters()])


# ----------------------------------------------------------------------------------------------------
# One run
# ----------------------------------------------------------------------------------------------------


def run(cfg: CifarConfig, data: cifar_data.Cifar10 | None = None) -> dict:
    """Train one arm from one paired start and return its history.

    Args:
        cfg: the run (``cfg.arm``, ``cfg.seed``, ``cfg.train_fraction``) and its settings.
        data: CIFAR-10 tensors; loaded from ``cfg.data_dir`` when None.

    Returns:
        A JSON-ready dict: the run's keys, final ``test_acc`` / ``test_loss`` / ``train_acc``,
        ``qk_step_mean`` (mean over steps of ||W_{t+1} - W_t||_F over all Q/K weights),
        ``qk_drift`` (||W_T - W_0||_F / ||W_0||_F), ``orth_error`` (mean over heads of
        ||W^T W - I||_F at the end), the training-loss curve and periodic test evaluations.
    """
    set_threads(cfg.threads)
    device = resolve_device(cfg.device)
    if data is None:
        data = cifar_data.load_cifar10(cfg.data_dir)
    spec = arm_spec(cfg.arm)
    code = spec.label

    model = build_model(cfg, spec).to(device)
    optimizer = make_optimizer(model, spec, **optimizer_options(cfg))
    # One generator drives subset-independent randomness of training: batch order and augmentation.
    if cfg.seeding == "v0":
        torch.manual_seed(cfg.seed)  # what v0 did here; nothing below draws from the global generator
    gen = stream(cfg, "batches")

    idx = train_indices(data.train_y, cfg.train_fraction, stream(cfg, "subset"))
    train_x, train_y = data.train_x[idx].to(device), data.train_y[idx].to(device)
    eval_idx = (fixed_subset(train_y.cpu(), cfg.train_eval_size, stream(cfg, "fixed"))
                if cfg.train_eval_size > 0 else None)
    test_idx = fixed_subset(data.test_y, cfg.test_size, stream(cfg, "fixed"))
    test_x, test_y = data.test_x[test_idx], data.test_y[test_idx]

    steps_per_epoch = max(1, train_x.shape[0] // cfg.batch_size)
    total = cfg.steps if cfg.steps > 0 else steps_per_epoch * cfg.epochs
    warmup = int(round(cfg.warmup_share * total if cfg.warmup_share is not None
                       else cfg.warmup_epochs * steps_per_epoch))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, total, warmup))
    autocast = cfg.bf16 and device.type == "cuda"

    qk0 = qk_vector(model)
    history: dict[str, Any] = {
        "arm": code, "arm_name": spec.name, "seed": cfg.seed, "train_fraction": cfg.train_fraction,
        "n_train": int(train_x.shape[0]), "n_test": int(test_x.shape[0]), "steps_total": total,
        "lr": cfg.lr, "frame_lr": cfg.frame_lr if spec.qk in ("stiefel", "adamw_polar") else None,
        "step": [], "train_loss": [], "qk_step": [], "max_logit": [], "attn_entropy": [], "evals": [],
    }
    probe_x = cifar_data.normalize(test_x[:256].to(device))  # fixed images for attention statistics

    def attention_eval(epoch: int) -> dict:
        acc, tl = evaluate(model, test_x, test_y, device, cfg.bf16)
        return {"epoch": epoch, "step": step, "test_acc": acc, "test_loss": tl, **attention_stats(model, probe_x)}

    # Running sums stay on the device and are read only at log points (no per-step host sync).
    loss_sum = torch.zeros((), device=device)
    step_sum = torch.zeros((), device=device)
    step_sum_all = torch.zeros((), device=device)
    window = 0
    start_time = time.perf_counter()
    bar = progress(total=total, desc=f"{code} seed {cfg.seed} frac {cfg.train_fraction}", enabled=cfg.progress,
                   leave=False)
    step, epoch = 0, 0
    while step < total:
        for batch in cifar_data.epoch_batches(train_x.shape[0], cfg.batch_size, gen):
            before = qk_vector(model)
            batch = batch.to(device)
            loss = train_step(model, optimizer, train_x[batch], train_y[batch], gen, cfg.augment, autocast)
            scheduler.step()
            qk_step = torch.linalg.vector_norm(qk_vector(model) - before)
            loss_sum += loss
            step_sum += qk_step
            step_sum_all += qk_step
            window += 1
            step += 1
            bar.update()
            if step % cfg.log_every == 0 or step == total:
                history["step"].append(step)
                history["train_loss"].append(loss_sum.item() / window)
                history["qk_step"].append(step_sum.item() / window)
                stats = attention_stats(model, cifar_data.normalize(train_x[batch]))
                history["max_logit"].append(max(stats["max_logit"]))
                history["attn_entropy"].append(sum(stats["entropy"]) / len(stats["entropy"]))
                bar.set_postfix(loss=f"{history['train_loss'][-1]:.3f}")
                loss_sum.zero_()
                step_sum.zero_()
                window = 0
            if step == total:
                break
        epoch += 1
        if cfg.eval_every and epoch % cfg.eval_every == 0 and step < total:
            history["evals"].append(attention_eval(epoch))
    bar.close()
    train_seconds = time.perf_counter() - start_time

    final = attention_eval(epoch)
    history["evals"].append(final)
    history["test_acc"], history["test_loss"] = final["test_acc"], final["test_loss"]
    history["max_logit_final"], history["attn_entropy_final"] = final["max_logit"], final["entropy"]
    if eval_idx is not None:
        history["train_acc"], history["train_eval_loss"] = evaluate(
            model, train_x[eval_idx.to(device)], train_y[eval_idx.to(device)], device, cfg.bf16
        )
    qk = qk_vector(model)
    history["qk_step_mean"] = step_sum_all.item() / max(1, total)
    history["qk_drift"] = (torch.linalg.vector_norm(qk - qk0) / torch.linalg.vector_norm(qk0)).item()
    history["orth_error"] = float(
        torch.cat([orthogonality_error(p.detach().float()).flatten() for p in model.qk_parameters()]).mean()
    )
    history["train_seconds"] = train_seconds
    history["images_per_second"] = total * cfg.batch_size / train_seconds
    return history


# ----------------------------------------------------------------------------------------------------
# The sweep and its summary
# ----------------------------------------------------------------------------------------------------


def run_key(h: dict) -> tuple:
    """(train_fraction, seed, arm, lr, frame_lr) of a run, for resuming and pairing.

    Runs written before round 2 hold no ``lr`` / ``frame_lr``: their key has ``None`` there, and
    :func:`sweep` fills in the file's own settings (a file holds one setting of each then).
    """
    return (float(h["train_fraction"]), int(h["seed"]), str(h["arm"]), h.get("lr"), h.get("frame_lr"))


def _sweep_settings(cfg: CifarConfig) -> dict:
    """The fields that must agree for stored runs to be reused (everything but the grid and the output)."""
    skip = {"arm", "seed", "train_fraction", "arms", "seeds", "train_fractions", "lrs", "frame_lrs", "out",
            "progress", "device", "threads", "repro_steps", "redo_dirty"}
    settings = {k: v for k, v in config_dict(cfg).items() if k not in skip}
    # Fields added in round 2 at their defaults are left out, so files written before them still resume.
    for key, default in (("steps", 0), ("warmup_share", None)):
        if settings.get(key) == default:
            del settings[key]
    return settings


def sweep(cfg: CifarConfig, data: cifar_data.Cifar10 | None = None) -> dict:
    """Run every (seed, fraction, arm) of the grid, rewriting ``cfg.out`` after each run.

    Seeds are the outer loop, so an interrupted sweep leaves complete paired seeds. Runs already in
    ``cfg.out`` with the same settings are kept and skipped (a killed sweep resumes where it stopped),
    except, with ``redo_dirty``, those that record ``git_dirty: true``, which run again;
    a file of other settings raises a ``ValueError`` instead of being overwritten. With
    ``repro_steps`` the first grid point is first run for that many steps on the tiny synthetic set
    (:func:`tiny_set_run`) and stored as ``repro``, for the reproduction test, which then needs no data. Each run records the commit it ran at (``git_commit``, ``git_dirty``).

    Returns:
        The results payload: ``provenance``, ``settings``, ``runs`` and ``summary``.
    """
    set_threads(cfg.threads)
    if data is None:
        data = cifar_data.load_cifar10(cfg.data_dir)
    runs: list[dict] = []
    previous: list[dict] = []
    repro: dict | None = None
    if cfg.out and Path(cfg.out).exists():
        old = load_results(cfg.out)
        if old.get("settings") != _sweep_settings(cfg):
            theirs, mine = old.get("settings") or {}, _sweep_settings(cfg)
            changed = sorted(k for k in set(theirs) | set(mine) if theirs.get(k) != mine.get(k))
            raise ValueError(f"{cfg.out} holds runs of other settings (fields {changed}); resume with the "
                             "same settings, or write to another --out")
        runs = [h for h in old["runs"] if not (cfg.redo_dirty and h.get("git_dirty"))]
        repro = old.get("repro")
        previous = [*old.get("provenance_previous", []), old["provenance"]]
    # Runs written before round 2 record no lrs: they ran at the file's own (lr, frame_lr).
    done = {k if k[3] is not None else k[:3] + swept_lrs(dataclasses.replace(cfg, lrs=(), frame_lrs=()), k[2])[0]
            for k in map(run_key, runs)}
    prov = provenance(cfg, cfg.seeds, device=resolve_device(cfg.device))
    prov["data_source"] = data.source
    grid = [(s, f, a, lrs) for s in cfg.seeds for f in cfg.train_fractions for a in cfg.arms
            for lrs in swept_lrs(cfg, a)]

    def payload() -> dict:
        out = {"provenance": prov, "settings": _sweep_settings(cfg), "runs": runs, "summary": summary_table(runs)}
        if repro is not None:
            out["repro"] = repro
        return {**out, "provenance_previous": previous} if previous else out

    if cfg.repro_steps > 0 and repro is None and grid:
        seed, fraction, arm, (lr, frame_lr) = grid[0]
        repro = tiny_set_run(dataclasses.replace(cfg, arm=arm, seed=seed, lr=lr,
                                                 frame_lr=frame_lr if frame_lr is not None else cfg.frame_lr))
        if cfg.out:
            save_results(cfg.out, payload())

    for seed, fraction, arm, (lr, frame_lr) in progress(grid, desc="sweep", enabled=cfg.progress):
        if (float(fraction), int(seed), arm_spec(arm).label, lr, frame_lr) in done:
            continue
        h = run(dataclasses.replace(cfg, arm=arm, seed=seed, train_fraction=fraction, lr=lr,
                                    frame_lr=frame_lr if frame_lr is not None else cfg.frame_lr), data)
        h["git_commit"], h["git_dirty"] = prov["git_commit"], prov["git_dirty"]
        runs.append(h)
        done.add(run_key(h))
        if cfg.out:
            save_results(cfg.out, payload())
    return payload()


def _groups(runs: list[dict]) -> dict[tuple, dict[int, dict]]:
    """Runs by ``(train_fraction, arm, lr, frame_lr)`` (first-seen order), each ``{seed: run}``."""
    out: dict[tuple, dict[int, dict]] = {}
    for h in runs:
        frac, seed, arm, lr, frame_lr = run_key(h)
        out.setdefault((frac, arm, lr, frame_lr), {})[seed] = h
    return out


def _mean(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else None


def summary_table(runs: list[dict], baseline: str = "A0") -> list[dict]:
    """One row per (train fraction, arm, lr, frame lr): accuracy, paired difference to ``baseline``.

    The baseline is ``baseline``'s runs at the same fraction and the same (whole-model) lr; only
    seeds where both finished are paired. ``diff_pp`` is the mean of the per-seed accuracy
    differences in percentage points with its 95% t interval (``diff_ci_pp``); ``p_sign`` /
    ``p_wilcoxon`` are the exact two-sided paired tests and ``p_wilcoxon_holm`` the Wilcoxon p-value
    Holm-corrected across every comparison of the table (one family); ``wins`` counts seeds where the
    arm's accuracy is higher; ``step_ratio`` is the mean over seeds of qk_step_mean(arm) /
    qk_step_mean(baseline) (the Q/K step relative to AdamW's). ``max_logit`` (largest attention
    logit over blocks) and ``attn_entropy`` (mean over blocks) are seed means at the end of training,
    ``train_acc`` the seed mean of the training accuracy (``None`` for runs that lack them).
    """
    groups = _groups(runs)
    rows = []
    for (fraction, arm, lr, frame_lr), by_seed in groups.items():
        seeds = sorted(by_seed)
        first = by_seed[seeds[0]]
        accs = [by_seed[s]["test_acc"] for s in seeds]
        row = {
            "train_fraction": fraction, "arm": arm, "arm_name": first["arm_name"], "lr": lr, "frame_lr": frame_lr,
            "n_train": first["n_train"], "steps_total": first["steps_total"], "seeds": seeds,
            "acc_mean": float(np.mean(accs)), "acc_sd": float(np.std(accs, ddof=1)) if len(accs) > 1 else None,
            "train_acc": _mean([by_seed[s].get("train_acc") for s in seeds]),
            "qk_drift": float(np.mean([by_seed[s]["qk_drift"] for s in seeds])),
            "orth_error": float(np.mean([by_seed[s]["orth_error"] for s in seeds])),
            "max_logit": _mean([max(by_seed[s]["max_logit_final"]) if by_seed[s].get("max_logit_final") else None
                                for s in seeds]),
            "attn_entropy": _mean([float(np.mean(by_seed[s]["attn_entropy_final"]))
                                   if by_seed[s].get("attn_entropy_final") else None for s in seeds]),
        }
        base_runs = next((g for (f, a, blr, _), g in groups.items() if f == fraction and a == baseline and blr == lr),
                         {})
        paired = [s for s in seeds if s in base_runs]
        if paired:
            base = [base_runs[s] for s in paired]
            mine = [by_seed[s] for s in paired]
            c = compare([b["test_acc"] for b in base], [m["test_acc"] for m in mine], lower_is_better=False)
            diffs = [100.0 * d for d in c["differences"]]
            ci = c["mean_difference_t_interval"]
            ratios = [m["qk_step_mean"] / b["qk_step_mean"] for m, b in zip(mine, base)]
            row.update(
                paired_seeds=paired, diffs_pp=diffs, diff_pp=float(np.mean(diffs)),
                diff_ci_pp=None if ci is None else [100.0 * ci[0], 100.0 * ci[1]],
                p_sign=c["p_sign"], p_wilcoxon=c["p_wilcoxon"],
                wins=c["wins"]["wins"], n_pairs=c["wins"]["n"], step_ratio=float(np.mean(ratios)),
            )
        rows.append(row)
    tested = [r for r in rows if "p_wilcoxon" in r and r["arm"] != baseline]
    for r, p in zip(tested, holm([r["p_wilcoxon"] for r in tested])["adjusted"]):
        r["p_wilcoxon_holm"] = p
    return rows


def lr_curves(runs: list[dict]) -> list[dict]:
    """Learning-rate sensitivity: per (train fraction, arm), accuracy against the arm's swept lr.

    The swept lr is ``frame_lr`` for arms with trained frames, else ``lr``. Each row holds
    ``train_fraction``, ``arm``, ``swept`` (``"frame_lr"`` or ``"lr"``), and ``points``: one
    ``{"value", "acc_mean", "acc_min", "acc_max", "n", "max_logit", "attn_entropy"}`` per value in
    increasing order (seed means; the spread is the min/max over seeds); ``best`` is the value with
    the highest mean accuracy and ``sensitivity_pp`` the mean accuracy lost, in points, at the
    neighbouring grid values (mean over the one or two neighbours; ``None`` with one value).
    """
    curves: dict[tuple, dict] = {}
    for (fraction, arm, lr, frame_lr), by_seed in _groups(runs).items():
        swept = "frame_lr" if frame_lr is not None else "lr"
        value = frame_lr if frame_lr is not None else lr
        accs = [h["test_acc"] for h in by_seed.values()]
        point = {
            "value": value, "acc_mean": float(np.mean(accs)), "acc_min": float(min(accs)),
            "acc_max": float(max(accs)), "n": len(accs),
            "max_logit": _mean([max(h["max_logit_final"]) if h.get("max_logit_final") else None
                                for h in by_seed.values()]),
            "attn_entropy": _mean([float(np.mean(h["attn_entropy_final"])) if h.get("attn_entropy_final") else None
                                   for h in by_seed.values()]),
        }
        curves.setdefault((fraction, arm, swept), {"train_fraction": fraction, "arm": arm, "swept": swept,
                                                   "points": []})["points"].append(point)
    rows = []
    for row in curves.values():
        pts = sorted(row["points"], key=lambda p: p["value"])
        i = max(range(len(pts)), key=lambda j: pts[j]["acc_mean"])
        near = [pts[j]["acc_mean"] for j in (i - 1, i + 1) if 0 <= j < len(pts)]
        rows.append({**row, "points": pts, "best": pts[i]["value"],
                     "sensitivity_pp": 100.0 * (pts[i]["acc_mean"] - float(np.mean(near))) if near else None})
    return rows


def best_lr_comparison(runs: list[dict], baseline: str = "A0") -> list[dict]:
    """Every arm at its own best lr (:func:`lr_curves`) against ``baseline`` at its best, paired by seed.

    One row per (train fraction, arm != baseline): the two best values, the per-seed differences
    (pp), their mean with its t interval, the exact sign and Wilcoxon p-values and the Wilcoxon
    p-value Holm-corrected across the rows. The best lr is picked on the same seeds that are then
    compared, which favours arms with more grid points or more spread; read small differences so.
    """
    curves = lr_curves(runs)
    groups = _groups(runs)

    def runs_at(fraction: float, arm: str, swept: str, value: float) -> dict[int, dict]:
        for (f, a, lr, frame_lr), by_seed in groups.items():
            if f == fraction and a == arm and (frame_lr if swept == "frame_lr" else lr) == value and \
                    (swept == "frame_lr") == (frame_lr is not None):
                return by_seed
        return {}

    rows = []
    for base in (c for c in curves if c["arm"] == baseline):
        b_runs = runs_at(base["train_fraction"], baseline, base["swept"], base["best"])
        for other in (c for c in curves if c["train_fraction"] == base["train_fraction"] and c["arm"] != baseline):
            o_runs = runs_at(other["train_fraction"], other["arm"], other["swept"], other["best"])
            seeds = sorted(set(b_runs) & set(o_runs))
            if not seeds:
                continue
            c = compare([b_runs[s]["test_acc"] for s in seeds], [o_runs[s]["test_acc"] for s in seeds],
                        lower_is_better=False)
            ci = c["mean_difference_t_interval"]
            rows.append({
                "train_fraction": base["train_fraction"], "arm": other["arm"], "arm_best": other["best"],
                "arm_swept": other["swept"], "baseline_best_lr": base["best"], "seeds": seeds,
                "diffs_pp": [100.0 * d for d in c["differences"]],
                "diff_pp": 100.0 * float(np.mean(c["differences"])),
                "diff_ci_pp": None if ci is None else [100.0 * ci[0], 100.0 * ci[1]],
                "p_sign": c["p_sign"], "p_wilcoxon": c["p_wilcoxon"], "wins": c["wins"]["wins"],
            })
    for r, p in zip(rows, holm([r["p_wilcoxon"] for r in rows])["adjusted"]):
        r["p_wilcoxon_holm"] = p
    return rows


# ----------------------------------------------------------------------------------------------------
# Reading round-2 files for the chapter: what has run, paired tables, fitted check, held-out best lr
# ----------------------------------------------------------------------------------------------------


def load_round2(presets: Sequence[str] = ("r2_lr", "r2_fitted", "r2_scaling", "r2_ablation", "r2_gpu")
                ) -> dict[str, dict | None]:
    """The results of each round-2 preset (``results/cifar/<preset>.json``), ``None`` where absent.

    Files are found by :func:`stiefel_mini.resources.results_path` (the checkout, else the packaged
    copy); a sweep still running writes its file after every run, so a file may hold part of its grid.
    """
    out: dict[str, dict | None] = {}
    for name in presets:
        if name not in ROUND2_PLANS:
            raise ValueError(f"unknown round-2 preset {name!r}; choose from {sorted(ROUND2_PLANS)}")
        try:
            out[name] = load_results(results_path(f"cifar/{name}.json"))
        except FileNotFoundError:
            out[name] = None
    return out


def round2_status(files: dict[str, dict | None]) -> list[dict]:
    """What each round-2 file holds against its planned grid (:data:`ROUND2_PLANS`).

    One row per preset: ``preset``, ``planned`` (runs: seeds x train fractions x each arm's lr grid),
    ``done`` (planned runs present, matched by arm, seed, fraction and the swept lr), ``missing``:
    ``{arm: number of its planned runs not present}`` for arms with any missing, and ``extra``:
    ``{arm: number of its runs outside the plan}`` (e.g. more seeds of some arms). ``r2_fitted`` /
    ``r2_scaling`` run A1 at a frame lr chosen on the command line, so for them only arm, seed and
    fraction are matched.
    """
    rows = []
    for preset, res in files.items():
        cfg = ROUND2_PLANS[preset]
        chosen_on_cli = not cfg.frame_lrs and not cfg.lrs  # one setting per arm, picked when run
        have = set()
        for h in (res or {}).get("runs", []):
            frac, seed, arm, lr, frame_lr = run_key(h)
            have.add((frac, seed, arm) if chosen_on_cli else (frac, seed, arm, lr, frame_lr))
        missing: dict[str, int] = {}
        plan = set()
        planned = done = 0
        for seed in cfg.seeds:
            for frac in cfg.train_fractions:
                for arm in cfg.arms:
                    label = arm_spec(arm).label
                    for lr, frame_lr in swept_lrs(cfg, arm):
                        key = ((float(frac), int(seed), label) if chosen_on_cli
                               else (float(frac), int(seed), label, lr, frame_lr))
                        planned += 1
                        plan.add(key)
                        if key in have:
                            done += 1
                        else:
                            missing[label] = missing.get(label, 0) + 1
        extra: dict[str, int] = {}
        for key in have - plan:
            extra[key[2]] = extra.get(key[2], 0) + 1
        rows.append({"preset": preset, "planned": planned, "done": done, "missing": missing, "extra": extra})
    return rows


def by_seed(runs: Sequence[dict], **fields: Any) -> dict[int, dict]:
    """The runs whose ``fields`` (e.g. ``arm="A1"``, ``frame_lr=0.1``) all match, keyed by seed.

    Raises ``ValueError`` when two matching runs share a seed (the fields do not pick one setting:
    add ``lr``, ``frame_lr`` or ``train_fraction``).
    """
    out: dict[int, dict] = {}
    for h in runs:
        if all(h.get(k) == v for k, v in fields.items()):
            if h["seed"] in out:
                raise ValueError(f"two runs with {fields} share seed {h['seed']}; add the field that "
                                 "tells them apart (lr, frame_lr or train_fraction)")
            out[h["seed"]] = h
    return out


def paired_family(pairs: Sequence[tuple[str, dict[int, dict], dict[int, dict]]], *,
                  value: Any = None, alpha: float = 0.05) -> list[dict]:
    """One table of paired comparisons ``b - a`` over common seeds, Holm-corrected as one family.

    Args:
        pairs: ``(label, a, b)`` with ``a``, ``b`` runs keyed by seed (:func:`by_seed`).
        value: the quantity of a run; default the test accuracy in percentage points.
        alpha: family-wise error rate of the Holm correction.

    Returns:
        Per pair: ``label``, ``seeds``, ``diffs`` (b - a per seed), ``n``, ``mean``, ``t_interval``
        (95% Student t, ``None`` below 2 seeds), ``median`` with ``median_low`` / ``median_high``
        and ``median_interval_name`` (``"range"`` at n <= 5, see :func:`stiefel_mini.experiments.stats.median_interval`),
        ``wins`` / ``losses`` / ``ties`` of ``b``, the exact two-sided ``p_sign`` and ``p_wilcoxon``,
        both Holm-corrected across the family (``p_sign_holm``, ``p_wilcoxon_holm``), and ``resolved``:
        both corrected p-values <= ``alpha``. A pair without common seeds has ``n = 0``, p-values 1
        and stays in the family (it was planned, so it counts in the correction).
    """
    value = value or (lambda h: 100.0 * h["test_acc"])
    rows = []
    for label, a, b in pairs:
        seeds = sorted(set(a) & set(b))
        row: dict[str, Any] = {"label": label, "seeds": seeds, "n": len(seeds), "diffs": [], "mean": None,
                               "t_interval": None, "median": None, "median_low": None, "median_high": None,
                               "median_interval_name": None, "wins": 0, "losses": 0, "ties": 0,
                               "p_sign": 1.0, "p_wilcoxon": 1.0}
        if seeds:
            c = compare([value(a[s]) for s in seeds], [value(b[s]) for s in seeds], lower_is_better=False)
            med = c["median_difference"]
            row.update(diffs=c["differences"], mean=float(np.mean(c["differences"])),
                       t_interval=c["mean_difference_t_interval"], median=med["median"],
                       median_low=med["low"], median_high=med["high"], median_interval_name=med["name"],
                       wins=c["wins"]["wins"], losses=c["wins"]["losses"], ties=c["wins"]["ties"],
                       p_sign=c["p_sign"], p_wilcoxon=c["p_wilcoxon"])
        rows.append(row)
    sign = holm([r["p_sign"] for r in rows], alpha)["adjusted"]
    wil = holm([r["p_wilcoxon"] for r in rows], alpha)["adjusted"]
    for r, ps, pw in zip(rows, sign, wil):
        r.update(p_sign_holm=ps, p_wilcoxon_holm=pw, resolved=bool(r["n"] and ps <= alpha and pw <= alpha))
    return rows


def fitted_check(runs: Sequence[dict]) -> list[dict]:
    """Has each setting fitted its training set? Training minus test accuracy, seed by seed.

    One row per (train fraction, arm, lr, frame lr) whose runs record ``train_acc`` (accuracy on a
    fixed un-augmented subset of the run's own training images): ``n_train``, ``seeds``,
    ``train_acc`` and ``test_acc`` (seed means), ``gaps_pp`` (train - test per seed, points),
    ``min_gap_pp`` and ``fitted`` (train above test on every seed). A model below that line has
    not learned what it was shown, and a comparison of optimisers on it says little.
    """
    rows = []
    for (fraction, arm, lr, frame_lr), group in _groups(list(runs)).items():
        seeds = sorted(s for s, h in group.items() if h.get("train_acc") is not None)
        if not seeds:
            continue
        gaps = [100.0 * (group[s]["train_acc"] - group[s]["test_acc"]) for s in seeds]
        rows.append({"train_fraction": fraction, "arm": arm, "lr": lr, "frame_lr": frame_lr,
                     "n_train": group[seeds[0]]["n_train"], "seeds": seeds,
                     "train_acc": float(np.mean([group[s]["train_acc"] for s in seeds])),
                     "test_acc": float(np.mean([group[s]["test_acc"] for s in seeds])),
                     "gaps_pp": gaps, "min_gap_pp": min(gaps), "fitted": min(gaps) > 0})
    return rows


def held_out_best(runs: Sequence[dict], baseline: str = "A0") -> list[dict]:
    """Best lr against best lr, with each seed's lr chosen on the *other* seeds (leave one seed out).

    :func:`best_lr_comparison` picks each arm's best lr on the seeds it then compares, which flatters
    whichever arm has the luckier maximum. Here, for each seed ``s``, every arm's lr is the one with
    the best mean accuracy over its runs on seeds other than ``s``, and the difference to
    ``baseline`` is measured on ``s`` alone. One row per (train fraction, arm != baseline) with
    ``seeds`` (those both arms ran at every grid value, at least 2), ``chosen`` (per seed,
    ``(arm value, baseline value)``), ``diffs_pp`` and ``diff_pp`` (their mean). An arm with fewer
    than 2 such seeds gets no row.
    """
    curves = lr_curves(list(runs))
    groups = _groups(list(runs))

    def table(fraction: float, arm: str, swept: str) -> dict[float, dict[int, dict]]:
        out: dict[float, dict[int, dict]] = {}
        for (f, a, lr, frame_lr), g in groups.items():
            if f == fraction and a == arm and (frame_lr is not None) == (swept == "frame_lr"):
                out[frame_lr if swept == "frame_lr" else lr] = g
        return out

    def complete(t: dict[float, dict[int, dict]]) -> set[int]:
        return set.intersection(*(set(g) for g in t.values())) if t else set()

    def pick(t: dict[float, dict[int, dict]], seeds: list[int]) -> float:
        return max(t, key=lambda v: float(np.mean([t[v][s]["test_acc"] for s in seeds])))

    rows = []
    for base in (c for c in curves if c["arm"] == baseline):
        bt = table(base["train_fraction"], baseline, base["swept"])
        for other in (c for c in curves if c["train_fraction"] == base["train_fraction"] and c["arm"] != baseline):
            ot = table(other["train_fraction"], other["arm"], other["swept"])
            seeds = sorted(complete(bt) & complete(ot))
            if len(seeds) < 2:
                continue
            chosen, diffs = [], []
            for s in seeds:
                rest = [t for t in seeds if t != s]
                vo, vb = pick(ot, rest), pick(bt, rest)
                chosen.append((vo, vb))
                diffs.append(100.0 * (ot[vo][s]["test_acc"] - bt[vb][s]["test_acc"]))
            rows.append({"train_fraction": base["train_fraction"], "arm": other["arm"], "seeds": seeds,
                         "chosen": chosen, "diffs_pp": diffs, "diff_pp": float(np.mean(diffs))})
    return rows


# ----------------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------------


def repro_record(cfg: CifarConfig = PRESETS["repro"]) -> dict:
    """Run ``cfg`` (the ``repro`` preset) on the tiny synthetic set, written to a temporary folder.

    Saves ``{"provenance", "tiny_set", "history"}`` to ``cfg.out`` when set and returns it.
    """
    with tempfile.TemporaryDirectory() as tmp:
        root = cifar_data.write_tiny_image_folder(Path(tmp) / "tiny", **REPRO_TINY_SET)
        os.environ[cifar_data.ENV_CACHE_DIR] = str(Path(tmp) / "cache")  # keep ~/.cache free of tiny sets
        try:
            history = run(dataclasses.replace(cfg, data_dir=str(root)))
        finally:
            del os.environ[cifar_data.ENV_CACHE_DIR]
    payload = {"provenance": provenance(cfg, cfg.seeds), "tiny_set": REPRO_TINY_SET, "history": history}
    if cfg.out:
        save_results(cfg.out, payload)
    return payload


def tiny_set_run(cfg: CifarConfig) -> dict:
    """``cfg`` (its arm, seed, lrs, model) for ``cfg.repro_steps`` steps on the tiny synthetic set.

    All of the set trains and scores (train fraction 1, no train-accuracy subset, eval only at the
    end), on the CPU with one thread; the history records ``repro_steps``. The reproduction record of
    a round-2 file: it checks the code and settings the file was made with, anywhere, without data.
    """
    short = dataclasses.replace(cfg, train_fraction=1.0, steps=cfg.repro_steps, train_eval_size=0, test_size=0,
                                eval_every=0, progress=False, device="cpu", threads=1, out=None)
    with tempfile.TemporaryDirectory() as tmp:
        root = cifar_data.write_tiny_image_folder(Path(tmp) / "tiny", **REPRO_TINY_SET)
        os.environ[cifar_data.ENV_CACHE_DIR] = str(Path(tmp) / "cache")
        try:
            history = run(dataclasses.replace(short, data_dir=str(root)))
        finally:
            del os.environ[cifar_data.ENV_CACHE_DIR]
    return {**history, "repro_steps": cfg.repro_steps}


def main(argv: Sequence[str] | None = None) -> dict:
    """``--preset NAME`` (cpu, gpu, repro, live, r2_*; default cpu), then ``--field value`` overrides."""
    argv = list(sys.argv[1:] if argv is None else argv)
    cfg, _, preset = parse_cli(CifarConfig, argv, presets=PRESETS, default_preset="cpu",
                               usage="python -m stiefel_mini.experiments.cifar [--preset NAME] [--field value ...]")
    if preset == "repro":
        return repro_record(cfg)
    try:
        payload = sweep(cfg)
    except (FileNotFoundError, ValueError) as err:  # no data, or a results file of other settings
        raise SystemExit(str(err)) from None
    for row in payload["summary"]:
        diff = f"{row['diff_pp']:+6.2f} pp, wins {row['wins']}/{row['n_pairs']}" if "diff_pp" in row else ""
        lrs = f"lr {row['lr']:g}" + ("" if row["frame_lr"] is None else f" frame_lr {row['frame_lr']:g}")
        print(f"frac {row['train_fraction']:<5} {row['arm']:<3} {lrs:<24} acc {100 * row['acc_mean']:5.2f}%  {diff}")
    return payload


if __name__ == "__main__":
    cli(main)
