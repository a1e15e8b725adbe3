"""One attention layer on real image patches: Stiefel frames, the constraint off, and QK-norm.

The tokens are 4x4 RGB patches of a real photograph that ships with matplotlib (Grace Hopper,
``matplotlib.cbook.get_sample_data("grace_hopper.jpg")``), so the example runs offline anywhere
matplotlib is installed. Each token is the 48 normalised pixel values of its patch followed by 16
fixed 2-D sinusoidal position features (``d_model = 64``); there is no learned embedding, so the
token norms are set by the data alone.

The task is masked-patch reconstruction: a quarter of the patches have their pixels zeroed (their
position features stay) and the layer must predict the pixels from the other patches. One
:class:`~stiefel_mini.attention.StiefelSelfAttention` does the work; its output's first 48 entries
are the prediction. Arms (names of :data:`stiefel_mini.experiments.arms.ARMS`), all from the same
initial weights and batches, no weight decay:

* ``"stiefel"``: Q/K frames, fixed scale ``1/sqrt(d_head)``, trained with StiefelAdam;
* ``"stiefel_learned"``: Q/K frames with ``logit_scale="learned"`` (a per-head temperature);
* ``"adamw"``: the same module with ``stiefel=False`` (unconstrained Q/K), trained with AdamW;
* ``"qknorm"``: :class:`~stiefel_mini.attention.QKNormSelfAttention`, AdamW.

``run(cfg) -> history`` trains ``cfg.arm``; ``sweep(cfg)`` trains every arm of ``cfg.arms`` and
returns the trained modules with their loss curves.
CLI: ``python -m stiefel_mini.experiments.patch_attention --steps 200``.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from stiefel_mini.attention import StiefelSelfAttention, make_attention
from stiefel_mini.experiments.arms import arm_spec, make_optimizer
from stiefel_mini.experiments.runner import cli, parse_cli
from stiefel_mini.experiments.records import provenance, save_results
from stiefel_mini.experiments.runtime import generator, progress, set_threads

__all__ = ["PatchConfig", "sample_image", "position_features", "patch_tokens", "random_crops",
           "mask_tokens", "build_attention", "masked_loss", "run", "sweep", "main"]

PIXELS = 48  # 4 x 4 x 3


@dataclass
class PatchConfig:
    """One run (``arm``) and the sweep's arms (``arms``), same weights and batches for all."""

    arm: str = "stiefel"
    arms: tuple[str, ...] = ("stiefel", "stiefel_learned", "adamw", "qknorm")
    crop: int = 32  # side of the crops, in pixels of the downsampled image
    downsample: int = 4  # the 600 x 512 photograph becomes 150 x 128
    n_heads: int = 4
    d_head: int = 8
    mask_frac: float = 0.25
    steps: int = 200
    batch_size: int = 32
    lr: float = 3e-3  # AdamW (free, qknorm, and V / output weights everywhere)
    frame_lr: float = 0.05  # StiefelAdam frames
    seed: int = 0
    threads: int | None = 1
    progress: bool = False


def sample_image(downsample: int = 4) -> Tensor:
    """The Grace Hopper photograph shipped with matplotlib, ``(H, W, 3)`` floats in [0, 1],
    averaged over ``downsample x downsample`` blocks."""
    import matplotlib.cbook as cbook
    import matplotlib.image as mimage

    with cbook.get_sample_data("grace_hopper.jpg") as fh:
        img = torch.from_numpy(mimage.imread(fh, format="jpg").copy()).float() / 255.0  # (600, 512, 3)
    if downsample > 1:
        img = F.avg_pool2d(img.permute(2, 0, 1)[None], downsample)[0].permute(1, 2, 0)
    return img.contiguous()


def position_features(grid: int, n_freq: int = 4, scale: float = 1.0) -> Tensor:
    """Fixed 2-D sinusoidal features of a ``grid x grid`` layout: ``(grid*grid, 4 n_freq)``; each
    token's features have norm ``scale * sqrt(2 n_freq)``."""
    pos = torch.arange(grid, dtype=torch.float32)
    freqs = math.pi * 2.0 ** torch.arange(n_freq, dtype=torch.float32) / grid
    ang = pos[:, None] * freqs[None]  # (grid, n_freq)
    one = torch.cat([ang.sin(), ang.cos()], dim=-1)  # (grid, 2 n_freq)
    rows = one[:, None, :].expand(grid, grid, -1)
    cols = one[None, :, :].expand(grid, grid, -1)
    return scale * torch.cat([rows, cols], dim=-1).reshape(grid * grid, 4 * n_freq)


def patch_tokens(crops: Tensor, patch: int = 4) -> Tensor:
    """Crops ``(B, S, S, 3)`` in [0, 1] -> tokens ``(B, T, 48 + 16)``: normalised pixels, then position.

    Pixels are centred at 0.5 and scaled by 2 (so in [-1, 1]); tokens are in row-major patch order.
    """
    B, S, _, C = crops.shape
    g = S // patch
    x = crops.reshape(B, g, patch, g, patch, C).permute(0, 1, 3, 2, 4, 5).reshape(B, g * g, patch * patch * C)
    x = 2.0 * (x - 0.5)
    pos = position_features(g).to(x.dtype).expand(B, -1, -1)
    return torch.cat([x, pos], dim=-1)


def random_crops(img: Tensor, n: int, size: int, generator: torch.Generator) -> Tensor:
    """``n`` random ``size x size`` crops of ``img`` ``(H, W, 3)``, half of them mirrored."""
    H, W, _ = img.shape
    ys = torch.randint(0, H - size + 1, (n,), generator=generator)
    xs = torch.randint(0, W - size + 1, (n,), generator=generator)
    flip = torch.rand(n, generator=generator) < 0.5
    out = torch.stack([img[y:y + size, x:x + size] for y, x in zip(ys.tolist(), xs.tolist())])
    out[flip] = out[flip].flip(2)
    return out


def build_attention(arm: str, cfg: PatchConfig, d_model: int) -> StiefelSelfAttention:
    """The attention module of ``arm`` (its module flags), with weights from the ``"init"`` stream of
    ``cfg.seed`` through ``reset_parameters(generator)``: the same start for every arm."""
    spec = arm_spec(arm)
    if spec.qk == "none":
        raise ValueError(f"arm {spec.name} removes the attention; the task needs it")
    attn = make_attention(d_model, cfg.n_heads, cfg.d_head, **spec.module_flags())
    attn.reset_parameters(generator(cfg.seed, "init"))
    return attn


def mask_tokens(tokens: Tensor, frac: float, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Zero the pixels of a random ``frac`` of the tokens; returns (masked tokens, mask ``(B, T)``)."""
    mask = torch.rand(tokens.shape[:2], generator=generator) < frac
    x = tokens.clone()
    x[..., :PIXELS] = x[..., :PIXELS].masked_fill(mask[..., None], 0.0)
    return x, mask


def masked_loss(attn: StiefelSelfAttention, tokens: Tensor, mask: Tensor, masked: Tensor) -> Tensor:
    """Mean squared error of the predicted pixels (first 48 outputs) on the masked tokens."""
    pred = attn(masked)[..., :PIXELS]
    err = (pred - tokens[..., :PIXELS]).pow(2).mean(-1)  # (B, T)
    return (err * mask).sum() / mask.sum().clamp_min(1)


def run(cfg: PatchConfig, image: Tensor | None = None) -> dict[str, Any]:
    """Train ``cfg.arm`` on the batches of the ``"batches"`` stream of ``cfg.seed``.

    Returns ``{"module", "init", "loss", "loss_steps", "wall_time_s"}``: the trained module, a copy
    before training, and the training loss every 10 steps. ``image``: :func:`sample_image` of
    ``cfg.downsample`` (loaded when ``None``).
    """
    set_threads(cfg.threads)
    img = sample_image(cfg.downsample) if image is None else image
    d_model = PIXELS + 16
    t0 = time.perf_counter()
    attn = build_attention(cfg.arm, cfg, d_model)
    init = build_attention(cfg.arm, cfg, d_model)
    opt = make_optimizer(attn, cfg.arm, lr=cfg.lr, frame_lr=cfg.frame_lr, weight_decay=0.0)
    gen = generator(cfg.seed, "batches")
    losses = []
    for step in progress(range(cfg.steps), desc=cfg.arm, enabled=cfg.progress):
        tokens = patch_tokens(random_crops(img, cfg.batch_size, cfg.crop, gen))
        masked, mask = mask_tokens(tokens, cfg.mask_frac, gen)
        loss = masked_loss(attn, tokens, mask, masked)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 10 == 0:
            losses.append(loss.item())
    return {"module": attn.eval(), "init": init.eval(), "loss": losses,
            "loss_steps": list(range(0, cfg.steps, 10)), "wall_time_s": time.perf_counter() - t0}


def sweep(cfg: PatchConfig) -> dict[str, Any]:
    """:func:`run` every arm of ``cfg.arms`` on the same batches. Returns ``{"config", "image",
    "modules", "init", "loss", "loss_steps", "wall_time_s"}`` with ``modules[arm]``, ``init[arm]`` and
    ``loss[arm]`` from the arm's run."""
    for arm in cfg.arms:
        arm_spec(arm)
    img = sample_image(cfg.downsample)
    out: dict[str, Any] = {"config": cfg, "image": img, "modules": {}, "init": {}, "loss": {},
                           "loss_steps": list(range(0, cfg.steps, 10))}
    t0 = time.perf_counter()
    for arm in cfg.arms:
        h = run(replace(cfg, arm=arm), img)
        out["modules"][arm], out["init"][arm], out["loss"][arm] = h["module"], h["init"], h["loss"]
    out["wall_time_s"] = time.perf_counter() - t0
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """CLI: ``[--out PATH] [--field value ...]``; runs the sweep, prints the losses, and writes the loss
    curves with their provenance to ``PATH`` if given."""
    cfg, out, _ = parse_cli(PatchConfig, list(sys.argv[1:] if argv is None else argv),
                            usage="python -m stiefel_mini.experiments.patch_attention [--out PATH] [--field value ...]")
    h = sweep(cfg)
    for arm, losses in h["loss"].items():
        print(f"{arm:16s} loss {losses[0]:.4f} -> {sum(losses[-3:]) / 3:.4f}")
    print(f"({h['wall_time_s']:.1f} s)")
    if out:
        save_results(out, {"experiment": "patch_attention", "provenance": provenance(cfg, [cfg.seed]),
                           "loss": h["loss"], "loss_steps": h["loss_steps"], "wall_time_s": h["wall_time_s"]})
        print(f"wrote {out}")
    return h


if __name__ == "__main__":
    cli(main)
