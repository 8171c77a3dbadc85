"""The whole suite's settings.

The ranks that PopenLauncher starts in the tests' jobs are forks of a process that has already
imported torch (tests/support/rankfork.py), reached through the launcher's documented prefix,
STRATLIB_RANK_PREFIX. The tests of the launchers themselves (tests/runtime,
tests/runtime/checkpoints/test_launch_fixes.py) remove it: there, ranks start as users' ranks do.

Every process the tests start has a temporary folder of the session's as its TMPDIR, removed when
the session ends: several tests kill a launching process on purpose (SIGKILL leaves no chance to
clean up), and the engines under test keep files of a failed job (torch.multiprocessing's error
files, torchelastic's folders); none of it stays in the machine's /tmp. pytest's own temporary
folders (``tmp_path``) stay where pytest keeps them.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from stratcore.launchers.base import RANK_PREFIX_ENV

_spec = importlib.util.spec_from_file_location(
    "rankfork", Path(__file__).parent / "tests" / "support" / "rankfork.py"
)
assert _spec is not None and _spec.loader is not None
rankfork = importlib.util.module_from_spec(_spec)
sys.modules["rankfork"] = rankfork  # tests/test_rankfork.py imports this same module
_spec.loader.exec_module(rankfork)

if rankfork.FOLDER_ENV not in os.environ:
    # The first pytest process: pytest-xdist's workers inherit the folders and the servers.
    # This process keeps the machine's temporary folder (tempfile remembers it from the first
    # mkdtemp), so pytest's own folders stay there; the processes it starts use the session's.
    temporary = tempfile.mkdtemp(prefix="stratgen-tests-")
    atexit.register(shutil.rmtree, temporary, ignore_errors=True)
    os.environ["TMPDIR"] = temporary
    folder = tempfile.mkdtemp(prefix="stratgen-rank-forks-")
    os.environ[rankfork.FOLDER_ENV] = folder
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    rankfork.host(folder)
    os.environ[RANK_PREFIX_ENV] = shlex.join([sys.executable, str(_spec.origin)])


@pytest.fixture
def ranks_as_users_start_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """For the launchers' own tests: ranks start without the suite's prefix."""
    monkeypatch.delenv(RANK_PREFIX_ENV, raising=False)
