"""The frame rule's arithmetic: the pieces :func:`stiefel_mini.optim.stiefel_adam_frame_update` is
written with, and the buffered kernel that :class:`~stiefel_mini.optim.StiefelAdam` runs for the
default second moment and projector.

The kernel performs the reference rule's operations in the same order, so its results are the
same bits (``tests/test_frame_kernel.py`` checks this with ``torch.equal``), but it writes the new
moments, the new frames and every frame-sized or ``p x p`` intermediate into a bucket's persistent
buffers: a fresh tensor of that size costs page faults on every step, and with the buffers a
capped polar step (the default) allocates no frame-sized tensor.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._numerics import SERIES_BOUND, polar_or_nan, retract_or_nan
from .geometry import sym

# Relative floor of the second moment, in unit roundoffs u of the compute dtype: v also averages
# 64 u ||sym(W^T G)||_F^2. The normal part of G is removed only to about u ||G|| (W^T W = I holds
# to rounding), and Adam would blow that remainder up to a full step; the floor keeps a gradient
# normal to the manifold from moving the frame by more than a small fraction of lr.
NORMAL_FLOOR = 64.0
# Capped polar steps: ||(W + S)^T (W + S) - I||_F <= max_step^2 + this, for frames on the
# manifold to this accuracy (the first-step check admits max |W^T W - I| <= 1e-4 per entry).
FRAME_MARGIN = 0.02


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The precision a frame's update is computed and its first moment stored in: at least float32."""
    return torch.promote_types(dtype, torch.float32)


def floor(dtype: torch.dtype) -> float:
    """The second moment's floor coefficient ``64 u`` for the compute dtype (``u`` its unit roundoff)."""
    return NORMAL_FLOOR * torch.finfo(dtype).eps / 2


def second_moment_sample(xi: Tensor, mode: str) -> Tensor:
    r"""The quantity the second moment averages: ``n p * mean_J(xi * xi)`` over the sharing set J.

    J is the whole frame (``"frame"``: ``||xi||_F^2``, one scalar), one column (``"column"``:
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


def frobenius_sq(G: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``||G||_F^2`` per frame in float64, for float32 ``G`` of any scale: ``(B, n, p)`` -> ``(B, 1, 1)``.

    G is scaled by an exact power of two per frame before its norm is taken, so that the norm
    neither overflows nor underflows; it is squared in float64. ``out``: where the scaled G goes.
    """
    g_max = torch.maximum(  # max |G_ij| (NaN if any is), without a temporary |G|: (B, 1, 1)
        G.amax(dim=(-2, -1), keepdim=True), G.amin(dim=(-2, -1), keepdim=True).neg()
    )
    # frexp gives exponent 0 for 0, inf and NaN: those frames are scaled by 1.
    r = torch.ldexp(torch.ones_like(g_max), torch.frexp(g_max)[1].neg_())
    Gr = torch.mul(G, r, out=out)
    return (torch.linalg.vector_norm(Gr, dim=(-2, -1), keepdim=True).to(torch.float64) / r.to(torch.float64)).square()


def adam_coefficient(v: Tensor, step: Tensor | float, *, lr: float, beta1: float, beta2: float, eps: float) -> Tensor:
    """``-lr / ((1 - beta1^t) (sqrt(v / (1 - beta2^t)) + eps))``: the factor that turns the first
    moment into the step, ``S = coef * m`` (before the cap), for second moment ``v`` at step ``t``.

    The bias corrections are numbers when ``step`` is one (the usual case: a few tensor operations
    fewer per step), tensors when it is a tensor. Shapes: v any (float64) -> shaped as v, float64.
    """
    if isinstance(step, Tensor):
        t = step.to(device=v.device, dtype=torch.float64)
        c1, c2 = 1 - beta1**t, 1 - beta2**t
    else:
        c1, c2 = 1 - beta1**step, 1 - beta2**step
    return torch.div(v, c2).sqrt_().add_(eps).mul_(c1).reciprocal_().mul_(-lr)


def cap_factor(length: Tensor, max_step: float) -> Tensor:
    """``min(1, max_step / length)``: the factor that shortens a step of Frobenius ``length``."""
    return max_step / length.clamp_min(max_step)


def polar_bound(max_step: float | None, projector: str, dtype: torch.dtype, store: torch.dtype) -> float | None:
    """A bound on ``||(W + S)^T (W + S) - I||_F`` that lets the polar retraction use its series alone.

    ``||S||^2`` for a tangent step, ``2 ||S|| + ||S||^2`` for any step (``projector="none"``), plus
    the frame's own error; ``None`` (the SVD backs the series up) without a cap or beyond
    the series' range. Frames stored in 16 bits carry errors of about 1e-2: they get the widest bound.
    """
    if max_step is None:
        return None
    reach = max_step**2 + (2 * max_step if projector == "none" else 0.0) + FRAME_MARGIN
    if reach > SERIES_BOUND:
        return None
    return reach if dtype == store else SERIES_BOUND


def default_frame_update(W: Tensor, G: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, step: Tensor | float, *,
                         lr: float, beta1: float, beta2: float, eps: float, max_step: float | None, retraction: str,
                         buffers: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`~stiefel_mini.optim.stiefel_adam_frame_update` for ``second_moment="frame"`` and
    ``projector="euclidean"``, written into ``buffers``; the same arguments, results and bits, and
    ``ok``, per frame, whether the retraction took the step: the new frame is finite exactly where it
    did (a refused frame is NaN), so the optimizer's check needs no further pass over the frames.

    ``buffers`` (tensors that alias no input): ``"exp_avg"`` and ``"exp_avg_sq"`` receive the new
    moments and ``"frame"`` the new frames (``None`` for frames stored in 16 bits); ``"scratch"``
    (shaped as ``W``, compute dtype) holds the large intermediates, ``"pp"`` (four ``(B, p, p)``,
    compute dtype) and ``"pp64"`` (one ``(B, p, p)``, float64) the small ones.

    Shapes: W, G, exp_avg ``(B, n, p)``, exp_avg_sq ``(B, 1, 1)`` -> ``(W', m', v')`` shaped as them,
    and ``ok`` ``(B,)``.
    """
    scratch, pp = buffers["scratch"], buffers["pp"]
    store, dtype = W.dtype, compute_dtype(W.dtype)
    W, G = W.to(dtype), G.to(dtype)
    WtG = torch.matmul(W.mT, G, out=pp[0])  # (B, p, p)
    N = sym(WtG, out=pp[1])
    # P_W is linear: m' = P_W(beta1 m + (1 - beta1) G) = (beta1 m + (1 - beta1) G) - W Su, with
    # Su = sym(W^T (beta1 m + (1 - beta1) G)): the second product accumulates onto the first.
    Su = sym(WtG.baddbmm_(W.mT, exp_avg, beta=1 - beta1, alpha=beta1), out=pp[2])
    m = torch.lerp(exp_avg, G, 1 - beta1, out=buffers["exp_avg"])
    m.baddbmm_(W, Su, alpha=-1.0)
    N64 = buffers["pp64"].copy_(N)
    n_sq = N64.mul_(N64).sum(dim=(-2, -1), keepdim=True)  # ||N||_F^2, float64
    sample = (frobenius_sq(G, out=scratch) - n_sq).clamp_min(0.0) + floor(dtype) * n_sq  # ||xi||^2 + floor
    v = torch.add(exp_avg_sq * beta2, sample * (1 - beta2), out=buffers["exp_avg_sq"])
    coef = adam_coefficient(v, step, lr=lr, beta1=beta1, beta2=beta2, eps=eps).to(dtype)  # (B, 1, 1): S = coef m'
    if max_step is not None:
        S = torch.mul(m, coef, out=scratch)
        factor = cap_factor(torch.linalg.vector_norm(S, dim=(-2, -1), keepdim=True), max_step)
        if retraction == "polar":
            W_plus_S = torch.addcmul(W, S, factor, out=scratch)
        else:
            S = S * factor
    elif retraction == "polar":
        W_plus_S = torch.addcmul(W, m, coef)
    else:
        S = m * coef
    if retraction == "polar":
        bound = polar_bound(max_step, "euclidean", dtype, store)
        W_new, ok = polar_or_nan(W_plus_S, bound, out=buffers["frame"], work=pp)
    else:
        W_new, ok = retract_or_nan(W, S, retraction)
    return W_new.to(store), m, v, ok
