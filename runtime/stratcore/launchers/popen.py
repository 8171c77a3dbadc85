"""PopenLauncher: the script starts itself again for local ranks 1..n-1, like torchrun would.

The started processes run the whole script, so they take part in every later ``launch`` of it
too; the script waits for them when it ends. A watchdog stops every rank when one fails.
"""

from __future__ import annotations

import _thread
import atexit
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..exceptions import MisconfigurationError, ProcessFailedError
from .base import (
    ERROR_FILE_ENV,
    INTERRUPT_GRACE,
    LAUNCH_FILE_ENV,
    PARENT_PID_ENV,
    PEER_EXIT_WAIT,
    POLL_INTERVAL,
    TERMINATE_GRACE,
    Launcher,
    ParallelLaunchTarget,
    rank_command,
    rendezvous_environ,
    run_reporting_errors,
    watch_parent,
)
from .reports import Report, failure_message, is_peer_failure, root_cause, uneven_launches

if TYPE_CHECKING:
    from ..rendezvous import HostedStore


def script_command() -> list[str]:
    """The command that started this script, to start it again for the other ranks."""
    import __main__

    spec = getattr(__main__, "__spec__", None)
    if spec is not None and spec.name not in ("__main__", None):
        name = spec.name.removesuffix(".__main__")
        return [sys.executable, "-m", name, *sys.argv[1:]]
    main_file = getattr(__main__, "__file__", None)
    if not main_file or not os.path.isfile(main_file):
        raise MisconfigurationError(
            "this strategy starts the script again for every rank, which is impossible from an "
            "interactive session or `python -c`; run a script file, or use a spawning strategy "
            "such as 'ddp_spawn' or 'ddp_notebook'"
        )
    return [sys.executable, os.path.abspath(main_file), *sys.argv[1:]]


def _interrupt_main_thread() -> None:
    """Raise KeyboardInterrupt in the main thread, waking it from sleeps and blocking calls."""
    main = threading.main_thread()
    if callable(signal.getsignal(signal.SIGINT)) and hasattr(signal, "pthread_kill") and main.ident:
        signal.pthread_kill(main.ident, signal.SIGINT)
    else:
        _thread.interrupt_main()


class _PopenJob:
    """The processes a script started for local ranks 1..n-1, watched until the script ends.

    A watchdog thread polls them. When one fails while rank 0 is inside ``launch``, it stops
    the others and interrupts rank 0, whose ``launch`` raises the failed rank's error; if rank
    0 stays stuck (inside a collective that cannot be interrupted), its process ends with that
    error. A failure between launches is raised by the next launch, or when the script ends.
    """

    def __init__(
        self,
        strategy: ParallelLaunchTarget,
        command: list[str],
        env: dict[str, str],
        store: HostedStore | None,
        rendezvous: dict[str, str],
    ) -> None:
        self.owner = os.getpid()
        # This process is rank 0: it finds the store as the others do, while the job lasts.
        self.store = store
        self.saved_environ = {name: os.environ.get(name) for name in rendezvous}
        os.environ.update(rendezvous)
        self.num_processes: int = strategy.num_processes
        self.node_rank = strategy.node_rank
        self.folder = Path(tempfile.mkdtemp(prefix="stratlib-ranks-"))
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.terminated: set[int] = set()  # stopped by this job, not failed by themselves
        self.launches = 0
        self.in_launch = False
        self.interrupted = False
        self.launch_thread: threading.Thread | None = None
        self.acknowledged = threading.Event()
        self.closed = threading.Event()
        self.lock = threading.Lock()
        try:
            for local_rank in range(1, self.num_processes):
                child_env = {
                    **env,
                    "LOCAL_RANK": str(local_rank),
                    ERROR_FILE_ENV: str(self.error_file(local_rank)),
                    LAUNCH_FILE_ENV: str(self.launch_file(local_rank)),
                }
                self.processes[local_rank] = subprocess.Popen(rank_command(command), env=child_env)
        except BaseException:
            self.close()
            raise
        threading.Thread(target=self._watch, name="rank-watchdog", daemon=True).start()

    # -- state of the children -----------------------------------------------------------

    def error_file(self, local_rank: int) -> Path:
        return self.folder / f"rank{local_rank}.err"

    def launch_file(self, local_rank: int) -> Path:
        return self.folder / f"rank{local_rank}.launch"

    def global_rank(self, local_rank: int) -> int:
        return self.node_rank * self.num_processes + local_rank

    def failed(self) -> list[Report]:
        """Children that failed by themselves (not stopped by this job), in rank order; a child
        that ended its script before a launch rank 0 is in counts as failed."""
        reports: list[Report] = []
        for rank, process in sorted(self.processes.items()):
            code = process.poll()
            if code is None or rank in self.terminated:
                continue
            if code != 0:
                try:
                    error = self.error_file(rank).read_text(encoding="utf-8")
                except OSError:
                    error = ""
                reports.append((rank, code, error))
            elif (entered := self.launches_entered(rank)) < self.launches:
                reports.append((rank, 0, uneven_launches(entered, self.launches, ended="rank")))
        return reports

    def alive(self) -> list[int]:
        return [rank for rank, process in self.processes.items() if process.poll() is None]

    def launches_entered(self, local_rank: int) -> int:
        try:
            return int(self.launch_file(local_rank).read_text(encoding="utf-8") or 0)
        except (OSError, ValueError):
            return 0

    def stop(self) -> None:
        """Stop every child still running: SIGTERM, then SIGKILL after a grace period."""
        for rank, process in self.processes.items():
            if process.poll() is None:
                self.terminated.add(rank)
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + TERMINATE_GRACE
        for process in self.processes.values():
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def close(self) -> None:
        """End the job: stop the children and remove the job's files."""
        global _job
        self.closed.set()
        self.stop()
        for path in self.folder.iterdir() if self.folder.is_dir() else ():
            with contextlib.suppress(OSError):
                path.unlink()
        with contextlib.suppress(OSError):
            self.folder.rmdir()
        if self.store is not None:
            self.store.close()
        for name, value in self.saved_environ.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self.saved_environ = {}
        if _job is self:
            _job = None

    # -- reporting -----------------------------------------------------------------------

    def failure_error(self) -> ProcessFailedError:
        failures = self.failed()
        if not failures:
            return ProcessFailedError("a training process failed")
        local_rank, code, error = root_cause(failures)
        rank = self.global_rank(local_rank)
        return ProcessFailedError(
            failure_message(rank, local_rank, code, error), rank=rank, exit_code=code, error=error
        )

    def _watch(self) -> None:
        while not self.closed.wait(POLL_INTERVAL):
            if not self.failed():
                continue
            self.stop()
            with self.lock:
                # Interrupting under the lock: rank 0 cannot leave the launch in between, so
                # the interruption always lands inside it.
                self.interrupted = self.in_launch and self.launch_thread is threading.main_thread()
                stuck = self.in_launch
                if self.interrupted:
                    _interrupt_main_thread()
            if stuck and not self.acknowledged.wait(INTERRUPT_GRACE) and not self.closed.is_set():
                message = str(self.failure_error())
                self.close()
                _exit_with(message)
            return

    # -- rank 0 --------------------------------------------------------------------------

    def run_rank_zero(
        self,
        strategy: ParallelLaunchTarget,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> Any:
        if strategy.num_processes != self.num_processes:
            raise MisconfigurationError(
                f"devices={strategy.num_processes}: this script already runs "
                f"{self.num_processes} processes per node from an earlier launch; every launch "
                "of a script must use the same number of devices"
            )
        if self.failed():
            error = self.failure_error()
            self.close()
            raise error
        try:
            with self.lock:
                self.launches += 1
                self.in_launch = True
                self.launch_thread = threading.current_thread()
                self.acknowledged.clear()
            try:
                result = strategy.run_worker(function, args, kwargs)
            finally:
                with self.lock:
                    self.in_launch = False
        except BaseException as exc:
            self.acknowledged.set()
            cause = self._error_behind(exc)
            self.close()
            if cause is None:
                raise
            raise cause from exc
        if self.interrupted:  # a failure that raced with the end of the launch
            error = self.failure_error()
            self.close()
            raise error
        return result

    def _error_behind(self, exc: BaseException) -> ProcessFailedError | None:
        """The failure of another rank that caused ``exc`` in rank 0, or None when rank 0's own
        error is the root cause."""
        interrupted = isinstance(exc, KeyboardInterrupt) and self.interrupted
        own = "" if interrupted else "".join(traceback.format_exception(exc))
        if own and not is_peer_failure(own):
            return None  # an error of its own: whatever the others report follows from it
        # The peer that went away may take seconds to end on a busy machine: a fixed grace
        # would report rank 0's lost connection instead of the peer's own error.
        deadline = time.monotonic() + PEER_EXIT_WAIT
        while not self.failed() and self.alive() and time.monotonic() < deadline:
            time.sleep(POLL_INTERVAL)
        failures = self.failed()
        if not failures:
            return ProcessFailedError("another training process failed") if interrupted else None
        if own and root_cause([(0, None, own), *failures])[0] == 0:
            return None
        return self.failure_error()

    # -- end of the script ---------------------------------------------------------------

    def finish(self) -> None:
        """Wait for the children when the script ends, and end it with their failure if one
        fails. Children waiting in a launch that rank 0 never reaches are stopped."""
        if (
            getattr(sys, "last_exc", None) is not None
            or getattr(sys, "last_value", None) is not None
        ):
            self.close()  # the script failed; its own error is already printed
            return
        while True:
            # A rank inside a launch that rank 0 never makes waits for rank 0 until it fails:
            # that, not its failure, is what went wrong.
            ahead = [(rank, self.launches_entered(rank)) for rank in sorted(self.processes)]
            ahead = [(rank, count) for rank, count in ahead if count > self.launches]
            if ahead:
                rank, count = ahead[0]
                self.close()
                uneven = uneven_launches(count, self.launches, ended="rank 0")
                _exit_with(f"rank {self.global_rank(rank)} (local rank {rank}) {uneven}")
            if self.failed():
                message = str(self.failure_error())
                self.close()
                _exit_with(message)
            if not self.alive():
                break
            time.sleep(POLL_INTERVAL)
        self.close()


_job: _PopenJob | None = None


def _current_job() -> _PopenJob | None:
    return _job if _job is not None and _job.owner == os.getpid() else None


@atexit.register
def _finish_job() -> None:
    job = _current_job()
    if job is not None:
        job.finish()


def _exit_with(message: str) -> None:
    """End the process at once with ``message``: used where no exception can reach the user."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(Exception):
        sys.stderr.write(message.rstrip("\n") + "\n")
        sys.stderr.flush()
    os._exit(1)


def _report_uncaught_errors() -> None:
    """In a process started by PopenLauncher: leave any error that ends the script, also one
    outside a launch, where rank 0 reads it."""
    previous = sys.excepthook
    if getattr(previous, "reports_to_rank_zero", False):
        return

    def hook(kind: type[BaseException], error: BaseException, trace: Any) -> None:
        error_file = os.environ.get(ERROR_FILE_ENV)
        if error_file:
            with contextlib.suppress(OSError):
                text = "".join(traceback.format_exception(kind, error, trace))
                Path(error_file).write_text(text, encoding="utf-8")
        previous(kind, error, trace)

    hook.reports_to_rank_zero = True  # type: ignore[attr-defined]
    sys.excepthook = hook


class PopenLauncher(Launcher):
    """Starts the script again for local ranks 1..n-1; this process is local rank 0."""

    name = "popen"
    script_is_a_rank: ClassVar[bool] = True

    strategy: ParallelLaunchTarget

    @property
    def is_interactive_compatible(self) -> bool:
        return False

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        global _job
        strategy = self.strategy
        job = _current_job()
        if job is not None:
            return job.run_rank_zero(strategy, function, args, kwargs)
        environment = strategy.cluster_environment
        if environment.creates_processes_externally:
            parent = os.environ.get(PARENT_PID_ENV)
            if parent:
                watch_parent(int(parent))
                _report_uncaught_errors()
            return run_reporting_errors(strategy, function, args, kwargs)
        num_processes = strategy.num_processes
        if num_processes == 1:
            return run_reporting_errors(strategy, function, args, kwargs)
        command = script_command()
        store, rendezvous = rendezvous_environ(strategy)
        env = {**os.environ, **rendezvous}
        env.update(
            NODE_RANK=str(environment.node_rank()),
            WORLD_SIZE=str(strategy.num_nodes * num_processes),
            LOCAL_WORLD_SIZE=str(num_processes),
            **{PARENT_PID_ENV: str(os.getpid())},
        )
        _job = _PopenJob(strategy, command, env, store, rendezvous)
        return _job.run_rank_zero(strategy, function, args, kwargs)
