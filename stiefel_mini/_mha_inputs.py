"""Input checks and mask conversion for :class:`stiefel_mini.mha.StiefelMultiheadAttention`: the
errors ``nn.MultiheadAttention`` raises, and its mask convention as an additive mask."""

from __future__ import annotations

import torch
from torch import Tensor


def check_inputs(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding_mask: Tensor | None,
    attn_mask: Tensor | None,
    num_heads: int,
    embed_dim: int,
    batch_first: bool,
) -> None:
    """Reject the inputs ``nn.MultiheadAttention`` rejects, with the same error types.

    Dimensions and the unbatched 3-D mask raise ``AssertionError`` (as ``F._mha_shape_check``),
    as do a wrong embedding size, key/value lengths that differ and a key padding mask not
    ``(N, S)``; a 2-D or 3-D ``attn_mask`` of the wrong shape and a query batch that differs from
    the key batch raise ``RuntimeError``.
    """
    if query.dim() not in (2, 3):
        raise AssertionError(
            f"query should be unbatched 2D or batched 3D tensor but received {query.dim()}-D query tensor"
        )
    batched = query.dim() == 3
    kind = "batched (3-D)" if batched else "unbatched (2-D)"
    if key.dim() != query.dim() or value.dim() != query.dim():
        raise AssertionError(
            f"For {kind} `query`, expected `key` and `value` to be {query.dim()}-D but found "
            f"{key.dim()}-D and {value.dim()}-D tensors respectively"
        )
    if key_padding_mask is not None and key_padding_mask.dim() != query.dim() - 1:
        raise AssertionError(
            f"For {kind} `query`, expected `key_padding_mask` to be `None` or {query.dim() - 1}-D but "
            f"found {key_padding_mask.dim()}-D tensor instead"
        )
    if attn_mask is not None and attn_mask.dim() not in (2, 3):
        raise AssertionError(
            f"For {kind} `query`, expected `attn_mask` to be `None`, 2-D or 3-D but found "
            f"{attn_mask.dim()}-D tensor instead"
        )
    if query.shape[-1] != embed_dim:
        raise AssertionError(f"was expecting embedding dimension of {embed_dim}, but got {query.shape[-1]}")
    if key.shape[:-1] != value.shape[:-1]:
        raise AssertionError(f"key shape {key.shape} does not match value shape {value.shape}")
    if batched:
        b = 0 if batch_first else 1
        N, L, S, Nk = query.shape[b], query.shape[1 - b], key.shape[1 - b], key.shape[b]
        if Nk != N:
            raise RuntimeError(f"query has batch size {N} but key and value have {Nk}")
    else:
        N, L, S = 1, query.shape[0], key.shape[0]
    if key_padding_mask is not None:
        want = (N, S) if batched else (S,)
        if tuple(key_padding_mask.shape) != want:
            raise AssertionError(f"expecting key_padding_mask shape of {want}, but got {tuple(key_padding_mask.shape)}")
    if attn_mask is not None:
        if attn_mask.dim() == 2 and tuple(attn_mask.shape) != (L, S):
            raise RuntimeError(f"The shape of the 2D attn_mask is {attn_mask.shape}, but should be {(L, S)}.")
        if attn_mask.dim() == 3:
            want = (N * num_heads, L, S) if batched else (num_heads, L, S)
            if tuple(attn_mask.shape) != want:
                error = RuntimeError if batched else AssertionError
                raise error(f"The shape of the 3D attn_mask is {attn_mask.shape}, but should be {want}.")


def additive(mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """``nn.MultiheadAttention``'s mask convention as an additive float mask.

    A bool mask marks the positions that may *not* be attended (True = masked; the opposite of
    ``F.scaled_dot_product_attention``'s bool masks) and becomes ``-inf`` there; a float mask is
    added to the logits as it is.
    """
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask, float("-inf"))
    return mask.to(dtype)
