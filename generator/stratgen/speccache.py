"""Remember parsed spec files by content, so that a spec that did not change is not reparsed.

Loading a spec (YAML with locations, then the typed model) takes a few milliseconds a file:
with a hundred specs, that is most of a regeneration after an edit to one of them. The parsed
``SpecFile`` is a pure function of the file's bytes, the name it is shown under (locations carry
it) and stratgen's own code, so it is stored under a hash of exactly those, in the cache folder
the formatter uses (``STRATGEN_CACHE_DIR``; an empty value turns caching off).

The specs a project loads are also kept together, in one bundle per project: reading one file
costs less than reading a hundred. The bundle holds each spec as its entry holds it, under the
same key, and is rewritten when more than an eighth of the project's specs are not in it (or
it holds that many the project no longer has).

The cache can only cost time, never change a result: entries are written atomically (a temporary
file renamed into place), each carries the key it was stored under, and anything unexpected on
reading (a missing, truncated, corrupt, foreign or incompatible entry, or one another user
owns) is ignored and the spec parsed again: an entry holds a hash of its payload, checked before
anything is unpickled. Files that do not parse are never stored.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import Location, SpecError

if TYPE_CHECKING:
    from .model import SpecFile

_PACKAGE = Path(__file__).resolve().parent
#: Bumped when the layout of an entry changes.
_FORMAT = b"stratgen-spec-cache-v1"
_VERSION: str | None = None


def code_digest() -> str:
    """A hash of stratgen's own source (every module of the package), the interpreter's
    version and the installed pyyaml (its location, size and time of change, found without
    importing it): a parsed spec is only reused by the same parser and model classes."""
    global _VERSION
    if _VERSION is None:
        import importlib.util

        h = hashlib.sha256(_FORMAT + b"\0" + sys.version.encode())
        found = importlib.util.find_spec("yaml")
        if found is not None and found.origin:
            info = os.stat(found.origin)
            h.update(f"\0{found.origin}\0{info.st_size}\0{info.st_mtime_ns}".encode())
        for path in sorted(_PACKAGE.glob("*.py")):
            h.update(b"\0" + path.name.encode() + b"\0" + path.read_bytes())
        _VERSION = h.hexdigest()
    return _VERSION


def read_spec_bytes(path: Path, display: str) -> bytes:
    """The bytes of a spec file, or a located error saying why they cannot be read."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise SpecError.single(Location(display), "", "no such file") from None
    except IsADirectoryError:
        raise SpecError.single(Location(display), "", "is a directory, not a spec file") from None
    except OSError as exc:
        raise SpecError.single(Location(display), "", f"cannot read: {exc.strerror}") from None


def wrap(payload: bytes, key: str, layout: bytes = _FORMAT) -> bytes:
    """A cache entry: the layout's name, the key it is stored under and a hash of the
    payload, then the payload."""
    digest = hashlib.sha256(payload).hexdigest()
    return b"\0".join([layout, key.encode(), digest.encode(), payload])


def unwrap(data: bytes, key: str, layout: bytes = _FORMAT) -> bytes | None:
    """The payload of an entry written by ``wrap`` for ``key``; None unless it is whole."""
    header = layout + b"\0" + key.encode() + b"\0"
    if not data.startswith(header):
        return None
    digest, separator, payload = data[len(header) :].partition(b"\0")
    if not separator or digest != hashlib.sha256(payload).hexdigest().encode():
        return None
    return payload


#: The layout of a bundle: the keys of a project's specs, each with its entry's payload.
_BUNDLE = b"stratgen-spec-bundle-v1"


class SpecCache:
    """Parsed spec files stored under ``folder/specs/``; ``folder=None`` stores nothing.
    ``bundle`` names the project's bundle (``folder/specs/bundles/<bundle>``), if any."""

    def __init__(self, folder: Path | None, bundle: str | None = None) -> None:
        self.folder = folder / "specs" if folder is not None else None
        self.bundle = (
            self.folder / "bundles" / bundle if self.folder is not None and bundle else None
        )
        self._bundled: dict[str, bytes] | None = None  # read on first use
        self._used: dict[str, bytes] = {}  # key -> payload, of every spec got or put
        self.hits = 0
        self.misses = 0

    def key(self, data: bytes, display: str) -> str:
        h = hashlib.sha256(code_digest().encode())
        h.update(b"\0" + display.encode("utf-8", "surrogatepass") + b"\0")
        h.update(data)
        return h.hexdigest()

    def _entry(self, key: str) -> Path | None:
        return None if self.folder is None else self.folder / key[:2] / key

    def get(self, key: str) -> SpecFile | None:
        """The spec stored under ``key``, or None when there is none that can be trusted."""
        spec = self._load(key)
        if spec is None:
            self.misses += 1
        else:
            self.hits += 1
        return spec

    def _load(self, key: str) -> SpecFile | None:
        payload = self._bundle().get(key)
        spec = _unpickle(payload) if payload is not None else None
        if spec is None:
            entry = self._entry(key)
            data = read_own(entry) if entry is not None else None
            payload = unwrap(data, key) if data is not None else None
            spec = _unpickle(payload) if payload is not None else None
        if spec is not None and payload is not None:
            self._used[key] = payload
        return spec

    def _bundle(self) -> dict[str, bytes]:
        if self._bundled is None:
            self._bundled = {}
            data = read_own(self.bundle) if self.bundle is not None else None
            payload = None
            if self.bundle is not None and data is not None:
                payload = unwrap(data, self.bundle.name, _BUNDLE)
            try:
                table = pickle.loads(payload) if payload is not None else {}
            except Exception:  # a damaged bundle is only a miss for every spec
                table = {}
            if isinstance(table, dict):
                self._bundled = {
                    k: v for k, v in table.items() if isinstance(k, str) and isinstance(v, bytes)
                }
        return self._bundled

    def save_bundle(self) -> None:
        """Keep the specs got or put since this cache was made as the project's bundle,
        unless the bundle holds nearly those already: a few specs edited since it was written
        are read from their own entries, and rewriting it would cost more than that."""
        if self.bundle is None:
            return
        used, bundled = self._used.keys(), self._bundle().keys()
        if bundled and len(used - bundled) + len(bundled - used) <= len(used) // 8:
            return
        table = dict(sorted(self._used.items()))
        write_atomic(self.bundle, wrap(pickle.dumps(table, protocol=5), self.bundle.name, _BUNDLE))

    def put(self, key: str, spec: SpecFile) -> None:
        entry = self._entry(key)
        if entry is None:
            return
        try:
            payload = pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # pragma: no cover - the model is plain dataclasses
            return
        self._used[key] = payload
        write_atomic(entry, wrap(payload, key))


def read_own(path: Path) -> bytes | None:
    """The bytes of a cache file this user owns; None if it cannot be read or is not ours
    (unpickling runs code: only our own files are read)."""
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            if hasattr(os, "getuid") and info.st_uid != os.getuid():
                return None
            return handle.read()
    except OSError:
        return None


def _unpickle(payload: bytes) -> SpecFile | None:
    try:
        spec = pickle.loads(payload)
    except Exception:  # a corrupt or incompatible entry of any kind is only a miss
        return None
    from .model import SpecFile

    return spec if isinstance(spec, SpecFile) else None


def write_atomic(path: Path, data: bytes) -> None:
    """Write a cache file whole or not at all (a temporary file renamed into place)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass  # a read-only or full cache only costs speed
