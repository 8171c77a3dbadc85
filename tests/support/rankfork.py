"""Starts the ranks of the suite's jobs as forks of a process that has already imported torch.

Every rank PopenLauncher starts is a fresh interpreter that imports torch and torch._dynamo
(which torch's optimizers import): about four CPU-seconds, and the suite starts a couple of
hundred such ranks on a two-core machine (forking them takes about a fifth off the jobs that
start ranks, about a minute off the whole suite there). The suite's conftest sets the launcher's documented prefix
(``STRATLIB_RANK_PREFIX``) to ``python tests/support/rankfork.py``, so that a rank's command
line ``python script.py args`` becomes ``python tests/support/rankfork.py python script.py
args``:

- this program, the *client*, runs in the rank's place (it is what the launcher waits for and
  signals) and imports nothing but the standard library;
- it asks a *server* for its environment (one per set of the variables that shape an import of
  torch and per set of modules it imports first, ``PRELOADS``; started on the first client's
  request by the *host*, the pytest process that ran the conftest) to fork a child that runs
  the command as a fresh interpreter would (``__main__``, ``sys.argv``, ``sys.path``, the
  environment, the working directory, the client's standard streams, an uncaught error through
  ``sys.excepthook``, non-daemon threads and ``atexit`` handlers at the end), and ends with the
  child's exit status. A client killed takes its child with it.

Anything else runs the command itself (``os.execv``): a command that is not ``python script``
or ``python -m module`` of this interpreter, or no host. The launchers' own tests (tests/runtime,
tests/runtime/checkpoints/test_launch_fixes.py) run without the prefix: ranks there start the way users'
ranks do. tests/test_rankfork.py holds a forked script to what a fresh interpreter does.

What differs from a fresh interpreter, by construction: the rank is the server's child (the
client lives as long as the rank, and killing it kills the rank); its command line in /proc is
the server's (its initial environment there is its own: the child writes it in the place the
server's was, so that stratcore.testing.watch finds the job's marker in it); and str hashes use the
server's seed, not one of its own.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Any

#: The folder where the servers listen (one socket per environment); set by the conftest.
FOLDER_ENV = "STRATGEN_RANK_FORKS"
#: The host's socket in the folder.
HOST_SOCKET = "host.sock"
#: Variables that shape what importing torch (and the stand-ins' sitecustomize) does: a server
#: serves only clients whose values of these equal its own. Names starting so, or equal.
SHAPING_PREFIXES = (
    "TORCH",
    "PYTORCH",
    "STANDIN_",
    "STRATGEN_TESTDEVICE",
    "OMP_",
    "MKL_",
    "KMP_",
    "PYTHON",
    "LD_",
)
SHAPING_NAMES = ("CUDA_VISIBLE_DEVICES", "HOME", "TMPDIR", "LANG", "LC_ALL", "LC_CTYPE")
#: What a server imports once, for every child: torch, or for the first process of a Lightning
#: job (``stratcore.testing.lightning.program``) Lightning too, which takes longer than torch.
PRELOADS = {
    "torch": ("torch", "torch._dynamo", "torch.distributed"),
    "lightning": ("torch", "torch._dynamo", "torch.distributed", "lightning"),
}
#: A variable that only holds room: a server starts with it, so that the place where /proc shows
#: a process's initial environment is large enough for a child's (``_show_environment``).
ROOM_ENV = "RANKFORK_ROOM"
#: Its size in bytes (a single variable may hold up to 128 KiB on Linux).
ROOM = 120_000


def _shaping(env: dict[str, str]) -> dict[str, str]:
    shaping = {
        name: value
        for name, value in env.items()
        if name.startswith(SHAPING_PREFIXES) or name in SHAPING_NAMES
    }
    # Of the import path, only folders whose start-up modules run when Python starts matter
    # (the hardware stand-ins' sitecustomize); the others are applied to each child.
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    shaping["PYTHONPATH"] = os.pathsep.join(
        p
        for p in paths
        if any(
            os.path.isfile(os.path.join(p, f"{n}.py")) for n in ("sitecustomize", "usercustomize")
        )
    )
    return shaping


#: The module the first process of a Lightning job runs (``stratcore.testing.lightning.runner``).
LIGHTNING_PROGRAM = "stratcore.testing.lightning.program"


def _preload(kind: str, target: str) -> str:
    """Which of ``PRELOADS`` a server for this command holds."""
    return "lightning" if kind == "module" and target == LIGHTNING_PROGRAM else "torch"


def _parse(command: list[str]) -> tuple[str, str, list[str]] | None:
    """('path', script, argv) or ('module', name, argv) for a command this program can fork,
    else None."""
    if len(command) < 2 or os.path.realpath(command[0]) != os.path.realpath(sys.executable):
        return None
    if command[1] == "-m" and len(command) >= 3:
        return "module", command[2], ["-m", *command[3:]]
    if command[1].startswith("-"):
        return None
    return "path", command[1], command[1:]


# -- messages: a 4-byte length, then JSON -------------------------------------------------


def _send(connection: socket.socket, message: dict[str, Any], fds: tuple[int, ...] = ()) -> None:
    data = json.dumps(message).encode()
    frame = struct.pack("!I", len(data)) + data
    if fds:
        socket.send_fds(connection, [frame], list(fds))
    else:
        connection.sendall(frame)


def _receive(connection: socket.socket, with_fds: bool = False) -> tuple[dict[str, Any], list[int]]:
    fds: list[int] = []
    if with_fds:
        head, fds, _flags, _address = socket.recv_fds(connection, 4, 3)
    else:
        head = connection.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        raise EOFError
    (size,) = struct.unpack("!I", head)
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return json.loads(data), fds


# -- client -------------------------------------------------------------------------------


def _connect(folder: str, env: dict[str, str], preload: str) -> socket.socket:
    """A connection to the server for ``env`` that holds ``preload``, which the host starts if
    it is not running."""
    shaping = _shaping(env)
    key = hashlib.sha256(json.dumps([shaping, preload], sort_keys=True).encode()).hexdigest()[:20]
    path = os.path.join(folder, f"{key}.sock")
    with contextlib.suppress(OSError):
        return _dial(path)
    server_env = {**shaping, "PATH": env.get("PATH", os.defpath)}
    with _dial(os.path.join(folder, HOST_SOCKET)) as host:
        _send(host, {"path": path, "env": server_env, "preload": preload})
        if not _receive(host)[0]["ready"]:
            raise OSError(f"the server for {path} ended before it was ready")
    return _dial(path)


def _dial(path: str) -> socket.socket:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(path)
    except OSError:
        connection.close()
        raise
    return connection


def client(command: list[str]) -> None:
    parsed = _parse(command)
    folder = os.environ.get(FOLDER_ENV)
    if parsed is None or not folder or not os.path.isdir(folder):
        os.execv(command[0], command)
    kind, target, argv = parsed
    env = dict(os.environ)
    try:
        connection = _connect(folder, env, _preload(kind, target))
    except OSError:
        os.execv(command[0], command)
    request = {"kind": kind, "target": target, "argv": argv, "env": env, "cwd": os.getcwd()}
    _send(connection, request, (0, 1, 2))
    child = _receive(connection)[0]["pid"]

    def forward(signum: int, _frame: Any) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, forward)
    try:
        status = _receive(connection)[0]["status"]
    except (EOFError, OSError):
        sys.exit(1)  # the server went away with the child
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    sys.exit(os.waitstatus_to_exitcode(status))


# -- host -------------------------------------------------------------------------------


def host(folder: str) -> None:
    """Start the servers that clients ask for from this process (a thread listening on
    ``folder``/host.sock), one at a time: they are its children, so their CPU time and their
    forks' count in its own when it ends, and it ends them when it ends."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(os.path.join(folder, HOST_SOCKET))
    listener.listen(64)
    servers: dict[str, subprocess.Popen[bytes]] = {}

    def start_servers() -> None:
        while True:
            connection, _address = listener.accept()
            with connection:
                request = _receive(connection)[0]
                path = request["path"]
                if path not in servers or servers[path].poll() is not None:
                    servers[path] = subprocess.Popen(
                        [
                            sys.executable,
                            os.path.abspath(__file__),
                            "--serve",
                            path,
                            request["preload"],
                        ],
                        env={**request["env"], ROOM_ENV: "." * ROOM},
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        start_new_session=True,
                        cwd="/",
                    )
                # The server binds its socket once it has imported torch.
                while not os.path.exists(path) and servers[path].poll() is None:
                    time.sleep(0.05)
                _send(connection, {"ready": os.path.exists(path)})

    def end_servers() -> None:
        for server in servers.values():
            server.terminate()
        for server in servers.values():
            server.wait()

    threading.Thread(target=start_servers, name="rank-fork-host", daemon=True).start()
    atexit.register(end_servers)


# -- server -------------------------------------------------------------------------------


def serve(path: str, preload: str) -> None:
    import importlib

    for name in PRELOADS[preload]:
        importlib.import_module(name)
    host = os.getppid()  # a server ends with the host that started it
    base_path = _base_sys_path()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    partial = f"{path}.{os.getpid()}"
    listener.bind(partial)
    listener.listen(64)
    os.rename(partial, path)
    # A child's end wakes the loop: SIGCHLD writes to this pair (Python's wakeup fd).
    wake_read, wake_write = socket.socketpair()
    for end in (wake_read, wake_write):
        end.setblocking(False)
    signal.set_wakeup_fd(wake_write.fileno())
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}  # child pid -> its client's connection
    try:
        while True:
            for key, _events in selector.select(timeout=1.0):
                if key.fileobj is wake_read:
                    with contextlib.suppress(BlockingIOError):
                        wake_read.recv(4096)
                elif key.fileobj is listener:
                    connection, _address = listener.accept()
                    others = [listener, wake_read, wake_write, *children.values()]
                    pid = _start(connection, others, selector, base_path)
                    if pid is None:
                        connection.close()
                        continue
                    children[pid] = connection
                    selector.register(connection, selectors.EVENT_READ, pid)
                else:  # a client went away (killed): its child goes too
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(key.data, signal.SIGKILL)
                    selector.unregister(key.fileobj)
            while children:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                if pid not in children:
                    continue
                connection = children.pop(pid)
                with contextlib.suppress(KeyError):
                    selector.unregister(connection)
                with contextlib.suppress(OSError):
                    _send(connection, {"status": status})
                connection.close()
            if not children and os.getppid() != host:
                return
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _base_sys_path() -> list[str]:
    """This process's import path without its own folder and its PYTHONPATH: what every child
    has after its script's folder and its own PYTHONPATH."""
    own = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    rest = list(sys.path[1:])
    for entry in own:
        absolute = os.path.abspath(entry)
        for candidate in (entry, absolute):
            if candidate in rest:
                rest.remove(candidate)
                break
    return rest


def _start(
    connection: socket.socket,
    others: list[socket.socket],
    selector: selectors.BaseSelector,
    base_path: list[str],
) -> int | None:
    """Fork a child for the request on ``connection``; ``others`` are the server's sockets,
    which the child closes. Returns the child's pid, or None for a broken request."""
    try:
        request, fds = _receive(connection, with_fds=True)
    except (EOFError, OSError, ValueError):
        return None
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        _send(connection, {"pid": pid})
        return pid
    # The child: the rank.
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        selector.close()
        for end in (connection, *others):
            end.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        _become(request, base_path)
    except BaseException:
        import traceback

        traceback.print_exc()
        os._exit(1)
    os._exit(_run(request))


def _become(request: dict[str, Any], base_path: list[str]) -> None:
    """Turn this fork into what a fresh ``python`` with the request's command line would be."""
    import random
    import types

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    _show_environment(request["env"])
    if request["kind"] == "path":
        first = os.path.dirname(os.path.abspath(request["target"]))
    else:
        first = os.getcwd()
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [first, *[os.path.abspath(p) for p in paths], *base_path]
    sys.argv[:] = request["argv"]
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main


def _show_environment(env: dict[str, str]) -> None:
    """Write ``env`` where /proc/<pid>/environ reads a process's initial environment: the
    server's strings, in this process's own memory (as setproctitle rewrites a command line).
    There, stratcore.testing.watch finds the job's marker in it and counts the rank's CPU time as the
    job's progress, and finds it if it outlives its job. Called once ``os.environ`` no longer
    points into that place. Variables that do not fit in it are left out, the markers last."""
    import ctypes

    try:
        with open("/proc/self/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end: fields 50 and 51
    except (OSError, IndexError, ValueError):
        return
    marks = ("STRATCORE_WATCH_", "STRATLIB_TEST_RUN")  # the watch's and the tests' markers
    entries = sorted(env.items(), key=lambda item: not item[0].startswith(marks))
    data = b""
    for name, value in entries:
        entry = os.fsencode(f"{name}={value}") + b"\0"
        if len(data) + len(entry) <= end - start:
            data += entry
    ctypes.memmove(start, data.ljust(end - start, b"\0"), end - start)


def _run(request: dict[str, Any]) -> int:
    """Run the request's script or module in ``__main__`` and end as the interpreter ends: the
    exit code, with an uncaught error shown through ``sys.excepthook`` and kept in
    ``sys.last_value``, non-daemon threads joined and ``atexit`` handlers run."""
    import atexit
    import runpy
    import threading

    code = 0
    try:
        if request["kind"] == "module":
            runpy._run_module_as_main(request["target"])  # type: ignore[attr-defined]
        else:
            main = sys.modules["__main__"]
            target = request["target"]
            main.__dict__.update(__file__=target, __spec__=None, __cached__=None)
            with open(target, "rb") as handle:
                source = handle.read()
            exec(compile(source, target, "exec"), main.__dict__)
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:
        trace = exc.__traceback__
        if trace is not None and trace.tb_frame.f_code.co_filename == __file__:
            trace = trace.tb_next  # this function's frame: a fresh interpreter has none
            exc.with_traceback(trace)  # what sys.excepthook prints
        sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, trace
        sys.excepthook(type(exc), exc, trace)
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    with contextlib.suppress(Exception):
        print(exc.code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2], sys.argv[3])
    else:
        client(sys.argv[1:])
