"""Sharded checkpoints: every process writes its own part, nothing is gathered on one rank.

A sharded checkpoint is a folder. Module and optimizer states go through
``torch.distributed.checkpoint`` (DCP): each rank writes the shards it holds, and a later load
reads whichever pieces its own shards need, so a checkpoint written by 2 processes resumes on
1 or 4. Everything else in the checkpoint (the state dicts of schedulers, scalers and other
stateful objects, plain values) is small and goes into ``meta.pt``, written by rank 0, which
also names the entries DCP holds.

Saves are atomic: the folder is written under a temporary name beside the target and takes
its place in one step once every rank's part and the metadata are on disk, so a process
killed during a save leaves the previous checkpoint whole. With ``asynchronous=True`` the
state is copied to host memory and the caller goes on; the writing, and the swap into place,
happen in the background (on a process group of their own, so that they never interleave
with the training's collectives).

``consolidate`` (also ``python -m stratcore.checkpoints.consolidate SRC DST``) converts a sharded
checkpoint into one file that ``torch.load`` and every strategy's ``load_checkpoint`` read.

A folder is read as data: its metadata and bytes items through ``dcp_reader``, ``meta.pt``
weights-only, and only by strategies that write sharded checkpoints
(``CheckpointingBase.reads_sharded_checkpoints``).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from .io import CheckpointLoadError, PathLike, TorchCheckpointIO, fsync_folder

#: Name of the file holding the entries DCP does not store, and the format's marker in it.
META_FILE = "meta.pt"
FORMAT = "stratlib-sharded-checkpoint"
VERSION = 1


def is_sharded_checkpoint(path: PathLike) -> bool:
    """Whether ``path`` is a folder written by ``save_sharded``."""
    return (Path(path) / META_FILE).is_file()


# --- saving ------------------------------------------------------------------------------------


class ShardedSaver:
    """Writes sharded checkpoints for one strategy and tracks its asynchronous saves.

    Args:
        rank: This process's global rank (rank 0 writes the metadata and swaps the folder).
        broadcast: The strategy's ``broadcast`` (agrees on the temporary folder's name).
        barrier: The strategy's ``barrier``.
    """

    def __init__(
        self,
        rank: Callable[[], int],
        broadcast: Callable[[Any, int], Any],
        barrier: Callable[[str], None],
    ) -> None:
        self._rank = rank
        self._broadcast = broadcast
        self._barrier = barrier
        self._pending: list[Future[Any]] = []
        self._group: Any = None
        self._token: str | None = None
        self._saves = 0
        self._stager: Any = None

    def save(
        self,
        tensors: dict[str, Any],
        meta: dict[str, Any],
        path: PathLike,
        asynchronous: bool = False,
    ) -> None:
        """Write ``tensors`` (module and optimizer state dicts, sharded) with DCP and ``meta``
        (anything else) into the folder ``path``. Every rank must call this."""
        import torch.distributed.checkpoint as dcp

        if not asynchronous:
            self.save_with(
                lambda folder: dcp.save(tensors, storage_writer=dcp.FileSystemWriter(folder)),
                _record(sorted(tensors), meta),
                path,
            )
            return
        # One save at a time: a second one would interleave its collectives with the first's
        # on the same group, and overwrite the host copies the first is still writing out.
        self.wait()
        partial = self._start(path)
        future: Any = dcp.async_save(
            tensors,
            storage_writer=dcp.FileSystemWriter(partial),
            process_group=self._io_group(),
            async_stager=self._staging(),
        )
        record = _record(sorted(tensors), meta)
        rank = self._rank()
        # DCP's save completes on the coordinator (rank 0) only after every rank's part is
        # written, so rank 0 can put the folder in place as soon as its own save is done.
        done: Future[Any] = Future()

        def complete() -> None:
            try:
                future.result()
                if rank == 0:
                    _finish(record, partial, Path(path))
            except BaseException as error:  # reported by wait() or the next save
                done.set_exception(error)
            else:
                done.set_result(None)

        threading.Thread(target=complete, name="sharded-checkpoint", daemon=True).start()
        self._pending.append(done)

    def save_with(
        self, write: Callable[[Path], None], record: dict[str, Any], path: PathLike
    ) -> None:
        """Let ``write`` fill a temporary folder on every rank, then put it in place as
        ``path`` with ``record`` as its metadata. Every rank must call this."""
        self.raise_finished_errors()
        partial = self._start(path)
        write(partial)
        self._barrier("sharded checkpoint written")
        if self._rank() == 0:
            _finish(record, partial, Path(path))
        self._barrier("sharded checkpoint in place")

    def _start(self, path: PathLike) -> Path:
        """Create the temporary folder a save writes into. Its name is the same on every rank
        without a collective per save: a token agreed on once, and the number of the save."""
        if self._token is None:
            self._token = self._broadcast(uuid.uuid4().hex[:12], 0)
        self._saves += 1
        target = Path(path)
        partial = target.parent / f".{target.name}.partial-{self._token}-{self._saves}"
        partial.mkdir(parents=True, exist_ok=True)
        return partial

    def _staging(self) -> Any:
        """One stager for every asynchronous save: it keeps the host-memory copies of the
        tensors between saves, so that a save after the first only copies (allocating and
        first touching that memory costs several times more than the copy)."""
        if self._stager is None:
            from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

            self._stager = DefaultStager(
                StagingOptions(
                    use_pinned_memory=False,
                    use_shared_memory=False,
                    use_async_staging=False,
                    use_non_blocking_copy=False,
                )
            )
        return self._stager

    def _io_group(self) -> Any:
        import torch.distributed as dist

        if self._group is None:
            self._group = dist.new_group(backend="gloo")
        return self._group

    def raise_finished_errors(self) -> None:
        """Raise the error of a background save that has finished with one."""
        done = [future for future in self._pending if future.done()]
        self._pending = [future for future in self._pending if not future.done()]
        for future in done:
            future.result()

    def wait(self) -> None:
        """Block until every asynchronous save of this process is complete; re-raise the
        first error."""
        pending, self._pending = self._pending, []
        for future in pending:
            future.result()

    def close(self) -> None:
        """Wait for every save, then free the host-memory copies."""
        try:
            self.wait()
        finally:
            stager, self._stager = self._stager, None
            if stager is not None:
                stager.close()

    @property
    def busy(self) -> bool:
        """Whether a background save is still running."""
        return any(not future.done() for future in self._pending)


def _record(sharded: list[str], entries: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "sharded": sharded, "entries": entries, **extra}


def engine_record(
    engine: str, engine_entries: list[str], entries: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    """Metadata of a folder whose ``engine_entries`` an engine wrote in its own format:
    ``engine`` names its wrapper (``stratcore.contract.WRAPPERS``), whose strategy base reads
    the folder back (``consolidated_checkpoint``)."""
    return _record(engine_entries, entries, engine=engine, **extra)


def _finish(record: dict[str, Any], partial: Path, target: Path) -> None:
    """Rank 0, once every rank's part is written: the metadata, then the folder in place."""
    TorchCheckpointIO().save_checkpoint(record, partial / META_FILE)
    _replace_folder(partial, target)


#: renameat2's flag that swaps two paths atomically (Linux 3.15+).
_RENAME_EXCHANGE = 2


def _exchange(first: Path, second: Path) -> bool:
    """Swap two existing paths in one step; False where the system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_cwd = -100
    result = renameat2(at_cwd, os.fsencode(first), at_cwd, os.fsencode(second), _RENAME_EXCHANGE)
    return bool(result == 0)


def _replace_folder(new: Path, target: Path) -> None:
    """Put the folder ``new`` at ``target``, replacing what is there. At every moment either
    the old or the new checkpoint is at ``target`` (where the system can swap atomically; else
    the old one is moved aside first and found there by ``resolve_checkpoint``)."""
    if not target.exists():
        os.rename(new, target)
    elif _exchange(new, target):
        shutil.rmtree(new)
    else:
        aside = target.parent / f".{target.name}.previous"
        shutil.rmtree(aside, ignore_errors=True)
        os.rename(target, aside)
        os.rename(new, target)
        shutil.rmtree(aside)
    fsync_folder(target.parent)


def resolve_checkpoint(path: PathLike) -> Path:
    """``path``, or the previous checkpoint a replacement interrupted at the wrong moment on a
    system without atomic swaps left beside it."""
    target = Path(path)
    aside = target.parent / f".{target.name}.previous"
    if not target.exists() and is_sharded_checkpoint(aside):
        return aside
    return target


# --- loading -----------------------------------------------------------------------------------


def read_meta(path: PathLike) -> dict[str, Any]:
    """The metadata record of the sharded checkpoint at ``path`` (read weights-only); a
    ``CheckpointLoadError`` where it is not one this package wrote."""
    record = TorchCheckpointIO().load_checkpoint(Path(path) / META_FILE)
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise CheckpointLoadError(
            f"{os.fspath(path)} is not a sharded checkpoint of this package: its {META_FILE} "
            "is corrupt or not a checkpoint's"
        )
    version = record.get("version", VERSION)
    numbered = isinstance(version, int) and not isinstance(version, bool)
    if numbered and version > VERSION:
        raise CheckpointLoadError(
            f"the sharded checkpoint {os.fspath(path)} has format version {version!r}; "
            f"this package reads up to {VERSION}: update it"
        )
    if not numbered or version < 1:
        raise CheckpointLoadError(
            f"the sharded checkpoint {os.fspath(path)} has format version {version!r}, which "
            f"no package wrote: its {META_FILE} is corrupt or not a checkpoint's"
        )
    sharded, entries = record.get("sharded"), record.get("entries")
    if (
        not isinstance(sharded, list)
        or not all(isinstance(key, str) for key in sharded)
        or not isinstance(entries, dict)
    ):
        raise CheckpointLoadError(
            f"the sharded checkpoint {os.fspath(path)} has a {META_FILE} that is corrupt or not "
            "a checkpoint's (no list of sharded entries and mapping of the others)"
        )
    return record


def load_sharded(path: PathLike, tensors: dict[str, Any]) -> None:
    """Fill ``tensors`` (state dicts shaped like those saved, sharded as this process holds
    them) in place from the checkpoint at ``path``, read as data (``dcp_reader``). Every rank
    must call this."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    from .dcp_reader import (
        WeightsOnlyLoadPlanner,
        WeightsOnlyReader,
        check_folder,
        refusals_raised,
    )

    check_folder(path)
    with refusals_raised(path):
        dcp.load(
            tensors,
            storage_reader=WeightsOnlyReader(Path(path)),
            planner=WeightsOnlyLoadPlanner(path),
            no_dist=not (dist.is_available() and dist.is_initialized()),
        )


def consolidated(source: PathLike) -> dict[str, Any]:
    """The sharded checkpoint ``source`` as a full checkpoint: full tensors, every entry at the
    top level. Reads every shard into this process's memory, as data (``dcp_reader``)."""
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    from .dcp_reader import (
        WeightsOnlyFullLoadPlanner,
        WeightsOnlyReader,
        check_folder,
        refusals_raised,
    )

    source = resolve_checkpoint(source)
    record = read_meta(source)
    if record.get("engine") is not None:
        return _engine_strategy(source, record["engine"]).consolidated_checkpoint(source, record)
    tensors: dict[str, Any] = {}
    check_folder(source)
    with refusals_raised(source):
        _load_state_dict(
            tensors,
            storage_reader=WeightsOnlyReader(source),
            planner=WeightsOnlyFullLoadPlanner(source),
            no_dist=True,
        )
    checkpoint = dict(record["entries"])
    for key in record["sharded"]:
        if key not in tensors:
            raise CheckpointLoadError(
                f"the sharded checkpoint {os.fspath(source)} names the entry {key!r}, which its "
                "shards do not hold: it is corrupt"
            )
        checkpoint[key] = tensors[key]
    return checkpoint


def _engine_strategy(source: Path, engine: Any) -> Any:
    """The strategy base of the wrapper that wrote a checkpoint in its engine's own format. The
    name comes from the checkpoint: it only selects an entry of the contract's fixed table."""
    from importlib import import_module

    from ..contract import WRAPPERS

    entry = WRAPPERS.get(engine) if isinstance(engine, str) else None
    if entry is None or entry.base is None:
        raise CheckpointLoadError(
            f"the sharded checkpoint {os.fspath(source)} was written by an engine this package "
            f"does not know ({engine!r})"
        )
    module, name = entry.base
    return getattr(import_module(module), name)


def consolidate(source: PathLike, destination: PathLike) -> None:
    """Write the sharded checkpoint ``source`` as one file (see ``consolidated``)."""
    TorchCheckpointIO().save_checkpoint(consolidated(source), destination)
