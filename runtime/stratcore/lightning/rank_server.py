"""Lightning's launchers under a preloader: the ranks they start come from the rank server
(``ranks_from_rank_server``)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator, Sequence
from typing import Any

from .. import preload
from ..preload.spawning import spawned_from_rank_server

__all__ = ["LIGHTNING_RANK_VARIABLES", "ranks_from_rank_server"]

#: What Lightning's subprocess launchers set for the ranks they start, beside the script's
#: environment.
LIGHTNING_RANK_VARIABLES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "NODE_RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "PL_GLOBAL_SEED",
)


@contextlib.contextmanager
def ranks_from_rank_server() -> Iterator[None]:
    """While it lasts, in a process a preloader forked (``stratcore.preload``), the ranks
    Lightning's subprocess launchers (Trainer's and Fabric's) start by running the script
    again, and those its multiprocessing launchers spawn, start as forks of the process's rank
    server, where their environment allows it: the launchers' own logic runs unchanged, but
    the processes they start do not import torch and Lightning again. Elsewhere it changes
    nothing."""
    server = preload.RankServer.of_this_process()
    if server is None:
        yield
        return
    from lightning.fabric.strategies.launchers import subprocess_script as fabric_launcher
    from lightning.pytorch.strategies.launchers import subprocess_script as trainer_launcher

    def start(command: Sequence[str], env: dict[str, str], cwd: str | None = None) -> Any:
        forked = None
        if cwd is None:
            forked = server.start(command, env, LIGHTNING_RANK_VARIABLES)
        return forked or subprocess.Popen(command, env=env, cwd=cwd)

    launchers = (fabric_launcher, trainer_launcher)
    for launcher in launchers:
        launcher.subprocess = _WithPopen(start)  # type: ignore[attr-defined]
    try:
        with spawned_from_rank_server(LIGHTNING_RANK_VARIABLES):
            yield
    finally:
        for launcher in launchers:
            launcher.subprocess = subprocess  # type: ignore[attr-defined]


class _WithPopen:
    """The ``subprocess`` module with another ``Popen``, as a launcher module sees it."""

    def __init__(self, popen: Any) -> None:
        self.Popen = popen

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)
