"""Sharded against full checkpoints of an fsdp model on 2 CPU ranks, in one launch.

``python -m benchmarks.workers.sharded_checkpoint --megabytes 1000 --repeats 3 --out result.json``

The model is sharded across both ranks (FSDP2). Per repeat, in rotating order: a full save
(``state_dict_type="full"``: the state is gathered on rank 0, which writes one file), a
sharded save (every rank writes its own shards through torch.distributed.checkpoint), and an
asynchronous sharded save (time to return; then the time until the checkpoint is in place).
Every save fsyncs what it writes and puts it in place atomically. Rank 0 writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

WIDTH = 2048  # one Linear(2048, 2048) without bias holds 16 MiB of float32


def _model(megabytes: int) -> Any:
    import torch
    from torch import nn

    layers = max(2, round(megabytes * 1e6 / (WIDTH * WIDTH * 4)))
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(layers)])


def measure(strategy: Any, megabytes: int, repeats: int, folder: str) -> dict[str, Any]:
    model = strategy.setup(_model(megabytes))
    root = Path(folder)
    times: dict[str, list[float]] = {"full": [], "sharded": [], "async": [], "async_complete": []}

    def timed(kind: str) -> None:
        strategy.state_dict_type = "full" if kind == "full" else "sharded"
        asynchronous = kind == "async"
        strategy.checkpoint_io = io_async if asynchronous else io_sync
        strategy.barrier("start")
        started = time.perf_counter()
        strategy.save_checkpoint({"model": model, "step": 1}, root / f"{kind}.ckpt")
        times[kind].append(time.perf_counter() - started)
        if asynchronous:
            strategy.sharded_saver.wait()
            strategy.barrier("complete")
            times["async_complete"].append(time.perf_counter() - started)

    import stratlib

    io_sync, io_async = stratlib.TorchCheckpointIO(), stratlib.AsyncCheckpointIO()
    for kind in ("full", "sharded", "async"):  # warm up: lazy imports, the I/O group
        timed(kind)
        times[kind].clear()
    times["async_complete"].clear()
    for repeat in range(repeats):
        order = ["full", "sharded", "async"]
        shift = repeat % len(order)
        for kind in order[shift:] + order[:shift]:
            timed(kind)
    size = sum(p.stat().st_size for p in (root / "sharded.ckpt").rglob("*") if p.is_file())
    return {"times": times, "bytes": size, "full_bytes": (root / "full.ckpt").stat().st_size}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=None)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    import stratlib

    folder = os.environ.get("STRATBENCH_SHARDED_FOLDER")
    owner = folder is None
    if owner:
        # The other rank runs this script again and must write into the same folder.
        folder = tempfile.mkdtemp(prefix="stratbench-sharded-", dir=args.folder)
        os.environ["STRATBENCH_SHARDED_FOLDER"] = folder
    strategy = stratlib.get_strategy("fsdp", accelerator="cpu", devices=2)
    try:
        result = strategy.launch(measure, args.megabytes, args.repeats, folder)
    finally:
        if owner:
            shutil.rmtree(folder, ignore_errors=True)
    if owner:
        args.out.write_text(json.dumps(result), encoding="utf-8")


if __name__ == "__main__":
    main()
