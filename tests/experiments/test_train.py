"""The chapters' training loop: the same steps as the loop written out by hand, bit for bit."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from stiefel_mini import StiefelAdam, StiefelSelfAttention, param_groups
from stiefel_mini.experiments.train import train


def _setup():
    torch.manual_seed(0)
    model = nn.Sequential(StiefelSelfAttention(8, n_heads=2), nn.Flatten(), nn.Linear(8 * 3, 4))
    opt = StiefelAdam(param_groups(model, weight_decay=0.1, frame_options={"lr": 0.05}), lr=1e-2)
    return model, opt


def test_train_is_the_loop_written_out():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(20, 3, 8, generator=g), torch.randint(0, 4, (20,), generator=g)
    model, opt = _setup()
    frame = opt.param_groups[0]["params"][0]
    out = train(model, opt, x, y, steps=5, batch_size=6, generator=torch.Generator().manual_seed(2), watch=frame)
    ref, ref_opt = _setup()
    ref_frame = ref_opt.param_groups[0]["params"][0]
    gen, losses, moves = torch.Generator().manual_seed(2), [], []
    for _ in range(5):
        idx = torch.randint(0, 20, (6,), generator=gen)
        loss = F.cross_entropy(ref(x[idx]), y[idx])
        ref_opt.zero_grad(set_to_none=True)
        loss.backward()
        before = ref_frame.detach().clone()
        ref_opt.step()
        moves.append(torch.linalg.matrix_norm(ref_frame.detach() - before).max().item())
        losses.append(loss.item())
    assert out == {"loss": losses, "step_norm": moves}
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), ref.state_dict().values()))
    assert max(moves) <= 0.05 * (1 + 1e-5)  # a frame step is lr long at most


def test_train_under_autocast_keeps_float32_weights_and_records_no_steps_unwatched():
    x, y = torch.randn(10, 3, 8), torch.randint(0, 4, (10,))
    model, opt = _setup()
    out = train(model, opt, x, y, steps=2, batch_size=4, generator=torch.Generator().manual_seed(0),
                autocast=torch.bfloat16)
    assert out["step_norm"] == [] and len(out["loss"]) == 2
    assert all(p.dtype == torch.float32 for p in model.parameters())
