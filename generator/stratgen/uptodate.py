"""Knowing, without rendering anything, that a generated tree is up to date.

A fingerprint hashes everything generation reads: the configuration (targets included), every
file under the spec folders (the project's, and the built-in ones when the project uses them),
every template, stratgen's own source, the runtime's source (the contract, and the classes
``stratgen.corefacts`` reads) and black's version. It is taken before anything else is read.
After a run that found or left the tree in line with the specs, that fingerprint and the
manifest's hash are remembered in the user's cache (never in the project): a spec edited while
the run went on makes the next run's fingerprint differ, never the record wrong. A later run
whose fingerprint matches, and whose generated files are exactly those the manifest records
with the hashes it records, is up to date: nothing needs loading, rendering or formatting.
Anything else takes the full path, so a stale or missing record only costs time.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .files import IGNORED_PARTS, IGNORED_SUFFIXES, digest
from .fmt import black_mode, cache_dir

if TYPE_CHECKING:
    from .project import Project


def _files_under(folder: Path) -> list[tuple[str, str]]:
    """Every file under ``folder`` (tool caches and bytecode left out), in a fixed order: its
    path relative to the folder, and its full path."""
    found = []
    base = str(folder)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_PARTS)
        relative = os.path.relpath(dirpath, base).replace(os.sep, "/")
        prefix = "" if relative == "." else relative + "/"
        found += [
            (prefix + n, os.path.join(dirpath, n))
            for n in sorted(filenames)
            if not n.endswith(IGNORED_SUFFIXES)
        ]
    return found


def fingerprint(project: Project) -> str:
    """A hash of every input of generation for ``project``."""
    from .factcache import runtime_digest
    from .project import resource_dir
    from .speccache import code_digest

    config = project.config
    folders: list[Path] = [config.root / config.specs, resource_dir("templates")]
    if config.templates:
        folders.append(config.root / config.templates)
    if config.builtin_specs:
        folders.append(resource_dir("specs"))
    h = hashlib.sha256()
    settings = [config.specs, config.output, config.package, config.tests, config.templates]
    h.update(json.dumps([*settings, config.builtin_specs, black_mode()]).encode())
    h.update(json.dumps(list(config.targets)).encode())
    h.update(b"\0code\0" + code_digest().encode())  # stratgen's own source
    h.update(b"\0runtime\0" + runtime_digest().encode())
    for folder in folders:
        h.update(b"\0folder\0" + str(folder.resolve()).encode())
        for relative, path in _files_under(folder):
            h.update(b"\0" + relative.encode() + b"\0")
            with open(path, "rb") as handle:
                h.update(handle.read())
    return h.hexdigest()


def _record_path(project: Project) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    key = hashlib.sha256(str(project.config.root.resolve()).encode()).hexdigest()
    return folder / "up-to-date" / key


def _tree_matches_manifest(project: Project) -> tuple[bool, int]:
    """Whether the generated folders hold exactly the manifest's files, unedited."""
    tree = project.tree()
    recorded = tree.recorded()
    if not recorded or any(len(hashes) != 1 for hashes in recorded.values()):
        return False, 0
    present = tree.present() - {project.config.manifest}
    if present != set(recorded):
        return False, 0
    for path, hashes in recorded.items():
        data = tree.read(path)
        if data is None or digest(data) not in hashes:
            return False, 0
    return True, len(recorded) + 1


def up_to_date(project: Project) -> int | None:
    """The number of generated files if the tree is known to be current, else None. Takes the
    fingerprint that ``remember`` records, first."""
    record = _record_path(project)
    if record is None:
        return None
    project.fingerprint = fingerprint(project)
    try:
        remembered = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    manifest = project.tree().read(project.config.manifest)
    if manifest is None or remembered.get("manifest") != digest(manifest):
        return None
    if remembered.get("inputs") != project.fingerprint:
        return None
    matches, count = _tree_matches_manifest(project)
    return count if matches else None


def remember(project: Project) -> None:
    """Record that the tree now matches what the specs produce, from the inputs as they were
    when ``up_to_date`` took their fingerprint (before the run read any of them)."""
    record = _record_path(project)
    manifest = project.tree().read(project.config.manifest)
    if record is None or manifest is None or project.fingerprint is None:
        return
    document = {"inputs": project.fingerprint, "manifest": digest(manifest)}
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        tmp = record.with_name(record.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(document), encoding="utf-8")
        os.replace(tmp, record)
    except OSError:
        pass  # an unwritable cache only costs speed
