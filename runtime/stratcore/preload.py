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
(under its environment), and the server's hash seed. The processes it starts in turn (the ranks
a launcher starts, say) are fresh interpreters, as they are without it. So callers opt in, per
command, for commands that import those modules anyway; a command that checks which modules a
process imports, or passes options to the interpreter, starts as usual. ``watch.Job`` uses the
preloader installed with ``watch.use_preloader``.

Needs fork, Unix sockets and file descriptor passing (Linux, macOS): elsewhere ``start``
returns None and the command starts as usual. The standard library only; this file is also the
server's program (``python preload.py SOCKET MODULE...``), which imports nothing of stratcore.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

#: Environment variables that differ from job to job and that nothing reads at start-up.
VOLATILE = ("PYTEST_CURRENT_TEST", "PYTHONFAULTHANDLER")
#: Servers a preloader keeps at once (each holds the preloaded modules' memory); the one used
#: longest ago, with no command running, makes way for a new one.
SERVERS = 3
_HEADER = struct.Struct("!I")


class Preloader:
    """Servers that run commands in forks of an interpreter with ``preload`` imported, one
    server per (preloaded modules, environment but for the ``volatile`` variables)."""

    def __init__(self, volatile: Iterable[str] = ()) -> None:
        self.volatile = frozenset((*VOLATILE, *volatile))
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
        request = {
            "argv": argv,
            "env": dict(env),
            "cwd": folder,
            "new_session": start_new_session,
        }
        try:
            forked = server.fork(list(command), request, streams)
        except OSError:
            return None  # the server ended meanwhile
        with self.lock:
            server.last_used = self.forked
            self.forked += 1
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


def _runnable(command: Sequence[str], cwd: str) -> list[str] | None:
    """The command's arguments after the interpreter, if it is this interpreter running a
    script (a file, found from ``cwd``) or ``-m module`` without interpreter options; else
    None."""
    words = [os.fspath(word) for word in command]
    if len(words) < 2 or words[0] != sys.executable:
        return None
    if words[1] == "-m":
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
            [sys.executable, __file__, str(path), *preload],
            env=env,
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
            socket.send_fds(connection, [_encoded(request)], list(fds))
            reply = _read_message(connection)
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
    status as ``Popen`` would: the exit code, or minus the signal that ended it."""

    def __init__(self, args: list[str], pid: int, connection: socket.socket, server: _Server):
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self.stdin: IO[bytes] | None = None
        self.stdout: IO[bytes] | None = None
        self.stderr: IO[bytes] | None = None
        self._connection = connection
        self._server = server

    def poll(self) -> int | None:
        return self._status(0.0)

    def wait(self, timeout: float | None = None) -> int:
        status = self._status(timeout)
        if status is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return status

    def _status(self, timeout: float | None) -> int | None:
        """The exit status, waiting at most ``timeout`` seconds for the server to report it."""
        if self.returncode is None:
            readable, _, _ = select.select([self._connection], [], [], timeout)
            if not readable:
                return None
            reply = _read_message(self._connection)
            # No report: the server was stopped while the command ran; it counts as killed.
            self.returncode = int(reply["status"]) if reply else -signal.SIGKILL
            self._connection.close()
            self._server.running.discard(self.pid)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _read_message(connection: socket.socket) -> dict[str, Any] | None:
    """One length-prefixed JSON message; None at the end of the stream."""
    data = _read_exactly(connection, _HEADER.size)
    if data is None:
        return None
    body = _read_exactly(connection, _HEADER.unpack(data)[0])
    return None if body is None else json.loads(body)


def _read_exactly(connection: socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = connection.recv(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _encoded(message: dict[str, Any]) -> bytes:
    """``message`` as ``_read_message`` reads it: its length, then its JSON."""
    data = json.dumps(message).encode()
    return _HEADER.pack(len(data)) + data


def _send_message(connection: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        connection.sendall(_encoded(message))


# --- the server -------------------------------------------------------------------------------


def _serve(path: str, preload: Sequence[str]) -> tuple[dict[str, Any], list[int]]:
    """Import ``preload``, then fork for every request until the parent ends; returns, in a
    fork, the request it is to run."""
    import importlib

    parent = os.getppid()
    for name in preload:
        importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    # A child's end interrupts the wait below (a byte on this pipe), so its status goes out
    # at once.
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    print("ready", flush=True)
    waiting: dict[int, socket.socket] = {}
    while os.getppid() == parent:
        readable, _, _ = select.select([listener.fileno(), wake_read], [], [], 1.0)
        if wake_read in readable:
            os.read(wake_read, 4096)
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            connection = waiting.pop(pid)
            _send_message(connection, {"status": os.waitstatus_to_exitcode(status)})
            connection.close()
        if listener.fileno() not in readable:
            continue
        connection, _ = listener.accept()
        try:
            header, fds, _, _ = socket.recv_fds(connection, _HEADER.size, 3)
            if len(header) < _HEADER.size:
                header += _read_exactly(connection, _HEADER.size - len(header)) or b""
            body = _read_exactly(connection, _HEADER.unpack(header)[0])
            request = json.loads(body or b"null")
        except (OSError, ValueError, struct.error):
            connection.close()
            continue
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for other in (listener, connection, *waiting.values()):
                other.close()
            os.close(wake_read)
            os.close(wake_write)
            return request, fds
        for fd in fds:
            os.close(fd)
        waiting[pid] = connection
        _send_message(connection, {"pid": pid})
    sys.exit(0)  # the preloader is gone: nobody can start commands here any more


def _become(request: dict[str, Any], fds: list[int]) -> None:
    """In a fork: turn into a fresh process running the request's command."""
    import builtins
    import faulthandler
    import runpy
    import types

    if request["new_session"]:
        os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if os.environ.get("PYTHONFAULTHANDLER"):
        faulthandler.enable()
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    argv = request["argv"]
    if argv[0] == "-m":
        sys.argv = ["-m", *argv[2:]]
        sys.path.insert(0, os.getcwd())
        # What `python -m` itself calls: the module runs as __main__, sys.argv[0] its file.
        runpy._run_module_as_main(argv[1], alter_argv=True)  # type: ignore[attr-defined]
        return
    script = argv[0]
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.realpath(script)))
    main.__dict__.update(__file__=script, __cached__=None, __package__=None, __spec__=None)
    with open(script, "rb") as source:
        code = compile(source.read(), script, "exec")
    exec(code, main.__dict__)


def _run_as_main(request: dict[str, Any], fds: list[int]) -> None:
    """``_become``, with an uncaught exception reported as a fresh interpreter reports it:
    its traceback without the frames of this file, exit status 1 (KeyboardInterrupt: ended by
    SIGINT)."""
    try:
        _become(request, fds)
    except SystemExit:
        raise
    except BaseException as error:
        trace = error.__traceback__
        while trace is not None and trace.tb_frame.f_code.co_filename == __file__:
            trace = trace.tb_next
        sys.excepthook(type(error), error.with_traceback(trace), trace)
        if isinstance(error, KeyboardInterrupt):
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        sys.exit(1)


if __name__ == "__main__":
    del sys.path[0]  # this file's folder: the preloaded modules import as anywhere else
    _run_as_main(*_serve(sys.argv[1], sys.argv[2:]))
