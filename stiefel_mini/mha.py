"""A drop-in ``nn.MultiheadAttention`` whose per-head query and key projections are Stiefel frames.

:class:`StiefelMultiheadAttention` takes the constructor and ``forward`` arguments of
``torch.nn.MultiheadAttention`` and returns the same ``(output, weights)`` pair. The query and
key in-projections are stored per head as wide frames of shape ``(num_heads, head_dim, embed_dim)``:
head ``h``'s block of rows of ``nn.MultiheadAttention``'s ``in_proj_weight``, with orthonormal rows
(the library's orientation rule). :func:`~stiefel_mini.convert.convert_attention` swaps every ``nn.MultiheadAttention``
of a model for one of these in place (:mod:`stiefel_mini.convert`), mapping the trained Q/K
weights onto the manifold with the polar map :func:`stiefel_mini.geometry.project`
(:meth:`StiefelMultiheadAttention.from_torch`).

>>> attn = StiefelMultiheadAttention(64, 4, batch_first=True)
>>> out, weights = attn(x, x, x)            # x: (N, L, 64), as nn.MultiheadAttention
>>> opt = StiefelAdam(param_groups(attn), lr=1e-3)
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._mha_inputs import additive, check_inputs
from .attention import LOGIT_SCALES
from .geometry import project, random_stiefel
from .groups import FrameHolder

__all__ = ["StiefelMultiheadAttention"]


class StiefelMultiheadAttention(FrameHolder):
    r"""Multi-head attention with the signature of ``torch.nn.MultiheadAttention`` and Stiefel
    query/key frames.

    For queries ``x_i``, keys ``y_j`` and head ``h`` with frames ``Q_h, K_h`` of shape
    ``(head_dim, embed_dim)`` (orthonormal rows, ``Q_h Q_h^T = I``):

    .. math::
        \ell^h_{ij} &= s_h\,(Q_h x_i + b^q_h)^\top (K_h y_j + b^k_h), \\
        \mathrm{out}_i &= W_O \big[\textstyle\sum_j \mathrm{softmax}_j(\ell^h_{ij} + M_{ij})\,
        (W_V^h z_j + b^v_h)\big]_h + b_O,

    with ``M`` the additive form of ``attn_mask`` and ``key_padding_mask``, values ``z_j``, and
    ``s_h = 1 / sqrt(head_dim)`` (``logit_scale="fixed"``, as in ``nn.MultiheadAttention``) or
    a learned ``s_h = exp(tau_h)`` (``logit_scale="learned"``). Since ``Q_h`` and ``K_h`` are
    orthonormal, the Q/K path cannot rescale logits; a learned temperature gives that freedom back.

    The value and output projections and all biases are ordinary parameters, initialised with the
    statistics ``nn.MultiheadAttention`` gives them. With ``stiefel=True`` the frames carry the frame
    mark (:func:`~stiefel_mini.groups.is_frame`), so :class:`~stiefel_mini.optim.StiefelAdam` keeps
    them on the manifold in any param group. ``stiefel=False`` keeps the same parameters but
    unconstrained: then the module computes exactly what ``nn.MultiheadAttention`` computes with the
    same weights, and :meth:`~stiefel_mini.groups.FrameHolder.frames` returns ``[]``.

    Learned tensors (``E = embed_dim``, ``H = num_heads``, ``hd = E // H``):

    * ``q_weight`` ``(H, hd, E)`` and ``k_weight`` ``(H, hd, kdim)``: the frames;
    * ``q_bias``, ``k_bias`` ``(E,)`` (if ``bias``), ``v_proj`` ``Linear(vdim, E)``,
      ``out_proj`` ``Linear(E, E)``, ``bias_k``, ``bias_v`` ``(1, 1, E)`` (if ``add_bias_kv``) and
      ``log_scale`` ``(H,)`` (if ``logit_scale="learned"``).

    If ``head_dim > kdim`` a key frame is tall (orthonormal columns), following the orientation
    rule of :mod:`stiefel_mini.geometry`.

    Args:
        embed_dim: model width ``E``; divisible by ``num_heads``.
        num_heads: number of heads ``H``.
        dropout: dropout probability on the attention weights.
        bias: add biases to the input and output projections.
        add_bias_kv: append a learned key and value to every sequence.
        add_zero_attn: append a zero key and value to every sequence.
        kdim, vdim: feature sizes of ``key`` and ``value`` (default ``embed_dim``).
        batch_first: inputs and outputs are ``(N, L, E)`` instead of ``(L, N, E)``.
        stiefel: make the query and key projections frames (``True``) or plain weights.
        logit_scale: ``"fixed"`` (``1 / sqrt(head_dim)``) or ``"learned"`` (per-head ``exp(tau_h)``,
            initialised at ``1 / sqrt(head_dim)``).

    Reference: Vaswani et al. (2017), "Attention is all you need"; Guerrero, "Stiefel Attention"
    (arXiv 2609.19363).
    """

    # nn.Transformer{Encoder,Decoder}Layer read these to decide on their fused inference kernel,
    # which uses a packed in_proj_weight; this module has none, so they take the regular path.
    _qkv_same_embed_dim = False
    in_proj_weight = None
    in_proj_bias = None

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        stiefel: bool = True,
        logit_scale: str = "fixed",
    ) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(
                f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                f"num_heads={num_heads} instead"
            )
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim={embed_dim} must be divisible by num_heads={num_heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1); got {dropout}")
        if logit_scale not in LOGIT_SCALES:
            raise ValueError(f"logit_scale must be one of {list(LOGIT_SCALES)}; got {logit_scale!r}")
        factory = {"device": device, "dtype": dtype}
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.dropout, self.batch_first = dropout, batch_first
        self.add_zero_attn, self.stiefel, self.logit_scale = add_zero_attn, stiefel, logit_scale

        self.q_weight = nn.Parameter(torch.empty(num_heads, self.head_dim, embed_dim, **factory))
        self.k_weight = nn.Parameter(torch.empty(num_heads, self.head_dim, self.kdim, **factory))
        if bias:
            self.q_bias = nn.Parameter(torch.empty(embed_dim, **factory))
            self.k_bias = nn.Parameter(torch.empty(embed_dim, **factory))
        else:
            self.register_parameter("q_bias", None)
            self.register_parameter("k_bias", None)
        self.v_proj = nn.Linear(self.vdim, embed_dim, bias=bias, **factory)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        if add_bias_kv:
            self.bias_k = nn.Parameter(torch.empty(1, 1, embed_dim, **factory))
            self.bias_v = nn.Parameter(torch.empty(1, 1, embed_dim, **factory))
        else:
            self.bias_k = self.bias_v = None
        if logit_scale == "learned":
            self.log_scale = nn.Parameter(torch.empty(num_heads, **factory))
        else:
            self.register_parameter("log_scale", None)
        self.reset_parameters()
        self.mark_frames()

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Haar-random frames; V, output projection and biases as ``nn.MultiheadAttention`` does.

        ``nn.MultiheadAttention`` draws its in-projection from Xavier's uniform law: over the fused
        ``(3E, E)`` block when ``kdim = vdim = E`` (so V's entries are ``U(-a, a)``,
        ``a = sqrt(6 / (E + 3E))``), over ``v_proj_weight`` ``(E, vdim)`` alone otherwise
        (``a = sqrt(6 / (vdim + E))``); V is drawn from the same law here. The output projection
        keeps ``nn.Linear``'s initialisation and every in/out bias starts at zero, as there.

        Draws, in this order, ``q_weight``, ``k_weight``, ``v_proj.weight`` and (with ``add_bias_kv``)
        ``bias_k``, ``bias_v`` from ``generator`` (``None``: torch's global generator), so a seeded
        generator gives the same start to modules that differ only in flags.

        Reference: Glorot & Bengio (2010), "Understanding the difficulty of training deep
        feedforward neural networks".
        """
        with torch.no_grad():
            for w in (self.q_weight, self.k_weight):
                # QR has no bf16/fp16 kernel: draw in float32, then cast.
                w.copy_(random_stiefel(*w.shape, generator=generator, device=w.device))
            E = self.embed_dim
            fused = self.kdim == E and self.vdim == E  # nn.MultiheadAttention's in_proj_weight (3E, E)
            fans = E + 3 * E if fused else self.vdim + E
            bound = math.sqrt(6.0 / fans)
            nn.init.uniform_(self.v_proj.weight, -bound, bound, generator=generator)
            if self.q_bias is not None:
                for b in (self.q_bias, self.k_bias, self.v_proj.bias, self.out_proj.bias):
                    b.zero_()
            if self.bias_k is not None:
                nn.init.xavier_normal_(self.bias_k, generator=generator)
                nn.init.xavier_normal_(self.bias_v, generator=generator)
            if self.log_scale is not None:
                self.log_scale.fill_(-0.5 * math.log(self.head_dim))

    def extra_repr(self) -> str:
        extra = f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, batch_first={self.batch_first}"
        if self.kdim != self.embed_dim or self.vdim != self.embed_dim:
            extra += f", kdim={self.kdim}, vdim={self.vdim}"
        return extra + f", stiefel={self.stiefel}, logit_scale={self.logit_scale!r}"

    def frame_names(self) -> tuple[str, ...]:
        """``("q_weight", "k_weight")``, or ``()`` when ``stiefel=False``: the Stiefel frames (see
        :meth:`~stiefel_mini.groups.FrameHolder.frames`)."""
        return ("q_weight", "k_weight") if self.stiefel else ()

    def qk_weights(self) -> list[nn.Parameter]:
        """The query and key weights ``[q_weight, k_weight]``, frames or not.

        :func:`stiefel_mini.groups.param_groups` puts them in its ``"qk"`` group when
        ``stiefel=False``.
        """
        return [self.q_weight, self.k_weight]

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``query`` to ``key``/``value``, with ``nn.MultiheadAttention``'s conventions.

        Args:
            query: ``(L, N, E)``, ``(N, L, E)`` if ``batch_first``, or unbatched ``(L, E)``.
            key: ``(S, N, kdim)``, ``(N, S, kdim)`` or ``(S, kdim)``.
            value: ``(S, N, vdim)``, ``(N, S, vdim)`` or ``(S, vdim)``.
            key_padding_mask: ``(N, S)`` or ``(S,)``; bool (True = ignore that key) or float
                (added to the logits).
            need_weights: also return the attention weights (computes them explicitly instead of
                calling the fused ``F.scaled_dot_product_attention``).
            attn_mask: ``(L, S)`` or ``(N * num_heads, L, S)``; bool (True = not allowed) or float
                (added to the logits).
            average_attn_weights: average the returned weights over heads.
            is_causal: a hint that ``attn_mask`` is the causal mask; as in ``nn.MultiheadAttention``
                it requires ``attn_mask`` and lets the fused kernel apply causality itself when
                neither ``key_padding_mask`` nor ``need_weights`` is given.

        Returns:
            ``(output, weights)``: output shaped like ``query`` with ``E`` features; weights
            ``(N, L, S)`` (averaged) or ``(N, num_heads, L, S)``, without ``N`` for unbatched
            input, or ``None`` if ``need_weights=False``.
        """
        check_inputs(query, key, value, key_padding_mask, attn_mask, self.num_heads, self.embed_dim,
                      self.batch_first)
        if is_causal and attn_mask is None:
            raise RuntimeError(
                "is_causal=True is a hint that attn_mask is the causal mask, so it needs attn_mask "
                "(as in nn.MultiheadAttention); build one with "
                "nn.Transformer.generate_square_subsequent_mask(L)"
            )
        batched = query.dim() == 3
        if not batched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        if not self.batch_first or not batched:
            # Unbatched inputs were given a batch dimension at position 1 above.
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))  # (N, L|S, .)
        N, L, _ = query.shape
        H, hd = self.num_heads, self.head_dim

        q = F.linear(query, self.q_weight.reshape(self.embed_dim, self.embed_dim), self.q_bias)  # (N, L, E)
        k = F.linear(key, self.k_weight.reshape(self.embed_dim, self.kdim), self.k_bias)  # (N, S, E)
        v = self.v_proj(value)  # (N, S, E)

        # One additive mask broadcastable to (N, H, L, S): attn_mask plus key padding.
        mask = additive(attn_mask, q.dtype)
        if mask is not None:
            mask = mask.view(1, 1, L, -1) if mask.dim() == 2 else mask.view(N, H, L, -1)
        kpm = additive(key_padding_mask, q.dtype)
        if kpm is not None:
            kpm = kpm.view(N, 1, 1, -1)
        use_causal_kernel = is_causal and kpm is None and not need_weights
        if use_causal_kernel:
            mask = None

        def append_key(k_new: Tensor, v_new: Tensor) -> None:
            """Append one key/value to every sequence; it is never masked."""
            nonlocal k, v, mask, kpm
            k, v = torch.cat([k, k_new], dim=1), torch.cat([v, v_new], dim=1)  # (N, S+1, E)
            mask = None if mask is None else F.pad(mask, (0, 1))
            kpm = None if kpm is None else F.pad(kpm, (0, 1))

        if self.bias_k is not None:
            append_key(self.bias_k.expand(N, 1, -1).to(k.dtype), self.bias_v.expand(N, 1, -1).to(v.dtype))
        if self.add_zero_attn:
            append_key(k.new_zeros(N, 1, self.embed_dim), v.new_zeros(N, 1, self.embed_dim))

        q = q.view(N, L, H, hd).transpose(1, 2)  # (N, H, L, hd)
        k = k.view(N, -1, H, hd).transpose(1, 2)  # (N, H, S, hd)
        v = v.view(N, -1, H, hd).transpose(1, 2)  # (N, H, S, hd)
        if mask is not None and kpm is not None:
            mask = mask + kpm
        elif kpm is not None:
            mask = kpm

        if self.log_scale is not None:
            # Folded into q so that the fused kernel runs with scale 1.
            q = q * self.log_scale.exp().to(q.dtype).view(1, H, 1, 1)
            scale = 1.0
        else:
            scale = 1.0 / math.sqrt(hd)
        dropout_p = self.dropout if self.training else 0.0

        if need_weights:
            logits = (q * scale) @ k.transpose(-2, -1)  # (N, H, L, S)
            if mask is not None:
                logits = logits + mask
            weights = F.dropout(logits.softmax(dim=-1), p=dropout_p)  # (N, H, L, S)
            out = weights @ v  # (N, H, L, hd)
        else:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=use_causal_kernel, scale=scale
            )  # (N, H, L, hd)
            weights = None

        out = self.out_proj(out.transpose(1, 2).reshape(N, L, self.embed_dim))  # (N, L, E)
        if not self.batch_first or not batched:
            out = out.transpose(0, 1)  # (L, N, E)
        if not batched:
            out = out.squeeze(1)  # (L, E)
        if weights is not None:
            if average_attn_weights:
                weights = weights.mean(dim=1)  # (N, L, S)
            if not batched:
                weights = weights.squeeze(0)
        return out, weights

    @torch.no_grad()
    def load_from_torch(self, mha: nn.MultiheadAttention) -> tuple[float, float]:
        """Copy the weights of an ``nn.MultiheadAttention``, mapping Q/K onto the manifold if
        ``stiefel``.

        Each head's ``(head_dim, embed_dim)`` block of the Q and K in-projections is replaced by its
        closest frame (the polar factor, :func:`stiefel_mini.geometry.project`, computed in at least
        float32); V, the output projection and all biases are copied as they are. With
        ``stiefel=False`` everything is copied unchanged. With ``logit_scale="learned"`` each head's
        temperature is initialised at ``mean(sigma(Q_h)) mean(sigma(K_h)) / sqrt(head_dim)``, the
        logit scale that the polar map removes.

        Returns:
            The relative Frobenius distances ``||W - polar(W)||_F / ||W||_F`` of Q and K (over all
            heads; ``0.0`` when ``stiefel=False``).
        """
        E, H, hd = self.embed_dim, self.num_heads, self.head_dim
        if (mha.embed_dim, mha.num_heads, mha.kdim, mha.vdim) != (E, H, self.kdim, self.vdim):
            raise ValueError(
                f"shape mismatch: nn.MultiheadAttention(embed_dim={mha.embed_dim}, "
                f"num_heads={mha.num_heads}, kdim={mha.kdim}, vdim={mha.vdim}) into {self.extra_repr()}"
            )
        if mha._qkv_same_embed_dim:
            w_q, w_k, w_v = mha.in_proj_weight.chunk(3)  # 3 x (E, E)
        else:
            w_q, w_k, w_v = mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight
        dists = []
        sigmas = []
        for dst, w in ((self.q_weight, w_q), (self.k_weight, w_k)):
            w = w.reshape(dst.shape)  # (H, hd, E | kdim): head h's rows
            if self.stiefel:
                w32 = w.to(torch.promote_types(w.dtype, torch.float32))
                polar = project(w32)
                dists.append(float(torch.linalg.norm(w32 - polar) / torch.linalg.norm(w32)))
                sigmas.append(torch.linalg.svdvals(w32).mean(dim=-1))  # (H,)
                w = polar
            else:
                dists.append(0.0)
            dst.copy_(w)
        self.v_proj.weight.copy_(w_v)
        self.out_proj.weight.copy_(mha.out_proj.weight)
        if mha.in_proj_bias is not None:
            b_q, b_k, b_v = mha.in_proj_bias.chunk(3)  # 3 x (E,)
            self.q_bias.copy_(b_q)
            self.k_bias.copy_(b_k)
            self.v_proj.bias.copy_(b_v)
            self.out_proj.bias.copy_(mha.out_proj.bias)
        if mha.bias_k is not None:
            self.bias_k.copy_(mha.bias_k)
            self.bias_v.copy_(mha.bias_v)
        if self.log_scale is not None and sigmas:
            self.log_scale.copy_((sigmas[0] * sigmas[1] / math.sqrt(hd)).log())
        return dists[0], dists[1]

    @classmethod
    def from_torch(
        cls, mha: nn.MultiheadAttention, *, stiefel: bool = True, logit_scale: str = "fixed"
    ) -> "StiefelMultiheadAttention":
        """A new module with ``mha``'s configuration, device, dtype, mode and (mapped) weights."""
        new = cls.configured_like(mha, stiefel=stiefel, logit_scale=logit_scale)
        new.load_from_torch(mha)
        return new

    @classmethod
    def configured_like(
        cls, mha: nn.MultiheadAttention, *, stiefel: bool = True, logit_scale: str = "fixed"
    ) -> "StiefelMultiheadAttention":
        """A new module configured like ``mha`` (sizes, biases, dropout, layout, device, dtype and
        train/eval mode), freshly initialised; :meth:`load_from_torch` copies the weights."""
        w = mha.out_proj.weight
        new = cls(
            mha.embed_dim,
            mha.num_heads,
            dropout=mha.dropout,
            bias=mha.in_proj_bias is not None,
            add_bias_kv=mha.bias_k is not None,
            add_zero_attn=mha.add_zero_attn,
            kdim=mha.kdim,
            vdim=mha.vdim,
            batch_first=mha.batch_first,
            device=w.device,
            dtype=w.dtype,
            stiefel=stiefel,
            logit_scale=logit_scale,
        )
        return new.train(mha.training)
