"""What each command does, in terms of a ``Project``."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from ..project import Config, Project, builtin_specs_dir, find_root, load_config
from ..spec.errors import StratgenError
from .exit_codes import EXIT_DRIFT, EXIT_OK

if TYPE_CHECKING:
    from .console import Console

#: The options that change a project's settings from what its pyproject.toml says.
SETTING_OPTIONS = (
    "specs",
    "output",
    "package",
    "tests",
    "templates",
    "builtin_specs",
    "targets",
    "docs",
)


def config_from(args: argparse.Namespace) -> Config:
    root = (args.project or find_root(Path.cwd())).resolve()
    if not root.is_dir():
        raise StratgenError(f"project folder {root} does not exist")
    overrides = {key: getattr(args, key, None) for key in SETTING_OPTIONS}
    if args.command == "schema":
        overrides["output"] = None
    config = load_config(root, overrides)
    if (
        args.command in ("list", "validate")
        and args.project is None
        and args.specs is None
        and not (root / config.specs).is_dir()
    ):
        # Outside any project, these commands work on the specs stratgen ships.
        config = dataclasses.replace(config, specs=str(builtin_specs_dir()))
    return config


def run(args: argparse.Namespace, console: Console) -> int:
    handler = {
        "generate": cmd_generate,
        "check": cmd_check,
        "validate": cmd_validate,
        "list": cmd_list,
        "schema": cmd_schema,
        "new": cmd_new,
        "init": cmd_init,
    }[args.command]
    return handler(args, console)


def _print_timings(project: Project, console: Console) -> None:
    steps = project.timings.steps
    total = sum(steps.values())
    parts = ", ".join(f"{name} {seconds * 1000:.0f} ms" for name, seconds in steps.items())
    console.err.write(
        f"timings: {parts}; total {total * 1000:.0f} ms "
        f"(black cache: {project.formatter.hits} hits, {project.formatter.misses} misses)\n"
    )


def cmd_generate(args: argparse.Namespace, console: Console) -> int:
    project = Project(config_from(args))
    plan = project.plan()
    if args.dry_run or args.diff:
        drift = project.compare(plan, with_diff=args.diff)
        recorded = set(project.tree().recorded())
        orphans = [p for p in drift.extra if p in recorded]
        if args.diff:
            for text in drift.diffs:
                console.say(text.rstrip("\n"))
        for path in drift.missing:
            console.say(f"would create {path}")
        for path in drift.changed:
            console.say(f"would update {path}")
        for path in orphans:
            console.say(f"would remove {path}")
        changes = len(drift.missing) + len(drift.changed) + len(orphans)
        if args.dry_run:
            console.say(
                f"{changes} file(s) would change; nothing written (dry run)."
                if changes
                else "Up to date; nothing to write."
            )
            if args.timings:
                _print_timings(project, console)
            return EXIT_DRIFT if changes else EXIT_OK
    report = project.generate(plan)
    for path in report.written:
        console.say(f"wrote {path}")
    for path in report.removed:
        console.say(f"removed {path}")
    for path in report.kept:
        console.warn(
            f"kept {path}: no spec produces it any more, but it was edited by hand; delete it yourself"
        )
    console.say(
        f"{len(report.written)} written, {len(report.unchanged)} unchanged, {len(report.removed)} removed."
    )
    if args.timings:
        _print_timings(project, console)
    return EXIT_OK


def cmd_check(args: argparse.Namespace, console: Console) -> int:
    project = Project(config_from(args))
    plan = project.plan()
    drift = project.compare(plan, with_diff=not args.quiet)
    if args.timings:
        _print_timings(project, console)
    if drift.clean:
        console.say(f"{len(plan.files)} generated files match the specs.")
        return EXIT_OK
    for text in drift.diffs:
        console.say(text.rstrip("\n"))
    for label, paths in (
        ("changed", drift.changed),
        ("missing", drift.missing),
        ("extra", drift.extra),
    ):
        for path in paths:
            console.say(f"{label}: {path}")
    console.err.write(
        f"generated files are out of date ({len(drift.changed)} changed, {len(drift.missing)} missing, "
        f"{len(drift.extra)} extra); run `stratgen generate`.\n"
    )
    return EXIT_DRIFT


def cmd_validate(args: argparse.Namespace, console: Console) -> int:
    project = Project(config_from(args))
    specs_dir = (project.config.root / project.config.specs).resolve()
    for path in args.files:
        if not path.is_file():
            raise StratgenError(f"{path}: {'not a file' if path.exists() else 'no such file'}")
    outside = list(dict.fromkeys(p for p in args.files if p.resolve().parent != specs_dir))
    # Files inside the specs folder are validated with the project; others are added to it.
    from ..resolve.resolver import resolve

    sources = project.sources(extra=[(p, str(p)) for p in outside])
    catalog = resolve(sources)
    names = {p.resolve() for p in args.files}
    checked = [
        s
        for s in sources
        if (project.config.root / s.path).resolve() in names or Path(s.path).resolve() in names
    ]
    for source in checked:
        spec = source.spec
        counts = []
        if spec.accelerator:
            counts.append(f"accelerator {spec.accelerator.name}")
        for singular, plural, items in (
            ("strategy", "strategies", spec.strategies),
            ("precision plugin", "precision plugins", spec.precision_plugins),
            ("cluster environment", "cluster environments", spec.cluster_environments),
            ("backend", "backends", spec.backends),
        ):
            if items:
                counts.append(f"{len(items)} {singular if len(items) == 1 else plural}")
        console.say(f"{source.path}: ok ({', '.join(counts) or 'empty'})")
    del catalog
    return EXIT_OK


def cmd_list(args: argparse.Namespace, console: Console) -> int:
    from .list_table import strategy_table

    project = Project(config_from(args))
    from ..resolve.resolver import resolve
    from ..resolve.selection import select

    catalog = resolve(project.sources())
    targets = project.config.targets
    console.say(
        strategy_table(
            catalog,
            select(catalog),
            probe=not args.no_probe,
            lightning_target="lightning" in targets,
            deepspeed_target="deepspeed" in targets,
        )
    )
    return EXIT_OK


def cmd_schema(args: argparse.Namespace, console: Console) -> int:
    from ..spec.json_schema import schema_text

    text = schema_text()
    if args.schema_output:
        from ..output.file_tree import atomic_write

        atomic_write(args.schema_output, text.encode(), durable=True)
        console.say(f"wrote {args.schema_output}")
    else:
        console.out.write(text)
    return EXIT_OK


def cmd_new(args: argparse.Namespace, console: Console) -> int:
    from .new_spec import new_spec

    return new_spec(args, Project(config_from(args)), console)


def cmd_init(args: argparse.Namespace, console: Console) -> int:
    from .init_project import init_project

    return init_project(args, console)
