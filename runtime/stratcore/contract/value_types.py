"""The small value types a spec's values become and the runtime uses as they are: a module to
import (``Requirement``), a test on environment variables (``Condition``), where a cluster value
comes from (``ValueSource``), an option a launcher reads from its strategy (``LauncherOption``),
and the string constraints their fields carry (``Pattern``).
``stratcore.contract`` exports them with the vocabularies.

Importing this module must not import torch: the generator imports it.
"""

# ruff: noqa: RUF009 - _doc() returns dataclasses.field(...)

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Annotated, Any, ClassVar, Literal, get_args

from ..exceptions import MisconfigurationError

#: A runtime class, named by its module and class name, e.g.
#: ``("stratcore.wrappers.ddp", "DDPStrategyBase")``.
RuntimeClass = tuple[str, str]

#: How a cluster value is read from its variable (``stratcore.environment.PARSERS``).
ValueParser = Literal[
    "int",
    "str",
    "slurm_first_host",
    "slurm_job_port",
    "lsf_first_host",
    "lsf_node_rank",
    "lsf_job_port",
]
VALUE_PARSERS: tuple[str, ...] = get_args(ValueParser)

#: Values computed when no variable is set (``ClusterEnvironmentBase._fallback``).
ValueFallback = Literal["free_port", "hostname", "ranks_per_node"]
VALUE_FALLBACKS: tuple[str, ...] = get_args(ValueFallback)


@dataclass(frozen=True)
class Pattern:
    """A regular expression a string must match, and what to call such a string."""

    regex: str
    what: str
    keyword_ok: bool = True


ModulePath = Annotated[
    str,
    Pattern(
        r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$",
        "a dotted module path such as 'torch.distributed'",
    ),
]
EnvVar = Annotated[
    str, Pattern(r"^[A-Za-z_][A-Za-z0-9_]*$", "an environment variable name such as 'SLURM_NTASKS'")
]


def _doc(text: str, default: Any = None, **kwargs: Any) -> Any:
    """A field documented for the spec reference."""
    return field(default=default, metadata={"doc": text}, **kwargs)


@cache
def module_available(name: str) -> bool:
    """Whether ``name`` can be imported, found without importing it: a module, or a package
    with code. A bare folder of that name (a namespace package: no ``__init__.py``, such as a
    project's ``deepspeed/`` of config files on the path) is not the package."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.origin is not None


@dataclass(frozen=True)
class Requirement:
    """A Python module that must be importable, and how to install it."""

    module: ModulePath = field(metadata={"doc": "Module to import, e.g. 'deepspeed'."})
    install: str = _doc("Command or instruction shown when the module is missing.", "")

    #: A spec may write a requirement as this field alone.
    __shorthand__: ClassVar[str] = "module"

    @property
    def available(self) -> bool:
        """Whether the module can be imported here (found without importing it)."""
        return module_available(self.module)  # finding 'a.b' imports 'a' first

    def message(self, user: str) -> str:
        """The one-line error for ``user`` when the module is missing, with the install hint."""
        hint = f"; install it with: {self.install}" if self.install else ""
        return f"{user} needs the '{self.module}' package, which is not installed{hint}"


@dataclass(frozen=True)
class Condition:
    """A test on environment variables."""

    always: bool = _doc("True regardless of the environment.", False)
    all_set: tuple[EnvVar, ...] = _doc("Every one of these variables is set.", ())
    any_set: tuple[EnvVar, ...] = _doc("At least one of these variables is set.", ())
    none_set: tuple[EnvVar, ...] = _doc(
        "None of these variables is set (they mark a launcher that sets the same others).", ()
    )
    not_equal: dict[EnvVar, tuple[str, ...]] = field(
        default_factory=dict,
        metadata={"doc": "None of these variables has one of the listed values."},
    )

    def holds(self, environ: Mapping[str, str] | None = None) -> bool:
        """Whether the condition holds in ``environ`` (the process environment by default);
        a condition that names no variable and is not ``always`` never holds."""
        env = os.environ if environ is None else environ
        if self.always:
            return True
        if not (self.all_set or self.any_set):
            return False
        if not all(name in env for name in self.all_set):
            return False
        if self.any_set and not any(name in env for name in self.any_set):
            return False
        if any(name in env for name in self.none_set):
            return False
        return all(env.get(name) not in values for name, values in self.not_equal.items())


@dataclass(frozen=True)
class ValueSource:
    """Where a cluster value comes from: environment variables, parsed, with a fallback."""

    env: tuple[EnvVar, ...] = _doc("Variables to read; the first one set wins.", ())
    parse: ValueParser | None = _doc(
        "How to read the value: 'int' and 'str', or a scheduler-specific parser."
    )
    default: int | str | None = _doc("Value when no variable is set.")
    fallback: ValueFallback | None = _doc(
        "Computed value when no variable is set and no default is given."
    )

    #: A spec may write a value source as this field alone.
    __shorthand__: ClassVar[str] = "env"


@dataclass(frozen=True)
class LauncherOption:
    """An option a launcher reads from its strategy: its types, default, the values it allows
    and what it does. Every strategy started by that launcher takes it."""

    types: tuple[str, ...]
    default: Any
    choices: tuple[Any, ...]
    doc: str

    def check(self, name: str, value: Any) -> None:
        """Raise MisconfigurationError where ``value`` is not allowed for option ``name``."""
        if value not in self.choices:
            allowed = ", ".join(repr(c) for c in self.choices[:-1]) + f" or {self.choices[-1]!r}"
            raise MisconfigurationError(f"{name}={value!r} is not allowed; use {allowed}")
