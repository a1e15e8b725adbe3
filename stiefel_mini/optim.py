r"""StiefelAdam: Riemannian Adam for frames on the Stiefel manifold, AdamW for everything else.

:func:`stiefel_adam_frame_update` is the frame rule, a pure function; :class:`StiefelAdam` keeps
the state, stacks each param group's frames into batches and applies the rule to them;
:func:`~stiefel_mini.groups.param_groups` splits a model's parameters into the groups it expects,
and :func:`~stiefel_mini.groups.is_frame` tells a marked frame in any group.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Iterable

import torch
from torch import Tensor

from . import _distributed as _dt
from ._adamw import adamw_step
from ._buckets import BucketUpdate, bucket_for, diagnose, init_frame_state, v_state_shape
from ._checks import PROJECTORS, SECOND_MOMENTS, check_frame_tensor, check_hyperparameters, check_saved_frame_state
from ._checks import frame_name, gradient_sums
from ._frame_kernel import adam_coefficient, cap_factor, compute_dtype, default_frame_update, floor, frobenius_sq
from ._frame_kernel import polar_bound, second_moment_sample
from ._numerics import polar_or_nan, retract_or_nan
from .geometry import canonical_gradient, project_tangent, sym
from .groups import is_frame

__all__ = ["StiefelAdam", "stiefel_adam_frame_update", "SECOND_MOMENTS", "PROJECTORS"]

# Param group keys besides the hyperparameters: torch.optim.Optimizer's, LR schedulers' and a
# free-form label (``param_groups`` names its groups).
_GROUP_EXTRA_KEYS = frozenset({"params", "param_names", "initial_lr", "name"})


def stiefel_adam_frame_update(
    W: Tensor,
    G: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    step: Tensor | float,
    *,
    lr: float,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    max_step: float | None = 0.1,
    second_moment: str = "frame",
    projector: str = "euclidean",
    retraction: str = "polar",
) -> tuple[Tensor, Tensor, Tensor]:
    r"""One Riemannian Adam step for a batch of frames: the frame rule of :class:`StiefelAdam`.

    For each frame ``W_t`` (tall, ``n x p``) with Euclidean gradient ``G_t``, first moment
    ``m_{t-1}`` (formed at the previous frame), second moment ``v_{t-1}`` and step count ``t``
    (from 1), with the defaults (``second_moment="frame"``, ``projector="euclidean"``,
    ``retraction="polar"``):

    .. math::
        \xi_t &= P_{W_t}(G_t) = G_t - W_t N_t, \qquad N_t = \mathrm{sym}(W_t^\top G_t) \\
        \tilde m_{t-1} &= P_{W_t}(m_{t-1}) \\
        m_t &= \beta_1 \tilde m_{t-1} + (1-\beta_1)\,\xi_t \\
        v_t &= \beta_2 v_{t-1} + (1-\beta_2)\,\big(\lVert \xi_t \rVert_F^2 + 64u\,\lVert N_t \rVert_F^2\big) \\
        D_t &= \frac{m_t / (1-\beta_1^t)}{\sqrt{v_t / (1-\beta_2^t)} + \epsilon} \\
        S_t &= -\eta D_t \min\!\big(1, \delta / \lVert \eta D_t \rVert_F\big) \\
        W_{t+1} &= R^\text{polar}_{W_t}(S_t) = (W_t + S_t)\big((W_t + S_t)^\top (W_t + S_t)\big)^{-1/2}

    with ``eta = lr``, ``delta = max_step`` and ``u`` the unit roundoff of the compute dtype. Line
    by line: the Riemannian gradient; the transport of the first moment to the tangent space at
    ``W_t`` by re-projection; the first moment; one second moment per frame; the bias-corrected Adam
    direction, of Frobenius norm about 1; the step, at most the trust cap long; the polar
    retraction. The floor ``64 u ||N_t||^2`` is rounding insurance: the normal part ``W N`` of G is removed only to
    about ``u ||G||``, and without it Adam would blow that remainder up to a full step (with it, a
    gradient normal to the manifold moves a float32 frame by about ``4e-3 lr`` at most); otherwise
    it changes ``v`` by a relative ``64 u ||N||^2 / ||xi||^2``.

    How it is computed: ``P_W`` is linear, so the two projections merge into
    ``m_t = P_W(beta1 m_{t-1} + (1 - beta1) G_t)``, and ``||xi||^2 = ||G||^2 - ||N||^2``; ``v`` is kept
    and summed in float64, so the step is the same for float32 gradients of any scale from 1e-30 to
    1e30 (up to ``eps``). The polar series is exact to rounding for ``||(W + S)^T (W + S) - I||_F``
    within the bound the cap gives; without a cap (or above 0.47) a frame far from the identity
    uses the SVD of ``W + S``, chosen per frame on the device. A frame whose gradient is not finite,
    or whose step the retraction refuses (a rank-deficient ``W + S``; a frame moved off the
    manifold by more than 0.02 in ``||W^T W - I||_F`` under the cap; a Cayley or exponential step
    too large to take accurately), comes back NaN: the function never raises on data, and
    :class:`StiefelAdam` checks the new frames and raises instead. It changes none of its
    arguments, synchronises nothing with the host, and each frame's result depends on that frame
    alone, so it compiles with ``torch.compile(fullgraph=True)``.

    Options (as in :class:`StiefelAdam`): ``second_moment`` ``"column"`` (``v_j`` averages
    ``p ||xi_j||^2``, the floor ``64 u p ||(W N)_j||^2``) or ``"element"`` (``n p xi_ij^2``, no floor),
    where ``D`` is projected onto ``T_W`` again, since an uneven rescaling leaves the tangent space;
    ``projector`` ``"canonical"`` (``xi = G - W G^T W``, ``m`` still transported by ``P_W``) or
    ``"none"`` (``xi = G``, no transport, no floor); ``retraction`` ``"qr"``, ``"cayley"`` or
    ``"exp"`` (``stiefel_mini.geometry.RETRACTIONS``); ``max_step=None`` for no cap.

    Args:
        W: frames ``(B, n, p)``, ``n >= p``, on the manifold; bf16 / fp16 frames are updated in
            float32 and the result is rounded back.
        G: Euclidean gradients ``(B, n, p)``.
        exp_avg: first moments ``m`` ``(B, n, p)`` in the compute dtype (at least float32; zeros at
            the first step).
        exp_avg_sq: second moments ``v``: ``(B, 1, 1)`` (frame), ``(B, 1, p)`` (column) or
            ``(B, n, p)`` (element), float64, zeros at the first step.
        step: this step's count ``t >= 1``, a number or a tensor broadcastable to ``(B, 1, 1)``.
        lr: the learning rate ``eta``.
        beta1, beta2, eps, max_step, second_moment, projector, retraction: as in :class:`StiefelAdam`.

    Returns:
        ``(W_{t+1}, m_t, v_t)``, shaped as ``W``, ``exp_avg`` and ``exp_avg_sq``.

    Reference: Kingma & Ba (2015); Becigneul & Ganea (2019), "Riemannian adaptive optimization
    methods"; Absil, Mahony, Sepulchre (2008), section 8.1 (transport by projection); Guerrero,
    "Stiefel Attention" (arXiv 2609.19363) for the per-frame second moment and the trust cap.
    """
    store, dtype = W.dtype, compute_dtype(W.dtype)
    W, G = W.to(dtype), G.to(dtype)
    if projector == "none":  # xi = G: no transport, no floor
        m, sample = torch.lerp(exp_avg, G, 1 - beta1), second_moment_sample(G, second_moment)
    elif second_moment == "frame" and projector == "euclidean":  # the merged form, as above
        WtG = W.mT @ G
        N = sym(WtG)
        m = torch.lerp(exp_avg, G, 1 - beta1)  # minus W sym(W^T (beta1 m + (1 - beta1) G)):
        m.baddbmm_(W, sym(torch.baddbmm(WtG, W.mT, exp_avg, beta=1 - beta1, alpha=beta1)), alpha=-1.0)
        N64 = N.to(torch.float64, copy=True)
        n_sq = N64.mul_(N64).sum(dim=(-2, -1), keepdim=True)  # ||N||_F^2
        sample = (frobenius_sq(G) - n_sq).clamp_min(0.0) + floor(dtype) * n_sq
    else:
        normal = W @ sym(W.mT @ G)  # W N
        xi = G - normal if projector == "euclidean" else canonical_gradient(W, G)
        m, sample = torch.lerp(project_tangent(W, exp_avg), xi, 1 - beta1), second_moment_sample(xi, second_moment)
        if second_moment == "column":
            sample = sample + floor(dtype) * second_moment_sample(normal, "column")
    v = exp_avg_sq * beta2 + sample * (1 - beta2)
    coef = adam_coefficient(v, step, lr=lr, beta1=beta1, beta2=beta2, eps=eps)  # -lr D = coef * m, float64
    if second_moment == "frame":  # D is m times one scalar per frame: S = a * b stays tangent
        a, b = m, coef.to(dtype)
        if max_step is not None:
            a = m * b
            b = cap_factor(torch.linalg.vector_norm(a, dim=(-2, -1), keepdim=True), max_step)
        S = None if retraction == "polar" else a * b
    else:  # an uneven rescaling leaves the tangent space: D is projected again
        lrD = m * coef.to(dtype)  # -lr D
        S = lrD if projector == "none" else project_tangent(W, lrD)
        if max_step is not None:
            S = S * cap_factor(torch.linalg.matrix_norm(S, keepdim=True), max_step)
    if retraction == "polar":
        W_plus_S = torch.addcmul(W, a, b) if second_moment == "frame" else W + S
        W_new, _ = polar_or_nan(W_plus_S, polar_bound(max_step, projector, dtype, store))
    else:
        W_new, _ = retract_or_nan(W, S, retraction)
    return W_new.to(store), m, v


class StiefelAdam(torch.optim.Optimizer):
    r"""Adam on the Stiefel manifold for frame groups, ``torch.optim.AdamW`` for all other groups.

    Frames are tensors ``(..., r, c)`` whose leading dimensions index independent frames, each with
    orthonormal columns if ``r >= c`` and orthonormal rows otherwise (so an ``nn.Linear`` weight can
    be a frame as it is). Every parameter of a group with ``stiefel=True`` is a frame, and so is a
    marked one (:func:`~stiefel_mini.groups.is_frame`: this library's modules mark their frames) in
    whatever group it arrives, with that group's ``lr``, ``betas``, ``eps``, ``max_step`` and
    ablation options: ``StiefelAdam(model.parameters(), lr=1e-2)`` keeps the frames on the manifold.
    :func:`~stiefel_mini.groups.param_groups` gives the frames a group, and options, of their own;
    a module built with ``stiefel=False`` has no frames. Every other parameter is updated exactly
    as ``torch.optim.AdamW`` would with the same hyperparameters, so one optimizer trains a whole
    model. A non-finite gradient raises ``ValueError`` before anything changes, frame or not (the
    rule of ``StiefelMuon``; ``torch.amp.GradScaler`` skips such steps first).

    For a frame ``W_t`` (written tall, ``n x p``) with Euclidean gradient ``G_t`` at step ``t``, the
    update is :func:`stiefel_adam_frame_update` (which states it line by line):

    .. math::
        m_t &= \beta_1 P_{W_t}(m_{t-1}) + (1-\beta_1)\, \xi_t, \quad \xi_t = P_{W_t}(G_t), \\
        v_t &= \beta_2 v_{t-1} + (1-\beta_2) \big(\lVert \xi_t \rVert_F^2 + 64u\,\lVert N_t \rVert_F^2\big), \\
        W_{t+1} &= R^\text{polar}_{W_t}(S_t), \quad
        S_t = -\eta D_t \min\!\big(1, \delta / \lVert \eta D_t \rVert_F\big), \\
        D_t &= \frac{m_t / (1-\beta_1^t)}{\sqrt{v_t / (1-\beta_2^t)} + \epsilon},

    with ``N_t = sym(W_t^T G_t)``, the learning rate ``eta = lr``, the trust cap
    ``delta = max_step`` and ``u`` the unit roundoff. ``state["exp_avg"]`` holds ``m_t`` as formed
    at ``W_t``: its transport ``P_{W_{t+1}}`` to the new tangent space is applied at the next step,
    where it merges with the projection of the new gradient.

    Because ``v`` is a squared Frobenius norm, ``D`` has Frobenius norm about 1 and each frame
    moves about ``lr`` per step, whatever the scale of the loss (a scale-free step). A frame ``lr``
    above ``max_step`` is cut back by the trust cap: a frame then moves ``max_step`` per step
    (whenever ``lr ||D_t||_F > max_step``, nearly every step), so an lr, or a scheduler's peak lr,
    beyond the cap leaves the frames' steps unchanged.

    Ablation options, per group:

    * ``second_moment``: ``"frame"`` (above), ``"column"`` (``v_j`` averages ``p ||xi_j||^2``, one per
      column) or ``"element"`` (``n p xi_ij^2``, Adam's elementwise rule). The factor keeps the step's
      Frobenius norm about ``lr`` in every mode. ``"frame"`` is equivariant under both
      ``W -> Q W`` (``Q`` in O(n), rotating the embedding space) and ``W -> W R`` (``R`` in O(p),
      a change of basis inside the frame); ``"column"`` only under ``W -> Q W``, since column
      norms are not invariant under ``R``; ``"element"`` under neither. ``"column"`` and
      ``"element"`` rescale the direction unevenly, so ``D`` is projected onto the tangent space
      again before the step.
    * ``retraction``: ``"polar"``, ``"qr"``, ``"cayley"`` or ``"exp"`` (see :mod:`stiefel_mini.geometry`;
      Cayley and exp results are re-orthonormalised once ``||W^T W - I||_F`` passes ``64 u``).
    * ``projector``: ``"euclidean"`` (``P_W``), ``"canonical"`` (``G - W G^T W``) or ``"none"``
      (Adam on the raw gradient, then a polar, QR or Cayley retraction pulls the result back on
      the manifold, so ``"none"`` with ``"exp"`` raises ``ValueError``; the
      first moment is not transported).
    * ``max_step``: the cap ``delta`` in Frobenius norm, or ``None`` for no cap.

    Weight decay is a no-op on frames, by design: the Riemannian gradient of
    ``lambda/2 ||W||_F^2`` is ``P_W(lambda W) = 0``, and decoupled decay followed by the polar
    retraction gives ``polar((1 - lr wd) W) = W``. The decay is therefore skipped for frames,
    which makes the frames bitwise independent of ``weight_decay``. It is never fused into the step
    before the retraction: ``polar((1 - lr wd) W - lr D) = polar(W - lr D / (1 - lr wd))`` would
    silently enlarge the step by ``1 / (1 - lr wd)``.

    The frames must be on the manifold when the optimizer first sees them: at the first step a
    frame whose ``W^T W`` differs from ``I`` by more than ``max(1e-4, 10 eps(dtype))`` in any entry
    raises ``ValueError`` (project it with :func:`stiefel_mini.geometry.project` first). After that
    every step lands on the manifold by construction. Frames stored in bf16 / fp16 are updated in
    float32 and cast back; their optimizer state is kept in float32.

    Sharded frames (FSDP2's ``fully_shard``, or any DTensor) must be split between whole frames,
    on a leading dimension (``Shard(0)`` of ``(n_heads, d_model, d_head)``: heads): each rank then
    updates the frames it holds, with no communication, and keeps their state as DTensors placed as
    they are, so ``torch.distributed.checkpoint`` saves and reshards it. A placement that splits
    the last two dimensions raises ``ValueError``; the checks that can refuse a step are reduced
    over the device mesh, so that every rank raises or none does.

    Args:
        params: parameters or param groups (dicts); frame groups carry ``stiefel=True``, and a
            marked frame is a frame in any group. A group may set any argument below (one that
            does not takes the constructor's value); any other key except ``params``,
            ``param_names``, ``initial_lr`` and ``name`` raises ``ValueError`` listing the known keys.
        lr: learning rate; for frames, the Frobenius length of a typical step. Default ``1e-3``.
        betas: coefficients of the first and second moments. Default ``(0.9, 0.999)``.
        eps: added to the denominator. Default ``1e-8``.
        weight_decay: decoupled weight decay (AdamW) for non-frame groups; ignored on frames.
            Default ``1e-2`` (as ``torch.optim.AdamW``).
        stiefel: default for groups that do not say; ``True`` makes every parameter of a group a
            frame, ``False`` only its marked ones. Default ``False``.
        max_step: trust-region cap on a frame's step in Frobenius norm, ``None`` for no cap.
            Default ``0.1``.
        second_moment: ``"frame"`` (default), ``"column"`` or ``"element"``.
        retraction: ``"polar"`` (default), ``"qr"``, ``"cayley"`` or ``"exp"``.
        projector: ``"euclidean"`` (default), ``"canonical"`` or ``"none"``.
        foreach: passed to AdamW's implementation for the non-frame groups. Default ``None``
            (torch's choice).

    Reference: Kingma & Ba (2015); Loshchilov & Hutter (2019) for AdamW; Becigneul & Ganea (2019),
    "Riemannian adaptive optimization methods"; Li, Fuxin, Todorovic (2020), "Efficient Riemannian
    optimization on the Stiefel manifold via the Cayley transform"; Guerrero, "Stiefel Attention"
    (arXiv 2609.19363) for the per-frame second moment and the trust cap.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        *,
        stiefel: bool = False,
        max_step: float | None = 0.1,
        second_moment: str = "frame",
        retraction: str = "polar",
        projector: str = "euclidean",
        foreach: bool | None = None,
    ) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, stiefel=stiefel, max_step=max_step,
                        second_moment=second_moment, retraction=retraction, projector=projector, foreach=foreach)
        check_hyperparameters(defaults)
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a param group, after checking it: on any error the optimizer is left unchanged.

        Keys other than ``params``, ``param_names``, ``initial_lr`` (set by learning-rate
        schedulers), ``name`` (a label) and the constructor's hyperparameters raise ``ValueError`` (a typo such as
        ``max_stpe`` would otherwise be ignored silently); missing keys take the defaults.
        """
        unknown = sorted(set(param_group) - set(self.defaults) - _GROUP_EXTRA_KEYS)
        if unknown:
            raise ValueError(
                f"unknown param group key(s) {unknown}; known keys: "
                f"{sorted(set(self.defaults) | _GROUP_EXTRA_KEYS)}"
            )
        merged = {**self.defaults, **param_group}
        check_hyperparameters(merged)
        params = param_group["params"]
        if not isinstance(params, (Tensor, set)):  # torch.optim.Optimizer rejects sets itself
            param_group = {**param_group, "params": list(params)}  # a generator is read once
        for j, p in enumerate([params] if isinstance(params, Tensor) else param_group["params"]):
            name, p = p if isinstance(p, tuple) else (None, p)  # named parameters: (name, tensor)
            if merged["stiefel"] or is_frame(p):
                check_frame_tensor(p)
                _dt.check_frame_placement(p, frame_name(len(self.param_groups), param_group, j, p, name))
        super().add_param_group(param_group)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load optimizer state as ``torch.optim.Optimizer`` does, with two additions.

        * A saved group that lacks some of this optimizer's keys (for example one saved by
          ``torch.optim.AdamW``, which has no ``stiefel``) takes them from the group it is loaded
          into, that is from the constructor's defaults and the group's own options.
        * ``Optimizer.load_state_dict`` casts floating state to each parameter's dtype; a frame's
          state is kept in its own precision instead (``exp_avg`` at least float32,
          ``exp_avg_sq`` float64, see the class docstring). A frame whose saved ``exp_avg_sq``
          does not have this group's shape (state of another optimizer or another
          ``second_moment``) raises ``ValueError``.
        """
        saved = state_dict["state"]
        groups = [
            {**{k: v for k, v in own.items() if k != "params"}, **g}
            for own, g in zip(self.param_groups, state_dict["param_groups"])
        ]
        state_dict = {**state_dict, "param_groups": groups + state_dict["param_groups"][len(groups):]}
        pairs = [  # (saved id, own parameter, own group), in the order Optimizer.load_state_dict uses
            (pid, p, own)
            for own, g in zip(self.param_groups, groups)
            for pid, p in zip(g["params"], own["params"])
        ]
        for pid, p, own in pairs:
            if _is_frame(own, p) and pid in saved and "exp_avg_sq" in saved[pid]:
                check_saved_frame_state(p, saved[pid]["exp_avg_sq"], v_state_shape(p, own["second_moment"]),
                                        own["second_moment"])
        super().load_state_dict(state_dict)
        for pid, p, own in pairs:
            if _is_frame(own, p) and pid in saved:
                for key, dtype in (("exp_avg", compute_dtype(p.dtype)), ("exp_avg_sq", torch.float64)):
                    self.state[p][key] = saved[pid][key].to(dtype=dtype, device=p.device, copy=True)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Perform one optimization step. ``closure`` re-evaluates the model and returns the loss.

        The frame updates are computed first and checked together with every gradient (one host
        synchronisation per step): if a gradient is not finite, or a retraction refuses a step,
        ``ValueError`` names the parameter and its group, and no parameter and no state has changed.

        Frames that are DTensors (FSDP2) are updated on each rank's shard, whole frames only, with
        no communication; the check is then reduced over their device mesh, so that every rank
        takes the step or every rank raises.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        # Per group, once: its frames and its AdamW parameters (index in the group, tensor) with a gradient.
        split = [self._split(group) for group in self.param_groups]
        mesh = _dt.mesh_of([p for frames, _ in split for p in frames])
        updates = [u for i, (group, (frames, _)) in enumerate(zip(self.param_groups, split))
                   for u in self._frame_updates(i, group, frames, mesh)]
        live = [(i, j, p) for i, (_, others) in enumerate(split) for j, p in others if not p.grad.is_sparse]
        finite = gradient_sums([_dt.local(p.grad) for _, _, p in live]).isfinite()  # (len(live),)
        oks = [u.ok.flatten() for u in updates]
        ok = torch.cat([o.to(finite.device) for o in oks] + [finite]).all() if oks else finite.all()
        if not _dt.all_true(ok, mesh if mesh is not None else _dt.mesh_of([p for _, _, p in live])):
            if (bad := next((u for u in updates if not bool(u.ok.all())), None)) is not None:
                raise diagnose(bad)
            i, j, p = next((x for x, f in zip(live, finite.tolist()) if not f), (None, None, None))
            where = "a parameter on another rank" if j is None else f"parameter {j} of param group {i}"
            raise ValueError(f"StiefelAdam: the gradient of {where} is not finite (NaN or inf), or a frame step was "
                             "refused there; no parameter or state was changed on any rank")
        for u in updates:
            u.commit()
        for group, (_, others) in zip(self.param_groups, split):
            if others:
                adamw_step((p for _, p in others), self.state, lr=group["lr"], betas=group["betas"], eps=group["eps"],
                           weight_decay=group["weight_decay"], foreach=group["foreach"], owner="StiefelAdam")
        return loss

    @staticmethod
    def _split(group: dict[str, Any]) -> tuple[list[Tensor], list[tuple[int, Tensor]]]:
        """The parameters of ``group`` that have a gradient: its frames, and the others with their
        index in the group (a ``stiefel=True`` group has none: every parameter is a frame)."""
        frames, others = [], []
        for j, p in enumerate(group["params"]):
            if p.grad is not None:
                if group["stiefel"] or is_frame(p):
                    frames.append(p)
                else:
                    others.append((j, p))
        return frames, others

    def _frame_updates(self, index: int, group: dict[str, Any], frames: list[Tensor], mesh) -> list[BucketUpdate]:
        # Frames of one tall shape are stacked into one batch so that each formula is one call.
        buckets: dict[tuple, list[Tensor]] = defaultdict(list)
        for p in frames:
            if p.grad.is_sparse:
                raise RuntimeError(
                    "StiefelAdam does not support sparse gradients for frames; use a dense "
                    "gradient (e.g. nn.Embedding(sparse=False))"
                )
            check_frame_tensor(p)
            if p.numel() == 0:
                continue  # no frames in it (a zero batch size): nothing to update, no state
            state = self.state[p]
            if len(state) == 0:
                # A DTensor's shard may hold no frame (more ranks than heads); it still has state
                # and a step count, as the other ranks do.
                init_frame_state(state, p, group["second_moment"], mesh if _dt.is_dtensor(p) else None)
            buckets[(*sorted(p.shape[-2:]), p.device, p.dtype)].append(p)
        return [self._bucket_update(index, group, ps) for ps in buckets.values()]

    def _bucket_update(self, index: int, group: dict[str, Any], ps: list[Tensor]) -> BucketUpdate:
        # Bookkeeping only: the bucket's batches go through the rule (the default options through
        # its buffered kernel, the same bits written into the bucket's buffers).
        states = [self.state[p] for p in ps]
        bucket = bucket_for(self.__dict__.setdefault("_buckets", {}), ps, states)  # not in state_dict
        beta1, beta2 = group["betas"]
        options = dict(lr=group["lr"], beta1=beta1, beta2=beta2, eps=group["eps"], max_step=group["max_step"],
                       retraction=group["retraction"])
        if group["second_moment"] == "frame" and group["projector"] == "euclidean":  # (W', m', v', ok)
            new = default_frame_update(*bucket.inputs(ps, states), **options, buffers=bucket.buffers())
        else:  # (W', m', v'): BucketUpdate reads W' for ok
            new = stiefel_adam_frame_update(*bucket.inputs(ps, states), **options,
                                            second_moment=group["second_moment"], projector=group["projector"])
        return BucketUpdate(index, ps, states, bucket, *new)


def _is_frame(group: dict[str, Any], p: Tensor) -> bool:
    """Whether ``p`` of ``group`` is updated as a frame (a ``stiefel=True`` group's, or marked)."""
    return group["stiefel"] or is_frame(p)
