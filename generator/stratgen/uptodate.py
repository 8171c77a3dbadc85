"""Knowing, without rendering anything, that a generated tree is up to date.

A fingerprint hashes everything generation reads: the settings (targets included), every file
under the spec folders (the project's, and the built-in ones when the project uses them), every
template, the project's pyproject.toml, stratgen's own source, the runtime's source (the
contract, and the classes ``stratgen.corefacts`` reads) and the environment (the interpreter,
where stratgen and stratcore are installed, the installed PyYAML and black's version). It is
taken before anything else is read. After a run that found or left the tree in line with the
specs, the fingerprinted inputs, the fingerprint and the manifest's hash are remembered in the
user's cache (never in the project): a spec edited while the run went on makes the next run's
fingerprint differ, never the record wrong. A later run whose fingerprint matches, and whose
generated files are exactly those the manifest records with the hashes it records, is up to
date: nothing needs loading, rendering or formatting. Anything else takes the full path, so a
stale or missing record only costs time.

The record names every folder and file it hashed, so it can be checked from itself:
``stratgen check`` and ``stratgen generate`` without options ask ``answer`` before importing
the rest of stratgen (``python -m stratgen``), and only a record written by a run without
options (the settings of pyproject.toml alone, one of the hashed files) can answer them. For
that, this module imports no more than ``os``, ``sys``, ``hashlib`` and ``marshal`` (the
record's format: ``json`` and ``typing`` would take a third of the answer's time), and the
record keeps the manifest's list of files, so that the manifest is hashed, not parsed.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys

from .paths import cache_folder, files_under, find_root

TYPE_CHECKING = False  # typing's own flag, without importing typing
if TYPE_CHECKING:
    from typing import Any

    from .project import Project

#: The record's layout: a record of another layout is never read.
LAYOUT = 3
#: The commands that may be answered from the record, with the options they may have.
QUICK_COMMANDS = {
    "check": frozenset({"--quiet", "-q", "--no-color"}),
    "generate": frozenset({"--no-color"}),
}


def matching(count: int) -> str:
    """What ``stratgen check`` says of a tree of ``count`` files that matches its specs."""
    return f"{count} generated files match the specs."


def unchanged(count: int) -> str:
    """What ``stratgen generate`` says of a tree of ``count`` files (the manifest among them)
    that matches its specs already."""
    return f"0 written, {count - 1} unchanged, 0 removed."


def environment() -> dict[str, str]:
    """What generation depends on besides the project's files, found without importing it:
    the interpreter, the folders of stratgen and stratcore (their source is hashed), the
    installed PyYAML (where, how large, when changed) and black's version."""
    import importlib.util

    from .paths import black_version  # looked up here, so that a patched one is seen

    runtime = importlib.util.find_spec("stratcore")
    yaml = importlib.util.find_spec("yaml")
    if yaml is not None and yaml.origin:
        info = os.stat(yaml.origin)
        pyyaml = f"{yaml.origin}|{info.st_size}|{info.st_mtime_ns}"
    else:
        pyyaml = "missing"
    return {
        "python": sys.version,
        "stratgen": os.path.dirname(os.path.abspath(__file__)),
        "stratcore": next(iter(runtime.submodule_search_locations or [""])) if runtime else "",
        "pyyaml": pyyaml,
        "black": black_version(),
    }


def inputs(project: Project) -> dict[str, Any]:
    """Everything generation of ``project`` reads, as the record names it: its settings, the
    folders and files whose bytes are hashed, the environment."""
    from .fmt import black_mode
    from .project import resource_dir

    config = project.config
    folders = [config.root / config.specs, resource_dir("templates")]
    if config.templates:
        folders.append(config.root / config.templates)
    if config.builtin_specs:
        folders.append(resource_dir("specs"))
    settings = [
        config.specs,
        config.output,
        config.package,
        config.tests,
        config.templates,
        config.docs,
    ]
    return {
        "settings": [*settings, config.builtin_specs, list(config.targets), black_mode()],
        "folders": [str(folder.resolve()) for folder in folders],
        "files": [str((config.root / "pyproject.toml").resolve())],
        "environment": environment(),
        "tree": {"owned": config.owned_dirs, "manifest": config.manifest},
    }


def fingerprint(recorded: dict[str, Any]) -> str:
    """A hash of the ``inputs`` named in ``recorded``: the names, then the bytes of every file
    under the folders (stratgen's and stratcore's among them) and of the files."""
    # Settings, folders and environment as built by ``inputs``, in its order (kept by the record).
    h = hashlib.sha256(repr(recorded).encode("utf-8", "surrogatepass"))
    environ = recorded["environment"]
    for folder in [*recorded["folders"], environ["stratgen"], environ["stratcore"]]:
        h.update(b"\0folder\0" + folder.encode("utf-8", "surrogatepass"))
        for relative, path in files_under(folder):
            h.update(b"\0" + relative.encode("utf-8", "surrogatepass") + b"\0")
            with open(path, "rb") as handle:
                h.update(hashlib.sha256(handle.read()).digest())
    for path in recorded["files"]:
        h.update(b"\0file\0" + path.encode("utf-8", "surrogatepass") + b"\0")
        try:
            with open(path, "rb") as handle:
                h.update(hashlib.sha256(handle.read()).digest())
        except FileNotFoundError:
            h.update(b"missing")
    return h.hexdigest()


def _record_path(root: str) -> str | None:
    folder = cache_folder()
    if folder is None:
        return None
    key = hashlib.sha256(root.encode("utf-8", "surrogatepass")).hexdigest()
    return os.path.join(folder, "up-to-date", key)


def _load(root: str) -> dict[str, Any] | None:
    record = _record_path(root)
    if record is None:
        return None
    try:
        with open(record, "rb") as handle:
            document = marshal.load(handle)
    except (OSError, ValueError, EOFError, TypeError):
        return None
    return document if isinstance(document, dict) and document.get("layout") == LAYOUT else None


def _digest(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def _tree_matches(root: str, document: dict[str, Any]) -> int | None:
    """The number of generated files (the manifest included) when the manifest is the one
    recorded and the generated folders hold exactly the files it lists, unedited; else None."""
    try:
        tree, files = document["inputs"]["tree"], document["files"]
        if _digest(os.path.join(root, tree["manifest"])) != document["manifest"]:
            return None
        present = {
            f"{folder}/{relative}"
            for folder in tree["owned"]
            for relative, _ in files_under(os.path.join(root, folder))
        }
        if present - {tree["manifest"]} != set(files):
            return None
        for path, recorded in files.items():
            if _digest(os.path.join(root, path)) != recorded:
                return None
    except (KeyError, TypeError, AttributeError):  # a damaged record
        return None
    return len(files) + 1


def up_to_date(project: Project, plain: bool) -> int | None:
    """The number of generated files if the tree is known to be current, else None. Takes the
    fingerprint that ``remember`` records, first. A plain run (see ``remember``) that finds the
    record of a run with options marks it plain."""
    project.inputs = inputs(project)
    project.fingerprint = fingerprint(project.inputs)
    root = str(project.config.root.resolve())
    document = _load(root)
    if document is None or document.get("fingerprint") != project.fingerprint:
        return None
    if document.get("inputs") != project.inputs:
        return None
    count = _tree_matches(root, document)
    if count is not None and plain and document.get("plain") is not True:
        remember(project, plain)
    return count


def remember(project: Project, plain: bool) -> None:
    """Record that the tree now matches what the specs produce, from the inputs as they were
    when ``up_to_date`` took their fingerprint (before the run read any of them). ``plain``: the
    run had no options that change the settings, so ``answer`` may use the record."""
    if project.inputs is None or project.fingerprint is None:
        return
    import json

    root = str(project.config.root.resolve())
    record = _record_path(root)
    try:
        with open(os.path.join(root, project.config.manifest), "rb") as handle:
            data = handle.read()
        listed = json.loads(data)["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    # One hash a file: two (an interrupted run's) leave it to the next run to sort out.
    files = {path: hashes for path, hashes in listed.items() if isinstance(hashes, str)}
    if record is None or len(files) != len(listed):
        return
    document = {
        "layout": LAYOUT,
        "inputs": project.inputs,
        "fingerprint": project.fingerprint,
        "manifest": hashlib.sha256(data).hexdigest(),
        "files": files,
        "plain": plain,
    }
    try:
        os.makedirs(os.path.dirname(record), exist_ok=True)
        temporary = f"{record}.{os.getpid()}.tmp"
        with open(temporary, "wb") as handle:
            marshal.dump(document, handle)
        os.replace(temporary, record)
    except OSError:
        pass  # an unwritable cache only costs speed


def answer(argv: list[str]) -> int | None:
    """Answer ``stratgen ARGV`` from the record of the project around the working folder: 0,
    having said what the command says, when it is one of ``QUICK_COMMANDS`` and the record
    shows the tree current; else None, and the command runs in full."""
    if not argv or not set(argv[1:]) <= QUICK_COMMANDS.get(argv[0], frozenset({""})):
        return None
    root = os.path.realpath(find_root(os.getcwd()))
    document = _load(root)
    if document is None or document.get("plain") is not True:
        return None
    recorded: Any = document.get("inputs")
    try:
        if recorded["environment"] != environment() or fingerprint(recorded) != document.get(
            "fingerprint"
        ):
            return None
        count = _tree_matches(root, document)
    except (OSError, KeyError, TypeError, ValueError, AttributeError):
        return None  # a damaged record, or a folder gone: the full path tells
    if count is None:
        return None
    print(matching(count) if argv[0] == "check" else unchanged(count))
    return 0
