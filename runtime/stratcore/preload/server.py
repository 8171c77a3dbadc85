"""The preload server's program (``python server.py SOCKET MODULE...``, started by
``stratcore.preload.Preloader``): it imports the modules, then forks for every command it is
sent, and the fork becomes that command (``_become``): its arguments, environment, folder,
session and streams, a new ``__main__``. Before the command runs, the fork forks its rank
server (``_start_rank_server``), which forks for the ranks the command starts in turn.

The standard library only: it imports nothing of stratcore, so a fork starts with no more
imported than the preloaded modules. The messages both sides exchange (``encoded``,
``read_message``) live here, and ``stratcore.preload`` imports them.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

#: In a forked command's environment: its rank server, as "PID:SOCKET".
RANK_SERVER_ENV = "STRATCORE_PRELOAD_RANKS"
#: A variable every server starts with, whose room a fork fills with its own variables (``_show``).
SLOT = "STRATCORE_PRELOAD_SHOWN"
SLOT_SIZE = 4096
HEADER = struct.Struct("!I")
#: The most file descriptors a request passes: the standard streams and those a command is
#: to find at given numbers (``"fds"``: a process multiprocessing spawns reads its pipes there).
MAX_FDS = 16


def read_message(connection: socket.socket) -> dict[str, Any] | None:
    """One length-prefixed JSON message; None at the end of the stream."""
    data = _read_exactly(connection, HEADER.size)
    if data is None:
        return None
    body = _read_exactly(connection, HEADER.unpack(data)[0])
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


def encoded(message: dict[str, Any]) -> bytes:
    """``message`` as ``read_message`` reads it: its length, then its JSON."""
    data = json.dumps(message).encode()
    return HEADER.pack(len(data)) + data


def send_message(connection: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        connection.sendall(encoded(message))


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
                send_message(connection, {"status": os.waitstatus_to_exitcode(status)})
                connection.close()
        if listener.fileno() not in readable:
            continue
        connection, _ = listener.accept()
        try:
            header, fds, _, _ = socket.recv_fds(connection, HEADER.size, MAX_FDS)
            if len(header) < HEADER.size:
                header += _read_exactly(connection, HEADER.size - len(header)) or b""
            body = _read_exactly(connection, HEADER.unpack(header)[0])
            request = json.loads(body or b"null")
        except (OSError, ValueError, struct.error):
            connection.close()
            continue
        differing = [] if environment is None else _differing(request, environment, volatile)
        if differing:
            for fd in fds:
                os.close(fd)
            send_message(connection, {"refused": f"its environment differs in {differing}"})
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
        send_message(connection, {"pid": pid})
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
    was started with, the server's, which has a variable (``SLOT``) of spaces kept for them.
    Where they do not all fit, or the process has no /proc, it shows what it can."""
    try:
        raw = Path("/proc/self/environ").read_bytes()
        stat = Path("/proc/self/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (proc(5))
    except (OSError, ValueError, IndexError):
        return
    prefix = f"{SLOT}=".encode()
    offset = raw.find(prefix)
    if offset < 0 or end - start != len(raw):
        return
    room = len(prefix) + SLOT_SIZE
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
    _place(fds, request.get("fds", [0, 1, 2]))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if request.get("ranks"):
        _start_rank_server(request["ranks"], request.get("volatile", ()))
    if os.environ.get("PYTHONFAULTHANDLER"):
        faulthandler.enable()
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    argv = request["argv"]
    if argv[0] == "-c":
        # What `python -c CODE ARGS` runs: the code as __main__, the working folder first on
        # sys.path.
        sys.argv = ["-c", *argv[2:]]
        sys.path.insert(0, "")
        exec(compile(argv[1], "<string>", "exec"), main.__dict__)
        return
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


def _place(fds: Sequence[int], targets: Sequence[int]) -> None:
    """Give the received descriptors ``fds`` the numbers ``targets`` (the first three: the
    standard streams) and close the rest of their copies. They move above every number
    involved first, so that placing one never closes another that is yet to be placed."""
    import fcntl

    floor = max([*fds, *targets, 2]) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, floor) for fd in fds]
    for fd in fds:
        os.close(fd)
    for target, fd in zip(targets, moved, strict=True):
        os.dup2(fd, target)
        os.close(fd)


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
