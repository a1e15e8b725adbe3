r"""StiefelAdam: Riemannian Adam for frames on the Stiefel manifold, AdamW for everything else."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Callable, Iterable

import torch
from torch import Tensor
from torch.optim.adam import adam as _adam_functional

from . import _distributed as _dt
from ._numerics import SERIES_BOUND, polar_or_nan, retract_or_nan
from .geometry import RETRACTIONS, canonical_gradient, is_wide, project_tangent, sym

__all__ = ["StiefelAdam", "stiefel_adam_frame_update", "SECOND_MOMENTS", "PROJECTORS"]

SECOND_MOMENTS = ("frame", "column", "element")
PROJECTORS = ("euclidean", "canonical", "none")
# Param group keys besides the hyperparameters: torch.optim.Optimizer's, LR schedulers' and a
# free-form label (``param_groups`` names its groups).
_GROUP_EXTRA_KEYS = frozenset({"params", "param_names", "initial_lr", "name"})


# Relative floor of the second moment, in unit roundoffs u of the compute dtype: v also averages
# (tau ||sym(W^T G)||_F)^2 with tau^2 = _NORMAL_FLOOR * u. The normal part of G is removed only
# to about u ||G|| (W^T W = I holds to rounding), and Adam would blow that remainder up to a full
# step; with the floor a gradient normal to the manifold moves the frame by about lr sqrt(u / tau^2).
_NORMAL_FLOOR = 64.0
# Capped polar steps: ||(W + S)^T (W + S) - I||_F <= max_step^2 + this, for frames on the
# manifold to this accuracy (the first-step check admits max |W^T W - I| <= 1e-4 per entry).
_FRAME_MARGIN = 0.02


def second_moment_sample(xi: Tensor, mode: str) -> Tensor:
    r"""The quantity the second moment averages: ``n p * mean_S(xi * xi)`` over the sharing set S.

    S is the whole frame (``"frame"``: ``||xi||_F^2``, one scalar), one column (``"column"``:
    ``p ||xi_j||^2``) or one element (``"element"``: ``n p xi_ij^2``). The factor ``n p`` makes the
    Adam direction ``m / sqrt(v)`` have Frobenius norm about 1 in every mode, so ``lr`` is the
    Frobenius length of a step whichever mode is chosen. Computed in float64, where the squares
    of any float32 gradient are finite.

    Shapes: xi ``(B, n, p)`` -> ``(B, 1, 1)``, ``(B, 1, p)`` or ``(B, n, p)``, float64.
    """
    n, p = xi.shape[-2:]
    sq = xi.to(torch.float64).square()
    if mode == "frame":
        return sq.sum(dim=(-2, -1), keepdim=True)
    if mode == "column":
        return p * sq.sum(dim=-2, keepdim=True)
    return (n * p) * sq


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
    and writes the results back. It has no data-dependent Python branch and no host
    synchronisation, so it compiles with ``torch.compile(fullgraph=True)``; every frame's result
    depends on that frame's inputs alone.

    For each frame ``W`` (tall, ``n x p``, ``n >= p``) with Euclidean gradient ``G``, first moment
    ``m`` (formed at the previous frame), second moment ``v`` and step count ``t`` (this step's,
    starting at 1), with ``N = sym(W^T G)``:

    .. math::
        \xi &= P_W(G) = G - W N
            && \text{Riemannian gradient (``projector="euclidean"``)} \\
        \tilde m &= P_W(m)
            && \text{transport of } m \text{ to } T_W \text{ by re-projection} \\
        m' &= \beta_1 \tilde m + (1-\beta_1)\,\xi \\
        v' &= \beta_2 v + (1-\beta_2)\, \big(\lVert \xi \rVert_F^2 + \tau^2 \lVert N \rVert_F^2\big)
            && \text{one scalar per frame (``second_moment="frame"``)} \\
        D &= \frac{m' / (1-\beta_1^t)}{\sqrt{v' / (1-\beta_2^t)} + \epsilon}
            && \text{bias-corrected Adam direction, } \lVert D \rVert_F \approx 1 \\
        S &= -\gamma D \cdot \min\!\big(1, \delta / \lVert \gamma D \rVert_F\big)
            && \text{trust cap } \delta = \text{``max_step''}, \gamma = \text{``lr''} \\
        W' &= \mathrm{polar}(W + S) = (W + S)\big((W + S)^\top (W + S)\big)^{-1/2}
            && \text{retraction (``retraction="polar"``)}

    How it is computed:

    * The two projections merge, because ``P_W`` is linear:
      ``m' = P_W(beta1 m + (1 - beta1) G)``, and ``||xi||_F^2 = ||G||_F^2 - ||N||_F^2``, so for the
      default options a step costs five ``n x p x p`` products (``W^T G``, ``W^T m``, ``W N'``,
      ``(W + S)^T (W + S)``, ``(W + S) Z``) and a few elementwise passes.
    * ``v`` is kept in float64 and its samples are summed in float64, so the step is the same for
      float32 gradients of any scale from 1e-30 to 1e30 (up to ``eps``).
    * The floor ``tau^2 = 64 u`` (``u`` the unit roundoff of the compute dtype: 3.8e-6 in float32,
      7e-15 in float64) is rounding insurance: the normal part ``W N`` of G is removed only to
      about ``u ||G||``, and without the floor Adam would blow that remainder up to a full step. With
      it a gradient normal to the manifold moves a float32 frame by about ``4e-3 lr`` at most. It
      changes ``v`` by a relative ``tau^2 ||N||^2 / ||xi||^2`` otherwise.
    * Polar retraction: ``(W + S)^T (W + S) = I + E`` with ``||E||_F <= max_step^2`` up to the
      frame's own error, so ``(I + E)^{-1/2}`` is a binomial series of a degree fixed by
      ``max_step`` (see :func:`stiefel_mini.geometry.polar_factor_checked`); with ``max_step=None``
      (or above 0.47) frames far from the identity use the SVD of ``W + S`` instead, chosen per
      frame on the device.
    * A frame whose gradient is not finite, or whose step the retraction refuses (a rank-deficient
      ``W + S``; a frame moved off the manifold by more than 0.02 in ``||W^T W - I||_F`` under the
      cap; a Cayley or exponential step too large to take accurately), comes back NaN. The
      function never raises on data; :class:`StiefelAdam` checks first and raises instead.

    Options (as in :class:`StiefelAdam`):

    * ``second_moment``: ``"frame"`` (above), ``"column"`` (``v_j`` averages ``p ||xi_j||^2``) or
      ``"element"`` (``n p xi_ij^2``); the floor is ``tau^2 p ||(W N)_j||^2`` per column, and
      none per element (Adam's elementwise rule, with its absolute ``eps``). For the last
      two ``D`` is projected onto ``T_W`` again, since an uneven rescaling leaves the tangent space.
    * ``projector``: ``"euclidean"`` (``P_W``), ``"canonical"`` (``xi = G - W G^T W``, ``m`` still
      transported by ``P_W``) or ``"none"`` (``xi = G``, no transport, no floor).
    * ``retraction``: ``"polar"``, ``"qr"``, ``"cayley"`` or ``"exp"``
      (:data:`stiefel_mini.geometry.RETRACTIONS`).
    * ``max_step``: ``delta`` in Frobenius norm, or ``None`` for no cap.

    Args:
        W: frames ``(B, n, p)``, ``n >= p``, on the manifold; bf16 / fp16 frames are updated in
            float32 and the result is rounded back.
        G: Euclidean gradients ``(B, n, p)``.
        exp_avg: first moments ``m`` ``(B, n, p)`` in the compute dtype (at least float32; zeros at
            the first step).
        exp_avg_sq: second moments ``v``: ``(B, 1, 1)`` (frame), ``(B, 1, p)`` (column) or
            ``(B, n, p)`` (element), float64, zeros at the first step.
        step: this step's count ``t >= 1``, a number or a tensor broadcastable to ``(B, 1, 1)``.
        lr: the learning rate ``gamma``.
        beta1, beta2, eps, max_step, second_moment, projector, retraction: as in
            :class:`StiefelAdam` (defaults: ``0.9``, ``0.999``, ``1e-8``, ``0.1``, ``"frame"``,
            ``"euclidean"``, ``"polar"``).

    Returns:
        ``(W', m', v')``, shaped as ``W``, ``exp_avg`` and ``exp_avg_sq``.

    Reference: Kingma & Ba (2015); Becigneul & Ganea (2019), "Riemannian adaptive optimization
    methods"; Absil, Mahony, Sepulchre (2008), section 8.1 (transport by projection); Guerrero,
    "Stiefel Attention" (arXiv 2609.19363) for the per-frame second moment and the trust cap.
    """
    W_new, m, v, _ = frame_update_checked(
        W, G, exp_avg, exp_avg_sq, step, lr=lr, beta1=beta1, beta2=beta2, eps=eps,
        max_step=max_step, second_moment=second_moment, projector=projector, retraction=retraction,
    )
    return W_new, m, v


def frame_update_checked(
    W: Tensor,
    G: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    step: Tensor | float,
    *,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    max_step: float | None,
    second_moment: str,
    projector: str,
    retraction: str,
    buffers: dict[str, Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`stiefel_adam_frame_update`, plus ``ok`` ``(B,)``: per frame, whether the gradient was
    finite and the retraction took the step (the frame is NaN where not).

    ``buffers``: optional preallocated tensors, none aliasing an input, that the default rule
    (``"frame"``, ``"euclidean"``, ``"polar"``, a cap) writes into instead of allocating:
    ``"exp_avg"`` and ``"exp_avg_sq"`` receive the new moments, ``"frame"`` the new frames (all
    three are returned), ``"scratch"`` (shaped as ``W``, compute dtype) the large intermediates,
    ``"pp"`` (three ``(B, p, p)`` tensors, compute dtype) and ``"pp64"`` (one, float64) the small ones.
    :class:`StiefelAdam` passes persistent ones, so that a step allocates no frame-sized tensor.
    """
    buf = buffers or {}
    out_m, out_v, scratch = buf.get("exp_avg"), buf.get("exp_avg_sq"), buf.get("scratch")
    f64 = torch.float64
    store = W.dtype
    dtype = _compute_dtype(store)
    W, G = W.to(dtype), G.to(dtype)
    t = torch.as_tensor(step, dtype=f64, device=W.device)
    bias1 = 1 - beta1**t
    bias2 = 1 - beta2**t
    tau2 = _NORMAL_FLOOR * torch.finfo(dtype).eps / 2

    if second_moment == "frame" and projector == "euclidean":
        # p x p work goes into the caller's buffers when given: fresh tensors of this size cost
        # page faults on every step.
        pp, pp64 = buf.get("pp", (None, None, None)), buf.get("pp64")
        Sg = sym(torch.matmul(W.mT, G, out=pp[0]), out=pp[1])  # N, (B, p, p)
        # sym(W^T u), u = beta1 m + (1 - beta1) G: (B, p, p)
        Su = sym(torch.matmul(W.mT, exp_avg, out=pp[0]), out=pp[2]).mul_(beta1).add_(Sg, alpha=1 - beta1)
        m = torch.lerp(exp_avg, G, 1 - beta1, out=out_m)
        m.baddbmm_(W, Su, alpha=-1.0)  # P_W(beta1 m + (1-beta1) G)
        # ||G||_F scaled by an exact power of two per frame, so that its square neither overflows
        # nor underflows in float32 whatever the gradient's scale; squared in float64.
        g_max = torch.maximum(  # max |G_ij| (NaN if any is), without a temporary |G|: (B, 1, 1)
            G.amax(dim=(-2, -1), keepdim=True), G.amin(dim=(-2, -1), keepdim=True).neg()
        )
        finite = torch.isfinite(g_max).view(-1)
        r = torch.ldexp(torch.ones_like(g_max), -torch.frexp(torch.where(finite.view(-1, 1, 1), g_max, 1.0))[1])
        Gr = torch.mul(G, r, out=scratch)
        g_sq = (torch.linalg.vector_norm(Gr, dim=(-2, -1), keepdim=True).to(f64) / r.to(f64)).square()
        Sg64 = Sg.to(f64, copy=True) if pp64 is None else pp64.copy_(Sg)
        n_sq = Sg64.mul_(Sg64).sum(dim=(-2, -1), keepdim=True)  # ||N||_F^2 in float64
        sample = (g_sq - n_sq).clamp_min(0.0) + tau2 * n_sq  # ||xi||^2 + tau^2 ||N||^2, (B, 1, 1)
    else:
        if projector == "none":
            xi, m_t, normal = G, exp_avg, None
        else:
            normal = W @ sym(W.mT @ G)  # W N, (B, n, p)
            xi = G - normal if projector == "euclidean" else canonical_gradient(W, G)
            m_t = project_tangent(W, exp_avg)
        m = torch.lerp(m_t, xi, 1 - beta1, out=out_m)
        sample = second_moment_sample(xi, second_moment)
        if normal is not None and second_moment == "column":
            sample = sample + tau2 * second_moment_sample(normal, second_moment)
        finite = torch.isfinite(sample).flatten(1).all(dim=1)
    v = torch.add(exp_avg_sq * beta2, sample * (1 - beta2), out=out_v)
    scale = 1 / (bias1 * ((v / bias2).sqrt() + eps))  # D = m * scale, float64
    M = S = None  # W + S is formed directly for the polar retraction
    if second_moment == "frame":
        # D is m times one scalar per frame: it stays tangent, and the capped step is that
        # scalar times m, one pass over the frame.
        coef = (-lr * scale).to(dtype)  # (B, 1, 1); of order lr / ||G||, a float32 number
        if max_step is not None:
            S = torch.mul(m, coef, out=scratch)  # of length about lr: its float32 norm is safe
            factor = cap_factor(torch.linalg.vector_norm(S, dim=(-2, -1), keepdim=True), max_step)
            if retraction == "polar":
                M = torch.addcmul(W, S, factor, out=scratch)  # W + S, capped (over S, elementwise)
            else:
                S = S * factor
        elif retraction == "polar":
            M = torch.addcmul(W, m, coef)  # W + S
        else:
            S = m * coef
    else:
        D = m * scale.to(dtype)
        if projector != "none":
            # Uneven rescaling leaves the tangent space; a per-frame scalar does not.
            D = project_tangent(W, D)
        S = -lr * D
        if max_step is not None:
            S = S * cap_factor(torch.linalg.matrix_norm(S, keepdim=True), max_step)
    if retraction == "polar":
        # ||(W + S)^T (W + S) - I||_F <= ||S||^2 for a tangent S, 2 ||S|| + ||S||^2 for any S,
        # plus the frame's own error (16-bit frames carry errors of about 1e-2: the widest bound).
        bound = None
        if max_step is not None:
            reach = max_step**2 + (2 * max_step if projector == "none" else 0.0) + _FRAME_MARGIN
            if reach <= SERIES_BOUND:
                bound = reach if dtype == store else SERIES_BOUND
        W_new, ok = polar_or_nan(
            W + S if M is None else M, bound, out=buf.get("frame"), work=buf.get("pp")
        )
    else:
        W_new, ok = retract_or_nan(W, S, retraction)
    return W_new.to(store), m, v, ok & finite


def _to_tall(t: Tensor, wide: bool) -> Tensor:
    """View a per-parameter tensor ``(..., r, c)`` as a batch in tall layout ``(B, max, min)``; of a
    DTensor, this rank's shard."""
    t = _dt.local(t)
    t = t.mT if wide else t
    return t.reshape(-1, *t.shape[-2:])


def _from_tall(t: Tensor, shape: torch.Size, wide: bool) -> Tensor:
    """Inverse of :func:`_to_tall`: a batch ``(B, a, b)`` back to the parameter layout ``shape``."""
    return (t.mT if wide else t).reshape(shape)


def _view_from_tall(t: Tensor, shape: tuple[int, ...], wide: bool) -> Tensor:
    """:func:`_from_tall` as a view of ``t`` (raises rather than copying): state that aliases a batch."""
    return (t.mT if wide else t).view(shape)


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

    Sharded frames (FSDP2's ``fully_shard``, or any DTensor) must be split between whole frames,
    on a leading dimension (``Shard(0)`` of ``(n_heads, d_model, d_head)``: heads): each rank then
    updates the frames it holds, with no communication, and keeps their state as DTensors placed as
    they are, so ``torch.distributed.checkpoint`` saves and reshards it. A placement that splits
    the last two dimensions raises ``ValueError``; the checks that can refuse a step are reduced
    over the device mesh, so that every rank raises or none does.

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
            for j, p in enumerate([params] if isinstance(params, Tensor) else param_group["params"]):
                name, p = p if isinstance(p, tuple) else (None, p)  # named parameters: (name, tensor)
                _check_frame_tensor(p)
                _dt.check_frame_placement(p, _frame_name(len(self.param_groups), param_group, j, p, name))
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
            if own["stiefel"] and pid in saved and "exp_avg_sq" in saved[pid]:
                want = _v_state_shape(p, own["second_moment"])
                got = tuple(saved[pid]["exp_avg_sq"].shape)
                if got != want:
                    raise ValueError(
                        f"the saved state of a frame of shape {tuple(p.shape)} has exp_avg_sq of shape "
                        f"{got}, but second_moment={own['second_moment']!r} keeps {want}: it was saved by "
                        "another optimizer or with another second_moment; load it into that, or drop "
                        "this parameter's entry from state_dict['state'] to start its moments afresh"
                    )
                _check_state_placement(p, saved[pid]["exp_avg_sq"])
        super().load_state_dict(state_dict)
        for pid, p, own in pairs:
            if own["stiefel"] and pid in saved:
                for key, dtype in (("exp_avg", _compute_dtype(p.dtype)), ("exp_avg_sq", torch.float64)):
                    self.state[p][key] = saved[pid][key].to(dtype=dtype, device=p.device, copy=True)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Perform one optimization step. ``closure`` re-evaluates the model and returns the loss.

        The frame updates are computed first and checked together (one host synchronisation per
        step): if a frame's gradient is not finite, or its retraction refuses the step,
        ``ValueError`` names the parameter and its group, and no parameter and no state has changed.

        Frames that are DTensors (FSDP2) are updated on each rank's shard, whole frames only, with
        no communication; the check is then reduced over their device mesh, so that every rank
        takes the step or every rank raises.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        mesh = _dt.mesh_of(
            [p for g in self.param_groups if g["stiefel"] for p in g["params"] if p.grad is not None]
        )
        updates = [
            u
            for i, group in enumerate(self.param_groups)
            if group["stiefel"]
            for u in self._frame_updates(i, group, mesh)
        ]
        ok = torch.cat([u.ok for u in updates]).all() if updates else torch.tensor(True)
        if not _dt.all_true(ok, mesh):
            bad = next((u for u in updates if not bool(u.ok.all())), None)
            if bad is None:
                raise ValueError(
                    "StiefelAdam refused a frame's step on another rank of the device mesh (a "
                    "non-finite gradient, or a step the retraction cannot take; that rank's error "
                    "says which); no parameter or state was changed on any rank"
                )
            raise _diagnose(bad)
        for u in updates:
            u.commit()
        for group in self.param_groups:
            if not group["stiefel"]:
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

    def _frame_updates(self, index: int, group: dict[str, Any], mesh) -> list[_BucketUpdate]:
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
            if p.numel() == 0:
                continue  # no frames in it (a zero batch size): nothing to update, no state
            state = self.state[p]
            if len(state) == 0:
                # A DTensor's shard may hold no frame (more ranks than heads); it still has state
                # and a step count, as the other ranks do.
                _init_frame_state(state, p, group["second_moment"], mesh if _dt.is_dtensor(p) else None)
            buckets[(*sorted(p.shape[-2:]), p.device, p.dtype)].append(p)
        return [self._bucket_update(index, group, ps) for ps in buckets.values()]

    def _bucket_update(self, index: int, group: dict[str, Any], ps: list[Tensor]) -> _BucketUpdate:
        # Bookkeeping only: gather the bucket into its batches and call the rule.
        beta1, beta2 = group["betas"]
        bucket = self._bucket(ps)
        states = [self.state[p] for p in ps]
        steps = [float(s["step"]) + 1 for s in states]
        step: Tensor | float = steps[0]
        if len(set(steps)) > 1:  # parameters added at different times: a count per frame
            step = torch.tensor(steps, dtype=torch.float64).repeat_interleave(torch.tensor(bucket.counts))
            step = step.to(ps[0].device).view(-1, 1, 1)
        W_new, _, _, ok = frame_update_checked(
            bucket.gather(ps, bucket.W),  # (B, n, k)
            bucket.gather([p.grad for p in ps], bucket.G),  # (B, n, k), this rank's shards
            bucket.m[bucket.current],  # (B, n, k)
            bucket.v[bucket.current],  # (B, 1, 1), (B, 1, k) or (B, n, k)
            step,
            lr=group["lr"],
            beta1=beta1,
            beta2=beta2,
            eps=group["eps"],
            max_step=group["max_step"],
            second_moment=group["second_moment"],
            projector=group["projector"],
            retraction=group["retraction"],
            buffers=bucket.buffers(),
        )
        return _BucketUpdate(index, ps, states, bucket, W_new, ok)

    def _bucket(self, ps: list[Tensor]) -> _Bucket:
        """The persistent batches of a bucket, made anew when its parameters or their state changed."""
        cache = self.__dict__.setdefault("_buckets", {})  # not part of state_dict or pickles
        key = tuple(id(p) for p in ps)
        states = [self.state[p] for p in ps]
        bucket = cache.get(key)
        if bucket is None or not bucket.holds(ps, states):
            for other in [k for k in cache if not set(k).isdisjoint(key)]:
                del cache[other]  # its parameters' state moves into the new bucket
            bucket = cache[key] = _Bucket(ps, states)
        return bucket


class _Bucket:
    """Persistent batched tensors of a bucket of frames: the frames' state lives in them.

    ``m`` and ``v`` are two pairs of tall batches ``(B, n, k)`` / ``(B, ., .)``: the state of the
    bucket's parameters is a view of pair ``current``, and a step writes its new moments into the
    other pair, so a refused step leaves the state untouched and an accepted one only swaps the
    views (no moment is stacked or copied back). ``W`` and ``G`` receive the frames and gradients.
    ``load_state_dict`` or any replacement of a state tensor is detected by :meth:`holds`, and the
    bucket is then stacked anew from the state.
    """

    def __init__(self, ps: list[Tensor], states: list[dict[str, Any]]) -> None:
        self.ps = list(ps)
        self.wides = [is_wide(p) for p in ps]
        self.counts = [_dt.local(p).shape[:-2].numel() for p in ps]
        self.W = torch.cat([_to_tall(p.detach(), w) for p, w in zip(ps, self.wides)])  # (B, n, k)
        self.G = torch.empty_like(self.W)
        m = torch.cat([_to_tall(s["exp_avg"], w) for s, w in zip(states, self.wides)])  # (B, n, k)
        v = torch.cat([_to_tall(s["exp_avg_sq"], w) for s, w in zip(states, self.wides)])
        self.m, self.v = (m, torch.empty_like(m)), (v, torch.empty_like(v))
        self.current = 0
        self.scratch = torch.empty_like(m)  # (B, n, k), compute dtype
        k = m.shape[-1]
        self.pp = tuple(m.new_empty(3, m.shape[0], k, k).unbind())  # 3 x (B, k, k), compute dtype
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
            m, v = _view_from_tall(mi, shard.shape, w), _view_from_tall(vi, _v_state_shape_of(vi, shard, w), w)
            views.append((_dt.like(m, p, p.shape), _dt.like(v, p, _v_state_shape_of(vi, p, w))))
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
        return torch.cat([_to_tall(t, w) for t, w in zip(ts, self.wides)], out=out)


class _BucketUpdate:
    """A computed, not yet applied, update of one bucket of frames; ``commit`` writes it back."""

    def __init__(self, group_index, ps, states, bucket, W_new, ok) -> None:
        self.group_index, self.ps, self.states, self.bucket = group_index, ps, states, bucket
        self.W_new, self.ok = W_new, ok
        self.counts = bucket.counts

    def commit(self) -> None:
        for p, w, Wi in zip(self.ps, self.bucket.wides, self.W_new.split(self.counts)):
            shard = _dt.local(p)
            shard.copy_(_from_tall(Wi, shard.shape, w))
        self.bucket.attach(self.states, 1 - self.bucket.current)
        for s in self.states:
            s["step"] += 1


def _diagnose(u: _BucketUpdate) -> ValueError:
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
    raise AssertionError("_diagnose called on a bucket whose frames were all accepted")


def _frame_name(index: int, group: dict[str, Any], j: int, p: Tensor, name: str | None) -> str:
    """How errors name the ``j``-th parameter of param group ``index``: its name (given as a
    ``(name, tensor)`` pair), its position, its group's ``name`` and its shape."""
    what = f"{name!r}, " if name else ""
    label = f" ({group['name']!r})" if "name" in group else ""
    return f"the frame {what}parameter {j} of param group {index}{label}, of shape {tuple(p.shape)},"


def _v_shape(mode: str, n: int, k: int) -> tuple[int, int]:
    """Trailing shape of the second moment of one tall ``n x k`` frame."""
    return {"frame": (1, 1), "column": (1, k), "element": (n, k)}[mode]


def _v_state_shape_of(v: Tensor, p: Tensor, wide: bool) -> tuple[int, ...]:
    """Shape of a frame parameter ``p``'s second moment, given its tall batch slice ``v`` ``(b, a, c)``."""
    a, c = v.shape[-2:]
    return (*p.shape[:-2], c, a) if wide else (*p.shape[:-2], a, c)


def _v_state_shape(p: Tensor, mode: str) -> tuple[int, ...]:
    """Shape of the second moment of a frame parameter ``p`` (in p's own orientation)."""
    n, k = sorted(p.shape[-2:], reverse=True)
    a, b = _v_shape(mode, n, k)
    return (*p.shape[:-2], b, a) if is_wide(p) else (*p.shape[:-2], a, b)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The precision a frame's update is computed and stored in: at least float32."""
    return torch.promote_types(dtype, torch.float32)


def _init_frame_state(state: dict[str, Any], p: Tensor, mode: str, mesh=None) -> None:
    """Zero state for the frame ``p``, after checking it is on the manifold; for a DTensor ``p``
    the check is over all ranks of ``mesh`` (a collective) and the state is placed as ``p``."""
    dtype = _compute_dtype(p.dtype)
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
    v = torch.zeros(_v_state_shape(shard, mode), dtype=torch.float64, device=W.device)
    state["exp_avg_sq"] = _dt.like(v, p, _v_state_shape(p, mode))


def _check_state_placement(p: Tensor, saved: Tensor) -> None:
    """``ValueError`` unless a frame's saved state is sharded as the frame is (both plain, or both
    DTensors with the same placements): the frame rule pairs each shard with its own moments."""
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
