"""Access to the package's generated registry (``<package>.registry``)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class StrategyEntry:
    """A registry name: the strategy class and the option values the name presets."""

    cls: type
    preset: dict[str, Any] = field(default_factory=dict)


def generated_registry() -> ModuleType:
    """The generated tables; imported on first use to keep the core free of cycles."""
    return importlib.import_module("..registry", package=__package__)
