"""Run ``stratgen ARGS`` in this process with one of its caches switched off, to measure what
the cache saves.

``python -m benchmarks.workers.stratgen_without CACHE -- ARGS``: CACHE is one of ``CACHES``
(``none`` switches nothing off, for the same start-up as the other runs). Output and exit code
are stratgen's. Nothing here changes what stratgen writes: the cache only ever saves time, and
the benchmark checks that the output stays the same.
"""

from __future__ import annotations

import sys
from collections.abc import Callable


def _no_format_cache() -> None:
    from stratgen.codegen.formatting import Formatter

    Formatter.open = lambda self, project: None  # type: ignore[method-assign]


def _no_template_cache() -> None:
    from stratgen.codegen import templating

    templating._compiled_templates = lambda env: None  # type: ignore[assignment]


#: The caches, and how to switch each off.
CACHES: dict[str, Callable[[], None]] = {
    "none": lambda: None,
    "format-cache": _no_format_cache,
    "template-cache": _no_template_cache,
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
