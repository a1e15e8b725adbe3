"""Import smoke tests: the torch / torchvision pair and stiefel_mini's public API.

A mismatched torch / torchvision pair often imports fine and fails only when a compiled torchvision
operator runs, so one is run here (nms on two boxes).
"""

from __future__ import annotations

import importlib

import pytest


def test_torch_and_torchvision_work_together():
    import torch
    import torchvision

    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0]])
    scores = torch.tensor([0.6, 0.9])
    keep = torchvision.ops.nms(boxes, scores, iou_threshold=0.5)  # IoU 81/119 = 0.68 > 0.5
    assert keep.tolist() == [1]
    keep = torchvision.ops.nms(boxes, scores, iou_threshold=0.9)
    assert keep.tolist() == [1, 0]
    # torchvision's version names the torch it was built for, e.g. 0.29.1 <-> 2.14.1
    tv_minor = int(torchvision.__version__.split(".")[1])
    torch_minor = int(torch.__version__.split(".")[1])
    assert tv_minor == torch_minor + 15, (torch.__version__, torchvision.__version__)


# The oldest torch this project has run its tests with (CI, the README's setup): the floor that
# pyproject.toml promises may not be older, since StiefelAdam calls torch's functional Adam with
# keywords older releases lack.
OLDEST_TESTED_TORCH = (2, 14)


def test_the_torch_floor_is_a_tested_release():
    import re
    import tomllib
    from pathlib import Path

    import torch

    deps = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["dependencies"]
    floor = next(re.fullmatch(r"torch>=(\d+)\.(\d+)", d) for d in deps if d.startswith("torch"))
    assert floor, deps
    floor = tuple(int(x) for x in floor.groups())
    installed = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    assert OLDEST_TESTED_TORCH <= floor <= installed, (floor, torch.__version__)


def test_public_api():
    import stiefel_mini

    expected = {
        "StiefelAdam",
        "StiefelSelfAttention",
        "param_groups",
        "frame_parameters",
        "qk_parameters",
        "RETRACTIONS",
        "retract",
        "project",
        "project_tangent",
        "canonical_gradient",
        "random_stiefel",
        "orthogonality_error",
        "convert_attention",
        "StiefelMultiheadAttention",
        "is_frame",
        "mark_frame",
    }
    assert expected <= set(stiefel_mini.__all__)
    for name in stiefel_mini.__all__:
        assert hasattr(stiefel_mini, name), name
    assert isinstance(stiefel_mini.__version__, str)
    assert sorted(stiefel_mini.RETRACTIONS) == ["cayley", "exp", "polar", "qr"]
    for mod in ("stiefel_mini.geometry", "stiefel_mini.optim", "stiefel_mini.attention"):
        importlib.import_module(mod)


def test_one_training_step_end_to_end():
    import torch

    from stiefel_mini import StiefelAdam, StiefelSelfAttention, orthogonality_error, param_groups

    torch.manual_seed(0)
    model = torch.nn.Sequential(StiefelSelfAttention(16, 4), torch.nn.Linear(16, 3))
    opt = StiefelAdam(param_groups(model, weight_decay=0.1), lr=1e-2)
    x = torch.randn(2, 5, 16)
    attn = model[0]
    before = [attn.w_q.detach().clone(), attn.w_k.detach().clone()]
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    assert orthogonality_error(attn.w_q.detach()).max() < 1e-5
    assert orthogonality_error(attn.w_k.detach()).max() < 1e-5
    assert torch.isfinite(model(x)).all()
    # the step did something: each head's frame moved by about lr (the first step of the per-frame
    # second moment has Frobenius length lr) and the loss fell (measured: 0.018 -> 0.0053)
    for W, W0 in zip((attn.w_q, attn.w_k), before):
        moved = torch.linalg.matrix_norm(W.detach() - W0)  # (n_heads,)
        torch.testing.assert_close(moved, torch.full_like(moved, 1e-2), rtol=1e-2, atol=0)
    assert model(x).pow(2).mean().item() < 0.5 * loss.item()


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(pytest.main([__file__, "-q"]))


def test_the_readmes_ten_lines_run_and_train_the_scale_at_its_own_lr():
    """The README's example, as printed: it trains, keeps the frames on the manifold, and gives the
    learned logit scale the group of its own that the text describes."""
    import re
    from pathlib import Path

    import torch

    from stiefel_mini.geometry import orthogonality_error
    from stiefel_mini.groups import DEFAULT_SCALE_LR

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    code = re.search(r"## Ten lines\n\n```python\n(.*?)```", text, re.S).group(1)
    torch.manual_seed(0)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    groups = {g["name"]: g for g in scope["opt"].param_groups}
    assert groups["scale"]["lr"] == DEFAULT_SCALE_LR and groups["scale"]["weight_decay"] == 0.0
    assert float(orthogonality_error(scope["attn"].w_q.detach()).max()) < 1e-4
    assert scope["loss"].item() < 0.5  # 100 steps on one fixed batch: it has fit it
