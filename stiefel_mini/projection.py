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

import warnings
import weakref
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import _distributed as _dt
from ._muon_roles import Role, mark
from .geometry import project
from .groups import FrameHolder, off_manifold_tolerance

__all__ = ["FrameProjection", "SegmentInfo", "mean_gain"]


def _writes(func: Any) -> bool:
    """Whether ``func`` writes into its first argument: ``Tensor.zero_``, ``nn.init.normal_``,
    ``__setitem__``, ``__iadd__``..."""
    name = getattr(func, "__name__", "")
    return (name.endswith("_") and not name.endswith("__")) or name == "__setitem__" or (
        name.startswith("__i") and name.endswith("__") and name not in ("__index__", "__int__", "__invert__"))


class _AssembledWeight(Tensor):
    """:attr:`FrameProjection.weight`: the assembled weight, whose in-place writes (and those into any
    view of it, ``.data`` included) are written back into the projection by
    :meth:`FrameProjection.load_weight` right after they happen."""

    _owner: "weakref.ref[FrameProjection]"
    _root: Tensor

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = [*args, *kwargs.values()]  # nn.init functions pass their tensor by keyword
        ours = next((a for a in inputs if isinstance(a, _AssembledWeight)), None)
        if ours is not None and isinstance(args[0] if args else None, _AssembledWeight):
            _refuse(func)
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        if ours is None:
            return out
        owner, root = ours._owner(), ours._root
        if _writes(func) and owner is not None and isinstance(inputs[0], _AssembledWeight):
            owner.load_weight(root)
            return out
        if type(out) in (tuple, list):  # chunk, split, unbind: views, each of whose writes land too
            return type(out)(_rewrap(t, owner, root) for t in out)
        return _rewrap(out, owner, root)


_ROUTE = ("FrameProjection.weight is assembled from the projection's parameters (q_weight, k_weight, their "
          "scales, rest_weight) on each read")


def _refuse(func: Any) -> None:
    """Raise for what cannot work on the assembled weight: replacing its ``.data``, reading or setting its
    ``.grad``, changing its ``requires_grad``; each message gives the route that works."""
    name, owner = getattr(func, "__name__", ""), getattr(func, "__self__", None)
    if name == "__set__" and owner is Tensor.data:
        raise ValueError(f"{_ROUTE}, so `.data = w` would be dropped; write the weight with `proj.weight = w` "
                         "(or proj.load_weight(w)), or in place: proj.weight.copy_(w)")
    if owner is Tensor.grad and name in ("__get__", "__set__"):
        raise AttributeError(f"{_ROUTE}, so it has no gradient of its own: the gradients are those of proj.q_weight, "
                             "proj.k_weight and proj.rest_weight (the parameters an optimizer steps)")
    if func is Tensor.requires_grad_ or (name == "__set__" and owner is Tensor.requires_grad):
        raise ValueError(f"{_ROUTE}, so its requires_grad cannot be set; freeze the parameters instead: "
                         "proj.requires_grad_(False), or proj.q_weight.requires_grad_(False) for one of them")


def _rewrap(out: Any, owner: "FrameProjection | None", root: Tensor) -> Any:
    """``out`` as an :class:`_AssembledWeight` if it is a view of ``root`` (``.data``, a slice, ``.T``),
    so that its writes land too; as a plain tensor if it is another tensor."""
    if isinstance(out, Tensor) and not _dt.is_dtensor(out):
        if out.untyped_storage().data_ptr() == root.untyped_storage().data_ptr():
            return _wrap(out, owner, root)
        return out.as_subclass(Tensor)
    return out


def _wrap(t: Tensor, owner: "FrameProjection | None", root: Tensor) -> Tensor:
    view = t.as_subclass(_AssembledWeight)
    view._owner, view._root = weakref.ref(owner) if owner is not None else (lambda: None), root
    return view


class SegmentInfo:
    """What mapping one segment's weights onto the manifold did: ``polar_distance``
    ``||W - polar(W)||_F / ||W||_F`` over all its heads, ``gain`` ``(heads,)``, each head's mean
    singular value (the scale the polar map removes), and ``spread``, the largest distance of a
    head's singular values from 1 (or, when ``learned``, from their mean): 0 for a frame."""

    def __init__(self, polar_distance: float, gain: Tensor, spread: float = 0.0) -> None:
        self.polar_distance, self.gain, self.spread = polar_distance, gain, spread


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
    ``shape``, ``dtype``, ``device``) keeps working. It is computed from the parameters on each
    read, and writes go back into them: an in-place write into it or into a view of it
    (``nn.init.normal_(proj.weight)``, ``proj.weight.data.zero_()``, ``proj.weight[:4] = w``, the
    pieces of ``proj.weight.chunk(3)``, ``split`` and ``unbind``) and
    ``proj.weight = w`` call :meth:`load_weight`, which puts each head's block on the manifold again
    (with a ``UserWarning`` if it was off it) and copies the rest.

    ``state_dict()`` holds the parameters and, under the key ``weight``, the assembled weight in the
    replaced module's layout, so that a plain (unconverted) model loads the converted model's
    weights: Hugging Face's ``from_pretrained``, or ``load_state_dict(strict=False)`` (the frames'
    keys are then its unexpected keys) or, strictly, :func:`stiefel_mini.hf.plain_state_dict`. Loading into a :class:`FrameProjection` reads the
    parameters; a ``weight`` entry that disagrees with them raises ``ValueError``.

    Shapes: input ``(..., in_features)``, output ``(..., out_features)``, ``out_features =
    head_dim * sum(heads) + rest``. Reference: Guerrero, "Stiefel Attention" (arXiv 2609.19363).
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

    def muon_roles(self) -> dict[str, Role]:
        """The role :class:`~stiefel_mini.muon.StiefelMuon` gives each parameter that is not a frame: the
        Q/K weights of ``stiefel=False`` (Muon per head, blocks ``(in_features, head_dim)``), the learned
        scales (AdamW), ``rest_weight`` (Muon, stored ``(in, out)`` when ``transposed``) and the bias."""
        roles = {}
        for name in self.heads:
            if not self.stiefel:
                roles[f"{name}_weight"] = Role("muon", "matrix", "heads", "query/key weights per head (stiefel=False)")
            if getattr(self, f"{name}_log_scale") is not None:
                roles[f"{name}_log_scale"] = Role("adamw", "scale", "-", "learned logit scale")
        if self.rest_weight is not None:
            roles["rest_weight"] = Role("muon", "matrix", "in_out" if self.transposed else "out_in",
                                        "the projection's other columns, stored (in, out)" if self.transposed
                                        else "the projection's other rows")
        if self.bias is not None:
            roles["bias"] = Role("adamw", "bias", "-", "bias")
        return roles

    def mark_frames(self) -> None:
        """Mark the frames (``FrameHolder.mark_frames``) and every other parameter with its
        :meth:`muon_roles` role, so that StiefelMuon reads the (in, out) layout without being told."""
        super().mark_frames()
        for name, role in self.muon_roles().items():
            mark(getattr(self, name), role)

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if isinstance(value, Tensor) and self.__dict__.get("_marks_frames"):
            role = self.muon_roles().get(name)
            if role is not None:
                mark(value, role)

    def frame_names(self) -> tuple[str, ...]:
        """The names of the frame parameters ``(heads, in_features, head_dim)`` (``"q_weight"``,
        ``"k_weight"``), or ``()`` when ``stiefel=False``."""
        return tuple(f"{name}_weight" for name in self.heads) if self.stiefel else ()

    def qk_weights(self) -> list[nn.Parameter]:
        """The query/key weights, frames or not (the ``"qk"`` group when ``stiefel=False``)."""
        return self._segments()

    @property
    def weight(self) -> Tensor:
        """The assembled weight ``[s^q_1 Q_1 | ... | s^k_1 K_1 | ... | V]``, in the replaced module's layout
        and shape (``(in, out)`` if ``transposed``, else ``(out, in)``), computed from the frames, scales
        and ``rest_weight``; in-place writes into it land in them (:meth:`load_weight`)."""
        w = self._assembled()
        if _dt.is_dtensor(w):
            return w
        return _wrap(w, self, w)

    @weight.setter
    def weight(self, value: Tensor) -> None:
        self.load_weight(value)

    def _assembled(self) -> Tensor:
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

    @torch.no_grad()
    def load_weight(self, weight: Tensor) -> None:
        """Set the projection from a weight in the replaced module's layout (``(in, out)`` if
        ``transposed``, else ``(out, in)``), as :meth:`from_weight` builds one: each head's block
        ``W_h`` ``(in, head_dim)`` becomes its closest frame ``W_h (W_h^T W_h)^{-1/2}`` (and, with
        ``logit_scale="learned"``, its scale the block's mean singular value); the other columns are
        copied. The bias is kept.

        Warns (``UserWarning``) when a block was off the manifold, that is when its singular values
        differ from 1 (``"fixed"``) or from each other (``"learned"``) by more than
        ``max(1e-3, 100 eps)``: the written weight is then not what the module computes with.
        Raises ``ValueError`` (and changes nothing) for a weight of another shape, or a block of
        rank below ``head_dim``, which has no closest frame.
        """
        want = (self.in_features, self.out_features) if self.transposed else (self.out_features, self.in_features)
        if tuple(weight.shape) != want:
            raise ValueError(f"FrameProjection.weight has shape {want}; got a weight of shape {tuple(weight.shape)}")
        weight = weight.detach().to(self._segments()[0].dtype)
        try:
            new, info = FrameProjection.from_weight(weight, None, self.heads, self.head_dim,
                                                    transposed=self.transposed, stiefel=self.stiefel,
                                                    logit_scale=self.logit_scale)
        except ValueError as error:
            raise ValueError(f"FrameProjection.weight: a head's block of the weight written into it has no "
                             f"closest frame ({error}); write a weight whose head blocks have full rank") from None
        tol = off_manifold_tolerance(weight.dtype)
        off = [seg for seg, i in info.items() if self.stiefel and float(i.spread) > tol]
        if off:
            warnings.warn(f"FrameProjection.weight: the {'/'.join(off)} heads of the weight written into it were "
                          "off the Stiefel manifold; each head's block was replaced by its closest frame (polar "
                          "map), so the module computes with that, not with the weight written", UserWarning,
                          stacklevel=3)
        for name, p in new.named_parameters():
            if name != "bias":
                getattr(self, name).copy_(p)

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        w = self._assembled()
        if not _dt.is_dtensor(w):  # sharded frames: DCP checkpoints, read by a converted model only
            destination[prefix + "weight"] = w if keep_vars else w.detach()

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs) -> None:
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        key = prefix + "weight"
        if key in unexpected_keys:
            unexpected_keys.remove(key)
        saved = state_dict.get(key)
        if saved is None or _dt.is_dtensor(saved) or any(k.startswith(prefix) for k in missing_keys + unexpected_keys):
            return  # another layout (the strict load names its keys), or a sharded checkpoint
        with torch.no_grad():
            ours = self._assembled().float()
            if tuple(saved.shape) != tuple(ours.shape) or (saved.float() - ours).abs().max() > 1e-2 * ours.abs().max():
                error_msgs.append(
                    f"{key}: the assembled weight in the state dict disagrees with the frames "
                    f"{prefix}q_weight/k_weight beside it (edited after saving?); a converted model loads the "
                    "frames: edit those, or load the edited weight with load_weight")

    def forward(self, x: Tensor) -> Tensor:
        w = self._assembled()
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

        This is also the route for an attention layer that
        :func:`~stiefel_mini.convert.convert_attention` cannot read, e.g. home-built code with one
        fused ``qkv = nn.Linear(d, 3 d)`` whose rows are Q | K | V, heads contiguous in each::

            proj, info = FrameProjection.from_weight(attn.qkv.weight, attn.qkv.bias, {"q": H, "k": H}, d // H)
            attn.qkv = proj  # V stays an ordinary weight; param_groups and StiefelAdam find the frames

        (a layout with Q, K and V interleaved per head must be reordered first).
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
            sv = torch.linalg.svdvals(work)  # (h, hd)
            gain = sv.mean(dim=-1)  # (h,)
            spread = float((sv - (gain[:, None] if logit_scale == "learned" else 1.0)).abs().max())
            if stiefel:
                polar = project(work)
                info[name] = SegmentInfo(float(torch.linalg.norm(work - polar) / torch.linalg.norm(work)), gain,
                                         spread)
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

