"""One CIFAR-10 run: a patch ViT trained under one arm from one paired start, with its measurements.

A patch transformer (:class:`stiefel_mini.vit.PatchViT`) is trained on CIFAR-10 under an arm of
:data:`stiefel_mini.experiments.arms.ARMS`. Starts are paired: for a given seed, every arm begins
from the same weights (the attention module initialises Q/K as random frames whether or not it
constrains them) and sees the same training subset, batch order and augmentation.

Measured per run: test accuracy and loss, train accuracy, the per-step Frobenius norm of the change
of the Q/K weights ||W_{t+1} - W_t||_F (all blocks together), their drift from initialisation
||W_T - W_0||_F / ||W_0||_F, the orthogonality error of the final Q/K, and the largest attention
logit and the attention entropy along training (on the current batch at every log point, and per
block on 256 fixed test images at each evaluation).
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
import torch.nn.functional as F

from stiefel_mini.attention import entropy
from stiefel_mini.experiments.arms import Arm, arm_spec, make_optimizer, optimizer_options
from stiefel_mini.experiments.cifar import data as cifar_data
from stiefel_mini.experiments.cifar.config import CifarConfig
from stiefel_mini.experiments.runtime import generator, progress, set_threads, stream_seed
from stiefel_mini.geometry import orthogonality_error
from stiefel_mini.vit import PatchViT

__all__ = ["resolve_device", "stream", "build_model", "train_indices", "fixed_subset", "lr_factor", "evaluate",
           "train_step", "attention_stats", "qk_vector", "run"]


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
    m = cfg.model
    return PatchViT(patch_size=m.patch_size, d_model=m.d_model, depth=m.depth, n_heads=m.n_heads, d_head=m.d_head,
                    mlp_ratio=m.mlp_ratio, **spec.module_flags(m.logit_scale))


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
    """One optimizer step on uint8 images ``x`` (B, 3, 32, 32) and labels ``y`` (B,); returns the loss.

    The forward pass runs under bf16 autocast when ``autocast``; the loss, the gradients and the
    optimizer's arithmetic stay in float32 (the weights are float32).
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
        data: CIFAR-10 tensors; loaded from ``cfg.data.data_dir`` when None.

    Returns:
        A JSON-ready dict: the run's keys, final ``test_acc`` / ``test_loss`` / ``train_acc``,
        ``qk_step_mean`` (mean over steps of ||W_{t+1} - W_t||_F over all Q/K weights),
        ``qk_drift`` (||W_T - W_0||_F / ||W_0||_F), ``orth_error`` (mean over heads of
        ||W^T W - I||_F at the end), the training-loss curve and periodic test evaluations.
    """
    if not isinstance(cfg, CifarConfig):
        raise TypeError(f"run takes one run's CifarConfig, got {type(cfg).__name__}; a plan (CifarSweep) "
                        "holds its run as .run")
    sched, machine = cfg.schedule, cfg.machine
    set_threads(machine.threads)
    device = resolve_device(machine.device)
    if data is None:
        data = cifar_data.load_cifar10(cfg.data.data_dir)
    spec = arm_spec(cfg.arm)
    code = spec.label

    model = build_model(cfg, spec).to(device)
    optimizer = make_optimizer(model, spec, **optimizer_options(cfg.optimizer))
    # One generator drives subset-independent randomness of training: batch order and augmentation.
    if cfg.seeding == "v0":
        torch.manual_seed(cfg.seed)  # so that what runs after this in the process draws as for the v0 files
    gen = stream(cfg, "batches")

    idx = train_indices(data.train_y, cfg.train_fraction, stream(cfg, "subset"))
    train_x, train_y = data.train_x[idx].to(device), data.train_y[idx].to(device)
    eval_idx = (fixed_subset(train_y.cpu(), cfg.data.train_eval_size, stream(cfg, "fixed"))
                if cfg.data.train_eval_size > 0 else None)
    test_idx = fixed_subset(data.test_y, cfg.data.test_size, stream(cfg, "fixed"))
    test_x, test_y = data.test_x[test_idx], data.test_y[test_idx]

    steps_per_epoch = max(1, train_x.shape[0] // sched.batch_size)
    total = sched.steps if sched.steps > 0 else steps_per_epoch * sched.epochs
    warmup = int(round(sched.warmup_share * total if sched.warmup_share is not None
                       else sched.warmup_epochs * steps_per_epoch))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, total, warmup))
    autocast = machine.bf16 and device.type == "cuda"

    qk0 = qk_vector(model)
    history: dict[str, Any] = {
        "arm": code, "arm_name": spec.name, "seed": cfg.seed, "train_fraction": cfg.train_fraction,
        "n_train": int(train_x.shape[0]), "n_test": int(test_x.shape[0]), "steps_total": total,
        "lr": cfg.optimizer.lr,
        "frame_lr": cfg.optimizer.frame_lr if spec.qk in ("stiefel", "adamw_polar") else None,
        "step": [], "train_loss": [], "qk_step": [], "max_logit": [], "attn_entropy": [], "evals": [],
    }
    probe_x = cifar_data.normalize(test_x[:256].to(device))  # fixed images for attention statistics

    def attention_eval(epoch: int) -> dict:
        acc, tl = evaluate(model, test_x, test_y, device, machine.bf16)
        return {"epoch": epoch, "step": step, "test_acc": acc, "test_loss": tl, **attention_stats(model, probe_x)}

    # Running sums stay on the device and are read only at log points (no per-step host sync).
    loss_sum = torch.zeros((), device=device)
    step_sum = torch.zeros((), device=device)
    step_sum_all = torch.zeros((), device=device)
    window = 0
    start_time = time.perf_counter()
    bar = progress(total=total, desc=f"{code} seed {cfg.seed} frac {cfg.train_fraction}", enabled=machine.progress,
                   leave=False)
    step, epoch = 0, 0
    while step < total:
        for batch in cifar_data.epoch_batches(train_x.shape[0], sched.batch_size, gen):
            before = qk_vector(model)
            batch = batch.to(device)
            loss = train_step(model, optimizer, train_x[batch], train_y[batch], gen, cfg.data.augment, autocast)
            scheduler.step()
            qk_step = torch.linalg.vector_norm(qk_vector(model) - before)
            loss_sum += loss
            step_sum += qk_step
            step_sum_all += qk_step
            window += 1
            step += 1
            bar.update()
            if step % sched.log_every == 0 or step == total:
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
        if sched.eval_every and epoch % sched.eval_every == 0 and step < total:
            history["evals"].append(attention_eval(epoch))
    bar.close()
    train_seconds = time.perf_counter() - start_time

    final = attention_eval(epoch)
    history["evals"].append(final)
    history["test_acc"], history["test_loss"] = final["test_acc"], final["test_loss"]
    history["max_logit_final"], history["attn_entropy_final"] = final["max_logit"], final["entropy"]
    if eval_idx is not None:
        history["train_acc"], history["train_eval_loss"] = evaluate(
            model, train_x[eval_idx.to(device)], train_y[eval_idx.to(device)], device, machine.bf16
        )
    qk = qk_vector(model)
    history["qk_step_mean"] = step_sum_all.item() / max(1, total)
    history["qk_drift"] = (torch.linalg.vector_norm(qk - qk0) / torch.linalg.vector_norm(qk0)).item()
    history["orth_error"] = float(
        torch.cat([orthogonality_error(p.detach().float()).flatten() for p in model.qk_parameters()]).mean()
    )
    history["train_seconds"] = train_seconds
    history["images_per_second"] = total * sched.batch_size / train_seconds
    return history
