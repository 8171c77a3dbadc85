"""A training script as a user of the ``horovod`` strategy writes it, started by the tests with
``horovodrun -np 2 -H localhost:2 --gloo python horovod_job.py FOLDER [SCENARIO ...]``.

Each scenario is a ``strategy.launch`` of a strategy of its own, as
``stratlib.get_strategy("horovod", accelerator="cpu", devices=2, ...)`` builds it. Every rank
writes what it saw to ``FOLDER/rank<R>.json`` (scenario -> result) as soon as a scenario ends,
so that the tests read each scenario separately, and a scenario that fails on every rank is
reported as its error while the job goes on. ``rank_raises`` ends the job: rank 1 raises.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from stratcore.testing import reference_batch, reference_model, shard
from torch import nn

import stratlib

STEPS = 3
LR = 0.1


def _params(strategy: Any, model: nn.Module) -> list[Any]:
    return [t.detach().double().tolist() for t in strategy.get_module_state_dict(model).values()]


def _my_share(strategy: Any) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = reference_batch()
    return shard(x, strategy.global_rank, strategy.world_size), shard(
        y, strategy.global_rank, strategy.world_size
    )


def where_am_i(strategy: Any) -> dict[str, Any]:
    import horovod.torch as hvd

    return {
        "rank": strategy.global_rank,
        "world_size": strategy.world_size,
        "local_rank": strategy.local_rank,
        "horovod": [hvd.rank(), hvd.size(), hvd.local_rank()],
        "environment": type(strategy.cluster_environment).__name__,
        "launcher": type(strategy.launcher).__name__,
        "is_global_zero": strategy.is_global_zero,
    }


def train(strategy: Any, optimizer_name: str = "sgd", max_norm: float | None = None) -> Any:
    """STEPS steps on this rank's half of the batch (clipping the gradient norm if asked)."""
    model = reference_model()
    optimizer = _optimizer(optimizer_name, model)
    model, optimizer = strategy.setup(model, optimizer)
    x, y = _my_share(strategy)
    norms = []
    for _ in range(STEPS):
        strategy.backward(nn.functional.mse_loss(model(x), y))
        if max_norm is not None:
            norms.append(float(strategy.clip_gradients(model, optimizer, max_norm=max_norm)))
        strategy.optimizer_step(optimizer)
    return {"params": _params(strategy, model), "norms": norms}


def _optimizer(name: str, model: nn.Module) -> torch.optim.Optimizer:
    if name == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=LR)
    return torch.optim.SGD(model.parameters(), lr=LR)


def accumulate(strategy: Any, block: bool) -> Any:
    """Each step in two backward passes of a quarter of the batch each: with
    ``backward_passes_per_step=2`` (Horovod counts the passes), or the first pass inside
    ``block_backward_sync()``."""
    model = reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    model, optimizer = strategy.setup(model, optimizer)
    x, y = _my_share(strategy)
    half = x.shape[0] // 2
    for _ in range(STEPS):
        first = nn.functional.mse_loss(model(x[:half]), y[:half]) / 2
        if block:
            with strategy.block_backward_sync():
                strategy.backward(first)
        else:
            strategy.backward(first)
        strategy.backward(nn.functional.mse_loss(model(x[half:]), y[half:]) / 2)
        strategy.optimizer_step(optimizer)
    return {"params": _params(strategy, model)}


def compressed(strategy: Any) -> Any:
    """One backward pass with fp16 compression: this rank's own gradients, and the averaged
    ones the step used."""
    model = reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    model, optimizer = strategy.setup(model, optimizer)
    x, y = _my_share(strategy)
    # A copy of the same model, trained by nobody, gives this rank's own gradients.
    alone = reference_model()
    nn.functional.mse_loss(alone(x), y).backward()
    strategy.backward(nn.functional.mse_loss(model(x), y))
    strategy.optimizer_step(optimizer, zero_grad=False)
    return {
        "own": [p.grad.double().flatten().tolist() for p in alone.parameters()],
        "averaged": [p.grad.double().flatten().tolist() for p in model.parameters()],
    }


def checkpoint_resume(strategy: Any, folder: str, part: str) -> Any:
    """'save': 2 AdamW steps, then a checkpoint. 'resume', in a later launch: a model of other
    weights and a fresh optimizer load it and take 2 more steps."""
    path = Path(folder) / "resume.ckpt"
    model = reference_model(seed=0 if part == "save" else 7)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    model, optimizer = strategy.setup(model, optimizer)
    if part == "resume":
        remaining = strategy.load_checkpoint(path, state={"model": model, "optimizer": optimizer})
    x, y = _my_share(strategy)
    for _ in range(2):
        strategy.backward(nn.functional.mse_loss(model(x), y))
        strategy.optimizer_step(optimizer)
    if part == "save":
        strategy.save_checkpoint({"model": model, "optimizer": optimizer, "step": 2}, path)
        return {"saved": path.is_file()}
    return {"params": _params(strategy, model), "remaining": remaining}


def gather_with_gradients(strategy: Any) -> Any:
    """all_gather(sync_grads=True) inside a loss that every rank computes alike."""
    value = torch.tensor([float(strategy.global_rank + 1)], requires_grad=True)
    gathered = strategy.all_gather(value, sync_grads=True)
    weights = torch.arange(1.0, strategy.world_size + 1).unsqueeze(1)
    (gathered * weights).sum().backward()
    assert value.grad is not None
    return {"gathered": gathered.detach().flatten().tolist(), "grad": value.grad.tolist()}


def rank_raises(strategy: Any, folder: str) -> None:
    """Rank 1 raises once every rank has started; rank 0 waits for it in a collective."""
    strategy.barrier("start")
    if strategy.global_rank == 1:
        (Path(folder) / "failed_at").write_text(repr(time.time()), encoding="utf-8")
        raise RuntimeError("deliberate failure on rank 1 of the horovodrun job")
    strategy.reduce(torch.tensor(1.0), reduce_op="sum")
    strategy.barrier("end")


#: Scenario name -> (strategy options, function, its arguments after the strategy).
SCENARIOS: dict[str, tuple[dict[str, Any], Callable[..., Any], tuple[Any, ...]]] = {
    "where_am_i": ({}, where_am_i, ()),
    "trains_sgd": ({}, train, ("sgd",)),
    "trains_adamw": ({}, train, ("adamw",)),
    "clips_gradients": ({}, train, ("sgd", 0.05)),
    "backward_passes_per_step": ({"backward_passes_per_step": 2}, accumulate, (False,)),
    "block_backward_sync": ({}, accumulate, (True,)),
    "fp16_compression": ({"gradient_compression": "fp16"}, compressed, ()),
    "checkpoint_save": ({}, checkpoint_resume, ("{folder}", "save")),
    "checkpoint_resume": ({}, checkpoint_resume, ("{folder}", "resume")),
    "all_gather_gradients": ({}, gather_with_gradients, ()),
    "rank_raises": ({}, rank_raises, ("{folder}",)),
}


def main(folder: str, names: list[str]) -> None:
    results: dict[str, Any] = {}
    for name in names or list(SCENARIOS):
        options, function, arguments = SCENARIOS[name]
        strategy = stratlib.get_strategy("horovod", accelerator="cpu", devices=2, **options)
        filled = tuple(folder if a == "{folder}" else a for a in arguments)
        if name == "rank_raises":
            strategy.launch(function, *filled)  # ends the job
            continue
        try:
            results[name] = {"result": strategy.launch(function, *filled)}
        except Exception as exc:  # the same error on every rank: report it, go on
            results[name] = {
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(),
            }
        rank = strategy.global_rank
        report = Path(folder) / f"rank{rank}.json"
        report.with_suffix(".tmp").write_text(json.dumps(results), encoding="utf-8")
        report.with_suffix(".tmp").replace(report)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
