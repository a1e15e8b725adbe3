r"""StiefelAdam: Riemannian Adam for frames on the Stiefel manifold, AdamW for everything else."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Callable, Iterable

import torch
from torch import Tensor
from torch.optim.adam import adam as _adam_functional

from .geometry import RETRACTIONS, canonical_gradient, is_wide, polar_factor, project_tangent, retract, sym

__all__ = ["StiefelAdam", "stiefel_adam_frame_update", "SECOND_MOMENTS", "PROJECTORS"]

SECOND_MOMENTS = ("frame", "column", "element")
PROJECTORS = ("euclidean", "canonical", "none")
# Param group keys besides the hyperparameters: torch.optim.Optimizer's, LR schedulers' and a
# free-form label (``param_groups`` names its groups).
_GROUP_EXTRA_KEYS = frozenset({"params", "param_names", "initial_lr", "name"})


def first_moment_update(
    W: Tensor, G: Tensor, m: Tensor, beta1: float, projector: str, mode: str
) -> tuple[Tensor, Tensor]:
    r"""Transport the first moment to ``T_W``, update it, and return the second-moment sample.

    ``m <- beta1 P_W(m) + (1 - beta1) xi`` with ``xi`` the projected gradient. ``m`` was formed at
    the previous point; re-projecting it at W is its transport. For the Euclidean projector the two
    projections merge, because ``P_W`` is linear: ``m <- P_W(beta1 m + (1 - beta1) G)``, and the
    second-moment sample follows from ``A = W^T G`` alone, since ``||P_W(G)||_F^2 = ||G||_F^2 -
    ||sym(A)||_F^2`` (and column-wise ``||xi_j||^2 = ||G_j||^2 - 2 <A_j, S_j> + ||S_j||^2`` with
    ``S = sym(A)``), so ``xi`` is never formed unless the per-element moment needs it.

    ``m`` is updated in place. Shapes: W, G, m ``(B, n, p)``; returns ``(m, sample)`` with the
    sample shaped as :func:`second_moment_sample` returns it.
    """
    if projector == "none":
        return m.mul_(beta1).add_(G, alpha=1 - beta1), second_moment_sample(G, mode)
    if projector == "canonical":
        xi = canonical_gradient(W, G)
        m = project_tangent(W, m).mul_(beta1).add_(xi, alpha=1 - beta1)
        return m, second_moment_sample(xi, mode)
    n, p = W.shape[-2:]
    A = W.mT @ G  # (B, p, p)
    S = sym(A)
    m.mul_(beta1).add_(G, alpha=1 - beta1)
    m.baddbmm_(W, sym(W.mT @ m), alpha=-1.0)  # m <- P_W(m), in place
    if mode == "frame":
        sample = G.square().sum(dim=(-2, -1), keepdim=True) - S.square().sum(dim=(-2, -1), keepdim=True)
    elif mode == "column":
        col = G.square().sum(dim=-2, keepdim=True) - 2 * (A * S).sum(dim=-2, keepdim=True)
        sample = p * (col + S.square().sum(dim=-2, keepdim=True))
    else:
        return m, second_moment_sample(G - W @ S, mode)
    # The identity subtracts nearly equal numbers when G is almost normal to the manifold.
    return m, sample.clamp_min(0.0)


def second_moment_sample(xi: Tensor, mode: str) -> Tensor:
    r"""The quantity the second moment averages: ``n p * mean_S(xi * xi)`` over the sharing set S.

    S is the whole frame (``"frame"``: ``||xi||_F^2``, one scalar), one column (``"column"``:
    ``p ||xi_j||^2``) or one element (``"element"``: ``n p xi_ij^2``). The factor ``n p`` makes the
    Adam direction ``m / sqrt(v)`` have Frobenius norm about 1 in every mode, so ``lr`` is the
    Frobenius length of a step whichever mode is chosen.

    Shapes: xi ``(B, n, p)`` -> ``(B, 1, 1)``, ``(B, 1, p)`` or ``(B, n, p)``.
    """
    n, p = xi.shape[-2:]
    sq = xi * xi
    if mode == "frame":
        return sq.sum(dim=(-2, -1), keepdim=True)
    if mode == "column":
        return p * sq.sum(dim=-2, keepdim=True)
    return (n * p) * sq


def cap_step(step: Tensor, max_step: float | None) -> Tensor:
    """Trust-region cap: rescale each frame's step so that ``||step||_F <= max_step``.

    ``step <- step * min(1, max_step / ||step||_F)``.  Shapes: ``(B, n, p)`` -> ``(B, n, p)``.
    """
    if max_step is None:
        return step
    return step * cap_factor(torch.linalg.matrix_norm(step, keepdim=True), max_step)


def cap_factor(length: Tensor, max_step: float) -> Tensor:
    """``min(1, max_step / length)``: the factor that shortens a step of Frobenius ``length``."""
    return max_step / length.clamp_min(max_step)


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
    r"""One Riemannian Adam step for a batch of frames: the whole frame rule of :class:`StiefelAdam`.

    A pure function: it reads its arguments, changes none of them, and returns the new frames and
    the new state. :class:`StiefelAdam` only stacks the frames of a param group into such batches
    and writes the results back.

    For each frame ``W`` (tall, ``n x p``, ``n >= p``) with Euclidean gradient ``G``, first moment
    ``m`` (formed at the previous frame), second moment ``v`` and step count ``t`` (this step's,
    starting at 1):

    .. math::
        \xi &= P_W(G) = G - W\,\mathrm{sym}(W^\top G)
            && \text{Riemannian gradient (``projector="euclidean"``)} \\
        \tilde m &= P_W(m)
            && \text{transport of } m \text{ to } T_W \text{ by re-projection} \\
        m' &= \beta_1 \tilde m + (1-\beta_1)\,\xi \\
        v' &= \beta_2 v + (1-\beta_2)\, \lVert \xi \rVert_F^2
            && \text{one scalar per frame (``second_moment="frame"``)} \\
        D &= \frac{m' / (1-\beta_1^t)}{\sqrt{v' / (1-\beta_2^t)} + \epsilon}
            && \text{bias-corrected Adam direction, } \lVert D \rVert_F \approx 1 \\
        S &= -\gamma D \cdot \min\!\big(1, \delta / \lVert \gamma D \rVert_F\big)
            && \text{trust cap } \delta = \text{``max_step''}, \gamma = \text{``lr''} \\
        W' &= \mathrm{polar}(W + S) = (W + S)\big((W + S)^\top (W + S)\big)^{-1/2}
            && \text{retraction (``retraction="polar"``)}

    For the Euclidean projector the two projections merge, because ``P_W`` is linear:
    ``m' = P_W(beta1 m + (1 - beta1) G)``, and ``||xi||_F^2 = ||G||_F^2 - ||sym(W^T G)||_F^2``.
    ``m'`` is returned as formed at ``W``; the next call transports it to ``T_{W'}``.

    Options (as in :class:`StiefelAdam`):

    * ``second_moment``: ``"frame"`` (above), ``"column"`` (``v_j`` averages ``p ||xi_j||^2``) or
      ``"element"`` (``n p xi_ij^2``); for the last two ``D`` is projected onto ``T_W`` again,
      since an uneven rescaling leaves the tangent space.
    * ``projector``: ``"euclidean"`` (``P_W``), ``"canonical"`` (``xi = G - W G^T W``, ``m`` still
      transported by ``P_W``) or ``"none"`` (``xi = G``, no transport).
    * ``retraction``: ``"polar"``, ``"qr"``, ``"cayley"`` or ``"exp"``
      (:data:`stiefel_mini.geometry.RETRACTIONS`).
    * ``max_step``: ``delta`` in Frobenius norm, or ``None`` for no cap.

    Args:
        W: frames ``(B, n, p)``, ``n >= p``, on the manifold.
        G: Euclidean gradients ``(B, n, p)``.
        exp_avg: first moments ``m`` ``(B, n, p)`` (zeros at the first step).
        exp_avg_sq: second moments ``v``: ``(B, 1, 1)`` (frame), ``(B, 1, p)`` (column) or
            ``(B, n, p)`` (element), zeros at the first step.
        step: this step's count ``t >= 1``, a number or a tensor broadcastable to ``(B, 1, 1)``.
        lr, beta1, beta2, eps, max_step, second_moment, projector, retraction: as in
            :class:`StiefelAdam` (defaults: ``beta1=0.9``, ``beta2=0.999``, ``eps=1e-8``,
            ``max_step=0.1``, ``"frame"``, ``"euclidean"``, ``"polar"``).

    Returns:
        ``(W', m', v')``, shaped as ``W``, ``exp_avg`` and ``exp_avg_sq``.

    Reference: Kingma & Ba (2015); Becigneul & Ganea (2019), "Riemannian adaptive optimization
    methods"; Absil, Mahony, Sepulchre (2008), section 8.1 (transport by projection); Guerrero,
    "Stiefel Attention" (arXiv 2609.19363) for the per-frame second moment and the trust cap.
    """
    bias1 = 1 - beta1**step
    bias2_sqrt = (1 - beta2**step) ** 0.5
    m, xi_sq = first_moment_update(W, G, exp_avg.clone(), beta1, projector, second_moment)
    v = exp_avg_sq * beta2 + xi_sq * (1 - beta2)
    denom = v.sqrt() / bias2_sqrt + eps
    if second_moment == "frame":
        # D = m / (bias1 * denom) is m times one scalar per frame: it stays tangent, and the
        # capped step is that scalar times m, one pass over the frame.
        coef = lr / (bias1 * denom)  # (B, 1, 1)
        if max_step is not None:
            length = coef * torch.linalg.matrix_norm(m, keepdim=True)
            coef = coef * cap_factor(length, max_step)
        S = m * -coef
    else:
        D = (m / bias1) / denom
        if projector != "none":
            # Uneven rescaling leaves the tangent space; a per-frame scalar does not.
            D = project_tangent(W, D)
        S = cap_step(-lr * D, max_step)
    if retraction == "polar":
        W_new = polar_factor(S.add_(W))  # the step buffer becomes W + S
    else:
        W_new = retract(W, S, retraction)
    return W_new, m, v


def _to_tall(t: Tensor, wide: bool) -> Tensor:
    """View a per-parameter tensor ``(..., r, c)`` as a batch in tall layout ``(B, max, min)``."""
    t = t.mT if wide else t
    return t.reshape(-1, *t.shape[-2:])


def _from_tall(t: Tensor, shape: torch.Size, wide: bool) -> Tensor:
    """Inverse of :func:`_to_tall`: a batch ``(B, a, b)`` back to the parameter layout ``shape``."""
    return (t.mT if wide else t).reshape(shape)


class StiefelAdam(torch.optim.Optimizer):
    r"""Adam on the Stiefel manifold for frame groups, ``torch.optim.AdamW`` for all other groups.

    A param group with ``stiefel=True`` holds frames: tensors ``(..., r, c)`` whose leading
    dimensions index independent frames, each with orthonormal columns if ``r >= c`` and
    orthonormal rows otherwise (so an ``nn.Linear`` weight can be a frame as it is). Every other
    group is updated exactly as ``torch.optim.AdamW`` would with the same hyperparameters, so one
    optimizer trains a whole model.

    For a frame ``W`` (written tall, ``n x p``) with Euclidean gradient ``G`` at step ``t``:

    .. math::
        \xi_t &= P_{W_t}(G_t) = G_t - W_t\,\mathrm{sym}(W_t^\top G_t) \\
        m_t &= \beta_1\, m_{t-1} + (1-\beta_1)\, \xi_t \\
        v_t &= \beta_2\, v_{t-1} + (1-\beta_2)\, \lVert \xi_t \rVert_F^2 \\
        D_t &= \frac{m_t / (1-\beta_1^t)}{\sqrt{v_t / (1-\beta_2^t)} + \epsilon} \\
        S_t &= -\eta D_t \cdot \min\!\big(1, \tfrac{\delta}{\lVert \eta D_t \rVert_F}\big) \\
        W_{t+1} &= \mathrm{polar}(W_t + S_t) = (W_t + S_t)\big((W_t+S_t)^\top (W_t+S_t)\big)^{-1/2} \\
        m_t &\leftarrow P_{W_{t+1}}(m_t)

    Line by line: the Riemannian gradient (option ``projector``); the first moment, with
    ``m_{t-1}`` already transported to the tangent space at ``W_t``; one second moment per frame
    (option ``second_moment``); the Adam direction; the step of length at most the trust-region
    cap ``delta = max_step``, with ``eta`` the learning rate ``lr``; the polar retraction (option
    ``retraction``); the transport of the momentum by re-projection.

    (The transport is applied at the start of the next step, where it merges with the projection
    of the new gradient; ``state["exp_avg"]`` therefore holds ``m_t`` as formed at ``W_t``.)

    Because ``v`` is a squared Frobenius norm, ``D`` has Frobenius norm about 1 and each frame
    moves about ``lr`` per step, whatever the scale of the loss (a scale-free step).

    Ablation options, per group:

    * ``second_moment``: ``"frame"`` (above), ``"column"`` (``v_j`` averages ``p ||xi_j||^2``, one per
      column) or ``"element"`` (``n p xi_ij^2``, Adam's elementwise rule). The factor keeps the step's
      Frobenius norm about ``lr`` in every mode. ``"frame"`` is equivariant under both
      ``W -> Q W`` (``Q`` in O(n), rotating the embedding space) and ``W -> W R`` (``R`` in O(p),
      a change of basis inside the frame); ``"column"`` only under ``W -> Q W``, since column
      norms are not invariant under ``R``; ``"element"`` under neither. ``"column"`` and
      ``"element"`` rescale the direction unevenly, so ``D`` is projected onto the tangent space
      again before the step.
    * ``retraction``: ``"polar"``, ``"qr"``, ``"cayley"`` or ``"exp"`` (see
      :mod:`stiefel_mini.geometry`).
    * ``projector``: ``"euclidean"`` (``P_W``), ``"canonical"`` (``G - W G^T W``) or ``"none"``
      (Adam on the raw gradient, then a polar, QR or Cayley retraction pulls the result back on
      the manifold, so ``"none"`` with ``"exp"`` raises ``ValueError``; the
      first moment is not transported).
    * ``max_step``: the cap ``delta`` in Frobenius norm, or ``None`` for no cap.

    Weight decay is a no-op on frames, by design: the Riemannian gradient of
    ``lambda/2 ||W||_F^2`` is ``P_W(lambda W) = 0``, and decoupled decay followed by the polar
    retraction gives ``polar((1 - lr wd) W) = W``. The decay is therefore skipped for frame groups,
    which makes the frames bitwise independent of ``weight_decay``. It is never fused into the step
    before the retraction: ``polar((1 - lr wd) W - lr D) = polar(W - lr D / (1 - lr wd))`` would
    silently enlarge the step by ``1 / (1 - lr wd)``.

    The frames must be on the manifold when the optimizer first sees them: at the first step a
    frame whose ``W^T W`` differs from ``I`` by more than ``max(1e-4, 10 eps(dtype))`` in any entry
    raises ``ValueError`` (project it with :func:`stiefel_mini.geometry.project` first). After that
    every step lands on the manifold by construction. Frames stored in bf16 / fp16 are updated in
    float32 and cast back; their optimizer state is kept in float32.

    Args:
        params: parameters or param groups (dicts); frame groups carry ``stiefel=True``. A group
            may set any argument below; any other key except ``params``, ``param_names``,
            ``initial_lr`` and ``name`` raises ``ValueError`` listing the known keys.
        lr: learning rate; for frames, the Frobenius length of a typical step. Default ``1e-3``.
        betas: coefficients of the first and second moments. Default ``(0.9, 0.999)``.
        eps: added to the denominator. Default ``1e-8``.
        weight_decay: decoupled weight decay (AdamW) for non-frame groups; ignored on frames.
            Default ``1e-2`` (as ``torch.optim.AdamW``).
        stiefel: default for groups that do not say; ``True`` makes a group a frame group.
            Default ``False``.
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
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            stiefel=stiefel,
            max_step=max_step,
            second_moment=second_moment,
            retraction=retraction,
            projector=projector,
            foreach=foreach,
        )
        _check_hyperparameters(defaults)
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
        _check_hyperparameters(merged)
        params = param_group["params"]
        if not isinstance(params, (Tensor, set)):  # torch.optim.Optimizer rejects sets itself
            param_group = {**param_group, "params": list(params)}  # a generator is read once
        if merged["stiefel"]:
            for p in [params] if isinstance(params, Tensor) else param_group["params"]:
                _check_frame_tensor(p)
        super().add_param_group(param_group)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load optimizer state as ``torch.optim.Optimizer`` does, keeping frame state in its precision.

        ``Optimizer.load_state_dict`` casts floating state to each parameter's dtype; the state of a
        bf16 / fp16 frame is kept in float32 (see the class docstring), so it is restored from the
        saved tensors in that precision instead.
        """
        saved = state_dict["state"]
        saved_ids = [pid for g in state_dict["param_groups"] for pid in g["params"]]
        super().load_state_dict(state_dict)
        params = [(p, g["stiefel"]) for g in self.param_groups for p in g["params"]]
        for pid, (p, is_frame) in zip(saved_ids, params):
            if is_frame and pid in saved:
                for key in ("exp_avg", "exp_avg_sq"):
                    self.state[p][key] = saved[pid][key].to(
                        dtype=_compute_dtype(p.dtype), device=p.device, copy=True
                    )

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Perform one optimization step. ``closure`` re-evaluates the model and returns the loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if group["stiefel"]:
                self._frame_group_step(group)
            else:
                self._adamw_group_step(group)
        return loss

    def _adamw_group_step(self, group: dict[str, Any]) -> None:
        params, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError("StiefelAdam does not support sparse gradients")
            state = self.state[p]
            if len(state) == 0:
                # The same state layout as torch.optim.AdamW, so its state_dicts read the same.
                state["step"] = torch.tensor(0.0, dtype=torch.float32)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            params.append(p)
            grads.append(p.grad)
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            steps.append(state["step"])
        if not params:
            return
        beta1, beta2 = group["betas"]
        _adam_functional(
            params,
            grads,
            exp_avgs,
            exp_avg_sqs,
            [],
            steps,
            foreach=group["foreach"],
            has_complex=any(torch.is_complex(p) for p in params),
            decoupled_weight_decay=True,
            amsgrad=False,
            beta1=beta1,
            beta2=beta2,
            lr=group["lr"],
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=False,
        )

    def _frame_group_step(self, group: dict[str, Any]) -> None:
        # Frames of one tall shape are stacked into one batch so that each formula is one call.
        buckets: dict[tuple, list[Tensor]] = defaultdict(list)
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError(
                    "StiefelAdam does not support sparse gradients for frames; use a dense "
                    "gradient (e.g. nn.Embedding(sparse=False))"
                )
            _check_frame_tensor(p)
            state = self.state[p]
            if len(state) == 0:
                _init_frame_state(state, p, group["second_moment"])
            buckets[(*sorted(p.shape[-2:]), p.device, _compute_dtype(p.dtype))].append(p)
        for ps in buckets.values():
            self._frame_bucket_step(group, ps)

    def _frame_bucket_step(self, group: dict[str, Any], ps: list[Tensor]) -> None:
        # Bookkeeping only: stack the bucket into tall batches, call the rule, write the results back.
        beta1, beta2 = group["betas"]
        states = [self.state[p] for p in ps]
        wides = [is_wide(p) for p in ps]
        counts = [p.shape[:-2].numel() for p in ps]

        # bf16 / fp16 frames are updated in float32; float32 and float64 in their own precision.
        dtype = _compute_dtype(ps[0].dtype)

        def batch(ts: Iterable[Tensor]) -> Tensor:  # per-parameter tensors -> (B, ., .)
            return torch.cat([_to_tall(t.to(dtype), w) for t, w in zip(ts, wides)])

        W = batch(ps)  # (B, n, k)
        G = batch(p.grad for p in ps)  # (B, n, k)
        m = batch(s["exp_avg"] for s in states)  # (B, n, k)
        v = batch(s["exp_avg_sq"] for s in states)  # (B, 1, 1), (B, 1, k) or (B, n, k)

        for s in states:
            s["step"] += 1
        step_t = torch.cat([s["step"].expand(c) for s, c in zip(states, counts)]).to(dtype).view(-1, 1, 1)
        W_new, m, v = stiefel_adam_frame_update(
            W,
            G,
            m,
            v,
            step_t,
            lr=group["lr"],
            beta1=beta1,
            beta2=beta2,
            eps=group["eps"],
            max_step=group["max_step"],
            second_moment=group["second_moment"],
            projector=group["projector"],
            retraction=group["retraction"],
        )
        for p, s, w, Wi, mi, vi in zip(
            ps, states, wides, W_new.split(counts), m.split(counts), v.split(counts)
        ):
            p.copy_(_from_tall(Wi, p.shape, w))
            s["exp_avg"].copy_(_from_tall(mi, p.shape, w))
            s["exp_avg_sq"].copy_(_from_tall(vi, s["exp_avg_sq"].shape, w))


def _v_shape(mode: str, n: int, k: int) -> tuple[int, int]:
    """Trailing shape of the second moment of one tall ``n x k`` frame."""
    return {"frame": (1, 1), "column": (1, k), "element": (n, k)}[mode]


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The precision a frame's update is computed and stored in: at least float32."""
    return torch.promote_types(dtype, torch.float32)


def _init_frame_state(state: dict[str, Any], p: Tensor, mode: str) -> None:
    dtype = _compute_dtype(p.dtype)
    W = p.detach().to(dtype)
    Wt = W.mT if is_wide(p) else W
    gram_err = (Wt.mT @ Wt - torch.eye(Wt.shape[-1], dtype=dtype, device=p.device)).abs().max().item()
    tol = max(1e-4, 10 * torch.finfo(p.dtype).eps)
    if not gram_err <= tol:
        raise ValueError(
            f"a frame of shape {tuple(p.shape)} is not on the Stiefel manifold "
            f"(max |W^T W - I| = {gram_err:.2e} > {tol:.0e}); initialise it with "
            "stiefel_mini.geometry.random_stiefel or map it there with "
            "stiefel_mini.geometry.project before the first step"
        )
    n, k = sorted(p.shape[-2:], reverse=True)
    a, b = _v_shape(mode, n, k)
    v_shape = (*p.shape[:-2], b, a) if is_wide(p) else (*p.shape[:-2], a, b)
    state["step"] = torch.tensor(0.0, dtype=torch.float32)
    state["exp_avg"] = torch.zeros(p.shape, dtype=dtype, device=p.device)
    state["exp_avg_sq"] = torch.zeros(v_shape, dtype=dtype, device=p.device)


def _check_frame_tensor(p: Tensor) -> None:
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


def _check_hyperparameters(g: dict[str, Any]) -> None:
    lr = g["lr"]
    if isinstance(lr, Tensor):
        lr = lr.item()
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr} (must be >= 0)")
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
    if ms is not None and not (isinstance(ms, (int, float)) and ms > 0 and math.isfinite(ms)):
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
