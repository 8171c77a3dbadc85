"""Render the parts of the documentation that are derived from the code, so that they never drift.

Each generated part sits in a page of ``docs/`` between ``<!-- BEGIN GENERATED: NAME -->`` and
``<!-- END GENERATED: NAME -->``; each part appears on exactly one page:

- ``strategies``: the built-in strategies and their registry aliases, from the specs, each
  linked to its section on the page of every device it runs on;
- ``commands``: every command with its options, from the argument parser;
- ``project-options``: the options every command that works on a project takes;
- ``config``: the keys of ``[tool.stratgen]``, from the configuration class;
- ``spec-reference``: every key of the spec format, from the JSON Schema;
- ``hpu-spec``: the built-in HPU spec, as an example of a whole spec.

The device pages themselves (``docs/devices``) are generated files of ``stratgen generate``
(the ``docs`` target), checked by ``stratgen check``.

    python scripts/gen_docs.py            # rewrite the generated parts
    python scripts/gen_docs.py --check    # exit 1, with a diff, if any page is stale
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import re
import sys
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

if str(ROOT / "generator") not in sys.path:
    sys.path.insert(0, str(ROOT / "generator"))

from stratgen.cli import build_parser  # noqa: E402
from stratgen.commands.list_table import strategy_rows  # noqa: E402
from stratgen.project import CONFIG_KEYS, Config, Project, load_config  # noqa: E402
from stratgen.resolve.catalog import Catalog  # noqa: E402
from stratgen.resolve.resolver import resolve  # noqa: E402
from stratgen.resolve.selection import select  # noqa: E402
from stratgen.spec import model  # noqa: E402
from stratgen.spec.json_schema import spec_schema  # noqa: E402

MARKER = re.compile(
    r"(<!-- BEGIN GENERATED: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- END GENERATED: (?P=name) -->)",
    re.S,
)

#: What each [tool.stratgen] key means; a key without an entry here stops the script.
CONFIG_DOCS = {
    "specs": "Folder of the project's spec files.",
    "output": "Folder that holds the generated package (the package is `output/package`).",
    "package": "Import name of the generated package.",
    "tests": "Folder of the generated tests (every file in it is generated).",
    "templates": "Folder of templates that override the built-in ones, file by file.",
    "builtin-specs": "Whether the project's specs see stratgen's built-in specs (to `extends` them).",
    "targets": "What to generate: `stratlib` (the package, always), `lightning` (plugins for "
    "Lightning's Trainer and Fabric, `<package>.lightning`), `deepspeed` (DeepSpeed "
    "accelerators of the devices, `<package>.deepspeed`) and `docs` (a Markdown page for each "
    "device, in the `docs` folder); `--target` adds one.",
    "docs": "Folder of the device pages the `docs` target writes (every file in it is generated).",
    "verification": "File of the project's verification record (YAML): what each device's code "
    "has run on, and when. The `docs` target shows it on every device page and in the index, "
    "and refuses a device it says nothing of; without it the pages have no verification "
    "status. The format is [below](#the-verification-record).",
}


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# --- built-in strategies ----------------------------------------------------------------------


def builtin_catalog() -> Catalog:
    project = Project(load_config(ROOT))
    return resolve(project.sources())


def cpu_status(catalog: Catalog, name: str) -> str:
    """Whether a strategy runs on a machine without accelerators, from its spec alone (the
    live answer for any machine is `stratgen list`)."""
    strategy = catalog.strategies[name]
    if "cpu" not in strategy.accelerators:
        return "needs " + ", ".join(strategy.accelerators)
    modules = [r.module for r in strategy.requires]
    if strategy.backend is not None:
        modules += [r.module for r in strategy.backend.requires]
    if modules:
        return "yes, with " + ", ".join(dict.fromkeys(m.split(".")[0] for m in modules))
    return "yes"


def _device_links(catalog: Catalog, strategy: str, accelerators: str, devices: str) -> str:
    """Each accelerator of a strategy, linked to the strategy's section on its page."""
    names = [a.strip() for a in accelerators.split(",") if a.strip()]
    return ", ".join(
        f"[{name}]({devices}/{name}.md#{strategy})" if name in catalog.accelerators else name
        for name in names
    )


def strategies_section() -> str:
    catalog = builtin_catalog()
    config = load_config(ROOT)
    # From docs/reference/, where the table is, to the device pages.
    devices = Path(os.path.relpath(ROOT / config.docs, DOCS / "reference")).as_posix()
    rows = []
    current = ""
    for name, _cls, accelerators, backend, launcher, _status in strategy_rows(
        catalog, select(catalog), probe=False
    ):
        alias = name.strip()
        if name == alias:
            current = alias
            links = _device_links(catalog, alias, accelerators, devices)
            rows.append([f"`{alias}`", links, backend, launcher, cpu_status(catalog, alias)])
        else:
            preset = catalog.registry()[alias][1]
            shown = ", ".join(f"{k}={v!r}" for k, v in preset.items())
            label = f"`{alias}` ({shown})" if shown else f"`{alias}` (another name)"
            links = _device_links(catalog, current, accelerators, devices)
            rows.append([label, links, backend, launcher, f"as `{current}`"])
    header = ["strategy / alias", "accelerators", "backend", "launcher", "CPU-only machine"]
    return table(header, rows) + "\n"


# --- commands -------------------------------------------------------------------------------

#: The argument group of the options every command that works on a project shares
#: (``stratgen.cli``); a command's usage line shows them as ``[project options]``.
PROJECT_GROUP = "project"
#: Where a usage line wraps: the site's code blocks hold about 100 characters.
USAGE_WIDTH = 88


def _commands() -> dict[str, argparse.ArgumentParser]:
    """Every subcommand's parser, by name, as ``stratgen`` builds them."""
    parser = build_parser()
    subparsers = next(
        a for a in parser._actions if isinstance(a, argparse._SubParsersAction)  # noqa: SLF001
    )
    return dict(subparsers.choices)


def project_actions(command: argparse.ArgumentParser) -> list[argparse.Action]:
    """The shared project options a command takes (none for a command without them)."""
    for group in command._action_groups:  # noqa: SLF001
        if group.title == PROJECT_GROUP:
            return list(group._group_actions)  # noqa: SLF001
    return []


def own_actions(command: argparse.ArgumentParser) -> list[argparse.Action]:
    """A command's own arguments: everything it takes but help and the shared project options."""
    shared = {id(a) for a in project_actions(command)}
    return [
        a
        for a in command._actions  # noqa: SLF001
        if id(a) not in shared and not isinstance(a, argparse._HelpAction)  # noqa: SLF001
    ]


def _value_name(action: argparse.Action) -> str:
    if action.choices:
        return "{" + ",".join(map(str, action.choices)) + "}"
    return str(action.metavar or action.dest.upper())


def _flags(action: argparse.Action) -> str:
    """``--from SOURCE``, ``--quiet, -q``, or a positional's name."""
    if not action.option_strings:
        return str(action.metavar or action.dest)
    flags = ", ".join(action.option_strings)
    return flags if action.nargs == 0 else f"{flags} {_value_name(action)}"


def _help(name: str, action: argparse.Action) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        raise SystemExit(
            f"scripts/gen_docs.py: `stratgen {name}`'s argument {_flags(action)!r} has no help: "
            "give it one in generator/stratgen/cli.py"
        )
    return action.help


def usage(name: str, command: argparse.ArgumentParser) -> str:
    """The command's usage as argparse shows it, the shared project options as one
    ``[project options]`` where the command takes them, wrapped to the site's width."""
    shown: list[argparse.Action] = [
        a for a in command._actions if isinstance(a, argparse._HelpAction)  # noqa: SLF001
    ]
    if project_actions(command):
        shown.append(argparse.Action(["project options"], "project_options", nargs=0))
    shown += own_actions(command)
    formatter = argparse.HelpFormatter(f"stratgen {name}", width=USAGE_WIDTH)
    formatter.add_usage(None, shown, [], prefix="")
    return formatter.format_help().strip("\n")


def commands_section() -> str:
    out = []
    for name, command in _commands().items():
        out.append(f"#### `stratgen {name}`\n")
        out.append(f"{command.description}\n")
        out.append("```text\n" + usage(name, command) + "\n```\n")
        rows = [[f"`{_flags(a)}`", _help(name, a)] for a in own_actions(command)]
        if rows:
            out.append(table(["argument", "meaning"], rows) + "\n")
    return "\n".join(out).rstrip() + "\n"


def project_options_section() -> str:
    commands = _commands()
    taking = [name for name, command in commands.items() if project_actions(command)]
    rows = [[f"`{_flags(a)}`", _help(taking[0], a)] for a in project_actions(commands[taking[0]])]
    others = ", ".join(f"`stratgen {name}`" for name in commands if name not in taking)
    lead = f"Every command but {others}" if others else "Every command"
    return (
        f"{lead} takes these options (`[project options]` in its usage); they override "
        "[the configuration](configuration.md) in `[tool.stratgen]`:\n\n"
        + table(["option", "meaning"], rows)
        + "\n"
    )


# --- configuration ----------------------------------------------------------------------------


def config_section() -> str:
    defaults = {f.name: f.default for f in dataclasses.fields(Config) if f.name != "root"}
    rows = []
    for key in CONFIG_KEYS:
        if key not in CONFIG_DOCS:
            raise SystemExit(
                f"scripts/gen_readme.py: describe the [tool.stratgen] key {key!r} in CONFIG_DOCS"
            )
        default = defaults[key.replace("-", "_")]
        if isinstance(default, tuple):
            default = "[" + ", ".join(f'"{item}"' for item in default) + "]"
        shown = (
            "none"
            if default is None
            else f"`{str(default).lower() if isinstance(default, bool) else default}`"
        )
        rows.append([f"`{key}`", shown, CONFIG_DOCS[key]])
    return table(["key", "default", "meaning"], rows) + "\n"


# --- spec reference ---------------------------------------------------------------------------


def _patterns() -> dict[str, str]:
    """What each constrained string of the model is called, by its regular expression. The
    example its error messages give ("such as 'ddp_spawn'") is left out: one pattern serves
    unrelated keys (a device type, a backend, a module), and each key's meaning gives its own."""
    found = {}
    for value in vars(model).values():
        if typing.get_origin(value) is typing.Annotated:
            for meta in value.__metadata__:
                if isinstance(meta, model.Pattern):
                    found[meta.regex] = meta.what.split(" such as ")[0]
    return found


PATTERNS = _patterns()


def _anchor(name: str) -> str:
    return name.lower()


def type_text(schema: dict[str, Any]) -> str:
    """A short description of what a schema admits."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(name)})"
    if "enum" in schema:
        return "one of " + ", ".join(f"`{v}`" for v in schema["enum"])
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        if (
            len(options) == 2
            and options[0].get("type") == "array"
            and options[0].get("items") == options[1]
        ):
            return f"{type_text(options[1])}, or a list of them"
        return " or ".join(type_text(o) for o in options)
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return type_text(schema["allOf"][0])
    kind = schema.get("type")
    if kind == "array":
        return f"list of {type_text(schema.get('items', {}))}"
    if kind == "object":
        keys = type_text(schema.get("propertyNames", {"type": "string"}))
        values = type_text(schema.get("additionalProperties", {}))
        return f"mapping of {keys} to {values}"
    if kind == "string" and "pattern" in schema:
        return PATTERNS.get(schema["pattern"], f"string matching `{schema['pattern']}`")
    return {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean"}.get(
        str(kind), "any value"
    )


def _refs(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        if "$ref" in schema:
            yield schema["$ref"].rsplit("/", 1)[-1]
        for value in schema.values():
            yield from _refs(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _refs(value)


def _object_table(schema: dict[str, Any]) -> str:
    required = set(schema.get("required", ()))
    rows = []
    for key, prop in schema["properties"].items():
        if key in required:
            default = "**required**"
        elif "default" in prop:
            value = prop["default"]
            default = (
                f"`{str(value).lower() if isinstance(value, bool) else value!s}`"
                if value != ""
                else '`""`'
            )
        else:
            default = ""
        rows.append([f"`{key}`", type_text(prop), default, prop.get("description", "")])
    return table(["key", "type", "default", "meaning"], rows)


def spec_reference_section() -> str:
    schema = spec_schema()
    defs: dict[str, Any] = schema["$defs"]
    order: list[str] = []
    queue = list(dict.fromkeys(_refs(schema["properties"])))
    while queue:
        name = queue.pop(0)
        if name in order:
            continue
        order.append(name)
        queue += [r for r in dict.fromkeys(_refs(defs[name]["properties"])) if r not in order]
    out = [
        "A spec file is a YAML mapping with these keys "
        "(`stratgen schema` prints the same as JSON Schema):\n",
        _object_table(schema) + "\n",
    ]
    for name in order:
        out.append(f"#### {name}\n")
        out.append(f"{defs[name].get('description', '')}\n")
        shorthand = getattr(getattr(model, name, None), "__shorthand__", None)
        if shorthand:
            out.append(f"May also be written as just its `{shorthand}` value.\n")
        out.append(_object_table(defs[name]) + "\n")
    return "\n".join(out)


# --- pages ------------------------------------------------------------------------------------


def hpu_spec_section() -> str:
    """The built-in HPU spec itself, as an example of a whole spec (the editor hint left out)."""
    lines = (ROOT / "specs" / "hpu.yaml").read_text(encoding="utf-8").splitlines()
    body = [line for line in lines if not line.startswith("# yaml-language-server:")]
    return "```yaml\n" + "\n".join(body).strip("\n") + "\n```\n"


SECTIONS: dict[str, Callable[[], str]] = {
    "strategies": strategies_section,
    "hpu-spec": hpu_spec_section,
    "commands": commands_section,
    "project-options": project_options_section,
    "config": config_section,
    "spec-reference": spec_reference_section,
}


def render(text: str, where: str = "page") -> tuple[str, list[str]]:
    """The page with its generated parts rendered anew, and the names of those parts."""
    seen: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in SECTIONS:
            raise SystemExit(f"{where}: unknown generated section {name!r}")
        seen.append(name)
        return match.group(1) + SECTIONS[name]() + match.group(4)

    return MARKER.sub(replace, text), seen


def pages(docs: Path) -> list[Path]:
    """The pages under ``docs`` with generated parts (the device pages are stratgen's own
    generated files, not this script's)."""
    return sorted(
        path
        for path in docs.rglob("*.md")
        if "<!-- BEGIN GENERATED:" in path.read_text(encoding="utf-8")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="only report whether the pages are current"
    )
    parser.add_argument("--docs", type=Path, default=DOCS, help="the documentation folder")
    args = parser.parse_args(argv)
    stale: list[str] = []
    found: dict[str, str] = {}
    for path in pages(args.docs):
        shown = path.relative_to(args.docs).as_posix()
        current = path.read_text(encoding="utf-8")
        wanted, names = render(current, shown)
        for name in names:
            if name in found:
                raise SystemExit(f"{shown}: section {name!r} is also generated in {found[name]}")
            found[name] = shown
        if current == wanted:
            continue
        stale.append(shown)
        if args.check:
            diff = difflib.unified_diff(
                current.splitlines(keepends=True),
                wanted.splitlines(keepends=True),
                shown,
                f"{shown} (generated)",
            )
            sys.stdout.writelines(diff)
        else:
            path.write_text(wanted, encoding="utf-8")
    missing = set(SECTIONS) - set(found)
    if missing:
        raise SystemExit(f"no page holds the generated section(s) {', '.join(sorted(missing))}")
    if not stale:
        print("docs: generated sections are current")
        return 0
    if args.check:
        print(
            f"docs: generated sections are stale in {', '.join(stale)}; "
            "run `python scripts/gen_docs.py`"
        )
        return 1
    print(f"docs: generated sections rewritten in {', '.join(stale)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
