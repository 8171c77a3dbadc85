"""Format generated Python with black, remembering results by content.

black takes tens of milliseconds a file. Formatting is a pure function of the source, the
black version and the mode, so results are cached under that key: a regeneration that
changes nothing formats nothing.
"""

from __future__ import annotations

import gc
import hashlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .paths import black_version, cache_folder
from .speccache import unwrap, wrap

LINE_LENGTH = 100
#: The layout of a cache entry (see ``speccache.wrap``): the key and a hash of the text.
_LAYOUT = b"stratgen-black-v3"


class FormatError(Exception):
    """black rejected generated code: a template bug, never a user error."""


def cache_dir() -> Path | None:
    """The user's stratgen cache (``paths.cache_folder``), or None without one."""
    folder = cache_folder()
    return None if folder is None else Path(folder)


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
        digest.update(black_mode().encode())
        digest.update(b"\0")
        digest.update(source.encode("utf-8"))
        return digest.hexdigest()

    def format(self, source: str, name: str) -> str:
        return self.format_all([(source, name)])[0]

    def key(self, source: str) -> str:
        """What the formatted text of ``source`` is stored under: its hash with black's
        version and mode."""
        return self._key(source)

    def format_all(
        self, items: list[tuple[str, str]], known: Mapping[str, str] | None = None
    ) -> list[str]:
        """Format every (source, name) pair; ``known`` maps keys to formatted texts already at
        hand (the generated files of a checkout). What neither it nor the cache holds is
        formatted in one pass, spread over the machine's cores when there is enough of it."""
        keys = [self._key(source) for source, _ in items]
        known = known if known is not None else {}
        results: list[str | None] = [known.get(key) or self._read(key) for key in keys]
        missing = [i for i, result in enumerate(results) if result is None]
        self.hits += len(items) - len(missing)
        self.misses += len(missing)
        if missing:
            sources = [items[i][0] for i in missing]
            self._black()
            outcomes = _format_sources(sources, self._mode)
            for index, outcome in zip(missing, outcomes, strict=True):
                if isinstance(outcome, Exception):
                    name = items[index][1]
                    raise FormatError(f"{name}: generated code is not valid Python: {outcome}")
                results[index] = outcome
                self._write(keys[index], outcome)
        return [str(result) for result in results]

    def _read(self, key: str) -> str | None:
        """The formatted text stored under ``key``; None for a missing or damaged entry."""
        if self.cache is None:
            return None
        try:
            data = (self.cache / key[:2] / key).read_bytes()
        except OSError:
            return None
        payload = unwrap(data, key, _LAYOUT)
        if payload is None:
            return None
        try:
            return payload.decode("utf-8")
        except UnicodeDecodeError:  # pragma: no cover - the hash was checked
            return None

    def _write(self, key: str, text: str) -> None:
        if self.cache is None:
            return
        folder = self.cache / key[:2]
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
            with os.fdopen(fd, "wb") as handle:
                handle.write(wrap(text.encode("utf-8"), key, _LAYOUT))
            os.replace(tmp, folder / key)
        except OSError:
            pass  # a read-only or full cache only costs speed


#: Below this many files, starting worker processes costs more than it saves.
PARALLEL_FROM = 8


def _format_one(source: str, mode: Any) -> str | Exception:
    """black's formatting of ``source``, in one pass: ``black.format_str`` formats its own
    output a second time, which only matters for code whose optional trailing commas black
    turns into magic ones, and generated code never has them (``tests/test_format_once.py``
    checks that one pass leaves nothing for a second to change)."""
    import black

    once = getattr(black, "_format_str_once", None) or black.format_str
    try:
        return str(once(source, mode=mode))
    except Exception as exc:  # black raises several types for invalid code
        return exc


def _format_here(sources: list[str], mode: Any) -> list[str | Exception]:
    """black over every source in this process, with the cyclic garbage collector paused:
    black leaves much cyclic garbage, collected once at the end instead of again and again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return [_format_one(source, mode) for source in sources]
    finally:
        if enabled:
            gc.enable()


def _format_sources(sources: list[str], mode: Any) -> list[str | Exception]:
    """black over every source; in forked workers (which inherit the imported black) when
    there are several cores and enough files, else here. Either way the result is the same."""
    workers = min(len(sources) // (PARALLEL_FROM // 2), os.cpu_count() or 1, 8)
    if workers < 2 or len(sources) < PARALLEL_FROM:
        return _format_here(sources, mode)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    try:
        context = multiprocessing.get_context("fork")
    except ValueError:  # pragma: no cover - no fork on this platform
        return [_format_one(source, mode) for source in sources]
    # Warm black up here (grammars, caches), once, so that the forked workers inherit it.
    _format_one("x = 1\n", mode)
    # The largest files first, so that no worker is left with a big one at the end.
    order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
    # The workers live for one pass: the cyclic garbage black leaves (tens of megabytes) goes
    # with them, and skipping its collection saves a tenth of their time.
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=gc.disable
    ) as pool:
        done = list(pool.map(_format_one, [sources[i] for i in order], [mode] * len(order)))
    results: list[str | Exception] = [""] * len(sources)
    for position, index in enumerate(order):
        results[index] = done[position]
    return results


def black_mode() -> str:
    """black's version and the mode stratgen runs it in, as formatter keys begin."""
    return f"stratgen-black-v3|{LINE_LENGTH}|py311|{black_version()}"
