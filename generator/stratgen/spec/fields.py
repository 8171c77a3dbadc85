"""How the spec model declares a key: as a dataclass field whose metadata holds its
documentation and whether ``extends`` copies it (``model`` uses these)."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from .errors import Location


def required(text: str, *, inherit: bool = True) -> Any:
    """A spec key that must be given."""
    return field(metadata={"doc": text, "inherit": inherit})


def described(text: str, *, default: Any = None, inherit: bool = True) -> Any:
    """An optional spec key; ``inherit`` says whether ``extends`` copies it."""
    return field(default=default, metadata={"doc": text, "inherit": inherit})


def described_factory(text: str, factory: Any, *, inherit: bool = True) -> Any:
    return field(default_factory=factory, metadata={"doc": text, "inherit": inherit})


def internal() -> Any:
    """Bookkeeping that is not part of the spec format (locations, source files)."""
    return field(
        default_factory=lambda: Location("<unknown>"),
        compare=False,
        repr=False,
        metadata={"internal": True},
    )


def internal_locs() -> Any:
    return field(default_factory=dict, compare=False, repr=False, metadata={"internal": True})
