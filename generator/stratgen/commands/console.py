"""Where the command line writes: stdout and stderr, in colour only on a terminal."""

from __future__ import annotations

import os
from typing import TextIO


def wants_color(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set to anything (no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


class Console:
    """Writes to stdout and stderr, in colour only on a terminal and never with NO_COLOR."""

    def __init__(self, out: TextIO, err: TextIO, color: bool | None = None) -> None:
        self.out = out
        self.err = err
        if color is None:
            color = wants_color(err)
        self.color = color

    def paint(self, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def say(self, text: str = "") -> None:
        print(text, file=self.out)

    def error(self, text: str) -> None:
        print(self.paint("error: ", "1;31") + text, file=self.err)

    def warn(self, text: str) -> None:
        print(self.paint("warning: ", "1;33") + text, file=self.err)
