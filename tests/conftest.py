"""Settings shared by the generator's tests (tests/runtime and tests/hardware have their own)."""

from __future__ import annotations

import os

import pytest
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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``long(seconds=N)`` run first, longest first.

    CI runs two workers with ``--dist worksteal``: each starts on half of the list and the one
    that runs out takes over half of what the other has left. With the long tests first, what
    is left at the end is short, so neither worker waits alone for a five-minute test. The
    sort is stable, so a module's tests stay together and its module fixtures are built once.
    """
    items.sort(key=lambda item: -_expected_seconds(item))


def _expected_seconds(item: pytest.Item) -> float:
    marker = item.get_closest_marker("long")
    return float(marker.kwargs["seconds"]) if marker is not None else 0.0
