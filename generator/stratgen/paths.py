"""Where stratgen finds a project, its cache and the files of a folder it reads or owns."""

from __future__ import annotations

import os

#: Folders and files that tools leave among sources and generated files: never read, hashed or
#: removed.
IGNORED_PARTS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
IGNORED_SUFFIXES = (".pyc", ".pyo")
#: The lock file of a run that writes (``files.Tree``), inside the output folder.
LOCK_NAME = ".stratgen.lock"
#: The table a project's pyproject.toml holds stratgen's settings in.
CONFIG_TABLE = "[tool.stratgen]"


def find_root(start: str) -> str:
    """The nearest folder at or above ``start`` whose pyproject.toml has [tool.stratgen]
    (``start`` itself when none has)."""
    folder = start
    while True:
        pyproject = os.path.join(folder, "pyproject.toml")
        try:
            with open(pyproject, encoding="utf-8", errors="replace") as handle:
                if CONFIG_TABLE in handle.read():
                    return folder
        except OSError:
            pass
        parent = os.path.dirname(folder)
        if parent == folder:
            return start
        folder = parent


def cache_folder() -> str | None:
    """The user's stratgen cache, where black's layouts are remembered (``fmt``):
    ``STRATGEN_CACHE_DIR``, none at all where it is set empty."""
    configured = os.environ.get("STRATGEN_CACHE_DIR")
    if configured == "":
        return None
    if configured:
        return configured
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "stratgen")


def files_under(folder: str) -> list[tuple[str, str]]:
    """Every file under ``folder`` (tool caches, bytecode and the lock file left out), in a
    fixed order: its path relative to the folder ('/'-separated), and its full path."""
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_PARTS)
        relative = os.path.relpath(dirpath, folder).replace(os.sep, "/")
        prefix = "" if relative == "." else relative + "/"
        found += [
            (prefix + name, os.path.join(dirpath, name))
            for name in sorted(filenames)
            if not name.endswith(IGNORED_SUFFIXES) and name != LOCK_NAME
        ]
    return found


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
