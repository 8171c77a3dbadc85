"""DeepSpeed's checkpoint files read as data, never as code.

DeepSpeed's checkpoint engine and its ``zero_to_fp32`` read the files of a sharded DeepSpeed
checkpoint with ``torch.load(weights_only=False)``. A strategy's ``load_checkpoint`` promises
weights-only reading, so every file DeepSpeed reads of a folder goes through
``torch.load(weights_only=True)`` first, with DeepSpeed's own plain-data classes admitted
(``CHECKPOINT_GLOBALS``: those its files hold, read from real checkpoints of ZeRO stages 1 to
3): loads through the engine are weights-only (``weights_only_engine_loads``), and before
``zero_to_fp32`` reads a folder every file of it is checked (``check_folder``). Anything
refused is a ``CheckpointLoadError`` naming the file.
"""

from __future__ import annotations

import contextlib
import importlib
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from stratcore.checkpoints.io import (
    CheckpointLoadError,
    PathLike,
    check_checkpoint_file,
    load_error_message,
)

#: The classes of DeepSpeed's checkpoint files besides torch's own, as (module, name): the
#: loss scaler's state (filled in, never constructed), the ZeRO stage (an int enum) and the
#: addresses of a partition's fragments (a dataclass of two ints).
CHECKPOINT_GLOBALS = (
    ("deepspeed.runtime.fp16.loss_scaler", "LossScaler"),
    ("deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler"),
    ("deepspeed.runtime.zero.config", "ZeroStageEnum"),
    ("deepspeed.utils.tensor_fragment", "fragment_address"),
)


def _admitted() -> list[Any]:
    """The classes of ``CHECKPOINT_GLOBALS`` this DeepSpeed has."""
    found = []
    for module, name in CHECKPOINT_GLOBALS:
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue  # another DeepSpeed release: its files cannot hold that class either
    return found


def load_weights_only(path: PathLike, map_location: Any = None, mmap: bool = False) -> Any:
    """One of DeepSpeed's checkpoint files, read with ``torch.load(weights_only=True)`` and
    DeepSpeed's plain-data classes admitted; ``mmap`` maps the tensors' data instead of
    reading it (enough to check the file)."""
    check_checkpoint_file(path)
    try:
        with torch.serialization.safe_globals(_admitted()):
            return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except MemoryError:
        raise
    except Exception as error:
        raise CheckpointLoadError(load_error_message(path, error)) from None


@contextlib.contextmanager
def weights_only_engine_loads(engine: Any) -> Iterator[None]:
    """While it lasts, ``engine`` reads its checkpoint files with ``load_weights_only``."""
    checkpoint_engine = engine.checkpoint_engine
    checkpoint_engine.load = lambda path, map_location=None: load_weights_only(path, map_location)
    try:
        yield
    finally:
        del checkpoint_engine.load  # the instance attribute: the class's method again


def check_folder(folder: PathLike) -> None:
    """Read every checkpoint file under ``folder`` weights-only (their tensors mapped, not
    read), so that a reader that loads them as trusted (``zero_to_fp32``) loads only data."""
    for path in sorted(Path(folder).rglob("*.pt")):
        # A file of torch's zip format is mapped; one of the legacy format, read.
        load_weights_only(path, map_location="cpu", mmap=zipfile.is_zipfile(path))
