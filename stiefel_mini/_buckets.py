"""Where a frame parameter's optimizer state lives, and the batches one step works on.

:class:`~stiefel_mini.optim.StiefelAdam` stacks the frames of a param group that share a tall shape
``(n, k)``, device and dtype into one bucket: a batch ``(B, n, k)`` (a wide parameter is
transposed, a DTensor contributes this rank's shard), so that each formula of the frame rule is one
batched call. The bucket keeps persistent batches across steps, and the state tensors of its
parameters are views of them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from . import _distributed as _dt
from ._frame_kernel import compute_dtype
from .geometry import is_wide


def to_tall(t: Tensor, wide: bool) -> Tensor:
    """View a per-parameter tensor ``(..., r, c)`` as a batch in tall layout ``(B, max, min)``; of a
    DTensor, this rank's shard."""
    t = _dt.local(t)
    t = t.mT if wide else t
    return t.reshape(-1, *t.shape[-2:])


def from_tall(t: Tensor, shape: torch.Size, wide: bool) -> Tensor:
    """Inverse of :func:`to_tall`: a batch ``(B, a, b)`` back to the parameter layout ``shape``."""
    return (t.mT if wide else t).reshape(shape)


def view_from_tall(t: Tensor, shape: tuple[int, ...], wide: bool) -> Tensor:
    """:func:`from_tall` as a view of ``t`` (raises rather than copying): state that aliases a batch."""
    return (t.mT if wide else t).view(shape)


def bucket_for(cache: dict, ps: list[Tensor], states: list[dict[str, Any]]) -> Bucket:
    """The persistent batches of a bucket, made anew when its parameters or their state changed."""
    key = tuple(id(p) for p in ps)
    bucket = cache.get(key)
    if bucket is None or not bucket.holds(ps, states):
        for other in [k for k in cache if not set(k).isdisjoint(key)]:
            del cache[other]  # its parameters' state moves into the new bucket
        bucket = cache[key] = Bucket(ps, states)
    return bucket


class Bucket:
    """Persistent batched tensors of a bucket of frames: the frames' state lives in them.

    ``m`` and ``v`` are two pairs of tall batches ``(B, n, k)`` / ``(B, ., .)``: the state of the
    bucket's parameters is a view of pair ``current``, and a step's new moments go into the other
    pair (the buffered kernel writes them there), so a refused step leaves the state untouched and
    an accepted one only swaps the views. ``W`` and ``G`` receive the frames and gradients.
    ``load_state_dict`` or any replacement of a state tensor is detected by :meth:`holds`, and the
    bucket is then stacked anew from the state.
    """

    def __init__(self, ps: list[Tensor], states: list[dict[str, Any]]) -> None:
        self.ps = list(ps)
        self.wides = [is_wide(p) for p in ps]
        self.counts = [_dt.local(p).shape[:-2].numel() for p in ps]
        self.W = torch.cat([to_tall(p.detach(), w) for p, w in zip(ps, self.wides)])  # (B, n, k)
        self.G = torch.empty_like(self.W)
        m = torch.cat([to_tall(s["exp_avg"], w) for s, w in zip(states, self.wides)])  # (B, n, k)
        v = torch.cat([to_tall(s["exp_avg_sq"], w) for s, w in zip(states, self.wides)])
        self.m, self.v = (m, torch.empty_like(m)), (v, torch.empty_like(v))
        self.current = 0
        self.scratch = torch.empty_like(m)  # (B, n, k), compute dtype
        k = m.shape[-1]
        self.pp = tuple(m.new_empty(4, m.shape[0], k, k).unbind())  # 4 x (B, k, k), compute dtype
        self.pp64 = m.new_empty(m.shape[0], k, k, dtype=torch.float64)  # (B, k, k)
        self.frame = torch.empty_like(self.W)  # (B, n, k), the frames' dtype
        self.views = [self._views(i) for i in (0, 1)]
        self.attach(states, 0)

    def _views(self, i: int) -> list[tuple[Tensor, Tensor]]:
        """Per parameter, ``(exp_avg, exp_avg_sq)`` in the parameter's layout, viewing pair ``i``
        (for a DTensor parameter, DTensors placed as it is whose shards are these views)."""
        views = []
        for p, w, mi, vi in zip(self.ps, self.wides, self.m[i].split(self.counts), self.v[i].split(self.counts)):
            shard = _dt.local(p)
            m, v = view_from_tall(mi, shard.shape, w), view_from_tall(vi, v_state_shape_of(vi, shard, w), w)
            views.append((_dt.like(m, p, p.shape), _dt.like(v, p, v_state_shape_of(vi, p, w))))
        return views

    def attach(self, states: list[dict[str, Any]], i: int) -> None:
        """Make pair ``i`` the state: each parameter's ``exp_avg`` / ``exp_avg_sq`` become its views."""
        self.current = i
        for s, (m, v) in zip(states, self.views[i]):
            s["exp_avg"], s["exp_avg_sq"] = m, v

    def holds(self, ps: list[Tensor], states: list[dict[str, Any]]) -> bool:
        """Whether the state of ``ps`` is still this bucket's current pair (nothing replaced it)."""
        return all(p is q for p, q in zip(ps, self.ps)) and all(
            s["exp_avg"] is m and s["exp_avg_sq"] is v for s, (m, v) in zip(states, self.views[self.current])
        )

    def buffers(self) -> dict[str, Tensor]:
        """Where the rule writes: the other moment pair, the scratch, the new frames."""
        other = 1 - self.current
        return {"exp_avg": self.m[other], "exp_avg_sq": self.v[other], "scratch": self.scratch,
                "frame": self.frame if self.frame.dtype == self.scratch.dtype else None,
                "pp": self.pp, "pp64": self.pp64}

    def gather(self, ts: list[Tensor], out: Tensor) -> Tensor:
        """Stack per-parameter tensors into ``out`` in tall layout: ``(B, n, k)``."""
        return torch.cat([to_tall(t, w) for t, w in zip(ts, self.wides)], out=out)

    def inputs(self, ps: list[Tensor], states: list[dict[str, Any]]) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | float]:
        """The frame rule's arguments ``(W, G, exp_avg, exp_avg_sq, step)`` for this bucket.

        Shapes: ``(B, n, k)`` for the frames, this rank's gradients and first moments; ``(B, 1, 1)``,
        ``(B, 1, k)`` or ``(B, n, k)`` for the second moments; ``step`` this step's count, a number,
        or ``(B, 1, 1)`` when the parameters were added at different times.
        """
        steps = [float(s["step"]) + 1 for s in states]
        step: Tensor | float = steps[0]
        if len(set(steps)) > 1:
            step = torch.tensor(steps, dtype=torch.float64).repeat_interleave(torch.tensor(self.counts))
            step = step.to(ps[0].device).view(-1, 1, 1)
        W, G = self.gather(ps, self.W), self.gather([p.grad for p in ps], self.G)
        return W, G, self.m[self.current], self.v[self.current], step


class BucketUpdate:
    """A computed, not yet applied, update of one bucket of frames; ``commit`` writes it back.

    ``ok`` ``(B,)``: per frame, whether its new value is finite. The frame rule returns NaN for a
    frame it refuses (a non-finite gradient, a step the retraction cannot take), so this is the
    one check a step needs. The buffered kernel passes the retraction's own verdict, which is that;
    without it (``ok=None``) the new frames are read once to find it.
    """

    def __init__(self, group_index, ps, states, bucket, W_new, m, v, ok: Tensor | None = None) -> None:
        self.group_index, self.ps, self.states, self.bucket = group_index, ps, states, bucket
        self.W_new, self.m, self.v = W_new, m, v
        self.counts = bucket.counts
        if ok is None:
            # A frame's sum (its finite entries are at most 1 in size, summed in at least float32) is
            # non-finite exactly when an entry is, and needs no frame-sized temporary.
            ok = torch.isfinite(W_new.sum(dim=(-2, -1), dtype=torch.promote_types(W_new.dtype, torch.float32)))
        self.ok = ok

    def commit(self) -> None:
        for p, w, Wi in zip(self.ps, self.bucket.wides, self.W_new.split(self.counts)):
            shard = _dt.local(p)
            shard.copy_(from_tall(Wi, shard.shape, w))
        other = 1 - self.bucket.current
        for pair, new in ((self.bucket.m, self.m), (self.bucket.v, self.v)):
            if new is not pair[other]:  # the reference rule's moments, not written in place
                pair[other].copy_(new)
        self.bucket.attach(self.states, other)
        for s in self.states:
            s["step"] += 1


def diagnose(u: BucketUpdate) -> ValueError:
    """The error for a bucket with a refused frame: which parameter, which group, and why."""
    for p, ok in zip(u.ps, u.ok.split(u.counts)):
        if bool(ok.all()):
            continue
        where = f"a frame of shape {tuple(p.shape)} in param group {u.group_index}"
        if _dt.is_dtensor(p):
            where += " (in this rank's shard; no rank takes this step)"
        if not bool(torch.isfinite(_dt.local(p.grad)).all()):
            return ValueError(
                f"{where} has a non-finite gradient (NaN or inf); no parameter or state was changed. "
                "Find where it comes from (e.g. with torch.autograd.detect_anomaly), or skip the "
                "step or zero that gradient before calling step()"
            )
        return ValueError(
            f"{where}: the retraction cannot take this step (W + step is rank-deficient, the frame "
            "was moved off the manifold, e.g. edited in place, or a Cayley / exponential step is too "
            "large to take accurately); no parameter or state was changed. Map the frame back with "
            "stiefel_mini.geometry.project, or use a smaller lr or max_step"
        )
    raise AssertionError("diagnose called on a bucket whose frames were all accepted")


def v_shape(mode: str, n: int, k: int) -> tuple[int, int]:
    """Trailing shape of the second moment of one tall ``n x k`` frame."""
    return {"frame": (1, 1), "column": (1, k), "element": (n, k)}[mode]


def v_state_shape_of(v: Tensor, p: Tensor, wide: bool) -> tuple[int, ...]:
    """Shape of a frame parameter ``p``'s second moment, given its tall batch slice ``v`` ``(b, a, c)``."""
    a, c = v.shape[-2:]
    return (*p.shape[:-2], c, a) if wide else (*p.shape[:-2], a, c)


def v_state_shape(p: Tensor, mode: str) -> tuple[int, ...]:
    """Shape of the second moment of a frame parameter ``p`` (in p's own orientation)."""
    n, k = sorted(p.shape[-2:], reverse=True)
    a, b = v_shape(mode, n, k)
    return (*p.shape[:-2], b, a) if is_wide(p) else (*p.shape[:-2], a, b)


def init_frame_state(state: dict[str, Any], p: Tensor, mode: str, mesh=None) -> None:
    """Zero state for the frame ``p``, after checking it is on the manifold; for a DTensor ``p``
    the check is over all ranks of ``mesh`` (a collective) and the state is placed as ``p``."""
    dtype = compute_dtype(p.dtype)
    shard = _dt.local(p)
    W = shard.detach().to(dtype)
    Wt = W.mT if is_wide(p) else W
    gram_err = 0.0
    if W.numel():
        gram_err = (Wt.mT @ Wt - torch.eye(Wt.shape[-1], dtype=dtype, device=W.device)).abs().max().item()
    gram_err = _dt.max_over(gram_err, mesh)
    tol = max(1e-4, 10 * torch.finfo(p.dtype).eps)
    if not gram_err <= tol:
        raise ValueError(
            f"a frame of shape {tuple(p.shape)} is not on the Stiefel manifold "
            f"(max |W^T W - I| = {gram_err:.2e} > {tol:.0e}); initialise it with "
            "stiefel_mini.geometry.random_stiefel or map it there with "
            "stiefel_mini.geometry.project before the first step"
        )
    state["step"] = torch.tensor(0.0, dtype=torch.float32)
    state["exp_avg"] = _dt.like(torch.zeros(shard.shape, dtype=dtype, device=W.device), p, p.shape)
    v = torch.zeros(v_state_shape(shard, mode), dtype=torch.float64, device=W.device)
    state["exp_avg_sq"] = _dt.like(v, p, v_state_shape(p, mode))
