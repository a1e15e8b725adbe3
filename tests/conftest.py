"""Shared test settings.

Hypothesis profile ``stiefel_core`` (the default here): no per-example deadline (linear algebra on a
shared CPU has noisy timings), a modest number of examples so that the core suite stays well under
three minutes on two cores, and derandomized so that CI runs are reproducible. Run with
``--hypothesis-profile=thorough`` for a longer randomized search.

Skip policy (``skip_policy.py``): with the environment variable ``CI`` set, a skipped test fails
the run unless it skips for a missing optional extra (package, GPU, platform feature).

Tiers: ``pytest -m quick`` runs the tests marked ``quick`` here (:func:`pytest_collection_modifyitems`):
every test that is not ``browser``, ``slow`` or ``standalone`` and not listed in :data:`NOT_QUICK`.
``pytest`` runs everything (what CI runs).

Random state: every test starts with torch's, numpy's and ``random``'s generators seeded from its id
(:func:`_seeded`), so a draw without a generator of its own is the same in every run, whichever
xdist worker runs the test and whatever ran before it.

Crashes: every process the tests start (the gloo ranks, the chapter kernels, subprocesses) has
Python's fault handler on (``PYTHONFAULTHANDLER``), so one that dies of a fatal signal prints its stack
into the test's captured output instead of leaving only its exit signal.
"""

from __future__ import annotations

import os
import random
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings

from skip_policy import SkipPolicy

pytest_plugins = ["pytester"]  # tests/test_skip_policy.py runs toy suites in-process

settings.register_profile(
    "stiefel_core",
    deadline=None,
    max_examples=15,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "thorough",
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "stiefel_core"))
os.environ.setdefault("PYTHONFAULTHANDLER", "1")  # inherited by every process the tests start


@pytest.fixture(autouse=True)
def _seeded(request):
    """Every test starts from one random state of its own, a function of its id: pytest-xdist hands
    tests to its workers in an order that varies from run to run, so an unseeded draw would otherwise
    depend on which tests that worker ran before."""
    seed = zlib.crc32(request.node.nodeid.encode())
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def _threads(n: int):
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    yield
    torch.set_num_threads(old)


@pytest.fixture
def one_thread():
    """Tests that take many tiny steps: on a shared 2-core machine OpenMP threads for 10 x 3 matrices
    only add synchronisation cost (a 10 x 3 QR took ~35 ms with 2 busy threads and ~4 us with one)."""
    yield from _threads(1)


@pytest.fixture
def two_threads():
    """torch 2.14.1's reported batched-solve failure needs more than one thread."""
    yield from _threads(2)


NOT_QUICK = {
    "tests/test_evidence.py": "the evidence layer over every committed result",
    "tests/test_counterfactual.py": "the book's prose against copies of every committed result",
    "tests/test_lm_chapter.py": "executes the language-model chapter on an invented complete study",
    "tests/test_claims_lm4.py::test_the_chapter_the_intro_and_which_tool_report_the_fourth_study":
        "executes four chapters on an invented complete fourth study",
    "tests/test_claims_lm4.py::test_the_chapter_reads_a_fourth_study_whose_decisive_phase_has_begun":
        "executes the language-model chapter on an invented fourth study",
    "tests/test_forest.py": "judges every committed result",
    "tests/experiments/cifar/test_experiment.py::test_study_files_reproduce_their_repro_run": "re-runs stored runs",
    "tests/experiments/cifar/test_experiment.py::test_tiny_set_run_reproduces_the_profiled_run": "re-runs a stored run",
    "tests/experiments/grokking/test_experiment.py::test_reproduces_the_studies_results": "re-runs stored runs",
    "tests/experiments/grokking/test_experiment.py::test_reproduces_committed_results": "re-runs stored training runs",
    "tests/test_distributed.py": "two gloo processes",
    "tests/test_fsdp.py": "two gloo processes, torchrun",
    "tests/test_convert_fsdp.py": "two gloo processes",
    "tests/test_resources.py::test_wheel_carries_results_and_resolves_them_without_a_checkout": "builds a wheel",
    "tests/experiments/lm/test_arms.py::test_each_recipe_trains": "builds and trains a GPT-2 per recipe",
    "tests/experiments/lm/test_run_study.py::test_a_study_runs_to_its_end_and_resumes": "six tiny training runs",
    "tests/test_manifold_muon_cap.py": "trains a tiny all_stiefel GPT-2 to capture its frames and momenta",
    "tests/test_benchmarks.py::test_lm_throughput_times_every_requested_studys_arms_against_one_adamw":
        "builds and steps a tiny GPT-2 for each of three studies' 18 arms",
    "tests/test_benchmarks.py::test_muon_step_table_and_results_file":
        "trains a tiny GPT-2 on the corpus to record its momenta, then the whole-step comparison",
    "tests/test_muon_fsdp.py": "two gloo processes",
    "tests/test_groups.py::test_the_mark_survives_fsdp2_sharding_and_keeps_frames_on_the_manifold":
        "two gloo processes",
    "tests/test_ledger.py::test_committed_freezing_pairs_across_two_machines_are_flagged":
        "judges every committed result",
    "tests/test_geometry.py::test_no_retraction_drifts_off_the_manifold_over_10000_uncapped_float32_steps":
        "10,000 steps per retraction (test_retractions_land_on_the_manifold checks each step in the quick tier)",
    "tests/test_optim.py::test_stays_on_the_manifold_for_10000_float32_steps": "10,000 optimizer steps",
    "tests/test_muon.py::test_a_compiled_model_and_bf16_autocast_train_with_stiefel_muon":
        "compiles a model with inductor (36 s of the quick tier's 381 test-seconds, 2026-12-07)",
    "tests/test_convert.py::test_torch_compile_traces_a_converted_model": "compiles a converted model (13 s)",
    "tests/test_mha.py::test_torch_compile_smoke": "compiles the drop-in attention (9 s)",
    "tests/test_geometry.py::test_large_batched_retraction_matches_float64_loop":
        "16 batched 128-column retractions against a float64 loop, 27 s (test_retractions_land_on_the_manifold "
        "and the reference tests check each retraction in the quick tier)",
    "tests/experiments/lm/test_run_study.py::test_each_arm_of_the_second_study_runs_and_records_its_settings":
        "builds and trains a GPT-2 per arm of the second study, 24 s (as test_arms' test_each_recipe_trains)",
    "tests/test_layering.py::test_the_evidence_layer_loads_no_language_model_runner":
        "imports the whole evidence layer in a new interpreter (11 s)",
    "tests/experiments/cifar/test_experiment.py::test_parallel_sweeps_merge_into_one_file":
        "trains four runs in two sweeps (8 s; the sweep and resume tests stay in the quick tier)",
}
"""What the quick tier leaves out besides the browser, slow and standalone tests: node-id prefixes (a file,
or a test with all its parameters) and why. Each took more than 5 s on a loaded 2-core machine (issue 76's
six, from test_muon_fsdp.py on: 10-17 s of CPU time each at one thread, under a load of 7-14); the last
seven, the largest of the quick tier's test-seconds in the full suite's ``--durations`` on 2026-12-07, bring
the tier toward its 90 s budget (tests/README.md)."""


def _quick(nodeid: str) -> bool:
    return not any(nodeid == p or nodeid.startswith((p + "::", p + "[")) for p in NOT_QUICK)


SHARED_SCOPES = ("module", "class", "package")
"""Fixture scopes whose value the tests of one module share: xdist keeps such a module on one worker."""


def xdist_group(item) -> str | None:
    """The group whose tests one xdist worker runs together, in collection order (``--dist loadgroup``,
    ``pyproject.toml``), or None for a test any worker may take: ``browser`` for the browser tests (one
    Chromium and one set of shared pages, :mod:`tests.browser.conftest`), and a test's file when the
    test uses a fixture of :data:`SHARED_SCOPES` (e.g. the chapters executed once for all of
    ``test_counterfactual.py``), so that the fixture runs once rather than once per worker."""
    if item.get_closest_marker("browser"):
        return "browser"
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    if any(d.scope in SHARED_SCOPES for chain in defs for d in chain):
        return item.nodeid.split("::")[0]
    return None


GROUPED_FILES = (
    "tests/experiments/cifar/test_data.py",
    "tests/experiments/cifar/test_experiment.py",
    "tests/experiments/cifar/test_train.py",
    "tests/experiments/lm/test_data.py",
    "tests/experiments/lm/test_experiment.py",
    "tests/experiments/weight_decay/test_experiment.py",
    "tests/test_claims_lm4.py",
    "tests/test_counterfactual.py",
    "tests/test_evidence_families.py",
    "tests/test_forest.py",
    "tests/test_fsdp.py",
    "tests/test_lm_chapter.py",
    "tests/test_manifold_muon_cap.py",
    "tests/test_muon_fsdp.py",
    "tests/test_widgets.py",
)
"""The files whose tests share a fixture of :data:`SHARED_SCOPES`: the scheduler keeps each on one worker.
Written out because the xdist controller, which schedules, collects nothing: it has the test ids alone.
``test_setup_files.py`` fails when a collected test has an :func:`xdist_group` that is not its
:func:`scheduled_group`; the scheduler keeps the other tests of these files with them."""


def scheduled_group(nodeid: str) -> str | None:
    """The group the scheduler gives the test ``nodeid`` (None: any worker may take it): :func:`xdist_group`'s,
    read off the test id."""
    path = nodeid.split("::")[0]
    if path.startswith("tests/browser/"):
        return "browser"
    return path if path in GROUPED_FILES else None


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` by :func:`scheduled_group`. pytest-xdist's own loadgroup reads the groups off a
    suffix its worker hook writes into each test id (``test@group``); since pytest 9.2 a test id is no longer
    the field it writes (pytest-xdist issue 1386), so every group was silently split over the workers."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scheduled_group(nodeid) or nodeid

    return GroupScheduling(config, log)


GROUP_MISMATCHES = pytest.StashKey[list]()
"""Collected tests with an :func:`xdist_group` other than their :func:`scheduled_group`."""

SUITE_COUNTS = pytest.StashKey[dict]()
"""The session's tests per README figure (``tests``, ``quick``, ``browser``) when it collected the whole
suite (``tests/test_setup_files.py`` compares them with the README's)."""


def suite_counts(items) -> dict[str, int]:
    """How many of ``items`` each README figure counts: all, the quick tier, the browser tests."""
    return {"tests": len(items),
            "quick": sum(1 for i in items if i.get_closest_marker("quick")),
            "browser": sum(1 for i in items if i.get_closest_marker("browser"))}


def _collected_whole_suite(config) -> bool:
    testpaths = {str(config.rootpath / p) for p in config.getini("testpaths")}
    here = config.invocation_params.dir
    return ({str((here / a).resolve()) for a in config.args} == testpaths and not config.getoption("lf", False)
            and not config.getoption("ignore", None) and not config.getoption("ignore_glob", None))


def pytest_collection_modifyitems(config, items):
    """Mark the quick tier and the xdist groups (runs before ``-m`` and ``-k`` select), and count the
    whole suite's tests."""
    for item in items:
        if not any(item.get_closest_marker(m) for m in ("browser", "slow", "standalone")) and _quick(item.nodeid):
            item.add_marker(pytest.mark.quick)
        group = xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        if group is not None and group != scheduled_group(item.nodeid):
            config.stash.setdefault(GROUP_MISMATCHES, []).append(item.nodeid)
    if _collected_whole_suite(config):
        config.stash[SUITE_COUNTS] = suite_counts(items)


@pytest.fixture(scope="session")
def group_mismatches(request) -> list[str]:
    """The collected tests whose scheduled group is not their :func:`xdist_group` (see :data:`GROUPED_FILES`)."""
    return request.config.stash.get(GROUP_MISMATCHES, [])


@pytest.fixture(scope="session")
def collected_counts(request) -> dict[str, int] | None:
    """:func:`suite_counts` of this session's collection when it collected the whole suite, else None."""
    return request.config.stash.get(SUITE_COUNTS, None)


def pytest_configure(config):
    config.pluginmanager.register(SkipPolicy(), "stiefel_mini_skip_policy")


@pytest.fixture(scope="session")
def corpus_slice(tmp_path_factory):
    """A slice of the language-model corpus: the first 1,500 characters of every address, same names and
    split, for tests of what a runner does rather than of the text (the whole training split takes about
    20 s to encode). Point ``STIEFEL_MINI_SOTU`` at it (``lm_data.CORPUS_ENV``)."""
    from stiefel_mini.experiments.lm import data as lm_data

    folder = tmp_path_factory.mktemp("sotu")
    source = lm_data.corpus_dir()
    for name in lm_data.addresses(source):
        (folder / f"{name}.txt").write_text((source / f"{name}.txt").read_text(encoding="utf-8")[:1500],
                                            encoding="utf-8")
    return folder
