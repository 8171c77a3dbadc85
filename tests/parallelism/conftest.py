"""Every test starts without cluster or rendezvous variables from the outside."""

from __future__ import annotations

import pytest
from stratcore import testing


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    testing.isolated_environment(monkeypatch)
