"""Launchers: how processes are started, the runtime class of each, and the options each reads
from its strategy.

Importing this module must not import torch: the generator imports it.
"""

from __future__ import annotations

from .value_types import LauncherOption, RuntimeClass

#: How processes are started: launcher name -> runtime Launcher class.
LAUNCHERS: dict[str, RuntimeClass] = {
    "none": ("stratcore.launchers", "InlineLauncher"),
    "popen": ("stratcore.launchers", "PopenLauncher"),
    "spawn": ("stratcore.launchers", "SpawnLauncher"),
    "fork": ("stratcore.launchers", "ForkLauncher"),
    "forkserver": ("stratcore.launchers", "ForkServerLauncher"),
    "xla": ("stratcore.launchers.xla", "XLALauncher"),
    "external": ("stratcore.launchers", "ExternalLauncher"),
    "horovodrun": ("stratcore.launchers.horovodrun", "HorovodRunLauncher"),
}


#: Options each launcher reads from its strategy, by launcher name.
LAUNCHER_OPTIONS: dict[str, dict[str, LauncherOption]] = {
    "spawn": {
        "start_method": LauncherOption(
            ("str",),
            "spawn",
            ("spawn", "fork", "forkserver"),
            "How torch.multiprocessing starts the processes.",
        )
    },
    "xla": {
        "start_method": LauncherOption(
            ("str",),
            "fork",
            ("fork", "spawn"),
            "How torch_xla starts the processes; 'fork' also works from notebooks.",
        )
    },
}

#: Launchers that start a process per device (or, 'external', find them started) for any
#: wrapper: the rest run in the calling process ('none') or come with their engine.
GENERAL_LAUNCHERS: tuple[str, ...] = ("popen", "spawn", "fork", "forkserver", "external")
