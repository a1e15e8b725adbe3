"""The grokking task and model: modular-arithmetic equations and a one-layer transformer reading them.

:func:`make_dataset` splits all ``p^2`` equations ``a op b = c (mod p)`` by seed (never by arm, so
arms are paired); :class:`GrokkingTransformer` is the model of Nanda et al. (2023) with the attention
of an arm; :func:`build_model` builds it for a run, its learned logit scale started at a set size
(:func:`match_logit_scale`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stiefel_mini.attention import make_attention
from stiefel_mini.experiments.arms import arm_spec
from stiefel_mini.experiments.grokking.config import GrokkingConfig
from stiefel_mini.experiments.runtime import generator
from stiefel_mini.geometry import random_stiefel

__all__ = ["modular_table", "make_dataset", "GrokkingTransformer", "build_model", "last_logits", "match_logit_scale"]


def modular_table(p: int, op: str) -> tuple[Tensor, Tensor]:
    """All equations ``a op b = c (mod p)`` as tokens ``(N, 3)`` = ``[a, b, p]`` and labels ``(N,)``.

    ``op``: ``"add"`` (a + b), ``"sub"`` (a - b), ``"div"`` (a * b^(p-2), i.e. a / b by Fermat; b != 0).
    """
    a, b = torch.meshgrid(torch.arange(p), torch.arange(p), indexing="ij")
    a, b = a.reshape(-1), b.reshape(-1)  # (p^2,)
    if op == "add":
        c = (a + b) % p
    elif op == "sub":
        c = (a - b) % p
    elif op == "div":
        keep = b != 0
        a, b = a[keep], b[keep]
        inv = torch.tensor([pow(int(x), p - 2, p) for x in range(p)])
        c = (a * inv[b]) % p
    else:
        raise ValueError(f"unknown op {op!r}; choices: add, sub, div")
    eq = torch.full_like(a, p)
    return torch.stack([a, b, eq], dim=1), c


def make_dataset(p: int, op: str, train_frac: float, seed: int) -> dict[str, Tensor]:
    """The train/validation split of seed ``seed``: a random ``train_frac`` of all equations trains.

    The split depends only on ``(p, op, train_frac, seed)``, never on the arm, so arms are paired.
    Returns ``x_train (N_tr, 3)``, ``y_train (N_tr,)``, ``x_val (N_val, 3)``, ``y_val (N_val,)``.
    """
    x, y = modular_table(p, op)
    g = generator(seed, "split")
    perm = torch.randperm(len(y), generator=g)
    n_train = int(round(train_frac * len(y)))
    tr, va = perm[:n_train], perm[n_train:]
    return {"x_train": x[tr], "y_train": y[tr], "x_val": x[va], "y_val": y[va]}



class GrokkingTransformer(nn.Module):
    """One-layer transformer for ``a b =`` (Nanda et al. 2023): embed, attention, ReLU MLP, unembed.

    ``h0 = E[tokens] + P`` (B, 3, d); ``h1 = h0 + Attn(h0)``; ``h2 = h1 + W_out relu(W_in h1 + b_in)
    + b_out``; logits ``= U h2`` at the last position, over the ``p`` answers. No layer norm. The
    attention is :func:`~stiefel_mini.attention.make_attention` with the arm's module flags
    (``stiefel``, ``train_qk``, ``qk_norm``, ``logit_scale``); ``uniform=True`` replaces its weights by
    1/3 (the control arm).

    Only the last position feeds the loss, and nothing after the attention mixes positions, so
    :meth:`forward` computes keys and values for the three tokens but the query, the residual stream
    and the MLP for the last token only; :meth:`forward_full` runs the whole sequence through the
    module's own ``forward`` and is the reference that :meth:`forward` must equal.

    Initialisation (Nanda et al.): every weight ``N(0, 1/fan_in)``-like, biases 0, Q/K Haar-random
    frames (columns of norm 1, as Gaussian 1/sqrt(d_model) columns are on average). Each parameter is
    drawn from its own stream ``runtime.generator(seed, name)``, so the initial weights do not depend
    on the arm or on the module's flags: arms that share a seed share the start.
    """

    def __init__(self, p: int, d_model: int = 128, n_heads: int = 4, d_mlp: int = 512, *,
                 stiefel: bool = True, uniform: bool = False, logit_scale: str = "fixed",
                 train_qk: bool = True, qk_norm: bool = False, seed: int = 0):
        super().__init__()
        self.p, self.uniform = p, uniform
        self.embed = nn.Embedding(p + 1, d_model)
        self.pos = nn.Parameter(torch.empty(3, d_model))
        self.attn = make_attention(d_model, n_heads, stiefel=stiefel, logit_scale=logit_scale, train_qk=train_qk,
                                   qk_norm=qk_norm)
        self.mlp_in = nn.Linear(d_model, d_mlp)
        self.mlp_out = nn.Linear(d_mlp, d_model)
        self.unembed = nn.Linear(d_model, p, bias=False)
        self.reset_parameters(seed)

    @torch.no_grad()
    def reset_parameters(self, seed: int) -> None:
        """Draw every parameter from the generator of ``(seed, its name)`` (see the class docstring)."""
        frames = {id(self.attn.w_q), id(self.attn.w_k)}
        for name, param in self.named_parameters():
            g = generator(seed, name)
            if id(param) in frames:
                param.copy_(random_stiefel(*param.shape, generator=g, dtype=param.dtype))
            elif name == "attn.log_scale":
                continue  # a learned logit scale keeps the module's initial 1/sqrt(d_head)
            elif param.ndim == 1:
                param.zero_()
            else:
                # nn.Linear stores (out, in): fan-in is the last dim; the embedding and positions are
                # (rows, d_model) with N(0, 1/d_model); the unembedding follows Nanda's 1/sqrt(p).
                fan_in = self.p if name == "unembed.weight" else param.shape[-1]
                param.copy_(torch.randn(param.shape, generator=g) / math.sqrt(fan_in))

    def _residual(self, tokens: Tensor) -> Tensor:
        return self.embed(tokens) + self.pos  # (B, 3, d)

    def _mlp_unembed(self, h: Tensor) -> Tensor:
        h = h + self.mlp_out(F.relu(self.mlp_in(h)))
        return self.unembed(h)

    def _last_hidden(self, x: Tensor) -> Tensor:
        """Residual stream of the last token after attention, ``(B, d)``, from ``x`` ``(B, 3, d)``."""
        if not self.uniform:
            return x[:, -1] + self.attn(x, last_only=True)[:, 0]  # (B, 1, d) -> (B, d)
        # Uniform control: the last token averages the values of all three tokens, w = 1/3.
        attn = self.attn
        B, T, _ = x.shape
        v = attn.v_proj(x).view(B, T, attn.n_heads, attn.d_head)  # (B, T, H*dh) -> (B, T, H, dh)
        z = v.mean(dim=1).reshape(B, attn.n_heads * attn.d_head)  # (B, H, dh) -> (B, H*dh)
        return x[:, -1] + attn.out_proj(z)

    def forward(self, tokens: Tensor) -> Tensor:
        """Logits ``(B, p)`` for tokens ``(B, 3)``, computing only what the last position needs."""
        return self._mlp_unembed(self._last_hidden(self._residual(tokens)))

    def forward_full(self, tokens: Tensor) -> Tensor:
        """Logits ``(B, p)`` via the attention module's full ``forward`` (reference for tests)."""
        if self.uniform:
            raise ValueError("forward_full runs the module's softmax attention; uniform has none")
        x = self._residual(tokens)
        h = x + self.attn(x)  # (B, 3, d)
        return self._mlp_unembed(h[:, -1])

    @torch.no_grad()
    def last_attention(self, tokens: Tensor) -> Tensor:
        """Attention weights of the last token over the three positions, ``(B, H, 3)``."""
        x = self._residual(tokens)
        if self.uniform:
            return x.new_full((x.shape[0], self.attn.n_heads, x.shape[1]), 1.0 / x.shape[1])
        return self.attn.attention_weights(x)[:, :, -1]  # (B, H, T, T) -> (B, H, T)


def build_model(cfg: GrokkingConfig) -> GrokkingTransformer:
    """The model of ``cfg.arm`` with the seed's shared initialisation.

    With ``cfg.model.logit_rms_init`` set, a learned logit scale (not QK-norm's gain) starts where
    :func:`match_logit_scale` puts it on the seed's training inputs.
    """
    spec = arm_spec(cfg.arm)
    task, m = cfg.task, cfg.model
    model = GrokkingTransformer(task.p, m.d_model, m.n_heads, m.d_mlp, uniform=spec.qk == "none", seed=cfg.seed,
                                **spec.module_flags(m.logit_scale))
    if m.logit_rms_init is not None and model.attn.log_scale is not None and not spec.qk_norm:
        tokens = make_dataset(task.p, task.op, task.train_frac, cfg.seed)["x_train"]
        match_logit_scale(model, tokens, m.logit_rms_init)
    return model


@torch.no_grad()
def last_logits(model: GrokkingTransformer, tokens: Tensor) -> Tensor:
    """Scaled attention logits of the last query over the three positions, ``(B, H, 3)``."""
    return model.attn.logits(model._residual(tokens))[:, :, -1]  # (B, H, T, T) -> (B, H, T)


@torch.no_grad()
def match_logit_scale(model: GrokkingTransformer, tokens: Tensor, target_rms: float) -> Tensor:
    """Set each head's learned log-scale so its last-query logits on ``tokens`` have RMS ``target_rms``.

    ``tau_h = log(target_rms / r_h)`` with ``r_h = sqrt(mean_{b, j} (q_b^h . k_{bj}^h)^2)`` the RMS of
    the unscaled logits of head h over the examples ``b`` and the three keys ``j``. Depends only on
    the frames, embeddings and positions, which every arm of a seed shares, so two arms with a learned
    scale start from the same temperatures. Returns the new scales ``(H,)``.
    """
    if target_rms <= 0:
        raise ValueError(f"logit_rms_init must be positive, got {target_rms}")
    attn = model.attn
    if attn.log_scale is None:
        raise ValueError("match_logit_scale needs a model built with logit_scale='learned'")
    raw = last_logits(model, tokens) / attn.scale().view(1, -1, 1)  # (B, H, 3), unscaled
    rms = raw.pow(2).mean(dim=(0, 2)).sqrt()  # (H,)
    attn.log_scale.copy_(torch.log(target_rms / rms))
    return attn.scale()
