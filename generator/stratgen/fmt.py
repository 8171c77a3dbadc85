"""Format generated Python with black, remembering results by content.

black takes tens of milliseconds a file. Formatting is a pure function of the source, the
black version and the mode, so results are cached under that key: a regeneration that
changes nothing formats nothing.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

LINE_LENGTH = 100


class FormatError(Exception):
    """black rejected generated code: a template bug, never a user error."""


def cache_dir() -> Path | None:
    configured = os.environ.get("STRATGEN_CACHE_DIR")
    if configured == "":
        return None
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "stratgen"


class Formatter:
    def __init__(self, cache: Path | None = None, use_cache: bool = True) -> None:
        self._mode: Any = None
        self._version = ""
        self.cache = (cache or cache_dir()) if use_cache else None
        self.hits = 0
        self.misses = 0

    def _black(self) -> Any:
        import black  # imported on first use: a warm cache never pays for it

        if self._mode is None:
            self._mode = black.Mode(
                line_length=LINE_LENGTH, target_versions={black.TargetVersion.PY311}
            )
            self._version = black.__version__
        return black

    def _key(self, source: str) -> str:
        digest = hashlib.sha256()
        digest.update(f"stratgen-black-v1|{LINE_LENGTH}|py311|".encode())
        digest.update(_black_version().encode())
        digest.update(b"\0")
        digest.update(source.encode("utf-8"))
        return digest.hexdigest()

    def format(self, source: str, name: str) -> str:
        key = self._key(source)
        cached = self._read(key)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        black = self._black()
        try:
            result = black.format_str(source, mode=self._mode)
        except Exception as exc:  # black raises several types for invalid code
            raise FormatError(f"{name}: generated code is not valid Python: {exc}") from exc
        self._write(key, result)
        return str(result)

    def _read(self, key: str) -> str | None:
        if self.cache is None:
            return None
        try:
            return (self.cache / key[:2] / key).read_text(encoding="utf-8")
        except OSError:
            return None

    def _write(self, key: str, text: str) -> None:
        if self.cache is None:
            return
        folder = self.cache / key[:2]
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(tmp, folder / key)
        except OSError:
            pass  # a read-only or full cache only costs speed


_VERSION: str | None = None


def _black_version() -> str:
    """black's version, read from its installed metadata folder without importing black or
    importlib.metadata (each costs tens of milliseconds)."""
    global _VERSION
    if _VERSION is None:
        import importlib.util

        _VERSION = "unknown"
        spec = importlib.util.find_spec("black")
        if spec is not None and spec.origin:
            site = Path(spec.origin).parent.parent
            found = sorted(site.glob("black-*.dist-info"))
            if found:
                _VERSION = found[-1].name[len("black-") : -len(".dist-info")]
    return _VERSION
