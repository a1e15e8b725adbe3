"""StiefelAdam and the frame mark: a marked frame is a frame in whatever param group it arrives.

``StiefelAdam(model.parameters())`` is what a PyTorch user types first; on a model whose attention
holds Stiefel frames it must keep them on the manifold, and train everything else as
``torch.optim.AdamW`` does.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from stiefel_mini import StiefelAdam, StiefelMultiheadAttention, StiefelSelfAttention
from stiefel_mini.geometry import orthogonality_error
from stiefel_mini.groups import frame_parameters, is_frame

pytestmark = pytest.mark.usefixtures("one_thread")


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(4)
        self.embed = nn.Linear(6, 8)
        self.attn = StiefelSelfAttention(8, 2, logit_scale="learned")
        self.mha = StiefelMultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attn(self.embed(x))
        return self.head(self.mha(x, x, x, need_weights=False)[0].mean(dim=1))


def _train(model: nn.Module, opt: torch.optim.Optimizer, steps: int) -> list[float]:
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(16, 5, 6, generator=g), torch.randint(0, 3, (16,), generator=g)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_model_parameters_keep_the_frames_on_the_manifold_for_100_steps():
    model = _Net()
    start = [p.detach().clone() for p in frame_parameters(model)]
    losses = _train(model, StiefelAdam(model.parameters(), lr=1e-2), 100)
    frames = list(frame_parameters(model))
    assert len(frames) == 4 and all(is_frame(p) for p in frames)
    worst = max(orthogonality_error(p.detach()).max().item() for p in frames)
    assert worst < 1e-5, worst  # measured 2.9e-7; AdamW, which trains them as plain weights: 1.5 in 20 steps
    assert min(torch.linalg.matrix_norm(p.detach() - s).min().item() for p, s in zip(frames, start)) > 0.1
    assert losses[-1] < losses[0] - 0.3


def test_in_a_shared_group_the_frames_take_the_groups_options_and_the_rest_is_unchanged():
    """One group holding frames and other weights steps as two groups would: the frames with the
    frame rule (``stiefel=True``), the rest as the AdamW group it was (``test_optim`` pins that group
    to ``torch.optim.AdamW``), bit for bit."""
    model = _Net()
    twin = copy.deepcopy(model)
    opt = StiefelAdam(model.parameters(), lr=0.05, weight_decay=0.1, max_step=0.2)
    ref = StiefelAdam([{"params": list(frame_parameters(twin)), "stiefel": True},
                       {"params": [p for p in twin.parameters() if not is_frame(p)]}],
                      lr=0.05, weight_decay=0.1, max_step=0.2)
    _train(model, opt, 3)
    _train(twin, ref, 3)
    for (name, a), b in zip(model.named_parameters(), twin.parameters()):
        assert torch.equal(a, b), name


def test_a_frame_lr_above_the_cap_moves_the_frame_by_the_cap():
    moves = []
    for lr in (0.2, 5.0):
        model = _Net()
        start = model.attn.w_q.detach().clone()
        _train(model, StiefelAdam(model.parameters(), lr=lr, max_step=0.1), 1)
        moves.append(torch.linalg.matrix_norm(model.attn.w_q.detach() - start))
    torch.testing.assert_close(moves[0], moves[1], rtol=1e-5, atol=0)
    assert 0.095 < moves[0].max().item() <= 0.1  # the chord of a step of Frobenius length 0.1


def test_state_dict_round_trip_with_marked_frames_in_a_plain_group():
    model = _Net()
    opt = StiefelAdam(model.parameters(), lr=1e-2)
    _train(model, opt, 3)
    twin = copy.deepcopy(model)
    opt2 = StiefelAdam(twin.parameters(), lr=1e-2)
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))  # as saved: no tensor shared with opt
    assert opt2.state[twin.attn.w_q]["exp_avg_sq"].dtype == torch.float64  # a frame's state, kept as such
    _train(model, opt, 2)
    _train(twin, opt2, 2)
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.equal(a, b)
