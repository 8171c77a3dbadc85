"""Hostile input for the tests that hold stratgen to "a spec is data": strings that would run code,
end a docstring, a comment or a Markdown construct, or drive a terminal if they were pasted
anywhere unescaped; a spec that every target renders something of; and the checks of what
comes out: generated modules compile and import without side effects, pages render as the
documentation site renders them without HTML from a spec, the console prints no control
character.

A payload that runs creates the file ``MARKER`` in the current folder: checks run in a folder
of their own and look for it there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import yaml
from stratcore.testing import watch

from tests.support import REPO

#: The file a payload creates where it runs.
MARKER = "PWNED"
#: Code that creates ``MARKER`` (where it is evaluated, imported or rendered as a template).
RUN = f"__import__('pathlib').Path('{MARKER}').touch()"

#: Strings that break out of, or act in, each context a spec value reaches: Python literals,
#: docstrings and comments, Markdown and HTML, jinja2, TOML, the terminal.
HOSTILE = [
    f'"""; {RUN}; """',
    f"'''; {RUN}; '''",
    f'"; {RUN}; "',
    f"'; {RUN}; '",
    f'\\"""; {RUN}  # \\',
    f"a\n{RUN}\n",
    f"a\r{RUN}",
    f"a\u2028{RUN}",
    'ends with a quote"',
    "ends with a backslash\\",
    "{{ 7 * 7 }} {% if true %}jinja{% endif %} {# x #}",
    f"{{{{ cycler.__init__.__globals__.os.system('touch {MARKER}') }}}}",
    "<script>alert('fuzz')</script>",
    "<img src=x onerror=alert('fuzz')> <fuzzmark>",
    '{: onclick="fuzz()" .fuzzclass #fuzzid }',
    "[fuzz](javascript:alert(1)) ![fuzz](x) <http://fuzz.example>",
    '--8<-- "README.md"',
    "`<fuzzmark>` ``a`b`` `",
    "| fuzz | cell |\n|---|---|",
    "# heading\n\n> quote\n\n- item",
    "\x1b[31mred\x1b[0m \x1b]0;title\x07 \u202eevil",
    "tab\tand\x0bvertical\x0cfeed and NUL \x00",
    "import os; os.system('true')",
    "None",
    "True",
    "__import__",
    "class",
    "lambda: 0",
    "\\x00 \\n \\u2028 \\N{BULLET}",
    'name = "x" # toml\n[tool]\n',
]

#: A spec of which every target renders something: a device whose devices are not CPU
#: processes (the deepspeed target), a ddp strategy on it (the Lightning target's plugins),
#: a cluster environment of its own (Lightning's environments), a backend, a precision plugin,
#: options with choices and aliases (the docs target's tables), requirements with install texts.
SEED_SPEC = """\
# The Acme device, for tests of hostile values.
version: 1

backends:
  - name: acmecl
    description: Acme's collective library.
    torch_name: gloo
    requires:
      - module: json
        install: pip install acme-collectives

accelerator:
  name: acme
  class_name: AcmeAccelerator
  description: The Acme device.
  device_type: acme  # acme_sdk: DEVICE
  indexed: true
  backend: acmecl
  install: a build of torch for Acme devices
  requires:
    - module: json
      install: pip install acme-sdk

strategies:
  - name: acme_ddp
    class_name: AcmeDDPStrategy
    base: parallel
    wrapper: ddp
    launcher: popen
    backend: auto
    cluster: [acme_env]
    accelerators: [acme]
    description: DistributedDataParallel on Acme devices.
    options:
      mode:
        type: str
        default: fast
        choices: [fast, slow]
        doc: How to train.
      note:
        type: str
        default: plain
        doc: A note for the logs.
    aliases:
      acme_ddp_slow: {mode: slow}

precision_plugins:
  - name: acme_precision
    class_name: AcmePrecisionPlugin
    kind: precision
    modes: [64-true]
    accelerators: [acme]
    description: Double precision on Acme devices.

cluster_environments:
  - name: acme_env
    class_name: AcmeEnvironment
    description: Acme's scheduler.
    detect: {all_set: [ACME_JOB], not_equal: {ACME_MODE: [disabled]}}
    world_size: {env: ACME_WORLD_SIZE, default: 1}
    global_rank: {env: ACME_RANK, default: 0}
    local_rank: {env: ACME_LOCAL_RANK, default: 0}
    node_rank: {env: ACME_NODE_RANK, default: 0}
    main_address: {env: ACME_ADDR, default: 127.0.0.1}
    main_port: {env: ACME_PORT, default: 29500}
"""

#: Every target, with the device pages in the output folder.
ALL_TARGETS = 'targets = ["stratlib", "lightning", "deepspeed", "docs"]\ndocs = "out/docs"\n'


def seed() -> dict[str, Any]:
    return dict(yaml.safe_load(SEED_SPEC))


# --- generated modules ---------------------------------------------------------------------------


#: Imports every module of the generated packages named on the command line, each found on the
#: path given after it; Lightning's registries go back to what Lightning registers itself before
#: each package, whose plugins take the same names as another's.
IMPORT_PACKAGES = """
import importlib, importlib.util, pkgutil, sys
from stratcore.lightning.contract import FRAMEWORKS, REGISTRIES

registries = []
if importlib.util.find_spec("lightning") is not None:
    for framework, names in REGISTRIES.items():
        accelerators = importlib.import_module(FRAMEWORKS[framework] + ".accelerators")
        strategies = importlib.import_module(FRAMEWORKS[framework] + ".strategies")
        registries += [getattr(accelerators, names[0]), getattr(strategies, names[1])]
lightnings_own = [set(registry) for registry in registries]
arguments = sys.argv[1:]
for package, folder in zip(arguments[::2], arguments[1::2]):
    for registry, own in zip(registries, lightnings_own):
        for name in set(registry) - own:
            del registry[name]
    sys.path.insert(0, folder)
    root = importlib.import_module(package)
    for module in pkgutil.walk_packages(root.__path__, package + "."):
        if ".lightning" in module.name and not registries:
            continue
        importlib.import_module(module.name)
    print("imported", package)
"""


def import_packages(
    cwd: Path, packages: list[tuple[str, Path]]
) -> subprocess.CompletedProcess[str]:
    """Import every module of each generated (package, folder it is in) in one fresh process
    working in ``cwd`` (where a payload would create ``MARKER``); the Lightning target's
    modules too, where Lightning is installed."""
    arguments = [str(a) for package, folder in packages for a in (package, folder)]
    path = os.pathsep.join([str(REPO / "runtime"), str(REPO / "generated")])
    env = {**os.environ, "PYTHONPATH": path}
    return watch.run([sys.executable, "-c", IMPORT_PACKAGES, *arguments], env=env, cwd=cwd)


def import_every_module(output: Path, package: str) -> subprocess.CompletedProcess[str]:
    """``import_packages`` of one package generated into ``output``, working there."""
    return import_packages(output, [(package, output)])


# --- documentation pages -------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """Reads mkdocs.yml, whose tags (``!ENV``, ``!!python/name``) are not data here."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
_Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def site_extensions() -> tuple[list[str], dict[str, dict[str, Any]]]:
    """The Markdown extensions of the documentation site (mkdocs.yml) and their settings, the
    snippets' base path made absolute."""
    config = yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Loader)
    names: list[str] = []
    settings: dict[str, dict[str, Any]] = {}
    for entry in config["markdown_extensions"]:
        name, options = (entry, {}) if isinstance(entry, str) else next(iter(entry.items()))
        names.append(name)
        options = dict(options or {})
        if name == "pymdownx.snippets":
            options["base_path"] = [str(REPO)]
        settings[name] = options
    return names, settings


def render_page(markdown_text: str) -> str:
    """A page as the documentation site renders it (Python-Markdown with the site's
    extensions)."""
    import markdown

    names, settings = site_extensions()
    return markdown.markdown(markdown_text, extensions=names, extension_configs=settings)


#: What Markdown and the site's extensions make of a page: no other element comes from it.
MARKDOWN_TAGS = frozenset(
    [
        "a",
        "blockquote",
        "br",
        "code",
        # the site's collapsible notes (pymdownx.details: ``??? note``)
        "details",
        "div",
        "em",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "hr",
        "li",
        "ol",
        "p",
        "pre",
        "span",
        "strong",
        "summary",
        "table",
        "tbody",
        "td",
        "th",
        "thead",
        "tr",
        "ul",
    ]
)


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, attrs))


def html_from_spec(html: str) -> list[str]:
    """Elements and attributes of ``html`` that Markdown would not make of a page's own text:
    another element, an event handler, a source, a script link, or anything named by a fuzz
    payload."""
    parser = _Elements()
    parser.feed(html)
    found = []
    for tag, attrs in parser.found:
        if tag not in MARKDOWN_TAGS or "fuzz" in tag:
            found.append(f"<{tag}>")
        for name, value in attrs:
            text = f"{name}={value}"
            # A heading's id, and the anchor links to it, are its text made a slug (letters,
            # digits, hyphens) by the site's table of contents: a payload's letters may be in
            # them, its markup never.
            slug = (
                name in ("id", "href") and re.fullmatch(r"#?[a-z0-9_-]*", value or "") is not None
            )
            if (
                name.startswith("on")
                or name in ("src", "style")
                or ("fuzz" in text and not slug)
                or (value or "").strip().lower().startswith("javascript:")
            ):
                found.append(f"<{tag} {text}>")
    return found


# --- the console ---------------------------------------------------------------------------------


def control_characters(text: str) -> list[str]:
    """Characters of ``text`` that a terminal acts on (a tab and a line break aside)."""
    import unicodedata

    return [
        repr(char)
        for char in text
        if char not in "\t\n"
        and (unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp") or char == "\x1b")
    ]
