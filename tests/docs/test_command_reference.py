"""The command reference (docs/reference/cli.md) as a reader uses it: every flag it shows for a
command is accepted by that command, and every option a command accepts is shown for it. The
page is read as text, and the flags are handed to ``stratgen``'s own parser."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stratgen.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
#: An option and the value it shows: `--from SOURCE`, `--base {single_device,parallel}`.
FLAG = re.compile(r"(?<![\w-])(--?[a-z][a-z-]*)(?: (\{[^}]*\}|[A-Z_]+))?")


def _sections() -> dict[str, str]:
    """Each command's section of the page, by command name."""
    parts = re.split(r"^#### `stratgen (\w+)`\n", PAGE, flags=re.M)
    sections = dict(zip(parts[1::2], parts[2::2], strict=True))
    sections[next(reversed(sections))] = sections[next(reversed(sections))].split("\n## ")[0]
    return sections


def _first_cells(text: str) -> str:
    """The first cell of each row of the tables in ``text``: what a row is about."""
    return "\n".join(line.split(" | ")[0] for line in text.splitlines() if line.startswith("| `"))


def _project_table() -> str:
    return _first_cells(PAGE.split("## Project options", 1)[1])


def _usage(section: str) -> str:
    found = re.search(r"```text\n(.*?)\n```", section, re.S)
    assert found, section
    return " ".join(found.group(1).split())


def _shown_flags(section: str) -> dict[str, str | None]:
    """Every flag the section shows (usage and table), with the value it shows it with."""
    shown: dict[str, str | None] = {}
    text = _usage(section) + "\n" + _first_cells(section)
    if "[project options]" in text:
        text += "\n" + _project_table()
    for flag, value in FLAG.findall(text):
        if flag not in ("-h",):
            shown.setdefault(flag, value or None)
    return shown


def _required_positionals(section: str) -> list[str]:
    """A value for each positional argument the usage line requires: the words outside
    brackets after `stratgen COMMAND`."""
    required = []
    depth = 0
    for word in _usage(section).split()[2:]:
        if depth == 0 and not word.startswith("["):
            required.append("x")
        depth += word.count("[") - word.count("]")
    return required


def _parses(argv: list[str]) -> bool:
    try:
        build_parser().parse_args(argv)
    except SystemExit:
        return False
    return True


COMMANDS = sorted(_sections())


def test_the_page_documents_every_command() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")  # noqa: SLF001
    assert sorted(subparsers.choices) == COMMANDS


@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_shown_for_a_command_is_accepted_by_it(command: str) -> None:
    section = _sections()[command]
    positionals = _required_positionals(section)
    assert _parses([command, *positionals]), f"`stratgen {command}` as its usage shows it"
    refused = []
    for flag, value in _shown_flags(section).items():
        if value is None:
            argv = [command, flag]
        elif value.startswith("{"):
            argv = [command, flag, value.strip("{}").split(",")[0]]
        else:
            argv = [command, flag, "value"]
        if not _parses([*argv, *positionals]):
            refused.append(flag)
    assert (
        not refused
    ), f"the reference shows {refused} for `stratgen {command}`, which refuses them"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_a_command_accepts_is_shown_for_it(command: str) -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")  # noqa: SLF001
    accepted = {
        flag
        for action in subparsers.choices[command]._actions  # noqa: SLF001
        for flag in action.option_strings
        if flag not in ("-h", "--help")
    }
    missing = sorted(accepted - set(_shown_flags(_sections()[command])))
    assert not missing, f"`stratgen {command}` accepts {missing}, which the reference leaves out"


def test_a_project_option_is_refused_by_init_and_not_shown_for_it() -> None:
    """`stratgen init` makes a project; it takes none of the project options (it has its own
    --package), and the reference must not offer them."""
    assert not _parses(["init", "--specs", "foo", "d"])
    assert "[project options]" not in _usage(_sections()["init"])
    assert "--package" in _shown_flags(_sections()["init"])
