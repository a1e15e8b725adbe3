"""The CI skip policy of skip_policy.py, run in-process on toy suites with pytester."""

from __future__ import annotations

import pytest

from skip_policy import OPTIONAL_MODULES, skip_is_allowed

CONFTEST = '''
from skip_policy import SkipPolicy

def pytest_configure(config):
    config.pluginmanager.register(SkipPolicy(), "skip_policy_under_test")
'''

TOY = '''
import pytest

def test_passes():
    pass

def test_needs_a_gpu():
    pytest.skip("needs a CUDA GPU")

def test_needs_a_package():
    pytest.importorskip(MODULE)

@pytest.mark.xfail(reason="known")
def test_known_failure():
    assert False
'''


def _run(pytester, monkeypatch, ci, module="stiefel_mini_no_such_module", body=TOY):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_toy=body.replace("MODULE", repr(module)))
    return pytester.runpytest("-p", "no:cacheprovider")


def test_under_ci_a_skip_outside_the_extras_fails_the_run(pytester, monkeypatch):
    result = _run(pytester, monkeypatch, ci="true")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, skipped=2, xfailed=1)
    out = result.stdout.str()
    listed = out.split("skipped outside the optional extras: CI fails")[1]
    assert "test_toy.py::test_needs_a_package" in listed and "test_needs_a_gpu" not in listed


def test_under_ci_allowed_skips_pass(pytester, monkeypatch):
    optional = "pytest.skip(\"could not import 'geoopt': No module named 'geoopt'\")"
    result = _run(pytester, monkeypatch, ci="1", body=TOY.replace("pytest.importorskip(MODULE)", optional))
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1, skipped=2, xfailed=1)


@pytest.mark.parametrize("ci", [None, "0", "false"])
def test_outside_ci_skips_only_report(pytester, monkeypatch, ci):
    result = _run(pytester, monkeypatch, ci=ci)
    assert result.ret == pytest.ExitCode.OK
    assert "would fail under CI=1" in result.stdout.str()


def test_a_module_skipped_at_collection_counts(pytester, monkeypatch):
    body = 'import pytest\nattention = pytest.importorskip("stiefel_mini.no_such_module")\n\ndef test_x():\n    pass\n'
    result = _run(pytester, monkeypatch, ci="true", body=body)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "stiefel_mini.no_such_module" in result.stdout.str()


@pytest.mark.parametrize(
    "reason,allowed",
    [
        ("could not import 'matplotlib': No module named 'matplotlib'", True),
        ("module 'setuptools' has __version__ '59.6.0', required is: '64'", True),
        ("could not import 'stiefel_mini.attention': No module named 'stiefel_mini.attention'", False),
        ("could not import 'torch': No module named 'torch'", False),
        ("CUDA is not available", True),
        ("torch.compile (dynamo) is not supported on this Python / platform", True),
        ("no committed grokking results", False),
        ("the book is not built (_build/html missing)", False),
    ],
)
def test_allow_list(reason, allowed):
    assert skip_is_allowed(reason) is allowed


def test_the_package_itself_is_never_optional():
    assert "stiefel_mini" not in OPTIONAL_MODULES and "torch" not in OPTIONAL_MODULES
