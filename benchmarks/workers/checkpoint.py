"""Checkpoint save and load through a stratlib strategy against plain torch.save/torch.load of
the same state, in one process.

``python -m benchmarks.workers.checkpoint --megabytes 200 --repeats 5 --out result.json``

Per repeat, saves in rotating order: ``torch.save`` to a path; ``torch.save`` to a path followed
by ``fsync`` of the file (the least a durable save must do, and the baseline of the atomic save);
``strategy.save_checkpoint`` (TorchCheckpointIO: temporary file, fsync, rename, fsync of the
folder); the same strategy with AsyncCheckpointIO (time to return, then time until the file is
complete); then loads, ``torch.load`` and ``strategy.load_checkpoint``, in the order A B B A (a
load's time is the mean of its two).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WIDTH = 2048  # one Linear(2048, 2048) without bias holds 16 MiB of float32


def build_state(megabytes: int) -> tuple[Any, Any]:
    import torch
    from torch import nn

    layers = max(1, round(megabytes * 1e6 / (WIDTH * WIDTH * 4)))
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(layers)])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, optimizer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--folder", type=Path, default=None)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    import torch

    import stratlib

    torch.set_num_threads(1)
    model, optimizer = build_state(args.megabytes)
    plain_state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 3}
    checkpoint = {"model": model, "optimizer": optimizer, "step": 3}
    strategy = stratlib.get_strategy("single_device", accelerator="cpu")
    asynchronous = stratlib.get_strategy(
        "single_device", accelerator="cpu", checkpoint_io=stratlib.AsyncCheckpointIO()
    )
    folder = Path(tempfile.mkdtemp(prefix="stratbench-ckpt-", dir=args.folder))
    plain_path, ours_path = folder / "plain.ckpt", folder / "stratlib.ckpt"
    async_path = folder / "async.ckpt"

    def torch_save() -> None:
        torch.save(plain_state, plain_path)

    def torch_save_fsync() -> None:
        torch.save(plain_state, plain_path)
        fd = os.open(plain_path, os.O_RDWR)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def stratlib_save() -> None:
        strategy.save_checkpoint(checkpoint, ours_path)

    def async_return() -> None:
        asynchronous.save_checkpoint(checkpoint, async_path)

    def torch_load() -> None:
        torch.load(plain_path, map_location="cpu", weights_only=True)

    def stratlib_load() -> None:
        strategy.load_checkpoint(ours_path)

    saves: dict[str, Callable[[], None]] = {
        "torch_save": torch_save,
        "torch_save_fsync": torch_save_fsync,
        "stratlib_save": stratlib_save,
        "async_save": async_return,
    }
    loads: dict[str, Callable[[], None]] = {
        "torch_load": torch_load,
        "stratlib_load": stratlib_load,
    }
    times: dict[str, list[float]] = {name: [] for name in [*saves, *loads, "async_complete"]}
    try:
        # Warm up: the first save and load pay for lazy imports and allocator growth.
        for warm_up in (stratlib_save, torch_save, stratlib_load, torch_load):
            warm_up()
        for repeat in range(args.repeats):
            order = list(saves)
            shift = repeat % len(order)
            for name in order[shift:] + order[:shift]:
                started = time.perf_counter()
                saves[name]()
                times[name].append(time.perf_counter() - started)
                if name == "async_save":
                    asynchronous.checkpoint_io.wait()
                    times["async_complete"].append(time.perf_counter() - started)
            # A, B, B, A: each load runs once first and once second in every repeat, so that
            # allocator state left by the previous load (page faults or reuse) favours neither.
            first, second = list(loads) if repeat % 2 == 0 else list(reversed(loads))
            pair: dict[str, float] = dict.fromkeys(loads, 0.0)
            for name in (first, second, second, first):
                started = time.perf_counter()
                loads[name]()
                pair[name] += (time.perf_counter() - started) / 2
            for name, value in pair.items():
                times[name].append(value)
        sizes = {"plain": plain_path.stat().st_size, "stratlib": ours_path.stat().st_size}
        filesystem = _filesystem(folder)
    finally:
        asynchronous.checkpoint_io.teardown()
        shutil.rmtree(folder, ignore_errors=True)
    args.out.write_text(
        json.dumps({"times": times, "bytes": sizes, "filesystem": filesystem}), encoding="utf-8"
    )


def _filesystem(folder: Path) -> str:
    """Type of the file system holding ``folder`` (fsync costs nothing on tmpfs)."""
    try:
        mounts = Path("/proc/mounts").read_text(encoding="utf-8").splitlines()
    except OSError:
        return "unknown"
    best, kind = "", "unknown"
    resolved = str(folder.resolve())
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3 and resolved.startswith(parts[1]) and len(parts[1]) > len(best):
            best, kind = parts[1], f"{parts[2]} at {parts[1]}"
    return kind


if __name__ == "__main__":
    main()
