"""Shared fixtures of the runtime tests: they start real processes (2 ranks over gloo on this
machine's CPU) the way users do."""

from __future__ import annotations

import pytest
from stratcore import testing


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch, ranks_as_users_start_them: None) -> None:
    """Every test starts without cluster or rendezvous variables from the outside, and its
    ranks start as users' ranks do (without the suite's STRATLIB_RANK_PREFIX)."""
    testing.isolated_environment(monkeypatch)
