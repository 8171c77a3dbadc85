"""Stand-in for ``torch_xla.runtime``: ranks of the processes the stand-in spawn started."""

from __future__ import annotations

import os


def world_size() -> int:
    return int(os.environ.get("PJRT_LOCAL_PROCESS_COUNT", "1"))


def global_ordinal() -> int:
    return int(os.environ.get("PJRT_LOCAL_PROCESS_RANK", "0"))


def local_ordinal() -> int:
    return global_ordinal()
