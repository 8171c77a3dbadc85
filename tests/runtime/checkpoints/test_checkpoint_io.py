"""CheckpointIO: atomic torch saves that survive a SIGKILL, and the asynchronous wrapper.

Saving from rank 0 and loading on every rank is exercised with real ranks by the generated
API tests, ``test_newcomer.py`` and ``test_strategy_options.py`` (asynchronous saves).
"""

from __future__ import annotations

import os
import pickle
import signal
import stat
import threading
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import torch
from stratcore.checkpoints.io import CheckpointIO, PathLike

import stratlib

from ..support import python, start


def _temporary_files(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_sigkill_in_the_middle_of_a_large_save_keeps_the_previous_checkpoint(
    tmp_path: Path,
) -> None:
    path = tmp_path / "last.ckpt"
    io = stratlib.TorchCheckpointIO()
    io.save_checkpoint({"weights": torch.zeros(4), "version": 1}, path)

    writer = start(python("big_save.py", str(path), "400"))
    try:
        # Kill once the temporary file holds part of the checkpoint (and before it replaces
        # the target).
        while writer.process.poll() is None:
            partial = _temporary_files(tmp_path)
            if partial and partial[0].stat().st_size > 20 * 1024 * 1024:
                writer.process.send_signal(signal.SIGKILL)
                break
            writer.check("the save to write 20 MiB of its temporary file")
            time.sleep(0.005)
        stdout = writer.finish().stdout
    finally:
        writer.kill()
    assert (
        writer.process.returncode == -signal.SIGKILL
    ), f"the writer was not killed midway: {stdout!r}"
    assert "saved" not in stdout

    checkpoint = io.load_checkpoint(path)
    assert checkpoint["version"] == 1
    assert torch.equal(checkpoint["weights"], torch.zeros(4))
    # The next save completes normally next to the killed one's leftover.
    io.save_checkpoint({"weights": torch.ones(4), "version": 3}, path)
    assert io.load_checkpoint(path)["version"] == 3


def test_saves_are_readable_by_the_group_like_plain_files(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        stratlib.TorchCheckpointIO().save_checkpoint(
            {"x": torch.ones(1)}, tmp_path / "a" / "b.ckpt"
        )
    finally:
        os.umask(previous)
    mode = stat.S_IMODE((tmp_path / "a" / "b.ckpt").stat().st_mode)
    assert mode == 0o644
    assert _temporary_files(tmp_path / "a") == []


def test_loading_a_missing_checkpoint_names_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        stratlib.TorchCheckpointIO().load_checkpoint(tmp_path / "absent.ckpt")


def test_loads_refuse_arbitrary_objects_unless_trusted(tmp_path: Path) -> None:
    path = tmp_path / "object.ckpt"
    torch.save({"ratio": Fraction(1, 3)}, path)
    with pytest.raises(
        pickle.UnpicklingError, match=r"fractions\.Fraction, which loading with weights_only=True"
    ):
        stratlib.TorchCheckpointIO().load_checkpoint(path)
    trusted = stratlib.TorchCheckpointIO(weights_only=False)
    assert trusted.load_checkpoint(path)["ratio"] == Fraction(1, 3)


class SlowFailingIO(CheckpointIO):
    """Takes a while to save and fails for paths containing 'bad'."""

    def __init__(self) -> None:
        self.saved: dict[str, Any] = {}
        self.release = threading.Event()

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: PathLike, storage_options: Any = None
    ) -> None:
        self.release.wait(10)
        if "bad" in str(path):
            raise OSError(f"disk full while writing {path}")
        self.saved[str(path)] = checkpoint

    def load_checkpoint(self, path: PathLike, map_location: Any = None) -> dict[str, Any]:
        return self.saved[str(path)]


def test_async_save_snapshots_tensors_and_wait_finishes_it() -> None:
    inner = SlowFailingIO()
    io = stratlib.AsyncCheckpointIO(inner)
    tensor = torch.zeros(3)
    io.save_checkpoint({"t": tensor}, "good.ckpt")
    tensor.add_(5)  # training goes on changing it
    assert "good.ckpt" not in inner.saved, "the save should still be running"
    inner.release.set()
    io.wait()
    assert torch.equal(inner.saved["good.ckpt"]["t"], torch.zeros(3))
    assert torch.equal(io.load_checkpoint("good.ckpt")["t"], torch.zeros(3))
    io.teardown()


def test_async_save_error_surfaces_in_wait() -> None:
    inner = SlowFailingIO()
    io = stratlib.AsyncCheckpointIO(inner)
    io.save_checkpoint({"t": torch.zeros(1)}, "bad.ckpt")
    inner.release.set()
    with pytest.raises(OSError, match=r"disk full while writing bad\.ckpt"):
        io.wait()
    io.teardown()


def test_async_save_error_surfaces_in_the_next_save() -> None:
    inner = SlowFailingIO()
    inner.release.set()
    io = stratlib.AsyncCheckpointIO(inner)
    io.save_checkpoint({"t": torch.zeros(1)}, "bad.ckpt")
    # The failed save has ended (its error is kept for the next call), however long it took.
    assert isinstance(io._pending[0].exception(), OSError)
    with pytest.raises(OSError, match="disk full"):
        io.save_checkpoint({"t": torch.zeros(1)}, "good.ckpt")
    io.teardown()


def test_async_teardown_waits_and_raises_the_error() -> None:
    inner = SlowFailingIO()
    io = stratlib.AsyncCheckpointIO(inner)
    io.save_checkpoint({"t": torch.zeros(1)}, "good.ckpt")
    io.save_checkpoint({"t": torch.zeros(1)}, "bad.ckpt")
    threading.Timer(0.2, inner.release.set).start()
    with pytest.raises(OSError, match="disk full"):
        io.teardown()
    assert "good.ckpt" in inner.saved, "teardown did not let the earlier save finish"
    assert io._executor is None


def test_async_wrapping_torch_io_round_trip(tmp_path: Path) -> None:
    io = stratlib.AsyncCheckpointIO()
    io.save_checkpoint({"t": torch.arange(3.0)}, tmp_path / "x.ckpt")
    assert torch.equal(io.load_checkpoint(tmp_path / "x.ckpt")["t"], torch.arange(3.0))
    io.remove_checkpoint(tmp_path / "x.ckpt")
    assert not (tmp_path / "x.ckpt").exists()
    io.teardown()


def test_strategy_teardown_finishes_asynchronous_saves(tmp_path: Path) -> None:
    io = stratlib.AsyncCheckpointIO()
    strategy = stratlib.get_strategy("single_device", accelerator="cpu", checkpoint_io=io)
    model = strategy.setup(torch.nn.Linear(2, 2))
    strategy.save_checkpoint({"model": model, "step": 1}, tmp_path / "s.ckpt")
    strategy.teardown()
    assert torch.load(tmp_path / "s.ckpt", weights_only=True)["step"] == 1
