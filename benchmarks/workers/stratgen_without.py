"""Run ``stratgen ARGS`` in this process with its cache switched off, to measure what the cache
saves.

``python -m benchmarks.workers.stratgen_without CACHE -- ARGS``: CACHE is one of ``CACHES``
(``none`` switches nothing off, for the same start-up as the other runs). Output and exit code
are stratgen's. Nothing here changes what stratgen writes: the cache only ever saves time, and
the benchmark checks that the output stays the same.
"""

from __future__ import annotations

import sys
from collections.abc import Callable


def _no_format_cache() -> None:
    from stratgen.fmt import Formatter

    Formatter.open = lambda self, project: None  # type: ignore[method-assign]


#: The cache, and how to switch it off.
CACHES: dict[str, Callable[[], None]] = {
    "none": lambda: None,
    "format-cache": _no_format_cache,
}


def main(argv: list[str]) -> int:
    cache, separator, *arguments = argv
    if separator != "--" or cache not in CACHES:
        raise SystemExit(f"usage: stratgen_without {{{','.join(CACHES)}}} -- ARGS")
    CACHES[cache]()
    from stratgen.cli import main as stratgen

    return stratgen(arguments)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
