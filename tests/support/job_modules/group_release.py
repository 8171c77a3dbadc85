"""Whether a job's process group outlived its release, checked in the job's own processes.

Imported by the scripts of jobs that check it: their tests put this folder, which holds only
modules for jobs to import, on the jobs' PYTHONPATH. ``check_at_exit()``, called before the process group exists, registers an exit
handler that runs after the one that releases the group (exit handlers run in reverse order):
if a gloo thread is still alive then, something still holds the group, and its threads would
live on into interpreter shutdown, where now and then one ends the process with SIGABRT after a
successful run. The process then exits with code 3, naming the threads.
"""

from __future__ import annotations

import atexit
import os
import sys
import time

#: The exit code of a process whose group outlived its release.
OUTLIVED = 3


def gloo_threads() -> list[str]:
    """The names of this process's gloo threads (Linux: read from /proc)."""
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm", encoding="utf-8") as comm:
                names.append(comm.read().strip())
        except OSError:
            continue
    return sorted(name for name in names if "gloo" in name)


def check_released() -> None:
    """Exit with ``OUTLIVED`` if a gloo thread is alive."""
    # A thread whose join has returned is still listed in /proc until the kernel has finished
    # its exit, a moment later (longer on a busy machine): wait for that. A group that outlived
    # its release keeps its threads for good.
    left = gloo_threads()
    deadline = time.monotonic() + 10.0
    while left and time.monotonic() < deadline:
        time.sleep(0.01)
        left = gloo_threads()
    if left:
        sys.stderr.write(f"process group outlived its release: threads {left} still run\n")
        sys.stderr.flush()
        os._exit(OUTLIVED)


def check_at_exit() -> None:
    """Check at exit, after the group's release (call before the group exists)."""
    atexit.register(check_released)
