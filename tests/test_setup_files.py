"""The ways in agree with each other: README's commands, CI, Binder's environment, the repository URL.

Nothing here installs anything; each test reads the files that a new user, CI or Binder would run.
"""

import importlib.util
import json
import random
import re
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_set_repository():
    return _load_script("set_repository")


def _readme_commands() -> list[str]:
    """The command lines (comments stripped) of the README's "Two commands" code block."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Two commands\n.*?```bash\n(.*?)```", text, flags=re.S)
    assert block, "README.md needs a '## Two commands' section with a ```bash block"
    return [line.split("#", 1)[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_ci_runs_exactly_the_readme_commands():
    commands = _readme_commands()
    assert commands == ["bash scripts/setup.sh && bash scripts/build_book.sh", ".venv/bin/python -m pytest"]
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    for command in commands:
        assert command in ci_lines or f"{command} 2>&1 | tee \"$log\"" in ci_lines, \
            f".ci/run does not run the README's command {command!r} as it stands"


LOAD = "{load[other_cores]} cores of other work"
TIMED = {"setup": "set-up {minutes} min (" + LOAD + "; `.venv` is {venv_gib} GB",
         "build": "book build {minutes} min (" + LOAD + ")",
         "tests": "tests {minutes} min ({tests:,} tests; " + LOAD + ")",
         "quick": "quick tier {minutes} min ({tests:,} tests; " + LOAD + ")",
         "browser": "browser tests {minutes} min ({tests:,} tests; " + LOAD + ")"}
"""How the README's "Two commands" section quotes each step of ``tests/suite_timing.json``."""


def test_readme_times_are_the_measured_ones():
    """The README's set-up, build and test figures are those ``scripts/measure_suite.py`` wrote, each
    with the load beside it and its date; no other time is stated there (nor one the file lacks), and
    the measured commands are the README's."""
    section = re.search(r"## Two commands\n(.*?)\n## ", (ROOT / "README.md").read_text(), flags=re.S).group(1)
    text = " ".join(section.split())
    steps = json.loads((ROOT / "tests" / "suite_timing.json").read_text())["steps"]
    assert set(steps) <= set(TIMED), f"tests/suite_timing.json holds steps other than {sorted(TIMED)}"
    quoted = {name: TIMED[name].format(**record) for name, record in steps.items()}
    missing = [phrase for phrase in quoted.values() if phrase not in text]
    assert not missing, f"README.md's 'Two commands' section should say {missing} (tests/suite_timing.json)"
    stated = re.findall(r"\d+(?:\.\d+)? min\b", text)
    assert sorted(stated) == sorted(f"{r['minutes']} min" for r in steps.values()), \
        f"README.md states times {stated} beside the measured ones {quoted}"
    dates = {r["measured_utc"][:10] for r in steps.values()}
    assert set(re.findall(r"\b20\d\d-\d\d-\d\d\b", text)) == dates, f"the measurements' dates are {sorted(dates)}"
    commands = _load_script("measure_suite").STEPS
    assert [commands["setup"], commands["build"]] == _readme_commands()[0].split(" && ")
    assert commands["tests"] == _readme_commands()[1]
    assert all(record["command"] == commands[name] for name, record in steps.items()), \
        "tests/suite_timing.json measured other commands than scripts/measure_suite.py's: measure again"
    for name in ("quick", "browser"):
        assert f"`{commands[name]}`" in text, f"README.md should give the {name} command `{commands[name]}`"


def _collected_now(collected_counts) -> dict[str, int]:
    """The whole suite's test counts (``tests``, ``quick``, ``browser``): this session's, when it collected
    the whole suite (``tests/conftest.py``), else from a ``--collect-only`` run of it."""
    if collected_counts is not None:
        return collected_counts
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "quick or browser",
                          "-p", "no:cacheprovider"], capture_output=True, text=True, cwd=ROOT)
    total = re.search(r"^(\d+)/(\d+) tests collected", out.stdout, flags=re.M)
    assert out.returncode == 0 and total, f"collecting the suite failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}"
    ids = [line for line in out.stdout.splitlines() if "::" in line]
    browser = sum(1 for i in ids if i.startswith("tests/browser/"))
    assert len(ids) == int(total.group(1)), "the --collect-only listing and its count disagree"
    return {"tests": int(total.group(2)), "quick": len(ids) - browser, "browser": browser}


def test_the_measured_test_counts_are_within_ten_percent_of_the_suite(collected_counts):
    """The test counts the README quotes (``tests/suite_timing.json``, which
    :func:`test_readme_times_are_the_measured_ones` ties to the README) are within
    ``COUNT_TOLERANCE`` (10%) of the tests collected now: a round of work that adds or removes more
    tests than that must measure again (``scripts/measure_suite.py``). The browser tests are one per
    built page, so without a built book the browser tests are left out of both sides."""
    measure = _load_script("measure_suite")
    steps = json.loads((ROOT / "tests" / "suite_timing.json").read_text())["steps"]
    now = _collected_now(collected_counts)
    measured = {name: steps[name]["tests"] for name in ("tests", "quick", "browser")}
    if not (ROOT / "_build" / "html").is_dir():  # tests/browser/bookpaths.py's BUILD
        measured["tests"] -= measured.pop("browser")
        now = {"tests": now["tests"] - now["browser"], "quick": now["quick"]}
    off = {name: (measured[name], now[name]) for name in measured
           if abs(measured[name] - now[name]) > measure.COUNT_TOLERANCE * now[name]}
    assert not off, (f"(measured, collected now) test counts more than {measure.COUNT_TOLERANCE:.0%} apart: {off}; "
                     "measure again: python3 scripts/measure_suite.py --steps tests quick browser --note '...'")


def test_tests_readme_states_each_tiers_budget_beside_its_measurement():
    """``tests/README.md``'s budget table has a row per tier, as ``measure_suite.budget_row`` writes it from
    ``tests/suite_timing.json``: the budget (``BUDGET_S``), the measured time, marked **over budget** where
    it is (``measure_suite`` then exits 1), so that a change that adds minutes is seen."""
    measure = _load_script("measure_suite")
    steps = json.loads((ROOT / "tests" / "suite_timing.json").read_text())["steps"]
    text = (ROOT / "tests" / "README.md").read_text()
    for name in measure.TIERS:
        row = measure.budget_row(name, steps[name])
        assert row in text.splitlines(), f"tests/README.md's budget table should have the row {row!r}"
        assert ("over budget" in row) == (steps[name]["seconds"] > measure.BUDGET_S[name]), row


def test_every_test_the_quick_tier_leaves_out_exists():
    """Each entry of tests/conftest.py's NOT_QUICK names a test file, or a test function in one."""
    import ast

    spec = importlib.util.spec_from_file_location("tests_conftest", ROOT / "tests" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)  # by path: tests/browser has a conftest module too
    spec.loader.exec_module(conftest)
    for entry in conftest.NOT_QUICK:
        path, _, name = entry.partition("::")
        assert (ROOT / path).is_file(), f"NOT_QUICK names {path}, which does not exist"
        if name:
            tree = ast.parse((ROOT / path).read_text())
            assert name in {f.name for f in tree.body if isinstance(f, ast.FunctionDef)}, \
                f"NOT_QUICK names {entry}, which {path} does not define"


def test_only_the_conftest_marks_the_quick_tier():
    """A test file's own ``quick`` mark would put its NOT_QUICK tests back in the tier (a compiled-model
    test of test_muon.py ran there so): tests/conftest.py alone marks it."""
    marked = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "tests").rglob("*.py"))
              if p.name != "conftest.py" and re.search(r"\bmark\s*\.\s*quick\b", p.read_text())]
    assert not marked, f"these files mark tests quick themselves; leave it to tests/conftest.py: {marked}"


def test_venv_is_ignored():
    assert ".venv/" in (ROOT / ".gitignore").read_text().splitlines()


def _requirement_names(reqs: list[str]) -> dict[str, str]:
    """{normalised name: full requirement} of requirement strings."""
    out = {}
    for req in reqs:
        name = re.match(r"[A-Za-z0-9_.-]+", req).group(0).lower().replace("_", "-")
        out[name] = req.replace(" ", "")
    return out


def test_binder_environment_is_the_notebooks_extra_with_cpu_torch():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]

    def expand(reqs):
        for req in reqs:
            own = re.fullmatch(r"stiefel-mini\[(\w+)\]", req)
            yield from expand(extras[own.group(1)]) if own else [req]

    wanted = _requirement_names([*project["dependencies"], *expand(extras["notebooks"])])
    lines = [m.group(1).strip() for m in re.finditer(r"^\s+- (.+)$", (ROOT / "environment.yml").read_text(), flags=re.M)]
    pip_lines = lines[lines.index("pip:") + 1 :]  # the entries of the `- pip:` list
    options = [line for line in pip_lines if line.startswith("--")]
    assert options == ["--extra-index-url https://download.pytorch.org/whl/cpu"], \
        "Binder must take torch from PyTorch's CPU index (no GPU there; the default wheels carry CUDA)"
    assert _requirement_names([line for line in pip_lines if not line.startswith("--")]) == wanted


def test_repository_setting_agrees_everywhere():
    problems = _load_set_repository().check(ROOT)
    assert not problems, "\n".join(problems)


def test_set_repository_points_everything_at_a_fork(tmp_path):
    set_repository = _load_set_repository()
    copy = tmp_path / "repo"
    (copy / "book").mkdir(parents=True)
    for name in ("_config.yml", "README.md"):
        shutil.copy(ROOT / name, copy / name)
    for nb in (ROOT / "book").glob("*.ipynb"):
        shutil.copy(nb, copy / "book" / nb.name)

    set_repository.set_repository("https://github.com/someone/stiefel-fork", "dev", root=copy)

    assert set_repository.read_setting(copy) == ("https://github.com/someone/stiefel-fork", "dev")
    assert set_repository.check(copy) == []
    for nb in (copy / "book").glob("*.ipynb"):
        text = nb.read_text()
        assert "git+https://github.com/someone/stiefel-fork@dev" in text
        assert "stiefel-mini/stiefel-mini" not in text
        json.loads(text)
    readme = (copy / "README.md").read_text()
    assert "mybinder.org/v2/gh/someone/stiefel-fork/dev" in readme
    assert "colab.research.google.com/github/someone/stiefel-fork/blob/dev" in readme
    assert "github.com/stiefel-mini/stiefel-mini" not in readme
    config = (copy / "_config.yml").read_text()
    assert config.replace("someone/stiefel-fork", "stiefel-mini/stiefel-mini").replace("branch: dev", "branch: main") \
        == (ROOT / "_config.yml").read_text()


@pytest.mark.parametrize("url", ["https://gitlab.com/a/b", "github.com/a/b", "https://github.com/a"])
def test_set_repository_rejects_urls_the_buttons_cannot_use(url, tmp_path):
    with pytest.raises(ValueError, match="GitHub URL"):
        _load_set_repository().set_repository(url, "main", root=tmp_path)


def test_a_measurement_is_recorded_when_only_the_figures_it_renews_failed():
    """``measure_suite`` records a test step whose only failures are the README-figure tests (run against
    the figures it is about to replace), and no other failing step."""
    measure = _load_script("measure_suite")
    def output(*names, failed=None):
        reports = "".join(f"____________ {n} ____________\nassert ...\n" for n in names)
        n = len(names) if failed is None else failed
        return f"{reports}= {n} failed, 2600 passed, 8 skipped in 900.00s (0:15:00) ="
    counts, budget = measure.FIGURE_TESTS[1], measure.FIGURE_TESTS[2]
    assert measure.only_figure_tests_failed(output(counts, f"{budget}")) == [counts, budget]
    assert measure.only_figure_tests_failed(output(counts, "test_chapter_fits_its_length[book/intro.html]")) is None
    assert measure.only_figure_tests_failed(output(counts, failed=2)) is None, "a failure without its report"
    assert measure.only_figure_tests_failed(output()) is None


def test_the_scheduler_keeps_each_shared_fixture_on_one_worker(group_mismatches):
    """Every test whose module shares a fixture, and every browser test, is scheduled in its group (the
    xdist controller reads the groups off the test ids: tests/conftest.py's GROUPED_FILES)."""
    assert group_mismatches == [], (
        f"{len(group_mismatches)} tests are scheduled outside their group, e.g. {group_mismatches[:3]}: "
        "add their files to GROUPED_FILES in tests/conftest.py (or remove files that no longer share a fixture)")


def test_each_test_starts_from_a_random_state_of_its_own(request):
    drawn = (torch.rand(3), np.random.rand(3), random.random())
    seed = zlib.crc32(request.node.nodeid.encode())
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    assert torch.equal(drawn[0], torch.rand(3))
    assert np.array_equal(drawn[1], np.random.rand(3))
    assert drawn[2] == random.random()


def test_a_process_the_tests_start_prints_its_stack_when_it_crashes():
    crash = "import ctypes\n\ndef deep():\n    ctypes.string_at(0)\n\ndeep()\n"
    done = subprocess.run([sys.executable, "-c", crash], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "line 4 in deep" in done.stderr, done.stderr  # the stack, whatever the platform calls the signal
