"""Stand-in for Moore Threads' ``torch_musa``, used only by stratgen's tests.

Importing it renames torch's PrivateUse1 device to 'musa' and registers the 'mccl' backend for
it, as importing the real package does: the device is the project's test device
(``standin_devices.load_device``), STANDIN_MUSA_COUNT devices (2 by default) trimmed by
MUSA_VISIBLE_DEVICES, whose collectives run gloo on the host under MCCL's name; bfloat16 as
STANDIN_MUSA_BF16 says.

Written from Moore Threads' source, torch_musa 2.7.1 (MooreThreads/torch_musa on GitHub, tag
v2.7.1), which is not on PyPI: torch_musa/core/device.py (is_available, device_count,
set_device, is_bf16_supported, exported by torch_musa), core/memory.py (empty_cache),
csrc/distributed/Register.cpp (the backend). specs/musa.yaml names the file of each fact.
"""

from __future__ import annotations

from typing import Any

import standin_devices

standin_devices.load_device("musa", "mccl", "STANDIN_MUSA_COUNT", "MUSA_VISIBLE_DEVICES")
standin_devices.record("torch_musa imported")


def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    return standin_devices.visible_count("STANDIN_MUSA_COUNT", "MUSA_VISIBLE_DEVICES")


def set_device(device: Any) -> None:
    standin_devices.set_device(device)


def empty_cache() -> None:
    standin_devices.record("empty_cache")


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return standin_devices.flag("STANDIN_MUSA_BF16")
