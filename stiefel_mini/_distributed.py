"""DTensor support for StiefelAdam's frame rule: local shards, placement checks, collective checks.

FSDP2 (``torch.distributed.fsdp.fully_shard``) stores every parameter as a DTensor sharded on its
first dimension. Frames stored ``(..., n_heads, r, c)`` are then split between whole frames, so each
rank holds complete ``r x c`` frames and the frame rule runs on its local shard with no
communication. What does need communication is agreement: every rank must take or refuse a step
together, so the checks that can raise are reduced over the mesh before any rank raises.

Tensors that are not DTensors pass through every function here unchanged, at no cost.
"""

from __future__ import annotations

import math
import sys

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["is_dtensor", "local", "check_frame_placement", "like", "mesh_of", "all_true", "max_over"]

_DTENSOR: list[type] = []  # torch's DTensor class, once torch.distributed.tensor is loaded


def _dtensor_class() -> type | None:
    """``torch.distributed.tensor.DTensor`` where that module is loaded, else ``None``.

    A tensor can only be a DTensor once its module is imported, so ``import stiefel_mini`` does not
    import it (about half a second, paid by every process that imports the library)."""
    if not _DTENSOR:
        cls = getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", None)
        if cls is None:
            return None
        _DTENSOR.append(cls)
    return _DTENSOR[0]


def is_dtensor(t: Tensor) -> bool:
    """Whether ``t`` is a ``torch.distributed.tensor.DTensor``."""
    cls = _dtensor_class()
    return cls is not None and isinstance(t, cls)


def local(t: Tensor) -> Tensor:
    """The shard of ``t`` this rank holds (``t`` itself when it is not a DTensor).

    Called under ``torch.no_grad`` (as the optimizer step is), it is the DTensor's own local
    tensor: writing into it changes the DTensor.
    """
    return t.to_local() if is_dtensor(t) else t


def check_frame_placement(p: Tensor, where: str) -> None:
    """Raise ``ValueError`` unless every rank holds whole frames of the frame parameter ``p``.

    A DTensor frame ``(..., r, c)`` may be replicated or sharded on any leading (batch) dimension;
    a placement that splits ``r`` or ``c``, or a partial (pending-reduction) one, would hand the
    frame rule a piece of a frame, whose polar factor is not a piece of the frame's.
    """
    if not is_dtensor(p):
        return
    for placement in p.placements:
        if placement.is_replicate():
            continue
        dim = getattr(placement, "dim", None)
        if isinstance(dim, int) and not placement.is_partial() and dim % p.dim() < p.dim() - 2:
            continue
        raise ValueError(
            f"{where} is a DTensor with placements {tuple(p.placements)} on a mesh of shape "
            f"{tuple(p.device_mesh.shape)}: {placement!r} splits each {tuple(p.shape[-2:])} frame "
            "between ranks, and the frame rule needs whole frames. Shard frames on a leading (head) "
            "dimension only: fully_shard's default Shard(0) does that for frames stored "
            "(n_heads, d_model, d_head); a shard_placement_fn should return Shard(0) for them, and "
            "tensor parallelism should split heads, not d_model or d_head. A frame with no leading "
            "dimension can be left out of the sharding (fully_shard(..., ignored_params=...))"
        )


def like(t: Tensor, p: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``t`` (this rank's shard) as a DTensor of global ``shape`` placed as ``p``; ``t`` if ``p`` is
    not a DTensor. The result shares ``t``'s memory."""
    if not is_dtensor(p):
        return t
    stride = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))  # contiguous
    return _dtensor_class().from_local(t, p.device_mesh, p.placements, run_check=False, shape=torch.Size(shape),
                                      stride=stride)


def mesh_of(ps: list[Tensor]):
    """The one device mesh of the DTensors among ``ps`` (``None`` if there are none).

    ``ValueError`` if they live on different meshes: the optimizer could not then tell which ranks
    must agree on a step.
    """
    meshes = []
    for p in ps:
        if is_dtensor(p) and not any(p.device_mesh == m for m in meshes):
            meshes.append(p.device_mesh)
    if len(meshes) > 1:
        raise ValueError(
            f"the frames of one StiefelAdam live on {len(meshes)} different device meshes "
            f"({', '.join(str(m) for m in meshes)}); use one optimizer per mesh"
        )
    return meshes[0] if meshes else None


def _reduce(x: Tensor, mesh, op) -> Tensor:
    """All-reduce ``x`` in place over every dimension of ``mesh``, i.e. over all of its ranks."""
    for d in range(mesh.ndim):
        dist.all_reduce(x, op=op, group=mesh.get_group(d))
    return x


def all_true(flag: Tensor, mesh) -> bool:
    """Whether a boolean scalar ``flag`` is true on every rank of ``mesh`` (this rank's if ``None``).

    A collective: every rank of the mesh must call it, in the same order as the others.
    """
    if mesh is None:
        return bool(flag)
    x = flag.to(device=mesh.device_type, dtype=torch.int32).reshape(1)
    return bool(_reduce(x, mesh, dist.ReduceOp.MIN))


def max_over(value: float, mesh) -> float:
    """The largest ``value`` over the ranks of ``mesh`` (``value`` itself if ``None``); NaN wins.

    A collective, as :func:`all_true`.
    """
    if mesh is None:
        return value
    nan = math.isnan(value)
    x = torch.tensor([-math.inf if nan else value, float(nan)], dtype=torch.float64, device=mesh.device_type)
    _reduce(x, mesh, dist.ReduceOp.MAX)
    return math.nan if x[1].item() else x[0].item()
