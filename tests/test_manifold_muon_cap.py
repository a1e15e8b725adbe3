"""benchmarks/manifold_muon_cap.py on a tiny run: the capture replays the run, and the known answers hold."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from stiefel_mini.experiments.lm import data as lm_data

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ["1", "3", "6"]


def load():
    spec = importlib.util.spec_from_file_location("manifold_muon_cap", ROOT / "benchmarks" / "manifold_muon_cap.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(corpus_slice, tmp_path, *extra: str) -> dict:
    """The benchmark at the tiny preset for 6 steps, its record read back from the results file."""
    out = tmp_path / "cap.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(lm_data.CORPUS_ENV, str(corpus_slice))
        load().main(["--preset", "tiny", "--steps", "6", "--capture", *CAPTURE, "--rounds", "1",
                     "--out", str(out), *extra])
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def capped(corpus_slice, tmp_path_factory):
    return run(corpus_slice, tmp_path_factory.mktemp("capped"))


def test_the_record_holds_its_provenance_and_every_kind_at_every_captured_step(capped):
    prov = capped["provenance"]
    assert prov["git_commit"] and prov["seeds"] == [100] and prov["config"]["arm"] == "all_stiefel"
    assert len(capped["load_average_before"]) == len(capped["load_average_after"]) == 3
    assert capped["point"] == {"lr": 2e-3, "frame_lr": 0.02, "warmup_frac": 0.25, "max_iter": 1}
    rows = capped["points"]
    assert [(r["step"], r["kind"]) for r in rows] == [(int(s), k) for s in CAPTURE for k in load().KINDS]
    assert len(capped["train_loss"]) == 6 and sorted(capped["summary"]) == sorted(load().KINDS)
    w = capped["whole_step"]
    assert len(w["seconds"]["capped"]) == len(w["seconds"]["uncapped"]) == 1 and w["ratio"]["median"] > 0


def test_the_capture_replays_the_runs_step(capped):
    # The capped solve on what the hooks copied gives, bit for bit, the multiplier the optimizer stored,
    # and the Nesterov direction's buffer is the one it kept: the frame problems are the run's.
    for r in capped["points"]:
        assert r["replay_max_abs_diff"] == 0.0 and r["buffer_replayed"], (r["step"], r["kind"])
        assert r["warm_started"] == (r["step"] > 1)
        assert r["iterations"]["capped"] <= 1


def test_no_step_descends_further_than_the_converged_one(capped):
    for r in capped["points"]:
        for name in ("capped", "converged_cold"):
            assert max(r["objective_ratio"][name]) <= 1 + 1e-6, (r["step"], r["kind"], name)
        # the same convex problem from either start: one optimum
        assert min(r["objective_ratio"]["converged_cold"]) >= 1 - 1e-6


def test_residuals_and_norms_are_as_stated(capped):
    for r in capped["points"]:
        res, it = r["residual"], r["iterations"]
        # converged: the solver's own tolerance, exactly, on frames orthonormal to float64 rounding
        assert max(res["converged"] + res["converged_cold"]) <= 1e-6
        assert it["converged"] < 100 and it["converged_cold"] < 100
        if it["uncapped"] < 20:  # it stopped because it met its tolerance
            assert max(res["uncapped"]) <= 1e-3
        # ||A||_2 = eta sigma / sqrt(sigma^2 + 1e-6) for every singular value sigma of the scaled gradient
        assert all(1 - 1e-4 <= v <= 1 + 1e-12 for n in load().SOLVES for v in r["spectral_over_eta"][n])
        if r["kind"] == "attn.c_proj":  # square: Sigma = 0 is the answer, no update, no loss
            assert it["capped"] == it["converged"] == 0
            assert max(res["capped"]) < 1e-9 and min(r["objective_ratio"]["capped"]) == pytest.approx(1, abs=1e-12)
        else:  # one update leaves the step well off the tangent space, and short of the optimum
            assert min(res["capped"]) > 1e-3 and max(r["objective_ratio"]["capped"]) < 1 - 1e-4
            assert min(r["angle_capped_converged_deg"]) > 0.1


def test_a_large_enough_cap_gives_the_converged_step(corpus_slice, tmp_path):
    record = run(corpus_slice, tmp_path, "--max_iter", "100", "--tol", "1e-5")
    for r in record["points"]:
        assert r["iterations"]["capped"] < 100
        assert all(abs(v - 1) <= 1e-6 for v in r["objective_ratio"]["capped"] + r["moved_ratio"]["capped"])
        assert max(r["residual"]["capped"]) <= 1e-5 and max(r["angle_capped_converged_deg"]) < 0.1


@pytest.mark.parametrize("argv", [["--steps", "3", "--capture", "5"], ["--capture", "0"], ["--max_iter", "-1"]])
def test_the_command_line_refuses_what_it_cannot_run(argv, capsys):
    with pytest.raises(SystemExit):
        load().main(argv)
    assert "error" in capsys.readouterr().err
