"""Remember generated files by what they are made from, so that a regeneration after an edit to
one spec describes, renders and formats only the files that edit changes.

A strategy, accelerator, precision-plugin or environment module is a pure function of its
resolved catalog entry and of what every run shares: stratgen's code, the templates, the
runtime's source (the contract and the classes ``stratgen.corefacts`` reads), black's version
and mode, and the project's settings. A generated test module is a pure function of the
context its template is rendered with. Each is remembered under a hash of exactly those (see
``Fingerprints``): the entry or the context is pickled with each spec file standing in as the
hash of its bytes (the parsed-spec cache's key), each part of a file (an entry, an option) as
its place in it, and each catalog entry it refers to (a parent) as that entry's own hash. An
entry's key thus changes with any resolved value of it or of its ancestors, and with nothing
else. Files that read the whole catalog (the registry, the package and family ``__init__``
modules, the backends, the Lightning target) are rendered every time.

What is remembered is the file's final bytes and the formatter's key of the text they were
formatted from (the manifest records it). The entries a run uses are kept together in one file
per project, in the cache folder of the formatter (``STRATGEN_CACHE_DIR``), written atomically
and checked like the other caches (see ``speccache.wrap``): a missing, damaged or foreign file
only costs the time of rendering again. Only ``generate`` uses it: ``stratgen check`` renders
and formats everything itself, and neither reads nor writes it.
"""

from __future__ import annotations

import contextlib
import copyreg
import hashlib
import io
import pickle
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .speccache import code_digest, read_own, unwrap, wrap, write_atomic

#: The layout of the memo file and of its keys; bumped when either changes.
_LAYOUT = b"stratgen-render-memo-v2"


def inputs_digest(template_dirs: Iterable[Path], settings: Iterable[str]) -> str:
    """A hash of what every generated file of a run shares: stratgen's code, the template
    folders in lookup order, the runtime's source, black's version and mode, and ``settings``
    (the package name, output folders and targets)."""
    from .factcache import folder_digest, runtime_digest
    from .fmt import black_mode

    h = hashlib.sha256(_LAYOUT + b"\0" + code_digest().encode() + b"\0" + black_mode().encode())
    h.update(b"\0runtime\0" + runtime_digest().encode())
    for setting in settings:
        h.update(b"\0setting\0" + setting.encode("utf-8", "surrogatepass"))
    for folder in template_dirs:
        h.update(b"\0templates\0" + folder_digest(folder).encode())
    return h.hexdigest()


# --- fingerprints ------------------------------------------------------------------------------


def _source_ref(*parts: object) -> None:  # pragma: no cover - only named in pickles
    """Stands for a spec file in a fingerprint (never called: fingerprints are not loaded)."""


def _part_ref(*path: object) -> None:  # pragma: no cover - only named in pickles
    """Stands for a part of a spec file (an entry, an option of it) in a fingerprint."""


def _entry_ref(kind: str, digest: bytes) -> None:  # pragma: no cover - only named in pickles
    """Stands for a catalog entry in a fingerprint."""


class Fingerprints:
    """Hashes of values for memo keys. ``spec_keys`` maps ``id(source)`` to the source and the
    parsed-spec cache's key of its file, which stands for the parsed file in a fingerprint,
    and so do (key, field, index...) for the parts of it a catalog entry shares: its spec
    entry, the options declared in it, a backend. Anything else is hashed whole: a source not
    in ``spec_keys``, a part not found in its file, an object that merely equals one."""

    def __init__(self, spec_keys: Mapping[int, tuple[Any, str]]) -> None:
        from .catalog import Accelerator, ClusterEnvironment, PrecisionPlugin, Source, Strategy

        self._spec_keys = spec_keys
        self._entries: dict[int, tuple[object, bytes]] = {}
        self._parts: dict[int, tuple[object, tuple[object, ...]]] = {}
        self._shared: set[int] = set()
        table: dict[Any, Callable[[Any], Any]] = dict(copyreg.dispatch_table)
        for source, key in spec_keys.values():
            self._register_parts(source.spec, key, table)
        table[Source] = self._reduce_source
        for kind in (Strategy, Accelerator, PrecisionPlugin, ClusterEnvironment):
            table[kind] = self._reduce_entry
        self._table = table

    def _register_parts(self, spec: object, key: str, table: dict[Any, Any]) -> None:
        """The entries of a parsed spec file, and the parts of each entry, two levels down
        (``strategies[2].options['timeout']``): found by identity, they pickle as their place
        in a file the key stands for."""
        parts: list[tuple[object, tuple[object, ...]]] = []
        for name, value in _fields(spec):
            if isinstance(value, tuple):
                parts += [(item, (key, name, index)) for index, item in enumerate(value)]
            else:
                parts.append((value, (key, name)))
        for entry, place in list(parts):
            for name, value in _fields(entry):
                if isinstance(value, dict):
                    parts += [(item, (*place, name, k)) for k, item in value.items()]
                elif isinstance(value, tuple):
                    parts += [(item, (*place, name, i)) for i, item in enumerate(value)]
                else:
                    parts.append((value, (*place, name)))
        for part, place in parts:
            if not hasattr(part, "__dataclass_fields__"):
                continue
            if id(part) in self._parts and self._parts[id(part)][0] is part:
                self._shared.add(id(part))  # in two places: hashed whole, as its content
            self._parts[id(part)] = (part, place)
            table.setdefault(type(part), self._reduce_part)

    def of(self, value: object) -> bytes:
        """The hash of ``value``; raises if it cannot be pickled."""
        buffer = io.BytesIO()
        pickler = pickle.Pickler(buffer, protocol=_PROTOCOL)
        pickler.dispatch_table = self._table
        # No memo: the bytes do not depend on which equal objects are the same object, so a
        # spec read from the cache fingerprints as one parsed anew. (A cycle raises.)
        pickler.fast = True
        pickler.dump(value)
        return hashlib.sha256(buffer.getvalue()).digest()

    def entry(self, entry: object) -> bytes:
        """The hash of a catalog entry: every attribute, its spec file and ancestors by hash."""
        found = self._entries.get(id(entry))
        if found is not None and found[0] is entry:
            return found[1]
        kind = type(entry)
        digest = self.of((kind.__module__, kind.__qualname__, vars(entry)))
        self._entries[id(entry)] = (entry, digest)
        return digest

    def _reduce_entry(self, entry: object) -> tuple[Any, ...]:
        return _entry_ref, (type(entry).__qualname__, self.entry(entry))

    def _reduce_source(self, source: Any) -> tuple[Any, ...]:
        known = self._spec_keys.get(id(source))
        spec: object = known[1] if known is not None and known[0] is source else source.spec
        return _source_ref, (source.path, source.stem, source.builtin, source.hooks_dir, spec)

    def _reduce_part(self, part: Any) -> Any:
        known = self._parts.get(id(part))
        if known is not None and known[0] is part and id(part) not in self._shared:
            return _part_ref, known[1]
        return part.__reduce_ex__(_PROTOCOL)


_PROTOCOL = pickle.HIGHEST_PROTOCOL


def _fields(value: object) -> list[tuple[str, object]]:
    """The attributes of a dataclass instance but where its parts are in the file (small, and
    many: hashed whole where they are reached); none for anything else."""
    if not hasattr(value, "__dataclass_fields__"):
        return []
    return [(k, v) for k, v in vars(value).items() if k not in ("loc", "locs")]


# --- the memo ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Remembered:
    """A generated file as an earlier run made it."""

    path: str
    data: bytes
    formatted_from: str | None  # the formatter's key of the rendered text; None: not Python
    digest: str  # files.digest(data), as the manifest records it


class RenderMemo:
    """Generated files of one project by key; ``folder=None`` remembers nothing.

    The entries are kept in two files: the project's memo, rewritten when more than an eighth
    of what a run uses is not in it (or it holds that many that a run no longer uses), and
    beside it the few entries a run made since (``<memo>.recent``), so that a run after an edit
    to one spec writes a few kilobytes rather than every file of the project again."""

    def __init__(
        self, folder: Path | None, project: str, inputs: str, fingerprints: Fingerprints
    ) -> None:
        self.file = folder / "render" / project if folder is not None else None
        self.recent = folder / "render" / f"{project}.recent" if folder is not None else None
        self._name = project
        self._inputs = inputs.encode()
        self._fingerprints = fingerprints
        self._main = _load(self.file, project)
        self._recent = _load(self.recent, f"{project}.recent")
        self._stored = {**self._main, **self._recent}
        self._used: dict[str, Remembered] = {}
        self.hits = 0
        self.misses = 0

    def key(self, kind: str, value: object) -> str | None:
        """The key of a file made by ``kind`` (a describe function, a template) from
        ``value``; None when ``value`` cannot be fingerprinted (it is then always made anew)."""
        try:
            digest = self._fingerprints.of((kind, value))
        except Exception:  # an unpicklable or self-referential value: no memo for it
            return None
        return hashlib.sha256(self._inputs + b"\0" + digest).hexdigest()

    def get(self, key: str | None) -> Remembered | None:
        found = self._stored.get(key) if key is not None else None
        if found is None:
            self.misses += 1
            return None
        self.hits += 1
        self._used[key] = found  # type: ignore[index]
        return found

    def put(self, key: str, remembered: Remembered) -> None:
        self._used[key] = remembered

    def save(self) -> None:
        """Keep the entries this run used or made, and only those (give or take an eighth)."""
        if self.file is None or self.recent is None:
            return
        used, main = self._used.keys(), self._main.keys()
        new = used - main
        if not main or len(new) + len(main - used) > len(used) // 8:
            _store(self.file, self._name, self._used)
            if self._recent:
                with contextlib.suppress(OSError):
                    self.recent.unlink()
        elif new != self._recent.keys():
            _store(self.recent, f"{self._name}.recent", {k: self._used[k] for k in new})


def _load(path: Path | None, name: str) -> dict[str, Remembered]:
    data = read_own(path) if path is not None else None
    payload = unwrap(data, name, _LAYOUT) if data is not None else None
    if payload is None:
        return {}
    try:
        table = pickle.loads(payload)
    except Exception:  # a corrupt or incompatible file of any kind is only a miss
        return {}
    if not isinstance(table, dict):
        return {}
    stored = {}
    for key, value in table.items():
        if (
            isinstance(key, str)
            and isinstance(value, tuple)
            and len(value) == 4
            and isinstance(value[0], str)
            and isinstance(value[1], bytes)
            and (value[2] is None or isinstance(value[2], str))
            and isinstance(value[3], str)
        ):
            stored[key] = Remembered(*value)
    return stored


def _store(path: Path, name: str, entries: Mapping[str, Remembered]) -> None:
    table = {k: (v.path, v.data, v.formatted_from, v.digest) for k, v in sorted(entries.items())}
    payload = pickle.dumps(table, protocol=pickle.HIGHEST_PROTOCOL)
    write_atomic(path, wrap(payload, name, _LAYOUT))
