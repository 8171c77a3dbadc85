"""What the stand-ins of device extensions share: the device itself, a device count read from
the environment and trimmed by the vendor's visible-devices variable, and call records.

Each stand-in package (torch_npu, torch_mlu, torch_musa) is a few lines on top of this module,
with the import paths and functions of the real package that the built-in specs name. Like the
real extensions, which rename torch's PrivateUse1 device and register their collective backend
when they are imported, importing a stand-in makes its device real in the process: the project's
test device (tests/support/testdevice, a PrivateUse1 extension in C++) under the vendor's device
type and backend name, so tensors live on ``npu:0``, ``mlu:1``, ... None of them is the vendor's
software: the device's memory is host memory and its collectives run gloo on the host.
"""

from __future__ import annotations

import os
from typing import Any

import standin_events


def visible_count(count_env: str, visible_env: str, default: int = 2) -> int:
    """``count_env`` devices (``default`` when unset), as many as ``visible_env`` lists where
    it is set, as the vendors' runtimes count them."""
    count = int(os.environ.get(count_env, str(default)))
    visible = os.environ.get(visible_env)
    if visible is not None:
        listed = [part for part in visible.split(",") if part.strip().isdigit()]
        count = min(count, len(listed))
    return count


def flag(env: str, default: bool = True) -> bool:
    """A yes/no answer of a stand-in probe, from the environment."""
    return os.environ.get(env, "1" if default else "0") == "1"


def record(event: str, **details: object) -> None:
    standin_events.record(event, **details)


def load_device(device_type: str, backend: str, count_env: str, visible_env: str) -> None:
    """Make the vendor's device real in this process, as importing the vendor's extension does:
    the test device renamed ``device_type``, with ``visible_count(count_env, visible_env)``
    devices and its c10d backend registered as ``backend``. With no visible device there is
    no device at all (the extension would find none)."""
    count = visible_count(count_env, visible_env)
    if count > 0:
        import stratgen_testdevice

        # Where torch loaded the device at start (as it loads the real extension, through its
        # 'torch.backends' entry point), it is that device, with its count.
        stratgen_testdevice.load(
            device_type, backend, count=None if stratgen_testdevice.loaded() else count
        )


def set_device(device: Any) -> None:
    """The device module's ``set_device``, recorded."""
    import torch

    record("set_device", device=str(device))
    index = torch.device(device).index if not isinstance(device, int) else device
    torch.accelerator.set_device_index(index or 0)
