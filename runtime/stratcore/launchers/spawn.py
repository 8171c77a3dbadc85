"""SpawnLauncher: every local rank starts with torch.multiprocessing (spawn, fork or
forkserver), and rank 0's result comes back to the caller."""

from __future__ import annotations

import contextlib
import os
import pickle
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from ..contract import LAUNCHER_OPTIONS
from ..exceptions import ProcessFailedError
from ..precision.base import apply_to_tensors
from ..process_group import release_process_group
from . import base
from .base import (
    LaunchTarget,
    Launcher,
    ParallelLaunchTarget,
    rendezvous_environ,
    run_reporting_errors,
    watch_parent,
)
from .reports import failure_message, is_peer_failure, root_cause


def _spawned_worker(
    local_rank: int,
    held: list[ParallelLaunchTarget],
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    result_file: str,
    rendezvous: Mapping[str, str],
) -> None:
    # The process keeps its arguments for its whole life: taken out of their list, the strategy
    # (its model, an engine, their process groups) is freed once this function is done.
    strategy = held.pop()
    # The parent is the launching process, or the forkserver, which ends with it.
    watch_parent(os.getppid())
    os.environ["LOCAL_RANK"] = str(local_rank)
    os.environ.update(rendezvous)
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
        del strategy  # the release frees it, where nothing else holds it (an exception does)
        # Processes started by fork or forkserver end without running atexit handlers.
        release_process_group()


def _to_cpu(value: Any) -> Any:
    return apply_to_tensors(value, lambda t: t.detach().cpu())


class SpawnLauncher(Launcher):
    """Starts every local rank with torch.multiprocessing; the caller only waits.

    The start method is the class's ``default_start_method`` unless ``start_method`` (or the
    strategy's ``start_method`` option) names another.
    """

    name = "spawn"
    default_start_method: ClassVar[str] = LAUNCHER_OPTIONS["spawn"]["start_method"].default
    strategy: ParallelLaunchTarget

    def __init__(self, strategy: LaunchTarget, start_method: str | None = None) -> None:
        super().__init__(strategy)
        start_method = (
            start_method or getattr(strategy, "start_method", None) or self.default_start_method
        )
        LAUNCHER_OPTIONS["spawn"]["start_method"].check("start_method", start_method)
        self.start_method: str = start_method

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
        store, rendezvous = rendezvous_environ(strategy)
        with tempfile.TemporaryDirectory(prefix="stratlib-spawn-") as folder:
            result_file = os.path.join(folder, "result.pickle")
            try:
                process_context = mp.start_processes(
                    _spawned_worker,
                    args=([strategy], function, args, kwargs, result_file, rendezvous),
                    nprocs=strategy.num_processes,
                    join=False,
                    start_method=self.start_method,
                )
                processes = process_context.processes
                try:
                    failed = _wait_for_processes(processes, process_context.error_files)
                    if failed:
                        raise self._failure(process_context, failed)
                finally:
                    _stop_processes(processes)
                    _remove_error_files(process_context.error_files)
            finally:
                if store is not None:
                    store.close()
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
        return strategy.node_rank * strategy.num_processes + local_rank


class ForkLauncher(SpawnLauncher):
    """SpawnLauncher with 'fork': the processes inherit the caller's memory (notebooks)."""

    name = "fork"
    default_start_method = "fork"


class ForkServerLauncher(SpawnLauncher):
    """SpawnLauncher with 'forkserver'."""

    name = "forkserver"
    default_start_method = "forkserver"


def _wait_for_processes(processes: list[Any], error_files: list[str]) -> list[int]:
    """Wait until every process ended, or one failed; return the local ranks that failed."""
    from multiprocessing.connection import wait

    pending = {p.sentinel: index for index, p in enumerate(processes)}
    while pending:
        for sentinel in wait(list(pending), timeout=base.POLL_INTERVAL):
            index = pending.pop(sentinel)
            processes[index].join()
            if processes[index].exitcode != 0:
                _let_peers_fail(processes, index, _read_spawn_error(error_files[index]))
                return [i for i, p in enumerate(processes) if p.exitcode not in (None, 0)]
    return []


def _let_peers_fail(processes: list[Any], failed: int, error: str) -> None:
    """Give the peers of the failed process ``failed`` time to fail too, so that the report
    can tell cause from consequence: none if it reported an error of its own; until another
    ends (bounded by PEER_EXIT_WAIT) if its error says that a peer went away, since that peer
    is ending, slowly on a busy machine; then PEER_GRACE for the others, which usually fail a
    moment later with a connection error."""
    from multiprocessing.connection import wait

    if error and not is_peer_failure(error):
        return
    others = [p.sentinel for i, p in enumerate(processes) if i != failed]
    if error and others:
        wait(others, timeout=base.PEER_EXIT_WAIT)
    deadline = time.monotonic() + base.PEER_GRACE
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))


def _stop_processes(processes: list[Any]) -> None:
    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + base.TERMINATE_GRACE
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()


def _remove_error_files(paths: list[str]) -> None:
    """Remove the files torch's spawned processes write their error into (in the temporary
    folder, one per failed process), once read: nothing else removes them."""
    for path in paths:
        with contextlib.suppress(OSError):
            os.remove(path)


def _read_spawn_error(path: str | None) -> str:
    if not path:
        return ""
    try:
        with open(path, "rb") as handle:
            return str(pickle.load(handle))
    except (OSError, EOFError, pickle.UnpicklingError):
        return ""
