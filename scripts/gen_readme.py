"""Render the parts of README.md that are derived from the code, so that they never drift.

Each generated part sits between ``<!-- BEGIN GENERATED: NAME -->`` and
``<!-- END GENERATED: NAME -->``:

- ``strategies``: the built-in strategies and their registry aliases, from the specs;
- ``devices``: the built-in devices x frameworks table (what ``stratgen list`` also shows);
- ``commands``: every command with its options, from the argument parser;
- ``config``: the keys of ``[tool.stratgen]``, from the configuration class;
- ``spec-reference``: every key of the spec format, from the JSON Schema.

    python scripts/gen_readme.py            # rewrite README.md
    python scripts/gen_readme.py --check    # exit 1, with a diff, if README.md is stale
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import sys
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

if str(ROOT / "generator") not in sys.path:
    sys.path.insert(0, str(ROOT / "generator"))

from stratgen import model  # noqa: E402
from stratgen.catalog import Catalog  # noqa: E402
from stratgen.cli import build_parser  # noqa: E402
from stratgen.devicetable import HEADER, device_rows  # noqa: E402
from stratgen.jsonschema import spec_schema  # noqa: E402
from stratgen.listing import strategy_rows  # noqa: E402
from stratgen.project import CONFIG_KEYS, Config, Project, load_config  # noqa: E402
from stratgen.resolve import resolve  # noqa: E402
from stratgen.selection import select  # noqa: E402

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
    "Lightning's Trainer and Fabric, `<package>.lightning`) and `deepspeed` (DeepSpeed "
    "accelerators of the devices, `<package>.deepspeed`); `--target` adds one.",
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


def strategies_section() -> str:
    catalog = builtin_catalog()
    rows = []
    current = ""
    for name, _cls, accelerators, backend, launcher, _status in strategy_rows(
        catalog, select(catalog), probe=False
    ):
        alias = name.strip()
        if name == alias:
            current = alias
            rows.append([f"`{alias}`", accelerators, backend, launcher, cpu_status(catalog, alias)])
        else:
            preset = catalog.registry()[alias][1]
            shown = ", ".join(f"{k}={v!r}" for k, v in preset.items())
            label = f"`{alias}` ({shown})" if shown else f"`{alias}` (another name)"
            rows.append([label, accelerators, backend, launcher, f"as `{current}`"])
    return table(
        ["strategy / alias", "accelerators", "backend", "launcher", "CPU-only machine"], rows
    )


def devices_section() -> str:
    """Every built-in device: its strategies with stratlib, with Lightning's Trainer and Fabric,
    its precisions and what to install (the rows ``stratgen list`` prints)."""
    catalog = builtin_catalog()
    selection = select(catalog)
    rows = device_rows(catalog, selection.strategies, selection.accelerators)
    return table(HEADER, [[f"`{r.device}`", *r.cells()[1:]] for r in rows]) + "\n"


# --- commands -------------------------------------------------------------------------------


def _value_name(action: argparse.Action) -> str:
    if action.choices:
        return "{" + ",".join(map(str, action.choices)) + "}"
    return str(action.metavar or action.dest.upper())


def _usage_part(action: argparse.Action) -> str:
    """How argparse shows an optional argument in a usage line."""
    flag = action.option_strings[0]
    return f"[{flag}]" if action.nargs == 0 else f"[{flag} {_value_name(action)}]"


def _flags(action: argparse.Action) -> str:
    """``--from SOURCE``, ``--quiet, -q``, or a positional's name."""
    if not action.option_strings:
        return str(action.metavar or action.dest)
    flags = ", ".join(action.option_strings)
    return flags if action.nargs == 0 else f"{flags} {_value_name(action)}"


def commands_section() -> str:
    parser = build_parser()
    subparsers = next(
        a for a in parser._actions if isinstance(a, argparse._SubParsersAction)  # noqa: SLF001
    )
    out = []
    for name, sub in subparsers.choices.items():
        sub.prog = f"stratgen {name}"
        usage = " ".join(sub.format_usage().split()).removeprefix("usage: ")
        shared = [
            a for a in sub._actions if a.dest in CONFIG_KEYS or a.dest in ("project", "no_color")
        ]  # noqa: SLF001
        for action in shared:
            usage = usage.replace(" " + _usage_part(action), "")
        if shared:
            usage = usage.replace(
                f"stratgen {name} [-h]", f"stratgen {name} [-h] [project options]"
            )
        out.append(f"#### `stratgen {name}`\n")
        out.append(f"{sub.description}\n")
        out.append("```text\n" + usage + "\n```\n")
        rows = []
        for action in sub._actions:  # noqa: SLF001
            if action.help in (None, argparse.SUPPRESS) or "-h" in action.option_strings:
                continue
            if action.dest in CONFIG_KEYS or action.dest in ("project", "no_color"):
                continue  # the shared project options are listed once, below
            rows.append([f"`{_flags(action)}`", action.help or ""])
        if rows:
            out.append(table(["option", "meaning"], rows) + "\n")
    return "\n".join(out).rstrip() + "\n"


def project_options_section() -> str:
    parser = build_parser()
    subparsers = next(
        a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
    )  # noqa: SLF001
    generate = subparsers.choices["generate"]
    rows = []
    for action in generate._actions:  # noqa: SLF001
        if action.dest in CONFIG_KEYS or action.dest in ("project", "no_color"):
            rows.append([f"`{_flags(action)}`", action.help or ""])
    return table(["option", "meaning"], rows) + "\n"


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
    """What each constrained string of the model is called, by its regular expression."""
    found = {}
    for value in vars(model).values():
        if typing.get_origin(value) is typing.Annotated:
            for meta in value.__metadata__:
                if isinstance(meta, model.Pattern):
                    found[meta.regex] = meta.what
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


# --- README -----------------------------------------------------------------------------------


def hpu_spec_section() -> str:
    """The built-in HPU spec itself, for the walkthrough (the editor hint line left out)."""
    lines = (ROOT / "specs" / "hpu.yaml").read_text(encoding="utf-8").splitlines()
    body = [line for line in lines if not line.startswith("# yaml-language-server:")]
    return "```yaml\n" + "\n".join(body).strip("\n") + "\n```\n"


SECTIONS: dict[str, Callable[[], str]] = {
    "strategies": lambda: strategies_section() + "\n",
    "devices": devices_section,
    "hpu-spec": hpu_spec_section,
    "commands": commands_section,
    "project-options": project_options_section,
    "config": config_section,
    "spec-reference": spec_reference_section,
}


def render(text: str) -> str:
    seen = set()

    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in SECTIONS:
            raise SystemExit(f"README.md: unknown generated section {name!r}")
        seen.add(name)
        return match.group(1) + SECTIONS[name]() + match.group(4)

    result = MARKER.sub(replace, text)
    missing = set(SECTIONS) - seen
    if missing:
        raise SystemExit(f"README.md lacks the generated section(s) {', '.join(sorted(missing))}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="only report whether README.md is current"
    )
    parser.add_argument("--readme", type=Path, default=README)
    args = parser.parse_args(argv)
    current = args.readme.read_text(encoding="utf-8")
    wanted = render(current)
    if current == wanted:
        print(f"{args.readme.name}: generated sections are current")
        return 0
    if args.check:
        diff = difflib.unified_diff(
            current.splitlines(keepends=True),
            wanted.splitlines(keepends=True),
            "README.md",
            "README.md (generated)",
        )
        sys.stdout.writelines(diff)
        print(
            f"{args.readme.name}: generated sections are stale; run `python scripts/gen_readme.py`"
        )
        return 1
    args.readme.write_text(wanted, encoding="utf-8")
    print(f"{args.readme.name}: generated sections rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
