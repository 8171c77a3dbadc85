"""Launchers start the training processes of a strategy and stop them all if one fails.

- ``InlineLauncher`` runs in the calling process (single device, DataParallel).
- ``ExternalLauncher`` expects the processes to exist already (torchrun, srun, mpirun).
- ``PopenLauncher`` starts the script again for every other local rank, like torchrun would;
  the calling process is local rank 0. The started processes run the whole script, so they
  take part in every later ``launch`` of it too; the script waits for them when it ends.
- ``SpawnLauncher`` starts every rank with torch.multiprocessing (spawn, fork or forkserver)
  and returns rank 0's result to the caller.

When any rank fails, the launchers stop every other rank and raise ``ProcessFailedError`` with
the failing rank's traceback within seconds; no process is left behind. A process whose
launcher dies ends itself.
"""

from __future__ import annotations

import _thread
import atexit
import contextlib
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .exceptions import MisconfigurationError, ProcessFailedError

if TYPE_CHECKING:
    from .strategy import StrategyBase

#: Set in processes started by PopenLauncher: where to write a traceback, where to count the
#: launches the process entered, and whom to watch.
ERROR_FILE_ENV = "STRATLIB_ERROR_FILE"
LAUNCH_FILE_ENV = "STRATLIB_LAUNCH_FILE"
PARENT_PID_ENV = "STRATLIB_PARENT_PID"
#: How long to wait for a stopped process before killing it.
TERMINATE_GRACE = 3.0
#: How long a failed rank's peers get to fail too, so that the report can tell cause from
#: consequence.
PEER_GRACE = 2.0
#: How long rank 0 may stay stuck (e.g. in a collective) after another rank failed before its
#: process is ended with the other rank's error.
INTERRUPT_GRACE = 5.0
POLL_INTERVAL = 0.1

#: A failed process: (local rank, exit code or None while running, traceback or "").
Report = tuple[int, int | None, str]


class Launcher(ABC):
    """Starts the processes of a strategy and runs a function in each."""

    def __init__(self, strategy: StrategyBase) -> None:
        self.strategy = strategy

    @property
    def is_interactive_compatible(self) -> bool:
        """Whether it works from a notebook or ``python -c``."""
        return True

    @abstractmethod
    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``function(strategy, *args, **kwargs)`` in every process; return rank 0's result."""


class InlineLauncher(Launcher):
    """Runs the function in the calling process."""

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self.strategy.run_worker(function, args, kwargs)


class ExternalLauncher(Launcher):
    """For processes started by something else: each runs its own share."""

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        strategy = self.strategy
        environment = strategy.cluster_environment
        expected = strategy.num_nodes * strategy.num_processes  # type: ignore[attr-defined]
        if not environment.creates_processes_externally and expected > 1:
            raise MisconfigurationError(
                f"{type(strategy).__name__} does not start processes itself; run the script with a "
                f"launcher (torchrun, srun, mpirun) that starts {expected} processes"
            )
        return run_reporting_errors(strategy, function, args, kwargs)


_launches_entered = 0


def run_reporting_errors(
    strategy: StrategyBase,
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> Any:
    """Run a worker; on failure, leave the traceback where the launching process finds it
    (PopenLauncher's error file, or torchrun's TORCHELASTIC_ERROR_FILE)."""
    global _launches_entered
    _launches_entered += 1
    launch_file = os.environ.get(LAUNCH_FILE_ENV)
    if launch_file:
        with contextlib.suppress(OSError):
            Path(launch_file).write_text(str(_launches_entered), encoding="utf-8")
    try:
        return strategy.run_worker(function, args, kwargs)
    except BaseException as exc:
        error_file = os.environ.get(ERROR_FILE_ENV)
        if error_file:
            with contextlib.suppress(OSError):
                Path(error_file).write_text(traceback.format_exc(), encoding="utf-8")
        if os.environ.get("TORCHELASTIC_ERROR_FILE") and isinstance(exc, Exception):
            with contextlib.suppress(Exception):
                from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

                ErrorHandler().record_exception(exc)
        raise


_watched_parent: int | None = None


def watch_parent(parent_pid: int) -> None:
    """End this process if ``parent_pid`` stops being its parent: a rank must not outlive the
    process that launched it (which may have been killed without a chance to stop it)."""
    global _watched_parent
    if _watched_parent == parent_pid:
        return
    _watched_parent = parent_pid

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        with contextlib.suppress(OSError):
            os.write(
                2,
                f"launching process {parent_pid} ended; stopping process {os.getpid()}\n".encode(),
            )
        _remove_job_files()
        os._exit(1)

    def remove_files_if_orphaned() -> None:
        if os.getppid() != parent_pid:
            _remove_job_files()

    atexit.register(remove_files_if_orphaned)
    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _remove_job_files() -> None:
    """In a rank whose launcher died: remove the files it would have removed (the last rank
    to go removes their folder)."""
    for variable in (ERROR_FILE_ENV, LAUNCH_FILE_ENV):
        path = os.environ.get(variable)
        if path:
            with contextlib.suppress(OSError):
                os.unlink(path)
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(path))


# --- popen ---------------------------------------------------------------------------------------


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

    def __init__(self, strategy: StrategyBase, command: list[str], env: dict[str, str]) -> None:
        self.owner = os.getpid()
        self.num_processes: int = strategy.num_processes  # type: ignore[attr-defined]
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
                self.processes[local_rank] = subprocess.Popen(command, env=child_env)
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
                reports.append((rank, 0, _uneven_launches(entered, self.launches, ended="rank")))
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
        strategy: StrategyBase,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> Any:
        if strategy.num_processes != self.num_processes:  # type: ignore[attr-defined]
            raise MisconfigurationError(
                f"devices={strategy.num_processes}: this script already runs "  # type: ignore[attr-defined]
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
        deadline = time.monotonic() + PEER_GRACE
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
                uneven = _uneven_launches(count, self.launches, ended="rank 0")
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
        num_processes = strategy.num_processes  # type: ignore[attr-defined]
        if num_processes == 1:
            return run_reporting_errors(strategy, function, args, kwargs)
        command = script_command()
        os.environ["MASTER_ADDR"] = environment.main_address
        os.environ["MASTER_PORT"] = str(environment.main_port)
        env = os.environ.copy()
        env.update(
            NODE_RANK=str(environment.node_rank()),
            WORLD_SIZE=str(strategy.num_nodes * num_processes),  # type: ignore[attr-defined]
            LOCAL_WORLD_SIZE=str(num_processes),
            **{PARENT_PID_ENV: str(os.getpid())},
        )
        _job = _PopenJob(strategy, command, env)
        return _job.run_rank_zero(strategy, function, args, kwargs)


# --- torch.multiprocessing ---------------------------------------------------------------------


def _spawned_worker(
    local_rank: int,
    strategy: StrategyBase,
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    result_file: str,
    master: tuple[str, str],
) -> None:
    # The parent is the launching process, or the forkserver, which ends with it.
    watch_parent(os.getppid())
    os.environ["LOCAL_RANK"] = str(local_rank)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = master
    try:
        result = strategy.run_worker(function, args, kwargs)
        if strategy.is_global_zero:
            # A file, not a pipe: a pipe holds about 64 KiB, and the launching process reads
            # only once every process has ended, so a larger result would block its writer
            # forever. Plain pickle, not torch's sharing of tensors through file descriptors,
            # which vanish with the process that shares them.
            partial = f"{result_file}.partial"
            with open(partial, "wb") as handle:
                pickle.dump(_to_cpu(result), handle, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(partial, result_file)
    finally:
        # multiprocessing ends its processes without running atexit handlers.
        from .parallel import release_process_group

        release_process_group()


def _to_cpu(value: Any) -> Any:
    from .precision import apply_to_tensors

    return apply_to_tensors(value, lambda t: t.detach().cpu())


class SpawnLauncher(Launcher):
    """Starts every local rank with torch.multiprocessing; the caller only waits."""

    def __init__(self, strategy: StrategyBase, start_method: str = "spawn") -> None:
        super().__init__(strategy)
        if start_method not in ("spawn", "fork", "forkserver"):
            raise MisconfigurationError(
                f"start_method={start_method!r} is not allowed; use 'spawn', 'fork' or 'forkserver'"
            )
        self.start_method = start_method

    @property
    def is_interactive_compatible(self) -> bool:
        return self.start_method == "fork"

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        import torch.multiprocessing as mp

        strategy = self.strategy
        environment = strategy.cluster_environment
        if environment.creates_processes_externally:
            return run_reporting_errors(strategy, function, args, kwargs)
        # The caller stands for its node's first rank: on other nodes than the first its
        # strategy must not report rank 0.
        configure_ranks = getattr(strategy, "configure_ranks", None)
        if callable(configure_ranks):
            configure_ranks()
        master = (environment.main_address, str(environment.main_port))
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = master
        with tempfile.TemporaryDirectory(prefix="stratlib-spawn-") as folder:
            result_file = os.path.join(folder, "result.pickle")
            process_context = mp.start_processes(
                _spawned_worker,
                args=(strategy, function, args, kwargs, result_file, master),
                nprocs=strategy.num_processes,  # type: ignore[attr-defined]
                join=False,
                start_method=self.start_method,
            )
            processes = process_context.processes
            try:
                failed = _wait_for_processes(processes, process_context.error_files)
            finally:
                _stop_processes(processes)
            if failed:
                raise self._failure(process_context, failed)
            if not os.path.exists(result_file):
                return None  # rank 0 runs on another node
            with open(result_file, "rb") as handle:
                return pickle.load(handle)

    def _failure(self, process_context: Any, failed: list[int]) -> ProcessFailedError:
        reports = []
        for local_rank in failed:
            code = process_context.processes[local_rank].exitcode
            reports.append(
                (local_rank, code, _read_spawn_error(process_context.error_files[local_rank]))
            )
        local_rank, code, error = root_cause(reports)
        rank = self._rank(local_rank)
        return ProcessFailedError(
            failure_message(rank, local_rank, code, error), rank=rank, exit_code=code, error=error
        )

    def _rank(self, local_rank: int) -> int:
        strategy = self.strategy
        return strategy.node_rank * strategy.num_processes + local_rank  # type: ignore[attr-defined]


def _wait_for_processes(processes: list[Any], error_files: list[str]) -> list[int]:
    """Wait until every process ended, or one failed; return the local ranks that failed."""
    from multiprocessing.connection import wait

    pending = {p.sentinel: index for index, p in enumerate(processes)}
    while pending:
        for sentinel in wait(list(pending), timeout=POLL_INTERVAL):
            index = pending.pop(sentinel)
            processes[index].join()
            if processes[index].exitcode != 0:
                # Peers of a failed rank usually fail a moment later with a connection error;
                # unless this one reported an error of its own, let them, so that the report
                # can tell cause from consequence.
                error = _read_spawn_error(error_files[index])
                grace = 0.0 if error and not is_peer_failure(error) else PEER_GRACE
                deadline = time.monotonic() + grace
                for p in processes:
                    p.join(max(0.0, deadline - time.monotonic()))
                return [i for i, p in enumerate(processes) if p.exitcode not in (None, 0)]
    return []


def _stop_processes(processes: list[Any]) -> None:
    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + TERMINATE_GRACE
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()


def _read_spawn_error(path: str | None) -> str:
    if not path:
        return ""
    try:
        with open(path, "rb") as handle:
            return str(pickle.load(handle))
    except (OSError, EOFError, pickle.UnpicklingError):
        return ""


# --- reports -------------------------------------------------------------------------------------

#: Messages of a process that failed only because a peer went away.
PEER_FAILURE_PATTERNS = (
    "Connection reset by peer",
    "Connection closed by peer",
    "Broken pipe",
    "Connection refused",
    "NCCL communicator was aborted",
    "ProcessGroupNCCL is aborted",
)


def is_peer_failure(error: str) -> bool:
    return any(pattern in error for pattern in PEER_FAILURE_PATTERNS)


def root_cause(reports: list[Report]) -> Report:
    """Among failed processes (rank, exit code, traceback), the one that failed first-hand:
    an error of its own beats a death without a report, which beats a lost connection."""

    def rank_of(report: Report) -> tuple[int, int]:
        _, code, error = report
        if error and not is_peer_failure(error):
            return (0, report[0])
        if not error or (code is not None and code < 0):
            return (1, report[0])
        return (2, report[0])

    return min(reports, key=rank_of)


def _uneven_launches(entered: int, other: int, ended: str) -> str:
    """How a rank's number of launches differs from rank 0's (``ended``: who ended first)."""
    if ended == "rank 0":
        what = f"entered launch number {entered}, but rank 0 ended the script after {other}"
    else:
        what = (
            f"ended its script after {entered} launch(es), while rank 0 is in launch number {other}"
        )
    return f"{what}; every process must call launch() equally often"


def failure_message(rank: int, local_rank: int, code: int | None, error: str) -> str:
    if code == 0:  # ended normally, but too early: the error says how
        return f"rank {rank} (local rank {local_rank}) {error}"
    text = f"rank {rank} (local rank {local_rank}) {_describe_exit(code, error)}"
    return f"{text}:\n{error.rstrip()}" if error else text


def _describe_exit(code: int | None, error: str) -> str:
    # A process that reported an error may still die by a signal while exiting (gloo can
    # abort in its destructors); the error is what matters.
    if error:
        return "raised an exception"
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"was killed by signal {name}"
    return f"exited with code {code}"


# --- choosing ------------------------------------------------------------------------------------

LAUNCHERS: dict[str, Callable[[StrategyBase], Launcher]] = {
    "none": InlineLauncher,
    "external": ExternalLauncher,
    "popen": PopenLauncher,
    "spawn": lambda strategy: SpawnLauncher(
        strategy, getattr(strategy, "start_method", None) or "spawn"
    ),
    "fork": lambda strategy: SpawnLauncher(
        strategy, getattr(strategy, "start_method", None) or "fork"
    ),
    "forkserver": lambda strategy: SpawnLauncher(
        strategy, getattr(strategy, "start_method", None) or "forkserver"
    ),
}


def register_launcher(name: str, factory: Callable[[StrategyBase], Launcher]) -> None:
    """Add a launcher for backends that bring their own (XLA, horovodrun)."""
    LAUNCHERS[name] = factory


def create_launcher(strategy: StrategyBase) -> Launcher:
    name = strategy.launcher_name
    if name not in LAUNCHERS:
        _load_backend_launcher(name)
    try:
        factory = LAUNCHERS[name]
    except KeyError:
        raise MisconfigurationError(
            f"no launcher named {name!r}; known: {', '.join(sorted(LAUNCHERS))}"
        ) from None
    return factory(strategy)


def _load_backend_launcher(name: str) -> None:
    """Launchers of optional backends live next to their wrappers and register on import."""
    modules = {"xla": ".wrappers.xla", "horovodrun": ".wrappers.horovod"}
    if name in modules:
        import importlib

        importlib.import_module(modules[name], package=__package__)
