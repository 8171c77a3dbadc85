"""Call log shared by the stand-in packages of stratgen's hardware tests.

Every stand-in appends one JSON line per call to the file named by STANDIN_EVENTS, so that a
test can check which functions ran, in which process, and in which order.
"""

from __future__ import annotations

import json
import os
from typing import Any


def record(event: str, **details: Any) -> None:
    path = os.environ.get("STANDIN_EVENTS")
    if not path:
        return
    line = json.dumps({"pid": os.getpid(), "event": event, **details}, default=str)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
