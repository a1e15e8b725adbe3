"""AdamW's step shared by StiefelAdam and StiefelMuon: bit for bit torch.optim.AdamW's."""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch

from stiefel_mini._adamw import adamw_step


def _params(seed: int) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(5, 3, generator=g)), torch.nn.Parameter(torch.randn(7, generator=g)),
            torch.nn.Parameter(torch.randn(2, 2, generator=g))]


def test_three_steps_equal_torch_adamw_bit_for_bit_and_its_state_layout():
    ours, theirs = _params(0), _params(0)
    reference = torch.optim.AdamW(theirs, lr=3e-3, betas=(0.8, 0.95), eps=1e-7, weight_decay=0.1)
    state = defaultdict(dict)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        grads = [torch.randn(p.shape, generator=g) for p in ours]
        for p, q, grad in zip(ours, theirs, grads):
            p.grad, q.grad = grad.clone(), grad.clone()
        ours[2].grad = theirs[2].grad = None  # a parameter without a gradient is left alone
        with torch.no_grad():  # as inside an optimizer's step
            adamw_step(ours, state, lr=3e-3, betas=(0.8, 0.95), eps=1e-7, weight_decay=0.1)
        reference.step()
    for p, q in zip(ours, theirs):
        assert torch.equal(p, q)
    for p, q in zip(ours[:2], theirs[:2]):
        assert set(state[p]) == set(reference.state[q]) == {"step", "exp_avg", "exp_avg_sq"}
        for k in state[p]:
            assert torch.equal(state[p][k], reference.state[q][k]) and state[p][k].dtype == reference.state[q][k].dtype
    assert ours[2] not in state


def test_a_sparse_gradient_is_refused_naming_the_optimizer():
    p = torch.nn.Parameter(torch.zeros(4, 2))
    p.grad = torch.zeros(4, 2).to_sparse()
    with pytest.raises(RuntimeError, match="StiefelMuon does not support sparse gradients"):
        adamw_step([p], defaultdict(dict), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, owner="StiefelMuon")
