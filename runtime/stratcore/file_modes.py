"""The mode a new file gets: what a plain ``open()`` would give it under the process's umask.

Files written atomically (a temporary file from ``tempfile.mkstemp``, renamed into place) are
created with mode 0600 whatever the umask; the generator's files and the runtime's checkpoints
are then given ``new_file_mode()``, so that another user or a process run as root can read
them as they could a file written with ``open()``. The standard library only: the generator
imports it.
"""

from __future__ import annotations

import os

__all__ = ["new_file_mode", "umask"]


def umask() -> int:
    """The process's umask, read without changing it where the platform allows
    (``/proc/self/status``); elsewhere set and restored at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode() -> int:
    """The mode ``open()`` gives a new file here: ``0o666`` without the umask's bits."""
    return 0o666 & ~umask()
