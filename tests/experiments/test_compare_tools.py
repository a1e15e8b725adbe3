"""The comparison behind book/which_tool: the per-tool measurements."""

from __future__ import annotations

import json

import pytest

from stiefel_mini.experiments import compare_tools as ct


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


@pytest.mark.parametrize("error, said", [
    ("NotImplementedError: \"lu_cpu\" not implemented for 'BFloat16'", "no bfloat16 LU factorisation on the CPU"),
    ("NotImplementedError: \"orgqr_cpu\" not implemented for 'BFloat16'", "no bfloat16 Householder product on the CPU"),
    ("NotImplementedError: \"svd_cuda\" not implemented for 'Half'", "no half svd on the GPU"),
    ("RuntimeError: unknown tool sgd", "unknown tool sgd"),
])
def test_an_error_is_said_in_words_without_its_exception_name(error, said):
    assert ct.error_text(error) == said
