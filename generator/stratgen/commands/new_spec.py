"""Adding to a project: ``stratgen new``, a spec written from a few answers or copied from a
file (``stratgen init``, a whole project, is ``stratgen.commands.init_project``)."""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stratcore.contract import (
    DEFAULT_PRECISION,
    GENERAL_LAUNCHERS,
    PRECISIONS,
    PRECISION_ALIASES,
    STRATEGY_KINDS,
)
from stratcore.wording import did_you_mean

from ..output.file_tree import MAX_FILE_BYTES, atomic_write, inside, read_regular
from ..project import Project
from ..resolve.resolver import resolve
from ..spec.errors import StratgenError
from .exit_codes import EXIT_OK

if TYPE_CHECKING:
    from .console import Console


#: Reads one answer; ``input`` on a terminal, a stand-in in tests.
Ask = Callable[[str], str]

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
BASES = tuple(sorted(STRATEGY_KINDS))


def new_spec(
    args: argparse.Namespace, project: Project, console: Console, ask: Ask | None = None
) -> int:
    """``stratgen new``: add a spec file (--from) or write one from a few answers (NAME)."""
    if args.source is not None:
        if args.name is not None:
            raise StratgenError("give either a NAME or --from FILE, not both")
        return new_from_file(args.source, project, console, force=args.force)
    if args.name is None:
        raise StratgenError(
            "stratgen new needs a NAME (it asks a few questions and writes specs/NAME.yaml) "
            "or --from FILE (a spec you wrote)"
        )
    if ask is None and sys.stdin.isatty():
        ask = input
    answers = spec_answers(args, project, console, ask)
    text = spec_text(answers)
    with tempfile.TemporaryDirectory(prefix="stratgen-new-") as folder:
        draft = Path(folder) / f"{answers.name}.yaml"
        draft.write_text(text, encoding="utf-8")
        return new_from_file(draft, project, console, force=args.force)


# --- stratgen new NAME ----------------------------------------------------------------------


@dataclass(frozen=True)
class SpecAnswers:
    """What ``stratgen new NAME`` needs to write a spec."""

    name: str
    accelerator: str
    new_accelerator: bool
    base: str
    launcher: str | None
    backend: str | None
    precision: str
    auto_backend: str = "gloo"  # what 'auto' means on the chosen accelerator, for the comment


def camel(name: str) -> str:
    """'my_device' -> 'MyDevice'."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


def _check_name(value: str, what: str) -> str:
    if not NAME_PATTERN.match(value):
        raise ValueError(f"{what} {value!r} must be a lower_snake_case name such as 'my_device'")
    return value


def _check_choice(value: str, what: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(
            f"{what} {value!r} is not one of {', '.join(choices)}{did_you_mean(value, choices)}"
        )
    return value


def _check_precision(value: str, supported: tuple[str, ...], accelerator: str) -> str:
    mode = PRECISION_ALIASES.get(value, value)
    if mode not in PRECISIONS:
        raise ValueError(
            f"precision {value!r} is not one of {', '.join(PRECISIONS)}"
            f"{did_you_mean(value, PRECISIONS)}"
        )
    if mode not in supported:
        raise ValueError(
            f"precision {value!r} is not supported by accelerator {accelerator!r}; choose one of "
            f"{', '.join(supported)}"
        )
    return mode


class _Questions:
    """Takes each answer from a flag, a default (--defaults) or the user, in that order."""

    def __init__(self, args: argparse.Namespace, console: Console, ask: Ask | None) -> None:
        self.args = args
        self.console = console
        self.ask = ask

    def answer(self, flag: str, prompt: str, default: str, check: Callable[[str], str]) -> str:
        given = getattr(self.args, flag, None)
        if given is not None:
            try:
                return check(given)
            except ValueError as exc:
                raise StratgenError(f"--{flag.replace('_', '-')}: {exc}") from None
        if self.args.defaults:
            return check(default)
        if self.ask is None:
            raise StratgenError(
                "stratgen new NAME asks a few questions, and there is no terminal to ask them on; "
                "pass --defaults, with --accelerator, --base, --launcher, --backend and "
                "--precision for the answers that differ from the defaults"
            )
        while True:
            try:
                reply = self.ask(f"{prompt} [{default}]: ").strip()
            except EOFError:
                raise StratgenError(f"no answer to {prompt!r}; nothing was written") from None
            try:
                return check(reply or default)
            except ValueError as exc:
                self.console.say(f"  {exc}")


def spec_answers(
    args: argparse.Namespace, project: Project, console: Console, ask: Ask | None
) -> SpecAnswers:
    """The answers for ``stratgen new NAME``, from flags, defaults or questions."""
    try:
        name = _check_name(args.name, "NAME")
    except ValueError as exc:
        raise StratgenError(str(exc)) from None
    config = project.config
    destination = config.root / config.specs / f"{name}.yaml"
    if destination.exists() and not args.force:
        raise StratgenError(
            f"{project.display(destination)} already exists; choose another NAME or pass --force "
            "to replace it"
        )
    catalog = resolve(project.sources(skip=destination if args.force else None))
    accelerators = tuple(catalog.accelerators)
    backends = tuple(catalog.backends)
    questions = _Questions(args, console, ask)

    def check_accelerator(value: str) -> str:
        return _check_name(value, "accelerator")

    accelerator = questions.answer(
        "accelerator",
        f"Accelerator it runs on ({', '.join(accelerators)}), or a name for a new one",
        "cpu" if "cpu" in accelerators else accelerators[0],
        check_accelerator,
    )
    new_accelerator = accelerator not in catalog.accelerators
    if new_accelerator:
        hint = did_you_mean(accelerator, accelerators).strip()
        console.say(
            f"  '{accelerator}' is a new accelerator: the spec declares it, backed by the CPU"
            + (f" {hint}." if hint else ".")
        )
    base = questions.answer(
        "base",
        "Kind of strategy: parallel (several processes) or single_device",
        "parallel",
        lambda value: _check_choice(value, "base", BASES),
    )
    launcher = backend = None
    if base == "parallel":
        launcher = questions.answer(
            "launcher",
            "How processes start: popen (the script again for each rank), spawn, fork, "
            "forkserver, external (torchrun, srun)",
            "popen",
            lambda value: _check_choice(value, "launcher", GENERAL_LAUNCHERS),
        )
        backend = questions.answer(
            "backend",
            f"Collective backend: auto (the accelerator's), {', '.join(backends)}",
            "auto",
            lambda value: _check_choice(value, "backend", ("auto", *backends)),
        )
    else:
        for flag in ("launcher", "backend"):
            if getattr(args, flag, None) is not None:
                raise StratgenError(
                    f"--{flag} applies to parallel strategies; a single_device strategy runs in "
                    "the calling process without communication"
                )
    if new_accelerator:
        supported: tuple[str, ...] = PRECISIONS
        auto_backend = "gloo"
    else:
        spec = catalog.accelerators[accelerator].spec
        supported = tuple(spec.precision.supported or PRECISIONS)
        auto_backend = catalog.accelerators[accelerator].backend.name
    precision = questions.answer(
        "precision",
        f"Default precision ({', '.join(supported)})",
        DEFAULT_PRECISION if DEFAULT_PRECISION in supported else supported[0],
        lambda value: _check_precision(value, supported, accelerator),
    )
    return SpecAnswers(
        name, accelerator, new_accelerator, base, launcher, backend, precision, auto_backend
    )


COMMENT_COLUMN = 40

LAUNCHER_NOTES = {
    "popen": "the script is started again for every other local rank",
    "spawn": "torch.multiprocessing starts every rank",
    "fork": "forked ranks (works in notebooks)",
    "forkserver": "ranks forked from a server process",
    "external": "torchrun, srun or mpirun start the ranks",
}


def _line(text: str, comment: str = "") -> str:
    """A YAML line with its comment lined up with the others."""
    if not comment:
        return text
    return f"{text.ljust(COMMENT_COLUMN - 1)} # {comment}"


def spec_text(answers: SpecAnswers) -> str:
    """A commented spec file for ``answers``."""
    name, accelerator = answers.name, answers.accelerator
    lines = [
        f"# {name}: written by `stratgen new`. Edit it, then run `stratgen generate`.",
        "# Every key is described in the documentation's spec reference and by `stratgen schema`.",
        "version: 1",
        "",
    ]
    if answers.new_accelerator:
        lines += [
            "# A new accelerator, backed by CPU processes so that it runs anywhere. For real",
            "# hardware set device_type to its torch device type, list the package it needs under",
            "# `requires`, and name the functions that find it in is_available and device_count",
            "# (stratgen's specs/hpu.yaml is a complete example).",
            "accelerator:",
            _line(f"  name: {accelerator}", f"get_strategy(..., accelerator={accelerator!r})"),
            f"  class_name: {camel(accelerator)}Accelerator",
            f"  description: The {accelerator} device, backed by CPU processes.",
            _line("  device_type: cpu", "torch.device type of its tensors"),
            _line("  indexed: false", "torch.device('cpu') carries no index"),
            _line("  auto_devices: 1", "what devices='auto' selects"),
            _line("  backend: gloo", "collective backend of strategies that say 'auto'"),
            "  # requires:",
            "  #   - module: my_device_sdk",
            "  #     install: pip install my-device-sdk",
            "  # is_available: my_device_sdk:is_available",
            "  # device_count: my_device_sdk:device_count",
            "",
        ]
    lines += [
        "strategies:",
        _line(f"  - name: {name}", f"get_strategy({name!r})"),
        f"    class_name: {camel(name)}Strategy",
    ]
    if answers.base == "single_device":
        lines += [
            _line("    base: single_device", "one device, in the calling process"),
            f"    accelerators: [{accelerator}]",
            _line(
                f"    precision: {{default: {answers.precision}}}", "used when none is asked for"
            ),
            f"    description: Train on one {accelerator} device in the calling process.",
        ]
    else:
        launcher = answers.launcher or "popen"
        backend = answers.backend or "auto"
        backend_note = (
            f"the accelerator's ({answers.auto_backend})"
            if backend == "auto"
            else "see `backends:`"
        )
        lines += [
            _line("    extends: ddp", "ddp's model wrapper, options and cluster environments"),
            _line(f"    launcher: {launcher}", LAUNCHER_NOTES[launcher]),
            _line(f"    backend: {backend}", backend_note),
            f"    accelerators: [{accelerator}]",
            _line(
                f"    precision: {{default: {answers.precision}}}", "used when none is asked for"
            ),
            "    description: |-",
            f"      Distributed data-parallel training on {accelerator} devices.",
            "",
            "      Each process holds a replica of the model; gradients are averaged in the",
            "      backward pass.",
            _line("    # options:", "constructor arguments, typed, with defaults"),
            "    #   bucket_cap_mb: {type: float, default: 50}",
            _line("    # aliases:", "more registry names, each a preset of the options"),
            f"    #   {name}_find_unused_parameters_true: {{find_unused_parameters: true}}",
        ]
    return "\n".join(lines) + "\n"


#: What ``generate`` reads of the specs folder (``Project.spec_paths``).
SPEC_SUFFIXES = (".yaml", ".yml")


def new_from_file(source: Path, project: Project, console: Console, force: bool = False) -> int:
    """Validate ``source`` with the project, copy it (and the hooks files it names) into the
    specs folder, and render it. A file already there that differs is replaced only with
    ``force``; nothing is written through a symbolic link, nor out of the project."""
    if not source.is_file():
        raise StratgenError(f"{source}: no such file")
    if source.suffix not in SPEC_SUFFIXES:
        raise StratgenError(
            f"{source}: a spec file is named *.yaml or *.yml (`stratgen generate` reads only "
            "those); rename it"
        )
    config = project.config
    specs_dir = config.root / config.specs
    destination = specs_dir / source.name
    label = project.display(destination)
    in_place = source.resolve().parent == specs_dir.resolve()
    #: (file to copy, where in the project: relative to its root)
    copies: list[tuple[Path, str]] = [] if in_place else [(source, f"{config.specs}/{source.name}")]
    replacing = bool(copies) and _present(project, copies[0][1])
    extra = [] if in_place else [(source, label)]
    before = set(project.tree().recorded())
    # Planning raises with every problem before anything is written.
    plan = project.plan(extra=extra, skip=destination if replacing else None)

    spec = next(s for s in plan.catalog.sources if s.path == label).spec
    if not in_place:
        for strategy in spec.strategies:
            if strategy.hooks and strategy.hooks.endswith(".py"):
                hooks_source = source.parent / strategy.hooks
                hooks_target = f"{config.specs}/{strategy.hooks}"
                if hooks_source.resolve() != Path(inside_project(project, hooks_target)):
                    copies.append((hooks_source, hooks_target))
    # Every copy is checked before the first is made: each is new, the same, or --force.
    planned: dict[str, bytes] = {}
    for copied_from, target in copies:
        data = _read_source(copied_from)
        current = read_regular(inside_project(project, target))
        if current is not None and current != data and not force:
            raise StratgenError(
                f"{target} already exists and differs from {copied_from}; rename your file or "
                "pass --force to replace it"
            )
        planned[target] = data
    for target, data in planned.items():
        atomic_write(Path(inside_project(project, target)), data, durable=True)
    copied = list(planned)
    if copied:
        # Planned again from the specs folder: the file now sits in its sorted place among the
        # others, so the output is exactly what `stratgen generate` and `check` produce.
        plan = project.plan()
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


def inside_project(project: Project, relative: str) -> str:
    """Where ``relative`` (to the project) is written: ``file_tree.inside``."""
    return inside(project.config.root, relative)


def _present(project: Project, relative: str) -> bool:
    return read_regular(inside_project(project, relative)) is not None


def _read_source(path: Path) -> bytes:
    """A file to copy into the project: a regular file, read whole (a spec or hooks file is
    kilobytes)."""
    data = read_regular(path)
    if data is None:
        raise StratgenError(f"{path}: no such file")
    if len(data) > MAX_FILE_BYTES:
        raise StratgenError(f"{path}: larger than any spec or hooks file")
    return data


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
