"""Tests of the evidence layer: the paired row, Holm with Tarone's rule, the declared claims and their
verdict words, the CLI, the book's use of one verdict per claim, and stored metrics that recount."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
import scipy.stats

from stiefel_mini import evidence
from stiefel_mini.evidence.claims_lm4 import LM4_CLAIMS

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {"patch_size": 8, "d_model": 96, "depth": 3, "n_heads": 4, "epochs": 10, "steps": None,
            "batch_size": 128, "weight_decay": 0.05, "max_step": 0.1, "augment": False, "seeding": "streams",
            "lr": 3e-3, "frame_lr": 1.0}


def cifar_run(arm, seed, acc, frac=1.0, lr=3e-3, frame_lr=None, step=0.01):
    return {"arm": arm, "seed": seed, "train_fraction": frac, "lr": lr, "frame_lr": frame_lr, "test_acc": acc,
            "qk_step_mean": step, "n_train": round(50_000 * frac), "qk_drift": 0.1}


def write(root: Path, name: str, runs: list[dict], settings: dict = SETTINGS) -> None:
    path = root / "results" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"settings": settings, "runs": runs}))


# ----------------------------------------------------------------------------------------------------
# The paired row, against known answers (the tests it uses: tests/experiments/test_stats.py)
# ----------------------------------------------------------------------------------------------------


def test_paired_row_schema_direction_and_censoring():
    a = {0: 1.0, 1: 2.0, 2: 3.0, 3: 9.0}
    b = {0: 2.0, 1: 4.0, 2: 3.5, 5: 0.0}
    r = evidence.paired(a, b, float, label="b − a")
    d = np.array([1.0, 2.0, 0.5])
    half = scipy.stats.t.ppf(0.975, 2) * d.std(ddof=1) / math.sqrt(3)
    assert r["seeds"] == [0, 1, 2] and r["diffs"] == [1.0, 2.0, 0.5]
    assert r["mean"] == pytest.approx(d.mean()) and r["ci"] == pytest.approx((d.mean() - half, d.mean() + half))
    assert (r["wins"], r["losses"], r["ties"], r["p"], r["p_min"]) == (3, 0, 0, 0.25, 0.25)
    lower = evidence.paired(a, b, float, higher_is_better=False)
    assert (lower["wins"], lower["losses"]) == (0, 3)
    cens = evidence.paired({0: 10, 1: None, 2: None}, {0: 5, 1: 7, 2: None}, lambda v: v,
                           higher_is_better=False, censored=True, unit="steps")
    assert cens["mean"] is None and cens["ci"] is None and cens["n_censored"] == 2  # pairs holding a censored run
    assert (cens["wins"], cens["ties"], cens["n_test"]) == (2, 1, 2)
    with pytest.raises(ValueError, match="None"):
        evidence.paired({0: None}, {0: 1.0}, lambda v: v)
    with pytest.raises(ValueError, match="unknown test"):
        evidence.paired(a, b, float, test="t")
    empty = evidence.correct([evidence.paired({}, {1: 1.0}, float)])[0]
    assert empty["n"] == 0 and not empty["testable"] and empty["p_holm"] is None


def test_ratio_is_a_geometric_mean_with_a_log_t_interval():
    r = evidence.ratio({0: 2.0, 1: 8.0}, {0: 1.0, 1: 2.0}, float)
    assert r["gmean"] == pytest.approx(math.sqrt(2 * 4)) and r["low"] == 2.0 and r["high"] == 4.0
    half = scipy.stats.t.ppf(0.975, 1) * np.std(np.log([2, 4]), ddof=1) / math.sqrt(2)
    assert r["ci"] == pytest.approx((math.sqrt(8) * math.exp(-half), math.sqrt(8) * math.exp(half)))


# ----------------------------------------------------------------------------------------------------
# Claims and verdict words
# ----------------------------------------------------------------------------------------------------


def fitted(root: Path, n01: int, n3: int, gain: float, cost: float) -> None:
    rng = np.random.default_rng(0)
    runs = []
    for s in range(max(n01, n3)):
        base = 0.6 + 0.01 * rng.standard_normal()
        noise = 0.002 * rng.standard_normal(3)
        a1 = base + gain / 100 + noise[0]
        if s < n01:
            runs += [cifar_run("A0", s, base, step=0.01), cifar_run("A1", s, a1, frame_lr=1.0, step=0.04)]
        if s < n3:
            runs += [cifar_run("A3", s, a1 - cost / 100 + noise[1]), cifar_run("qknorm", s, base + noise[2])]
    write(root, "cifar/r2_fitted.json", runs)


def by_key(root: Path) -> dict:
    return {v["key"]: v for v in evidence.verdicts(root)}


def test_seeds_to_resolve_extrapolates_the_win_rate_of_the_sign_test():
    # 5 of 5 gives p = 0.0625, 6 of 6 gives 0.031: all wins need 6 pairs
    assert evidence.compare.seeds_to_resolve(3, 0) == 6
    # 7 of 8 wins: at N = 11, 9 of 11 gives p = 0.065; at N = 12, 10 of 12 gives 0.039
    assert scipy.stats.binomtest(9, 11).pvalue > 0.05 >= scipy.stats.binomtest(10, 12).pvalue
    assert evidence.compare.seeds_to_resolve(7, 1) == 12 == evidence.compare.seeds_to_resolve(1, 7)
    assert evidence.compare.seeds_to_resolve(6, 0, alpha=0.05 / 6) == 8  # two-sided 8 of 8: 2^-7 = 0.0078 < 0.0083
    assert evidence.compare.seeds_to_resolve(2, 2) is None and evidence.compare.seeds_to_resolve(0, 0) is None


def test_the_seeds_needed_name_the_majority_side():
    row = {"n": 6, "wins": 2, "losses": 4, "ratio": False}
    assert evidence.words.needed_text(row) == "; at that split (4 of 6 losses) about 42 untied paired seeds would resolve it"
    assert "(4 of 6 wins)" in evidence.words.needed_text({**row, "wins": 4, "losses": 2})
    assert evidence.words.needed_text({**row, "wins": 3, "losses": 3}) == (
        "; at a level split (3 wins, 3 losses) no number of seeds would resolve it")
    assert "no feasible number" in evidence.words.needed_text({**row, "wins": 51, "losses": 49})


def test_verdict_words_follow_the_primary(tmp_path):
    fitted(tmp_path, 8, 5, gain=2.5, cost=1.9)
    v = by_key(tmp_path)
    gain = v["cifar_gain"]
    assert gain["status"] == "smaller effect" and gain["verdict"].startswith("smaller effect: A1 − A0 +2.5")
    assert gain["verdict"].endswith("not +8.98") and gain["primary"][0]["p_holm"] == pytest.approx(2 ** -7)
    free = v["freezing"]
    assert free["status"] == "not resolved"
    assert free["verdict"].startswith("not resolved: n = 5 cannot go below p = 0.0625 (freezing costs +1.8")
    assert free["verdict"].endswith("at that split (5 of 5 wins) about 6 untied paired seeds would resolve it; "
                                    "the paper's 0.28 lies outside this interval")
    assert "no effect" not in free["verdict"]
    ratio = v["step_ratio"]
    assert ratio["status"] == "contradicted" and "0.25x" in ratio["verdict"] and "not 24-40x" in ratio["verdict"]
    # every other claim says what it lacks, none fails
    assert v["cifar_widens"]["status"] == "not tested yet" and v["grokking_endpoint"]["status"] == "not tested yet"
    assert v["mechanism"]["status"] == "not tested yet"
    assert v["optimizer"]["status"] == v["weight_decay"]["status"] == "by construction"
    # with 8 seeds of A3 the cost is resolved, and 0.28 lies below its interval
    fitted(tmp_path, 8, 8, gain=2.5, cost=1.9)
    free = by_key(tmp_path)["freezing"]
    assert free["status"] == "contradicted" and free["verdict"].startswith("contradicted: freezing costs +1.")
    assert free["verdict"].endswith("not 0.28")
    # these runs record no start and no commit: none can be shown to follow the declaration
    assert free["confirmation"]["status"] == "pending" and free["confirmation"]["seeds"] == []
    # the paper's size inside the interval: reproduced
    fitted(tmp_path, 8, 8, gain=8.98, cost=0.28)
    v = by_key(tmp_path)
    assert v["cifar_gain"]["status"] == "reproduced"
    assert v["cifar_gain"]["verdict"].startswith("reproduced: A1 − A0 +8.9")
    assert v["cifar_widens"]["verdict"].startswith("not tested yet: no run of its study (fixed 2,000 steps")


def test_mechanism_takes_its_primary_from_the_frame_lr_1_study_when_present(tmp_path):
    abl = {**SETTINGS, "lr": 1e-3, "frame_lr": 0.03}
    arms = ("A1", "A7", "stiefel_column", "stiefel_canonical", "stiefel_noproj", "A5", "A0")
    write(tmp_path, "cifar/r2_ablation.json",
          [cifar_run(a, s, 0.5 + 0.001 * s, frac=0.3, lr=1e-3, frame_lr=None if a == "A0" else 0.03)
           for a in arms for s in range(3)], abl)
    m = by_key(tmp_path)["mechanism"]
    assert m["status"] == "not resolved" and m["verdict"].startswith("not resolved: n = 3 cannot go below p = 0.25")
    assert m["sure"].endswith("the declared primary (mechanism at frame lr 1.0, 15,000 images, 10 epochs) has no run "
                              "yet") and m["confirmation"]["status"] == "pending"
    assert all("frame lr 0.03" in r["regime"] for r in m["primary"])
    # the declared study, partial: A1 and the no-projection rule on one seed; r2_ablation's A5 is not
    # paired with it (A5 at frame lr 1.0's study comes from r3_polar only)
    write(tmp_path, "cifar/r3_mechanism.json", [cifar_run(a, 0, 0.52, frac=0.3, lr=1e-3, frame_lr=1.0)
                                                for a in ("A1", "stiefel_noproj")], {**abl, "frame_lr": 1.0})
    m = by_key(tmp_path)["mechanism"]
    assert [r["n"] for r in m["primary"]] == [0, 0, 0, 1, 0, 0] and m["confirmation"]["seeds"] == []
    assert m["verdict"].startswith("not resolved: n = 1 cannot go below p = 1")
    assert all("frame lr 1.0" in r["regime"] for r in m["primary"])
    # complete on 8 seeds, canonical projector clearly worse: contradicted
    runs = []
    for s in range(8):
        for a in ("A1", "A7", "stiefel_column", "stiefel_canonical", "stiefel_noproj", "stiefel_nocap"):
            acc = 0.55 + 0.001 * s + (0.0003 * (s % 3) if a != "A1" else 0) - (0.03 if a == "stiefel_canonical" else 0)
            runs.append(cifar_run(a, s, acc, frac=0.3, lr=1e-3, frame_lr=1.0))
    write(tmp_path, "cifar/r3_mechanism.json", runs, {**abl, "frame_lr": 1.0})
    write(tmp_path, "cifar/r3_polar.json", [cifar_run("A5", s, 0.6 if fl == 0.1 else 0.5, frac=0.3, lr=1e-3, frame_lr=fl)
                                            for s in range(8) for fl in (0.01, 0.1, 0.3)], {**abl, "frame_lr": 0.01})
    m = by_key(tmp_path)["mechanism"]
    assert m["status"] == "contradicted" and "canonical" in m["verdict"]
    a5 = next(r for r in m["primary"] if r["baseline"] == "A5")
    assert a5["n"] == 8 and a5["testable"] and a5["mean"] < 0  # A5 at its best, 0.1, ahead of A1
    assert len(m["primary"]) == 6 and sum(r["testable"] for r in m["primary"]) >= 1


def test_a_row_shown_on_its_own_gives_its_own_p_when_its_test_can_reach_the_level(tmp_path):
    fitted(tmp_path, 8, 8, gain=2.5, cost=1.9)
    sec = {r["label"]: r for r in by_key(tmp_path)["cifar_gain"]["secondary"]}
    qk = sec["QK-norm − A0"]  # a secondary, 8 paired seeds: judged by its own test, not corrected
    assert qk["n"] == 8 and qk["testable"] and qk["role"] == "secondary" and qk["p_holm"] == qk["p"]
    assert qk["family"] == 1 and qk["resolved"] == (qk["p"] <= 0.05)
    text = evidence.sure_text(qk, 1)
    assert text == f"exact sign test, {qk['wins']}/8 wins, p = {qk['p']:.2g}" and "too few" not in text
    assert "too few" not in evidence.words.row_phrase(qk) and "shown, not corrected" in evidence.words.row_phrase(qk)
    assert evidence.sure_text({**qk, "n": 3, "n_test": 3, "p_min": 0.25, "p": 0.25, "wins": 3}, 1).endswith(
        "too few seeds for 0.05")


def test_fixed_epoch_scaling_pairs_the_small_runs_with_the_fitted_ones(tmp_path):
    fitted(tmp_path, 4, 0, gain=2.0, cost=0.0)
    # A1's lead at 5,000 images: 1 point more than at 50,000 on every seed, known per seed
    full = {r["seed"]: r for r in json.loads((tmp_path / "results/cifar/r2_fitted.json").read_text())["runs"]
            if r["arm"] == "A1"}
    base = {r["seed"]: r for r in json.loads((tmp_path / "results/cifar/r2_fitted.json").read_text())["runs"]
            if r["arm"] == "A0"}
    lead = {s: full[s]["test_acc"] - base[s]["test_acc"] for s in full}
    small = [cifar_run("A0", s, 0.4, frac=0.1) for s in range(4)]
    small += [cifar_run("A1", s, 0.4 + lead[s] + 0.01, frac=0.1, frame_lr=1.0) for s in range(4)]
    write(tmp_path, "cifar/r3_epochs.json", small)
    rows = {r["label"]: r for r in by_key(tmp_path)["cifar_widens"]["secondary"]}
    gap = rows["(A1 − A0) at 50,000 − at 5,000 images"]
    assert gap["n"] == 4 and gap["mean"] == pytest.approx(-1.0) and gap["losses"] == 4
    assert "fixed 10 epochs" in gap["regime"]
    gain = {(r["label"], r["regime"]): r for r in by_key(tmp_path)["cifar_gain"]["secondary"]}
    five = gain[("A1 − A0, 5,000 images", evidence.claims.EPOCHS_REGIME)]
    assert five["n"] == 4 and five["mean"] == pytest.approx(100 * np.mean(list(lead.values())) + 1.0)


def test_a_re_bracket_chooses_the_best_lr_on_its_own_seeds(tmp_path):
    # A0 at 3e-3 is high on seeds 2-3, which the re-bracket did not run: on seeds 0-1 alone, 1e-3 is best
    fitted_runs = [cifar_run("A0", s, [0.60, 0.60, 0.70, 0.70][s]) for s in range(4)]
    fitted_runs += [cifar_run("A1", s, 0.62, frame_lr=1.0) for s in range(4)]
    write(tmp_path, "cifar/r2_fitted.json", fitted_runs)
    write(tmp_path, "cifar/r3_bracket.json", [cifar_run("A0", s, 0.61, lr=lr) for s in (0, 1) for lr in (1e-3, 1e-2)])
    write(tmp_path, "cifar/r3_bracket_a1.json", [cifar_run("A1", s, 0.615, lr=1e-3, frame_lr=1.0) for s in (0, 1)])
    sec = {c.label: c for c in evidence.claim("cifar_gain").secondary}
    best = evidence.compute(sec["A1 − A0 at its best of lr 1e-3 / 3e-3 / 1e-2"], tmp_path)
    assert best["seeds"] == [0, 1] and best["mean"] == pytest.approx(1.0)  # 62% against A0's 61% at 1e-3
    unrestricted = evidence.compute(dataclasses.replace(sec["A1 − A0 at its best of lr 1e-3 / 3e-3 / 1e-2"], seeds=()),
                                    tmp_path)
    assert unrestricted["n"] == 4 and unrestricted["mean"] == pytest.approx(-3.0)  # 3e-3 chosen on 4 seeds
    low = evidence.compute(sec["A1 − A0, both at lr 1e-3"], tmp_path)
    assert low["seeds"] == [0, 1] and low["mean"] == pytest.approx(0.5)


def test_files_that_cannot_be_paired_are_refused(tmp_path):
    write(tmp_path, "cifar/r3_mechanism.json", [cifar_run("A1", 0, 0.5, frac=0.3, frame_lr=1.0)], SETTINGS)
    write(tmp_path, "cifar/r3_polar.json", [cifar_run("A5", 0, 0.5, frac=0.3, frame_lr=0.1)],
          {**SETTINGS, "epochs": 6})
    with pytest.raises(ValueError, match="epochs"):
        evidence.verdicts(tmp_path)


def test_committed_results_give_every_claim_one_verdict_and_json(tmp_path):
    vs = evidence.verdicts() + evidence.questions()
    assert [v["key"] for v in vs] == [c.key for c in evidence.CLAIMS + evidence.claims.LM_CLAIMS + evidence.claims.LM2_CLAIMS
                                      + LM4_CLAIMS]
    assert all(v["verdict"] and v["sure"] and v["chapter"] for v in vs)
    out = subprocess.run([sys.executable, "-m", "stiefel_mini.evidence", "--json"], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    data = json.loads(out.stdout)
    assert [d["verdict"] for d in data] == [v["verdict"] for v in vs]
    assert all({"claim", "verdict", "chapter", "primary", "status"} <= set(d) for d in data)
    tested = [d for d in data if d["primary"] and not d["primary"][0]["ratio"]]
    assert tested and all("p_holm" in r and "p" in r for d in tested for r in d["primary"])
    text = subprocess.run([sys.executable, "-m", "stiefel_mini.evidence"], capture_output=True, text=True,
                          check=True, cwd=ROOT).stdout
    assert all(v["verdict"] in text for v in vs)


# ----------------------------------------------------------------------------------------------------
# The book shows one verdict per claim
# ----------------------------------------------------------------------------------------------------


def test_intro_table_and_chapter_boxes_say_the_same(tmp_path):
    vs = evidence.verdicts()
    table = evidence.summary_html(vs)
    for chapter in sorted({v["chapter"] for v in vs}):
        box = evidence.box_html(vs, chapter)
        for v in (v for v in vs if v["chapter"] == chapter):
            esc = lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("'", "&#x27;")  # noqa: E731
            word = evidence.render.word_html(v["status"])
            assert word in table and word in box, (chapter, v["key"])
            assert esc(v["verdict"]) in box and esc(v["sure"]) in box
            assert esc(v["sentence"]) in box
            assert v["status"] == "by construction" or esc(evidence.render.cell_phrase(v)) in table
    with pytest.raises(ValueError, match="no claim"):
        evidence.box_html(vs, "retractions")


def test_the_confirmation_line_marks_each_claim_with_the_ledger_status():
    from bs4 import BeautifulSoup

    vs = evidence.verdicts()
    spans = BeautifulSoup(evidence.confirmation_html(vs), "html.parser").select("[data-claim]")
    want = [v for v in vs if v["confirmation"]["text"]]
    assert [(el["data-claim"], el["data-confirmation"]) for el in spans] == [
        (v["key"], v["confirmation"]["status"]) for v in want]
    assert [el.get_text() for el in spans] == [f"{v['claim']}: {v['confirmation']['text']}." for v in want]
    assert evidence.confirmation_html([{**v, "confirmation": {"status": "by construction", "text": ""}}
                                       for v in vs]) == ""


def sources(name: str) -> str:
    """A chapter's code, less its exercise solutions (which call the library's tests to teach them)."""
    nb = nbformat.read(ROOT / "book" / f"{name}.ipynb", 4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "code" and not c.source.startswith("# Solution"))


def test_chapters_render_their_boxes_from_the_evidence_layer_and_compute_no_statistics():
    assert "evidence.summary_html(VERDICTS" in sources("intro")
    for chapter in ("cifar", "grokking"):
        src = sources(chapter)
        assert f'evidence.box_html(VERDICTS, "{chapter}")' in src
        assert "VERDICTS = evidence.verdicts()" in src
        for banned in ("holm", "sign_test", "wilcoxon", "t_interval", "def judge", "PAPER_GAIN", "paired_table",
                       "paired_family", "2.0 ** (1 -"):
            assert banned not in src, (chapter, banned)


# ----------------------------------------------------------------------------------------------------
# Stored metrics recount from what their files store
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted((ROOT / "results" / "grokking").glob("*.json")), ids=lambda p: p.name)
def test_grokking_metrics_recount_from_the_stored_history(path):
    from stiefel_mini.experiments.grokking import metrics as grokking_metrics
    from stiefel_mini.experiments.records import load_results

    res = load_results(path)
    for r in res["runs"]:
        assert grokking_metrics.stored_metrics(r, res["base_config"]) == r["metrics"], (path.name, r["arm"], r["seed"])


SUMMARISED = [p for p in sorted((ROOT / "results" / "cifar").glob("*.json")) if "summary" in json.loads(p.read_text())]


@pytest.mark.parametrize("path", SUMMARISED, ids=lambda p: p.name)
def test_cifar_summaries_recount_from_the_stored_runs(path):
    """Each stored summary row recounts from the stored runs (the cpu files store fewer fields).

    The stored t intervals were written with an earlier t quantile (bisection of a continued-fraction
    CDF, off by up to 2e-4 relative at 2 degrees of freedom), so ``diff_ci_pp`` agrees to 1e-3.
    """
    from stiefel_mini.experiments.cifar import results as cifar_results

    res = json.loads(path.read_text())
    again = cifar_results.summary_table(res["runs"])
    assert len(again) == len(res["summary"])
    for new, old in zip(again, res["summary"]):
        assert set(old) <= set(new), path.name
        for k, v in old.items():
            rel = 1e-3 if k == "diff_ci_pp" else 1e-9
            if isinstance(v, float) or (isinstance(v, list) and v and isinstance(v[0], float)):
                assert new[k] == pytest.approx(v, rel=rel, abs=1e-12), (path.name, k)
            else:
                assert new[k] == v, (path.name, k)


def test_recount_rewrites_a_subsampled_file(tmp_path):
    from stiefel_mini.experiments.grokking import metrics as grokking_metrics
    from stiefel_mini.experiments.records import load_results, save_results

    src = ROOT / "results" / "grokking" / "r2_short.json"
    res = load_results(src)
    res["runs"] = res["runs"][:2]
    for r in res["runs"]:
        r["history"] = grokking_metrics.subsample(r["history"], 30)
    path = save_results(tmp_path / "f.json", res)
    assert grokking_metrics.recount(path) == 2 and grokking_metrics.recount(path) == 0
    again = load_results(path)
    h = again["runs"][0]["history"]
    spacing = h["step"][1] - h["step"][0]
    assert spacing > res["base_config"]["eval_every"]
    assert again["runs"][0]["metrics"]["steps_above95"] == spacing * sum(v >= 0.95 for v in h["val_acc"])


RUNNERS = ("cifar.experiment", "cifar.train", "cifar.data", "grokking.experiment", "weight_decay.experiment",
           "compare_tools", "patch_attention")


def test_presentation_imports_no_experiment_runner():
    """The evidence layer and the widgets read results; they import no module that trains."""
    files = [ROOT / "stiefel_mini" / "widgets.py", *sorted((ROOT / "stiefel_mini" / "evidence").glob("*.py"))]
    for path in files:
        text = path.read_text()
        for name in RUNNERS:
            package, module = f"experiments.{name}".rsplit(".", 1)
            assert f"experiments.{name} import" not in text and f"{package} import {module}" not in text, \
                (path.name, name)
    code = ("import sys, stiefel_mini.evidence, stiefel_mini.widgets; "
            "print(sorted(m for m in sys.modules if m.startswith('stiefel_mini.experiments.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert not any(f"stiefel_mini.experiments.{name}'" in loaded for name in RUNNERS), loaded


def test_holm_across_the_claims_counts_only_the_testable_primaries():
    def v(key, p, p_min, n=8, status="contradicted"):
        return {"key": key, "claim": key, "status": status,
                "primary": [{"ratio": False, "n": n, "p": p, "p_min": p_min, "p_holm": p}]}
    vs = [v("a", 0.004, 2 ** -11), v("b", 0.03, 2 ** -7), v("c", 0.25, 0.25, n=3, status="not resolved"),
          {"key": "d", "claim": "d", "status": "by construction", "primary": []}]
    out = evidence.across_claims(vs)
    assert out["family"] == 3 and out["n_testable"] == 2  # c cannot reach 0.05, d has no test
    a, b, c = out["claims"]
    assert a["p_holm"] == pytest.approx(0.008) and b["p_holm"] == pytest.approx(0.03)  # Holm over 2: 2p, then p
    assert a["resolved"] and b["resolved"] and not c["testable"]
    assert "over the 2 whose primary can reach p = 0.05" in out["text"] and out["text"].endswith("In all, 2 of 2 stay resolved at 0.05.")
    assert "a: p = 0.004 → 0.008, resolved; b: p = 0.03 → 0.03, resolved." in out["text"]


def test_holm_across_the_claims_takes_a_familys_own_holm_p_not_an_untestable_rows_p():
    # a family of three: two rows of 3 seeds (p 0.25, untestable) and one of 8 seeds (p 0.29 after
    # the family's Holm over its one testable row): the claim's p is 0.29, and it can reach 0.05
    fam = [{"ratio": False, "n": 3, "p": 0.25, "p_min": 0.25, "p_holm": None, "testable": False},
           {"ratio": False, "n": 8, "p": 0.289, "p_min": 2 ** -7, "p_holm": 0.289, "testable": True},
           {"ratio": False, "n": 3, "p": 1.0, "p_min": 0.25, "p_holm": None, "testable": False}]
    vs = [{"key": "a", "claim": "a", "status": "contradicted",
           "primary": [{"ratio": False, "n": 14, "p": 0.00012, "p_min": 2 ** -13, "p_holm": 0.00012,
                        "testable": True}]},
          {"key": "m", "claim": "m", "status": "not resolved", "primary": fam}]
    out = evidence.across_claims(vs)
    a, m = out["claims"]
    assert m["p"] == pytest.approx(0.289) and m["testable"] and out["n_testable"] == 2
    assert a["p_holm"] == pytest.approx(0.00024) and m["p_holm"] == pytest.approx(0.289)


def test_committed_holm_across_the_claims_runs_over_six():
    out = evidence.across_claims(evidence.verdicts())
    got = {c["key"]: c for c in out["claims"]}
    assert out["n_testable"] == 6
    assert got["mechanism"]["p"] == pytest.approx(0.289, abs=1e-3)
    assert got["cifar_gain"]["p_holm"] == pytest.approx(6 * 2 ** -13) == got["freezing"]["p_holm"]
    assert f"{got['cifar_widens']['p_holm']:.2g}" == "0.016" and f"{got['grokking_sooner']['p_holm']:.2g}" == "0.039"


def test_the_readers_questions_are_shown_but_stay_out_of_the_papers_family():
    from bs4 import BeautifulSoup

    from stiefel_mini.evidence.claims import CLAIMS, LM2_CLAIMS, LM_CLAIMS

    qs = evidence.questions()
    assert [q["key"] for q in qs] == [c.key for c in LM_CLAIMS + LM2_CLAIMS + LM4_CLAIMS]
    assert [q["key"] for q in qs][:2] == ["lm_gain", "lm2_stiefel_adam"]
    tested = evidence.questions(untested=False)
    assert [q["key"] for q in tested] == [q["key"] for q in qs if q["status"] != "not tested yet"]
    assert "lm_gain" in [q["key"] for q in tested]
    assert not {c.key for c in CLAIMS} & {q["key"] for q in qs}
    family = {c["key"] for c in evidence.across_claims(evidence.verdicts())["claims"]}
    assert not family & {q["key"] for q in qs}
    table = BeautifulSoup(evidence.summary_html(evidence.verdicts() + qs), "html.parser")
    row = table.select_one("tr[data-claim='lm_gain']")
    assert row is not None and "Language model" in row.get_text()
    for q in evidence.questions(untested=False):  # every question's row a few words long, like the claims'
        link = table.select_one(f"tr[data-claim='{q['key']}'] td[data-label='claim'] a")
        assert link is not None and len(link.get_text().split()) <= 5, link


def test_the_cards_quote_each_stiefel_arm_at_its_best_and_the_cli_prints_them():
    import subprocess
    import sys

    from stiefel_mini.evidence import cards

    vs, qs = evidence.verdicts(), evidence.questions(untested=False)
    got = {c["key"]: c for c in cards.cards(vs, qs)}
    assert list(got) == ["cifar", "grokking", "language_model"]
    lines = dict(got["language_model"]["lines"])
    for c in cards.configurations(qs):
        assert all(cards._rank(c["best"]) <= cards._rank(r) for r in c["weaker"]) and c["weaker"], c["arm"]
        assert lines[c["arm"]] == cards.configuration_text(c)
        assert lines[c["arm"]].startswith(f"with {cards.SETTINGS[c['best']['arm']]}, ")
    for c in got.values():  # plain words on the intro's first screen: no p, no arm code
        text = c["answer"] + " ".join(s for _, s in c["lines"])
        assert "p = 0" not in text and " A1" not in text, text
    counted = evidence.plain.tally(vs)
    assert f"Of the paper's {len(vs)} claims" in counted and "none of" not in counted.lower()
    out = subprocess.run([sys.executable, "-m", "stiefel_mini.evidence", "--cards"], capture_output=True, text=True,
                         check=True, cwd=ROOT, timeout=600).stdout
    for c in got.values():
        assert f"## {c['task']}: {c['answer']}." in out
        assert all(f"  {what}: {said}" in out for what, said in c["lines"])
    lm = next(a for a in evidence.plain.advice(vs + qs) if a["situation"].startswith("a small language model (GPT"))
    lead = cards.family_lead(qs)
    assert lm["try"].startswith(evidence.words.side_names(lead)[0]) and "not corrected" in lm["measured"]


def test_every_row_the_book_shows_follows_the_rule_and_exchanges_with_its_arms():
    """Every paired row of every verdict (primary, secondary, confirmation) on the committed results: an
    interval that holds zero never reads as a direction or "contradicted", one that excludes zero never
    as "no clear difference", and the row with its arms exchanged reads the opposite way."""
    from stiefel_mini.evidence import rule, sentences
    from stiefel_mini.evidence.words import gist, row_phrase

    opposite = {"ahead": "behind", "behind": "ahead", "faster": "slower", "slower": "faster",
                "fewer falls": "more falls", "more falls": "fewer falls", "better": "worse", "worse": "better"}
    seen = 0
    for v in evidence.verdicts() + evidence.questions():
        rows = v["primary"] + v["secondary"] + ((v["confirmation"] or {}).get("rows") or [])
        if rule.holds_zero(v["primary"][0]) if v["primary"] and not v["primary"][0].get("ratio") else False:
            assert v["status"] in ("not resolved", "not tested yet"), (v["key"], v["verdict"])
        for r in rows:
            if not r["n"] or r.get("ratio") or r["label"].startswith("("):
                continue
            seen += 1
            phrase, said = row_phrase(r), rule.decision(r)
            if rule.holds_zero(r):
                assert said != rule.RESOLVED and "whose 95% interval holds zero" in phrase, phrase
            elif r["mean"] is not None:
                assert not phrase.startswith("no clear difference") and gist(r) != "no clear difference", phrase
            x = sentences.flip(r)
            assert rule.decision(x) == said
            if said == rule.RESOLVED:
                b, a = evidence.words.side_names(r)
                word = next(w for w in opposite if f"{b} {w}" in phrase)
                assert f"{a} {opposite[word]}" in row_phrase(x), (phrase, row_phrase(x))
    assert seen > 50


def test_the_intros_list_of_claims_is_the_verdicts_list_numbered_by_the_evidence_layer():
    import re

    nb = nbformat.read(ROOT / "book" / "intro.ipynb", 4)
    cell = next(c.source for c in nb.cells if c.cell_type == "code" and "CLAIM_TEXT = {" in c.source)
    keys = re.findall(r'^    "(\w+)": ', cell.split("CLAIM_TEXT = {")[1].split("\n}")[0], re.M)
    assert keys == [c.key for c in evidence.CLAIMS]
    assert "evidence.claim_number(key)" in cell and [evidence.claim_number(k) for k in keys] == list(
        range(1, len(keys) + 1))
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    typed = re.findall(r"\b(?:nine|eight|ten) claims\b|\b[Cc]laims? \d\b|^\d+\. \*\*", markdown, re.M)
    assert not typed, f"claim numbers and counts typed in the intro's markdown: {typed}"
    with pytest.raises(ValueError, match="not one of the paper's claims"):
        evidence.claim_number("lm_gain")
