"""The benchmark scripts run and print the tables their README quotes (tiny sizes; no timing is checked)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
import torch
from torch.optim import optimizer as torch_optimizer

from stiefel_mini.experiments import stats

ROOT = Path(__file__).resolve().parents[1]


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_paired_ratio_is_the_median_of_per_round_ratios_with_its_range():
    # Per-round ratios 2.0, 1.5, 1.2: the median is 1.5, whatever the best times are (1 and 2 here
    # would give 2.0).
    assert stats.paired_ratio_text([2.0, 3.0, 6.0], [1.0, 2.0, 5.0]) == "1.50x (1.20-2.00)"


def test_optimizer_step_table_drift_and_results_file(capsys, tmp_path):
    bench = load("optimizer_step")
    out_file = tmp_path / "step.json"
    bench.main(["--widths", "32", "--depth", "1", "--heads", "2", "--rounds", "2", "--steps", "1",
                "--drift-steps", "20", "--no-others", "--threads", "1", "--out", str(out_file)])
    out = capsys.readouterr().out
    assert ("| width | AdamW | StiefelAdam | floor | floor+series | StiefelAdam / floor | "
            "StiefelAdam / floor+series |") in out
    row = next(line for line in out.splitlines() if line.startswith("| 32 |"))
    assert re.search(r"\| \d+\.\d\dx \(\d+\.\d\d-\d+\.\d\d\) \|$", row), row
    drift = next(line for line in out.splitlines() if line.startswith("| StiefelAdam |"))
    assert all(float(cell) < 1e-5 for cell in drift.split("|")[2:4])
    record = json.loads(out_file.read_text())
    assert record["provenance"]["git_commit"] and record["settings"]["threads"] == 1
    (timing,) = record["timing"]
    assert timing["width"] == 32 and sorted(timing["seconds_per_step"]) == ["AdamW", "StiefelAdam", "floor", "floor+series"]
    assert all(len(t) == 2 and min(t) > 0 for t in timing["seconds_per_step"].values())
    assert [r["optimizer"] for r in record["drift"]["rows"]] == ["StiefelAdam"]
    assert record["drift"]["frames"] == [4, 32, 16]


def test_optimizer_step_times_an_older_stiefel_adam_beside_this_one(capsys, tmp_path):
    bench = load("optimizer_step")
    out_file = tmp_path / "step.json"
    hooks = (torch_optimizer._global_optimizer_pre_hooks, torch_optimizer._global_optimizer_post_hooks)
    before = [list(h) for h in hooks]
    bench.main(["--widths", "16", "--depth", "1", "--heads", "2", "--rounds", "2", "--steps", "1",
                "--drift-steps", "5", "--no-others", "--threads", "1", "--baseline", "HEAD", "--out", str(out_file)])
    # the copy's frames' guard does not stay registered, judging this checkout's StiefelAdam by its classes
    assert [list(h) for h in hooks] == before
    (name,) = bench.BASELINES
    assert re.fullmatch(r"StiefelAdam@[0-9a-f]{7}", name)
    assert bench.BASELINES[name].__name__ != "stiefel_mini.optim"  # that commit's module, not this checkout's
    out = capsys.readouterr().out
    assert f"| {name} / floor | {name} / floor+series | StiefelAdam / {name} |" in out
    record = json.loads(out_file.read_text())
    assert sorted(record["timing"][0]["seconds_per_step"]) == sorted(["AdamW", "StiefelAdam", name, "floor", "floor+series"])
    assert sorted(record["timing"][0]["cpu_seconds_per_step"]) == sorted(record["timing"][0]["seconds_per_step"])
    assert [r["optimizer"] for r in record["drift"]["rows"]] == ["StiefelAdam"]  # the drift of this checkout's only
    assert record["load"]["process_cores"] > 0 and record["settings"]["baseline"] == ["HEAD"]
    bench.BASELINES.clear()
    with pytest.raises(SystemExit, match="not a commit"):
        bench.main(["--baseline", "no-such-commit", "--no-others"])


def test_optimizer_step_leaves_geoopt_out_where_torch_solves_its_systems_wrongly(capsys, monkeypatch, tmp_path):
    pytest.importorskip("geoopt")
    bench = load("optimizer_step")
    assert bench.solve_fault([16], "cpu") is None  # small systems are solved right at any thread count
    wrong = lambda A, b: torch.zeros_like(b)  # noqa: E731
    monkeypatch.setattr(torch.linalg, "solve", wrong)
    why = bench.solve_fault([16], "cpu")
    assert "relative residual of 1.0e+00 on 16 x 16 systems" in why and "--threads 1" in why
    out_file = tmp_path / "step.json"
    threads = torch.get_num_threads()
    try:  # the run's reason names its thread count: the one --threads sets
        bench.main(["--widths", "16", "--depth", "1", "--heads", "2", "--rounds", "1", "--steps", "1",
                    "--drift-steps", "0", "--threads", "1", "--out", str(out_file)])
        assert "the geoopt column is left out: torch" in capsys.readouterr().out
        record = json.loads(out_file.read_text())
        assert "geoopt" not in record["timing"][0]["seconds_per_step"]
        assert record["left_out"]["geoopt"] == bench.solve_fault([16], "cpu")  # at the run's 1 thread
        assert "at 1 thread(s)" in record["left_out"]["geoopt"]
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("bad", [["--widths", "30", "--heads", "4"]])
def test_optimizer_step_rejects_widths_the_heads_do_not_divide(bad):
    bench = load("optimizer_step")
    with pytest.raises(SystemExit):
        bench.main([*bad, "--no-others", "--drift-steps", "0"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_optimizer_step_floor_with_series_takes_every_product_the_frame_rule_takes(dtype):
    from torch.utils._python_dispatch import TorchDispatchMode

    bench = load("optimizer_step")

    class Products(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.count += func.overloadpacket.__name__ in ("bmm", "baddbmm", "baddbmm_", "mm", "addmm", "addmm_")
            return func(*args, **(kwargs or {}))

    model = bench.make_model(32, 1, 2, dtype=dtype)
    floor = bench.SeriesFloor(model)
    opt = bench.build("StiefelAdam", model)
    opt.step()  # the first step sets up the state (its frame check takes products of its own)
    with Products() as rule:
        opt.step()
    assert rule.count == 5 + floor.products, (rule.count, floor.products)


def test_gram_precision_table(capsys):
    bench = load("gram_precision")
    bench.main(["--steps", "30", "--rounds", "1"])
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line.split("|")[2:5] for line in out.splitlines()
            if line.startswith("| float")}
    assert sorted(rows) == ["float32", "float64 Gram"]
    # With the Gram matrix in float64 what is left is the rounding of the product M Z.
    assert float(rows["float64 Gram"][0]) < 1e-6
    assert all(float(cell) < 1e-5 for cells in rows.values() for cell in cells[:2])
    assert "float64 Gram / float32 time per retraction" in out


def test_gram_precision_rejects_a_step_the_series_cannot_take():
    with pytest.raises(SystemExit):
        load("gram_precision").main(["--length", "0.9"])


def test_hf_step_table_and_results_file(capsys, tmp_path):
    pytest.importorskip("timm")
    pytest.importorskip("transformers")
    bench = load("hf_step")
    out_file = tmp_path / "hf.json"
    bench.main(["--width", "16", "--depth", "1", "--heads", "2", "--rounds", "2", "--steps", "1",
                "--threads", "1", "--out", str(out_file)])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("| gpt2 |", "| vit |"))]
    assert len(rows) == 2
    assert all(re.search(r"\| \d+\.\d\dx \(\d+\.\d\d-\d+\.\d\d\) \|$", row) for row in rows), rows
    record = json.loads(out_file.read_text())
    assert [t["model"] for t in record["timing"]] == ["gpt2", "vit"]
    assert all(sorted(t["seconds_per_step"]) == sorted(bench.ARMS) for t in record["timing"])
    assert sorted(record["packages"]) == ["timm", "transformers"]


def test_lm_throughput_times_every_requested_studys_arms_against_one_adamw(capsys, tmp_path):
    bench = load("lm_throughput")
    out_file = tmp_path / "lm.json"
    bench.main(["--study", "4", "1", "2", "--per_head", "--d_model", "32", "--n_layer", "1", "--batch_size", "2",
                "--rounds", "1", "--steps", "1", "--threads", "1", "--out", str(out_file)])
    record = json.loads(out_file.read_text())
    names = [a["name"] for a in record["arms"]]
    # the three studies' AdamW arms are one computation, timed once and first; every other arm its own
    assert names == ["adamw", "r1_frozen", "r1_stiefel", "r1_muon", "r1_muon_stiefel", "r2_adamw_qknorm",
                     "r2_stiefel", "r2_muon", "r2_muon_qknorm", "r2_stiefel_muon", "adamw_qknorm", "muon",
                     "muon_qknorm", "stiefel", "stiefel_muon", "all_stiefel"]
    assert record["baseline"] == "adamw"
    assert [(e["study"], e["arm"], e["recipe"]) for e in record["arms"][0]["stands_for"]] == [
        (1, "adamw", "r1_adamw"), (2, "adamw", "r2_adamw"), (4, "adamw", "adamw")]
    stood_for = sorted((e["study"], e["arm"]) for a in record["arms"] for e in a["stands_for"])
    assert stood_for == sorted((s, a) for s in (1, 2, 4) for a, _ in bench.STUDIES[s].arms)
    points = {(e["study"], e["arm"]): e["point"] for a in record["arms"] for e in a["stands_for"]}
    assert all(points[2, a]["per_head"] is True for a in ("muon", "muon_qknorm", "stiefel_muon"))
    assert points[4, "all_stiefel"]["max_iter"] == 1
    assert [list(t["seconds_per_step"]) for t in record["timing"]] == [names]
    assert record["load"]["cores"] >= 1 and record["settings"]["study"] == [1, 2, 4]
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if re.match(r"\| [a-z0-9_]+ \| \d: ", line)]
    assert len(rows) == len(names) and rows[0].startswith("| adamw | 1: adamw, 2: adamw, 4: adamw |"), rows
    assert all(re.search(r"\| \d+\.\d\dx \(\d+\.\d\d-\d+\.\d\d\) \|$", row) for row in rows), rows


def test_lm_throughput_arms_picks_those_arms_of_every_requested_study(tmp_path):
    out_file = tmp_path / "lm.json"
    load("lm_throughput").main(["--study", "1", "4", "--arms", "adamw", "stiefel", "--d_model", "32", "--n_layer", "1",
                                "--batch_size", "2", "--rounds", "2", "--steps", "1", "--threads", "1",
                                "--out", str(out_file)])
    record = json.loads(out_file.read_text())
    assert {a["name"]: [(e["study"], e["arm"]) for e in a["stands_for"]] for a in record["arms"]} == {
        "adamw": [(1, "adamw"), (4, "adamw")], "r1_stiefel": [(1, "stiefel")], "stiefel": [(4, "stiefel")]}
    assert all(len(t) == 2 for t in record["timing"][0]["seconds_per_step"].values())


@pytest.mark.parametrize("argv, message", [
    (["--arms", "stiefel", "muon"], "must include adamw"),
    (["--study", "3"], "the third study has no AdamW arm"),
    (["--study", "2", "--arms", "adamw", "frozen"], "not arms of study 2"),
    (["--study", "1", "4", "--per_head"], "add --study 2"),
])
def test_lm_throughput_refuses_what_it_cannot_time(argv, message, capsys):
    with pytest.raises(SystemExit):
        load("lm_throughput").main(argv)
    assert message in capsys.readouterr().err


def test_muon_step_table_and_results_file(capsys, tmp_path):
    bench = load("muon_step")
    out_file = tmp_path / "muon.json"
    bench.main(["--layers", "1", "--width", "32", "--heads", "2", "--context", "16", "--batch", "2", "--train_steps", "3",
                "--rounds", "2", "--ns_size", "32", "--model_layers", "1", "--model_width", "32", "--model_heads", "2",
                "--model_vocab", "50", "--model_rounds", "2", "--threads", "1", "--out", str(out_file)])
    rows = [line for line in capsys.readouterr().out.splitlines() if re.match(r"\| \d", line)]
    assert len(rows) == 2 and re.search(r"\| \d+\.\d\dx \(\d+\.\d\d-\d+\.\d\d\) \| (0\.9\d+|1\.0\d+),", rows[0]), rows
    assert re.search(r"\| \d+\.\d\dx \(\d+\.\d\d-\d+\.\d\d\) \|$", rows[1]), rows  # StiefelMuon / torch
    record = json.loads(out_file.read_text())
    f = record["frame_rule"]
    assert len(f["iterations_warm"]) == len(f["iterations_cold"]) == 2
    assert f["objective_over_converged"]["min"] > 0.99  # the warm-started step is the converged one
    assert f["tangency_max"] < 0.1 and record["training"]["frames"] == 2  # stated, converged or not (max_iter)
    assert set(record["whole_step"]) == {"converted", "unconverted"} and record["ns_precision"]["chosen"]


def test_fsdp_step_counts_every_ranks_cpu_as_the_benchmarks():
    rank = {"cores": 2, "loadavg_before": [1.0] * 3, "loadavg_after": [2.0] * 3, "seconds": 10.0,
            "other_niced_cores": 0.1}
    loads = [{**rank, "process_cores": 0.9, "other_cores": 1.0}, {**rank, "process_cores": 0.8, "other_cores": 1.1}]
    combined = load("fsdp_step").ranks_load(loads)
    # rank 0 saw rank 1's 0.8 cores as other work: 1.0 - 0.8 is what the rest of the machine used
    assert combined["process_cores"] == 1.7 and combined["other_cores"] == pytest.approx(0.2)
    assert combined["loadavg_after"] == [2.0] * 3
