"""A sharded checkpoint of a strategy that writes them, saved and read back on 2 ranks, through
the runtime's weights-only readers; rank 0 prints ``RESULT <json>``.

Run as ``python sharded_round_trip.py STRATEGY OPTIONS_JSON FOLDER [--tamper]``: the strategy
trains a step, saves a sharded checkpoint (model, optimizer, a stateful object and plain
entries), trains on, then loads it back into the same objects and reads it whole
(``state=None``). With ``--tamper``, rank 0 replaces every ``.pt`` file of the folder but its
``meta.pt`` by one whose unpickling would create ``FOLDER/PWNED``, and the load reports its
error instead.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

import stratlib


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


class Counter:
    """A stateful object of the user's own (DeepSpeed's optimizers take no torch scheduler)."""

    def __init__(self) -> None:
        self.count = 0

    def state_dict(self) -> dict[str, int]:
        return {"count": self.count}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.count = state["count"]


class RunsCode:
    """Unpickled, creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def _step(strategy: Any, model: Any, optimizer: Any) -> None:
    loss = model(torch.randn(4, 8, device=strategy.root_device)).sum()
    strategy.backward(loss)
    strategy.optimizer_step(optimizer)


def _weights(strategy: Any, model: Any) -> dict[str, list[float]]:
    state = strategy.get_module_state_dict(model)
    return {k: v.float().flatten().tolist() for k, v in sorted(state.items())}


def run(strategy: Any, folder: str, tamper: bool) -> dict[str, Any]:
    path = Path(folder) / "sharded.ckpt"
    module = _model()
    model, optimizer = strategy.setup(module, torch.optim.AdamW(module.parameters(), lr=0.1))
    counter = Counter()
    _step(strategy, model, optimizer)
    counter.count += 1
    saved = _weights(strategy, model)
    state = {"model": model, "optimizer": optimizer, "counter": counter, "step": 1}
    strategy.save_checkpoint({**state, "note": "saved"}, path)
    _step(strategy, model, optimizer)
    counter.count += 1
    moved = _weights(strategy, model) != saved
    state = {"model": model, "optimizer": optimizer, "counter": counter, "step": 0}
    if tamper:
        marker = Path(folder) / "PWNED"
        if strategy.is_global_zero:
            for file in path.rglob("*.pt"):
                if file.name != "meta.pt":
                    torch.save({"payload": RunsCode(marker)}, file)
        strategy.barrier()
        try:
            strategy.load_checkpoint(path, state)
        except Exception as error:
            return {"error": type(error).__name__, "message": str(error), "ran": marker.exists()}
        return {"error": None, "ran": marker.exists()}
    rest = strategy.load_checkpoint(path, state)
    whole = strategy.load_checkpoint(path) if strategy.reads_sharded_checkpoints else {}
    return {
        "is_folder": path.is_dir(),
        "moved": moved,
        "restored": _weights(strategy, model) == saved,
        "step": state["step"],
        "count": counter.count,
        "rest": rest,
        "whole_keys": sorted(whole),
        "whole_note": whole.get("note"),
    }


if __name__ == "__main__":
    name, options, folder = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    strategy = stratlib.get_strategy(name, accelerator="cpu", devices=2, **options)
    result = strategy.launch(run, folder, "--tamper" in sys.argv[4:])
    if strategy.is_global_zero:
        print("RESULT " + json.dumps(result), flush=True)
