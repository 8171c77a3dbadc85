"""Settings of the runtime's tests (every folder below): they start real processes (2 ranks
over gloo on this machine's CPU), and each starts without cluster or rendezvous variables from
the outside.

The tests in this folder itself (launchers, rendezvous, errors, the strategy API) also start
their ranks as users' ranks start, without the suite's ``STRATLIB_RANK_PREFIX``; elsewhere a
module that needs that says so (``pytest.mark.usefixtures("ranks_as_users_start_them")``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from stratcore import testing

HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def _clean_environment(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """No cluster or rendezvous variables from the outside; in this folder's own modules, ranks
    start as users' do."""
    testing.isolated_environment(monkeypatch)
    if request.path.resolve().parent == HERE:
        request.getfixturevalue("ranks_as_users_start_them")
