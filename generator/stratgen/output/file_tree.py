"""Write a planned tree of generated files, or compare it with what is on disk.

Writes are atomic per file (a temporary file renamed over the target) and only touch files
whose content changed, so modification times of unchanged files stay put. A manifest records
every generated file and its hash: files that an earlier run generated and no spec produces
any more are removed, unless they were edited by hand since; files stratgen never generated
are never touched. Concurrent runs are serialised by a lock file.

A run that is killed part way leaves every file either as it was or as it should be. Before
the first write, the manifest is extended with the hashes about to be written, so that the
next run still recognises (and may remove) a file this run created; the final manifest is
written last.

The tree is untrusted input too (a commit may hold anything under ``generated/``): every
path is reached through its folder resolved, which must lie inside the project (``inside``: a
symbolic link that leaves it is refused, never followed), only regular files are read, and at
most ``MAX_FILE_BYTES`` of one (``read_regular``: a FIFO would block, ``/dev/zero`` never end),
and a file is never read or removed through a symbolic link. Files are written with the mode a
plain ``open()`` gives them (``atomic_write``).
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import hashlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from stratcore.file_modes import new_file_mode

#: Folders and files that tools leave among sources and generated files: never read, hashed or
#: removed.
IGNORED_PARTS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
IGNORED_SUFFIXES = (".pyc", ".pyo")
#: The lock file of a run that writes (``Tree``), inside the output folder.
LOCK_NAME = ".stratgen.lock"
MANIFEST_NAME = ".stratgen-manifest.json"
TEMP_MARK = ".stratgen-"
# Temporary files of atomic_write: '.<name>.stratgen-<random>.tmp' next to their target.
_TEMP_FILE = re.compile(r"^\..+\.stratgen-[A-Za-z0-9_]+\.tmp$")
#: The most of a file that is read: generated files are kilobytes; a larger one is only ever
#: compared (and found to differ).
MAX_FILE_BYTES = 16 * 1024 * 1024


class UnsafePath(OSError):
    """A path stratgen will not read, write or remove: one that leaves the project through a
    symbolic link, a symbolic link itself, or something other than a regular file."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        super().__init__(errno.EPERM, reason, os.fspath(path))


def inside(root: str | os.PathLike[str], relative: str, folder: bool = False) -> str:
    """The file ``relative`` (to the project ``root``) as it is reached: its folder resolved
    (symbolic links followed as far as they exist), which must lie inside the resolved root,
    and its own name as it is; with ``folder``, the whole path resolved (a folder to list).
    Raises ``UnsafePath`` for a path that leaves the project."""
    real_root = os.path.realpath(root)
    full = os.path.join(real_root, relative)
    parent, name = (full, "") if folder else os.path.split(full)
    real = os.path.realpath(parent)
    if real != real_root and os.path.commonpath([real, real_root]) != real_root:
        raise UnsafePath(
            relative,
            f"leads out of the project (to {real}) through a symbolic link; stratgen writes, "
            "reads and removes files only inside the project",
        )
    return os.path.join(real, name) if name else real


NOT_REGULAR = "is not a regular file; stratgen reads only regular files"
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


def read_regular(
    path: str | os.PathLike[str], limit: int = MAX_FILE_BYTES, follow: bool = False
) -> bytes | None:
    """The content of the regular file at ``path``, at most ``limit`` + 1 bytes of it (more
    than ``limit`` bytes: a file too large to be what is expected); None where there is none (or
    a folder). Another kind of file (a FIFO, a device) is ``UnsafePath``, and so is a symbolic
    link unless ``follow`` (a file the user points at, such as a project's configuration)."""
    flags = _OPEN_FLAGS & ~getattr(os, "O_NOFOLLOW", 0) if follow else _OPEN_FLAGS
    try:
        fd = os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePath(
                path, "is a symbolic link; stratgen reads only regular files"
            ) from None
        if exc.errno == errno.ENXIO:  # a socket
            raise UnsafePath(path, NOT_REGULAR) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            return None
        if not stat.S_ISREG(mode):
            raise UnsafePath(path, NOT_REGULAR)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(limit + 1 - size, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def files_under(folder: str) -> list[tuple[str, str]]:
    """Every file under ``folder`` (tool caches, bytecode and the lock file left out), in a
    fixed order: its path relative to the folder ('/'-separated), and its full path."""
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_PARTS)
        relative = os.path.relpath(dirpath, folder).replace(os.sep, "/")
        prefix = "" if relative == "." else relative + "/"
        found += [
            (prefix + name, os.path.join(dirpath, name))
            for name in sorted(filenames)
            if not name.endswith(IGNORED_SUFFIXES) and name != LOCK_NAME
        ]
    return found


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_bytes(files: Mapping[str, bytes]) -> bytes:
    """The manifest for a plan: every generated path with the hash of its content."""
    return _manifest_document({path: digest(data) for path, data in files.items()})


def _manifest_document(entries: Mapping[str, str | list[str]]) -> bytes:
    document = {"generator": "stratgen", "files": dict(sorted(entries.items()))}
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()


@dataclass
class Drift:
    changed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    diffs: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.changed or self.missing or self.extra)


@dataclass
class WriteReport:
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # orphans edited by hand, left in place


class Tree:
    """The generated part of a project: the package and tests folders and their manifest."""

    def __init__(self, root: Path, owned_dirs: list[str], manifest: str) -> None:
        self.root = root
        self.owned_dirs = owned_dirs  # folders (relative to root) whose every file is generated
        self.manifest = manifest  # manifest path relative to root

    def local(self, path: str) -> str:
        """Where the file ``path`` (relative to the root) is: see ``inside``."""
        return inside(self.root, path)

    # -- reading ------------------------------------------------------------------------------

    def read(self, path: str, limit: int = MAX_FILE_BYTES) -> bytes | None:
        """The file at ``path`` (``read_regular``), None where there is none."""
        try:
            return read_regular(self.local(path), limit)
        except UnsafePath as exc:
            raise UnsafePath(path, exc.strerror or str(exc)) from None  # as the project names it

    def holds(self, path: str, data: bytes) -> bool:
        """Whether the file at ``path`` holds exactly ``data``, reading no more than one byte
        past it."""
        return self.read(path, len(data)) == data

    def recorded(self) -> dict[str, frozenset[str]]:
        """Paths from the manifest of the previous run, each with the hashes it may have had
        when stratgen wrote it (one, or two after an interrupted run). Entries outside the
        generated folders are ignored, so an edited manifest cannot make stratgen delete
        anything else."""
        data = self.read(self.manifest)
        if data is None:
            return {}
        try:
            files = json.loads(data)["files"]
        except (ValueError, KeyError, TypeError):
            return {}
        if not isinstance(files, dict):
            return {}
        recorded = {}
        for path, value in files.items():
            hashes = value if isinstance(value, list) else [value]
            if self.owns(str(path)) and all(isinstance(h, str) for h in hashes):
                recorded[str(path)] = frozenset(hashes)
        return recorded

    def owns(self, path: str) -> bool:
        """Whether ``path`` (relative to the root) lies inside one of the generated folders."""
        if not _is_safe_relative(path):
            return False
        return any(path.startswith(folder.rstrip("/") + "/") for folder in self.owned_dirs)

    def present(self) -> set[str]:
        """Files currently in the owned folders, relative to the root."""
        return {
            f"{folder}/{relative}"
            for folder in self.owned_dirs
            for relative, _ in files_under(inside(self.root, folder, folder=True))
        }

    # -- comparing ----------------------------------------------------------------------------

    def compare(self, plan: Mapping[str, bytes], with_diff: bool = True) -> Drift:
        drift = Drift()
        for path in sorted(plan):
            current = self.read(path)
            if current is None:
                drift.missing.append(path)
            elif current != plan[path]:
                drift.changed.append(path)
                if with_diff:
                    drift.diffs.append(unified_diff(path, current, plan[path]))
        drift.extra = sorted(self.present() - set(plan))
        return drift

    # -- writing ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold an exclusive lock on the tree for the duration of a write."""
        lock = self.local(f"{Path(self.manifest).parent.as_posix()}/{LOCK_NAME}")
        os.makedirs(os.path.dirname(lock), exist_ok=True)
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(lock, flags, 0o666)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePath(
                    lock, "is a symbolic link; stratgen creates its lock file itself"
                ) from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UnsafePath(lock, "is not a regular file; stratgen creates its lock file itself")
        with os.fdopen(fd, "r+b") as handle:
            try:
                import fcntl
            except ImportError:  # pragma: no cover - not POSIX
                yield
                return
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def write(self, plan: Mapping[str, bytes]) -> WriteReport:
        """Bring the tree in line with ``plan``; the manifest is written last."""
        report = WriteReport()
        with self.locked():
            self._remove_stale_temporaries()
            previous = self.recorded()
            pending = {
                path: data
                for path, data in sorted(plan.items())
                if path != self.manifest and not self.holds(path, data)
            }
            report.unchanged = sorted(set(plan) - set(pending) - {self.manifest})
            if pending:
                # Record what is about to be written first: if this run dies part way, the
                # next one still knows every file it may find as generated.
                journal: dict[str, list[str]] = {p: sorted(h) for p, h in previous.items()}
                for path, data in pending.items():
                    journal[path] = sorted(set(journal.get(path, [])) | {digest(data)})
                atomic_write(Path(self.local(self.manifest)), _manifest_document(journal))
            for path, data in pending.items():
                atomic_write(Path(self.local(path)), data)
                report.written.append(path)
            for path in sorted(set(previous) - set(plan)):
                current = self.read(path)
                if current is None:
                    continue
                if digest(current) not in previous[path]:
                    report.kept.append(path)
                    continue
                local = self.local(path)
                os.unlink(local)
                report.removed.append(path)
                _remove_empty_parents(Path(local), Path(os.path.realpath(self.root)))
            if self.manifest in plan and self.read(self.manifest) != plan[self.manifest]:
                atomic_write(Path(self.local(self.manifest)), plan[self.manifest])
                report.written.append(self.manifest)
        return report

    def _remove_stale_temporaries(self) -> None:
        """Temporary files left by a run that was killed (only runs holding the lock write)."""
        for folder in {*self.owned_dirs, str(Path(self.manifest).parent)}:
            base = Path(inside(self.root, folder, folder=True))
            if not base.is_dir():
                continue
            for dirpath, dirnames, filenames in os.walk(base):
                dirnames[:] = [d for d in dirnames if d not in IGNORED_PARTS]
                for name in filenames:
                    if _TEMP_FILE.match(name):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(os.path.join(dirpath, name))


def atomic_write(target: Path, data: bytes, durable: bool = False) -> None:
    """Write ``data`` so that readers see either the old file or the whole new one.

    The rename alone makes the write atomic for other processes and against a killed run.
    ``durable`` also flushes the data to disk before the rename, so that the new content
    survives a power loss: worth its cost for files a user wrote (a copied spec), not for
    generated files that `stratgen generate` can always write again.
    """
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(
            dir=target.parent, prefix=f".{target.name}{TEMP_MARK}", suffix=".tmp"
        )
    except OSError as exc:
        raise _about(exc, target) from None
    try:
        # mkstemp creates the file private (0600); give it the mode a plain open() would.
        os.fchmod(fd, new_file_mode())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _about(exc, target) from None
        raise


def _about(exc: OSError, target: Path) -> OSError:
    """``exc`` about the file being written, not its temporary file (a full disk, a folder
    without write permission): the same kind of error, naming ``target``."""
    if isinstance(exc, UnsafePath):
        return exc
    return OSError(exc.errno, exc.strerror or str(exc), os.fspath(target))


def _remove_empty_parents(path: Path, stop: Path) -> None:
    parent = path.parent
    while parent != stop and parent.is_dir():
        try:
            parent.rmdir()
        except OSError:
            return
        parent = parent.parent


def _is_safe_relative(path: str) -> bool:
    if os.sep == "/" and os.altsep is None:  # POSIX: what Path(path).parts gives, but faster
        return not path.startswith("/") and ".." not in path.split("/")
    p = Path(path)
    return not p.is_absolute() and ".." not in p.parts


def unified_diff(path: str, old: bytes, new: bytes) -> str:
    old_lines = old.decode("utf-8", "replace").splitlines(keepends=True)
    new_lines = new.decode("utf-8", "replace").splitlines(keepends=True)
    return "".join(difflib.unified_diff(old_lines, new_lines, f"a/{path}", f"b/{path}", n=3))
