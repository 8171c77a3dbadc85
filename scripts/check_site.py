"""Check the built documentation site for what a strict build lets through and a reader would
see: a raw Sphinx role (``:class:`` before a name, which mkdocstrings leaves as text), a device
page whose title is not its product (``# Musa`` where ``MUSA: Moore Threads GPUs`` was meant),
and a device page without its verification status.

    python scripts/check_site.py site/      # exit 1 naming each page and problem, else 0

``.ci/test`` runs it on the site it builds. Needs nothing beyond the standard library.
"""

from __future__ import annotations

import argparse
import html
import re
import sys
from pathlib import Path

#: A role as Sphinx writes it; in a built page it stands as text before a name's code.
RAW_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|exc|data|obj|const|ref|doc):(?=\s*`?)")
#: What a reader never sees as text: code (where a role may be quoted on purpose), scripts,
#: styles, and the tags themselves.
HIDDEN = re.compile(r"<(pre|code|script|style)\b.*?</\1>", re.S | re.I)
TAG = re.compile(r"<[^>]+>")
HEADING = re.compile(r"<h1\b[^>]*>(.*?)</h1>", re.S | re.I)
TITLE = re.compile(r"<title>(.*?)</title>", re.S | re.I)
#: The device pages' verification section, by the anchor MkDocs gives its heading.
STATUS_ANCHOR = 'id="verification-status"'


def visible_text(page: str) -> str:
    """The page's text as a reader sees it, without code."""
    return html.unescape(TAG.sub(" ", HIDDEN.sub(" ", page)))


def _heading(pattern: re.Pattern[str], page: str) -> str:
    found = pattern.search(page)
    if not found:
        return ""
    # The permalink MkDocs adds to a heading ("¶") is not part of its title.
    return " ".join(html.unescape(TAG.sub("", found.group(1))).replace("¶", "").split())


def raw_roles(page: str) -> list[str]:
    """Each raw role in the page's visible text, with a few words around it."""
    text = visible_text(page)
    return [
        " ".join(text[max(0, m.start() - 30) : m.end() + 30].split())
        for m in RAW_ROLE.finditer(text)
    ]


def device_page_problems(name: str, page: str) -> list[str]:
    """What a device page lacks: a title naming the product, and its verification status."""
    problems = []
    title = _heading(HEADING, page)
    if not title or title.lower() == name.lower() or ": " not in title:
        problems.append(
            f"titled {title!r}, not with its product ('MUSA: Moore Threads GPUs'): give the "
            "spec's accelerator a `product`"
        )
    elif not _heading(TITLE, page).startswith(title):
        problems.append(f"its browser title {_heading(TITLE, page)!r} is not {title!r}")
    if STATUS_ANCHOR not in page:
        problems.append(
            "no verification status: the project's verification record has no entry for it, "
            "or [tool.stratgen] names no record"
        )
    return problems


def check(site: Path, devices: str = "devices") -> list[str]:
    """Every problem of the built site, as 'page: problem' lines."""
    problems = []
    for path in sorted(site.rglob("*.html")):
        shown = path.relative_to(site).as_posix()
        page = path.read_text(encoding="utf-8", errors="replace")
        for context in raw_roles(page):
            problems.append(f"{shown}: a raw role: ...{context}...")
        parts = path.relative_to(site).parts
        if len(parts) == 3 and parts[0] == devices and parts[2] == "index.html":
            problems += [f"{shown}: {p}" for p in device_page_problems(parts[1], page)]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", type=Path, help="the built site (mkdocs build --site-dir)")
    parser.add_argument("--devices", default="devices", help="the device pages' folder in it")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").is_file():
        print(f"check_site: {args.site}: no built site there (no index.html)", file=sys.stderr)
        return 2
    if not (args.site / args.devices / "index.html").is_file():
        print(f"check_site: {args.site}: no device pages under {args.devices}/", file=sys.stderr)
        return 2
    problems = check(args.site, args.devices)
    for problem in problems:
        print(problem)
    if problems:
        print(f"check_site: {len(problems)} problem(s) in the built site", file=sys.stderr)
        return 1
    pages = sum(1 for _ in args.site.rglob("*.html"))
    print(f"check_site: {pages} pages: no raw role; every device page has its product and status")
    return 0


if __name__ == "__main__":
    sys.exit(main())
