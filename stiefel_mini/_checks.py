"""The checks behind :class:`~stiefel_mini.optim.StiefelAdam`'s ``ValueError`` messages: its
hyperparameters, the tensors of frame groups, saved state that does not fit a frame, and the
finiteness of the gradients it updates as AdamW."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from . import _distributed as _dt
from .geometry import RETRACTIONS

SECOND_MOMENTS = ("frame", "column", "element")
PROJECTORS = ("euclidean", "canonical", "none")


def frame_name(index: int, group: dict[str, Any], j: int, p: Tensor, name: str | None) -> str:
    """How errors name the ``j``-th parameter of param group ``index``: its name (given as a
    ``(name, tensor)`` pair), its position, its group's ``name`` and its shape."""
    what = f"{name!r}, " if name else ""
    label = f" ({group['name']!r})" if "name" in group else ""
    return f"the frame {what}parameter {j} of param group {index}{label}, of shape {tuple(p.shape)},"


def check_saved_frame_state(p: Tensor, saved: Tensor, want: tuple[int, ...], mode: str) -> None:
    """``ValueError`` unless a frame's saved ``exp_avg_sq`` has the shape ``want`` that this group's
    ``second_moment`` keeps and is sharded as the frame is (both plain, or both DTensors with the
    same placements): the frame rule pairs each shard with its own moments."""
    got = tuple(saved.shape)
    if got != want:
        raise ValueError(
            f"the saved state of a frame of shape {tuple(p.shape)} has exp_avg_sq of shape "
            f"{got}, but second_moment={mode!r} keeps {want}: it was saved by "
            "another optimizer or with another second_moment; load it into that, or drop "
            "this parameter's entry from state_dict['state'] to start its moments afresh"
        )
    ours, theirs = (tuple(t.placements) if _dt.is_dtensor(t) else None for t in (p, saved))
    if ours != theirs:
        def layout(x):
            return "a plain tensor" if x is None else f"a DTensor with placements {x}"
        raise ValueError(
            f"a frame of shape {tuple(p.shape)} is {layout(ours)}, but its saved state is {layout(theirs)}; "
            "load a sharded model's optimizer state with "
            "torch.distributed.checkpoint.state_dict.set_state_dict, which shards a full state dict "
            "(StateDictOptions(full_state_dict=True)) and reshards a sharded one"
        )


def gradient_sums(grads: list[Tensor]) -> Tensor:
    """One sum per gradient, ``sum_ij g_ij`` in at least float32: ``(len(grads),)``, on the first one's device.

    A NaN or infinite entry makes its gradient's sum non-finite, so ``gradient_sums(grads).isfinite()``
    tells which gradients are finite in one read pass over each (the cheapest full reduction:
    ``isfinite(g).all()`` writes a boolean tensor first and took about 20 times as long on a CPU). A
    finite gradient whose sum overflows (entries near float32's largest, 3.4e38) counts as not finite
    too. No copy is made of a 16-bit gradient: it is summed in float32 as it is read.
    """
    if not grads:
        return torch.zeros(0)
    return torch.stack([g.sum(dtype=torch.promote_types(g.dtype, torch.float32)) for g in grads])


def check_frame_tensor(p: Tensor) -> None:
    if p.dim() < 2:
        raise ValueError(
            f"a stiefel=True group holds a tensor of shape {tuple(p.shape)}; frames need at least "
            "2 dimensions (..., r, c). Put vectors and scalars in a group without stiefel=True"
        )
    if p.is_complex():
        raise ValueError(
            f"a stiefel=True group holds a complex tensor ({p.dtype}); StiefelAdam handles real "
            "frames only"
        )
    if not p.is_floating_point():
        raise ValueError(f"a stiefel=True group holds a non-float tensor ({p.dtype})")


def check_hyperparameters(g: dict[str, Any]) -> None:
    lr = g["lr"]
    if isinstance(lr, Tensor):
        lr = lr.item()
    if not (0.0 <= lr and math.isfinite(lr)):
        raise ValueError(f"Invalid learning rate: {lr} (must be finite and >= 0)")
    if not 0.0 <= g["eps"]:
        raise ValueError(f"Invalid epsilon value: {g['eps']} (must be >= 0)")
    b1, b2 = g["betas"]
    if not 0.0 <= b1 < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {b1} (must be in [0, 1))")
    if not 0.0 <= b2 < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {b2} (must be in [0, 1))")
    if not 0.0 <= g["weight_decay"]:
        raise ValueError(f"Invalid weight_decay value: {g['weight_decay']} (must be >= 0)")
    ms = g["max_step"]
    if ms is not None and (isinstance(ms, bool) or not (isinstance(ms, (int, float)) and ms > 0 and math.isfinite(ms))):
        raise ValueError(f"Invalid max_step: {ms!r} (a positive float, or None for no cap)")
    if g["second_moment"] not in SECOND_MOMENTS:
        raise ValueError(f"Invalid second_moment {g['second_moment']!r}; choose one of {list(SECOND_MOMENTS)}")
    if g["retraction"] not in RETRACTIONS:
        raise ValueError(f"Invalid retraction {g['retraction']!r}; choose one of {sorted(RETRACTIONS)}")
    if g["projector"] not in PROJECTORS:
        raise ValueError(f"Invalid projector {g['projector']!r}; choose one of {list(PROJECTORS)}")
    if g["projector"] == "none" and g["retraction"] == "exp":
        # The exponential map is defined for tangent steps only; with no projector it would leave
        # the manifold. Polar, QR and Cayley map any step back onto it.
        raise ValueError(
            "projector='none' cannot be combined with retraction='exp' (the exponential map needs a "
            "tangent step); use retraction 'polar', 'qr' or 'cayley', or a projector"
        )
