"""Shared test settings.

Hypothesis profile ``stiefel_core`` (the default here): no per-example deadline (linear algebra on a
shared CPU has noisy timings), a modest number of examples so that the core suite stays well under
three minutes on two cores, and derandomized so that CI runs are reproducible. Run with
``--hypothesis-profile=thorough`` for a longer randomized search.

Skip policy (``skip_policy.py``): with the environment variable ``CI`` set, a skipped test fails
the run unless it skips for a missing optional extra (package, GPU, platform feature).
"""

from __future__ import annotations

import os

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


def pytest_configure(config):
    config.pluginmanager.register(SkipPolicy(), "stiefel_mini_skip_policy")
