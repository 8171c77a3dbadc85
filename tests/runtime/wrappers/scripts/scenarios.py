"""Scenarios for the sharded strategies, run for real on 2 CPU ranks over gloo.

Usage: ``python scenarios.py SCENARIO STRATEGY [--options JSON] [--precision P] ...``

The strategy's launcher starts this script again for rank 1 (or spawns it); rank 0 prints one
line ``RESULT <json>`` that the tests read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from stratcore.exceptions import MisconfigurationError
from stratcore.testing import (
    reference_batch,
    reference_model,
    shard,
)
from stratcore.testing import (
    scenarios as testing_scenarios,
)
from torch import nn

import stratlib

#: Dtypes seen inside ``RecordingLinear.forward`` in this process.
SEEN: list[dict[str, str]] = []


class RecordingLinear(nn.Linear):
    """A linear layer that records the dtypes its forward computation runs with."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        SEEN.append({"weight": str(self.weight.dtype), "input": str(x.dtype)})
        return super().forward(x)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(8, 16)
        self.act = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.inner(x))


def nested_model() -> nn.Module:
    """Block(Linear 8->16: 144 parameters), Linear 16->16 (272), Tanh, Linear 16->1 (17)."""
    torch.manual_seed(0)
    return nn.Sequential(Block(), RecordingLinear(16, 16), nn.Tanh(), nn.Linear(16, 1))


def _tensors(state: Any) -> Any:
    if isinstance(state, torch.Tensor):
        if hasattr(state, "full_tensor"):
            state = state.full_tensor()
        return state.detach().float().cpu().tolist()
    if isinstance(state, dict):
        return {str(k): _tensors(v) for k, v in state.items()}
    if isinstance(state, list | tuple):
        return [_tensors(v) for v in state]
    return state


def _batch(strategy: Any) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = reference_batch()
    rank, world = strategy.global_rank, strategy.world_size
    return shard(x, rank, world).to(strategy.root_device), shard(y, rank, world).to(
        strategy.root_device
    )


def _step(
    strategy: Any, model: nn.Module, optimizer: Any, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    output = model(x)
    loss = nn.functional.mse_loss(output.float(), y.float())
    strategy.backward(loss)
    strategy.optimizer_step(optimizer)
    return output


# --- fsdp ---------------------------------------------------------------------------------------


def fsdp_nested(strategy: Any, steps: int) -> dict[str, Any]:
    """Shard the nested model, train it, and report what FSDP did."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    model = nested_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    group_list = optimizer.param_groups[0]["params"]
    originals = list(model.parameters())
    model, optimizer = strategy.setup(model, optimizer)
    current = list(model.parameters())
    x, y = _batch(strategy)
    SEEN.clear()
    outputs = [str(_step(strategy, model, optimizer, x, y).dtype) for _ in range(steps)]
    offload = {
        name: type(module._get_fsdp_state()._fsdp_param_group.offload_policy).__name__  # type: ignore[operator]
        for name, module in model.named_modules()
        if isinstance(module, FSDPModule) and module._get_fsdp_state()._fsdp_param_group is not None  # type: ignore[operator]
    }
    state = strategy.get_module_state_dict(model)
    return {
        "wrapped": sorted(
            name for name, module in model.named_modules() if isinstance(module, FSDPModule)
        ),
        "dtensors": all(isinstance(p, DTensor) for p in current),
        "local_devices": sorted({p.to_local().device.type for p in current}),
        "sharded_dtypes": sorted({str(p.dtype) for p in current}),
        "rebound_in_place": optimizer.param_groups[0]["params"] is group_list,
        "optimizer_uses_model_parameters": all(
            a is b for a, b in zip(optimizer.param_groups[0]["params"], current, strict=True)
        ),
        "replaced": all(a is not b for a, b in zip(originals, current, strict=True)),
        "momentum_is_dtensor": all(
            isinstance(s["momentum_buffer"], DTensor) for s in optimizer.state.values()
        ),
        "seen": SEEN[0] if SEEN else None,
        "outputs": outputs,
        "offload": offload,
        "plugin": type(strategy.precision_plugin).__name__,
        "params": {k: _tensors(v) for k, v in state.items()},
    }


# --- resuming: consolidated optimizer state, and loading it on every rank --------------------


def resume(strategy: Any, steps: int, folder: str) -> dict[str, Any]:
    """Train ``steps`` steps, save, take 2 steps that the checkpoint must undo, load on every
    rank, and take 1 more step: the result must equal ``steps + 1`` steps of one process."""
    model = reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = strategy.setup(model, optimizer)
    x, y = _batch(strategy)
    for _ in range(steps):
        _step(strategy, model, optimizer, x, y)
    # Like torch's state_dict, the result may share tensors with the live state: keep a copy.
    consolidated = _tensors(strategy.get_optimizer_state(optimizer))
    path = Path(folder) / "resume.ckpt"
    strategy.save_checkpoint({"model": model, "optimizer": optimizer, "steps": steps}, path)
    others_empty = strategy.reduce_boolean_decision(strategy.global_rank == 0 or consolidated == {})
    for _ in range(2):
        _step(strategy, model, optimizer, x, y)
    remaining = strategy.load_checkpoint(path, state={"model": model, "optimizer": optimizer})
    _step(strategy, model, optimizer, x, y)
    return {
        "optimizer_class": type(optimizer).__name__,
        "consolidated": consolidated if strategy.global_rank == 0 else None,
        "others_empty": others_empty,
        "remaining": remaining,
        "params": [_tensors(v) for v in strategy.get_module_state_dict(model).values()],
    }


# --- fsdp setup errors --------------------------------------------------------------------------


def stale_optimizer(strategy: Any) -> dict[str, Any]:
    """An optimizer that already stepped cannot be rebound; setup must say so on every rank."""
    model = reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    nn.functional.mse_loss(model(torch.ones(2, 8)), torch.zeros(2, 1)).backward()
    optimizer.step()
    try:
        strategy.setup(model, optimizer)
    except MisconfigurationError as error:
        return {"error": str(error)}
    return {"error": None}


# --- ddp_sharded: an optimizer that stepped before setup ---------------------------------------


def warm_optimizer(strategy: Any, steps: int) -> dict[str, Any]:
    """One step in every process on the whole batch before setup, ``steps`` sharded steps
    after it: the OSS must start from the optimizer's momentum."""
    model = reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = reference_batch()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()
    model, optimizer = strategy.setup(model, optimizer)
    xs, ys = _batch(strategy)
    for _ in range(steps):
        _step(strategy, model, optimizer, xs, ys)
    return {"params": [_tensors(v) for v in strategy.get_module_state_dict(model).values()]}


# --- shutting down ----------------------------------------------------------------------------


def async_burst(strategy: Any, steps: int) -> str:
    """Train, then finish with many asynchronous collectives on tensors Python owns. gloo's
    worker threads release such tensors after the operations complete; the process must
    still exit cleanly."""
    import torch.distributed as dist

    model = reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = strategy.setup(model, optimizer)
    x, y = _batch(strategy)
    for _ in range(steps):
        _step(strategy, model, optimizer, x, y)
    for _ in range(3):
        tensors = [torch.full((1000,), float(i)) for i in range(200)]
        for handle in [dist.broadcast(t, 0, async_op=True) for t in tensors]:
            handle.wait()
    return "done"


class FailingLinear(nn.Linear):
    """Fails in its forward pass, after FSDP gathered the parameters of every group."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("deliberate failure in forward")


def interrupted(strategy: Any) -> None:
    """An exception in the middle of a forward pass must surface as itself."""
    model = nested_model()
    model[3] = FailingLinear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = strategy.setup(model, optimizer)
    x, y = _batch(strategy)
    _step(strategy, model, optimizer, x, y)


def interrupted_without_reset(strategy: Any) -> None:
    """'interrupted' on an FSDPModule without ``reset_iter_state``, as torch 2.11's is: this
    torch's method is removed in this process, the rest of FSDP2 left as it is."""
    from torch.distributed.fsdp import FSDPModule

    if hasattr(FSDPModule, "reset_iter_state"):
        delattr(FSDPModule, "reset_iter_state")
    interrupted(strategy)


SCENARIOS = {
    # stratcore.testing's training scenario, which the generated tests run
    "train": testing_scenarios.train,
    "fsdp_nested": fsdp_nested,
    "resume": resume,
    "stale_optimizer": stale_optimizer,
    "interrupted": interrupted,
    "interrupted_without_reset": interrupted_without_reset,
    "warm_optimizer": warm_optimizer,
    "async_burst": async_burst,
}


def run(
    scenario: str,
    strategy_name: str,
    options: dict[str, Any],
    precision: str | None = None,
    steps: int = 3,
    folder: str = ".",
) -> Any:
    """Launch ``scenario`` with the strategy; rank 0's result (None on other ranks)."""
    strategy = stratlib.get_strategy(
        strategy_name, accelerator="cpu", devices=2, precision=precision, **options
    )
    function = SCENARIOS[scenario]
    if scenario in ("train", "fsdp_nested", "warm_optimizer", "async_burst"):
        return strategy.launch(function, steps)
    if scenario == "resume":
        return strategy.launch(function, steps, folder)
    return strategy.launch(function)


def main() -> int:
    """``scenarios.py SCENARIO STRATEGY [--options JSON] ...`` runs one scenario and prints
    ``RESULT <json>``; ``scenarios.py batch JSON`` runs every scenario of a JSON list of runs
    (the keyword arguments of ``run``) one after the other in the same processes (the script's
    launches share them), and prints ``RESULT <index> <json>`` after each."""
    rank_zero = os.environ.get("RANK", "0") == "0" and os.environ.get("LOCAL_RANK", "0") == "0"
    if sys.argv[1:2] == ["batch"]:
        for index, request in enumerate(json.loads(sys.argv[2])):
            result = run(**request)
            if rank_zero:
                print(f"RESULT {index} " + json.dumps(result), flush=True)
        return 0
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("strategy")
    parser.add_argument("--options", default="{}")
    parser.add_argument("--precision", default=None)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--folder", default=".")
    args = parser.parse_args()
    options = json.loads(args.options)
    result = run(args.scenario, args.strategy, options, args.precision, args.steps, args.folder)
    if rank_zero:
        print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
