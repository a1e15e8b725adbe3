"""A small vision transformer on image patches, built from ``StiefelSelfAttention``.

Reference: Dosovitskiy et al., "An Image is Worth 16x16 Words" (ICLR 2021), with pre-norm blocks
and mean pooling over the patch tokens instead of a class token (fewer moving parts, the same
accuracy at this size).
"""

from __future__ import annotations

import torch
from torch import nn

from stiefel_mini.attention import StiefelSelfAttention, make_attention
from stiefel_mini.groups import qk_parameters

__all__ = ["Block", "PatchViT"]


class Block(nn.Module):
    """Pre-norm transformer block: x + Attn(LN(x)), then x + MLP(LN(x)).

    Shapes: (B, T, d_model) -> (B, T, d_model).
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int | None, mlp_ratio: int, **attention_flags):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = make_attention(d_model, n_heads, d_head, **attention_flags)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, mlp_ratio * d_model),
            nn.GELU(),
            nn.Linear(mlp_ratio * d_model, d_model),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PatchViT(nn.Module):
    """Vision transformer on non-overlapping ``patch_size`` patches, for 10-way classification.

    logits = head(LN(mean_t blocks(embed(patches) + pos)))

    Args:
        image_size: side of the square input (32 for CIFAR).
        patch_size: patch side; 8 gives 16 tokens on 32x32 images, 4 gives 64.
        d_model, depth, n_heads, d_head, mlp_ratio: transformer sizes (``d_head`` defaults to
            ``d_model // n_heads``).
        stiefel: make every block's Q/K projections Stiefel frames (``StiefelSelfAttention``);
            False keeps them ordinary weights with the same initialisation.
        logit_scale, train_qk, qk_norm: passed to :func:`~stiefel_mini.attention.make_attention`
            (``qk_norm``: QK-norm attention, which has a learned gain and no frames, so
            ``stiefel=True`` or ``logit_scale="fixed"`` with it raises ``ValueError``;
            ``train_qk=False``: frozen random Q/K). ``logit_scale`` defaults to ``"fixed"``, or
            ``"learned"`` with ``qk_norm``.

    Shapes: (B, 3, image_size, image_size) float -> (B, n_classes) logits.
    """

    def __init__(
        self,
        *,
        image_size: int = 32,
        patch_size: int = 8,
        in_channels: int = 3,
        n_classes: int = 10,
        d_model: int = 128,
        depth: int = 4,
        n_heads: int = 4,
        d_head: int | None = None,
        mlp_ratio: int = 4,
        stiefel: bool = False,
        logit_scale: str | None = None,
        train_qk: bool = True,
        qk_norm: bool = False,
    ):
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"patch_size {patch_size} must divide image_size {image_size}")
        self.patch_size = patch_size
        n_tokens = (image_size // patch_size) ** 2
        self.embed = nn.Linear(in_channels * patch_size * patch_size, d_model)
        self.pos = nn.Parameter(torch.randn(1, n_tokens, d_model) * 0.02)
        self.blocks = nn.ModuleList(
            Block(d_model, n_heads, d_head, mlp_ratio, stiefel=stiefel, logit_scale=logit_scale, train_qk=train_qk,
                  qk_norm=qk_norm)
            for _ in range(depth)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, n_classes)

    def patches(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, T, C * p * p) with T = (H / p) * (W / p), row-major over patches."""
        b, c, h, w = x.shape
        p = self.patch_size
        x = x.reshape(b, c, h // p, p, w // p, p)  # (B, C, H/p, p, W/p, p)
        x = x.permute(0, 2, 4, 1, 3, 5)  # (B, H/p, W/p, C, p, p)
        return x.reshape(b, (h // p) * (w // p), c * p * p)  # (B, T, C p p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(self.patches(x)) + self.pos  # (B, T, d_model)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(dim=1))  # (B, n_classes)

    def attention_modules(self) -> list[StiefelSelfAttention]:
        """The attention module of every block, first to last."""
        return [block.attn for block in self.blocks]

    def qk_parameters(self) -> list[nn.Parameter]:
        """Every block's Q and K weights, each (n_heads, d_model, d_head)."""
        return list(qk_parameters(self))
