"""Tests of the confirmation ledger: run starts and machines from what a file records, the runs that
can confirm a primary, and the committed ledger against git."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

import pytest

from stiefel_mini import evidence
from stiefel_mini.evidence import ledger
from stiefel_mini.evidence.claims import LM2_CLAIMS, LM_CLAIMS
from tests.test_evidence import SETTINGS, cifar_run, write

ROOT = Path(__file__).resolve().parents[1]
DECLARED = "ceb61dd"  # cifar_gain's declaring commit
T0 = "2026-12-01T22:25:39+00:00"
ALL_CLAIMS = evidence.CLAIMS + LM_CLAIMS + LM2_CLAIMS  # the paper's claims and the reader's questions


def utc(t: str) -> dt.datetime:
    return dt.datetime.fromisoformat(t)


def write_ledger(root: Path, commits: dict[str, str]) -> None:
    (root / "results").mkdir(parents=True, exist_ok=True)
    (root / "results" / ledger.LEDGER).write_text(json.dumps({"commits": commits}))


def test_run_start_is_a_lower_bound_from_what_the_file_records():
    times = {"aaaa111": "2026-12-01T10:00:00+00:00", "bbbb222": "2026-12-01T12:00:00+00:00"}
    payload = {"provenance": {"git_commit": "bbbb222", "timestamp_utc": "2026-12-01T13:00:00+00:00",
                              "command": "/usr/bin/python3 -m x"},
               "provenance_previous": [{"git_commit": "aaaa111", "timestamp_utc": "2026-12-01T09:00:00+00:00",
                                        "command": "/opt/py -m x"}]}
    assert ledger.run_start({"started_utc": "2026-12-02T01:02:03+00:00"}, payload, times) == (
        utc("2026-12-02T01:02:03+00:00"), "recorded")
    # the sweep at the run's commit started at 13:00, after the commit (12:00)
    assert ledger.run_start({"git_commit": "bbbb222"}, payload, times) == (utc("2026-12-01T13:00:00+00:00"), "sweep")
    # a sweep timestamp before its commit cannot be a start: the commit time bounds it
    assert ledger.run_start({"git_commit": "aaaa111"}, payload, times) == (utc("2026-12-01T10:00:00+00:00"), "sweep")
    assert ledger.run_start({"git_commit": "cccc333"}, payload, times) == (None, "unknown")
    assert ledger.run_machine({"git_commit": "aaaa111"}, payload) == "interpreter /opt/py"
    assert ledger.run_machine({"cpu": {"model": "X", "capability": "AVX2"}}, payload) == "X (AVX2)"
    assert ledger.run_machine({"cpu": {"model": "X", "capability": "AVX2"}, "device": "cpu"}, payload) == "X (AVX2)"
    gpu = {"cpu": {"model": "X", "capability": "AVX2"}, "device": "cuda: NVIDIA H200"}
    assert ledger.run_machine(gpu, payload) == "cuda: NVIDIA H200"  # the GPU computed it, not the CPU


def _fitted(root: Path, starts: dict[int, str], gain: float = 2.5) -> None:
    runs = []
    for s, t in starts.items():
        a0 = 0.6 + 0.001 * s
        runs += [{**cifar_run("A0", s, a0), "started_utc": t},
                 {**cifar_run("A1", s, a0 + gain / 100, frame_lr=1.0), "started_utc": t}]
    write(root, "cifar/r2_fitted.json", runs, SETTINGS)


def test_only_runs_after_the_declaration_on_unchosen_seeds_confirm(tmp_path):
    write_ledger(tmp_path, {"ceb61dd" + "0" * 33: T0})
    before, after = "2026-12-01T20:00:00+00:00", "2026-12-02T02:00:00+00:00"
    # seeds 0-1 (the lr was chosen on them) run after the declaration, 2-4 before, 5-9 after: 5 fresh seeds
    _fitted(tmp_path, {0: after, 1: after, 2: before, 3: before, 4: before,
                       **{s: after for s in range(5, 10)}})
    conf = {v["key"]: v for v in evidence.verdicts(tmp_path)}["cifar_gain"]["confirmation"]
    assert conf["commit"] == DECLARED and conf["time"] == T0
    assert conf["seeds"] == [5, 6, 7, 8, 9] and conf["rows"][0]["n"] == 5
    # 5 of 5 cannot reach 0.05: pending, with the n it would need
    assert conf["status"] == "pending" and "about 6 untied paired seeds" in conf["text"]
    _fitted(tmp_path, {**{s: before for s in range(5)}, **{s: after for s in range(5, 11)}})
    conf = {v["key"]: v for v in evidence.verdicts(tmp_path)}["cifar_gain"]["confirmation"]
    assert conf["seeds"] == list(range(5, 11)) and conf["status"] == "confirmed"
    assert conf["text"].startswith(f"declared at {DECLARED} (2026-12-01 22:25 UTC); confirmed on 6 fresh")
    # a fresh result against the primary's verdict is not a confirmation
    runs = json.loads((tmp_path / "results/cifar/r2_fitted.json").read_text())["runs"]
    for r in runs:
        if r["arm"] == "A1" and r["seed"] >= 5:
            r["test_acc"] -= 0.05
    write(tmp_path, "cifar/r2_fitted.json", runs, SETTINGS)
    conf = {v["key"]: v for v in evidence.verdicts(tmp_path)}["cifar_gain"]["confirmation"]
    assert conf["status"] == "not confirmed"


def test_a_ratio_family_with_an_unrun_regime_waits_for_it(tmp_path):
    # the step ratio's family: fresh seeds for the best-lr regime only, none of the shared-lr study
    write_ledger(tmp_path, {"7123eb2" + "0" * 33: "2026-12-02T14:05:00+00:00"})
    # the sweep seeds 0-1 ran before the declaration, seeds 2-5 after
    _fitted(tmp_path, {**{s: "2026-12-01T20:00:00+00:00" for s in range(2)},
                       **{s: "2026-12-02T20:00:00+00:00" for s in range(2, 6)}})
    conf = {v["key"]: v for v in evidence.verdicts(tmp_path)}["step_ratio"]["confirmation"]
    assert conf["status"] == "pending" and conf["seeds"] == [2, 3, 4, 5]
    assert ", as the primary; no fresh run yet for both at lr 1e-3: confirmation pending" in conf["text"]
    assert "confirmed on" not in conf["text"]
    # fresh runs of the shared-lr regime on other seeds: the family is confirmed, each regime on its own seeds
    fresh = "2026-12-03T09:15:00+00:00"
    write(tmp_path, "cifar/r2_lr.json", [
        {**cifar_run(arm, s, 0.5, frac=0.3, lr=1e-3, frame_lr=f, step=st), "started_utc": fresh}
        for s in (6, 7, 8) for arm, f, st in (("A0", None, 0.033), ("A1", 1e-3, 0.0007 + 1e-5 * s))], SETTINGS)
    v = {v["key"]: v for v in evidence.verdicts(tmp_path)}["step_ratio"]
    conf = v["confirmation"]
    assert conf["status"] == "confirmed", conf["text"]
    assert "confirmed on fresh paired seeds 6, 7, 8 (both at lr 1e-3); 2, 3, 4, 5 (each at its best lr) alone" in \
        conf["text"]
    assert v["sure"] == "both at lr 1e-3: 95% t interval, 3 seeds; each at its best lr: 95% t interval, 6 seeds"


def test_a_family_with_unrun_comparisons_waits_for_them(tmp_path):
    # the mechanism's family: fresh seeds for one ingredient (no projection), none for the other five
    write_ledger(tmp_path, {"ceb61dd" + "0" * 33: T0})
    runs = []
    for s in range(8):  # seeds 0-1, the sweep's, before the declaration; 2-7 after it
        t = "2026-12-01T02:00:00+00:00" if s < 2 else "2026-12-02T02:00:00+00:00"
        runs += [{**cifar_run("A1", s, 0.6 + 0.001 * s, frame_lr=1.0), "started_utc": t},
                 {**cifar_run("stiefel_noproj", s, 0.6, frame_lr=1.0), "started_utc": t}]
    write(tmp_path, "cifar/r3_mechanism.json", runs, SETTINGS)
    conf = {v["key"]: v for v in evidence.verdicts(tmp_path)}["mechanism"]["confirmation"]
    assert [r["n"] for r in conf["rows"]] == [0, 0, 0, 6, 0, 0] and conf["status"] == "pending"
    assert conf["text"].endswith("; no fresh run yet for A1 − A7, A1 − column moment, A1 − canonical projector, "
                                 "A1 − no trust cap, A1 − A5: confirmation pending")
    assert "confirmed on" not in conf["text"]
    # both arms counted; seed 2 is one the polar variant's frame lr was chosen on
    assert conf["runs"] == {"after": 10, "before": 4, "on_chosen_seeds": 2}


def test_a_primary_declared_before_all_its_runs_has_nothing_earlier_to_confirm(tmp_path):
    write_ledger(tmp_path, {"ceb61dd" + "0" * 33: T0})
    _fitted(tmp_path, {s: "2026-12-02T20:00:00+00:00" for s in range(2, 10)})
    v = {v["key"]: v for v in evidence.verdicts(tmp_path)}["cifar_gain"]
    conf = v["confirmation"]
    assert v["status"] == "smaller effect" and conf["status"] == "declared before its runs", conf["text"]
    assert "confirmed" not in conf["text"] and "before any run of its arms" in conf["text"]
    assert v["confirmed"] == "declared before its runs" and v["sentence"].endswith("; declared before its runs.")
    assert conf["phases"] == {"": {"after": 16, "before": 0, "on_chosen_seeds": 0}}
    # one earlier run of either arm, and the same fresh seeds confirm it
    _fitted(tmp_path, {0: "2026-12-01T20:00:00+00:00", **{s: "2026-12-02T20:00:00+00:00" for s in range(2, 10)}})
    v = {v["key"]: v for v in evidence.verdicts(tmp_path)}["cifar_gain"]
    assert v["confirmation"]["status"] == "confirmed" and v["sentence"].endswith("; confirmed on 8 fresh seeds.")


def test_pairs_on_two_machines_are_counted(tmp_path):
    write_ledger(tmp_path, {})
    runs = []
    for s in range(3):
        runs += [{**cifar_run("A0", s, 0.6), "cpu": {"model": "M1", "capability": "AVX2"}},
                 {**cifar_run("A1", s, 0.62, frame_lr=1.0), "cpu": {"model": "M1" if s else "M2",
                                                                    "capability": "AVX2"}}]
    write(tmp_path, "cifar/r2_fitted.json", runs, SETTINGS)
    v = {v["key"]: v for v in evidence.verdicts(tmp_path)}["cifar_gain"]
    assert v["primary"][0]["two_machines"] == [0] and "1 of 3 pairs made on two machines" in v["sure"]


def test_the_committed_ledger_has_every_commit_and_agrees_with_git():
    times = ledger.commit_times()
    named = set(ledger._named_commits(ROOT / "results"))
    declared = {c.declared for c in ALL_CLAIMS if c.declared}
    missing = [c for c in named | declared if ledger.commit_time(c, times) is None]
    assert not missing, f"results/ledger.json lacks {missing}: run python -m stiefel_mini.evidence --write-ledger"
    try:
        log = subprocess.run(["git", "show", "-s", "--format=%H %cI", *sorted(times)], cwd=ROOT, capture_output=True,
                             text=True, check=True, timeout=30).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no git history here (a tarball): the ledger is what the book reads")
    assert dict(zip(log[::2], log[1::2])) == times


def test_each_declaring_commit_holds_its_claim():
    """At its declaring commit, claims.py already names the claim and its first primary's file."""
    try:
        subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, check=True, timeout=10)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no git history here (a tarball)")
    for c in ALL_CLAIMS:
        if not c.declared:
            continue
        src = subprocess.run(["git", "show", f"{c.declared}:stiefel_mini/evidence/claims.py"], cwd=ROOT,
                             capture_output=True, text=True, check=True, timeout=10).stdout
        assert f'"{c.key}"' in src and c.primaries[0][0].files[0] in src, c.key


def test_fresh_seeds_that_could_decide_and_do_not_leave_the_primary_not_confirmed(tmp_path):
    # resolved on 18 seeds (15 wins); fresh seeds 12-17 (6: the sign test can reach 0.03) split 3 and 3
    write_ledger(tmp_path, {"ceb61dd" + "0" * 33: T0})
    before, after = "2026-12-01T20:00:00+00:00", "2026-12-02T02:00:00+00:00"
    _fitted(tmp_path, {**{s: before for s in range(12)}, **{s: after for s in range(12, 18)}})
    runs = json.loads((tmp_path / "results/cifar/r2_fitted.json").read_text())["runs"]
    for r in runs:
        if r["arm"] == "A1" and r["seed"] >= 12 and r["seed"] % 2:
            r["test_acc"] -= 0.05  # fresh seeds: 3 ahead, 3 behind
    write(tmp_path, "cifar/r2_fitted.json", runs, SETTINGS)
    v = {v["key"]: v for v in evidence.verdicts(tmp_path)}["cifar_gain"]
    assert v["status"] == "smaller effect"
    assert v["confirmation"]["status"] == "not confirmed", v["confirmation"]["text"]
    assert v["confirmed"] == "not confirmed" and v["sentence"].endswith("; 6 fresh seeds did not confirm it.")


def test_a_run_that_records_no_cpu_is_placed_by_its_own_sweep_not_the_files_latest():
    payload = {"provenance": {"git_commit": "cccc333", "timestamp_utc": "2026-12-03T00:00:00+00:00",
                              "command": "/work/venv/bin/python -m x", "cpu": {"model": "New", "capability": "AVX512"}},
               "provenance_previous": [
                   {"git_commit": "aaaa111", "timestamp_utc": "2026-12-01T09:00:00+00:00", "command": "/old/py -m x"},
                   {"git_commit": "bbbb222", "timestamp_utc": "2026-12-02T09:00:00+00:00",
                    "command": "/work/venv/bin/python -m x"}]}
    assert ledger.run_machine({"git_commit": "aaaa111"}, payload) == "interpreter /old/py"
    # its interpreter's later sweep recorded the CPU it ran on
    assert ledger.run_machine({"git_commit": "bbbb222"}, payload) == "New (AVX512)"
    assert ledger.run_machine({"git_commit": "cccc333"}, payload) == "New (AVX512)"
    assert ledger.run_machine({"git_commit": "dddd444"}, payload) is None  # nothing recorded: unknown


def test_committed_freezing_pairs_across_two_machines_are_flagged():
    v = {v["key"]: v for v in evidence.verdicts()}["freezing"]
    row = v["primary"][0]
    assert row["two_machines"] == [5, 6, 7]
    assert "3 of 14 pairs made on two machines" in v["sure"]
    assert "3 of its 14 pairs ran on two different machines" in v["sentence"]


def test_a_baseline_files_runs_confirm_whatever_their_start_every_other_run_only_after_the_declaration():
    from stiefel_mini.evidence.claims import Comparison
    from stiefel_mini.evidence.measure import confirming

    comp = Comparison("b − a", "constructed", ("old.json", "new.json"), "a", "b", chosen_on=(100,),
                      baseline_files=("old.json",))
    when = utc(T0)
    before, after = when - dt.timedelta(hours=1), when + dt.timedelta(hours=1)
    keep = confirming(comp, when)
    assert keep({"seed": 0, "_file": "old.json", "_start": before})  # the baseline, made before by design
    assert keep({"seed": 0, "_file": "new.json", "_start": after})
    assert not keep({"seed": 0, "_file": "new.json", "_start": before})
    assert not keep({"seed": 0, "_file": "new.json", "_start": None})
    assert not keep({"seed": 100, "_file": "old.json", "_start": before})  # a seed a choice was made on
    plain = confirming(Comparison("b − a", "constructed", ("old.json",), "a", "b"), when)
    assert not plain({"seed": 0, "_file": "old.json", "_start": before})
    lm3 = next(c for c in LM2_CLAIMS if c.key == "lm3_scale")
    assert all(comp.baseline_files == ("lm/round2.json",) for comp in (*lm3.primaries[0], *lm3.secondary))
