"""Save a sharded checkpoint, then start large ones that the test kills midway.

Run as ``python killed_save.py FOLDER [--async-io]``: 2 fsdp ranks save ``FOLDER/last.ckpt``
with ``step`` 1, print ``saved 1``, then save a ~400 MB state into the same place three times,
with ``step`` 2, 3 and 4 (every parameter equal to the step), and print ``saved 4`` (which the
test must never see). On a busy machine the test may see the first of them under way only
after it completed: the checkpoint it finds must then be that one, whole.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

import stratlib


def job(strategy: Any, folder: str) -> None:
    target = Path(folder) / "last.ckpt"
    model = strategy.setup(nn.Sequential(*[nn.Linear(1024, 1024, bias=False) for _ in range(96)]))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(1.0)
    strategy.save_checkpoint({"model": model, "step": 1}, target)
    strategy.finish_saves()
    strategy.barrier("first save complete")
    if strategy.is_global_zero:
        print("saved 1", flush=True)
    for step in (2, 3, 4):  # long enough to be killed during one of them
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.fill_(float(step))
        strategy.save_checkpoint({"model": model, "step": step}, target)
    strategy.finish_saves()
    if strategy.is_global_zero:
        print("saved 4", flush=True)


def main() -> None:
    options: dict[str, Any] = {"state_dict_type": "sharded"}
    if "--async-io" in sys.argv:
        options["checkpoint_io"] = stratlib.AsyncCheckpointIO()
    strategy = stratlib.get_strategy("fsdp", accelerator="cpu", devices=2, **options)
    strategy.launch(job, sys.argv[1])


if __name__ == "__main__":
    main()
