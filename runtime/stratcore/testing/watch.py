"""Waiting for processes by their progress, not by the clock.

A wall-clock time-out tuned on an idle machine fails on a busy one, where the same work takes
several times longer; a generous one makes a real hang cost many minutes. A process that hangs
(waiting for a peer that died, a port or a pipe) stops using the CPU; a slow one does not,
however busy the machine. So ``Job`` runs a command and counts as progress any output it
writes and any CPU time that it, or any process it started, uses (found through a marker in
their environment, so processes that leave its session or lose their parent still count). It
fails only after ``stall`` seconds without either, and then says what it was waiting for,
which processes were alive and where they were: Python processes of the job run with
``PYTHONFAULTHANDLER``, and are asked for their stacks (SIGABRT) before they are killed.

Needs ``/proc`` (Linux) to see CPU time; elsewhere only output counts as progress. The
standard library only: the benchmark harness, which never imports torch, uses it too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

#: Seconds without output and without CPU use by any process of a job before it counts as hung.
STALL = 120.0
#: A last resort against a job that spins without end: generous, and named when it is reached.
LIMIT = 3600.0
#: The environment variable that marks every process of a job is this prefix and the job's
#: marker, set to 1: one variable per job, so that the processes of a job watched inside
#: another (a command that watches its own commands) belong to both.
MARKER_PREFIX = "STRATCORE_WATCH_"
#: CPU seconds a job must use within ``_WINDOW`` seconds to count as progressing: 1% of a core.
#: A job that waits (in a rendezvous, a collective, a pipe) uses far less, polling threads
#: included; a starved one on a busy machine far more.
_MIN_CPU = 0.1
_WINDOW = 10.0
_POLL = 0.5
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PROC = Path("/proc")


class Stalled(AssertionError):
    """A watched job made no progress for too long (or reached its limit)."""


def marked_processes(variable: str, marker: str) -> list[tuple[int, str]]:
    """Live processes whose environment has ``variable=marker``: (pid, command line)."""
    return [(pid, _command_line(pid)) for pid in _marked_pids(variable, marker, {})]


class Job:
    """``command`` running in fresh processes, watched for progress (see the module).

    ``what`` names the job in failures (by default, the command's first words). Its output is
    captured, and given back as text.
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        what: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        input: str | None = None,
        stall: float = STALL,
        limit: float = LIMIT,
        start_new_session: bool = False,
    ) -> None:
        self.what = what or _short(command)
        self.stall = stall
        self.limit = limit
        #: The variable that marks the job's processes (set to 1 in their environment).
        self.marker_env = MARKER_PREFIX + uuid.uuid4().hex
        environ = dict(os.environ if env is None else env)
        environ[self.marker_env] = "1"
        environ.setdefault("PYTHONFAULTHANDLER", "1")
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=environ,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=start_new_session,
        )
        self._chunks: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
        self._written = 0
        self._readers = [
            threading.Thread(target=self._read, args=(stream, name), daemon=True)
            for stream, name in ((self.process.stdout, "stdout"), (self.process.stderr, "stderr"))
        ]
        for reader in self._readers:
            reader.start()
        if input is not None:
            assert self.process.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.write(input.encode())
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()
        self._known: dict[tuple[int, int], bool] = {}
        self._samples: deque[tuple[float, float]] = deque()
        self._seen_written = 0
        self.last_progress = self.started

    # -- output ----------------------------------------------------------------------------

    def _read(self, stream: IO[bytes] | None, name: str) -> None:
        assert stream is not None
        # os.read returns what is there; a buffered read would wait for a full buffer.
        for chunk in iter(lambda: os.read(stream.fileno(), 65536), b""):
            self._chunks[name].append(chunk)
            self._written += len(chunk)
        stream.close()

    @property
    def stdout(self) -> str:
        """What the command wrote to stdout so far."""
        return b"".join(self._chunks["stdout"]).decode(errors="replace")

    @property
    def stderr(self) -> str:
        """What the job has written to its standard error so far."""
        return b"".join(self._chunks["stderr"]).decode(errors="replace")

    # -- progress ----------------------------------------------------------------------------

    def processes(self) -> list[tuple[int, str]]:
        """The job's live processes: (pid, command line)."""
        return [(pid, _command_line(pid)) for pid in self._pids()]

    def _pids(self) -> list[int]:
        pids = _marked_pids(self.marker_env, "1", self._known)
        if self.process.pid not in pids and self.process.poll() is None:
            pids.append(self.process.pid)  # before it runs, /proc may show the old environment
        return pids

    def _cpu(self) -> float:
        """CPU seconds used by the job's live processes and the children they have reaped."""
        return sum(_cpu_seconds(pid) for pid in self._pids())

    def check(self, waiting_for: str) -> None:
        """Record progress; raise ``Stalled`` if there was none for ``stall`` seconds."""
        now = time.monotonic()
        if self._samples and now - self._samples[-1][0] < _POLL:
            return  # looked a moment ago
        written = self._written
        if written != self._seen_written:
            self._seen_written = written
            self.last_progress = now
        cpu = self._cpu() if _PROC.is_dir() else 0.0
        self._samples.append((now, cpu))
        while self._samples[0][0] < now - _WINDOW:
            self._samples.popleft()
        if cpu - min(sample for _, sample in self._samples) >= _MIN_CPU:
            self.last_progress = now
        if now - self.last_progress > self.stall:
            self.fail(
                f"no progress for {self.stall:g} s (no output, and less than {_MIN_CPU:g} s "
                f"of CPU time in any {_WINDOW:g} s) while waiting for {waiting_for}"
            )
        if now - self.started > self.limit:
            self.fail(f"still running after {self.limit:g} s while waiting for {waiting_for}")

    def wait_for(self, condition: Callable[[], bool], waiting_for: str) -> None:
        """Wait until ``condition()`` holds or the command ends; raise ``Stalled`` on a stall."""
        while not condition() and self.process.poll() is None:
            self.check(waiting_for)
            # Returns as soon as the command ends (a benchmark times it by this wait).
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(_POLL)

    def finish(self, waiting_for: str | None = None) -> subprocess.CompletedProcess[str]:
        """Wait until the command has ended and closed its output; its result."""
        waiting = waiting_for or f"{self.what} to end"
        self.wait_for(lambda: False, waiting)
        # Processes it started may still hold its output open: they too must progress.
        while any(reader.is_alive() for reader in self._readers):
            for reader in self._readers:
                reader.join(_POLL)
            self.check(f"processes started by {self.what}, which hold its output open, to end")
        return subprocess.CompletedProcess(
            self.process.args, self.process.wait(), self.stdout, self.stderr
        )

    # -- ending ----------------------------------------------------------------------------

    def fail(self, reason: str) -> None:
        """Stop every process of the job, and raise ``Stalled`` with what they were doing."""
        table = self.describe()
        self.kill(stacks=True)
        raise Stalled(
            f"{self.what}: {reason}.\nIts processes then:\n{table or '  (none)'}\n"
            f"Command: {_quoted(self.process.args)}\n"
            f"stdout (end):\n{self.stdout[-3000:]}\nstderr (end):\n{self.stderr[-8000:]}"
        )

    def describe(self) -> str:
        """One line per live process of the job: pid, state, where the kernel holds it, command."""
        lines = []
        for pid in self._pids():
            state = _stat_fields(pid)
            wchan = _read_text(_PROC / str(pid) / "wchan") or "-"
            status = f"{state[0]} ({wchan})" if state else "?"
            command = _quoted(self.process.args) if pid == self.process.pid else None
            lines.append(f"  pid {pid}, {status}: {(command or _command_line(pid))[:300]}")
        return "\n".join(lines)

    def kill(self, stacks: bool = False) -> None:
        """Kill every process of the job; with ``stacks``, first let Python processes print
        their threads' stacks (faulthandler on SIGABRT) into the job's output."""
        if stacks:
            # One at a time, so that their reports do not interleave; the youngest first, so
            # that no process sees its parent go before it reported.
            for pid in sorted(self._pids(), key=_start_time, reverse=True):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGABRT)
                deadline = time.monotonic() + 5.0
                while _stat_fields(pid)[:1] not in ([], ["Z"], ["X"]):
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.05)
        for _ in range(3):
            pids = self._pids()
            if self.process.poll() is None:
                pids.append(self.process.pid)
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        self.process.wait()
        for reader in self._readers:
            reader.join(5.0)


def run(
    command: Sequence[str], *, check: bool = False, **options: Any
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` to its end (``Job``'s options); raise ``Stalled`` if it stops making
    progress, after stopping all its processes. With ``check``, a non-zero exit raises
    ``subprocess.CalledProcessError``, as ``subprocess.run`` does."""
    completed = Job(command, **options).finish()
    if check:
        completed.check_returncode()
    return completed


def finish_all(jobs: Sequence[Job]) -> list[subprocess.CompletedProcess[str]]:
    """Wait for jobs that work together (the ranks of a job started one by one, as a
    scheduler starts them). Any of them stalling fails the wait; once one has failed (ended
    non-zero), the others, which may wait for it for ever, are stopped."""
    try:
        while any(job.process.poll() is None for job in jobs):
            if any(job.process.poll() not in (None, 0) for job in jobs):
                break
            for job in jobs:
                job.check(f"{job.what} to end")
            time.sleep(0.2)
        for job in jobs:
            if job.process.poll() is None:
                job.kill()
        return [job.finish() for job in jobs]
    finally:
        for job in jobs:
            job.kill()


def _short(command: Sequence[str]) -> str:
    """A command as a failure names it: the program and its first arguments, file names
    without their folders."""
    words = [Path(str(word)).name if "/" in str(word) else str(word) for word in command[:4]]
    return " ".join(words) + (" ..." if len(command) > 4 else "")


# --- /proc ----------------------------------------------------------------------------------


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""


def _stat_fields(pid: int) -> list[str]:
    """Fields of /proc/PID/stat from the state on (the command name, which may hold spaces,
    cut off); empty if the process is gone. Read with plain system calls: a job's watch reads
    the file of every process on the machine at each look."""
    try:
        handle = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return []
    try:
        raw = os.read(handle, 4096)
    except OSError:
        return []
    finally:
        os.close(handle)
    end = raw.rfind(b")")
    return raw[end + 2 :].decode("ascii", "replace").split() if end >= 0 else []


def _start_time(pid: int) -> int:
    fields = _stat_fields(pid)
    return int(fields[19]) if len(fields) >= 20 else 0


def _cpu_seconds(pid: int) -> float:
    fields = _stat_fields(pid)
    if len(fields) < 15:
        return 0.0
    # utime, stime, cutime, cstime
    return sum(int(value) for value in fields[11:15]) / _TICKS


def _command_line(pid: int) -> str:
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def _marked_pids(variable: str, marker: str, known: dict[tuple[int, int], bool]) -> list[int]:
    """Live (not zombie) processes whose environment has ``variable=marker``. ``known`` caches
    the answer per process (pid and start time): a process's initial environment stays, once
    it has run ``exec`` (a young process may still show its parent's)."""
    if not _PROC.is_dir():
        return []
    needle = f"{variable}={marker}".encode()
    found = []
    try:
        uptime = float(_read_text(_PROC / "uptime").split()[0])
    except (IndexError, ValueError):
        uptime = 0.0
    for name in os.listdir(_PROC):
        if not name.isdigit():
            continue
        pid = int(name)
        fields = _stat_fields(pid)
        if len(fields) < 20 or fields[0] in ("Z", "X"):
            continue
        key = (pid, int(fields[19]))
        marked = known.get(key)
        if marked is None:
            try:
                marked = needle in (_PROC / name / "environ").read_bytes().split(b"\0")
            except OSError:
                marked = False  # gone, another user's, or a kernel thread
            if uptime - key[1] / _TICKS > 2.0:
                known[key] = marked
        if marked:
            found.append(pid)
    return found


def _quoted(args: Any) -> str:
    import shlex

    return " ".join(shlex.quote(str(a)) for a in args) if isinstance(args, list) else str(args)
