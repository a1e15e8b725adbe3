"""Multi-head self-attention whose per-head query and key projections are Stiefel frames."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .geometry import random_stiefel
from .groups import FrameHolder

__all__ = ["StiefelSelfAttention", "QKNormSelfAttention", "make_attention", "entropy", "LOGIT_SCALES"]

LOGIT_SCALES = ("fixed", "learned")


class StiefelSelfAttention(FrameHolder):
    r"""Multi-head self-attention with ``W_Q^h, W_K^h`` in St(d_model, d_head) for every head h.

    For tokens ``x_i in R^{d_model}`` and head h,

    .. math::
        \ell^h_{ij} &= s_h\, (W_Q^{h\top} x_i)^\top (W_K^{h\top} x_j)
                    = s_h\, x_i^\top W_Q^h W_K^{h\top} x_j, \\
        y_i &= W_O \big[\textstyle\sum_j \mathrm{softmax}_j(\ell^h_{ij})\, W_V^h x_j\big]_{h}.

    With orthonormal frames (``W^{h\top} W^h = I``) every nonzero singular value of
    ``W_Q^h W_K^{h\top}`` equals 1, since ``(W_Q W_K^T)^T (W_Q W_K^T) = W_K W_K^T`` is a projector. So
    ``|l_ij| <= s_h ||x_i|| ||x_j||``: the projections cannot grow or shrink the logits, and the
    sharpness of attention is set by the token norms and the scale ``s_h`` alone.

    ``logit_scale`` chooses ``s_h``:

    * ``"fixed"``: ``s_h = 1 / sqrt(d_head)``, the usual scaled dot product.
    * ``"learned"``: ``s_h = exp(tau_h)``, one learned log-temperature per head, initialised at
      ``log(1 / sqrt(d_head))``. On the manifold this is the only way a head can sharpen or flatten
      its attention through the Q/K path; ``tau`` is an ordinary (non-frame) parameter.

    With ``stiefel=True`` the frames carry the frame mark (:func:`~stiefel_mini.groups.is_frame`),
    so :class:`~stiefel_mini.optim.StiefelAdam` keeps them on the manifold in any param group.
    ``stiefel=False`` turns the constraint off: the same module, the same initial weights (the
    frames start orthonormal either way, so a constrained and an unconstrained run start from the
    same point), but ``w_q`` and ``w_k`` are plain weights that :func:`~stiefel_mini.groups.param_groups` hands to AdamW.
    V and the output projection are always unconstrained ``nn.Linear`` layers.

    ``train_qk=False`` creates ``w_q`` and ``w_k`` with ``requires_grad=False``: random frames that
    stay at their initial value (the frozen-frame baseline); :func:`~stiefel_mini.groups.param_groups`
    leaves them out.

    Shapes: ``w_q``, ``w_k`` ``(n_heads, d_model, d_head)``; input and output ``(B, T, d_model)``.

    Reference: Vaswani et al. (2017), "Attention is all you need"; Guerrero, "Stiefel Attention"
    (arXiv 2609.19363).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_head: int | None = None,
        *,
        stiefel: bool = True,
        logit_scale: str = "fixed",
        causal: bool = False,
        bias: bool = False,
        dropout: float = 0.0,
        train_qk: bool = True,
    ) -> None:
        super().__init__()
        if d_model <= 0 or n_heads <= 0:
            raise ValueError(f"d_model and n_heads must be positive; got {d_model}, {n_heads}")
        if d_head is None:
            if d_model % n_heads:
                raise ValueError(
                    f"d_model={d_model} is not divisible by n_heads={n_heads}; pass d_head explicitly"
                )
            d_head = d_model // n_heads
        if not 0 < d_head <= d_model:
            raise ValueError(
                f"d_head={d_head} must be in 1..d_model={d_model}: a frame in St(d_model, d_head) "
                "has at most d_model orthonormal columns"
            )
        if logit_scale not in LOGIT_SCALES:
            raise ValueError(f"logit_scale must be one of {list(LOGIT_SCALES)}; got {logit_scale!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1); got {dropout}")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_head
        self.stiefel, self.causal, self.dropout = stiefel, causal, dropout
        self.logit_scale = logit_scale
        self.w_q = nn.Parameter(torch.empty(n_heads, d_model, d_head), requires_grad=train_qk)
        self.w_k = nn.Parameter(torch.empty(n_heads, d_model, d_head), requires_grad=train_qk)
        self.v_proj = nn.Linear(d_model, n_heads * d_head, bias=bias)
        self.out_proj = nn.Linear(n_heads * d_head, d_model, bias=bias)
        if logit_scale == "learned":
            self.log_scale = nn.Parameter(torch.empty(n_heads))
        else:
            self.register_parameter("log_scale", None)
        self.reset_parameters()
        self.mark_frames()

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Frames from the Haar measure; V and output projection as ``nn.Linear`` initialises them.

        Draws, in this order, ``w_q``, ``w_k``, ``v_proj``, ``out_proj`` from ``generator`` (``None``:
        torch's global generator), so a seeded generator gives the same start to modules that differ
        only in flags (``stiefel``, ``train_qk``, QK-norm).
        """
        with torch.no_grad():
            for w in (self.w_q, self.w_k):
                w.copy_(random_stiefel(*w.shape, generator=generator, dtype=w.dtype, device=w.device))
            if self.log_scale is not None:
                self.log_scale.fill_(-0.5 * math.log(self.d_head))
            for lin in (self.v_proj, self.out_proj):
                if generator is None:
                    lin.reset_parameters()
                    continue
                # nn.Linear's own initialisation, drawn from ``generator``.
                nn.init.kaiming_uniform_(lin.weight, a=math.sqrt(5), generator=generator)
                if lin.bias is not None:
                    bound = 1.0 / math.sqrt(lin.in_features)
                    nn.init.uniform_(lin.bias, -bound, bound, generator=generator)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, d_head={self.d_head}, "
            f"stiefel={self.stiefel}, logit_scale={self.logit_scale!r}, causal={self.causal}"
        )

    def frame_names(self) -> tuple[str, ...]:
        """``("w_q", "w_k")``, or ``()`` when ``stiefel=False``: the names of the Stiefel frames
        (:meth:`~stiefel_mini.groups.FrameHolder.frames` returns them)."""
        return ("w_q", "w_k") if self.stiefel else ()

    def qk_weights(self) -> list[nn.Parameter]:
        """The query and key weights ``[w_q, w_k]``, frames or not (see :func:`~stiefel_mini.groups.qk_parameters`)."""
        return [self.w_q, self.w_k]

    def scale(self) -> Tensor:
        """Per-head logit scale ``s_h``, shape ``(n_heads,)``."""
        if self.log_scale is not None:
            return self.log_scale.exp()
        return torch.full((self.n_heads,), self.d_head**-0.5, device=self.w_q.device, dtype=self.w_q.dtype)

    def _project(self, x: Tensor, w: Tensor) -> Tensor:
        """``x @ W^h`` for every head: ``(B, T, d_model)`` -> ``(B, n_heads, T, d_head)``."""
        B, T, _ = x.shape
        w = w.permute(1, 0, 2).reshape(self.d_model, self.n_heads * self.d_head)  # (C, nh*hs)
        return (x @ w.to(x.dtype)).view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, nh, T, hs)

    def _qkv(self, x: Tensor, x_q: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        B, T, _ = x.shape
        q = self._project(x if x_q is None else x_q, self.w_q)  # (B, nh, Tq, hs)
        # The scale is folded into q so that a learned per-head scale needs no custom kernel.
        q = q * self.scale().to(q.dtype).view(1, -1, 1, 1)
        k = self._project(x, self.w_k)  # (B, nh, T, hs)
        v = self.v_proj(x).view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, nh, T, hs)
        return q, k, v

    def _check(self, x: Tensor) -> None:
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"expected input of shape (B, T, d_model={self.d_model}); got {tuple(x.shape)}"
            )

    def forward(self, x: Tensor, attn_mask: Tensor | None = None, *, last_only: bool = False) -> Tensor:
        """Attend over the sequence.

        Args:
            x: ``(B, T, d_model)`` tokens.
            attn_mask: optional mask broadcastable to ``(B, n_heads, T, T)``: bool (True = attend)
                or float (added to the logits), as in ``F.scaled_dot_product_attention``.
            last_only: compute the output of the last position only, ``(B, 1, d_model)``; a model
                whose loss reads only the last token (as in modular arithmetic) skips the other
                queries.
        Returns:
            ``(B, T, d_model)``, or ``(B, 1, d_model)`` with ``last_only``.
        """
        self._check(x)
        if self.causal and attn_mask is not None:
            raise ValueError("pass either causal=True or an attn_mask, not both")
        B, T, _ = x.shape
        q, k, v = self._qkv(x, x[:, -1:] if last_only else None)
        if last_only and attn_mask is not None:
            attn_mask = attn_mask[..., -1:, :]
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=attn_mask,
            dropout_p=self.dropout if self.training else 0.0,
            # The last query may see every key, so causality changes nothing for last_only.
            is_causal=self.causal and not last_only and attn_mask is None,
            scale=1.0,
        )  # (B, nh, Tq, hs)
        y = y.transpose(1, 2).reshape(B, q.shape[2], self.n_heads * self.d_head)  # (B, Tq, nh*hs)
        return self.out_proj(y)

    def logits(self, x: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        """Scaled pre-softmax logits ``l_ij^h``, ``(B, n_heads, T, T)``; masked entries are ``-inf``."""
        self._check(x)
        q, k, _ = self._qkv(x)
        logits = q @ k.transpose(-2, -1)  # (B, nh, T, T)
        T = x.shape[1]
        if self.causal:
            future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            logits = logits.masked_fill(future, float("-inf"))
        if attn_mask is not None:
            if attn_mask.dtype == torch.bool:
                logits = logits.masked_fill(~attn_mask, float("-inf"))
            else:
                logits = logits + attn_mask
        return logits

    def attention_weights(self, x: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        """Attention probabilities ``softmax_j(l_ij^h)``, ``(B, n_heads, T, T)``."""
        return self.logits(x, attn_mask).softmax(dim=-1)


class QKNormSelfAttention(StiefelSelfAttention):
    r"""QK-norm: the same module with unconstrained ``W_Q, W_K`` whose queries and keys are
    normalised before the dot product, ``l_ij = g_h <q_i / ||q_i||, k_j / ||k_j||>``.

    The logits are cosines times a learned per-head gain ``g_h = exp(tau_h)`` (the module's learned
    ``log_scale``, initialised at ``log sqrt(d_head)``, the size of the logits of LayerNorm-ed queries
    and keys); ``|l_ij| <= g_h`` whatever the tokens and the weights. ``W_Q^h`` and ``W_K^h`` are then
    scale-invariant: multiplying either by ``c > 0`` changes nothing.

    Shapes as :class:`StiefelSelfAttention`. Reference: Henry et al. (2020), "Query-key normalization
    for transformers"; Dehghani et al. (2023), "Scaling vision transformers to 22 billion parameters"
    (LayerNorm on q and k).
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int | None = None, **kwargs: Any) -> None:
        for key, forced in (("stiefel", False), ("logit_scale", "learned")):
            if kwargs.get(key, forced) != forced:
                raise ValueError(f"QKNormSelfAttention has {key}={forced!r}; got {kwargs[key]!r}")
        kwargs.update(stiefel=False, logit_scale="learned")
        super().__init__(d_model, n_heads, d_head, **kwargs)

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """As :meth:`StiefelSelfAttention.reset_parameters`, with the gain at ``log sqrt(d_head)``."""
        super().reset_parameters(generator)
        with torch.no_grad():
            self.log_scale.fill_(0.5 * math.log(self.d_head))

    def _qkv(self, x: Tensor, x_q: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = super()._qkv(x, x_q)  # (B, nh, T, hs) each
        q = F.normalize(q, dim=-1) * self.scale().to(q.dtype).view(1, -1, 1, 1)
        return q, F.normalize(k, dim=-1), v


def make_attention(d_model: int, n_heads: int, d_head: int | None = None, *, qk_norm: bool = False,
                   stiefel: bool | None = None, logit_scale: str | None = None,
                   **kwargs: Any) -> StiefelSelfAttention:
    """:class:`QKNormSelfAttention` if ``qk_norm``, else :class:`StiefelSelfAttention` with ``stiefel``
    (default ``True``) and ``logit_scale`` (default ``"fixed"``); ``kwargs`` go to either.

    QK-norm attention has unconstrained Q/K and a learned gain, so with ``qk_norm=True`` the options
    ``stiefel=True`` and ``logit_scale="fixed"`` raise ``ValueError`` instead of being dropped
    (leave them unset, or pass ``stiefel=False`` / ``logit_scale="learned"``).
    """
    if qk_norm:
        for key, value, forced in (("stiefel", stiefel, False), ("logit_scale", logit_scale, "learned")):
            if value is not None and value != forced:
                raise ValueError(
                    f"make_attention(qk_norm=True, {key}={value!r}): QK-norm attention has {key}={forced!r} "
                    f"(unconstrained Q/K normalised before the dot product); drop {key}, or set qk_norm=False "
                    "for Stiefel frames"
                )
        return QKNormSelfAttention(d_model, n_heads, d_head, **kwargs)
    return StiefelSelfAttention(d_model, n_heads, d_head, stiefel=True if stiefel is None else stiefel,
                                logit_scale=logit_scale or "fixed", **kwargs)


def entropy(p: Tensor) -> Tensor:
    """Entropy in nats of distributions over the last dim, ``-sum_j p_j log p_j`` (``0 log 0 = 0``).

    Shapes: ``(..., T)`` -> ``(...)``; e.g. attention weights ``(B, n_heads, T, T)`` -> ``(B, n_heads, T)``.
    """
    return -torch.special.xlogy(p, p).sum(-1)
