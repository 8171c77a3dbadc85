"""Remember what ``stratgen.corefacts`` reads from the runtime's source, across runs.

Parsing the runtime's modules to learn its class attributes (``ast``) takes tens of
milliseconds, in every run that resolves specs. The facts are a pure function of the runtime's
source and stratgen's own code, so they are stored under a hash of both (every file of the
installed ``stratcore`` package, and ``speccache.code_digest``) with the question asked, in
the cache folder (``STRATGEN_CACHE_DIR``; an empty value turns caching off). Entries are
written and checked as the parsed-spec cache's are (``speccache.wrap``): anything missing or
damaged is only computed again.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TypeVar, cast

from .speccache import code_digest, read_own, unwrap, wrap, write_atomic

T = TypeVar("T")

#: The layout of an entry; bumped when it changes.
_LAYOUT = b"stratgen-runtime-facts-v1"
_SKIP_PARTS = frozenset({"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"})


def folder_digest(folder: Path) -> str:
    """A hash of every file under ``folder`` (names and bytes), bytecode and tool caches
    left out."""
    h = hashlib.sha256()
    if not folder.is_dir():
        return h.hexdigest()
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_PARTS)
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = Path(dirpath, name)
            h.update(path.relative_to(folder).as_posix().encode() + b"\0")
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


@cache
def runtime_dir() -> Path:
    """The folder of the installed ``stratcore`` package."""
    import importlib.util

    spec = importlib.util.find_spec("stratcore")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("stratcore, the runtime of generated packages, is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


@cache
def runtime_digest() -> str:
    """A hash of the installed runtime's source, once per process (as ``corefacts`` reads
    it once per process)."""
    return folder_digest(runtime_dir())


def remembered(question: str, compute: Callable[[], T]) -> T:
    """``compute()``, or what it returned in an earlier run with the same runtime source, the
    same stratgen and the same ``question`` (a name for what ``compute`` works out)."""
    from .fmt import cache_dir

    folder = cache_dir()
    if folder is None:
        return compute()
    h = hashlib.sha256(_LAYOUT + b"\0" + code_digest().encode() + b"\0")
    h.update(runtime_digest().encode() + b"\0" + question.encode())
    key = h.hexdigest()
    entry = folder / "facts" / key
    found = _read(entry, key)
    if found is not None:
        return cast(T, found[0])
    value = compute()
    _write(entry, key, value)
    return value


def _read(entry: Path, key: str) -> tuple[object] | None:
    data = read_own(entry)
    payload = unwrap(data, key, _LAYOUT) if data is not None else None
    if payload is None:
        return None
    try:
        value = pickle.loads(payload)
    except Exception:  # a corrupt or incompatible entry of any kind is only a miss
        return None
    return value if isinstance(value, tuple) and len(value) == 1 else None


def _write(entry: Path, key: str, value: object) -> None:
    try:
        payload = pickle.dumps((value,), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # pragma: no cover - the facts are plain data
        return
    write_atomic(entry, wrap(payload, key, _LAYOUT))
