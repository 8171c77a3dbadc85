"""Optional dependencies: probe them without importing, import them only when used."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from .exceptions import MissingDependencyError


@cache
def module_available(name: str) -> bool:
    """Whether ``name`` can be imported, found without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True)
class Requirement:
    """A module a component needs, and how to install it."""

    module: str
    install: str = ""

    @property
    def available(self) -> bool:
        parts = self.module.split(".")
        return all(module_available(".".join(parts[: i + 1])) for i in range(len(parts)))

    def message(self, user: str) -> str:
        hint = f"; install it with: {self.install}" if self.install else ""
        return f"{user} needs the '{self.module}' package, which is not installed{hint}"


def require(requirements: Iterable[Requirement], user: str) -> None:
    """Raise MissingDependencyError for the first requirement that is not installed."""
    for requirement in requirements:
        if not requirement.available:
            raise MissingDependencyError(requirement.message(user))


def import_object(path: str) -> Any:
    """Import ``'package.module:attribute'`` and return the attribute."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def import_optional(module: str, user: str, install: str = "") -> Any:
    """Import a backend module, turning its absence into a clear MissingDependencyError."""
    requirement = Requirement(module, install)
    require([requirement], user)
    return importlib.import_module(module)
