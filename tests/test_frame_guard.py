"""The frames' guard: a frame written by anything but a Stiefel rule is caught at the next training
forward (not the 100th), an optimizer that trains frames as ordinary weights warns at its first step,
one built before convert_attention is refused at its first step, and a Stiefel rule's steps cost the
forward no check."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from stiefel_mini import StiefelAdam, StiefelMuon, convert_attention, frame_parameters
from stiefel_mini.groups import FrameHolder
from stiefel_mini.projection import FrameProjection

transformers = pytest.importorskip("transformers")


def _gpt2() -> nn.Module:
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=4)
    return transformers.GPT2LMHeadModel(cfg)


def _loss(model: nn.Module) -> torch.Tensor:
    x = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(0))
    return model(input_ids=x, labels=x).loss


def _train(model, opt, steps):
    """``steps`` training steps; returns the warnings, each as (training forward it came in, message)."""
    caught = []
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("always")
        for step in range(steps):
            opt.zero_grad()
            _loss(model).backward()
            opt.step()
            caught += [(step, str(w.message)) for w in log]
            log.clear()
    return caught


@pytest.mark.parametrize("optimizer, lr", [(torch.optim.AdamW, 0.05), (torch.optim.SGD, 20.0)])
def test_frames_trained_by_another_optimizer_are_caught_at_its_first_step_and_the_next_forward(optimizer, lr):
    model = _gpt2()
    convert_attention(model)
    caught = _train(model.train(), optimizer(model.parameters(), lr=lr), 3)
    first = [m for s, m in caught if s == 0]
    assert any(f"{optimizer.__name__} holds 4 Stiefel frame(s)" in m and "StiefelMuon" in m for m in first)
    # the first step moved the frames; the second training forward finds them off the manifold
    assert any("left the Stiefel manifold" in m for s, m in caught if s == 1), caught


def test_a_frame_written_in_place_is_caught_at_the_next_training_forward():
    model = _gpt2()
    convert_attention(model)
    model.train()
    _loss(model)  # the first training forward checks every frame
    with torch.no_grad():
        model.transformer.h[1].attn.c_attn.q_weight.mul_(1.1)
    with pytest.warns(UserWarning, match=r"FrameProjection\.q_weight: a frame has left the Stiefel manifold"):
        _loss(model)
    model.eval()
    _loss(model)  # eval mode: not checked (pytest would show a second warning)


@pytest.mark.parametrize("optimizer", ["StiefelMuon", "StiefelAdam"])
def test_a_stiefel_rules_steps_cost_the_forward_no_check(optimizer, monkeypatch):
    calls = []
    original = FrameHolder.check_frames
    monkeypatch.setattr(FrameHolder, "check_frames", lambda self: calls.append(self) or original(self))
    model = _gpt2()
    convert_attention(model)
    opt = (StiefelMuon(model.parameters(), frame_lr=0.05) if optimizer == "StiefelMuon"
           else StiefelAdam(model.parameters(), lr=0.01))
    caught = _train(model.train(), opt, 6)
    assert not caught and len(calls) == 2  # the two layers' first training forward, then versions only


@pytest.mark.parametrize("optimizer", [torch.optim.AdamW, StiefelMuon])
def test_an_optimizer_built_before_the_conversion_is_refused_at_its_first_step(optimizer):
    model = _gpt2()
    opt = optimizer(model.parameters(), lr=1e-3)
    convert_attention(model)
    _loss(model).backward()
    before = [p.detach().clone() for p in frame_parameters(model)]
    with pytest.raises(ValueError, match=r"built before convert_attention: it holds 4 weight\(s\) the conversion "
                       r"replaced \(transformer\.h\.0\.attn\.c_attn\.weight, transformer\.h\.0\.attn\.c_attn\.bias"):
        opt.step()
    assert all(torch.equal(a, b) for a, b in zip(before, frame_parameters(model)))
    stepped = _gpt2()  # an optimizer that stepped before the conversion is refused at its first step after it
    opt = optimizer(stepped.parameters(), lr=1e-3)
    _loss(stepped).backward()
    opt.step()
    convert_attention(stepped)
    with pytest.raises(ValueError, match="built before convert_attention"):
        opt.step()


def test_writes_and_reads_that_cannot_work_on_a_converted_weight_raise_with_the_route():
    proj, _ = FrameProjection.from_weight(torch.randn(24, 8), torch.zeros(24), {"q": 2, "k": 2}, 4)
    before = proj.weight.detach().clone()
    with pytest.raises(ValueError, match=r"`\.data = w` would be dropped.*proj\.weight = w"):
        proj.weight.data = torch.zeros(24, 8)
    assert torch.equal(proj.weight.detach(), before)
    with pytest.raises(AttributeError, match=r"no gradient of its own.*proj\.q_weight"):
        proj.weight.grad
    for freeze in (lambda w: w.requires_grad_(False), lambda w: setattr(w, "requires_grad", False)):
        with pytest.raises(ValueError, match=r"requires_grad cannot be set.*proj\.requires_grad_\(False\)"):
            freeze(proj.weight)
    proj.weight.data.copy_(before)  # what works still works: an in-place write through .data
    assert proj.weight.requires_grad and torch.allclose(proj.weight, before, atol=1e-6)
