"""The user's stratgen cache: the folder where formatting keeps black's layouts and templating
jinja2's compiled templates, and black's version, which keys the layouts."""

from __future__ import annotations

import os


def cache_folder() -> str | None:
    """The user's stratgen cache, where black's layouts are remembered (``formatting``) and
    compiled templates kept (``templating``): ``STRATGEN_CACHE_DIR``, none at all where it is
    set empty."""
    configured = os.environ.get("STRATGEN_CACHE_DIR")
    if configured == "":
        return None
    if configured:
        return configured
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "stratgen")


_BLACK_VERSION: str | None = None


def black_version() -> str:
    """The installed black's version, read from its metadata folder's name without importing
    black or importlib.metadata (each costs tens of milliseconds), once per process; 'unknown'
    without one."""
    global _BLACK_VERSION
    if _BLACK_VERSION is None:
        import importlib.util

        _BLACK_VERSION = "unknown"
        spec = importlib.util.find_spec("black")
        if spec is not None and spec.origin:
            site = os.path.dirname(os.path.dirname(spec.origin))
            found = sorted(
                name
                for name in os.listdir(site)
                if name.startswith("black-") and name.endswith(".dist-info")
            )
            if found:
                _BLACK_VERSION = found[-1][len("black-") : -len(".dist-info")]
    return _BLACK_VERSION
