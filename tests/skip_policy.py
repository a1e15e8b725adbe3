"""Skip policy: under CI (the environment variable ``CI`` set and not ``0`` / ``false``), a skipped
test fails the run unless its reason is on a short allow-list of optional extras.

Allowed: a missing optional package (one of ``OPTIONAL_MODULES``, the import names of the
``vision`` / ``hf`` / ``notebooks`` / ``book`` / ``test`` / ``bench`` extras of ``pyproject.toml``, and
``tomllib`` before Python 3.11), a missing GPU, and platform features torch does not offer
everywhere (``torch.compile``, the gloo backend). Anything else, in particular an ImportError of
``stiefel_mini`` itself, a missing results file or a browser test without a built book, fails.
Outside CI nothing changes except a summary section listing such skips.

``tests/conftest.py`` registers :class:`SkipPolicy`; ``tests/test_skip_policy.py`` runs it on toy
suites.
"""

from __future__ import annotations

import os
import re

import pytest

__all__ = ["SkipPolicy", "skip_is_allowed", "OPTIONAL_MODULES"]

OPTIONAL_MODULES = frozenset(
    {
        "torchvision", "PIL",  # vision
        "timm", "transformers",  # hf
        "matplotlib", "ipywidgets", "ipykernel", "geoopt", "geotorch",  # notebooks, bench
        "jupyter_book", "nbclient", "nbformat",  # book, test
        "playwright", "setuptools",  # test
        "tomllib",  # the standard library from Python 3.11 on
    }
)
ALLOWED_REASONS = (
    re.compile(r"\b(CUDA|GPU)\b"),
    re.compile(r"not supported on this Python / platform"),
    re.compile(r"torch\.distributed with gloo is not available"),
)
_IMPORT_REASONS = (
    re.compile(r"could not import '([\w.]+)'"),  # pytest.importorskip: module missing
    re.compile(r"module '([\w.]+)' has __version__"),  # pytest.importorskip: too old
)


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def skip_is_allowed(reason: str) -> bool:
    """Whether a skip with this reason is allowed under CI (see the module docstring)."""
    for pattern in _IMPORT_REASONS:
        match = pattern.search(reason)
        if match:
            return match.group(1).split(".")[0] in OPTIONAL_MODULES
    return any(p.search(reason) for p in ALLOWED_REASONS)


class SkipPolicy:
    """The pytest plugin: collects the skips that are not allowed, fails the run under CI and lists
    them in the terminal summary. Registered once per session by ``tests/conftest.py``."""

    def __init__(self) -> None:
        self.skips: list[tuple[str, str]] = []  # (node id, reason) of the skips not allowed

    def _record(self, report) -> None:
        if not report.skipped or hasattr(report, "wasxfail") or not isinstance(report.longrepr, tuple):
            return
        reason = report.longrepr[2]
        if not skip_is_allowed(reason):
            self.skips.append((report.nodeid, reason))

    def pytest_collectreport(self, report) -> None:
        self._record(report)  # a module skipped as a whole (module-level importorskip or skip)

    def pytest_runtest_logreport(self, report) -> None:
        self._record(report)

    def pytest_sessionfinish(self, session, exitstatus) -> None:
        if _ci() and self.skips and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.skips:
            return
        if _ci():
            terminalreporter.section("skipped outside the optional extras: CI fails", red=True)
        else:
            terminalreporter.section("skipped outside the optional extras (would fail under CI=1)")
        for nodeid, reason in self.skips:
            terminalreporter.line(f"{nodeid}: {reason}")
