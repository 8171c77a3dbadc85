"""A checkpoint is data: nothing in a file or a folder runs code unless the user loads it with
``weights_only=False``.

Crafted folders (DCP metadata or bytes items that would call ``os.system``), metadata that names
files outside its folder or sets attributes of a class, and damaged files are refused by every
strategy, before any setup, and by ``python -m stratcore.checkpoints.consolidate``, each with a
one-line ``CheckpointLoadError`` that names the path; a marker file the payload would create
never appears. Real sharded checkpoints of every strategy that writes them still load, on 2
ranks.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import torch
from stratcore import testing
from stratcore.checkpoints.io import CheckpointLoadError
from stratcore.checkpoints.sharded import FORMAT, META_FILE, VERSION
from stratcore.testing import watch

import stratlib
from tests.support import REPO

HERE = Path(__file__).resolve().parent
#: The ranks and the command import this checkout's runtime and package.
PYTHONPATH = os.pathsep.join([str(REPO / "runtime"), str(REPO / "generated")])
#: A strategy of every kind: one file (single_device, ddp), sharded through DCP (fsdp,
#: model_parallel) and in an engine's own format (deepspeed).
STRATEGIES = ["single_device", "ddp", "fsdp", "model_parallel", "deepspeed"]


class RunsCode:
    """Unpickled, creates ``marker`` (what a crafted checkpoint would do instead)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def _sharded_meta(folder: Path, sharded: list[str]) -> None:
    record = {"format": FORMAT, "version": VERSION, "entries": {}, "sharded": sharded}
    torch.save(record, folder / META_FILE)


def _crafted_folder(tmp_path: Path) -> tuple[Path, Path]:
    """The folder of the report: meta.pt, and DCP metadata that runs a command."""
    folder, marker = tmp_path / "last.ckpt", tmp_path / "PWNED"
    folder.mkdir()
    _sharded_meta(folder, ["model"])
    (folder / ".metadata").write_bytes(pickle.dumps(RunsCode(marker)))
    return folder, marker


def _consolidate(source: Path, destination: Path) -> Any:
    command = [sys.executable, "-m", "stratcore.checkpoints.consolidate", source, destination]
    env = testing.clean_environ({"PYTHONPATH": PYTHONPATH})
    return watch.run([str(c) for c in command], env=env, cwd=source.parent)


def _assert_one_line_naming(error: BaseException, path: Path, *words: str) -> None:
    message = str(error)
    assert "\n" not in message, f"not one line: {message!r}"
    assert str(path) in message, f"the path is not named: {message!r}"
    for word in words:
        assert word in message, f"{word!r} is not in {message!r}"
    assert "add_safe_globals" not in message, "the message offers to allow what the file names"


@pytest.mark.parametrize("name", STRATEGIES)
def test_a_crafted_checkpoint_folder_runs_no_code_on_any_strategy(
    name: str, tmp_path: Path
) -> None:
    folder, marker = _crafted_folder(tmp_path)
    strategy = stratlib.get_strategy(name, accelerator="cpu", devices=1)
    with pytest.raises(CheckpointLoadError) as caught:
        strategy.load_checkpoint(folder, torch.nn.Linear(4, 2))
    assert not marker.exists(), "loading the folder ran the code in it"
    if strategy.reads_sharded_checkpoints:
        _assert_one_line_naming(caught.value, folder, "posix.system")
    else:  # never handed to torch.distributed.checkpoint
        _assert_one_line_naming(caught.value, folder, "stratcore.checkpoints.consolidate")


def test_consolidate_refuses_a_crafted_folder_without_running_it(tmp_path: Path) -> None:
    folder, marker = _crafted_folder(tmp_path)
    result = _consolidate(folder, tmp_path / "one.ckpt")
    assert not marker.exists(), "consolidating the folder ran the code in it"
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "posix.system" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "one.ckpt").exists()


def _dcp_folder(folder: Path, state: dict[str, Any]) -> None:
    """A folder written by torch.distributed.checkpoint in this process, with the runtime's
    meta.pt naming ``state``'s entries as sharded."""
    import torch.distributed.checkpoint as dcp

    dcp.save(state, storage_writer=dcp.FileSystemWriter(folder), no_dist=True)
    _sharded_meta(folder, sorted(state))


def test_a_bytes_item_that_runs_code_is_refused(tmp_path: Path) -> None:
    folder, marker = tmp_path / "bytes.ckpt", tmp_path / "PWNED"
    _dcp_folder(folder, {"model": {"weight": torch.ones(2), "extra": RunsCode(marker)}})
    strategy = stratlib.get_strategy("fsdp", accelerator="cpu", devices=1)
    with pytest.raises(CheckpointLoadError) as caught:
        strategy.load_checkpoint(folder)
    assert not marker.exists(), "a bytes item of the folder ran code"
    _assert_one_line_naming(caught.value, folder, "posix.system")

    result = _consolidate(folder, tmp_path / "one.ckpt")
    assert not marker.exists(), "consolidating ran a bytes item's code"
    assert result.returncode == 2 and "posix.system" in result.stderr, result.stderr


def _rewrite_metadata(folder: Path, change: Any) -> None:
    """Change the folder's DCP metadata as a crafted folder would (read here as trusted)."""
    path = folder / ".metadata"
    metadata = pickle.loads(path.read_bytes())
    change(metadata)
    path.write_bytes(pickle.dumps(metadata))


def test_metadata_naming_a_file_outside_the_folder_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret.distcp"
    folder = tmp_path / "escape.ckpt"
    _dcp_folder(folder, {"model": {"weight": torch.ones(2)}})
    (folder / "__0_0.distcp").rename(secret)  # what the metadata will point at instead

    def escape(metadata: Any) -> None:
        for info in metadata.storage_data.values():
            info.relative_path = "../secret.distcp"

    _rewrite_metadata(folder, escape)
    strategy = stratlib.get_strategy("fsdp", accelerator="cpu", devices=1)
    with pytest.raises(CheckpointLoadError) as caught:
        strategy.load_checkpoint(folder)
    _assert_one_line_naming(caught.value, folder, "'../secret.distcp'", "not a file of the folder")


# GLOBAL torch.Size, then BUILD with the state (None, {"pwned": 1}): sets an attribute on the
# class itself, as the standard unpickler would.
SETS_A_CLASS_ATTRIBUTE = b"\x80\x02c%s\n%s\nN}X\x05\x00\x00\x00pwnedK\x01s\x86b."


def test_metadata_cannot_set_attributes_of_a_class_it_names(tmp_path: Path) -> None:
    # The payload works on the standard unpickler (a class the test may change).
    pickle.loads(SETS_A_CLASS_ATTRIBUTE % (b"fractions", b"Fraction"))
    try:
        assert getattr(Fraction, "pwned", None) == 1
    finally:
        del Fraction.pwned  # type: ignore[attr-defined]

    folder = tmp_path / "build.ckpt"
    folder.mkdir()
    _sharded_meta(folder, ["model"])
    (folder / ".metadata").write_bytes(SETS_A_CLASS_ATTRIBUTE % (b"torch", b"Size"))
    strategy = stratlib.get_strategy("fsdp", accelerator="cpu", devices=1)
    with pytest.raises(CheckpointLoadError) as caught:
        strategy.load_checkpoint(folder)
    assert not hasattr(torch.Size, "pwned"), "the metadata changed torch.Size"
    _assert_one_line_naming(caught.value, folder, "corrupt or was crafted")


def test_an_object_that_runs_code_is_named_and_never_offered_to_be_allowed(
    tmp_path: Path,
) -> None:
    path, marker = tmp_path / "system.ckpt", tmp_path / "PWNED"
    torch.save({"step": 1, "payload": RunsCode(marker)}, path)
    strategy = stratlib.get_strategy("single_device", accelerator="cpu")
    with pytest.raises(CheckpointLoadError) as caught:
        strategy.load_checkpoint(path)
    assert not marker.exists()
    _assert_one_line_naming(caught.value, path, "posix.system", "weights_only=False")


def _damaged(good: bytes) -> dict[str, bytes]:
    return {
        "empty": b"",
        "text": b"hello, not a checkpoint\n",
        "truncated": good[: len(good) // 2],
        "zero-filled": good[:64] + bytes(len(good) - 64),
        "legacy header cut short": b"\x80\x02}q\x00(X",
        "a pickle cut short": b"\x80\x02\x8a\x0a",
    }


@pytest.mark.parametrize(
    "kind",
    [
        "empty",
        "text",
        "truncated",
        "zero-filled",
        "legacy header cut short",
        "a pickle cut short",
    ],
)
def test_a_damaged_checkpoint_file_is_corrupt_or_not_a_checkpoint(
    kind: str, tmp_path: Path
) -> None:
    good = tmp_path / "good.ckpt"
    torch.save({"model": torch.nn.Linear(4, 2).state_dict(), "step": 3}, good)
    path = tmp_path / "damaged.ckpt"
    path.write_bytes(_damaged(good.read_bytes())[kind])
    for load in (
        lambda: stratlib.get_strategy("single_device", accelerator="cpu").load_checkpoint(path),
        lambda: stratlib.TorchCheckpointIO().load_checkpoint(path),
        lambda: stratlib.TorchCheckpointIO(weights_only=False).load_checkpoint(path),
    ):
        with pytest.raises(CheckpointLoadError) as caught:
            load()
        _assert_one_line_naming(caught.value, path, "corrupt or not a checkpoint")


def test_a_checkpoint_that_is_not_a_regular_file_is_refused_without_reading_it(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "fifo.ckpt"
    os.mkfifo(fifo)  # reading it would wait for a writer forever
    for path in (fifo, Path("/dev/zero")):
        with pytest.raises(CheckpointLoadError) as caught:
            stratlib.get_strategy("single_device", accelerator="cpu").load_checkpoint(path)
        _assert_one_line_naming(caught.value, path, "not a regular file")


def test_a_damaged_sharded_folder_is_corrupt_or_not_a_checkpoint(tmp_path: Path) -> None:
    folder = tmp_path / "damaged.ckpt"
    _dcp_folder(folder, {"model": {"weight": torch.ones(2)}})
    strategy = stratlib.get_strategy("fsdp", accelerator="cpu", devices=1)
    (folder / ".metadata").write_bytes(b"")
    with pytest.raises(CheckpointLoadError) as caught:
        strategy.load_checkpoint(folder)
    _assert_one_line_naming(caught.value, folder, "corrupt or not a checkpoint")
    (folder / META_FILE).write_bytes(b"\x00" * 10)
    with pytest.raises(CheckpointLoadError) as caught:
        strategy.load_checkpoint(folder)
    _assert_one_line_naming(caught.value, folder / META_FILE, "corrupt or not a checkpoint")
    torch.save(
        {"format": FORMAT, "version": VERSION, "sharded": 5, "entries": []}, folder / META_FILE
    )
    with pytest.raises(CheckpointLoadError) as caught:
        strategy.load_checkpoint(folder)
    _assert_one_line_naming(caught.value, folder, "corrupt or not a checkpoint")


#: Every strategy that writes sharded checkpoints, set to write them.
SHARDED = {
    "fsdp": {"state_dict_type": "sharded"},
    "model_parallel": {},
    "deepspeed_stage_2": {"state_dict_type": "sharded"},
    "deepspeed_stage_3": {"state_dict_type": "sharded"},
}


def _round_trip(name: str, folder: Path, *extra: str) -> dict[str, Any]:
    if name.startswith("deepspeed"):
        pytest.importorskip("deepspeed")
    script = HERE / "scripts" / "sharded_round_trip.py"
    command = [sys.executable, str(script), name, json.dumps(SHARDED[name]), str(folder), *extra]
    env = testing.clean_environ({"PYTHONPATH": PYTHONPATH})
    env.pop("DS_ACCELERATOR", None)
    process = watch.run(command, env=env, cwd=folder)
    assert process.returncode == 0, f"{name} failed:\n{process.stderr[-4000:]}"
    lines = [line for line in process.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, process.stdout[-2000:]
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return result


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SHARDED))
def test_real_sharded_checkpoints_of_every_strategy_that_writes_them_still_load(
    name: str, tmp_path: Path
) -> None:
    result = _round_trip(name, tmp_path)
    assert result["is_folder"], "the strategy did not write a sharded checkpoint"
    assert result["moved"] and result["restored"], "the weights were not restored"
    assert result["step"] == 1 and result["count"] == 1, result
    assert result["rest"] == {"note": "saved"}
    # Read whole: every entry (DeepSpeed's optimizer partitions are not converted).
    expected = ["counter", "model", "note", "optimizer", "step"]
    if name.startswith("deepspeed"):
        expected.remove("optimizer")
    assert result["whole_keys"] == expected, result
    assert result["whole_note"] == "saved"


@pytest.mark.slow
def test_files_of_a_deepspeed_folder_are_read_weights_only(tmp_path: Path) -> None:
    """DeepSpeed reads its own files as trusted: through the strategy, and before
    ``zero_to_fp32`` converts them, they are read weights-only first."""
    result = _round_trip("deepspeed_stage_2", tmp_path, "--tamper")
    assert not result["ran"], "DeepSpeed's load ran the code of a file in the folder"
    assert result["error"] == "CheckpointLoadError", result
    assert "posix.system" in result["message"] and "\n" not in result["message"]

    converted = _consolidate(tmp_path / "sharded.ckpt", tmp_path / "one.ckpt")
    assert not (tmp_path / "PWNED").exists(), "converting the folder ran code"
    assert converted.returncode == 2 and "posix.system" in converted.stderr, converted.stderr


#: Saves a checkpoint in a process whose files may be no larger than 10 kB (the kernel then
#: refuses a write with EFBIG, as it refuses one with ENOSPC on a full disk); prints the error.
SMALL_FILES = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (10_000, 10_000))
import torch, stratlib
try:
    stratlib.TorchCheckpointIO().save_checkpoint({"x": torch.zeros(100_000)}, sys.argv[1])
except OSError as error:
    print(type(error).__name__, error)
"""


def test_a_failed_save_names_the_checkpoint_not_its_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "big.ckpt"
    env = testing.clean_environ({"PYTHONPATH": PYTHONPATH})
    process = watch.run([sys.executable, "-c", SMALL_FILES, str(target)], env=env, cwd=tmp_path)
    assert process.returncode == 0, process.stderr[-3000:]
    message = process.stdout.strip()
    assert message.startswith("CheckpointSaveError") and str(target) in message, message
    assert ".tmp" not in message, "the temporary file is named"
    assert list(tmp_path.iterdir()) == [], "the temporary file was left behind"
