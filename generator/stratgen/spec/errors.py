"""Errors a user can cause, and where in which file they come from.

Every mistake in a spec is reported as ``file:line:column: field.path: message``. Errors are
collected per run so that a user sees all of them at once, sorted by position.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Location:
    """A position in a spec file; line and column count from 1."""

    file: str
    line: int = 0
    column: int = 0

    def __str__(self) -> str:
        if self.line <= 0:
            return self.file
        return f"{self.file}:{self.line}:{self.column}"


class StratgenError(Exception):
    """A mistake by the user (bad input, bad configuration): exit code 2, no traceback."""


@dataclass(frozen=True)
class SpecProblem:
    """One thing wrong with a spec."""

    location: Location
    path: str
    message: str
    related: Location | None = None
    related_label: str = "the other definition"

    def __str__(self) -> str:
        where = f"{self.location}: {self.path}: " if self.path else f"{self.location}: "
        text = where + self.message
        if self.related is not None:
            text += f"\n  {self.related}: {self.related_label}"
        return text


class SpecError(StratgenError):
    """One or more problems in spec files."""

    def __init__(self, problems: Sequence[SpecProblem]) -> None:
        self.problems = sorted(problems, key=lambda p: (p.location, p.path, p.message))
        super().__init__("\n".join(str(p) for p in self.problems))

    @classmethod
    def single(
        cls, location: Location, path: str, message: str, related: Location | None = None
    ) -> SpecError:
        return cls([SpecProblem(location, path, message, related)])

    def __reduce__(self) -> tuple[type[SpecError], tuple[list[SpecProblem]]]:
        return (type(self), (list(self.problems),))


def one_of(choices: Iterable[object]) -> str:
    """Render allowed values as ``'a', 'b' or 'c'``."""
    items = [repr(c) for c in choices]
    if not items:
        return "nothing"
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " or " + items[-1]
