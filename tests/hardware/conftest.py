"""Every hardware test starts without cluster or rendezvous variables from the outside."""

from __future__ import annotations

import pytest
from stratcore.testing import isolated_environment


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    isolated_environment(monkeypatch)
