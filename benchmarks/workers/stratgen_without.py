"""Run ``stratgen ARGS`` in this process with one of its caches switched off, to measure what
that cache saves.

``python -m benchmarks.workers.stratgen_without CACHE -- ARGS``: CACHE is one of ``CACHES``
(``none`` switches nothing off, for the same start-up as the other runs). Output and exit code
are stratgen's. Nothing here changes what stratgen writes: each cache only ever saves time,
and the benchmark checks that the output stays the same.
"""

from __future__ import annotations

import sys
from collections.abc import Callable


def _no_fingerprint() -> None:
    from stratgen import uptodate

    uptodate.up_to_date = lambda project, plain: None  # type: ignore[assignment]


def _no_spec_cache() -> None:
    from stratgen.speccache import SpecCache

    SpecCache.get = lambda self, key: None  # type: ignore[method-assign]
    SpecCache.put = lambda self, key, spec: None  # type: ignore[method-assign]
    SpecCache.save_bundle = lambda self: None  # type: ignore[method-assign]


def _no_render_memo() -> None:
    from stratgen.project import Project

    Project._render_memo = lambda self, template_dirs: None  # type: ignore[method-assign]


def _no_format_cache() -> None:
    from stratgen.fmt import Formatter

    Formatter.open = lambda self, project: None  # type: ignore[method-assign]


def _no_checkout() -> None:
    from stratgen.files import FormattedFiles, Tree

    Tree.formatted = lambda self: FormattedFiles(self, {})  # type: ignore[method-assign]


def _no_facts_cache() -> None:
    from stratgen import corefacts

    corefacts.remembered = lambda question, compute: compute()  # type: ignore[assignment]


#: Each cache, and how to switch it off.
CACHES: dict[str, Callable[[], None]] = {
    "none": lambda: None,
    "fingerprint": _no_fingerprint,
    "spec-cache": _no_spec_cache,
    "render-memo": _no_render_memo,
    "format-cache": _no_format_cache,
    "checkout": _no_checkout,
    "facts-cache": _no_facts_cache,
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
