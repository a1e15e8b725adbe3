"""Reading the language-model study's results: known answers on constructed payloads, and the setup's numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stiefel_mini.experiments.config import replace
from stiefel_mini.experiments.lm import results as lm_results
from stiefel_mini.experiments.lm.config import PRESETS
from stiefel_mini.experiments.lm.model import build_model
from stiefel_mini.experiments.lm.plans import DEFAULTS, plan
from stiefel_mini.experiments.lm.studies import ROUND1, ROUND2, ROUND3, ROUND4


def _run(arm, phase, seed, val_bpb, curve=(3.0, 2.0), diverged_at=None, **lr):
    return {"arm": arm, "phase": phase, "seed": seed, "val_bpb": val_bpb, "diverged_at": diverged_at,
            "lr": 2e-3, "frame_lr": 0.03, "muon_lr": 0.02, **lr,
            "history": {"tokens": [0, 100], "val_bpb": list(curve)},
            "samples": [{"prompt": "We", "text": f" {arm}"}]}


@pytest.fixture
def payload():
    return {"runs": [
        _run("adamw", "sweep", 100, 1.7, lr=2e-3), _run("adamw", "sweep", 100, 1.5, lr=1e-3),
        _run("stiefel", "sweep", 100, 1.6, frame_lr=0.1),
        _run("adamw", "seeds", 0, 1.6, curve=(3.0, 1.0)), _run("adamw", "seeds", 1, 1.7, curve=(2.0, 2.0)),
        _run("adamw", "seeds", 2, 1.9, curve=(4.0, 3.0)), _run("adamw", "seeds", 3, math.inf, diverged_at=5),
        _run("stiefel", "seeds", 1, 1.5),
    ]}


def test_sweep_rows_are_in_study_order_then_by_value(payload):
    rows = lm_results.sweep_rows(payload)
    assert [(r["arm"], r["swept"], r["value"], r["val_bpb"]) for r in rows] == [
        ("adamw", "lr", 1e-3, 1.5), ("adamw", "lr", 2e-3, 1.7), ("stiefel", "frame_lr", 0.1, 1.6)]
    assert lm_results.sweep_rows(None) == []


def test_seed_runs_keeps_one_arms_paired_runs(payload):
    assert sorted(lm_results.seed_runs(payload, "adamw")) == [0, 1, 2, 3]
    assert list(lm_results.seed_runs(payload, "stiefel")) == [1]
    with pytest.raises(ValueError, match="unknown arm"):
        lm_results.seed_runs(payload, "sgd")


def test_curve_band_is_the_median_and_range_without_diverged_runs(payload):
    band = lm_results.curve_band(lm_results.seed_runs(payload, "adamw"))
    np.testing.assert_array_equal(band["median"], [3.0, 2.0])
    np.testing.assert_array_equal(band["low"], [2.0, 1.0])
    np.testing.assert_array_equal(band["high"], [4.0, 3.0])
    assert lm_results.curve_band({}) is None


def test_samples_come_from_each_arms_seed(payload):
    assert lm_results.samples(payload) == {"adamw": [{"prompt": "We", "text": " adamw"}]}
    assert set(lm_results.samples(payload, seed=1)) == {"adamw", "stiefel"}


def test_progress_counts_counts_each_phase(payload):
    counts = lm_results.progress_counts(payload)
    assert (counts["sweep"], counts["seeds"]) == (3, 5)
    assert counts["remaining"] > 0


def _stands(name, *pairs):
    return {"name": name, "stands_for": [{"study": s, "arm": a, "recipe": name, "point": {}} for s, a in pairs]}


def test_throughput_rows_are_best_rates_and_paired_ratios_to_the_one_baseline():
    record = {"baseline": "adamw",
              "arms": [_stands("adamw", (1, "adamw"), (2, "adamw")), _stands("r1_muon", (1, "muon")),
                       _stands("r2_muon", (2, "muon"))],
              "timing": [{"threads": t, "tokens_per_step": 100,
                          "seconds_per_step": {"adamw": [1.0, 2.0, 1.0], "r1_muon": [2.0, 2.0, 3.0],
                                               "r2_muon": [t * 1.0, 4.0, t * 1.0]}} for t in (1, 2)]}
    rows = lm_results.throughput_rows(record)
    assert [(r["threads"], r["arm"], r["tokens_per_s"]) for r in rows] == [
        (1, "adamw", 100.0), (1, "r1_muon", 50.0), (1, "r2_muon", 100.0),
        (2, "adamw", 100.0), (2, "r1_muon", 50.0), (2, "r2_muon", 50.0)]
    muon = rows[1]
    assert (muon["ratio"], muon["low"], muon["high"]) == (2.0, 1.0, 3.0)  # per round 2, 1, 3
    assert rows[0]["stands_for"] == {1: "adamw", 2: "adamw"}
    # each study's arms read the timed arm they stand for: one AdamW for both
    assert {a: r["arm"] for a, r in lm_results.arm_costs(record, 2).items()} == {"adamw": "adamw", "muon": "r2_muon"}
    assert lm_results.arm_costs(record, 1, threads=2)["muon"]["ratio"] == 2.0
    assert lm_results.arm_costs(record, 4) == {}
    assert lm_results.throughput_rows(None) == [] and lm_results.arm_costs(None, 1) == {}


def test_the_stored_benchmark_times_every_studys_arms_against_one_adamw():
    record = lm_results.load_throughput()
    if record is None:
        pytest.skip("this copy of the results has no language-model benchmark record")
    rows = lm_results.throughput_rows(record)
    threads = sorted({r["threads"] for r in rows})
    adamw = [r for r in rows if r["arm"] == record["baseline"]]
    assert [r["threads"] for r in adamw] == threads and all(r["ratio"] == 1.0 for r in adamw)
    assert record["settings"]["study"] == [1, 2, 4]  # the chapters read these studies' arms
    for study, declared in ((1, ROUND1), (2, ROUND2), (4, ROUND4)):
        for t in threads:
            costs = lm_results.arm_costs(record, study, threads=t)
            assert sorted(costs) == sorted(a for a, _ in declared.arms)
            assert costs["adamw"]["arm"] == record["baseline"]
    assert record["load"]["cores"] >= 1


def test_setup_facts_follow_from_the_config_and_the_tokenizer():
    cfg = PRESETS["cpu"]
    f = lm_results.setup_facts(cfg)
    assert f["tokens"] == cfg.steps * cfg.batch_size * cfg.model.context
    assert f["params"] == sum(p.numel() for p in build_model(cfg).parameters())
    assert f["uniform_bpb"] == pytest.approx(math.log2(cfg.model.vocab_size) / f["bytes_per_token"])
    assert 3 < f["bytes_per_token"] < 5 and 0 < f["passes"] < 1
    assert f["seeds"] == ROUND1.paired_seeds and f["head_size"] * f["heads"] == f["width"]
    assert f["val_years"][0] >= f["years"][0] and f["test_years"][1] <= f["years"][1]


def test_setup_facts_refuse_a_vocabulary_the_tokenizer_does_not_have():
    with pytest.raises(ValueError, match="vocab_size"):
        lm_results.setup_facts(replace(PRESETS["cpu"], vocab_size=4096))


def test_the_tokenizers_record_counts_the_corpus_splits():
    from stiefel_mini.experiments.lm import data as lm_data
    from stiefel_mini.experiments.records import load_results
    from stiefel_mini.resources import results_path

    meta = load_results(results_path(lm_results.TOKENIZER_META))
    names = lm_data.split_addresses(lm_data.addresses())
    assert meta["addresses"] == {k: len(v) for k, v in names.items()}
    assert meta["years"] == {k: [int(v[0][:4]), int(v[-1][:4])] for k, v in names.items()}


def test_difference_band_pairs_seeds_and_leaves_out_diverged_runs(payload):
    adamw = lm_results.seed_runs(payload, "adamw")
    other = {s: {**r, "history": {"tokens": [0, 100], "val_bpb": [v - 0.5 for v in r["history"]["val_bpb"]]}}
             for s, r in adamw.items()}
    band = lm_results.difference_band(other, adamw)
    assert band["n"] == 3  # seed 3 diverged in the baseline
    np.testing.assert_allclose(band["median"], [-0.5, -0.5])
    np.testing.assert_allclose(band["low"], band["high"])
    assert lm_results.difference_band(lm_results.seed_runs(payload, "stiefel"), {}) is None


def _r2(arm, seed, val_bpb, phase="sweep", steps=800, **fields):
    return {"arm": arm, "seed": seed, "phase": phase, "steps": steps, "val_bpb": val_bpb,
            **{k: (fields[k] if k in fields else DEFAULTS[k]) if k in ROUND2.uses(arm) else None
               for k in ROUND2.fields}}


def test_round2_sweep_rows_average_each_setting_over_its_seeds_in_plan_order():
    runs = [_r2("stiefel", 100, 1.6, frame_lr=0.1, max_step=0.3), _r2("adamw", 101, 1.8, lr=2e-3, warmup_frac=0.05),
            _r2("adamw", 100, 1.6, lr=2e-3, warmup_frac=0.05), _r2("adamw", 100, 1.5, lr=1e-3, warmup_frac=0.25),
            _r2("adamw", 100, None, lr=4e-3, warmup_frac=0.05), _r2("adamw", 101, 1.9, lr=4e-3, warmup_frac=0.05)]
    rows = lm_results.round2_sweep_rows({"runs": runs})
    got = [(r["arm"], tuple(r["setting"].values()), r["val_bpb"], r["n"]) for r in rows]
    assert got == [("adamw", (1e-3, 0.25), 1.5, 1), ("adamw", (2e-3, 0.05), pytest.approx(1.7), 2),
                   ("adamw", (4e-3, 0.05), None, 2), ("stiefel", (0.1, 0.3), 1.6, 1)]
    assert lm_results.round2_sweep_rows(None) == []


def test_round2_progress_counts_phases_and_the_work_left():
    budget = 60 + 96 + 2 * (3 + 8) * 3  # sweeps, paired runs, two long arms' checks and runs (3x as long)
    empty = lm_results.round2_progress(None)
    assert empty["finished"] == {} and empty["done"] == 0 and empty["remaining"] == pytest.approx(budget)
    runs = [_r2("adamw", s, 1.7, lr=1e-3, warmup_frac=0.05) for s in (100, 101)]
    runs.append(_r2("stiefel", 100, 1.6, phase="check", steps=2400, frame_lr=0.1, max_step=0.3))
    got = lm_results.round2_progress({"runs": runs})
    assert got["finished"] == {"sweep": 2, "check": 1} and got["done"] == pytest.approx(5.0)
    assert got["remaining"] == pytest.approx(budget - 2)  # the check is not one the plan asks for yet
    assert got["best"] == {} and got["better"] == {}


def test_the_progress_sentence_says_finished_only_when_nothing_is_left():
    going = {"finished": {"sweep": 8, "long": 2}, "done": 14.0, "remaining": 6.0}
    assert lm_results.progress_sentence(going) == (
        "Finished so far: 8 sweep runs, 2 long runs, about 70% of its training.")
    assert lm_results.progress_sentence({"finished": {}, "done": 0, "remaining": 48.0}) == (
        "Finished so far: no run, about 0% of its training.")
    done = {"finished": {"sweep": 16, "paired": 32}, "done": 48.0, "remaining": 0}
    assert lm_results.progress_sentence(done) == (
        "All 48 of its runs have finished: 16 sweep runs, 32 runs on the paired seeds.")


def test_round2_runs_are_a_phases_runs_or_the_sweep_at_the_arms_best():
    grid = [(lr, wu) for lr in (1e-3, 2e-3, 4e-3) for wu in (0.05, 0.25)]
    score = {(2e-3, 0.25): 1.5}  # the best, inside the lr axis, so the grid does not grow
    runs = [_r2("adamw", s, score.get(g, 1.8) + s / 1e4, lr=g[0], warmup_frac=g[1]) for g in grid for s in (100, 101)]
    runs += [_r2("adamw", 3, 1.6, phase="paired", lr=2e-3, warmup_frac=0.25),
             _r2("stiefel", 3, 1.6, phase="paired"), _r2("adamw", 0, 1.4, phase="long", steps=2400)]
    swept = lm_results.round2_runs({"runs": runs}, "adamw", "sweep")
    assert sorted(swept) == [100, 101] and {(r["lr"], r["warmup_frac"]) for r in swept.values()} == {(2e-3, 0.25)}
    assert list(lm_results.round2_runs({"runs": runs}, "adamw")) == [3]
    assert list(lm_results.round2_runs({"runs": runs}, "adamw", "long")) == [0]
    assert lm_results.round2_runs({"runs": runs[:5]}, "adamw", "sweep") == {}  # the grid is not complete
    assert lm_results.round2_runs(None, "stiefel_muon") == {}
    with pytest.raises(ValueError, match="unknown arm"):
        lm_results.round2_runs({"runs": runs}, "frozen")
    with pytest.raises(ValueError, match="phase must be"):
        lm_results.round2_runs({"runs": runs}, "adamw", "check")


def test_curve_band_reads_any_metric_of_the_history_and_names_the_missing_one(payload):
    runs = {s: {**r, "history": {**r["history"], "max_logit": [1.0, 10.0 * (s + 1)]}}
            for s, r in lm_results.seed_runs(payload, "adamw").items()}
    band = lm_results.curve_band(runs, "max_logit")
    np.testing.assert_allclose(band["median"], [1.0, 20.0])  # seeds 0-2; seed 3 diverged
    np.testing.assert_allclose(band["high"], [1.0, 30.0])
    with pytest.raises(ValueError, match="'min_entropy' is not in"):
        lm_results.curve_band(runs, "min_entropy")


def test_sharpness_reads_medians_over_seeds_and_bounds_only_a_learned_scale_at_its_own_lr():
    from stiefel_mini.experiments.lm.attention import uniform_entropy
    from stiefel_mini.experiments.lm.model import scale_growth_bound

    def run(arm, seed, logits, entropy, diverged_at=None, **extra):
        r = _r2(arm, seed, 1.6, phase="paired", lr=1e-3, warmup_frac=0.25)
        return {**r, "diverged_at": diverged_at, "logit_scale": "learned" if arm == "stiefel" else None,
                "history": {"max_logit": logits, "min_entropy": [3.9, entropy]}, **extra}
    runs = [run("stiefel", 0, [0.5, 1.0], 3.8), run("stiefel", 1, [0.5, 2.0], 3.7), run("stiefel", 2, [0.4, 2.0], 3.0),
            run("stiefel", 3, [0.5, 50.0], 0.1, diverged_at=700), run("adamw", 0, [0.5, 15.0], 2.0)]
    s = lm_results.sharpness(lm_results.round2_runs({"runs": runs}, "stiefel"))
    assert s["n"] == 3 and s["growth"] == pytest.approx(4.0) and s["entropy"] == pytest.approx(3.7)  # seed 3 left out
    assert s["uniform"] == pytest.approx(uniform_entropy(PRESETS["cpu"].model.context))
    final = PRESETS["cpu"].optimizer.final_lr_frac
    assert s["bound"] == pytest.approx(scale_growth_bound(800, 1e-3, 0.25, final))
    a = lm_results.sharpness(lm_results.round2_runs({"runs": runs}, "adamw"))
    assert (a["n"], a["growth"], a["bound"]) == (1, pytest.approx(30.0), None)
    assert lm_results.sharpness({}) is None
    own = lm_results.sharpness({0: run("stiefel", 0, [0.5, 1.0], 3.8, scale_lr=0.1)})
    assert own["bound"] == pytest.approx(scale_growth_bound(800, 0.1, 0.25, final))  # the scale's own lr


def test_round3_progress_and_runs_read_its_sweep_and_its_paired_seeds():
    sweep = [{**p, "val_bpb": 1.6 + 0.01 * (p["scale_lr"] != 0.3) + 1e-3 * (p["seed"] == 101)}
             for p in plan(ROUND3, []).ready if p["arm"] == "stiefel_scale"]
    assert lm_results.round3_runs({"runs": sweep[:-1]}, "stiefel_scale", "sweep") == {}  # not complete yet
    paired = [{**p, "val_bpb": 1.55} for p in plan(ROUND3, sweep).ready if p["phase"] == "paired"][:3]
    payload = {"runs": sweep + paired}
    got = lm_results.round3_progress(payload)
    assert got["finished"] == {"sweep": 8, "paired": 3} and got["best"]["stiefel_scale"]["scale_lr"] == 0.3
    assert got["sweep"]["stiefel_scale"][2] == (0.3, pytest.approx(1.6005), 2)
    assert got["remaining"] == plan(ROUND3, payload["runs"]).remaining
    assert sorted(lm_results.round3_runs(payload, "stiefel_scale")) == [0, 1, 2]
    assert {r["scale_lr"] for r in lm_results.round3_runs(payload, "stiefel_scale", "sweep").values()} == {0.3}
    assert lm_results.round3_progress(None) == {"finished": {}, "done": 0, "remaining": 48.0, "best": {}, "sweep": {}}
    assert got["done"] == 11  # 11 runs of the study's 800 steps
    with pytest.raises(ValueError, match="unknown arm"):
        lm_results.round3_runs(payload, "stiefel")


def test_chosen_settings_are_each_arms_best_with_the_shared_settings():
    sweep = [{**p, "val_bpb": 1.6 + 0.01 * (p["scale_lr"] != 0.1)} for p in plan(ROUND3, []).ready]
    base = {"betas": [0.9, 0.95], "weight_decay": 0.1, "momentum": 0.95, "final_lr_frac": 0.1, "grad_clip": 1.0,
            "steps": 800, "lr": 9.0}  # the base lr is not the chosen one
    got = lm_results.chosen_settings({"base_config": base, "runs": sweep})
    assert set(got) == {"stiefel_scale", "stiefel_muon_scale"}
    assert got["stiefel_scale"] == {**dict(ROUND3.tunings[0].start), "scale_lr": 0.1, "betas": (0.9, 0.95),
                                    "weight_decay": 0.1, "momentum": 0.95, "final_lr_frac": 0.1, "grad_clip": 1.0,
                                    "steps": 800}
    assert got["stiefel_muon_scale"]["muon_lr"] == dict(ROUND3.tunings[1].start)["muon_lr"]
    one = [r for r in sweep if r["arm"] == "stiefel_scale"]  # the other arm's sweep not run yet
    assert set(lm_results.chosen_settings({"base_config": base, "runs": one})) == {"stiefel_scale"}
    assert lm_results.chosen_settings(None) == {}


def test_chosen_settings_of_the_fourth_study_are_each_long_arms_settings_once_it_has_a_long_run():
    from stiefel_mini.resources import CHECKOUT_RESULTS
    from tests.test_claims_lm4 import complete_runs4

    payload = lm_results.load_round4()
    template = next(r for r in payload["runs"] if r["arm"] == "adamw")
    runs = complete_runs4(template)
    state = plan(ROUND4, runs)
    got = lm_results.chosen_settings({"base_config": payload["base_config"], "runs": runs}, ROUND4)
    assert set(got) == {"stiefel", "adamw_qknorm", "stiefel_muon", "muon", "all_stiefel"} == set(state.long_best)
    for arm, s in got.items():
        long = [r for r in runs if r["arm"] == arm and r["phase"] == "long"]
        assert s == {**state.long_best[arm], "betas": (0.9, 0.95), "weight_decay": 0.1, "momentum": 0.95,
                     "final_lr_frac": 0.1, "grad_clip": 1.0, "steps": 2400}
        assert all(r[k] == v for r in long for k, v in state.long_best[arm].items())
    without = [r for r in runs if not (r["arm"] == "stiefel" and r["phase"] == "long")]
    assert "stiefel" not in lm_results.chosen_settings({"base_config": payload["base_config"], "runs": without},
                                                       ROUND4)
    assert (CHECKOUT_RESULTS / lm_results.ROUND4_FILE).is_file()


def test_settings_text_names_each_setting_an_arm_has_in_one_order():
    s = {"scale_lr": 0.1, "lr": 0.002, "max_step": 1.0, "warmup_frac": 0.25, "frame_lr": 0.3, "muon_lr": None}
    assert lm_results.settings_text(s) == "lr 0.002, warm-up 25%, frame lr 0.3, trust cap 1, scale lr 0.1"
    assert lm_results.settings_text({"max_iter": 1, "lr": 0.004}) == "lr 0.004, solver updates per step 1"


@pytest.mark.parametrize("median, side, at", [
    ([0.1, -0.1, 0.05, -0.02, -0.03], -1, 3.0),  # below from the fourth evaluation on
    ([-0.1, -0.1, -0.05, -0.02, -0.03], -1, 0.0),  # below throughout
    ([-0.1, 0.2, 0.05, 0.02, 0.03], 1, 1.0),  # above from the second
    ([-0.1, 0.2, 0.05, 0.02, 0.0], 0, 4.0),  # level at the end: the last evaluation
])
def test_settled_at_is_where_the_median_took_the_side_it_ends_on(median, side, at):
    band = {"tokens": np.arange(5) * 1e6, "median": np.array(median)}
    assert lm_results.settled_at(band) == {"side": side, "tokens": at * 1e6}


def test_the_chapter_leads_with_the_fourth_study_once_stiefel_adam_meets_the_better_adamw_on_a_long_seed():
    from tests.test_claims_lm4 import complete_runs4

    payload = lm_results.load_round4()
    runs = complete_runs4(next(r for r in payload["runs"] if r["arm"] == "adamw"))
    assert lm_results.lead_study({"runs": runs}) == 4
    sweeps = [r for r in runs if r["phase"] != "long"]
    one = [r for r in runs if r["phase"] == "long" and r["seed"] == 16]
    assert lm_results.lead_study({"runs": sweeps}) == 2  # no long run yet
    # StiefelAdam on seed 16, the better AdamW (with QK-norm) only on seed 17: no pair yet
    unpaired = [r for r in runs if r["phase"] == "long" and ((r["arm"] == "stiefel") == (r["seed"] == 16))]
    assert lm_results.lead_study({"runs": sweeps + unpaired}) == 2
    assert lm_results.lead_study({"runs": sweeps + one}) == 4
    assert lm_results.lead_study({"runs": []}) == 2
