"""stiefel_mini.experiments.weight_decay: the sweep, its widget, and the other libraries' decay."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import torch

from stiefel_mini.experiments import weight_decay as wdx
from stiefel_mini.experiments.config import ConfigError, parse_config

TINY = wdx.WeightDecayConfig(steps=30, weight_decays=(0.0, 1.0, 10.0), snapshot_steps=(0, 10, 30),
                             log_every=5, eval_size=64, batch_size=32)


@pytest.fixture(scope="module")
def history():
    return wdx.run(TINY)


def test_stiefel_frames_bitwise_identical_across_decays(history):
    assert wdx.frames_identical(history, "stiefel")
    assert not wdx.frames_identical(history, "adamw")
    runs = history["runs"]["stiefel"]
    for r in runs[1:]:
        for key in ("norm_q", "entropy", "logit_absmax", "loss"):
            assert r[key] == runs[0][key]
    # And the frames did train, and stay on the manifold.
    assert wdx.max_change(history, "stiefel", 2) == 0.0
    assert runs[0]["orth_q"][-1] < 1e-5
    first, last = runs[0]["snapshots"]["w_q"][0], runs[0]["snapshots"]["w_q"][-1]
    assert not torch.equal(first, last)


def test_adamw_decay_shrinks_qk_and_flattens_attention(history):
    runs = history["runs"]["adamw"]
    norms = [r["norm_q"][-1] for r in runs]
    assert norms[0] > norms[1] > norms[2]
    assert runs[2]["logit_absmax"][-1] < runs[0]["logit_absmax"][-1]
    assert runs[2]["entropy"][-1] > runs[0]["entropy"][-1]
    assert wdx.max_change(history, "adamw", 2) > 0.1


def test_same_start_and_batches_for_every_arm(history):
    # Before any step the Q/K weights of all arms and decays are the same tensors.
    w0 = history["runs"]["adamw"][0]["snapshots"]["w_q"][0]
    for recs in history["runs"].values():
        for r in recs:
            assert torch.equal(r["snapshots"]["w_q"][0], w0)


def test_decay_scope_all_moves_the_frames_through_the_rest_of_the_model():
    cfg = dataclasses.replace(TINY, arms=("stiefel",), weight_decays=(0.0, 3.0), decay_scope="all")
    h = wdx.run(cfg)
    assert not wdx.frames_identical(h, "stiefel")
    assert h["runs"]["stiefel"][1]["orth_q"][-1] < 1e-5


def test_angular_update_matches_definition():
    W = torch.randn(2, 8, 3, dtype=torch.float64)
    V = torch.randn(2, 8, 3, dtype=torch.float64)
    a = wdx.angular_update(W, W + 1e-3 * V)
    cos = (W * (W + 1e-3 * V)).sum((1, 2)) / (W.norm(dim=(1, 2)) * (W + 1e-3 * V).norm(dim=(1, 2)))
    torch.testing.assert_close(a, torch.acos(cos.clamp(max=1)), rtol=1e-5, atol=1e-9)
    assert wdx.angular_update(W, 3.0 * W).abs().max() < 1e-15


def test_config_cli_parsing():
    cfg = parse_config(wdx.WeightDecayConfig, ["--weight_decays", "0,0.5", "--decay_scope", "all"])
    assert cfg.weight_decays == (0.0, 0.5) and cfg.decay_scope == "all"
    with pytest.raises(ConfigError):
        parse_config(wdx.WeightDecayConfig, ["--decay_scope", "everything"])
    with pytest.raises(ValueError):
        wdx.run(dataclasses.replace(TINY, arms=("sgd",)))


def test_cli_writes_results(tmp_path, capsys):
    out = tmp_path / "wd.json"
    wdx.main(["--steps", "6", "--weight_decays", "0,1", "--snapshot_steps", "0,6", "--log_every", "3",
              "--eval_size", "16", "--batch_size", "8", "--arms", "adamw,stiefel", "--out", str(out)])
    text = capsys.readouterr().out
    assert "stiefel: final W_Q, W_K bitwise identical across decays: True" in text
    data = json.loads(out.read_text())
    assert data["experiment"] == "weight_decay"
    assert data["frames_identical"] == {"adamw": False, "stiefel": True}
    assert data["provenance"]["config"]["steps"] == 6
    assert len(data["summary"]) == 4


# ---------------------------------------------------------------------------------------------------
# The widget: what it displays is what the library computes
# ---------------------------------------------------------------------------------------------------

SPAN = re.compile(r'<div class="wd-readout" data-arm="(\w+)".*?</div>', re.S)
VALUE = re.compile(r'<span data-key="(\w+)"(?: data-value="([^"]*)")?>([^<]*)</span>')


def parse_readouts(frame_html: str) -> dict[str, dict[str, str]]:
    """``{arm: {key: displayed text}}`` (``max_change`` also as ``max_change_value``: the exact float)."""
    out = {}
    for m in SPAN.finditer(frame_html):
        vals = {}
        for key, exact, text in VALUE.findall(m.group(0)):
            vals[key] = text
            if exact:
                vals[key + "_value"] = exact
        out[m.group(1)] = vals
    return out


def test_widget_numbers_agree_with_the_library(history):
    cfg = history["config"]
    for i_wd, wd in enumerate(cfg.weight_decays):
        for i_snap, step in enumerate(cfg.snapshot_steps):
            shown = parse_readouts(wdx.widget_frame_html(history, i_wd, i_snap))
            assert set(shown) == {"adamw", "stiefel"}
            for arm in ("adamw", "stiefel"):
                snap = history["runs"][arm][i_wd]["snapshots"]
                ref = history["runs"][arm][0]["snapshots"]
                W_q, W_k = snap["w_q"][i_snap], snap["w_k"][i_snap]
                # Recomputed here with plain torch, not with the module's helpers.
                norm = sum(W_q[h].flatten().norm().item() for h in range(W_q.shape[0])) / W_q.shape[0]
                change = max((W_q - ref["w_q"][i_snap]).abs().max().item(),
                             (W_k - ref["w_k"][i_snap]).abs().max().item())
                p = snap["attn"][i_snap]
                entropy = (-(p * p.clamp_min(1e-30).log()).sum(-1)).mean().item()
                assert float(shown[arm]["norm_q"]) == pytest.approx(norm, abs=2e-6)
                assert float(shown[arm]["max_change_value"]) == change
                assert float(shown[arm]["entropy"]) == pytest.approx(entropy, abs=2e-6)
                assert shown[arm]["fingerprint"] == wdx.fingerprint(W_q, W_k)
            if step > 0 and wd > 0:
                assert shown["stiefel"]["max_change"] == "0 (bitwise equal)"
                assert shown["adamw"]["max_change"] != "0 (bitwise equal)"


def test_widget_stiefel_readout_does_not_depend_on_decay(history):
    cfg = history["config"]
    for i_snap in range(len(cfg.snapshot_steps)):
        frames = [parse_readouts(wdx.widget_frame_html(history, i, i_snap))
                  for i in range(len(cfg.weight_decays))]
        assert all(f["stiefel"] == frames[0]["stiefel"] for f in frames)
        if cfg.snapshot_steps[i_snap] > 0:
            assert frames[-1]["adamw"]["norm_q"] != frames[0]["adamw"]["norm_q"]


def test_widget_builds_a_static_grid(history):
    pytest.importorskip("ipywidgets")
    pytest.importorskip("matplotlib")
    box = wdx.widget(history, dpi=30)
    assert "wd-widget" in box._dom_classes
    wd_slider, step_slider = box.sliders
    assert list(wd_slider.options) == ["0", "1", "10"]
    assert list(step_slider.options) == ["10", "30"]  # step 0 is left out
    assert step_slider.index == 0 and all(s.selected_index == 0 for s in box.stack.children)
    html_00 = box.stack.children[0].children[0].value
    html_20 = box.stack.children[2].children[0].value
    assert 'data-step="10"' in html_00
    img = re.compile(r'<img class="wd-image" data-arm="(\w+)" src="([^"]+)"')
    imgs_00, imgs_20 = dict(img.findall(html_00)), dict(img.findall(html_20))
    assert imgs_00["stiefel"] == imgs_20["stiefel"]  # the same bits draw the same picture
    assert imgs_00["adamw"] != imgs_20["adamw"]


# ---------------------------------------------------------------------------------------------------
# Weight decay under the other ways of keeping weights orthogonal (the behaviour the chapter shows)
# ---------------------------------------------------------------------------------------------------


def test_torch_orthogonal_householder_weight_collapses_under_default_adamw_decay():
    r = wdx.torch_orthogonal_decay(64, 256, steps=3)
    assert r["map"] == "householder" and r["weight_decay"] == 0.01
    assert r["norm"][0] == pytest.approx(8.0, rel=1e-5)
    assert r["norm"][-1] == 0.0
    no_decay = wdx.torch_orthogonal_decay(64, 256, steps=3, weight_decay=0.0)
    assert no_decay["norm"][-1] == pytest.approx(8.0, rel=1e-5)


def test_geotorch_decay_pulls_toward_the_base_point():
    pytest.importorskip("geotorch")
    r = wdx.geotorch_decay(8, 24, steps=20, weight_decay=1.0)
    assert r["dist_to_base"][-1] < 0.9 * r["dist_to_base"][0]
    # Only the decay acted: the unconstrained matrix shrank by (1 - lr wd)^steps.
    assert r["x_norm"][-1] == pytest.approx(r["x_norm"][0] * (1 - r["lr"] * r["weight_decay"]) ** 20, rel=1e-4)
    assert max(r["orth"]) < 1e-4


def test_geoopt_projection_removes_decay_but_rewrites_grad():
    pytest.importorskip("geoopt")
    r = wdx.geoopt_decay(32, 8, weight_decay=0.1)
    assert r["grad_change"] > 1e-3
    assert r["grad_change_minus_wdW"] < 1e-12
    assert r["max_change_from_decay"] < 1e-12
