"""Markdown for the pages of the docs target: text from specs (descriptions, comments) made
safe to show as it is, values as inline code, pages tidied (a generated page's header is
``stratgen.codegen.templating.header``, as every generated file's).

Every value from a spec reaches a page through one of these, by where it stands: ``text`` in
running text, a list item or a table cell (a table cell is text on one line, its ``|``
escaped), ``paragraphs`` for several paragraphs, ``code`` for a value shown as it is. Nothing
from a spec becomes an HTML tag, an attribute list (``{: ...}``), a link or a heading.
"""

from __future__ import annotations

import re

#: What Markdown (and the site's extensions: attribute lists) would read as markup, each
#: escaped with a backslash.
_SPECIAL = re.compile(r"([\\`*_\[\]{}>|#])")
#: Inline code as a spec's descriptions write it (`devices`, ``devices``): kept as it is.
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
#: A web address in a spec's text: shown as a link. It ends before a closing bracket or a
#: punctuation mark that ends the sentence.
_URL = re.compile(r"https://[A-Za-z0-9._~:/?#@!$&*+,;=%-]*[A-Za-z0-9/_~#=-]")


def text(value: str) -> str:
    """Plain text from a spec (a description, a comment) made safe in Markdown, on one line: its
    characters stay what they are, outside any table cell, emphasis, tag or attribute list;
    inline code stays inline code, and a web address becomes a link."""
    value = " ".join(value.split())
    parts, start = [], 0
    for match in _CODE_SPAN.finditer(value):
        parts.append(_linked(value[start : match.start()]))
        parts.append(code(match.group(2)))
        start = match.end()
    parts.append(_linked(value[start:]))
    return "".join(parts)


def _linked(value: str) -> str:
    """Text made safe, its web addresses as autolinks (``<https://...>``, whose characters
    ``_URL`` limits to those an address may hold unescaped)."""
    parts, start = [], 0
    for match in _URL.finditer(value):
        parts.append(_escape(value[start : match.start()]))
        parts.append(f"<{match.group(0)}>")
        start = match.end()
    parts.append(_escape(value[start:]))
    return "".join(parts)


def _escape(value: str) -> str:
    value = value.replace("&", "&amp;")
    return _SPECIAL.sub(r"\\\1", value).replace("<", "&lt;")


def paragraphs(value: str) -> str:
    """Several paragraphs of spec text, each made safe with ``text``."""
    return "\n\n".join(text(p) for p in re.split(r"\n\s*\n", value.strip()) if p.strip())


def code(value: object) -> str:
    """A value as inline code on one line (Markdown shows a code span's text as it is, tags
    included): line breaks become spaces, and the fence is longer than any run of backticks
    inside, set apart by a space where the value starts or ends with one."""
    shown = " ".join(str(value).splitlines())
    if not shown:
        return ""
    fence = "`" * (max((len(run) for run in re.findall("`+", shown)), default=0) + 1)
    pad = " " if shown[0] == "`" or shown[-1] == "`" else ""
    return f"{fence}{pad}{shown}{pad}{fence}"


def call(import_path: str) -> str:
    """'torch_npu.npu:is_available' as the call a reader knows: ``torch_npu.npu.is_available()``."""
    return code(import_path.replace(":", ".") + "()")


def tidy(markdown: str) -> str:
    """One blank line between blocks at most, no trailing spaces, one final newline."""
    lines = [line.rstrip() for line in markdown.splitlines()]
    tidy = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", tidy).strip("\n") + "\n"
