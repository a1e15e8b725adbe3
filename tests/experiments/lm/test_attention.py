"""QK-norm against a hand computation; the attention statistics on a model with a known answer."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from stiefel_mini.experiments.lm.attention import QKNorm, attention_stats, uniform_entropy


def test_qk_norm_normalises_each_head_of_q_and_k_and_keeps_v():
    proj = nn.Linear(6, 3 * 4)
    qkn = QKNorm(proj, n_head=2, head_dim=2, eps=0.0)
    with torch.no_grad():
        qkn.q_gain.copy_(torch.tensor([2.0, 3.0]))
    x = torch.randn(5, 6)
    out, raw = qkn(x), proj(x)
    q = raw[:, :4].reshape(5, 2, 2)
    want_q = q / q.square().mean(-1, keepdim=True).sqrt() * torch.tensor([2.0, 3.0])
    torch.testing.assert_close(out[:, :4], want_q.reshape(5, 4))
    k = raw[:, 4:8].reshape(5, 2, 2)
    torch.testing.assert_close(out[:, 4:8], (k / k.norm(dim=-1, keepdim=True) * math.sqrt(2)).reshape(5, 4))
    torch.testing.assert_close(out[:, 8:], raw[:, 8:])


class _Attn(nn.Module):
    def __init__(self, out):
        super().__init__()
        self.c_attn = _Const(out)


class _Const(nn.Module):
    def __init__(self, out):
        super().__init__()
        self.out = out

    def forward(self, x):
        return self.out


class _Model(nn.Module):
    """A stand-in GPT-2 whose one block's c_attn returns fixed q, k, v."""

    def __init__(self, out, n_head, d):
        super().__init__()
        self.config = type("C", (), {"n_head": n_head, "n_embd": n_head * d})()
        block = nn.Module()
        block.attn = _Attn(out)
        self.transformer = nn.Module()
        self.transformer.h = nn.ModuleList([block])

    def forward(self, input_ids):
        for b in self.transformer.h:
            b.attn.c_attn(input_ids)


def test_attention_stats_known_answer():
    # One head, d = 4, T = 3: q_i = k_j = c e_1 gives every logit c^2 / 2 and uniform causal attention,
    # so the entropy of query i is ln(i + 1): mean over queries 1, 2 = (ln 2 + ln 3) / 2.
    c = 3.0
    q = torch.zeros(1, 3, 4)
    q[..., 0] = c
    out = torch.cat([q, q, torch.zeros(1, 3, 4)], dim=-1)
    stats = attention_stats(_Model(out, 1, 4), torch.zeros(1, 3, dtype=torch.long))
    assert stats["max_logit"] == pytest.approx(c * c / 2)
    assert stats["min_entropy"] == pytest.approx((math.log(2) + math.log(3)) / 2)
    # A sharp head: key 0 far above the others for every query -> entropy near 0 (the minimum over heads).
    k = torch.zeros(1, 3, 4)
    k[0, 0, 0] = 40.0
    out = torch.cat([torch.cat([q, q], -1), torch.cat([k, q], -1), torch.zeros(1, 3, 8)], dim=-1)
    stats = attention_stats(_Model(out, 2, 4), torch.zeros(1, 3, dtype=torch.long))
    assert stats["min_entropy"] < 1e-6 and stats["max_logit"] == pytest.approx(c * 40 / 2)


def test_uniform_entropy_is_what_attention_stats_reads_for_equal_logits_and_bounds_any_head():
    assert uniform_entropy(3) == pytest.approx((math.log(2) + math.log(3)) / 2)
    T = 7
    flat = torch.zeros(2, T, 3 * 4)  # q = k = 0: every logit 0, each query uniform over what it sees
    stats = attention_stats(_Model(flat, 1, 4), torch.zeros(2, T, dtype=torch.long))
    assert stats["min_entropy"] == pytest.approx(uniform_entropy(T))
    g = torch.Generator().manual_seed(0)
    peaked = torch.randn(2, T, 3 * 4, generator=g) * 3
    assert attention_stats(_Model(peaked, 1, 4), torch.zeros(2, T, dtype=torch.long))["min_entropy"] < uniform_entropy(T)
    with pytest.raises(ValueError, match="at least 2"):
        uniform_entropy(1)
