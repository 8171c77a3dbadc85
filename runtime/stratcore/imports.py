"""Optional dependencies: probe them without importing, import them only when used."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from .contract import Requirement, module_available  # noqa: F401 - re-exported
from .exceptions import MissingDependencyError


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
