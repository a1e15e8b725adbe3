"""Measure the README's set-up, build and test times into ``tests/suite_timing.json``.

    python3 scripts/measure_suite.py --clone /tmp/fresh --note "..."     # every step, in a fresh clone of HEAD
    python3 scripts/measure_suite.py --steps quick browser --note "..."   # some steps, in this checkout

Each step runs the command the README gives for it (:data:`STEPS`) and is recorded on its own, so
that measuring one step again replaces only its entry: the date, the commit, where it ran (this
checkout or a fresh clone), the machine (CPUs, model, memory, OS), the command, its wall-clock time,
pytest's counts for a test step, and the load: the CPU the step used and the CPU the rest of the
machine used meanwhile (``/proc/stat``; ``niced`` is the part of it run at a lower priority), in
cores, with the load average before and after; after the set-up, the size of ``.venv``. A step that
fails is not recorded, unless its only failures are the tests of the figures it renews (:data:`FIGURE_TESTS`).

The README's "Two commands" section quotes this file and ``tests/README.md``'s budget table states each
tier's budget (:data:`BUDGET_S`) beside its measurement (:func:`budget_row`, printed after a run);
``tests/test_setup_files.py`` fails when their figures disagree with it, when a tier was measured over
its budget (this script then exits 1) and when a measured test count is more than
:data:`COUNT_TOLERANCE` off the count collected now, so that the figures cannot go stale unseen.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "suite_timing.json"
PYTEST = ".venv/bin/python -m pytest"
STEPS = {
    "setup": "bash scripts/setup.sh",
    "build": "bash scripts/build_book.sh",
    "tests": PYTEST,
    "quick": f"{PYTEST} -m quick",
    "browser": f"{PYTEST} -m browser tests/browser",
}
"""Each step's command, run from the repository root; ``tests`` is the README's test command, which CI runs."""
BUDGET_S = {"tests": 600, "quick": 90}
"""The most seconds a tier may take on an idle 2-core machine after the build (issue 76): ``tests/README.md``
states them beside the measurements, and ``tests/test_setup_files.py`` fails on a measurement over them."""
TIERS = {"quick": "quick", "tests": "everything"}
"""The steps that are test tiers, by their name in ``tests/README.md``'s budget table."""
COUNT_TOLERANCE = 0.10
"""How far (a fraction) a measured test count may be from the count collected now before
``tests/test_setup_files.py`` asks for a new measurement."""
FIGURE_TESTS = ("test_readme_times_are_the_measured_ones",
                "test_the_measured_test_counts_are_within_ten_percent_of_the_suite",
                "test_tests_readme_states_each_tiers_budget_beside_its_measurement")
"""The tests of ``tests/test_setup_files.py`` that compare the READMEs' figures with this file: a measurement
taken to renew the figures runs them against the old ones, so a test step whose only failures are
these is recorded (with ``failed_figure_tests``); any other failure is not."""
FAILURE_HEADER = re.compile(r"^_{3,} (\S+?)(?:\[.*\])? _{3,}$", re.M)
"""The header pytest prints above each failure's report: ``____ test_name[param] ____``."""
COUNTS = re.compile(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed)\b")
"""pytest's summary line: ``1201 passed, 3 skipped, 229 deselected in 171.20s``."""


def _cpu_jiffies() -> dict[str, int]:
    """``/proc/stat``'s machine-wide CPU time, in clock ticks: ``busy`` (all but idle and iowait) and ``nice``."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
    return {"busy": user + nice + system + irq + softirq + steal, "nice": nice}


def _children_cpu() -> float:
    """CPU seconds used by this process's finished children (and theirs)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def machine() -> dict:
    """CPUs this process may use, their model, memory and the operating system."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    model = re.search(r"^model name\s*:\s*(.+)$", info, flags=re.M)
    mem = re.search(r"^MemTotal:\s*(\d+) kB", Path("/proc/meminfo").read_text(), flags=re.M)
    return {"cpus": len(os.sched_getaffinity(0)), "cpu_model": model.group(1) if model else platform.processor(),
            "memory_gib": round(int(mem.group(1)) / 2**20, 1) if mem else None, "os": platform.platform()}


def pytest_counts(output: str) -> dict[str, int]:
    """The counts of pytest's last summary line in ``output`` (``tests``: the tests that ran)."""
    lines = [ln for ln in output.splitlines() if re.search(r"\b(passed|failed)\b.* in [\d.]+s", ln)]
    if not lines:
        raise ValueError("no pytest summary line ('N passed ... in Xs') in the output")
    counts = {("errors" if k.startswith("error") else k): int(n) for n, k in COUNTS.findall(lines[-1])}
    counts["tests"] = sum(v for k, v in counts.items() if k != "deselected")
    return counts


def only_figure_tests_failed(output: str) -> list[str] | None:
    """The failed tests of a pytest ``output`` when every one is a :data:`FIGURE_TESTS` test (the list),
    else None (another test failed, or the failures cannot be told apart)."""
    failed = FAILURE_HEADER.findall(output)
    counts = pytest_counts(output)
    if not failed or len(failed) != counts.get("failed", 0) or counts.get("errors", 0):
        return None
    return failed if all(name in FIGURE_TESTS for name in failed) else None


def budget_row(name: str, record: dict) -> str:
    """Tier ``name``'s row of ``tests/README.md``'s budget table: its command, budget and measurement."""
    budget = BUDGET_S[name]
    limit = f"{budget // 60} min" if budget % 60 == 0 else f"{budget} s"
    over = " **over budget**" if record["seconds"] > budget else ""
    return (f"| {TIERS[name]} | `{record['command']}` | {limit} | {record['seconds']:.0f} s{over}, "
            f"{record['tests']:,} tests, {record['measured_utc'][:10]}, {record['where']}, "
            f"{record['load']['other_cores']} cores of other work |")


def run_step(name: str, where: Path) -> dict:
    """Run step ``name``'s command in ``where`` and return its record; raises CalledProcessError when it fails."""
    command = STEPS[name]
    clk = os.sysconf("SC_CLK_TCK")
    load_before = os.getloadavg()[0]
    jiffies, cpu, start = _cpu_jiffies(), _children_cpu(), time.monotonic()
    proc = subprocess.run(["bash", "-c", command], cwd=where, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    wall = time.monotonic() - start
    own = _children_cpu() - cpu
    after = _cpu_jiffies()
    log = Path(tempfile.gettempdir()) / f"measure_suite_{name}.log"
    log.write_text(proc.stdout)
    sys.stdout.write(proc.stdout[-3000:] + f"\n(whole output: {log})\n")
    figure_failures = only_figure_tests_failed(proc.stdout) if proc.returncode and name in TIERS else None
    if figure_failures is None:
        proc.check_returncode()
    busy = (after["busy"] - jiffies["busy"]) / clk
    record = {
        "command": command,
        "measured_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True,
                                     text=True).stdout.strip(),
        "where": "a fresh clone" if where != ROOT else "the developer's checkout",
        "seconds": round(wall, 1),
        "minutes": round(wall / 60, 1),
        "machine": machine(),
        "load": {
            "step_cores": round(own / wall, 2),
            "other_cores": round(max(0.0, busy - own) / wall, 2),
            "other_niced_cores": round((after["nice"] - jiffies["nice"]) / clk / wall, 2),
            "loadavg_1min_before": round(load_before, 2),
            "loadavg_1min_after": round(os.getloadavg()[0], 2),
        },
    }
    if name == "setup":
        kib = subprocess.run(["du", "-sk", "--dereference-args", ".venv"], cwd=where, capture_output=True,
                             text=True, check=True).stdout.split()[0]
        record["venv_gib"] = round(int(kib) / 2**20, 1)
    elif name != "build":
        record.update(pytest_counts(proc.stdout))
        if figure_failures:
            record["failed_figure_tests"] = figure_failures
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", nargs="+", choices=list(STEPS), default=list(STEPS),
                    help="steps to run, in this order (default: all)")
    ap.add_argument("--clone", type=Path, help="clone HEAD into this new folder and run the steps there "
                    "(needed for 'setup', which creates .venv); an existing clone is used for the other steps")
    ap.add_argument("--note", required=True, help="what else ran on the machine, in words (saved with each step)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if "setup" in args.steps and args.clone is None:
        ap.error("the 'setup' step creates .venv: give --clone FOLDER (a fresh clone), not this checkout")
    where = ROOT
    if args.clone is not None:
        if args.clone.exists() and "setup" in args.steps:
            ap.error(f"--clone {args.clone} exists: the 'setup' step needs a new folder")
        if not args.clone.exists():
            subprocess.run(["git", "clone", "--quiet", str(ROOT), str(args.clone)], check=True)
        where = args.clone.resolve()
    timing = json.loads(args.out.read_text()) if args.out.is_file() else {}
    timing.setdefault("steps", {})
    for name in args.steps:
        print(f"== {name}: {STEPS[name]} (in {where})", flush=True)
        record = run_step(name, where)
        record["note"] = args.note
        timing["steps"][name] = record
        args.out.write_text(json.dumps(timing, indent=1) + "\n")  # after each step: a later failure keeps it
        print(f"== {name}: {record['minutes']} min, load {record['load']}", flush=True)
    over = [name for name in args.steps if name in BUDGET_S and timing["steps"][name]["seconds"] > BUDGET_S[name]]
    print("tests/README.md's budget table, from this file:")
    for name in TIERS:
        if name in timing["steps"]:
            print(budget_row(name, timing["steps"][name]))
    if over:
        said = ", ".join(f"{n} ({timing['steps'][n]['seconds']} s > {BUDGET_S[n]} s)" for n in over)
        print(f"over budget: {said}; "
              "on a loaded machine, measure again idle; otherwise make tests cheaper or move them out of the "
              "quick tier (tests/conftest.py's NOT_QUICK, with the reason)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
