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
best learning rate are compared by :mod:`stiefel_mini.evidence`, which also reads the runs
(:mod:`stiefel_mini.evidence.runs`: ``by_seed``, ``lr_curves``, ``fitted_check``, ``held_out_best``,
imported here for the sweep and for readers of this module).

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
from stiefel_mini.evidence.runs import by_seed, fitted_check, groups, held_out_best, lr_curves, run_key
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


def _mean(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else None


def merge_results(results: Sequence[dict]) -> dict:
    """One sweep payload from sweeps of the same settings run in parallel into separate files.

    The runs are concatenated in order (a run whose :func:`run_key` is in several files raises
    ``ValueError``) and the summary recomputed; ``provenance`` and ``repro`` are the first file's, and
    every other file's provenance, with the earlier invocations of each, go to
    ``provenance_previous``. Files of other settings raise ``ValueError`` naming the fields.
    """
    if not results:
        raise ValueError("merge_results needs at least one results payload")
    first = results[0]
    runs, seen, previous = [], set(), list(first.get("provenance_previous", []))
    for res in results:
        if res["settings"] != first["settings"]:
            changed = sorted(k for k in set(res["settings"]) | set(first["settings"])
                             if res["settings"].get(k) != first["settings"].get(k))
            raise ValueError(f"results of other settings cannot be merged (fields {changed})")
        for h in res["runs"]:
            if run_key(h) in seen:
                raise ValueError(f"run {run_key(h)} is in more than one file")
            seen.add(run_key(h))
            runs.append(h)
        if res is not first:
            previous += [*res.get("provenance_previous", []), res["provenance"]]
    return {**first, "runs": runs, "summary": summary_table(runs), "provenance_previous": previous}


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

    This is the ``summary`` a sweep stores in its file, kept in the format of the files already
    written; the book's comparisons and verdicts are computed by :mod:`stiefel_mini.evidence`.
    """
    grouped = groups(runs)
    rows = []
    for (fraction, arm, lr, frame_lr), by_seed in grouped.items():
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
        base_runs = next((g for (f, a, blr, _), g in grouped.items() if f == fraction and a == baseline and blr == lr),
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


# ----------------------------------------------------------------------------------------------------
# Reading round-2 files for the chapter: what has run
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
