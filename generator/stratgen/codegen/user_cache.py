"""The user's stratgen cache: the folder where formatting keeps black's layouts and templating
jinja2's compiled templates, and black's version, which keys the layouts.

What is in the cache ends up in generated code (a layout) or runs (a compiled template is
Python bytecode, and jinja2 unpickles a checksum before it), so the cache is trusted only where
no one but this user can change it: ``trusted_folder`` for the folder (and every folder above
it), ``trusted_file`` for each file read. A cache that another user or the group can write is
not used at all; that only costs the time it would have saved.
"""

from __future__ import annotations

import os
import stat

#: Permission bits that let the group or others change a file or a folder's entries.
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def cache_folder() -> str | None:
    """The user's stratgen cache, where black's layouts are remembered (``formatting``) and
    compiled templates kept (``templating``): ``STRATGEN_CACHE_DIR``, none at all where it is
    set empty, or where it is not ``trusted_folder``."""
    configured = os.environ.get("STRATGEN_CACHE_DIR")
    if configured == "":
        return None
    if configured:
        folder = configured
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        folder = os.path.join(base, "stratgen")
    return folder if trusted_folder(folder) else None


def trusted_folder(folder: str) -> bool:
    """Whether only this user can change what ``folder`` holds: the folder, where it exists,
    belongs to this user and no one else may write it; every folder above it (as written and
    as resolved) belongs to this user or to root, and no one else may write it unless it is
    sticky (``/tmp``: others cannot rename what is not theirs)."""
    if not hasattr(os, "geteuid"):  # pragma: no cover - not POSIX
        return True
    user = os.geteuid()
    for path in dict.fromkeys([os.path.abspath(folder), os.path.realpath(folder)]):
        if os.path.exists(path):
            own = os.stat(path)
            if own.st_uid != user or own.st_mode & _OTHERS_WRITE:
                return False
        parent = os.path.dirname(path)
        while True:
            try:
                info = os.stat(parent)
            except OSError:
                info = None
            if info is not None:
                if info.st_uid not in (user, 0):
                    return False
                if info.st_mode & _OTHERS_WRITE and not info.st_mode & stat.S_ISVTX:
                    return False
            if os.path.dirname(parent) == parent:
                break
            parent = os.path.dirname(parent)
    return True


def trusted_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a regular file of this user's that no one else may write (not a
    symbolic link)."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(info.st_mode) or info.st_mode & _OTHERS_WRITE:
        return False
    return not hasattr(os, "geteuid") or info.st_uid == os.geteuid()


def make_folder(folder: str | os.PathLike[str]) -> None:
    """Create a cache folder (and those above it) that only this user can write."""
    os.makedirs(folder, mode=0o700, exist_ok=True)


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
