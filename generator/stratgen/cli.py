"""The ``stratgen`` command line. It parses arguments and reports; ``Project`` does the work.

Exit codes: ``stratgen.commands.exit_codes``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from stratcore.contract import DEFAULT_PRECISION, GENERAL_LAUNCHERS, STRATEGY_KINDS

from . import __version__
from .codegen.formatting import FormatError
from .commands.console import Console, wants_color  # noqa: F401 - re-exported
from .commands.exit_codes import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK
from .spec.errors import SpecError, StratgenError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_ERROR)


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    group = common.add_argument_group("project")
    group.add_argument(
        "--project", type=Path, help="project folder (default: nearest with [tool.stratgen])"
    )
    group.add_argument("--specs", help="specs folder, relative to the project")
    group.add_argument("--output", help="folder that holds the generated package")
    group.add_argument("--package", help="import name of the generated package")
    group.add_argument("--tests", help="folder for the generated tests")
    group.add_argument("--templates", help="folder of templates that override the built-in ones")
    group.add_argument(
        "--builtin-specs",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="whether stratgen's own specs join the project's (default: yes)",
    )
    group.add_argument(
        "--target",
        dest="targets",
        action="append",
        metavar="TARGET",
        help="generate for this target too: 'lightning' adds plugins for Lightning's Trainer "
        "and Fabric, 'deepspeed' DeepSpeed accelerators of the devices, 'docs' a page for each "
        "device (repeatable; default: [tool.stratgen] targets, else 'stratlib' alone)",
    )
    group.add_argument("--docs", help="folder for the device pages of the docs target")
    group.add_argument("--no-color", action="store_true", help="never colour the output")

    parser = _Parser(
        prog="stratgen",
        description="Generate a PyTorch training-strategy package and its tests from YAML specs.",
        epilog="Exit codes: 0 success, 1 generated files out of date, 2 error in the input.",
    )
    parser.add_argument("--version", action="version", version=f"stratgen {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    gen = commands.add_parser(
        "generate",
        parents=[common],
        help="render every spec into the package and its tests",
        description="Render every spec into the package and its tests. Only files whose "
        "content changes are written; files generated earlier that no spec produces any more "
        "are removed.",
    )
    gen.add_argument(
        "--dry-run", action="store_true", help="report what would change; write nothing"
    )
    gen.add_argument("--diff", action="store_true", help="print a unified diff of the changes")
    gen.add_argument("--timings", action="store_true", help="print the time spent in each step")

    check = commands.add_parser(
        "check",
        parents=[common],
        help="fail if the generated files are stale or edited by hand",
        description="Compare what the specs produce with the files on disk. Exit 1 with a "
        "unified diff and the changed, missing and extra files if they differ.",
    )
    check.add_argument("--quiet", "-q", action="store_true", help="list files only, no diff")
    check.add_argument("--timings", action="store_true", help="print the time spent in each step")

    validate = commands.add_parser(
        "validate",
        parents=[common],
        help="check spec files without generating anything",
        description="Check spec files against the format and against the project's other "
        "specs (extends, names, references). Prints every problem with file:line:column.",
    )
    validate.add_argument(
        "files", nargs="+", type=Path, metavar="FILE", help="a spec file to check"
    )

    lst = commands.add_parser(
        "list",
        parents=[common],
        help="table of strategies, aliases, accelerators and backends",
        description="List every strategy and alias with its accelerators, backend, launcher "
        "and whether it can run on this machine.",
    )
    lst.add_argument("--no-probe", action="store_true", help="skip the availability probe")

    schema = commands.add_parser(
        "schema",
        parents=[common],
        help="print the JSON Schema of the spec format",
        description="Print the JSON Schema of spec files (for editors and CI).",
    )
    schema.add_argument(
        "--write", "-w", dest="schema_output", type=Path, help="write it to this file"
    )

    new = commands.add_parser(
        "new",
        parents=[common],
        help="add a spec to the project and render it",
        description="Add hardware or a strategy. With --from, validate a spec file, copy it "
        "into the specs folder and render it. With a NAME, ask the few questions a spec needs "
        "(or take them from flags with --defaults), write a commented spec, and render it.",
    )
    new.add_argument("name", nargs="?", help="name of a new accelerator or strategy")
    new.add_argument("--from", dest="source", type=Path, help="spec file to add")
    new.add_argument("--defaults", action="store_true", help="ask nothing; use defaults and flags")
    new.add_argument("--accelerator", help="accelerator the strategy runs on (default: cpu)")
    new.add_argument("--base", choices=STRATEGY_KINDS, help="kind of strategy")
    new.add_argument("--launcher", choices=GENERAL_LAUNCHERS, help="how processes start")
    new.add_argument("--backend", help="collective backend (default: auto)")
    new.add_argument("--precision", help=f"default precision (default: {DEFAULT_PRECISION})")
    new.add_argument("--force", action="store_true", help="overwrite an existing spec of that name")

    init = commands.add_parser(
        "init",
        help="create a new strategy-package project",
        description="Create a project of your own with copier: pyproject.toml with "
        "[tool.stratgen], specs/, a CI workflow and pre-commit hooks that run `stratgen check`.",
    )
    init.add_argument("directory", type=Path, help="folder to create the project in")
    init.add_argument("--package", help="import name of your package")
    init.add_argument("--defaults", action="store_true", help="ask nothing; use defaults")
    init.add_argument(
        "--lightning",
        action="store_true",
        help="also render plugins for Lightning's Trainer and Fabric (the lightning target)",
    )
    init.add_argument(
        "--template",
        help="template to copy instead of the bundled one: a git URL or folder, "
        "which `copier update` can later update from",
    )
    init.add_argument(
        "--vcs-ref", help="tag or commit of a git --template (default: the latest tag)"
    )
    init.add_argument("--no-color", action="store_true", help="never colour the output")
    return parser


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run one command. The cyclic garbage collector is paused meanwhile: a run is short and
    leaves little cyclic garbage, and each collection would pass over every object it holds
    (the parsed specs, the catalog) again. Run as the program (``argv`` from the command
    line), the objects left are frozen at the end, so that the interpreter's last collection,
    on its way out, skips them too."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _run(argv, out, err)
    finally:
        if collecting:
            gc.enable()
        if argv is None:
            gc.freeze()


def _run(argv: Sequence[str] | None, out: TextIO | None, err: TextIO | None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    try:
        # argparse prints help, usage and its errors to sys.stdout / sys.stderr.
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    console = Console(out, err, False if args.no_color else None)
    from .commands import handlers

    try:
        return handlers.run(args, console)
    except SpecError as exc:
        for problem in exc.problems:
            console.error(str(problem))
        count = len(exc.problems)
        console.err.write(
            f"{count} problem{'s' if count != 1 else ''} found; nothing was written.\n"
        )
        return EXIT_ERROR
    except (StratgenError, FormatError) as exc:
        console.error(str(exc))
        return EXIT_ERROR
    except KeyboardInterrupt:
        console.error("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except OSError as exc:  # the file system refused a read or write
        where = f"{exc.filename}: " if exc.filename else ""
        console.error(f"{where}{exc.strerror or exc}")
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
