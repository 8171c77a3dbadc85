"""The Horovod tests run on the real package, which .ci/horovod builds into the environment;
where it could not, they skip with the one-line reason it left there."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from stratcore.imports import module_available
from stratcore.testing import isolated_environment

#: Where .ci/horovod says why Horovod is not installed (the environment's folder).
UNAVAILABLE = Path(sys.prefix) / "horovod-unavailable"


def horovod_missing() -> str | None:
    """Why the real Horovod cannot run here, or None when it can."""
    if UNAVAILABLE.is_file():
        return UNAVAILABLE.read_text(encoding="utf-8").strip() or "Horovod could not be built"
    if not module_available("horovod.torch"):
        return "horovod.torch is not installed: `bash .ci/horovod` builds it for this torch"
    return None


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    isolated_environment(monkeypatch)


@pytest.fixture(scope="session")
def horovod() -> None:
    """Skip the calling test where the real Horovod is not installed, saying why."""
    reason = horovod_missing()
    if reason is not None:
        pytest.skip(reason)
