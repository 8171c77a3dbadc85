"""The ``torch.backends`` entry point of the test device: torch calls ``autoload`` at
``import torch``, as it calls a vendor extension's (backend autoload).

It imports nothing at module level: torch runs it in the middle of its own import, which may
itself have started inside ``import stratgen_testdevice``; the package then finishes the load
when its import ends (see its ``__init__``).
"""

from __future__ import annotations

import importlib
import os

#: ``name[:backend]``: the device to load at ``import torch``; unset, nothing is loaded.
AUTOLOAD_ENV = "STRATGEN_TESTDEVICE"


def autoload() -> None:
    """Load the device where ``$STRATGEN_TESTDEVICE`` names it (``testdev``, or ``npu:hccl``
    for a device type and a backend), so that the device is in the processes that ask for it
    only."""
    if not os.environ.get(AUTOLOAD_ENV, "").strip():
        return
    package = importlib.import_module("stratgen_testdevice")
    load_named = getattr(package, "load_named", None)
    if load_named is not None:  # else the package's own import is under way, and loads it
        load_named()
