"""fairscale's FullyShardedDataParallel as DDPFullyShardedStrategy builds it, on 2 CPU ranks.

fairscale's FSDP can be constructed on the CPU, but its forward pass and its state-dict
gathering need CUDA streams (they fail with KeyError 'all_gather' without CUDA). This script
therefore exercises, with the real fairscale class and a real gloo process group, everything
that needs no forward pass: the wrapping the strategy performs, the flags it passes, the
optimizer it rebuilds, and gathering and loading optimizer state (after a step on gradients
set by hand). Only the module state-dict calls, which summon full parameters on CUDA streams,
are checked with recording stand-ins on the real wrapped instance.

Started once per rank with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set; rank 0 prints
``RESULT <json>``. A rank whose process groups outlive the release at exit (fairscale caches
the ones it makes) fails with exit code 3 (``group_release``).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import group_release
import torch
import torch.distributed as dist
from stratcore.exceptions import MisconfigurationError
from stratcore.process_group import creating_process_group
from torch import nn

import stratlib
from stratlib.registry import REGISTRY


def nested_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Sequential(nn.Linear(8, 16), nn.Tanh()), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1)
    )


def build(**options: Any) -> Any:
    precision = options.pop("precision", "32-true")
    accelerator = stratlib.CPUAccelerator()
    plugin = REGISTRY.select_precision_plugin(
        stratlib.DDPFullyShardedStrategy, accelerator, precision
    )
    return stratlib.DDPFullyShardedStrategy(
        accelerator=accelerator,
        parallel_devices=[torch.device("cpu")] * 2,
        precision_plugin=plugin,
        **options,
    )


def describe(wrapped: nn.Module) -> list[dict[str, Any]]:
    from fairscale.nn import FullyShardedDataParallel

    return [
        {
            "name": name,
            "mixed_precision": module.mixed_precision,
            "compute_dtype": str(module.compute_dtype),
            "fp32_reduce_scatter": module.fp32_reduce_scatter,
            "move_params_to_cpu": module.move_params_to_cpu,
            "reshard_after_forward": module.reshard_after_forward,
            "compute_device": str(module.compute_device),
        }
        for name, module in wrapped.named_modules()
        if isinstance(module, FullyShardedDataParallel)
    ]


def wrapping() -> dict[str, Any]:
    result: dict[str, Any] = {}
    for label, options in {
        "plain": {},
        "auto_wrap": {"auto_wrap_min_params": 200},
        "bf16_offload": {
            "precision": "bf16-mixed",
            "cpu_offload": True,
            "reshard_after_forward": False,
        },
    }.items():
        strategy = build(**options)
        model = nested_model()
        total = sum(p.numel() for p in model.parameters())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5, nesterov=True)
        wrapped, (rebuilt,) = strategy.setup_module_and_optimizers(model, [optimizer])
        flat = list(wrapped.parameters())
        result[label] = {
            "instances": describe(wrapped),
            "optimizer": type(rebuilt).__name__,
            "new_optimizer": rebuilt is not optimizer,
            "hyper_parameters": {
                k: rebuilt.param_groups[0][k] for k in ("lr", "momentum", "nesterov")
            },
            "optimizer_params_are_flat": [id(p) for p in rebuilt.param_groups[0]["params"]]
            == [id(p) for p in flat],
            # Each rank holds half of every flat parameter (padded to an even size).
            "shard_fraction": sum(p.numel() for p in flat) / total,
        }
    return result


def refusals() -> dict[str, str]:
    strategy = build()
    messages = {}
    model = nested_model()
    two_groups = torch.optim.SGD(
        [{"params": model[1].parameters()}, {"params": model[3].parameters()}], lr=0.1
    )
    partial = torch.optim.SGD(model[1].parameters(), lr=0.1)
    for label, optimizer in {"two_groups": two_groups, "partial": partial}.items():
        try:
            strategy.setup_module_and_optimizers(
                nested_model() if label == "partial" else model, [optimizer]
            )
        except MisconfigurationError as error:
            messages[label] = str(error)
    return messages


class Recorder:
    """Stands in for a CUDA-only method of the wrapped instance and records its calls."""

    def __init__(self, result: Any) -> None:
        self.result = result
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        return self.result


def state_round_trip() -> dict[str, Any]:
    """Optimizer state: gathered on rank 0 and loaded back on every rank, with fairscale's real
    methods (a step needs no forward pass when the gradients are set by hand)."""
    strategy = build()
    model = nested_model()
    shapes = [list(p.shape) for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    wrapped, (rebuilt,) = strategy.setup_module_and_optimizers(model, [optimizer])
    strategy.model = wrapped
    for flat in wrapped.parameters():
        flat.grad = torch.full_like(flat, float(dist.get_rank() + 1))
    rebuilt.step()
    local_before = [s["momentum_buffer"].clone() for s in rebuilt.state.values()]
    gathered = strategy.get_optimizer_state(rebuilt)
    shared: list[Any] = [gathered]
    dist.broadcast_object_list(shared, src=0)
    full = shared[0]
    for state in rebuilt.state.values():
        state["momentum_buffer"].zero_()
    strategy.load_optimizer_state_dict(rebuilt, full)
    local_after = [s["momentum_buffer"] for s in rebuilt.state.values()]
    # The last rank's shard ends in padding, which the full state does not carry.
    last = dist.get_rank() == dist.get_world_size() - 1
    padding = [wrapped.numel_padded_per_param[i] if last else 0 for i in range(len(local_after))]
    restored = all(
        torch.equal(a[: a.numel() - pad], b[: b.numel() - pad])
        for a, b, pad in zip(local_before, local_after, padding, strict=True)
    )
    return {
        "gathered_here": sorted(gathered),
        "full_shapes": [
            list(state["momentum_buffer"].shape) for _, state in sorted(full["state"].items())
        ],
        "param_shapes": shapes,
        # Rank r's shard was stepped with gradients r + 1.
        "full_values": [
            sorted({float(v) for v in state["momentum_buffer"].flatten()})
            for _, state in sorted(full["state"].items())
        ],
        "caller_mapping_kept": all(len(state) > 0 for state in full["state"].values()),
        "restored": restored,
        "padding": padding,
    }


def module_state_calls() -> dict[str, Any]:
    """Module state: FullyShardedDataParallel.state_dict and load_state_dict summon the full
    parameters on CUDA streams, so recording stand-ins take their place on the real instance."""
    strategy = build()
    wrapped, _ = strategy.setup_module_and_optimizers(nested_model(), [])
    full = {"0.0.weight": torch.zeros(16, 8)}
    wrapped.state_dict = Recorder(full)  # type: ignore[method-assign]
    wrapped.load_state_dict = Recorder(None)  # type: ignore[method-assign]
    returned = strategy.get_module_state_dict(wrapped)
    strategy.load_module_state_dict(wrapped, full, strict=False)
    return {
        "state_dict_calls": len(wrapped.state_dict.calls),  # type: ignore[attr-defined]
        "returned": sorted(returned),
        "load_calls": [
            [sorted(args[0]), kwargs] for args, kwargs in wrapped.load_state_dict.calls  # type: ignore[attr-defined]
        ],
    }


def main() -> int:
    # As the strategy itself would create it: fairscale.optim, whose functions take the group
    # as a default argument, is imported first, else the group outlives destroy_process_group
    # and gloo's threads can abort the process at exit.
    group_release.check_at_exit()  # before the group exists: it runs after the release
    with creating_process_group(stratlib.DDPFullyShardedStrategy.group_default_modules):
        dist.init_process_group("gloo")
    try:
        mine = {
            "wrapping": wrapping(),
            "refusals": refusals(),
            "optimizer_state": state_round_trip(),
            "module_state": module_state_calls(),
        }
        every_rank: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(every_rank, mine)
    finally:
        dist.destroy_process_group()
    if os.environ["RANK"] == "0":
        print("RESULT " + json.dumps(every_rank), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
