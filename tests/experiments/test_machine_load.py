"""The load record of a benchmark: what LoadMeter measures, how older records read, when a run is flagged."""

from __future__ import annotations

import os
import time

import pytest

from stiefel_mini.experiments import machine_load
from stiefel_mini.experiments.machine_load import LoadMeter, load_sentence, overloaded, run_load


def test_load_meter_counts_the_cpu_this_process_used():
    with LoadMeter() as meter:
        end = time.process_time() + 0.3
        while time.process_time() < end:  # one busy thread for 0.3 s of CPU
            pass
    rec = meter.record
    assert rec["cores"] >= 1 and len(rec["loadavg_before"]) == len(rec["loadavg_after"]) == 3
    # One busy thread: about one core, never more than the CPU time over the wall time allows.
    assert 0.3 <= rec["process_cores"] * rec["seconds"] * 1.05 + 0.05
    assert 0.0 < rec["process_cores"] <= rec["cores"] + 0.05
    if machine_load.machine_cpu() is not None:
        assert rec["other_cores"] >= 0.0 and rec["other_niced_cores"] >= 0.0


def test_load_meter_without_proc_stat_leaves_the_machine_columns_empty(monkeypatch):
    monkeypatch.setattr(machine_load, "machine_cpu", lambda: None)
    with LoadMeter() as meter:
        pass
    assert meter.record["other_cores"] is None and meter.record["other_niced_cores"] is None
    assert "cores and other work" not in load_sentence({"load": meter.record})


def test_machine_cpu_reads_proc_stat(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    tick = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal
    stat.write_text(f"cpu  {3 * tick} {2 * tick} {tick} 500 7 0 0 {tick} 0 0\ncpu0 1 2 3 4\n")
    monkeypatch.setattr(machine_load, "_STAT", stat)
    assert machine_load.machine_cpu() == {"busy": 7.0, "nice": 2.0}  # idle and iowait left out
    monkeypatch.setattr(machine_load, "_STAT", tmp_path / "missing")
    assert machine_load.machine_cpu() is None


def test_older_records_read_their_one_minute_load_average():
    # an older record stored a number and the cores; muon_step.json the three averages and no cores
    assert run_load({"load_average": 1.4, "cores": 2}) == {"cores": 2, "loadavg_before": [1.4]}
    old = {"load_average": [3.1, 2.0, 1.1], "provenance": {"cpu_count": 2}}
    assert run_load(old) == {"cores": 2, "loadavg_before": [3.1, 2.0, 1.1]}
    assert run_load({"provenance": {}}) is None


@pytest.mark.parametrize("before, after, flagged", [
    ([1.4], None, False), ([2.0, 0, 0], [2.0, 0, 0], False),  # at the core count: not above it
    ([3.1, 2.0, 1.1], None, True), ([0.5, 0, 0], [2.6, 0, 0], True),  # above, as it began or as it ended
])
def test_a_run_is_flagged_when_the_load_average_was_above_the_core_count(before, after, flagged):
    load = {"cores": 2, "loadavg_before": before, **({"loadavg_after": after} if after else {})}
    assert overloaded(load) is flagged
    text = load_sentence({"load": load})
    assert ("Measured under load" in text) is flagged
    assert f"{before[0]:.1f}" in text and "on 2 cores" in text


def test_the_sentence_says_what_the_benchmark_and_the_rest_used():
    load = {"cores": 2, "loadavg_before": [1.2, 1, 1], "loadavg_after": [1.5, 1, 1], "seconds": 60.0,
            "process_cores": 0.98, "other_cores": 0.31, "other_niced_cores": 0.3}
    text = load_sentence({"load": load})
    assert text == ("The machine's load average was 1.2 before and 1.5 after, on 2 cores; the benchmark used "
                    "0.98 cores and other work 0.31 (of which 0.30 at a lower priority).")
    assert load_sentence({}) == "The run did not record the machine's load."


@pytest.mark.parametrize("process, other, before, flagged", [
    (1.0, 0.01, [2.1, 2.4, 2.3], False),  # a study paused just before: the load average still counts it
    (1.0, 0.95, [0.5, 0, 0], True),  # the two cores busy throughout, whatever the average said as it began
    (1.0, 0.8, [3.0, 0, 0], False),
])
def test_the_cpu_measured_over_the_run_decides_where_it_was_measured(process, other, before, flagged):
    load = {"cores": 2, "loadavg_before": before, "loadavg_after": before, "seconds": 60.0,
            "process_cores": process, "other_cores": other, "other_niced_cores": 0.0}
    assert overloaded(load) is flagged
    text = load_sentence({"load": load})
    assert ("Measured under load: it and other work kept the 2 cores busy" in text) is flagged
