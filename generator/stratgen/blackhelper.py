"""A second process that imports black while ``stratgen generate`` works, and formats for it.

Importing black costs tens of milliseconds: after an edit to one spec, about as much as the
rest of the run. ``generate`` starts this helper (a fresh interpreter on the same ``sys.path``)
when it finds a spec it has to parse, so that on a machine with an idle core the import happens
meanwhile; the few files whose formatting is not cached are then formatted there. Anything
unexpected (no helper, another black version, an error, a helper that died) makes the caller
format in its own process instead, which gives the same text: only where the work happens
changes.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import struct
import sys
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import subprocess

#: What the helper runs: it imports black, says its version, then formats each batch of
#: sources it is sent ((line length, sources) -> [(True, text) or (False, message)]) until
#: its input ends.
_PROGRAM = r"""
import gc, json, pickle, struct, sys
sys.path[:] = json.loads(sys.argv[1])
gc.disable()

def send(value):
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    sys.stdout.buffer.write(struct.pack("<Q", len(data)) + data)
    sys.stdout.buffer.flush()

def receive():
    head = sys.stdin.buffer.read(8)
    if len(head) < 8:
        return None
    return pickle.loads(sys.stdin.buffer.read(struct.unpack("<Q", head)[0]))

try:
    import black
except Exception:
    send(None)
    raise SystemExit(0)
send(black.__version__)
while (request := receive()) is not None:
    line_length, sources = request
    mode = black.Mode(line_length=line_length, target_versions={black.TargetVersion.PY311})
    results = []
    for source in sources:
        try:
            results.append((True, black.format_str(source, mode=mode)))
        except Exception as exc:
            results.append((False, str(exc)))
    send(results)
"""


class BlackHelper:
    """The helper process; ``start`` returns None where it would not help."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process
        self._version: str | None = None
        self._failed = False

    @classmethod
    def start(cls) -> BlackHelper | None:
        """Start the helper, unless black is imported here already or there is no idle core
        for it to import black on (see ``_spare_core``)."""
        if _black_imported() or not _spare_core():
            return None
        import subprocess

        try:
            process = subprocess.Popen(
                [sys.executable, "-c", _PROGRAM, json.dumps(sys.path)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
        except OSError:
            return None
        return cls(process)

    def format(self, sources: list[str], line_length: int, version: str) -> list[str] | None:
        """The formatted sources, if the helper runs black ``version`` and formats every one;
        None otherwise (the caller then formats them itself)."""
        if self._failed:
            return None
        try:
            if self._version is None:
                self._version = str(_receive(self._stdout()))
            if self._version != version:
                self._failed = True
                return None
            _send(self._stdin(), (line_length, sources))
            results = _receive(self._stdout())
        except (OSError, EOFError, ValueError, pickle.UnpicklingError, struct.error):
            self._failed = True
            return None
        if not isinstance(results, list) or len(results) != len(sources):
            self._failed = True
            return None
        if not all(
            isinstance(r, tuple) and r[0] is True and isinstance(r[1], str) for r in results
        ):
            return None  # an error: formatting here raises it as it should be raised
        return [text for _, text in results]

    def close(self) -> None:
        """Stop the helper. It holds nothing worth a clean exit, which would cost the time of
        an interpreter's shutdown: it is killed."""
        process = self._process
        with contextlib.suppress(OSError):
            process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def _stdin(self) -> IO[bytes]:
        assert self._process.stdin is not None
        return self._process.stdin

    def _stdout(self) -> IO[bytes]:
        assert self._process.stdout is not None
        return self._process.stdout


def _black_imported() -> bool:
    return "black" in sys.modules


def _spare_core() -> bool:
    """Whether a core is idle now: the helper's import only saves time where it runs beside
    this process; where every core is busy it takes time from it. Linux tells how many tasks
    are runnable at this moment (this process among them); elsewhere the load average over the
    last minute stands in."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = cores or 1
    if cores < 2:
        return False
    running = _runnable()
    if running is not None:
        return running < cores
    try:
        return os.getloadavg()[0] < cores - 0.5
    except (AttributeError, OSError):  # no load average either: trust the core count
        return True


def _runnable() -> int | None:
    """The number of runnable tasks on the machine now, from /proc/loadavg, if there is one."""
    try:
        with open("/proc/loadavg", encoding="ascii") as handle:
            return int(handle.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None


def _send(stream: IO[bytes], value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError("the helper ended")
    (size,) = struct.unpack("<Q", head)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the helper ended")
    return pickle.loads(data)
