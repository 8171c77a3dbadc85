"""Settings of the sharded-strategy tests."""

from __future__ import annotations

import pytest
from stratcore.testing import isolated_environment


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts without cluster or rendezvous variables from the outside."""
    isolated_environment(monkeypatch)
