"""Adding to a project: ``stratgen new`` (a spec) and ``stratgen init`` (a whole project)."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import StratgenError
from .files import atomic_write
from .project import Project

if TYPE_CHECKING:
    from .cli import Console

EXIT_OK = 0


def new_spec(args: argparse.Namespace, project: Project, console: Console) -> int:
    if args.source is None:
        raise StratgenError("stratgen new needs --from FILE (writing a spec from questions is not available)")
    return new_from_file(args.source, project, console, force=args.force)


def new_from_file(source: Path, project: Project, console: Console, force: bool = False) -> int:
    """Validate ``source`` with the project, copy it into the specs folder, and render it."""
    if not source.is_file():
        raise StratgenError(f"{source}: no such file")
    config = project.config
    specs_dir = config.root / config.specs
    destination = specs_dir / source.name
    inside = source.resolve().parent == specs_dir.resolve()
    if (
        not inside
        and destination.exists()
        and destination.read_bytes() != source.read_bytes()
        and not force
    ):
        raise StratgenError(
            f"{project.display(destination)} already exists and differs from {source}; "
            "rename your file or pass --force to replace it"
        )
    label = project.display(destination)
    replacing = not inside and destination.exists()
    extra = [] if inside else [(source, label)]
    before = set(project.tree().recorded())
    # Planning raises with every problem before anything is written.
    plan = project.plan(extra=extra, skip=destination if replacing else None)

    spec = next(s for s in plan.catalog.sources if s.path == label).spec
    copied: list[str] = []
    if not inside:
        specs_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(destination, source.read_bytes())
        copied.append(label)
        for strategy in spec.strategies:
            if strategy.hooks and strategy.hooks.endswith(".py"):
                hooks_source = source.parent / strategy.hooks
                hooks_target = specs_dir / strategy.hooks
                if hooks_source.resolve() != hooks_target.resolve():
                    hooks_target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(hooks_source, hooks_target)
                    copied.append(project.display(hooks_target))
    report = project.generate(plan)

    created = [p for p in report.written if p not in before and p != config.manifest]
    updated = [p for p in report.written if p in before and p != config.manifest]
    for path in copied:
        console.say(f"added   {path}")
    for path in created:
        console.say(f"created {path}")
    for path in updated:
        console.say(f"updated {path}")
    console.say("")
    _next_steps(spec, label, config.package, config.tests, console)
    return EXIT_OK


def _next_steps(spec: object, label: str, package: str, tests: str, console: Console) -> None:
    strategies = [s for s in getattr(spec, "strategies", ()) if not s.abstract]
    parallel = [s for s in strategies if s.base != "single_device"]
    stem = Path(label).stem
    console.say("Next steps:")
    if strategies:
        name = (parallel or strategies)[0].name
        devices = 2 if parallel else 1
        console.say(
            f"  - use it:   strategy = {package}.get_strategy({name!r}, devices={devices}); "
            "strategy.launch(train)"
        )
    console.say(f"  - test it:  python -m pytest {tests}/test_{stem}.py")
    console.say(f"  - commit {label} and the regenerated files; CI runs `stratgen check`")


def init_project(args: argparse.Namespace, console: Console) -> int:
    raise StratgenError("stratgen init is not available in this version")
