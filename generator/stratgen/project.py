"""A stratgen project: its configuration, its specs, and the files they produce.

This module only orchestrates the pipeline: load (YAML with locations) -> parse (typed model)
-> resolve (extends and references) -> select (what the package needs) -> render -> format ->
write or compare.
"""

from __future__ import annotations

import hashlib
import keyword
import os
import re
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from stratcore.wording import did_you_mean

from .codegen.formatting import Formatter
from .output.file_tree import (
    MANIFEST_NAME,
    Drift,
    Tree,
    WriteReport,
    manifest_bytes,
    read_regular,
)
from .resolve.reserved_names import RESERVED_PACKAGE_NAMES
from .spec.errors import Location, SpecError, StratgenError
from .spec.yaml_loader import read_spec_bytes

if TYPE_CHECKING:
    from .resolve.catalog import Catalog, Source
    from .resolve.selection import Selection
    from .targets.docs.verification import Record

PACKAGE_ROOT = Path(__file__).resolve().parent


def builtin_specs_dir() -> Path:
    """stratgen's built-in specs: ``stratgen/specs`` inside the wheel, or, in a source checkout,
    the repository's ``specs/`` (its own project's specs, which the wheel ships as they are)."""
    for candidate in (PACKAGE_ROOT / "specs", PACKAGE_ROOT.parent.parent / "specs"):
        if candidate.is_dir():
            return candidate
    raise StratgenError("stratgen's specs/ folder is missing from this installation")


BUILTIN_PREFIX = "stratgen:"
SPEC_STEM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")
CONFIG_KEYS = (
    "specs",
    "output",
    "package",
    "tests",
    "templates",
    "builtin-specs",
    "targets",
    "docs",
    "verification",
)
#: What a project can generate: 'stratlib' (the package of strategies on stratcore, always
#: generated), 'lightning' (plugins for Lightning's Trainer and Fabric, built on it),
#: 'deepspeed' (DeepSpeed accelerators of its devices) and 'docs' (a Markdown page for each
#: device of the specs, in the ``docs`` folder).
TARGETS = ("stratlib", "lightning", "deepspeed", "docs")


@dataclass(frozen=True)
class Config:
    """Where a project keeps its specs and generated files ([tool.stratgen] in pyproject.toml)."""

    root: Path
    specs: str = "specs"
    output: str = "generated"
    package: str = "stratlib"
    tests: str = "generated/tests"
    templates: str | None = None
    builtin_specs: bool = True
    targets: tuple[str, ...] = ("stratlib",)
    docs: str = "docs/devices"
    #: The verification record the docs target shows on each device page (a file of the
    #: project, ``stratgen.targets.docs.verification``); none by default.
    verification: str | None = None

    @property
    def package_dir(self) -> str:
        return f"{self.output}/{self.package}"

    @property
    def owned_dirs(self) -> list[str]:
        """The folders whose every file is generated: the package, the tests, and the device
        pages where the docs target is rendered."""
        docs = [self.docs] if "docs" in self.targets else []
        return [self.package_dir, self.tests, *docs]

    @property
    def manifest(self) -> str:
        return f"{self.output}/{MANIFEST_NAME}"


#: The table a project's pyproject.toml holds stratgen's settings in.
CONFIG_TABLE = "[tool.stratgen]"
#: The most of a pyproject.toml that is read (a FIFO or a device of that name is not read).
MAX_CONFIG_BYTES = 1024 * 1024


def find_root(start: Path) -> Path:
    """The nearest folder at or above ``start`` whose pyproject.toml has [tool.stratgen]
    (``start`` itself when none has)."""
    folder = str(start)
    while True:
        pyproject = os.path.join(folder, "pyproject.toml")
        try:
            data = read_regular(pyproject, MAX_CONFIG_BYTES, follow=True)
        except OSError:  # a FIFO or a device in a folder above: not a project's configuration
            data = None
        if data is not None and CONFIG_TABLE.encode() in data:
            return Path(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            return Path(start)
        folder = parent


def package_name_problem(package: str) -> str | None:
    """What is wrong with ``package`` as the name of a generated package, or None: it must be
    a lower-case Python identifier, not a keyword, and no name generated code imports."""
    if not package.isidentifier() or not package.islower() or keyword.iskeyword(package):
        return (
            f"package name {package!r} must be a lower-case Python identifier that is not a "
            "keyword, such as 'mystrategies'"
        )
    if package in RESERVED_PACKAGE_NAMES:
        return (
            f"package name {package!r} is taken by the standard library or a package generated "
            f"code imports: on the path, the generated {package} would be imported in its place; "
            "choose another name, such as 'mystrategies'"
        )
    return None


def load_config(root: Path, overrides: dict[str, Any] | None = None) -> Config:
    values: dict[str, Any] = {}
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        text = read_regular(pyproject, MAX_CONFIG_BYTES, follow=True) or b""
        if len(text) > MAX_CONFIG_BYTES:
            raise StratgenError(f"{pyproject}: larger than any project's configuration")
        try:
            data = tomllib.loads(text.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise StratgenError(f"{pyproject}: cannot read it: {exc}") from None
        table = data.get("tool", {}).get("stratgen", {})
        if not isinstance(table, dict):
            raise StratgenError(f"{pyproject}: [tool.stratgen] must be a table")
        for key, value in table.items():
            if key not in CONFIG_KEYS:
                raise StratgenError(
                    f"{pyproject}: [tool.stratgen]: unknown key {key!r}{did_you_mean(key, CONFIG_KEYS)}; "
                    f"allowed keys: {', '.join(CONFIG_KEYS)}"
                )
            if key == "targets":
                values["targets"] = _targets(value, f"{pyproject}: [tool.stratgen]: targets")
                continue
            expected = bool if key == "builtin-specs" else str
            if not isinstance(value, expected):
                raise StratgenError(
                    f"{pyproject}: [tool.stratgen]: {key} must be a {expected.__name__}, found {value!r}"
                )
            values[key.replace("-", "_")] = value
    for key, value in (overrides or {}).items():
        if value is not None:
            values[key] = _targets(value, "--target") if key == "targets" else value
    for key in ("specs", "output", "tests", "templates", "docs", "verification"):
        if isinstance(values.get(key), str) and values[key]:
            values[key] = PurePosixPath(values[key].replace("\\", "/")).as_posix()
    config = Config(root=root, **values)
    problem = package_name_problem(config.package)
    if problem is not None:
        raise StratgenError(problem)
    for key in ("output", "tests", "docs"):
        folder = getattr(config, key)
        parts = PurePosixPath(folder).parts
        if not parts or PurePosixPath(folder).is_absolute() or ".." in parts or parts == (".",):
            raise StratgenError(
                f"{key} folder {folder!r} must be a folder inside the project, given relative "
                "to it (stratgen removes files it generated there)"
            )
    if config.templates is not None and not (root / config.templates).is_dir():
        raise StratgenError(f"templates folder {config.templates}/ does not exist")
    return config


def _targets(value: Any, where: str) -> tuple[str, ...]:
    """A list of target names, checked; 'stratlib' is always part of it (the Lightning
    plugins are built on its classes)."""
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise StratgenError(f"{where} must be a list of target names, found {value!r}")
    for name in value:
        if name not in TARGETS:
            raise StratgenError(
                f"{where}: unknown target {name!r}{did_you_mean(name, TARGETS)}; "
                f"targets: {', '.join(TARGETS)}"
            )
    return tuple(t for t in TARGETS if t in value or t == "stratlib")


@dataclass
class Timings:
    """Seconds spent in each step of the pipeline, for `--timings` and the benchmarks."""

    steps: dict[str, float] = field(default_factory=dict)

    def add(self, step: str, started: float) -> None:
        self.steps[step] = self.steps.get(step, 0.0) + time.perf_counter() - started


@dataclass
class Plan:
    files: dict[str, bytes]
    catalog: Catalog
    selection: Selection


class Project:
    def __init__(self, config: Config, formatter: Formatter | None = None) -> None:
        self.config = config
        self.formatter = formatter or Formatter()
        # A project's own templates are not held to black's layout: black formats its files whole.
        if config.templates:
            self.formatter.whole = True
        self.formatter.open(self.cache_name())
        self.timings = Timings()
        self._root: Path | None = None  # the project folder, resolved

    def cache_name(self) -> str:
        """What this project's file of remembered layouts is named (``codegen.formatting``): its
        folder and settings, hashed."""
        config = self.config
        h = hashlib.sha256(str(config.root.resolve()).encode("utf-8", "surrogatepass"))
        for setting in (
            config.specs,
            config.package,
            config.package_dir,
            config.tests,
            config.docs,
        ):
            h.update(b"\0" + setting.encode("utf-8", "surrogatepass"))
        h.update(f"\0{config.builtin_specs}\0{','.join(config.targets)}".encode())
        return h.hexdigest()

    # -- loading ------------------------------------------------------------------------------

    def display(self, path: Path) -> str:
        if self._root is None:
            self._root = self.config.root.resolve()
        try:
            return path.resolve().relative_to(self._root).as_posix()
        except ValueError:
            return str(path)

    def load_file(self, path: Path, builtin: bool, label: str | None = None) -> Source:
        display = label or self.display(path)
        stem = Path(display).stem
        if not SPEC_STEM.fullmatch(stem):
            raise SpecError.single(
                Location(display),
                "",
                f"spec file name {Path(display).name!r} must be letters, digits, '_' and '-' "
                f"before .yaml (its tests are generated as test_<name>.py)",
            )
        from .resolve.catalog import Source
        from .spec.parse import parse_spec_file
        from .spec.yaml_loader import load_yaml

        data = read_spec_bytes(path, display)
        tree = load_yaml(data, display)
        text = data.decode("utf-8-sig", "replace")  # parsed: UTF-8, as the loader reads it
        return Source(
            display, path.stem, parse_spec_file(tree), builtin, str(path.parent), text, tree
        )

    def spec_paths(self) -> list[Path]:
        """The spec files of the specs folder; one that is a symbolic link out of the folder is
        refused (a commit could point one at any file the user can read)."""
        folder = self.config.root / self.config.specs
        if not folder.is_dir():
            raise StratgenError(f"specs folder {self.display(folder)}/ does not exist")
        paths = sorted(p for p in folder.glob("*.y*ml") if p.suffix in (".yaml", ".yml"))
        real = folder.resolve()
        for path in paths:
            if not path.resolve().is_relative_to(real):
                raise SpecError.single(
                    Location(self.display(path)),
                    "",
                    "is a symbolic link out of the specs folder; a spec file is read only "
                    "where it lies in the project",
                )
        return paths

    def builtin_is_local(self) -> bool:
        local = (self.config.root / self.config.specs).resolve()
        return local == builtin_specs_dir().resolve()

    def sources(
        self, extra: list[tuple[Path, str]] | None = None, skip: Path | None = None
    ) -> list[Source]:
        """Every spec of the project (built-in ones too) but ``skip``, plus ``extra`` (path,
        label) files."""
        started = time.perf_counter()
        problems: list[Any] = []
        sources: list[Source] = []
        skipped = skip.resolve() if skip is not None else None
        paths: list[tuple[Path, str | None]] = [
            (p, None) for p in self.spec_paths() if skipped is None or p.resolve() != skipped
        ]
        paths += list(extra or [])
        builtin_local = self.builtin_is_local()
        if self.config.builtin_specs and not builtin_local:
            for path in sorted(builtin_specs_dir().glob("*.yaml")):
                try:
                    # Named apart from the project's own specs/ in messages and headers.
                    builtin_label = f"{BUILTIN_PREFIX}specs/{path.name}"
                    sources.append(self.load_file(path, True, builtin_label))
                except SpecError as exc:  # pragma: no cover - built-in specs are tested
                    problems.extend(exc.problems)
        for path, label in paths:
            try:
                source = self.load_file(path, builtin_local, label)
            except SpecError as exc:
                problems.extend(exc.problems)
                continue
            if label is not None:  # a file about to be copied: hooks stay next to the original
                source = type(source)(
                    source.path,
                    Path(label).stem,
                    source.spec,
                    source.builtin,
                    str(path.parent),
                    source.text,
                    source.tree,
                )
            sources.append(source)
        self.timings.add("load", started)
        if problems:
            raise SpecError(problems)
        return sources

    # -- planning -----------------------------------------------------------------------------

    def plan(self, extra: list[tuple[Path, str]] | None = None, skip: Path | None = None) -> Plan:
        """Every file the specs produce, formatted, and the manifest that lists them."""
        from .codegen.templating import BUILTIN_TEMPLATES, Renderer
        from .resolve.resolver import resolve
        from .resolve.selection import select
        from .targets.rendering import render_targets

        sources = self.sources(extra, skip)
        started = time.perf_counter()
        catalog = resolve(sources)
        selection = select(catalog)
        self.timings.add("resolve", started)

        started = time.perf_counter()
        template_dirs = [BUILTIN_TEMPLATES]
        if self.config.templates:
            template_dirs.insert(0, self.config.root / self.config.templates)
        renderer = Renderer(template_dirs)
        record = self.verification_record(catalog) if "docs" in self.config.targets else None
        rendered = render_targets(
            catalog,
            selection,
            renderer,
            self.config.package,
            self.config.package_dir,
            self.config.tests,
            self.config.docs,
            self.config.targets,
            record,
        )
        self.timings.add("render", started)

        started = time.perf_counter()
        paths = [item.path for item in rendered]
        if len(set(paths)) != len(paths):  # pragma: no cover - a template bug
            raise StratgenError("two templates produce the same file")
        python = [item for item in rendered if item.python]
        formatted = dict(
            zip(
                [item.path for item in python],
                self.formatter.format_all([(item.text, item.path) for item in python]),
                strict=True,
            )
        )
        files = {
            item.path: formatted.get(item.path, item.text).encode("utf-8") for item in rendered
        }
        compile_modules(files)
        files[self.config.manifest] = manifest_bytes(files)
        self.formatter.save()
        self.timings.add("format", started)
        return Plan(files, catalog, selection)

    def verification_record(self, catalog: Catalog) -> Record | None:
        """The project's verification record, checked against its accelerators; None where
        the project names none."""
        if not self.config.verification:
            return None
        from .targets.docs.verification import load_record

        path = self.config.root / self.config.verification
        return load_record(path, self.display(path), self.config.root, catalog.accelerators)

    def tree(self) -> Tree:
        return Tree(self.config.root, self.config.owned_dirs, self.config.manifest)

    def generate(self, plan: Plan) -> WriteReport:
        started = time.perf_counter()
        report = self.tree().write(plan.files)
        self.timings.add("write", started)
        return report

    def compare(self, plan: Plan, with_diff: bool = True) -> Drift:
        started = time.perf_counter()
        drift = self.tree().compare(plan.files, with_diff)
        self.timings.add("compare", started)
        return drift


def compile_modules(files: dict[str, bytes]) -> None:
    """Compile every Python module of a plan before anything is written: a value that reached
    the code without its escaping, or a name that breaks it (a duplicate argument is no error
    to ``ast.parse``), fails here, never at the user's import. Compiling runs nothing."""
    for path, data in files.items():
        if not path.endswith(".py"):
            continue
        try:
            compile(data, path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            where = f"{path}:{exc.lineno}" if isinstance(exc, SyntaxError) else path
            reason = exc.msg if isinstance(exc, SyntaxError) else str(exc)
            raise StratgenError(
                f"{where}: the generated module is not valid Python ({reason}); nothing was "
                "written (a spec value reached it unescaped, or a hooks file is broken)"
            ) from None


def relative_to_cwd(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:  # pragma: no cover - different drive on Windows
        return str(path)


__all__ = ["Config", "Project", "builtin_specs_dir", "find_root", "load_config"]
