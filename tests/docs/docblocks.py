"""The code blocks the documentation presents as runnable: each follows a marker
``<!-- test: NAME -->`` on the line above its fence, in README.md or a page of docs/."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
_MARKED = re.compile(
    r"^<!-- test: (?P<name>[a-z0-9-]+) -->\n```(?P<language>\w*)\n(?P<code>.*?)^```", re.M | re.S
)
_MARKER = re.compile(r"^<!-- test: (?P<name>[^ ]*) -->", re.M)


@dataclass(frozen=True)
class Block:
    name: str
    path: Path
    language: str
    code: str


def pages() -> list[Path]:
    """README.md and every page of the documentation."""
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def marked_blocks() -> list[Block]:
    found = []
    for path in pages():
        text = path.read_text(encoding="utf-8")
        markers = [m.group("name") for m in _MARKER.finditer(text)]
        blocks = [
            Block(m.group("name"), path, m.group("language"), m.group("code"))
            for m in _MARKED.finditer(text)
        ]
        stray = set(markers) - {b.name for b in blocks}
        assert not stray, f"{path}: marker(s) {sorted(stray)} not directly above a code block"
        found += blocks
    return found


def block(name: str, page: str | None = None) -> str:
    """The code of the block marked ``name`` (on ``page``, relative to the repository, where
    several pages hold a block of that name)."""
    matches = [
        b for b in marked_blocks() if b.name == name and (page is None or b.path == REPO / page)
    ]
    assert len(matches) == 1, f"expected one block marked {name!r}, found {len(matches)}"
    return matches[0].code
