"""The comparison behind book/which_tool: Muon's Newton-Schulz step and the per-tool measurements."""

from __future__ import annotations

import json

import pytest
import torch

from stiefel_mini.experiments import compare_tools as ct


@pytest.mark.parametrize("shape", [(3, 256, 64), (64, 256), (32, 32)])
def test_newton_schulz_pushes_singular_values_near_one(shape):
    G = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    O = ct.newton_schulz(G)
    assert O.shape == G.shape
    sv = torch.linalg.svdvals(O)
    assert sv.min() > 0.5 and sv.max() < 1.3  # the quintic's band, not exact convergence
    # Same singular vectors as G: O is close to the polar factor U V^T.
    U, _, Vh = torch.linalg.svd(G, full_matrices=False)
    assert torch.linalg.norm(O - U @ Vh) / torch.linalg.norm(U @ Vh) < 0.35


def test_stiefel_mini_steps_are_lr_long_and_on_manifold():
    r = ct.run(ct.ToolConfig(tool="stiefel_mini", steps=4, lr=1e-3, full_batch=True, batch=2, seq=4))
    assert r["error"] is None
    assert r["first_step_over_lr"] == pytest.approx(1.0, rel=1e-3)
    assert r["drift"] < 1e-5


def test_adamw_first_step_is_sqrt_np_times_lr():
    r = ct.run(ct.ToolConfig(tool="adamw", steps=2, lr=1e-3, full_batch=True, batch=2, seq=4))
    assert r["first_step_over_lr"] == pytest.approx((256 * 64) ** 0.5, rel=1e-2)


def test_muon_decays_weights_and_leaves_the_manifold():
    rows = ct.sweep(ct.ToolConfig(tools=("muon",), steps=3, weight_decay=0.5))
    (row,) = rows
    assert row["drift"] > 1e-3 and row["wd_norm"] < 1.0 and row["bf16_error"] is None
    assert "muon" in ct.format_table(rows)


def test_unknown_tool_is_reported():
    assert "unknown tool" in ct.run(ct.ToolConfig(tool="sgd", steps=1))["error"]


def test_cli_prints_and_writes_the_table(capsys, tmp_path):
    out = tmp_path / "tools.json"
    rows = ct.main(["--tools", "adamw,stiefel_mini", "--steps", "2", "--batch", "2", "--seq", "4", "--out", str(out)])
    assert [r["tool"] for r in rows] == ["adamw", "stiefel_mini"]
    assert "stiefel_mini" in capsys.readouterr().out
    stored = json.loads(out.read_text())
    assert stored["provenance"]["config"]["steps"] == 2 and [r["tool"] for r in stored["rows"]] == ["adamw", "stiefel_mini"]


# ---------------------------------------------------------------------------------------------------
# Weight decay under the other ways of keeping weights orthogonal (the behaviour the chapter shows)
# ---------------------------------------------------------------------------------------------------


def test_torch_orthogonal_householder_weight_collapses_under_default_adamw_decay():
    r = ct.torch_orthogonal_decay(64, 256, steps=3)
    assert r["map"] == "householder" and r["weight_decay"] == 0.01
    assert r["norm"][0] == pytest.approx(8.0, rel=1e-5)
    assert r["norm"][-1] == 0.0
    no_decay = ct.torch_orthogonal_decay(64, 256, steps=3, weight_decay=0.0)
    assert no_decay["norm"][-1] == pytest.approx(8.0, rel=1e-5)


def test_geotorch_decay_pulls_toward_the_base_point():
    pytest.importorskip("geotorch")
    r = ct.geotorch_decay(8, 24, steps=20, weight_decay=1.0)
    assert r["dist_to_base"][-1] < 0.9 * r["dist_to_base"][0]
    # Only the decay acted: the unconstrained matrix shrank by (1 - lr wd)^steps.
    assert r["x_norm"][-1] == pytest.approx(r["x_norm"][0] * (1 - r["lr"] * r["weight_decay"]) ** 20, rel=1e-4)
    assert max(r["orth"]) < 1e-4


def test_geoopt_projection_removes_decay_but_rewrites_grad():
    pytest.importorskip("geoopt")
    r = ct.geoopt_decay(32, 8, weight_decay=0.1)
    assert r["grad_change"] > 1e-3
    assert r["grad_change_minus_wdW"] < 1e-12
    assert r["max_change_from_decay"] < 1e-12
