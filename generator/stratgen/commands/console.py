"""Where the command line writes: stdout and stderr, in colour only on a terminal, and no
character of what it prints a control for the terminal (``terminal_text``)."""

from __future__ import annotations

import os
import re
import unicodedata
from typing import TextIO

#: The Unicode categories of characters a terminal acts on instead of showing them: controls
#: (escape sequences start with ESC or CSI), format characters (bidirectional overrides and
#: isolates, zero-width characters, tag characters) and line and paragraph separators.
_ACTED_ON = frozenset({"Cc", "Cf", "Zl", "Zp"})
#: The ASCII ones, for text that is all ASCII (a tab and "\n" are printed as they are).
_ASCII_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")


def terminal_text(text: str) -> str:
    """``text`` with every character a terminal would act on written as an escape (``\\x1b``,
    ``\\u202e``): whatever the command line prints (values from specs, diffs of generated
    files) goes through it."""
    if text.isascii():
        return _ASCII_CONTROL.sub(lambda match: _escaped(match.group()), text)
    return "".join(
        _escaped(char) if char not in "\t\n" and unicodedata.category(char) in _ACTED_ON else char
        for char in text
    )


def _escaped(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


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
        print(terminal_text(text), file=self.out)

    def error(self, text: str) -> None:
        print(self.paint("error: ", "1;31") + terminal_text(text), file=self.err)

    def warn(self, text: str) -> None:
        print(self.paint("warning: ", "1;33") + terminal_text(text), file=self.err)
