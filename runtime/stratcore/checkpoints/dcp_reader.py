"""Reading ``torch.distributed.checkpoint`` (DCP) folders as data, never as code.

DCP keeps a folder's metadata in ``.metadata``, a pickle that torch's ``FileSystemReader``
reads with ``pickle.load``, and it loads the folder's non-tensor items ("bytes") with
``torch.load(weights_only=False)``: upstream trusts the folder as it trusts the environment.
A strategy's ``load_checkpoint`` promises weights-only reading, so everything here stands in
front of DCP:

- ``MetadataUnpickler`` admits the classes DCP's metadata is made of and nothing else
  (``METADATA_GLOBALS``: those a folder written by this runtime holds, read from real
  checkpoints of every strategy that writes one), and builds only instances of them;
- ``WeightsOnlyReader`` reads ``.metadata`` with it, and refuses storage entries that name a
  file outside the folder (``check_folder`` does so before DCP starts, and
  ``refusals_raised`` raises a refusal that DCP caught on any rank as it is);
- ``WeightsOnlyLoadPlanner`` and ``WeightsOnlyFullLoadPlanner`` load the bytes items with
  ``torch.load(weights_only=True)``.

Anything refused is a ``CheckpointLoadError`` naming the folder. Importing this module imports
``torch.distributed.checkpoint``; ``sharded`` imports it when a folder is read.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import pickle
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import (
    DefaultLoadPlanner,
    _EmptyStateDictLoadPlanner,
)
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import ReadItem

from .io import CheckpointLoadError, PathLike, load_error_message

#: What DCP's ``.metadata`` may name, as (module, name): the metadata's own classes, the
#: standard-library and torch types its fields hold (a checkpoint id is a path, sizes are
#: ``torch.Size``, layouts are pickled through ``torch.serialization._get_layout``, which looks
#: a layout up by its name). Dtypes (``torch.float32``, ...) are admitted by type below.
METADATA_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {
        ("torch.distributed.checkpoint.metadata", "Metadata"),
        ("torch.distributed.checkpoint.metadata", "MetadataIndex"),
        ("torch.distributed.checkpoint.metadata", "StorageMeta"),
        ("torch.distributed.checkpoint.metadata", "TensorProperties"),
        ("torch.distributed.checkpoint.metadata", "TensorStorageMetadata"),
        ("torch.distributed.checkpoint.metadata", "BytesStorageMetadata"),
        ("torch.distributed.checkpoint.metadata", "ChunkStorageMetadata"),
        ("torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING"),
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
        ("torch", "Size"),
        ("torch.serialization", "_get_layout"),
        ("pathlib", "PosixPath"),
        ("pathlib", "PurePosixPath"),
    }
)
#: Of those, the modules whose classes' instances a pickle may fill in (its BUILD instruction).
_BUILDABLE_MODULES = (
    "torch.distributed.checkpoint.metadata",
    "torch.distributed.checkpoint.filesystem",
)

#: Name of DCP's metadata file in a folder (``__<rank>.metadata`` for a rank's own).
METADATA_FILE = ".metadata"


def _admitted(module: str, name: str) -> Any:
    """The object a metadata pickle may name, or None."""
    if (module, name) in METADATA_GLOBALS:
        return getattr(importlib.import_module(module), name)
    if module == "torch":
        value = getattr(torch, name, None)
        if isinstance(value, torch.dtype):
            return value
    return None


#: The standard library's unpickler written in Python (``pickle.Unpickler`` is its C twin).
_PythonUnpickler: Any = pickle._Unpickler


class MetadataUnpickler(_PythonUnpickler):
    """An unpickler for DCP's metadata that admits only ``METADATA_GLOBALS`` (and dtypes),
    fills in only instances of DCP's own classes, and has no persistent ids.

    Built on the standard library's Python unpickler, whose instructions are methods: the
    instruction that fills in an object's state is replaced, so that no pickle can set
    attributes on a class it names (the C unpickler would)."""

    def __init__(self, file: Any, source: PathLike) -> None:
        super().__init__(file)
        self._source = source

    def find_class(self, module: str, name: str) -> Any:
        value = _admitted(module, name)
        if value is None:
            raise CheckpointLoadError(
                f"checkpoint {os.fspath(self._source)!r} holds metadata naming {module}.{name}, "
                "which is not part of torch.distributed.checkpoint's metadata: it is corrupt or "
                "was crafted to run code, and is not read"
            )
        return value

    def persistent_load(self, pid: Any) -> Any:
        raise CheckpointLoadError(
            f"checkpoint {os.fspath(self._source)!r} holds metadata with a persistent id: it "
            "is corrupt or not a checkpoint"
        )

    def load_build(self) -> None:
        instance = self.stack[-2]  # the state to set is on top of it
        kind = type(instance)
        if kind.__module__ not in _BUILDABLE_MODULES or (kind.__module__, kind.__name__) not in (
            METADATA_GLOBALS
        ):
            raise CheckpointLoadError(
                f"checkpoint {os.fspath(self._source)!r} holds metadata that sets the state of "
                f"a {type(instance).__name__}: it is corrupt or was crafted, and is not read"
            )
        super().load_build()

    dispatch = dict(_PythonUnpickler.dispatch)
    dispatch[pickle.BUILD[0]] = load_build


def read_metadata_file(path: Path, source: PathLike) -> Metadata:
    """DCP's metadata at ``path`` (in the folder ``source``), read with
    ``MetadataUnpickler``: a ``CheckpointLoadError`` unless it is a regular file holding DCP's
    metadata, every storage entry of which names a file of the folder itself."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise CheckpointLoadError(
            f"checkpoint {os.fspath(source)!r} has no {path.name}: it is corrupt or not a "
            "sharded checkpoint"
        ) from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise CheckpointLoadError(
                f"checkpoint {os.fspath(source)!r}: {path.name} is not a regular file: it is "
                "corrupt or not a checkpoint"
            )
        data = handle.read()
    try:
        metadata = MetadataUnpickler(io.BytesIO(data), source).load()
    except CheckpointLoadError:
        raise
    except MemoryError:
        raise
    except Exception as error:
        raise CheckpointLoadError(load_error_message(source, error)) from None
    if not isinstance(metadata, Metadata) or not isinstance(metadata.storage_data, dict):
        raise CheckpointLoadError(
            f"checkpoint {os.fspath(source)!r}: {path.name} is not torch.distributed."
            "checkpoint's metadata: it is corrupt or not a checkpoint"
        )
    for info in metadata.storage_data.values():
        relative = getattr(info, "relative_path", None)
        if (
            not isinstance(info, _StorageInfo)
            or not isinstance(relative, str)
            or PurePosixPath(relative).name != relative
            or relative in ("", ".", "..")
            or "\\" in relative
        ):
            raise CheckpointLoadError(
                f"checkpoint {os.fspath(source)!r}: its metadata names the storage file "
                f"{relative!r}, which is not a file of the folder; it is corrupt or crafted"
            )
    return metadata


def check_folder(folder: PathLike) -> None:
    """Read the folder's metadata as ``WeightsOnlyReader`` will, before DCP does: DCP would
    wrap a refusal in its own exception, after falling back to other files."""
    read_metadata_file(Path(folder) / METADATA_FILE, folder)


@contextlib.contextmanager
def refusals_raised(source: PathLike) -> Iterator[None]:
    """Raise a refusal that DCP caught on any rank as the ``CheckpointLoadError`` it is."""
    try:
        yield
    except CheckpointException as error:
        for failure, _ in error.failures.values():
            if isinstance(failure, CheckpointLoadError):
                raise CheckpointLoadError(str(failure)) from None
        raise


class WeightsOnlyReader(FileSystemReader):
    """DCP's ``FileSystemReader`` with the metadata read as data (``read_metadata_file``)."""

    def __init__(self, path: PathLike) -> None:
        super().__init__(path)
        self._folder = Path(path)

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        rank = kwargs.get("rank")
        name = METADATA_FILE if rank is None else f"__{rank}{METADATA_FILE}"
        metadata = read_metadata_file(self._folder / name, self._folder)
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        assert metadata.storage_meta is not None
        metadata.storage_meta.load_id = self.load_id
        return metadata


def load_bytes_weights_only(value: io.BytesIO, source: PathLike) -> Any:
    """A bytes item of the folder ``source``, read with ``torch.load(weights_only=True)``."""
    try:
        return torch.load(value, weights_only=True)
    except MemoryError:
        raise
    except Exception as error:
        raise CheckpointLoadError(load_error_message(source, error)) from None


class _WeightsOnlyBytes:
    """What both planners share: bytes items loaded weights-only, then placed as DCP's default
    planner places them."""

    source: PathLike = ""
    flatten_state_dict: bool
    mappings: Any
    original_state_dict: Any
    state_dict: Any

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        loaded = load_bytes_weights_only(value, self.source)
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)
        else:
            self.state_dict[read_item.dest_index.fqn] = loaded


class WeightsOnlyLoadPlanner(_WeightsOnlyBytes, DefaultLoadPlanner):
    """DCP's default load planner (state dicts filled in place), bytes items weights-only."""

    def __init__(self, source: PathLike) -> None:
        super().__init__()
        self.source = source


class WeightsOnlyFullLoadPlanner(_WeightsOnlyBytes, _EmptyStateDictLoadPlanner):
    """DCP's planner that reads a whole folder into an empty state dict (what consolidation
    uses), bytes items weights-only."""

    def __init__(self, source: PathLike) -> None:
        super().__init__()
        self.source = source
