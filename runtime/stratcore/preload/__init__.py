"""Starting Python commands from an interpreter that has imported their heavy modules already.

``import torch`` takes seconds of CPU time on a small machine, and a test suite starts hundreds
of processes that import it first thing. A ``Preloader`` keeps a server process that has
imported such modules (``preload``, e.g. ``("torch",)``), waiting on a Unix socket; it runs
each command it is given in a fork of itself, the way ``python script.py ARGS`` or
``python -m module ARGS`` would run it in a fresh interpreter: the command's own arguments,
environment, working folder, session, standard streams and exit status, a new ``__main__``
module, its own ``sys.path[0]``, Python's fault handler as its environment says (and, as in
any fork, random generators of its own). A server serves only commands whose environment
equals the one it started with, but for the variables named ``volatile`` (markers that differ
from job to job, which no import reads); a command in another environment gets a server of its
own.

What a forked command finds that a fresh one would not: the preloaded modules imported already
(under its environment), and the server's hash seed. So callers opt in, per command, for
commands that import those modules anyway; a command that checks which modules a process
imports, or passes options to the interpreter, starts as usual. ``watch.Job`` uses the
preloader installed with ``watch.use_preloader``.

The ranks a forked command starts as copies of itself (``PopenLauncher``) start the same way:
before the command runs, its process forks a *rank server*, a copy of the server's state in the
command's session and process group that dies with it (``RankServer``); the launcher asks it
for ranks 1..n-1 where their environment is the command's but for the launcher's own
variables, and starts fresh interpreters where not; the processes the command spawns with
multiprocessing's 'spawn' start there too (``stratcore.preload.spawning``). /proc shows a
fork's own environment variables as it shows a fresh process's, so that what finds a job's
processes by a variable of their environment finds forks too.

Needs fork, Unix sockets and file descriptor passing (Linux, macOS): elsewhere ``start``
returns None and the command starts as usual. The standard library only; the server's program
is ``stratcore/preload/server.py``, which imports nothing of stratcore.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from . import server as server_program
from .server import MAX_FDS, RANK_SERVER_ENV, SLOT, SLOT_SIZE, encoded, read_message

#: Environment variables that differ from job to job and that nothing reads at start-up.
VOLATILE = ("PYTEST_CURRENT_TEST", "PYTHONFAULTHANDLER")
#: What a process that trains imports: torch, and torch._dynamo, which torch imports when the
#: process creates its first optimizer (about as much CPU time again as torch itself).
TORCH = ("torch", "torch._dynamo")
#: Servers a preloader keeps at once (each holds the preloaded modules' memory); the one used
#: longest ago, with no command running, makes way for a new one.
SERVERS = 3


class Preloader:
    """Servers that run commands in forks of an interpreter with ``preload`` imported, one
    server per (preloaded modules, environment but for the ``volatile`` variables)."""

    def __init__(self, volatile: Iterable[str] = (), ranks: bool = True) -> None:
        self.volatile = frozenset((*VOLATILE, *volatile))
        #: Whether the commands' ranks start from rank servers (else as fresh interpreters).
        self.ranks = ranks
        self.folder = Path(tempfile.mkdtemp(prefix="stratcore-preload-"))
        self.servers: dict[Any, _Server] = {}
        self.refused: set[Any] = set()
        self.lock = threading.Lock()
        #: How many commands started forked, and how many servers were started for them.
        self.forked = 0
        self.started = 0

    def start(
        self,
        command: Sequence[str],
        preload: Sequence[str],
        env: Mapping[str, str],
        cwd: str | os.PathLike[str] | None,
        streams: tuple[int, int, int],
        start_new_session: bool = False,
        markers: Iterable[str] = (),
    ) -> Forked | None:
        """Run ``command`` in a fork of a server with ``preload`` imported, its stdin, stdout
        and stderr the file descriptors ``streams`` (which the caller still closes); None
        where that cannot be done (another interpreter, interpreter options, no fork here),
        and the caller starts it as usual. ``markers``: variables of ``env`` that mark this
        one job, volatile like the preloader's own."""
        folder = os.fspath(cwd) if cwd is not None else os.getcwd()
        argv = _runnable(command, folder)
        if argv is None or not preload or not hasattr(os, "fork"):
            return None
        volatile = self.volatile.union(markers)
        kept = {name: value for name, value in env.items() if name not in volatile}
        key = (tuple(preload), tuple(sorted(kept.items())))
        with self.lock:
            if key in self.refused:
                return None
            server = self.servers.get(key)
            if server is None or not server.alive():
                server = self._new_server(key, preload, kept)
                if server is None:
                    return None
        with self.lock:
            number = self.forked
            self.forked += 1
        request = {
            "argv": argv,
            "env": dict(env),
            "cwd": folder,
            "new_session": start_new_session,
            "ranks": str(self.folder / f"ranks{number}.sock") if self.ranks else None,
            "volatile": sorted(volatile),
        }
        try:
            forked = server.fork(list(command), request, streams)
        except OSError:
            with self.lock:
                self.forked -= 1
            return None  # the server ended meanwhile
        with self.lock:
            server.last_used = number
        return forked

    def _new_server(self, key: Any, preload: Sequence[str], env: dict[str, str]) -> _Server | None:
        idle = [k for k, s in self.servers.items() if not s.running]
        while len(self.servers) >= SERVERS and idle:
            oldest = min(idle, key=lambda k: self.servers[k].last_used)
            idle.remove(oldest)
            self.servers.pop(oldest).close()
        path = self.folder / f"server{self.started}.sock"
        self.started += 1
        server = _Server.start(path, preload, env)
        if server is None:
            self.refused.add(key)  # the modules do not import there: every command starts anew
            return None
        self.servers[key] = server
        return server

    def close(self) -> None:
        """Stop every server (commands still running go on, their exit status unreported)."""
        with self.lock:
            for server in self.servers.values():
                server.close()
            self.servers.clear()
        with contextlib.suppress(OSError):
            for entry in self.folder.iterdir():
                entry.unlink()
            self.folder.rmdir()


def _runnable(command: Sequence[str], cwd: str, code: bool = False) -> list[str] | None:
    """The command's arguments after the interpreter, if it is this interpreter running a
    script (a file, found from ``cwd``), ``-m module`` or, with ``code``, ``-c code``, without
    interpreter options; else None."""
    words = [os.fspath(word) for word in command]
    if len(words) < 2 or words[0] != sys.executable:
        return None
    if words[1] == "-m" or (code and words[1] == "-c"):
        return words[1:] if len(words) >= 3 else None
    if words[1].startswith("-") or not os.path.isfile(os.path.join(cwd, words[1])):
        return None
    return words[1:]


class _Server:
    """One server process and the socket it listens on."""

    def __init__(self, process: subprocess.Popen[bytes], path: Path) -> None:
        self.process = process
        self.path = path
        self.running: set[int] = set()
        self.last_used = 0

    @classmethod
    def start(cls, path: Path, preload: Sequence[str], env: dict[str, str]) -> _Server | None:
        """Start a server and wait until it has imported ``preload``; None if it could not."""
        process = subprocess.Popen(
            [sys.executable, server_program.__file__, str(path), *preload],
            env={**env, SLOT: " " * SLOT_SIZE},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert process.stdout is not None
        ready = process.stdout.readline()  # an import ends, or the process does (b"")
        process.stdout.close()
        if ready.strip() != b"ready":
            process.kill()
            process.wait()
            return None
        return cls(process, path)

    def alive(self) -> bool:
        return self.process.poll() is None

    def fork(self, args: list[str], request: dict[str, Any], fds: tuple[int, ...]) -> Forked:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(str(self.path))
            socket.send_fds(connection, [encoded(request)], list(fds))
            reply = read_message(connection)
        except BaseException:
            connection.close()
            raise
        if reply is None or "pid" not in reply:
            connection.close()
            raise OSError(f"the preload server did not start the command: {reply}")
        forked = Forked(args, int(reply["pid"]), connection, self)
        self.running.add(forked.pid)
        return forked

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()
        self.process.wait()


class Forked:
    """A command running in a fork of a preload server: what ``watch.Job`` uses of a
    ``subprocess.Popen`` (``args``, ``pid``, ``returncode``, ``poll``, ``wait``,
    ``send_signal``, ``kill``; its streams are the caller's). The server reports its exit
    status as ``Popen`` would: the exit code, or minus the signal that ended it. Threads may
    poll and wait at once (a launcher's watchdog and its main thread do)."""

    def __init__(
        self, args: list[str], pid: int, connection: socket.socket, server: _Server | None = None
    ) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self.stdin: IO[bytes] | None = None
        self.stdout: IO[bytes] | None = None
        self.stderr: IO[bytes] | None = None
        self._connection = connection
        self._server = server
        self._reading = threading.Lock()

    def poll(self) -> int | None:
        return self._status(0.0)

    def wait(self, timeout: float | None = None) -> int:
        status = self._status(timeout)
        if status is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return status

    def _status(self, timeout: float | None) -> int | None:
        """The exit status, waiting at most ``timeout`` seconds for the server to report it
        (None: not yet, or another thread is waiting for it)."""
        if self.returncode is not None:
            return self.returncode
        if not self._reading.acquire(timeout=-1 if timeout is None else timeout):
            return None
        try:
            if self.returncode is None:
                readable, _, _ = select.select([self._connection], [], [], timeout)
                if not readable:
                    return None
                reply = read_message(self._connection)
                # No report: the server was stopped while the command ran; it counts as killed.
                self.returncode = int(reply["status"]) if reply else -signal.SIGKILL
                self._connection.close()
                if self._server is not None:
                    self._server.running.discard(self.pid)
        finally:
            self._reading.release()
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class RankServer:
    """The rank server of a command a preloader forked (see the module): it starts the other
    ranks of the command's job as forks of the state the command started from."""

    def __init__(self, pid: int, path: str) -> None:
        self.pid = pid
        self.path = path

    @classmethod
    def of_this_process(cls) -> RankServer | None:
        """This process's rank server; None in a process no preloader forked."""
        pid, _, path = os.environ.get(RANK_SERVER_ENV, "").partition(":")
        if not pid.isdigit() or not path:
            return None
        return cls(int(pid), path)

    def start(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        volatile: Iterable[str],
        pass_fds: Sequence[int] = (),
    ) -> Forked | None:
        """Run ``command`` in a fork of the rank server, with this process's standard streams
        and working folder, as ``subprocess.Popen(command, env=env, pass_fds=pass_fds)``
        would run it; None where the server cannot: the command is not this interpreter
        running a script, module or ``-c`` code, or ``env`` differs from the environment this
        process started with in more than the variables named ``volatile`` (the modules were
        imported under that one)."""
        argv = _runnable(command, os.getcwd(), code=True)
        if argv is None or len(pass_fds) > MAX_FDS - 3:
            return None
        request = {
            "argv": argv,
            "env": {name: value for name, value in env.items() if name != RANK_SERVER_ENV},
            "cwd": os.getcwd(),
            "new_session": False,
            "volatile": sorted(volatile),
            "fds": [0, 1, 2, *pass_fds],
        }
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(self.path)
            socket.send_fds(connection, [encoded(request)], [0, 1, 2, *pass_fds])
            reply = read_message(connection)
        except OSError:
            reply = None
        if reply is None or "pid" not in reply:
            connection.close()
            return None
        return Forked(list(command), int(reply["pid"]), connection)
