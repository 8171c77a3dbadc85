"""A pytest plugin: the commands a test session starts that import torch first start from a
fork of an interpreter that has imported it (``stratcore.preload``).

Importing torch anew in every command is most of the CPU time a suite of real runs spends. With
this plugin, the commands tests start through ``stratcore.watch`` naming modules to preload
(the scenarios of ``stratcore.testing`` and ``stratcore.lightning.testing`` do) start from a
preload server, and so do the ranks those commands start by running themselves again
(stratcore's PopenLauncher; Lightning's, in the Lightning scenarios) or by spawning them
(``stratcore.preload.spawning``), from the rank server each forked command has. What the tests
assert does not change.

Use it with ``pytest -p stratcore.testing.preloading`` (``OPTIONS``), or ``pytest_plugins`` in
a top-level conftest.py. ``STRATGEN_PRELOAD=0`` starts every command and rank as a fresh interpreter.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from .. import preload, watch
from ..wrappers.deepspeed_config import DS_ACCELERATOR_ENV
from .environ import RUN_MARKER_ENV

#: The options that load this plugin into a pytest run: ``pytest *OPTIONS ...``.
OPTIONS = ("-p", __name__)
#: Variables that mark one test's processes or give one job its rendezvous, and DeepSpeed's
#: choice of accelerator (which its strategies set for their ranks, read when deepspeed is
#: imported): no import of a preloaded module reads them, so commands, and the ranks they
#: start, that differ only in them can start from one preload server.
VOLATILE = (RUN_MARKER_ENV, "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", DS_ACCELERATOR_ENV)


@pytest.fixture(scope="session", autouse=True)
def preloaded_processes() -> Iterator[preload.Preloader | None]:
    """The session's preloader (None with ``STRATGEN_PRELOAD=0``), closed at its end."""
    if os.environ.get("STRATGEN_PRELOAD") == "0":
        yield None
        return
    preloader = preload.Preloader(volatile=VOLATILE)
    previous = watch.use_preloader(preloader)
    try:
        yield preloader
    finally:
        watch.use_preloader(previous)
        preloader.close()
