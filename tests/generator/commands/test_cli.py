"""The command line: help for every command, exit codes, where messages go, colour, and
configuration from pyproject.toml with flags overriding it."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from stratgen import __version__
from stratgen.cli import build_parser, main
from stratgen.project import Project, load_config
from stratgen.resolve.resolver import resolve
from tests.support.generator import (
    ANSI_ESCAPE,
    MINIMAL_BASE,
    REPO,
    STRATEGY_SPEC,
    make_project,
    run_cli,
    run_process,
)


def _commands() -> list[str]:
    parser = build_parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(actions[0].choices)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "project", {"mine.yaml": STRATEGY_SPEC})


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_top_level_help_lists_every_command() -> None:
    result = run_cli("--help")
    assert result.code == 0 and result.err == ""
    assert result.out.startswith("usage: stratgen")
    for command in _commands():
        assert command in result.out
    assert "Exit codes: 0 success, 1 generated files out of date, 2 error in the input." in (
        result.out
    )


@pytest.mark.parametrize("command", _commands())
def test_every_command_has_help(command: str) -> None:
    result = run_cli(command, "--help")
    assert result.code == 0 and result.err == ""
    assert result.out.startswith(f"usage: stratgen {command}")
    description = result.out.split("\n\n")[1]
    assert len(description.split()) >= 5, f"{command} --help has no description"


def test_version() -> None:
    result = run_cli("--version")
    assert result.code == 0 and result.out == f"stratgen {__version__}\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the following arguments are required: COMMAND"),
        (["bogus"], "invalid choice: 'bogus'"),
        (["generate", "--bogus"], "unrecognized arguments: --bogus"),
        (["validate"], "the following arguments are required: FILE"),
    ],
)
def test_usage_errors_exit_2_on_stderr(argv: list[str], message: str) -> None:
    result = run_cli(*argv)
    assert result.code == 2 and result.out == ""
    assert message in result.err and result.err.startswith("usage: stratgen")


def test_exit_codes_of_a_project_life(project: Path) -> None:
    assert run_cli("check", "--project", project).code == 1  # nothing generated yet
    assert run_cli("generate", "--dry-run", "--project", project).code == 1
    assert run_cli("generate", "--project", project).code == 0
    assert run_cli("check", "--project", project).code == 0
    assert run_cli("generate", "--dry-run", "--project", project).code == 0
    ok = run_cli("validate", "--project", project, project / "specs" / "mine.yaml")
    assert ok.code == 0 and ok.out == "specs/mine.yaml: ok (1 strategy)\n"
    missing = run_cli("validate", "--project", project, project / "specs" / "nope.yaml")
    assert missing.code == 2 and missing.err.endswith("nope.yaml: no such file\n")
    assert missing.out == ""


def test_errors_go_to_stderr_and_results_to_stdout(project: Path) -> None:
    (project / "specs" / "bad.yaml").write_text("strategies: 3\n")
    result = run_cli("generate", "--project", project)
    assert result.code == 2 and result.out == ""
    assert result.err == (
        "error: specs/bad.yaml:1:13: strategies: expected a list whose items are each a "
        "mapping, found the integer 3\n1 problem found; nothing was written.\n"
    )


def test_colour_only_on_a_terminal_and_never_with_no_color(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "specs" / "bad.yaml").write_text("strategies: 3\n")
    argv = ["check", "--project", str(project)]
    monkeypatch.delenv("NO_COLOR", raising=False)

    terminal = Terminal()
    assert main(argv, io.StringIO(), terminal) == 2
    assert terminal.getvalue().startswith(f"{ANSI_ESCAPE}1;31merror: {ANSI_ESCAPE}0m")

    for setup in ("pipe", "no_color", "flag"):
        err: io.StringIO = io.StringIO() if setup == "pipe" else Terminal()
        args = [*argv, "--no-color"] if setup == "flag" else argv
        if setup == "no_color":
            monkeypatch.setenv("NO_COLOR", "1")
        assert main(args, io.StringIO(), err) == 2
        assert ANSI_ESCAPE not in err.getvalue() and "error: " in err.getvalue()
        monkeypatch.delenv("NO_COLOR", raising=False)

    # An empty NO_COLOR does not count (no-color.org).
    monkeypatch.setenv("NO_COLOR", "")
    terminal = Terminal()
    main(argv, io.StringIO(), terminal)
    assert ANSI_ESCAPE in terminal.getvalue()


def test_no_escape_codes_in_a_real_process(project: Path) -> None:
    (project / "specs" / "bad.yaml").write_text("strategies: 3\n")
    result = run_process("generate", cwd=project)
    assert result.returncode == 2 and result.stdout == ""
    assert "error: specs/bad.yaml:1:13:" in result.stderr
    assert ANSI_ESCAPE not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


def test_list_shows_every_strategy_and_alias_of_the_catalog() -> None:
    result = run_cli("list", "--project", REPO)
    assert result.code == 0 and result.err == ""
    strategy_table, accelerator_table, *devices = result.out.split("\n\n")
    lines = strategy_table.splitlines()
    assert lines[0].split() == [
        "strategy",
        "class",
        "accelerators",
        "backend",
        "launcher",
        "available",
        "here",
    ]
    catalog = resolve(Project(load_config(REPO)).sources())
    rows = {line.split()[0]: line for line in lines[2:] if line.strip()}
    for name, (strategy, _) in catalog.registry().items():
        assert name in rows, name
        assert strategy.class_name in rows[name]
    for strategy in catalog.strategies.values():
        if not strategy.abstract and "cpu" in strategy.accelerators and not strategy.requires:
            assert "yes (" in rows[strategy.name], rows[strategy.name]
    accelerators = accelerator_table.splitlines()
    assert accelerators[0].split()[:3] == ["accelerator", "class", "backend"]
    assert {line.split()[0] for line in accelerators[2:]} == set(catalog.accelerators)
    # Then the devices x frameworks table, one block per accelerator (tests/generator/targets/test_device_table.py).
    assert devices[0].strip() == "Devices and frameworks:"
    assert {block.splitlines()[0] for block in devices[1:]} == set(catalog.accelerators)


def test_list_without_probe(project: Path) -> None:
    result = run_cli("list", "--no-probe", "--project", project)
    assert result.code == 0
    rows = [line.split() for line in result.out.splitlines()]
    assert ["mine", "MyStrategy", "cpu", "auto", "external", "-"] in rows
    assert ["mine_hard", "MyStrategy", "cpu", "auto", "external"] in rows


# --- configuration -----------------------------------------------------------------------------


def test_every_config_key_is_honoured(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / "defs").mkdir(parents=True)
    (root / "defs" / "base.yaml").write_text(MINIMAL_BASE)
    (root / "defs" / "mine.yaml").write_text(STRATEGY_SPEC)
    (root / "tpl" / "package").mkdir(parents=True)
    builtin_init = (
        REPO / "generator" / "stratgen" / "templates" / "package" / "__init__.py.j2"
    ).read_text()
    (root / "tpl" / "package" / "__init__.py.j2").write_text(
        builtin_init.replace('"""{{ package }}:', '"""Custom. {{ package }}:')
    )
    (root / "pyproject.toml").write_text(
        "[tool.stratgen]\n"
        'specs = "defs"\noutput = "build/gen"\npackage = "custompkg"\n'
        'tests = "build/gen-tests"\ntemplates = "tpl"\nbuiltin-specs = false\n'
    )
    result = run_cli("generate", "--project", root)
    assert result.code == 0, result.err
    init = (root / "build" / "gen" / "custompkg" / "__init__.py").read_text()
    assert '"""Custom. custompkg:' in init
    assert (root / "build" / "gen" / "custompkg" / "strategies" / "mine.py").is_file()
    assert (root / "build" / "gen-tests" / "test_mine.py").is_file()
    assert (root / "build" / "gen" / ".stratgen-manifest.json").is_file()
    assert not (root / "generated").exists() and not (root / "specs").exists()


def test_flags_override_the_config(project: Path) -> None:
    result = run_cli(
        "generate",
        "--project",
        project,
        "--package",
        "otherlib",
        "--output",
        "elsewhere",
        "--tests",
        "elsewhere/t",
    )
    assert result.code == 0, result.err
    assert (project / "elsewhere" / "otherlib" / "strategies" / "mine.py").is_file()
    assert (project / "elsewhere" / "t" / "test_mine.py").is_file()
    assert not (project / "out").exists()


def test_specs_templates_and_builtin_flags_override_the_config(project: Path) -> None:
    (project / "other").mkdir()
    (project / "other" / "base.yaml").write_text(MINIMAL_BASE)
    (project / "tpl" / "package").mkdir(parents=True)
    builtin_init = (
        REPO / "generator" / "stratgen" / "templates" / "package" / "__init__.py.j2"
    ).read_text()
    (project / "tpl" / "package" / "__init__.py.j2").write_text(
        builtin_init.replace('"""{{ package }}:', '"""Flagged. {{ package }}:')
    )
    result = run_cli("generate", "--project", project, "--specs", "other", "--templates", "tpl")
    assert result.code == 0, result.err
    assert not (project / "out" / "minilib" / "strategies" / "mine.py").exists()
    assert '"""Flagged. minilib:' in (project / "out" / "minilib" / "__init__.py").read_text()
    # With the built-in specs too, the minimal base specs collide with them.
    both = run_cli(
        "validate", "--project", project, "--builtin-specs", project / "specs" / "mine.yaml"
    )
    assert both.code == 2 and "is already defined in stratgen:specs/" in both.err
    assert run_cli("check", "--project", project, "--no-builtin-specs").code == 1


def test_project_root_is_found_from_a_subfolder(project: Path) -> None:
    sub = project / "specs"
    result = run_cli("generate", cwd=sub)
    assert result.code == 0, result.err
    assert (project / "out" / "minilib" / "strategies" / "mine.py").is_file()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ('pakage = "x"\n', "unknown key 'pakage' (did you mean 'package'?)"),
        ("builtin-specs = 1\n", "builtin-specs must be a bool, found 1"),
        ('package = "My-Lib"\n', "package name 'My-Lib' must be a lower-case Python identifier"),
        ('package = "class"\n', "package name 'class' must be a lower-case Python identifier"),
        (
            'output = "../elsewhere"\n',
            "output folder '../elsewhere' must be a folder inside the project",
        ),
        ('tests = "/tmp"\n', "tests folder '/tmp' must be a folder inside the project"),
        ('output = "."\n', "output folder '.' must be a folder inside the project"),
        ('templates = "nowhere"\n', "templates folder nowhere/ does not exist"),
        ("[tool.stratgen\n", "cannot read it"),
    ],
)
def test_bad_configuration_is_a_clean_error(tmp_path: Path, config: str, message: str) -> None:
    root = make_project(tmp_path / "p", {"mine.yaml": STRATEGY_SPEC})
    text = (root / "pyproject.toml").read_text()
    for key in ("package", "output", "tests", "builtin-specs"):
        if config.startswith(key):
            text = "\n".join(line for line in text.splitlines() if not line.startswith(key)) + "\n"
    (root / "pyproject.toml").write_text(text + config)
    result = run_cli("generate", "--project", root)
    assert result.code == 2 and result.out == ""
    assert message in result.err and "Traceback" not in result.err
    assert not (root / "out").exists()


def test_missing_specs_folder_is_a_clean_error(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.stratgen]\n")
    result = run_cli("generate", "--project", tmp_path)
    assert result.code == 2 and "specs folder specs/ does not exist" in result.err
