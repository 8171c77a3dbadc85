"""Progress marks of the parallelism scripts: every process appends a line to
``<out>/progress`` whenever it reaches a milestone (a launch done); the tests take a growing
file as the sign that a job is alive (``support.run_nodes``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def reached(out: str | Path, name: str, value: T) -> T:
    """Mark milestone ``name`` in ``out`` and hand ``value`` back."""
    with (Path(out) / "progress").open("a", encoding="utf-8") as file:
        file.write(f"{os.getpid()} {name}\n")
    return value
