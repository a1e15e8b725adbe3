"""The behaviour of weight decay on frames that the book documents, pinned in float64.

1. The Riemannian gradient of ``lam/2 ||W||_F^2`` at a frame is ``P_W(lam W) = 0``.
2. Decoupled decay followed by the polar retraction returns W exactly: ``polar((1 - c) W) = W``.
3. Decay fused into the step before one retraction is not a no-op: it enlarges the step,
   ``polar((1 - lr wd) W - lr D) = polar(W - lr D / (1 - lr wd))``.
4. StiefelAdam's frames are bitwise identical whatever weight decay its groups are given.
"""

from __future__ import annotations

import pytest
import torch

from stiefel_mini import StiefelAdam, StiefelSelfAttention, param_groups
from stiefel_mini.geometry import (
    orthogonality_error,
    polar_retraction,
    project_tangent,
    random_stiefel,
    retract,
)

SHAPES = [(8, 3), (64, 16), (3, 8), (4, 32, 8), (2, 3, 16, 16)]
EPS = torch.finfo(torch.float64).eps


def _frame(shape, seed=0):
    return random_stiefel(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("lam", [1e-4, 0.1, 10.0])
def test_riemannian_gradient_of_weight_decay_is_zero(shape, lam):
    W = _frame(shape)
    xi = project_tangent(W, lam * W)
    assert xi.abs().max().item() <= 10 * lam * EPS * max(shape[-2:])


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("c", [1e-5, 1e-2, 0.5])
def test_decoupled_decay_then_polar_returns_the_frame(shape, c):
    W = _frame(shape, seed=1)
    W_decayed = (1 - c) * W
    assert (W_decayed - W).abs().max().item() > 0.5 * c / max(shape[-2:])  # the decay did move W
    back = retract(W, W_decayed - W, "polar")
    assert (back - W).abs().max().item() <= 20 * EPS


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("lr,wd", [(1e-2, 0.1), (0.1, 1.0), (0.05, 5.0)])
def test_fused_decay_enlarges_the_step(shape, lr, wd):
    W = _frame(shape, seed=2)
    D = project_tangent(W, torch.randn(shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64))
    fused = polar_retraction(W, -lr * wd * W - lr * D)  # polar((1 - lr wd) W - lr D)
    enlarged = polar_retraction(W, -lr * D / (1 - lr * wd))
    plain = polar_retraction(W, -lr * D)
    assert (fused - enlarged).abs().max().item() <= 50 * EPS
    assert orthogonality_error(fused).max().item() <= 1e-13
    # Not a no-op: the fused step lands elsewhere than the step without decay.
    assert (fused - plain).abs().max().item() > 1e-3 * lr * lr * wd * D.abs().max().item()


def _train_frames(weight_decay, *, steps=5, dtype=torch.float64, via_default=False):
    """Train one attention module's frames (V and output frozen, so nothing else can differ)."""
    torch.manual_seed(0)
    attn = StiefelSelfAttention(16, 2, 4).to(dtype)
    if via_default:
        # The frame group inherits the optimizer-wide weight_decay.
        opt = StiefelAdam([{"params": [attn.w_q, attn.w_k], "stiefel": True}], lr=0.05,
                          weight_decay=weight_decay)
    else:
        opt = StiefelAdam([{"params": [attn.w_q, attn.w_k], "stiefel": True,
                            "weight_decay": weight_decay}], lr=0.05)
    x = torch.randn(4, 6, 16, generator=torch.Generator().manual_seed(1), dtype=dtype)
    for _ in range(steps):
        loss = attn(x).pow(2).mean() + attn.logits(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return attn.w_q.detach().clone(), attn.w_k.detach().clone()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("via_default", [False, True])
def test_stiefeladam_frames_bitwise_identical_across_weight_decays(dtype, via_default):
    ref_q, ref_k = _train_frames(0.0, dtype=dtype, via_default=via_default)
    torch.manual_seed(0)
    init_q = StiefelSelfAttention(16, 2, 4).to(dtype).w_q.detach()
    assert not torch.equal(ref_q, init_q)  # the frames did move
    for wd in (1e-4, 0.1, 1.0, 100.0):
        q, k = _train_frames(wd, dtype=dtype, via_default=via_default)
        assert torch.equal(q, ref_q) and torch.equal(k, ref_k), wd
    assert orthogonality_error(ref_q).max().item() < (1e-12 if dtype == torch.float64 else 1e-5)


def test_param_groups_frames_ignore_decay_in_a_whole_model():
    """With the rest of the model undecayed, decay handed to the frame group changes no bit."""
    def train(wd):
        torch.manual_seed(0)
        attn = StiefelSelfAttention(16, 2, 4).double()
        opt = StiefelAdam(param_groups(attn, frame_options={"weight_decay": wd}), lr=0.05)
        x = torch.randn(4, 6, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        for _ in range(4):
            opt.zero_grad()
            attn(x).pow(2).mean().backward()
            opt.step()
        return [p.detach().clone() for p in attn.parameters()]

    ref = train(0.0)
    for wd in (0.01, 3.0):
        assert all(torch.equal(a, b) for a, b in zip(train(wd), ref))
    torch.manual_seed(0)
    start = StiefelSelfAttention(16, 2, 4).double()
    assert (ref[0] - start.w_q).abs().max() > 0.01  # the frames moved (4 steps of lr 0.05)
