"""The runtime's version, and the check generated packages run when they are imported.

A generated package is made for one ``major.minor`` of the runtime (the generator stamps it);
it works with that release and any later one of the same series. Anything else fails at
import, in one line that names both versions and the fix, instead of a confusing error deep
inside a training run.
"""

from __future__ import annotations

__all__ = [
    "RUNTIME_SERIES",
    "RuntimeVersionError",
    "__version__",
    "check_runtime_version",
    "runtime_requirement",
]

__version__ = "0.3.0"

#: The ``major.minor`` series of this runtime: what the generator stamps into new packages.
RUNTIME_SERIES = ".".join(__version__.split(".")[:2])


class RuntimeVersionError(ImportError):
    """A generated package needs another series of the runtime."""


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:2])


def runtime_requirement(series: str = RUNTIME_SERIES) -> str:
    """The pip requirement of the runtime releases that serve code generated for ``series``
    (``major.minor``): ``"stratcore>=0.3,<0.4"``; before 1.0 each minor release is a series of
    its own."""
    major, minor = _numbers(series)
    upper = f"{major}.{minor + 1}" if major == 0 else f"{major + 1}"
    return f"stratcore>={series},<{upper}"


def check_runtime_version(generated_for: str, package: str) -> None:
    """Raise [`RuntimeVersionError`][stratcore.version.RuntimeVersionError] unless this runtime serves code generated for
    ``generated_for`` (``major.minor``): the same series, at least as new."""
    if generated_for == RUNTIME_SERIES:
        return
    raise RuntimeVersionError(
        f"{package} was generated for stratcore {generated_for}, but stratcore {__version__} is "
        f"installed: run `pip install '{runtime_requirement(generated_for)}'`, or regenerate "
        f"{package} with a stratgen made for stratcore {RUNTIME_SERIES}"
    )
