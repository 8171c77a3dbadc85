"""Stand-in for ``torch_mlu.mlu``: STANDIN_MLU_COUNT devices (2 by default), trimmed by
MLU_VISIBLE_DEVICES; bfloat16 as STANDIN_MLU_BF16 says (no by default: Cambricon's MLU370
generation has none). The device and 'cncl' come with the package (``torch_mlu``)."""

from __future__ import annotations

from typing import Any

import standin_devices


def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    return standin_devices.visible_count("STANDIN_MLU_COUNT", "MLU_VISIBLE_DEVICES")


def set_device(device: Any) -> None:
    standin_devices.set_device(device)


def empty_cache() -> None:
    standin_devices.record("empty_cache")


def is_bf16_supported() -> bool:
    return standin_devices.flag("STANDIN_MLU_BF16", default=False)
