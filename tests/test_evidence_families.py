"""The round-2 primaries name a family's better arm (``adamw_family``, ``muon_family``): the evidence
layer pairs each with the arm the declared rule (:func:`stiefel_mini.experiments.lm.plans.better_arm`)
picked on the sweep seeds, and with no run before that arm is known."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from stiefel_mini.evidence.claims import LM2_CLAIMS
from stiefel_mini.evidence.measure import compute, family_arms
from stiefel_mini.experiments.lm.studies import ROUND2
from tests.experiments.lm.test_studies import _drive, _score

PRIMARY = {c.key: c.primaries[0][0] for c in LM2_CLAIMS}


def _write(root: Path, runs: list[dict]) -> None:
    path = root / "results" / "lm" / "round2.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    runs = [{**r, "test_bpb": r["val_bpb"] + 0.01, "started_utc": "2026-12-05T00:00:00+00:00"} for r in runs]
    path.write_text(json.dumps({"base_config": {"steps": 800, "batch_size": 16, "weight_decay": 0.1}, "runs": runs}))


@pytest.fixture(scope="module")
def runs() -> list[dict]:
    """Every sweep and paired run of the plan on the invented landscape of the plan's tests (there
    ``adamw_qknorm`` and ``muon`` are the better arms; stiefel 0.02 and stiefel_muon 0.01 below them)."""
    return _drive(ROUND2, _score, phases=("sweep", "paired"))


def test_a_family_is_its_better_arm_of_the_sweep_seeds(tmp_path, runs):
    _write(tmp_path, runs)
    adam, muon = PRIMARY["lm2_stiefel_adam"], PRIMARY["lm2_stiefel_muon"]
    assert family_arms(adam, tmp_path) == {"adamw_family": "adamw_qknorm"}
    assert family_arms(muon, tmp_path) == {"muon_family": "muon"}
    row = compute(adam, tmp_path)
    # stiefel (1.64) against adamw_qknorm (1.66), both at the centre of their grids, on seeds 0-15
    assert row["n"] == 16 and row["picked"] == {"adamw_family": "adamw_qknorm"}
    assert row["median"] == pytest.approx(-0.02) and row["wins"] == 16
    assert row["planned"] == 16  # the seeds the comparison declares, whether or not they have run
    _write(tmp_path, [r for r in runs if r["phase"] == "sweep" or r["seed"] < 6])
    assert (compute(adam, tmp_path)["n"], compute(adam, tmp_path)["planned"]) == (6, 16)
    _write(tmp_path, runs)
    assert compute(muon, tmp_path)["median"] == pytest.approx(-0.01)


def test_an_undecided_family_pairs_no_run(tmp_path, runs):
    sweeps = [r for r in runs if r["phase"] == "sweep" and r["arm"] != "adamw_qknorm"]
    _write(tmp_path, sweeps + [r for r in runs if r["phase"] == "paired"])
    row = compute(PRIMARY["lm2_stiefel_adam"], tmp_path)
    assert row["picked"] == {"adamw_family": "adamw_family"} and row["n"] == 0


def test_a_comparison_of_named_arms_picks_nothing():
    assert family_arms(LM2_CLAIMS[0].secondary[0]) == {}


def test_per_head_against_whole_muon_each_at_its_best_muon_lr(tmp_path, runs):
    comp = next(c for c in LM2_CLAIMS[0].secondary if c.label.startswith("muon per head"))
    _write(tmp_path, runs)
    row = compute(comp, tmp_path)
    # the landscape: both at muon lr 0.01 (of 0.005, 0.01, 0.02), per head 0.003 worse on each sweep seed
    assert row["n"] == 2 and row["median"] == pytest.approx(0.003) and row["chosen_here"]
    shifted = [{**r, "val_bpb": r["val_bpb"] - 0.02 * (r["muon_lr"] == 0.02)} if r["arm"] == "muon" and r["per_head"]
               else r for r in runs]  # per head's best moves to 0.02: 0.003 + 0.01 ln 2 - 0.02 against whole's
    _write(tmp_path, shifted)
    assert compute(comp, tmp_path)["median"] == pytest.approx(0.003 + 0.01 * math.log(2) - 0.02)
