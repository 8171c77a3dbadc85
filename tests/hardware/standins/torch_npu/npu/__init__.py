"""Stand-in for ``torch_npu.npu``: STANDIN_NPU_COUNT devices (2 by default), trimmed by
ASCEND_RT_VISIBLE_DEVICES; bfloat16 as STANDIN_NPU_BF16 says (yes by default)."""

from __future__ import annotations

from typing import Any

import standin_devices


def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    return standin_devices.visible_count("STANDIN_NPU_COUNT", "ASCEND_RT_VISIBLE_DEVICES")


def set_device(device: Any) -> None:
    standin_devices.set_device(device)


def empty_cache() -> None:
    standin_devices.record("empty_cache")


def is_bf16_supported(including_emulation: bool = False) -> bool:
    return standin_devices.flag("STANDIN_NPU_BF16")
