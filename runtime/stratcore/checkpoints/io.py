"""Saving and loading checkpoints.

``TorchCheckpointIO`` writes atomically: the checkpoint goes to a temporary file in the same
folder, is flushed to disk, and replaces the target in one rename, so a crash mid-save never
destroys the previous checkpoint. ``AsyncCheckpointIO`` moves the write to a background thread.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import re
import stat
import struct
import tempfile
import threading
import zipfile
from abc import ABC, abstractmethod
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from ..file_modes import new_file_mode
from ..precision.base import apply_to_tensors

PathLike = str | os.PathLike[str]


class CheckpointIO(ABC):
    """Interface of checkpoint plugins."""

    @abstractmethod
    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: PathLike, storage_options: Any = None
    ) -> None:
        """Write ``checkpoint`` to ``path``."""

    @abstractmethod
    def load_checkpoint(self, path: PathLike, map_location: Any = None) -> dict[str, Any]:
        """Read the checkpoint at ``path``."""

    def remove_checkpoint(self, path: PathLike) -> None:
        """Delete the checkpoint file at ``path``; a file that is not there is no error."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def wait(self) -> None:
        """Block until every save started so far is complete (saves are synchronous here)."""
        return None

    def teardown(self) -> None:
        """Finish outstanding work and release resources."""
        return None


class TorchCheckpointIO(CheckpointIO):
    """torch.save / torch.load with atomic replacement of the target file.

    Args:
        weights_only: Load with ``torch.load(weights_only=True)``, which refuses arbitrary
            pickled objects; set to False only for checkpoints you trust.
    """

    def __init__(self, weights_only: bool = True) -> None:
        self.weights_only = weights_only

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: PathLike, storage_options: Any = None
    ) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        target = Path(path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        except OSError as error:
            raise _about(error, target) from None
        os.close(fd)
        try:
            # mkstemp creates the file private (0600); give it the mode a plain open() would.
            with contextlib.suppress(OSError):
                os.chmod(tmp, new_file_mode())
            # Given a path, torch.save writes through its own C++ file stream, with no call
            # into Python per record as a Python file object would need.
            torch.save(checkpoint, tmp)
            _fsync_file(tmp)
            os.replace(tmp, target)
        except BaseException as error:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            if isinstance(error, OSError) or _writer_failed(error):
                raise _about(error, target) from None
            raise
        fsync_folder(target.parent)

    def load_checkpoint(self, path: PathLike, map_location: Any = None) -> dict[str, Any]:
        check_checkpoint_file(path)
        try:
            return torch.load(
                path, map_location=map_location or "cpu", weights_only=self.weights_only
            )
        except MemoryError:
            raise
        except Exception as error:
            if not self.weights_only and not isinstance(error, CORRUPT_ERRORS):
                raise  # a trusted file's own objects failed to load: their error, as it is
            raise CheckpointLoadError(load_error_message(path, error)) from None


class CheckpointSaveError(OSError):
    """Writing a checkpoint failed (a full disk, a folder without write permission, a file
    too large); the message names the checkpoint, not the temporary file it was written to."""


def _writer_failed(error: BaseException) -> bool:
    """Whether ``error`` is torch's archive writer failing to write (not an object that cannot
    be saved)."""
    return isinstance(error, RuntimeError) and any(
        mark in str(error) for mark in ("inline_container", "PytorchStreamWriter", "file write")
    )


def _about(error: BaseException, target: Path) -> CheckpointSaveError:
    """``error`` of a save as an error about the checkpoint ``target``: torch's writer says
    only where in its archive it stopped (``unexpected pos``), an OSError names the temporary
    file."""
    if isinstance(error, OSError):
        reason = error.strerror or str(error)
        return CheckpointSaveError(
            error.errno, f"cannot write the checkpoint: {reason}", str(target)
        )
    reason = " ".join(str(error).split())[:160]
    return CheckpointSaveError(
        errno.EIO,
        f"cannot write the checkpoint (is the disk full, or the file larger than allowed?): {reason}",
        str(target),
    )


class CheckpointLoadError(pickle.UnpicklingError):
    """A checkpoint that cannot be read as data: it is corrupt, not a checkpoint, or holds an
    object that weights-only loading refuses. The message names the file and what is wrong,
    in one line."""


#: What reading a damaged file raises (read as trusted, ``weights_only=False``, any other error
#: comes from the file's own objects): ``zipfile.BadZipFile``, and torch's ``RuntimeError``, of
#: the zip format; ``struct.error`` of a legacy file's header; the unpickler's own errors.
CORRUPT_ERRORS: tuple[type[BaseException], ...] = (
    EOFError,
    pickle.UnpicklingError,
    struct.error,
    zipfile.BadZipFile,
    RuntimeError,
    UnicodeDecodeError,
)


def check_checkpoint_file(path: PathLike) -> None:
    """Fail unless ``path`` is a regular file: a missing one is a ``FileNotFoundError``, a
    folder, a FIFO or a device a ``CheckpointLoadError`` (reading a FIFO would wait forever and
    ``/dev/zero`` would never end)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"checkpoint {os.fspath(path)!r} does not exist") from None
    if stat.S_ISDIR(mode):
        raise CheckpointLoadError(
            f"checkpoint {os.fspath(path)!r} is a folder but not a sharded checkpoint (it has "
            "no meta.pt); give a checkpoint file or a sharded checkpoint's folder"
        )
    if not stat.S_ISREG(mode):
        raise CheckpointLoadError(
            f"checkpoint {os.fspath(path)!r} is not a regular file: it is corrupt or not a "
            "checkpoint"
        )


def load_error_message(path: PathLike, error: BaseException) -> str:
    """One line on why the checkpoint at ``path`` did not load: an object weights-only loading
    refuses (named, and never offered to be allowed: the name comes from the file), or a file
    that is corrupt or not a checkpoint."""
    found = re.search(r"GLOBAL ([\w.]+)", str(error))
    if found:
        return (
            f"checkpoint {os.fspath(path)!r} holds an object of {found.group(1)}, which loading "
            "with weights_only=True refuses (a checkpoint is data: nothing in it may run code); "
            "save state_dict() values instead (stateful objects are saved that way), or, only "
            "for a file you trust, load it with TorchCheckpointIO(weights_only=False)"
        )
    detail = " ".join(str(error).split())[:120] or "no more data"
    return (
        f"checkpoint {os.fspath(path)!r} is corrupt or not a checkpoint "
        f"({type(error).__name__}: {detail})"
    )


def _fsync_file(path: str) -> None:
    """Wait until the file's content is on disk (whoever wrote it, through whatever handle)."""
    fd = os.open(path, os.O_RDWR)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_folder(folder: Path) -> None:
    """Make a rename into ``folder`` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class AsyncCheckpointIO(CheckpointIO):
    """Save in a background thread through another CheckpointIO (torch by default).

    Tensors are copied to the CPU before ``save_checkpoint`` returns, so training can go on
    changing them. An error in a background save is raised by the next call, by ``wait`` or by
    ``teardown``. Loads wait for outstanding saves first, and a strategy's
    ``load_checkpoint`` waits for rank 0's saves before any rank reads.
    """

    def __init__(self, checkpoint_io: CheckpointIO | None = None) -> None:
        self.checkpoint_io = checkpoint_io or TorchCheckpointIO()
        self._executor: ThreadPoolExecutor | None = None
        self._pending: list[Future[None]] = []
        self._lock = threading.Lock()

    def _submit(self, function: Any, *args: Any) -> None:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
            self._pending.append(self._executor.submit(function, *args))

    def wait(self) -> None:
        """Block until every save has finished; re-raise the first error."""
        with self._lock:
            pending, self._pending = self._pending, []
        for future in pending:
            future.result()

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: PathLike, storage_options: Any = None
    ) -> None:
        self._raise_finished_errors()
        snapshot = apply_to_tensors(checkpoint, lambda t: t.detach().to("cpu", copy=True))
        self._submit(self.checkpoint_io.save_checkpoint, snapshot, path, storage_options)

    def load_checkpoint(self, path: PathLike, map_location: Any = None) -> dict[str, Any]:
        self.wait()
        return self.checkpoint_io.load_checkpoint(path, map_location)

    def remove_checkpoint(self, path: PathLike) -> None:
        self.wait()
        self.checkpoint_io.remove_checkpoint(path)

    def teardown(self) -> None:
        try:
            self.wait()
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None

    def _raise_finished_errors(self) -> None:
        with self._lock:
            done = [f for f in self._pending if f.done()]
            self._pending = [f for f in self._pending if not f.done()]
        for future in done:
            future.result()
            self.checkpoint_io.teardown()
