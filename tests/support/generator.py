"""Helpers for the generator's tests: run the CLI, build projects, take snapshots of trees, and
the golden trees and malformed corpus the generator's tests compare against
(``tests/generator/fixtures``, ``tests/generator/golden``)."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from stratcore.testing import watch

REPO = Path(__file__).resolve().parents[2]
GENERATOR = REPO / "generator"
FIXTURES = REPO / "tests" / "generator" / "fixtures"
MINIMAL = FIXTURES / "minimal"
MINIMAL_BASE = (MINIMAL / "specs" / "base.yaml").read_text(encoding="utf-8")

if str(GENERATOR) not in sys.path:
    sys.path.insert(0, str(GENERATOR))

from stratgen.cli import main  # noqa: E402

ANSI_ESCAPE = "\x1b["


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_cli(*argv: str | Path, cwd: Path | None = None) -> Result:
    """Run ``stratgen`` in this process with captured streams; any exception propagates."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd) if cwd is not None else contextlib.nullcontext():
        code = main([str(a) for a in argv], out, err)
    return Result(code, out.getvalue(), err.getvalue())


def stratgen_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(GENERATOR), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    env.pop("NO_COLOR", None)
    env.update(extra)
    return env


def run_process(*argv: str | Path, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m stratgen`` in a fresh interpreter."""
    return watch.run(
        [sys.executable, "-m", "stratgen", *[str(a) for a in argv]],
        cwd=cwd,
        env=stratgen_env(**env),
    )


def run_python_in(folder: Path, code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter that imports from ``folder`` first (a generated
    package there), in that folder."""
    return watch.run(
        [sys.executable, "-c", code],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), *sys.path])},
    )


def make_project(
    root: Path,
    specs: dict[str, str | bytes] | None = None,
    *,
    package: str = "minilib",
    base: bool = True,
    builtin: bool = False,
    config: str = "",
) -> Path:
    """A project folder: pyproject.toml with [tool.stratgen], specs/ with the minimal base
    specs (unless ``base`` is false) and ``specs``."""
    root.mkdir(parents=True, exist_ok=True)
    lines = ["[tool.stratgen]", 'specs = "specs"', 'output = "out"', f'package = "{package}"']
    lines += ['tests = "out/tests"', f"builtin-specs = {'true' if builtin else 'false'}"]
    (root / "pyproject.toml").write_text("\n".join(lines) + "\n" + config, encoding="utf-8")
    spec_dir = root / "specs"
    spec_dir.mkdir(exist_ok=True)
    if base:
        (spec_dir / "base.yaml").write_text(MINIMAL_BASE, encoding="utf-8")
    for name, content in (specs or {}).items():
        path = spec_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


def builtin_specs_project(tmp_path: Path) -> Path:
    """A project in ``tmp_path`` whose own specs are a copy of the built-in ones (and no second,
    built-in copy of them), for the stratlib target alone."""
    root = tmp_path / "project"
    shutil.copytree(REPO / "specs", root / "specs")
    (root / "pyproject.toml").write_text(
        "[tool.stratgen]\nbuiltin-specs = false\n", encoding="utf-8"
    )
    return root


def copy_repo_project(destination: Path) -> Path:
    """This repository's own project (pyproject, specs, generated, the verification record the
    device pages show) in ``destination``."""
    destination.mkdir(parents=True, exist_ok=True)
    # The copied specs are the built-in ones: the repository's configuration says so
    # (builtin-specs = false), so that stratgen does not load them twice.
    config = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert "\nbuiltin-specs = false\n" in config
    (destination / "pyproject.toml").write_text(config, encoding="utf-8")
    for folder in ("specs", "generated"):
        shutil.copytree(
            REPO / folder,
            destination / folder,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".stratgen.lock"),
        )
    shutil.copy2(REPO / "verification.yaml", destination / "verification.yaml")
    return destination


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (caches and the lock file aside) with its content."""
    files = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.name != ".stratgen.lock":
            files[path.relative_to(root).as_posix()] = path.read_bytes()
    return files


def stat_snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Inode and modification time of every file under ``root``."""
    return {
        path.relative_to(root).as_posix(): (path.stat().st_ino, path.stat().st_mtime_ns)
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


STRATEGY_SPEC = """\
version: 1
strategies:
  - name: mine
    class_name: MyStrategy
    base: parallel
    cluster: [lightning]
    description: A strategy of the project's own.
    options:
      level: {type: int, default: 1, doc: How hard to try.}
    aliases:
      mine_hard: {level: 3}
"""


# --- golden trees and the malformed corpus ------------------------------------------------------

GOLDEN_FIXTURES = FIXTURES / "golden"
GOLDEN = REPO / "tests" / "generator" / "golden"
BAD = FIXTURES / "bad"
UPDATE_COMMAND = "python tests/generator/update_goldens.py"


def golden_cases() -> list[str]:
    return sorted(p.name for p in GOLDEN_FIXTURES.iterdir() if p.is_dir())


def golden_render(case: str) -> dict[str, bytes]:
    """What stratgen produces for a golden fixture project, in memory.

    Left out: the manifest (hashes of the other files) and, in projects that use stratgen's built-in specs, every
    file not generated from the project's own specs alone (those follow the built-in specs,
    which change on their own; tests/generator/test_golden.py checks them against the catalog).
    """
    from stratgen.project import Project, load_config

    project = Project(load_config(GOLDEN_FIXTURES / case))
    plan = project.plan()
    own = {s.path for s in plan.catalog.sources if not s.builtin}
    uses_builtin = any(s.builtin for s in plan.catalog.sources)
    files = {}
    for path, data in sorted(plan.files.items()):
        if path == project.config.manifest:
            continue
        if uses_builtin and generated_from(data) not in own:
            continue
        files[path] = data
    return files


def generated_from(data: bytes) -> str:
    """The source a generated file's header names ('specs/ddp.yaml'), or '' if it has none."""
    first = data.split(b"\n", 1)[0].decode("utf-8", "replace")
    prefix = "# @generated by stratgen from "
    if not first.startswith(prefix):
        return ""
    return first[len(prefix) :].split(". Do not edit", 1)[0]


def golden_stored(case: str) -> dict[str, bytes]:
    folder = GOLDEN / case
    if not folder.is_dir():
        return {}
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def bad_cases() -> list[str]:
    return sorted(
        p.stem if p.is_file() else p.name for p in BAD.iterdir() if p.suffix != ".expected"
    )


def bad_files(case: str) -> list[str]:
    """The spec files of a malformed case, relative to the corpus folder: the case file, or
    every file of a case folder (cases about several files)."""
    folder = BAD / case
    if folder.is_dir():
        return sorted(p.relative_to(BAD).as_posix() for p in folder.glob("*.yaml"))
    return [f"{case}.yaml"]


def bad_validate(case: str) -> Result:
    """``stratgen validate`` of a malformed case against the minimal project."""
    return run_cli("validate", "--project", MINIMAL, *bad_files(case), cwd=BAD)


# --- reading docstrings back --------------------------------------------------------------------


def indented(text: str, indent: str) -> str:
    """``text`` as the generator lays it out in a docstring: continuation lines indented."""
    first, *rest = text.split("\n")
    return first + "".join("\n" + (indent + line if line else "") for line in rest)


def args_section(doc: str) -> dict[str, str]:
    """The option texts of a generated class docstring's Args section, exactly as written in
    the spec: only the generator's line breaks and indentation are taken out."""
    start = doc.rindex("\n    Args:\n") + len("\n    Args:\n")
    body = doc[start:]
    if body.endswith("\n    "):
        body = body[: -len("\n    ")]
    entries: dict[str, list[str]] = {}
    current = None
    for line in body.split("\n"):
        if line.startswith(" " * 8) and not line.startswith(" " * 9):
            name, _, first = line[8:].partition(":")
            current = name
            # "name: text"; black strips the space after the colon when the text's first
            # line is empty.
            entries[name] = [first[1:] if first.startswith(" ") else first]
        else:
            assert current is not None, f"Args section starts with {line!r}"
            assert line == "" or line.startswith(" " * 12), line
            entries[current].append(line[12:])
    return {name: "\n".join(lines) for name, lines in entries.items()}


def option_text(written: str, original: str) -> str:
    """Undo the wrapping of a one-line option text (its lines were split at single spaces)."""
    return written if "\n" in original else written.replace("\n", " ")
