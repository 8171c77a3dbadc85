"""Launchers start the training processes of a strategy and stop them all if one fails.

- ``InlineLauncher`` runs in the calling process (single device, DataParallel).
- ``ExternalLauncher`` expects the processes to exist already (torchrun, srun, mpirun).
- ``PopenLauncher`` starts the script again for every other local rank, like torchrun would;
  the calling process is local rank 0. The started processes run the whole script, so they
  take part in every later ``launch`` of it too; the script waits for them when it ends.
- ``SpawnLauncher``, ``ForkLauncher`` and ``ForkServerLauncher`` start every rank with
  torch.multiprocessing (spawn, fork or forkserver) and return rank 0's result to the caller.

A strategy names its launcher by class (``StrategyBase.launcher_class``); each launcher class has a
``name`` ('none', 'external', 'popen', 'spawn', 'fork', 'forkserver'; the XLA and horovodrun
launchers, which come with their engines, are ``stratcore.launchers.xla`` and
``stratcore.launchers.horovodrun``, imported by the strategies that use them).

The launchers that start ranks themselves bind the job's rendezvous store before the first
rank starts and hold it while the job runs (``stratcore.rendezvous``): no other process can
take its port in between. When any rank fails, the launchers stop every other rank and raise ``ProcessFailedError`` with
the failing rank's traceback within seconds; no process is left behind. A process whose
launcher dies ends itself.
"""

from __future__ import annotations

from .base import (
    ExternalLauncher,
    InlineLauncher,
    LaunchTarget,
    Launcher,
    ParallelLaunchTarget,
    run_reporting_errors,
    watch_parent,
)
from .popen import PopenLauncher, script_command
from .reports import PEER_FAILURE_PATTERNS, Report, failure_message, is_peer_failure, root_cause
from .spawn import ForkLauncher, ForkServerLauncher, SpawnLauncher

__all__ = [
    "PEER_FAILURE_PATTERNS",
    "ExternalLauncher",
    "ForkLauncher",
    "ForkServerLauncher",
    "InlineLauncher",
    "LaunchTarget",
    "Launcher",
    "ParallelLaunchTarget",
    "PopenLauncher",
    "Report",
    "SpawnLauncher",
    "failure_message",
    "is_peer_failure",
    "root_cause",
    "run_reporting_errors",
    "script_command",
    "watch_parent",
]
