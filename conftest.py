"""Settings for every test of this repository: tests/ and generated/tests/."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from stratcore import preload, watch
from stratcore.testing.environ import RUN_MARKER_ENV
from stratcore.wrappers.deepspeed_config import DS_ACCELERATOR_ENV

#: Variables that mark one test's processes or give one job its rendezvous, and DeepSpeed's
#: choice of accelerator (which its strategies set for their ranks, read when deepspeed is
#: imported): no import of a preloaded module reads them, so commands, and the ranks they
#: start, that differ only in them can start from one preload server.
VOLATILE = (RUN_MARKER_ENV, "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", DS_ACCELERATOR_ENV)


@pytest.fixture(scope="session", autouse=True)
def _preloaded_processes() -> Iterator[preload.Preloader | None]:
    """The commands tests start that import torch first (those that say so to
    ``stratcore.watch``) start from a fork of an interpreter that has imported it: importing
    torch anew in every one is most of the CPU time the suite spends (``stratcore.preload``;
    benchmarks: ``python -m benchmarks --only preload``). So do the ranks those commands start
    by running themselves again (stratcore's PopenLauncher; Lightning's, in the Lightning
    scenarios), from the rank server each forked command has; spawned ranks start fresh.
    STRATGEN_PRELOAD=0 starts every command and rank as a fresh interpreter."""
    if os.environ.get("STRATGEN_PRELOAD") == "0":
        yield None
        return
    preloader = preload.Preloader(volatile=VOLATILE)
    watch.use_preloader(preloader)
    yield preloader
    watch.use_preloader(None)
    preloader.close()
