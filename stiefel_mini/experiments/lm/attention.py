"""QK-norm for the study's GPT-2, and what its attention does: the largest logit and the lowest entropy.

:func:`add_qk_norm` wraps each block's Q|K|V projection (``attn.c_attn``) in :class:`QKNorm`, which
RMS-normalises every head's query and key over the head dimension, with a learned gain per head
dimension (as OLMo 2 and Gemma 3 do), so the model's own attention code runs on unchanged.
:func:`attention_stats` reads each block's projected queries and keys on an evaluation batch and
returns the largest pre-softmax logit and the lowest mean attention entropy over layers and heads;
:func:`uniform_entropy` is that entropy when attention does not prefer any position.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = ["QKNorm", "add_qk_norm", "attention_stats", "uniform_entropy"]


class QKNorm(nn.Module):
    r"""``[q | k | v] -> [g_q * q / rms(q) | g_k * k / rms(k) | v]`` per head, after the projection ``proj``.

    ``rms(x) = sqrt(mean_j x_j^2 + eps)`` over each head's ``head_dim`` entries; the gains ``g_q``,
    ``g_k`` ``(head_dim,)`` start at 1 and are shared by the heads, as in OLMo 2's and Gemma 3's
    QK-norm. With the model's ``1 / sqrt(d_head)`` scale a logit then starts at most
    ``sqrt(d_head)`` in size, and the gains learn how sharp attention gets.

    Shapes: ``(..., d)`` -> ``(..., 3 d)`` (``proj``'s output, Q|K|V in that order, heads contiguous).
    Reference: Henry et al. (2020), "Query-key normalization for transformers"; OLMo 2 (2024).
    """

    def __init__(self, proj: nn.Module, n_head: int, head_dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.proj, self.n_head, self.head_dim, self.eps = proj, n_head, head_dim, eps
        self.q_gain = nn.Parameter(torch.ones(head_dim))
        self.k_gain = nn.Parameter(torch.ones(head_dim))

    def _norm(self, x: Tensor, gain: Tensor) -> Tensor:
        x = x.unflatten(-1, (self.n_head, self.head_dim))  # (..., H, dh)
        x = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.eps) * gain
        return x.flatten(-2)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.proj(x).split(self.n_head * self.head_dim, dim=-1)
        return torch.cat([self._norm(q, self.q_gain), self._norm(k, self.k_gain), v], dim=-1)


def add_qk_norm(model: nn.Module) -> nn.Module:
    """Wrap every GPT-2 block's ``attn.c_attn`` of a Hugging Face ``GPT2LMHeadModel`` in :class:`QKNorm`, in place."""
    cfg = model.config
    for block in model.transformer.h:
        block.attn.c_attn = QKNorm(block.attn.c_attn, cfg.n_head, cfg.n_embd // cfg.n_head)
    return model


@torch.no_grad()
def attention_stats(model: nn.Module, x: Tensor) -> dict[str, float]:
    r"""``{"max_logit", "min_entropy"}`` of a GPT-2's attention on input ids ``x`` ``(B, T)``.

    For each block the queries and keys are read off ``attn.c_attn``'s output (after any QK-norm or
    learned frame scale, which live in that module) and the causal logits
    ``s_ij = q_i . k_j / sqrt(d_head)``, ``j <= i``, formed per head. ``max_logit``: the largest
    ``|s_ij|``; ``min_entropy``: the lowest, over layers and heads, of the mean over queries
    ``i >= 1`` and windows of ``-sum_j p_ij ln p_ij`` (nats), ``p_i = softmax_j(s_ij)``.
    """
    cfg = model.config
    H, d = cfg.n_head, cfg.n_embd // cfg.n_head
    outs: list[Tensor] = []
    hooks = [b.attn.c_attn.register_forward_hook(lambda m, i, o: outs.append(o)) for b in model.transformer.h]
    was = model.training
    model.eval()
    try:
        model(input_ids=x)
    finally:
        model.train(was)
        for h in hooks:
            h.remove()
    T = x.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    max_logit, min_entropy = 0.0, math.inf
    for o in outs:
        q, k, _ = o.split(H * d, dim=-1)
        q, k = (t.unflatten(-1, (H, d)).transpose(1, 2) for t in (q, k))  # (B, H, T, dh)
        s = q @ k.mT / math.sqrt(d)  # (B, H, T, T)
        max_logit = max(max_logit, s.masked_fill(~causal, 0.0).abs().max().item())
        logp = s.masked_fill(~causal, -math.inf).log_softmax(-1)
        ent = -(logp.exp() * logp.masked_fill(~causal, 0.0)).sum(-1)  # (B, H, T)
        min_entropy = min(min_entropy, ent[..., 1:].mean(dim=(0, 2)).min().item())
    return {"max_logit": max_logit, "min_entropy": min_entropy}


def uniform_entropy(context: int) -> float:
    r"""The ``min_entropy`` of :func:`attention_stats` for attention spread evenly over the positions
    each query may see: ``(1 / (T - 1)) sum_{i=2}^{T} ln i`` nats, ``T = context``.

    Query ``i`` (from 1) sees ``i`` positions, and ``ln i`` is the largest entropy a distribution over
    them can have; the mean leaves out the first query, which sees one position, as
    :func:`attention_stats` does. So no head of a model with windows of ``T`` tokens reads above it.
    """
    if context < 2:
        raise ValueError(f"context must be at least 2 (the first query is left out of the mean); got {context}")
    return math.lgamma(context + 1) / (context - 1)
