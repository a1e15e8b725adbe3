"""A linear projection whose query and/or key columns are per-head Stiefel frames: the drop-in that
:func:`stiefel_mini.convert.convert_attention` puts in place of a model's Q/K projection (an
``nn.Linear``, a fused Q|K|V ``nn.Linear`` or a GPT-2 ``Conv1D``), so that the model's own attention
code (rotary embeddings, QK-norm, SDPA, masks, the KV cache) runs on unchanged.

>>> heads = {"q": 4, "k": 4}   # frames for the query and key heads of a fused Q|K|V layer
>>> proj = FrameProjection.from_weight(qkv.weight, qkv.bias, heads, head_dim=16)
>>> proj(x).shape == qkv(x).shape
True
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .geometry import project
from .groups import FrameHolder

__all__ = ["FrameProjection", "SegmentInfo", "mean_gain"]


class SegmentInfo:
    """What mapping one segment's weights onto the manifold did: ``polar_distance``
    ``||W - polar(W)||_F / ||W||_F`` over all its heads, and ``gain`` ``(heads,)``, each head's mean
    singular value (the scale the polar map removes)."""

    def __init__(self, polar_distance: float, gain: Tensor) -> None:
        self.polar_distance, self.gain = polar_distance, gain


class FrameProjection(FrameHolder):
    r"""``out = x W + b`` with ``W = [s^{q}_1 Q_1 | ... | s^{q}_H Q_H | s^{k}_1 K_1 | ... | V]``, the
    output columns in the order of the projection it replaces.

    Each segment (``"q"``, ``"k"``, or both) is stored as frames of shape ``(heads, in_features,
    head_dim)`` (orthonormal columns, ``Q_h^T Q_h = I``), head ``h`` giving output columns
    ``h * head_dim ...  (h + 1) * head_dim - 1`` of its segment; ``rest_weight`` holds the remaining
    columns (V of a fused Q|K|V projection) as an ordinary weight, in the replaced module's layout.
    ``logit_scale="learned"`` adds a learned per-head scale ``s_h = exp(tau_h)`` to every frame
    segment (initialised by :meth:`from_weight` at that head's mean singular value, so that the
    logits keep their size); ``"fixed"`` has none (``s_h = 1``).

    ``transposed=False`` replaces an ``nn.Linear`` (``F.linear(x, W^T, b)``, weight ``(out, in)``);
    ``transposed=True`` a GPT-2 ``Conv1D`` (``addmm(b, x, W)``, weight ``(in, out)``). With
    ``stiefel=False`` the frames are ordinary weights
    (:meth:`~stiefel_mini.groups.FrameHolder.frames` returns ``[]``) and, loaded by
    :meth:`from_weight`, the module computes bit for bit what the replaced one computed. With
    ``stiefel=True`` the frames carry the frame mark (:func:`~stiefel_mini.groups.is_frame`), so
    :class:`~stiefel_mini.optim.StiefelAdam` keeps them on the manifold in any param group.

    :attr:`weight` is the assembled weight, a tensor in the replaced module's layout and shape
    (``(in, out)`` if ``transposed``, else ``(out, in)``), so code that reads ``.weight`` (its
    ``shape``, ``dtype``, ``device``) keeps working; it is computed from the parameters on each read,
    so writing into it changes nothing.

    Shapes: input ``(..., in_features)``, output ``(..., out_features)``, ``out_features =
    head_dim * sum(heads) + rest``.
    """

    def __init__(
        self,
        in_features: int,
        heads: dict[str, int],
        head_dim: int,
        rest: int = 0,
        *,
        bias: bool = True,
        transposed: bool = False,
        stiefel: bool = True,
        logit_scale: str = "fixed",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if not heads or set(heads) - {"q", "k"} or min(heads.values()) <= 0:
            raise ValueError(f"heads must map 'q' and/or 'k' to positive head counts; got {heads}")
        if not 0 < head_dim <= in_features:
            raise ValueError(
                f"head_dim={head_dim} must be in 1..in_features={in_features}: a frame "
                f"({in_features}, {head_dim}) has at most in_features orthonormal columns"
            )
        if logit_scale not in ("fixed", "learned"):
            raise ValueError(f"logit_scale must be 'fixed' or 'learned'; got {logit_scale!r}")
        factory = {"device": device, "dtype": dtype}
        self.in_features, self.head_dim, self.rest = in_features, head_dim, rest
        self.heads = dict(heads)
        self.out_features = head_dim * sum(heads.values()) + rest
        self.transposed, self.stiefel, self.logit_scale = transposed, stiefel, logit_scale
        for name, h in self.heads.items():
            self.register_parameter(f"{name}_weight", nn.Parameter(torch.empty(h, in_features, head_dim, **factory)))
            scale = nn.Parameter(torch.zeros(h, **factory)) if logit_scale == "learned" else None
            self.register_parameter(f"{name}_log_scale", scale)
        shape = (in_features, rest) if transposed else (rest, in_features)
        self.rest_weight = nn.Parameter(torch.empty(shape, **factory)) if rest else None
        self.bias = nn.Parameter(torch.zeros(self.out_features, **factory)) if bias else None
        self.mark_frames()

    # GPT-2's Conv1D names its sizes nf (out) and nx (in); code that reads them keeps working.
    @property
    def nf(self) -> int:
        return self.out_features

    @property
    def nx(self) -> int:
        return self.in_features

    def extra_repr(self) -> str:
        heads = ", ".join(f"{k}={v}" for k, v in self.heads.items())
        return (
            f"in_features={self.in_features}, heads=({heads}), head_dim={self.head_dim}, rest={self.rest}, "
            f"transposed={self.transposed}, stiefel={self.stiefel}, logit_scale={self.logit_scale!r}"
        )

    def _segments(self) -> list[nn.Parameter]:
        return [getattr(self, f"{name}_weight") for name in self.heads]

    def frame_names(self) -> tuple[str, ...]:
        """The names of the frame parameters ``(heads, in_features, head_dim)`` (``"q_weight"``,
        ``"k_weight"``), or ``()`` when ``stiefel=False``."""
        return tuple(f"{name}_weight" for name in self.heads) if self.stiefel else ()

    def qk_weights(self) -> list[nn.Parameter]:
        """The query/key weights, frames or not (the ``"qk"`` group when ``stiefel=False``)."""
        return self._segments()

    @property
    def weight(self) -> Tensor:
        """The assembled weight, in the replaced module's layout and shape (``(in, out)`` if
        ``transposed``, else ``(out, in)``), computed from the frames, scales and ``rest_weight``."""
        cols = []
        for name in self.heads:
            w = getattr(self, f"{name}_weight")  # (h, in, hd)
            log_scale = getattr(self, f"{name}_log_scale")
            if log_scale is not None:
                w = w * log_scale.exp().view(-1, 1, 1)
            if self.transposed:
                cols.append(w.permute(1, 0, 2).reshape(self.in_features, -1))  # (in, h*hd)
            else:
                cols.append(w.transpose(1, 2).reshape(-1, self.in_features))  # (h*hd, in)
        if self.rest_weight is not None:
            cols.append(self.rest_weight)
        if len(cols) == 1:
            return cols[0]
        return torch.cat(cols, dim=1 if self.transposed else 0)

    def forward(self, x: Tensor) -> Tensor:
        w = self.weight
        if not self.transposed:
            return F.linear(x, w, self.bias)
        # As Conv1D computes it (a bias is always there in GPT-2), so that stiefel=False is exact.
        out = x.reshape(-1, self.in_features)  # (N, in)
        out = torch.addmm(self.bias, out, w) if self.bias is not None else out @ w
        return out.view(*x.shape[:-1], self.out_features)

    @classmethod
    @torch.no_grad()
    def from_weight(
        cls,
        weight: Tensor,
        bias: Tensor | None,
        heads: dict[str, int],
        head_dim: int,
        *,
        transposed: bool = False,
        stiefel: bool = True,
        logit_scale: str = "fixed",
    ) -> tuple["FrameProjection", dict[str, SegmentInfo]]:
        """A :class:`FrameProjection` holding ``weight`` (``(out, in)``, or ``(in, out)`` if
        ``transposed``) and ``bias``, with the frame segments mapped onto the manifold if ``stiefel``.

        Head ``h`` of a segment is the ``(in, head_dim)`` block of its columns; with ``stiefel`` it
        becomes its polar factor (:func:`stiefel_mini.geometry.project`, in at least float32), and with
        ``logit_scale="learned"`` its scale starts at that block's mean singular value. Everything else
        is copied. Returns the module and, per segment, a :class:`SegmentInfo`.
        """
        w_io = weight if transposed else weight.T  # (in, out)
        d_in, d_out = w_io.shape
        rest = d_out - head_dim * sum(heads.values())
        if rest < 0:
            raise ValueError(f"weight has {d_out} outputs, fewer than heads {heads} x head_dim {head_dim}")
        new = cls(d_in, heads, head_dim, rest, bias=bias is not None, transposed=transposed, stiefel=stiefel,
                  logit_scale=logit_scale, device=weight.device, dtype=weight.dtype)
        info, start = {}, 0
        for name, h in heads.items():
            block = w_io[:, start:start + h * head_dim].reshape(d_in, h, head_dim).permute(1, 0, 2)  # (h, in, hd)
            start += h * head_dim
            work = block.to(torch.promote_types(block.dtype, torch.float32))
            gain = torch.linalg.svdvals(work).mean(dim=-1)  # (h,)
            if stiefel:
                polar = project(work)
                info[name] = SegmentInfo(float(torch.linalg.norm(work - polar) / torch.linalg.norm(work)), gain)
                block = polar
            else:
                info[name] = SegmentInfo(0.0, gain)
            getattr(new, f"{name}_weight").copy_(block)
            log_scale = getattr(new, f"{name}_log_scale")
            if log_scale is not None and stiefel:
                log_scale.copy_(gain.log())
        if rest:
            new.rest_weight.copy_(weight[:, start:] if transposed else weight[start:])
        if bias is not None:
            new.bias.copy_(bias)
        return new, info


def mean_gain(q: SegmentInfo, k: SegmentInfo, groups: int = 1) -> float:
    """Mean over query heads of ``gain_q[h] * gain_k[h // groups]``: the factor by which the polar
    map divides a head's logits when no scale absorbs it (``groups`` query heads share a key head)."""
    return float((q.gain * k.gain.repeat_interleave(groups)).mean())

