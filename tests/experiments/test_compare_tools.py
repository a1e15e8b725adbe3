"""The comparison behind book/which_tool: Muon's Newton-Schulz step and the per-tool measurements."""

from __future__ import annotations

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
    r = ct.run_tool("stiefel_mini", steps=4, lr=1e-3, full_batch=True, batch=2, seq=4)
    assert r["error"] is None
    assert r["first_step_over_lr"] == pytest.approx(1.0, rel=1e-3)
    assert r["drift"] < 1e-5


def test_adamw_first_step_is_sqrt_np_times_lr():
    r = ct.run_tool("adamw", steps=2, lr=1e-3, full_batch=True, batch=2, seq=4)
    assert r["first_step_over_lr"] == pytest.approx((256 * 64) ** 0.5, rel=1e-2)


def test_muon_decays_weights_and_leaves_the_manifold():
    rows = ct.compare(("muon",), steps=3, weight_decay=0.5)
    (row,) = rows
    assert row["drift"] > 1e-3 and row["wd_norm"] < 1.0 and row["bf16_error"] is None
    assert "muon" in ct.format_table(rows)


def test_unknown_tool_is_reported():
    assert "unknown tool" in ct.run_tool("sgd", steps=1)["error"]
