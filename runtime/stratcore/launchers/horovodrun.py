"""The ``horovodrun`` launcher: Horovod's own launcher (``horovodrun``, or ``mpirun``) starts the
processes; this one runs the work in each of them, and, asked to start several processes
itself, refuses with the command line that would.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..exceptions import MisconfigurationError
from .base import Launcher, ParallelLaunchTarget, run_reporting_errors
from .popen import script_command


def horovodrun_command(num_processes: int, num_nodes: int, processes_per_node: int) -> str:
    """The command line that starts this script under horovodrun."""
    try:
        script = shlex.join(script_command())
    except MisconfigurationError:  # an interactive session has no script to name
        script = "python your_script.py"
    hosts = ""
    if num_nodes > 1:
        hosts = " -H " + ",".join(
            f"host{index + 1}:{processes_per_node}" for index in range(num_nodes)
        )
    return f"horovodrun -np {num_processes}{hosts} {script}"


def horovodrun_executable() -> str:
    """The ``horovodrun`` installed with this Python (its environment need not be on PATH)."""
    beside = Path(sys.executable).with_name("horovodrun")
    return str(beside) if beside.is_file() else "horovodrun"


class HorovodRunLauncher(Launcher):
    """Runs in the processes horovodrun (or mpirun) started; alone it only runs one process."""

    name = "horovodrun"

    strategy: ParallelLaunchTarget

    @property
    def is_interactive_compatible(self) -> bool:
        return False

    @classmethod
    def job_command(cls, command: list[str], processes: int) -> list[str]:
        """``command`` started by horovodrun on this machine, with Gloo (no MPI needed)."""
        hosts = f"localhost:{processes}"
        return [horovodrun_executable(), "-np", str(processes), "-H", hosts, "--gloo", *command]

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        strategy = self.strategy
        environment = strategy.cluster_environment
        expected = strategy.num_nodes * strategy.num_processes
        started_externally = environment.creates_processes_externally and not environment.settable
        if expected > 1 and not started_externally:
            command = horovodrun_command(expected, strategy.num_nodes, strategy.num_processes)
            raise MisconfigurationError(
                f"{type(strategy).__name__} does not start processes itself: horovodrun does. "
                f"Run: {command}"
            )
        return run_reporting_errors(strategy, function, args, kwargs)
