"""Progress marks of the parallelism scripts: a line on stderr whenever a script reaches a
milestone (a launch done), which a failure report shows; output is also what tells the
tests' waiting (``stratcore.testing.watch``) that a job is alive."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def reached(out: str | Path, name: str, value: T) -> T:
    """Mark milestone ``name`` (of the job writing to ``out``) and hand ``value`` back."""
    print(f"milestone {name} reached by process {os.getpid()} ({out})", file=sys.stderr, flush=True)
    return value
