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
variables, and starts fresh interpreters where not. /proc shows a fork's own environment
variables as it shows a fresh process's (``_show``), so that what finds a job's processes by
a variable of their environment finds forks too.

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
#: In a forked command's environment: its rank server, as "PID:SOCKET".
RANK_SERVER_ENV = "STRATCORE_PRELOAD_RANKS"
#: A variable every server starts with, whose room a fork fills with its own variables (``_show``).
_SLOT = "STRATCORE_PRELOAD_SHOWN"
_SLOT_SIZE = 4096
#: Servers a preloader keeps at once (each holds the preloaded modules' memory); the one used
#: longest ago, with no command running, makes way for a new one.
SERVERS = 3
_HEADER = struct.Struct("!I")


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
            env={**env, _SLOT: " " * _SLOT_SIZE},
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
                reply = _read_message(self._connection)
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
        self, command: Sequence[str], env: Mapping[str, str], volatile: Iterable[str]
    ) -> Forked | None:
        """Run ``command`` in a fork of the rank server, with this process's standard streams
        and working folder, as ``subprocess.Popen(command, env=env)`` would run it; None where
        the server cannot: the command is not this interpreter running a script or module, or
        ``env`` differs from the environment this process started with in more than the
        variables named ``volatile`` (the modules were imported under that one)."""
        argv = _runnable(command, os.getcwd())
        if argv is None:
            return None
        request = {
            "argv": argv,
            "env": {name: value for name, value in env.items() if name != RANK_SERVER_ENV},
            "cwd": os.getcwd(),
            "new_session": False,
            "volatile": sorted(volatile),
        }
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(self.path)
            socket.send_fds(connection, [_encoded(request)], [0, 1, 2])
            reply = _read_message(connection)
        except OSError:
            reply = None
        if reply is None or "pid" not in reply:
            connection.close()
            return None
        return Forked(list(command), int(reply["pid"]), connection)


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
    # Processes its forks leave behind (the rank server of a command that ended, ranks whose
    # command was killed) become this process's children rather than init's (Linux), so that
    # it reaps them and their CPU time counts as its own children's, as a fresh command's
    # children's does.
    _prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
    listener = _listen(path)
    print("ready", flush=True)
    forked = _fork_for_requests(listener, parent)
    if forked is None:
        sys.exit(0)  # the preloader is gone: nobody can start commands here any more
    return forked


def _listen(path: str) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    return listener


def _fork_for_requests(
    listener: socket.socket,
    parent: int,
    environment: Mapping[str, str] | None = None,
    volatile: Iterable[str] = (),
) -> tuple[dict[str, Any], list[int]] | None:
    """Fork for every request on ``listener`` while ``parent`` is this process's parent,
    reporting each fork's exit status to its requester; returns, in a fork, its request and
    streams, and in this process None once the parent is gone. With ``environment``, a
    request whose environment differs from it in more than the ``volatile`` variables and
    those the request calls volatile is refused."""
    # A child's end interrupts the wait below (a byte on this pipe), so its status goes out
    # at once.
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    waiting: dict[int, socket.socket] = {}
    while os.getppid() == parent:
        readable, _, _ = select.select([listener.fileno(), wake_read], [], [], 1.0)
        if wake_read in readable:
            os.read(wake_read, 4096)
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            connection = waiting.pop(pid, None)  # None: a process left to this one
            if connection is not None:
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
        differing = [] if environment is None else _differing(request, environment, volatile)
        if differing:
            for fd in fds:
                os.close(fd)
            _send_message(connection, {"refused": f"its environment differs in {differing}"})
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
    return None


def _differing(
    request: dict[str, Any], environment: Mapping[str, str], volatile: Iterable[str]
) -> list[str]:
    """The variables, but for ``volatile`` ones and those the request calls volatile, whose
    values differ between the request's environment and ``environment`` (or that one of them
    lacks)."""
    theirs: Mapping[str, str] = request["env"]
    names = (set(theirs) | set(environment)) - {*volatile, *request.get("volatile", ())}
    return sorted(name for name in names if theirs.get(name) != environment.get(name))


def _start_rank_server(path: str, volatile: Iterable[str]) -> None:
    """Fork this command's rank server (see ``RankServer``) before the command runs: it
    serves while this process lives and dies with it; the command finds it through
    ``RANK_SERVER_ENV``. It starts commands whose environment is this one but for the
    preloader's ``volatile`` variables and the launcher's own."""
    environment = dict(os.environ)
    listener = _listen(path)
    parent = os.getpid()
    pid = os.fork()
    if pid:
        listener.close()
        os.environ[RANK_SERVER_ENV] = f"{pid}:{path}"
        return
    # It ends with this process (Linux: the kernel kills it; elsewhere
    # ``_fork_for_requests`` sees within a second that its parent is gone), not before: the
    # command's last ranks may still be reporting how they ended. The preload server reaps it.
    _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the command ended before the request took effect
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):  # the command's streams stay the command's
        os.dup2(null, target)
    os.close(null)
    try:
        forked = _fork_for_requests(listener, parent, environment, volatile)
    except BaseException:  # never go on into the command this process was forked from
        os._exit(1)
    if forked is None:
        os._exit(0)
    _run_as_main(*forked)
    sys.exit(0)  # a rank that ran to its end; never the command this process was forked in


def _prctl(option: int, value: int) -> bool:
    """Linux's prctl(option, value); False where it is not there or fails."""
    try:
        import ctypes

        return int(ctypes.CDLL(None, use_errno=True).prctl(option, value)) == 0
    except (OSError, AttributeError):
        return False


def _show(environment: Mapping[str, str]) -> None:
    """Make /proc/PID/environ of this fork show ``environment``'s variables that the
    server's does not have, or has with other values: /proc shows the environment a process
    was started with, the server's, which has a variable (``_SLOT``) of spaces kept for them.
    Where they do not all fit, or the process has no /proc, it shows what it can."""
    try:
        raw = Path("/proc/self/environ").read_bytes()
        stat = Path("/proc/self/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (proc(5))
    except (OSError, ValueError, IndexError):
        return
    prefix = f"{_SLOT}=".encode()
    offset = raw.find(prefix)
    if offset < 0 or end - start != len(raw):
        return
    room = len(prefix) + _SLOT_SIZE
    original = {}
    for entry in raw[:offset].split(b"\0") + raw[offset + room :].split(b"\0"):
        name, equals, value = entry.decode(errors="replace").partition("=")
        if equals:
            original[name] = value
    blob = prefix + b"\0"
    for name, value in environment.items():
        if original.get(name) != value:
            entry = f"{name}={value}".encode() + b"\0"
            if len(blob) + len(entry) <= room:
                blob += entry
    import ctypes

    ctypes.memmove(start + offset, blob.ljust(room, b"\0"), room)


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
    _show(request["env"])
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if request.get("ranks"):
        _start_rank_server(request["ranks"], request.get("volatile", ()))
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
