"""Shared test settings.

Hypothesis profile ``stiefel_core`` (the default here): no per-example deadline (linear algebra on a
shared CPU has noisy timings), a modest number of examples so that the core suite stays well under
three minutes on two cores, and derandomized so that CI runs are reproducible. Run with
``--hypothesis-profile=thorough`` for a longer randomized search.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

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
