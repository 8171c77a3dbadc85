"""``stratgen init``: a project of your own, made with copier from the project template
(``project_template`` beside this module, shipped inside stratgen)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from stratcore.version import runtime_requirement

from ..project import package_name_problem
from ..spec.errors import StratgenError
from .exit_codes import EXIT_OK

if TYPE_CHECKING:
    from .console import Console

#: The copier template of a new project (copier templates hold ``*.jinja`` files and
#: ``copier.yml``; stratgen's own jinja2 templates are ``stratgen/templates``).
PROJECT_TEMPLATE = Path(__file__).resolve().with_name("project_template")


def _package_name(text: str) -> str:
    return re.sub(r"[-.\s]+", "_", text.strip().lower())


def distribution_name(folder: str) -> str:
    """A distribution name (what pip installs) made from a folder name: ASCII letters and
    digits, runs of anything else as one '-', none at either end."""
    name = re.sub(r"[^A-Za-z0-9._]+", "-", folder).strip("-._")
    return name or "my-strategies"


def init_project(
    args: argparse.Namespace, console: Console, interactive: bool | None = None
) -> int:
    """``stratgen init DIR``: a new project from the copier template ``PROJECT_TEMPLATE``."""
    target: Path = args.directory
    if target.exists() and not target.is_dir():
        raise StratgenError(f"{target} exists and is not a folder")
    if target.is_dir() and any(target.iterdir()):
        raise StratgenError(
            f"{target} exists and is not empty; stratgen init only creates new projects "
            "(choose a new folder, or `copier update` an existing project)"
        )
    if interactive is None:
        interactive = sys.stdin.isatty() and sys.stdout.isatty()
    if not args.defaults and not interactive:
        raise StratgenError(
            "stratgen init asks a few questions, and there is no terminal to ask them on; "
            "pass --defaults (and --package NAME) to take the defaults"
        )
    dirname = target.resolve().name
    data: dict[str, str | bool] = {}
    if getattr(args, "lightning", False):
        data["lightning"] = True
    if args.package is not None:
        problem = package_name_problem(args.package)
        if problem is not None:
            raise StratgenError(f"--package {args.package!r} is not allowed: {problem}")
        data["package"] = args.package
    elif args.defaults and package_name_problem(_package_name(dirname)) is not None:
        raise StratgenError(
            f"cannot make a package name from the folder name {dirname!r} "
            f"({package_name_problem(_package_name(dirname))}); pass --package NAME"
        )
    project_name = distribution_name(dirname)
    template = getattr(args, "template", None) or str(PROJECT_TEMPLATE)
    vcs_ref = getattr(args, "vcs_ref", None)

    import copier
    from copier.errors import CopierError
    from plumbum import ProcessExecutionError  # copier runs git through plumbum

    try:
        copier.run_copy(
            template,
            target,
            data=data,
            user_defaults={
                "project_name": project_name,
                "runtime_requirement": runtime_requirement(),
            },
            defaults=args.defaults,
            vcs_ref=vcs_ref,
            unsafe=False,
            quiet=True,
        )
    except (CopierError, ValueError) as exc:
        raise StratgenError(f"stratgen init: {exc}") from None
    except ProcessExecutionError as exc:
        lines = str(exc.stderr).strip().splitlines() or [str(exc)]
        raise StratgenError(
            f"stratgen init: cannot read the template {template}: {lines[-1]}"
        ) from None

    created = sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file())
    console.say(f"Created {target}/ from stratgen's project template:")
    for path in created:
        console.say(f"  {path}")
    console.say("")
    console.say("Next steps:")
    console.say(f"  cd {target}")
    console.say("  stratgen generate      # specs/ -> the package in src/ and its tests")
    console.say("  python -m pytest       # the generated tests")
    console.say("  git init && git add -A && git commit -m 'Start from the stratgen template'")
    return EXIT_OK
