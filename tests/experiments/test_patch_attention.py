"""stiefel_mini.experiments.patch_attention: real patch tokens and the four attention variants."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

pytest.importorskip("matplotlib")

from stiefel_mini.experiments import patch_attention as pa  # noqa: E402
from stiefel_mini.geometry import orthogonality_error  # noqa: E402


def test_tokens_from_the_bundled_photograph():
    img = pa.sample_image()
    assert img.shape == (150, 128, 3) and 0.0 <= img.min() and img.max() <= 1.0
    crops = pa.random_crops(img, 3, 32, torch.Generator().manual_seed(0))
    tok = pa.patch_tokens(crops)
    assert tok.shape == (3, 64, 64)
    assert tok[..., :48].abs().max() <= 1.0
    # Position features: each token's have norm sqrt(8); patch order is row-major.
    torch.testing.assert_close(tok[0, :, 48:].norm(dim=-1), torch.full((64,), 8**0.5), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tok[0, 1, :48], 2 * (crops[0, 0:4, 4:8].reshape(-1) - 0.5))


def test_masking_keeps_positions():
    tok = pa.patch_tokens(pa.random_crops(pa.sample_image(), 2, 32, torch.Generator().manual_seed(0)))
    masked, mask = pa.mask_tokens(tok, 0.25, torch.Generator().manual_seed(1))
    assert mask.any()
    assert torch.equal(masked[mask][:, :48], torch.zeros_like(masked[mask][:, :48]))
    assert torch.equal(masked[..., 48:], tok[..., 48:])
    assert torch.equal(masked[~mask], tok[~mask])


def test_arms_share_the_start_and_frames_stay_frames():
    cfg = dataclasses.replace(pa.PatchConfig(), steps=6, batch_size=4)
    h = pa.sweep(cfg)
    w0 = h["init"]["stiefel"].w_q
    for arm in cfg.arms:
        assert torch.equal(h["init"][arm].w_q, w0)
        assert h["loss"][arm][0] > 0
    for arm in ("stiefel", "stiefel_learned"):
        assert orthogonality_error(h["modules"][arm].w_q).max() < 1e-5
    assert orthogonality_error(h["modules"]["adamw"].w_q).max() > 1e-3
    one = pa.run(dataclasses.replace(cfg, arm="qknorm"), h["image"])
    assert one["loss"] == h["loss"]["qknorm"]
    with pytest.raises(ValueError, match="unknown arm"):
        pa.build_attention("nope", cfg, 64)


def test_cli_writes_the_loss_curves(tmp_path, capsys):
    out = tmp_path / "patch.json"
    pa.main(["--steps", "2", "--batch_size", "2", "--arms", "stiefel,adamw", "--out", str(out)])
    stored = json.loads(out.read_text())
    assert set(stored["loss"]) == {"stiefel", "adamw"} and stored["provenance"]["config"]["steps"] == 2
    assert "stiefel" in capsys.readouterr().out
