"""Launchers start the training processes of a strategy and stop them all if one fails.

- ``InlineLauncher`` runs in the calling process (single device, DataParallel).
- ``ExternalLauncher`` expects the processes to exist already (torchrun, srun, mpirun).
- ``PopenLauncher`` starts the script again for every other local rank, like torchrun would;
  the calling process is local rank 0.
- ``SpawnLauncher`` starts every rank with torch.multiprocessing (spawn, fork or forkserver)
  and returns rank 0's result to the caller.

When any rank fails, the launchers stop every other rank and raise ``ProcessFailedError`` with
the failing rank's traceback within seconds; no process is left behind.
"""

from __future__ import annotations

import _thread
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

#: Set in processes started by PopenLauncher: where to write a traceback, and whom to watch.
ERROR_FILE_ENV = "STRATLIB_ERROR_FILE"
PARENT_PID_ENV = "STRATLIB_PARENT_PID"
#: How long to wait for a stopped process before killing it.
TERMINATE_GRACE = 3.0
POLL_INTERVAL = 0.1


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


def run_reporting_errors(
    strategy: StrategyBase, function: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Any:
    """Run a worker; on failure, leave the traceback where the launching process finds it."""
    try:
        return strategy.run_worker(function, args, kwargs)
    except BaseException:
        error_file = os.environ.get(ERROR_FILE_ENV)
        if error_file:
            with contextlib.suppress(OSError):
                Path(error_file).write_text(traceback.format_exc(), encoding="utf-8")
        raise


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


def _watch_parent() -> None:
    """In a process started by PopenLauncher: exit if the launching process disappears."""
    parent = os.environ.get(PARENT_PID_ENV)
    if not parent:
        return
    expected = int(parent)

    def watch() -> None:
        while True:
            if os.getppid() != expected:
                os._exit(1)
            time.sleep(0.5)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class _Children:
    """Processes for local ranks 1..n-1 and their error files."""

    def __init__(self) -> None:
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.error_files: dict[int, Path] = {}
        self.folder = Path(tempfile.mkdtemp(prefix="stratlib-ranks-"))
        self.failure: tuple[int, int] | None = None  # (local rank, exit code)
        self.lock = threading.Lock()

    def start(self, local_rank: int, command: list[str], env: dict[str, str]) -> None:
        error_file = self.folder / f"rank{local_rank}.err"
        env = {**env, ERROR_FILE_ENV: str(error_file)}
        self.error_files[local_rank] = error_file
        self.processes[local_rank] = subprocess.Popen(command, env=env)

    def first_failure(self) -> tuple[int, int] | None:
        with self.lock:
            if self.failure is None:
                for rank, process in sorted(self.processes.items()):
                    code = process.poll()
                    if code not in (None, 0):
                        self.failure = (rank, code)
                        break
            return self.failure

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + TERMINATE_GRACE
        for process in self.processes.values():
            remaining = deadline - time.monotonic()
            try:
                process.wait(timeout=max(0.0, remaining))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def failures(self) -> list[tuple[int, int | None, str]]:
        """(local rank, exit code, traceback) of every process that failed so far."""
        return [
            (rank, process.returncode, self.error_text(rank))
            for rank, process in sorted(self.processes.items())
            if process.poll() not in (None, 0)
        ]

    def global_rank(self, strategy: StrategyBase, local_rank: int) -> int:
        processes_per_node = len(self.processes) + 1  # this process is local rank 0
        return strategy.node_rank * processes_per_node + local_rank

    def error_text(self, local_rank: int) -> str:
        try:
            return self.error_files[local_rank].read_text(encoding="utf-8")
        except OSError:
            return ""

    def cleanup(self) -> None:
        for path in self.error_files.values():
            with contextlib.suppress(OSError):
                path.unlink()
        with contextlib.suppress(OSError):
            self.folder.rmdir()


class PopenLauncher(Launcher):
    """Starts the script again for local ranks 1..n-1; this process is local rank 0."""

    @property
    def is_interactive_compatible(self) -> bool:
        return False

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        strategy = self.strategy
        environment = strategy.cluster_environment
        if environment.creates_processes_externally:
            _watch_parent()
            return run_reporting_errors(strategy, function, args, kwargs)
        num_processes = strategy.num_processes  # type: ignore[attr-defined]
        if num_processes == 1:
            return run_reporting_errors(strategy, function, args, kwargs)
        command = script_command()
        env = os.environ.copy()
        env.update(
            MASTER_ADDR=environment.main_address,
            MASTER_PORT=str(environment.main_port),
            NODE_RANK=str(environment.node_rank()),
            WORLD_SIZE=str(strategy.num_nodes * num_processes),  # type: ignore[attr-defined]
            LOCAL_WORLD_SIZE=str(num_processes),
            **{PARENT_PID_ENV: str(os.getpid())},
        )
        os.environ["MASTER_ADDR"] = env["MASTER_ADDR"]
        os.environ["MASTER_PORT"] = env["MASTER_PORT"]
        children = _Children()
        try:
            for local_rank in range(1, num_processes):
                children.start(local_rank, command, {**env, "LOCAL_RANK": str(local_rank)})
            return self._run_rank_zero(strategy, children, function, args, kwargs)
        finally:
            children.stop_all()
            children.cleanup()

    def _run_rank_zero(
        self,
        strategy: StrategyBase,
        children: _Children,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> Any:
        done = threading.Event()
        interrupted = threading.Event()

        def watchdog() -> None:
            while not done.wait(POLL_INTERVAL):
                if children.first_failure() is not None:
                    interrupted.set()
                    children.stop_all()
                    _thread.interrupt_main()
                    # If rank 0 is stuck inside a collective it cannot be interrupted: give it
                    # a moment to notice, then end the process with the child's error.
                    if not done.wait(TERMINATE_GRACE + 5):
                        sys.stderr.write(self._failure_message(strategy, children) + "\n")
                        sys.stderr.flush()
                        os._exit(1)
                    return

        thread = threading.Thread(target=watchdog, name="rank-watchdog", daemon=True)
        thread.start()
        try:
            result = strategy.run_worker(function, args, kwargs)
        except BaseException as exc:
            done.set()
            # Give the other ranks a moment: when they failed first, theirs is the real error.
            deadline = time.monotonic() + 2.0
            while children.first_failure() is None and time.monotonic() < deadline:
                if all(p.poll() is not None for p in children.processes.values()):
                    break
                time.sleep(POLL_INTERVAL)
            own = "" if isinstance(exc, KeyboardInterrupt) else traceback.format_exc()
            reports = [(0, None, own), *children.failures()]
            if root_cause(reports)[0] == 0 and own:
                raise
            raise self._failure(strategy, children) from exc
        finally:
            done.set()
        # Rank 0 finished: wait for the others, failing if one of them does.
        while any(p.poll() is None for p in children.processes.values()):
            if children.first_failure() is not None:
                break
            time.sleep(POLL_INTERVAL)
        if children.first_failure() is not None or interrupted.is_set():
            raise self._failure(strategy, children)
        return result

    def _failure_message(self, strategy: StrategyBase, children: _Children) -> str:
        failures = children.failures()
        if not failures:
            return "a training process failed"
        local_rank, code, error = root_cause(failures)
        rank = children.global_rank(strategy, local_rank)
        text = f"rank {rank} (local rank {local_rank}) {_describe_exit(code, error)}"
        return f"{text}:\n{error}" if error else text

    def _failure(self, strategy: StrategyBase, children: _Children) -> ProcessFailedError:
        failures = children.failures()
        if not failures:
            return ProcessFailedError("a training process failed")
        local_rank, code, error = root_cause(failures)
        rank = children.global_rank(strategy, local_rank)
        return ProcessFailedError(self._failure_message(strategy, children), rank=rank, exit_code=code, error=error)


# --- torch.multiprocessing ---------------------------------------------------------------------


def _spawned_worker(
    local_rank: int,
    strategy: StrategyBase,
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    results: Any,
    master: tuple[str, str],
) -> None:
    os.environ["LOCAL_RANK"] = str(local_rank)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = master
    result = strategy.run_worker(function, args, kwargs)
    if strategy.is_global_zero:
        # Plain pickle bytes: tensors shared through file descriptors would vanish with the
        # process that shares them.
        results.put(pickle.dumps(_to_cpu(result)))


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
        master = (environment.main_address, str(environment.main_port))
        context = mp.get_context(self.start_method)
        results = context.SimpleQueue()
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = master
        process_context = mp.start_processes(
            _spawned_worker,
            args=(strategy, function, args, kwargs, results, master),
            nprocs=strategy.num_processes,  # type: ignore[attr-defined]
            join=False,
            start_method=self.start_method,
        )
        processes = process_context.processes
        try:
            failed = _wait_for_processes(processes)
        finally:
            _stop_processes(processes)
        if failed:
            raise self._failure(process_context, failed)
        return pickle.loads(results.get()) if not results.empty() else None

    def _failure(self, process_context: Any, failed: list[int]) -> ProcessFailedError:
        reports = []
        for local_rank in failed:
            code = process_context.processes[local_rank].exitcode
            reports.append((local_rank, code, _read_spawn_error(process_context.error_files[local_rank])))
        local_rank, code, error = root_cause(reports)
        rank = self._rank(local_rank)
        return ProcessFailedError(
            f"rank {rank} (local rank {local_rank}) {_describe_exit(code, error)}" + (f":\n{error}" if error else ""),
            rank=rank,
            exit_code=code,
            error=error,
        )

    def _rank(self, local_rank: int) -> int:
        strategy = self.strategy
        return strategy.node_rank * strategy.num_processes + local_rank  # type: ignore[attr-defined]


def _wait_for_processes(processes: list[Any]) -> list[int]:
    """Wait until every process ended, or one failed; return the local ranks that failed."""
    from multiprocessing.connection import wait

    pending = {p.sentinel: index for index, p in enumerate(processes)}
    while pending:
        for sentinel in wait(list(pending), timeout=POLL_INTERVAL):
            index = pending.pop(sentinel)
            processes[index].join()
            if processes[index].exitcode != 0:
                # Peers of a failed rank usually fail a moment later with a connection error;
                # let them, so that the report can tell cause from consequence.
                deadline = time.monotonic() + 1.0
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


def root_cause(reports: list[tuple[int, int | None, str]]) -> tuple[int, int | None, str]:
    """Among failed processes (rank, exit code, traceback), the one that failed first-hand:
    an error of its own beats a death without a report, which beats a lost connection."""

    def rank_of(report: tuple[int, int | None, str]) -> tuple[int, int]:
        _, code, error = report
        if error and not is_peer_failure(error):
            return (0, report[0])
        if not error or (code is not None and code < 0):
            return (1, report[0])
        return (2, report[0])

    return min(reports, key=rank_of)


def _describe_exit(code: int | None, error: str) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"was killed by signal {name}"
    if error:
        return "raised an exception"
    return f"exited with code {code}"


# --- choosing ------------------------------------------------------------------------------------

LAUNCHERS: dict[str, Callable[[StrategyBase], Launcher]] = {
    "none": InlineLauncher,
    "external": ExternalLauncher,
    "popen": PopenLauncher,
    "spawn": lambda strategy: SpawnLauncher(strategy, getattr(strategy, "start_method", None) or "spawn"),
    "fork": lambda strategy: SpawnLauncher(strategy, getattr(strategy, "start_method", None) or "fork"),
    "forkserver": lambda strategy: SpawnLauncher(strategy, getattr(strategy, "start_method", None) or "forkserver"),
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
        raise MisconfigurationError(f"no launcher named {name!r}; known: {', '.join(sorted(LAUNCHERS))}") from None
    return factory(strategy)


def _load_backend_launcher(name: str) -> None:
    """Launchers of optional backends live next to their wrappers and register on import."""
    modules = {"xla": ".wrappers.xla", "horovodrun": ".wrappers.horovod"}
    if name in modules:
        import importlib

        importlib.import_module(modules[name], package=__package__)
