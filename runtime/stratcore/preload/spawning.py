"""multiprocessing's 'spawn' start method, with the processes started by the rank server.

A process multiprocessing spawns is a fresh interpreter (``python -c 'from
multiprocessing.spawn import spawn_main; ...' --multiprocessing-fork``) that reads what to run
from a pipe: it imports torch again, seconds of CPU time a process. In a command a preloader
forked (``stratcore.preload``), ``spawned_from_rank_server`` has that same command line run in
a fork of the command's rank server instead, with the descriptors multiprocessing passes it
(the pipes, the resource tracker's) at the same numbers: the child reads the same data, runs
the same ``spawn_main`` and reports through the same pipes, but starts with the preloaded
modules imported. Where the rank server cannot run it (the environment changed since the
command started in more than the variables named volatile), the process is spawned as usual.
Outside a forked command nothing changes.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from multiprocessing import context, popen_spawn_posix, reduction, spawn, util
from typing import Any

from . import Forked, RankServer

_patching = threading.RLock()


class _RankServerPopen(popen_spawn_posix.Popen):
    """``popen_spawn_posix.Popen`` whose process the rank server starts where it can: the
    stdlib's ``_launch``, but for how the command line is started, and an exit status that
    the rank server reports (its fork is not this process's child, so ``waitpid`` cannot
    reap it)."""

    server: RankServer
    volatile: tuple[str, ...]
    _fds: list[int]  # the descriptors the process is to find (``popen_spawn_posix``)

    def _launch(self, process_obj: Any) -> None:
        from multiprocessing import resource_tracker

        self._forked: Forked | None = None
        tracker_fd = resource_tracker.getfd()
        assert tracker_fd is not None  # getfd starts the tracker where it is not running
        self._fds.append(tracker_fd)
        prep_data = spawn.get_preparation_data(process_obj._name)
        data = io.BytesIO()
        context.set_spawning_popen(self)
        try:
            reduction.dump(prep_data, data)
            reduction.dump(process_obj, data)
        finally:
            context.set_spawning_popen(None)
        parent_r = child_w = child_r = parent_w = None
        try:
            parent_r, child_w = os.pipe()
            child_r, parent_w = os.pipe()
            command = spawn.get_command_line(tracker_fd=tracker_fd, pipe_handle=child_r)
            self._fds.extend([child_r, child_w])
            # [interpreter, *options, "-c", code, "--multiprocessing-fork"]: the options repeat
            # the flags of this process, which started without options of its own in the
            # rank server's environment, so a fork of that server has them already.
            code = command[command.index("-c") :]
            forked = self.server.start(
                [sys.executable, *code], os.environ, self.volatile, self._fds
            )
            self._forked = forked
            if forked is not None:
                self.pid = forked.pid
            else:
                self.pid = util.spawnv_passfds(
                    os.fsencode(spawn.get_executable()), command, self._fds
                )
            self.sentinel = parent_r
            with open(parent_w, "wb", closefd=False) as pipe:
                pipe.write(data.getbuffer())
        finally:
            to_close = [fd for fd in (parent_r, parent_w) if fd is not None]
            self.finalizer = util.Finalize(self, _close, to_close)
            for fd in (child_r, child_w):
                if fd is not None:
                    os.close(fd)

    def poll(self, flag: int = os.WNOHANG) -> int | None:
        if self._forked is None:
            return super().poll(flag)
        if self.returncode is None:
            self.returncode = self._forked.poll() if flag == os.WNOHANG else self._forked.wait()
        return self.returncode


def _close(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


@contextlib.contextmanager
def spawned_from_rank_server(volatile: Iterable[str] = ()) -> Iterator[None]:
    """While it lasts, the processes this process spawns with multiprocessing's 'spawn'
    start method (``torch.multiprocessing.start_processes`` included) start as forks of its
    rank server, where their environment differs from the command's in no more than
    ``volatile`` variables (see the module). Elsewhere it changes nothing."""
    server = RankServer.of_this_process()
    if server is None or not hasattr(os, "fork"):
        yield
        return

    class Popen(_RankServerPopen):
        pass

    Popen.server = server
    Popen.volatile = tuple(volatile)
    with _patching:
        original = context.SpawnProcess.__dict__["_Popen"]
        context.SpawnProcess._Popen = staticmethod(Popen)  # type: ignore[method-assign]
        try:
            yield
        finally:
            context.SpawnProcess._Popen = original  # type: ignore[method-assign]
