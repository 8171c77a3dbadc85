"""Stand-in for ``habana_frameworks.torch.hpu``: pretends STANDIN_HPU_COUNT devices exist."""

from __future__ import annotations

import os


def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    return int(os.environ.get("STANDIN_HPU_COUNT", "2"))
