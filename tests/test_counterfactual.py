"""The counterfactual copy of results/ (``counterfactual.py``): what it swaps, what it keeps."""

from __future__ import annotations

import json

import pytest

from counterfactual import swap_arms, swap_in
from stiefel_mini.resources import CHECKOUT_RESULTS


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_swaps_arm_fields_and_names_and_keeps_measurements(tmp_path):
    src = tmp_path / "results"
    runs = [{"arm": "A0", "arm_name": "adamw", "seed": 0, "lr": 3e-3, "frame_lr": None, "test_acc": 0.6},
            {"arm": "A1", "arm_name": "stiefel", "seed": 0, "lr": 3e-3, "frame_lr": 1.0, "test_acc": 0.7},
            {"arm": "A3", "arm_name": "frozen", "seed": 0, "test_acc": 0.5}]
    _write(src / "cifar" / "r.json", {"provenance": {"config": {"arm": "A1", "arms": ["A0", "A3"]}},
                                     "runs": runs, "repro": {"arm": "A0", "arm_name": "adamw"}})
    _write(src / "grokking" / "g.json", {"runs": [{"arm": "adamw"}]})
    (src / "README.md").write_text("notes")
    counts = swap_arms(src, tmp_path / "copy", {"cifar": ("A0", "A1")})
    assert counts == {"cifar": 1}
    out = json.loads((tmp_path / "copy" / "cifar" / "r.json").read_text())
    assert [(r["arm"], r["arm_name"], r["test_acc"], r.get("frame_lr")) for r in out["runs"]] == [
        ("A1", "stiefel", 0.6, None), ("A0", "adamw", 0.7, 1.0), ("A3", "frozen", 0.5, None)]
    assert out["provenance"]["config"] == {"arm": "A0", "arms": ["A1", "A3"]}
    assert out["repro"] == {"arm": "A1", "arm_name": "stiefel"}
    # Files of experiments not named, and other files, are copied unchanged.
    assert json.loads((tmp_path / "copy" / "grokking" / "g.json").read_text()) == {"runs": [{"arm": "adamw"}]}
    assert (tmp_path / "copy" / "README.md").read_text() == "notes"
    assert json.loads((src / "cifar" / "r.json").read_text())["runs"] == runs  # the source is untouched


def test_swapping_twice_gives_the_original():
    data = {"runs": [{"arm": "adamw", "seed": 1}, {"arm": "stiefel_learned", "seed": 1}],
            "sweep": {"arms": ["adamw", "stiefel_learned"], "repro_arm": "stiefel_learned"}}
    once = swap_in(data, ("adamw", "stiefel_learned"))
    assert once["sweep"] == {"arms": ["stiefel_learned", "adamw"], "repro_arm": "adamw"}
    assert swap_in(once, ("adamw", "stiefel_learned")) == data


def test_committed_results_swap_every_cifar_run(tmp_path):
    counts = swap_arms(CHECKOUT_RESULTS, tmp_path / "copy", {"cifar": ("A0", "A1")})
    assert counts["cifar"] == len(list((CHECKOUT_RESULTS / "cifar").glob("*.json")))
    before = json.loads((CHECKOUT_RESULTS / "cifar" / "r2_fitted.json").read_text())["runs"]
    after = json.loads((tmp_path / "copy" / "cifar" / "r2_fitted.json").read_text())["runs"]
    flip = {"A0": "A1", "A1": "A0"}
    assert [flip.get(r["arm"], r["arm"]) for r in before] == [r["arm"] for r in after]
    assert [r["test_acc"] for r in before] == [r["test_acc"] for r in after]


@pytest.mark.parametrize("swaps, problem", [({"nope": ("A0", "A1")}, "no folder"),
                                            ({"cifar": ("A0", "A0")}, "two different arms")])
def test_bad_input_names_the_problem(tmp_path, swaps, problem):
    src = tmp_path / "results"
    _write(src / "cifar" / "r.json", {"runs": []})
    with pytest.raises(ValueError, match=problem):
        swap_arms(src, tmp_path / "copy", swaps)
    with pytest.raises(ValueError, match="exists"):
        swap_arms(src, src, {})
