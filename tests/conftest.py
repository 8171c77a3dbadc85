"""Settings shared by the generator's tests (tests/runtime and tests/hardware have their own)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from stratcore import testing

# Scenarios and assertions of the runtime's test support name strategies of stratlib.
testing.use_package("stratlib")

# Fixture projects and golden trees contain generated test modules: they are data here.
collect_ignore_glob = ["fixtures/*", "golden/*"]

settings.register_profile(
    "stratgen",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    print_blob=True,
)
settings.register_profile(
    "stratgen-long",
    parent=settings.get_profile("stratgen"),
    max_examples=1000,
)
settings.load_profile(os.environ.get("STRATGEN_HYPOTHESIS_PROFILE", "stratgen"))
