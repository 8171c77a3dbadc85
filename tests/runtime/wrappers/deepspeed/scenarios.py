"""Multi-process DeepSpeed scenarios for the tests in this folder.

Run as ``python scenarios.py SCENARIO STRATEGY [--options JSON] [--precision P] [--args JSON]``;
the strategy's launcher starts the other rank by running this script again, and rank 0 prints
one ``RESULT <json>`` line. Each scenario combines several checks, because starting DeepSpeed
is slow. ``python scenarios.py cases --cases JSON`` runs a list of cases
``{"case", "scenario", "strategy", "options", "precision", "args"}`` in the processes of one
job, each a launch of a strategy of its own, and prints ``RESULT {"case": ..., "result": ...}``
as each ends; the result's ``models_alive`` counts the models set up so far that the launches'
teardowns have not freed, and ``optimizers_held`` names the modules of the optimizers the
strategy holds after its teardown.

Scenarios:
    train       train with gradient accumulation (two micro-batches per step, the first inside
                ``block_backward_sync``), save a checkpoint, train on, load it, train again
    resume      load such a checkpoint into a fresh model and optimizer, train one step
    config_opt  the optimizer comes from the config's 'optimizer' section
    spawn       'train' through a subclass of DeepSpeedStrategy that spawns its processes
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import weakref
from pathlib import Path
from typing import Any

import group_release
import torch
from stratcore import testing
from stratcore.exceptions import MisconfigurationError
from stratcore.launchers import SpawnLauncher
from torch import nn

import stratlib

# Every process of a scenario (the spawned ones import this module too) fails with exit code 3
# if a process group outlives the release at exit.
group_release.check_at_exit()

#: Whether this process started with DeepSpeed's accelerator variable set, and whether
#: importing the package imported deepspeed.
STARTED_WITH_DS_ACCELERATOR = os.environ.get("DS_ACCELERATOR")
DEEPSPEED_IMPORTED_BY_PACKAGE = "deepspeed" in sys.modules

#: The models the scenarios set up, to tell whether each is freed after its launch.
MODELS: list[weakref.ref[nn.Module]] = []

OPTIMIZERS = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    "adam": lambda params: torch.optim.Adam(params, lr=0.01),
}
#: Optimizers with other hyperparameters, which loading a checkpoint must replace.
OTHER_OPTIMIZERS = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.5, momentum=0.0),
    "adam": lambda params: torch.optim.Adam(params, lr=0.5, betas=(0.5, 0.5)),
}


def _rank_batch(strategy: Any) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = testing.reference_batch()
    rank, world = strategy.global_rank, strategy.world_size
    return testing.shard(x, rank, world), testing.shard(y, rank, world)


def _train_steps(strategy: Any, model: nn.Module, optimizer: Any, steps: int, divide: bool) -> None:
    """Each step: two micro-batches of this rank's shard, the first without synchronisation."""
    xs, ys = _rank_batch(strategy)
    half = xs.shape[0] // 2
    for _ in range(steps):
        for index in range(2):
            part = slice(index * half, (index + 1) * half)
            block = strategy.block_backward_sync() if index == 0 else contextlib.nullcontext()
            with block:
                loss = nn.functional.mse_loss(model(xs[part]).float(), ys[part].float())
                strategy.backward(loss / 2 if divide else loss)
        if optimizer is None:
            strategy.optimizer_step()
        else:
            strategy.optimizer_step(optimizer)


def _params(strategy: Any, model: nn.Module) -> list[Any]:
    return [t.float().cpu().tolist() for t in strategy.get_module_state_dict(model).values()]


def _engine_info(strategy: Any) -> dict[str, Any]:
    from deepspeed.accelerator import get_accelerator

    engine = strategy.engine
    state = strategy.get_module_state_dict(engine)
    views: list[Any] = [None] * strategy.world_size
    torch.distributed.all_gather_object(
        views,
        {
            "started_with_ds_accelerator": STARTED_WITH_DS_ACCELERATOR,
            "deepspeed_imported_by_package": DEEPSPEED_IMPORTED_BY_PACKAGE,
            "ds_accelerator": get_accelerator().device_name(),
        },
    )
    return {
        "stage": engine.zero_optimization_stage(),
        "micro_batch": engine.train_micro_batch_size_per_gpu(),
        "accumulation_steps": engine.gradient_accumulation_steps(),
        "offload_optimizer": bool(engine.zero_offload_optimizer()),
        "offload_param": bool(engine.zero_offload_param()),
        "optimizer": type(engine.optimizer).__name__,
        "param_dtype": str(next(engine.module.parameters()).dtype),
        "state_dtypes": sorted({str(t.dtype) for t in state.values()}),
        "config": strategy.deepspeed_config(),
        "ranks": views,
    }


def train(
    strategy: Any, folder: str, divide: bool = True, optimizer_name: str = "sgd"
) -> dict[str, Any]:
    model = testing.reference_model()
    optimizer = OPTIMIZERS[optimizer_name](model.parameters())
    MODELS.append(weakref.ref(model))
    model, optimizer = strategy.setup(model, optimizer)
    _train_steps(strategy, model, optimizer, 2, divide)
    after_two = _params(strategy, model)
    path = Path(folder) / "deepspeed.ckpt"
    strategy.save_checkpoint({"model": model, "optimizer": optimizer, "step": 2}, path)
    _train_steps(strategy, model, optimizer, 1, divide)
    after_three = _params(strategy, model)
    remaining = strategy.load_checkpoint(path, state={"model": model, "optimizer": optimizer})
    restored = _params(strategy, model)
    _train_steps(strategy, model, optimizer, 1, divide)
    return {
        "after_two": after_two,
        "after_three": after_three,
        "restored": restored,
        "after_three_again": _params(strategy, model),
        "remaining": remaining,
        "checkpoint": str(path),
        "info": _engine_info(strategy),
    }


def resume(strategy: Any, checkpoint: str, optimizer_name: str = "sgd") -> dict[str, Any]:
    model = testing.reference_model(seed=5)
    MODELS.append(weakref.ref(model))
    optimizer = OTHER_OPTIMIZERS[optimizer_name](model.parameters())
    model, optimizer = strategy.setup(model, optimizer)
    remaining = strategy.load_checkpoint(checkpoint, state={"model": model, "optimizer": optimizer})
    loaded = _params(strategy, model)
    _train_steps(strategy, model, optimizer, 1, divide=True)
    return {
        "remaining": remaining,
        "loaded": loaded,
        "after_three": _params(strategy, model),
        "hyperparameters": {k: v for k, v in optimizer.param_groups[0].items() if k != "params"},
        "info": _engine_info(strategy),
    }


def _refusal(setup: Any) -> str:
    try:
        setup()
    except MisconfigurationError as exc:
        return str(exc)
    return "accepted"


def config_opt(strategy: Any) -> dict[str, Any]:
    model = testing.reference_model()
    MODELS.append(weakref.ref(model))
    both = _refusal(lambda: strategy.setup(model, torch.optim.SGD(model.parameters(), lr=0.1)))
    two = _refusal(
        lambda: strategy.setup(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
            torch.optim.SGD(model.parameters(), lr=0.1),
        )
    )
    engine = strategy.setup(model)
    _train_steps(strategy, engine, None, 3, divide=True)
    optimizer = strategy.optimizers[0]
    return {
        "both": both,
        "two": two,
        "returned_engine": engine is strategy.engine,
        "inner_optimizer": type(getattr(optimizer, "optimizer", optimizer)).__name__,
        "params": _params(strategy, engine),
        "info": _engine_info(strategy),
    }


class SpawnDeepSpeedStrategy(stratlib.DeepSpeedStrategy):
    """DeepSpeed with processes started by torch.multiprocessing."""

    launcher_class = SpawnLauncher


def _strategy(case: dict[str, Any]) -> Any:
    name: Any = SpawnDeepSpeedStrategy if case["scenario"] == "spawn" else case["strategy"]
    return stratlib.get_strategy(
        name, accelerator="cpu", devices=2, precision=case.get("precision"), **case["options"]
    )


def _launch(strategy: Any, case: dict[str, Any]) -> Any:
    function = {"train": train, "resume": resume, "config_opt": config_opt, "spawn": train}[
        case["scenario"]
    ]
    return strategy.launch(function, **case["args"])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=["train", "resume", "config_opt", "spawn", "cases"])
    parser.add_argument("strategy", nargs="?", default="-")
    parser.add_argument("--options", default="{}")
    parser.add_argument("--precision", default=None)
    parser.add_argument("--args", default="{}")
    parser.add_argument("--cases", default="[]")
    args = parser.parse_args()
    rank_zero = os.environ.get("LOCAL_RANK", "0") == "0"
    if args.scenario == "cases":
        # The launcher keeps the processes it started for every later launch of the script.
        for case in json.loads(args.cases):
            strategy = _strategy(case)
            result = _launch(strategy, case)
            result["optimizers_held"] = [type(held).__module__ for held in strategy.optimizers]
            del strategy  # it holds the user's model after its teardown, as it should
            gc.collect()
            result["models_alive"] = sum(model() is not None for model in MODELS)
            if rank_zero:
                report = {"case": case["case"], "result": result}
                print("RESULT " + json.dumps(report, default=str), flush=True)
        return 0
    case = {"scenario": args.scenario, "strategy": args.strategy, "precision": args.precision}
    case = {**case, "options": json.loads(args.options), "args": json.loads(args.args)}
    result = _launch(_strategy(case), case)
    if rank_zero and result is not None:
        print("RESULT " + json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
