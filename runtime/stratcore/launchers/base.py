"""The launcher interface, the launchers that start no process, and what every started rank
does: report its error where its launcher finds it, and end when its launcher is gone."""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import shlex
import threading
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol

from ..environment import ClusterEnvironmentBase
from ..exceptions import MisconfigurationError
from ..rendezvous import HostedStore

#: Set in processes started by PopenLauncher: where to write a traceback, where to count the
#: launches the process entered, and whom to watch.
ERROR_FILE_ENV = "STRATLIB_ERROR_FILE"
LAUNCH_FILE_ENV = "STRATLIB_LAUNCH_FILE"
PARENT_PID_ENV = "STRATLIB_PARENT_PID"
#: A command line put before the command of every rank PopenLauncher starts, and of rank 0 in a
#: job's command (``Launcher.job_command``), split as a POSIX shell splits words: e.g.
#: ``numactl --localalloc`` or a profiler's ``nsys profile``.
RANK_PREFIX_ENV = "STRATLIB_RANK_PREFIX"
#: How long to wait for a stopped process before killing it.
TERMINATE_GRACE = 3.0
#: How long a failed rank's peers get to fail too, so that the report can tell cause from
#: consequence.
PEER_GRACE = 2.0
#: At most how long a launcher, told by a rank's error that a peer went away, waits for that
#: peer's process to end, so that the peer's own error is the one reported. The wait ends as
#: soon as a peer ends, which takes moments on an idle machine and seconds on a busy one; the
#: bound is only reached where the peers stay alive (a remote rank failed while the local ones
#: compute).
PEER_EXIT_WAIT = 60.0
#: How long rank 0 may stay stuck (e.g. in a collective) after another rank failed before its
#: process is ended with the other rank's error.
INTERRUPT_GRACE = 5.0
POLL_INTERVAL = 0.1

#: A failed process: (local rank, exit code or None while running, traceback or "").
Report = tuple[int, int | None, str]


class LaunchTarget(Protocol):
    """What a launcher uses of the strategy it launches (every ``StrategyBase``): the launchers
    know strategies only through this, so that they import nothing of the strategies, which
    import them."""

    @property
    def is_global_zero(self) -> bool:
        """Whether this process is global rank 0 (whose result a launch returns)."""
        ...

    def run_worker(
        self, function: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> Any:
        """Run ``function(strategy, *args, **kwargs)`` in this process, set up for it."""
        ...


class ParallelLaunchTarget(LaunchTarget, Protocol):
    """What the launchers that start (or find) several processes use of a parallel strategy
    (every ``ParallelStrategyBase``)."""

    #: Machines of the job.
    num_nodes: int
    #: Seconds a collective may wait for its peers.
    timeout: float

    @property
    def num_processes(self) -> int:
        """Processes per node."""
        ...

    @property
    def node_rank(self) -> int:
        """This machine's rank among the job's machines."""
        ...

    @property
    def cluster_environment(self) -> ClusterEnvironmentBase:
        """Where ranks and the rendezvous come from (who started the processes)."""
        ...


class Launcher(ABC):
    """Starts the processes of a strategy and runs a function in each."""

    #: The launcher's name in specs and listings ('none', 'popen', ...).
    name: ClassVar[str]
    #: Whether a launch runs in the calling process alone, with no other process taking part.
    in_calling_process: ClassVar[bool] = False

    def __init__(self, strategy: LaunchTarget) -> None:
        self.strategy = strategy

    @property
    def is_interactive_compatible(self) -> bool:
        """Whether it works from a notebook or ``python -c``."""
        return True

    #: Whether the process that runs the job's script is a rank of the job (rank 0, or the
    #: only one), not a process that only starts and waits for the ranks.
    script_is_a_rank: ClassVar[bool] = False

    @classmethod
    def job_command(cls, command: list[str], processes: int) -> list[str]:
        """The command line that runs ``command`` (a Python script) as a job of ``processes``
        ranks on this machine: the command itself where the script starts its ranks, after the
        rank prefix (``rank_command``) where the script's own process is a rank, so that every
        rank of the job runs under it; or, where another program must start every rank
        (horovodrun), that program's command around it."""
        return rank_command(command) if cls.script_is_a_rank else list(command)

    @abstractmethod
    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``function(strategy, *args, **kwargs)`` in every process; return rank 0's result."""


class InlineLauncher(Launcher):
    """Runs the function in the calling process."""

    name = "none"
    in_calling_process: ClassVar[bool] = True
    script_is_a_rank: ClassVar[bool] = True

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self.strategy.run_worker(function, args, kwargs)


class ExternalLauncher(Launcher):
    """For processes started by something else: each runs its own share."""

    name = "external"

    strategy: ParallelLaunchTarget

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        strategy = self.strategy
        environment = strategy.cluster_environment
        expected = strategy.num_nodes * strategy.num_processes
        if not environment.creates_processes_externally and expected > 1:
            raise MisconfigurationError(
                f"{type(strategy).__name__} does not start processes itself; run the script with a "
                f"launcher (torchrun, srun, mpirun) that starts {expected} processes"
            )
        return run_reporting_errors(strategy, function, args, kwargs)


def rendezvous_environ(strategy: ParallelLaunchTarget) -> tuple[HostedStore | None, dict[str, str]]:
    """Where the ranks of a job started here meet: on the first node, a store bound now, before
    any rank starts, and held by the caller until the job ends (see ``stratcore.rendezvous``);
    on other nodes, the first node's address and port. Returns the store and the variables
    that tell the ranks."""
    environment = strategy.cluster_environment
    if environment.node_rank() != 0:
        return None, {
            "MASTER_ADDR": environment.resolved_main_address(),
            "MASTER_PORT": str(environment.main_port),
        }
    store = HostedStore(
        environment.resolved_main_address(),
        environment.given_main_port(),
        strategy.num_nodes * strategy.num_processes,
        strategy.timeout,
    )
    environment.set_main_port(store.port)
    return store, store.environ


_launches_entered = 0


def run_reporting_errors(
    strategy: LaunchTarget,
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


def rank_command(command: list[str]) -> list[str]:
    """The command line that starts a rank running ``command``: ``command`` itself, after the
    prefix that ``STRATLIB_RANK_PREFIX`` holds, if set."""
    return [*shlex.split(os.environ.get(RANK_PREFIX_ENV, "")), *command]


def _until_gone(pid: int) -> Callable[[float | None], bool]:
    """A wait for process ``pid`` to end: called with a timeout (None: no limit), it tells
    whether the process has ended. On Linux it watches the process itself, whoever its parent
    is (a rank started through a prefix such as a profiler is the prefix's child); elsewhere it
    watches whether ``pid`` is still this process's parent."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return lambda timeout: True
    except (AttributeError, OSError):
        handle = None
    if handle is not None:
        return lambda timeout: bool(select.select([handle], [], [], timeout)[0])

    def parent_gone(timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while os.getppid() == pid:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.5)
        return True

    return parent_gone


def watch_parent(parent_pid: int) -> None:
    """End this process when process ``parent_pid`` (the one that launched it) ends: a rank
    must not outlive its launcher, which may have been killed without a chance to stop it."""
    global _watched_parent
    if _watched_parent == parent_pid:
        return
    _watched_parent = parent_pid
    gone = _until_gone(parent_pid)

    def watch() -> None:
        gone(None)
        with contextlib.suppress(OSError):
            os.write(
                2,
                f"launching process {parent_pid} ended; stopping process {os.getpid()}\n".encode(),
            )
        _remove_job_files()
        os._exit(1)

    def remove_files_if_orphaned() -> None:
        if gone(0):
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
