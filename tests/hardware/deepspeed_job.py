"""DeepSpeed on a generated DeepSpeed accelerator, in each process torchrun starts.

``python -m torch.distributed.run --nproc-per-node 2 deepspeed_job.py <package> <Accelerator>
[<strategy>]``: the generated class ``<package>.deepspeed.<Accelerator>`` is installed before
DeepSpeed is imported, as a user's script does; then ZeRO stages 1, 2 and 3 train the reference
problem through ``deepspeed.initialize`` (an SGD optimizer, each rank on its half of the
batch), and, given a strategy, through ``<package>.get_strategy("<strategy>_stage_<n>")``.
Rank 0 prints one ``CASE <name> <json>`` line per case: the parameters after training, or the
error; what DeepSpeed ran on is the ``facts`` case. A process whose groups outlive the
generated accelerator's release at exit fails with code 3 (``group_release``).
"""

from __future__ import annotations

import functools
import importlib
import json
import sys
import traceback
from collections.abc import Callable
from typing import Any

import group_release
import torch
import torch.distributed as dist
from stratcore import testing
from torch import nn

PACKAGE, ACCELERATOR = sys.argv[1], sys.argv[2]
STRATEGY = sys.argv[3] if len(sys.argv) > 3 else None
STEPS = 3
STAGES = (1, 2, 3)

group_release.check_at_exit()  # before the generated accelerator arranges the release
package = importlib.import_module(PACKAGE)
generated = getattr(importlib.import_module(f"{PACKAGE}.deepspeed"), ACCELERATOR)
generated.install()  # before DeepSpeed is imported: its op builders are bound then

import deepspeed  # noqa: E402
from deepspeed.accelerator import get_accelerator  # noqa: E402


def my_half(rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = testing.reference_batch()
    return testing.shard(x, rank, world), testing.shard(y, rank, world)


def by_hand(stage: int) -> list[Any]:
    """ZeRO ``stage`` through ``deepspeed.initialize`` alone."""
    model = testing.reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    config = {
        "train_micro_batch_size_per_gpu": testing.BATCH // 2,
        "zero_optimization": {"stage": stage},
        "gradient_clipping": 0.0,
        "zero_allow_untested_optimizer": True,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    x, y = (t.to(engine.device) for t in my_half(dist.get_rank(), dist.get_world_size()))
    for _ in range(STEPS):
        engine.backward(nn.functional.mse_loss(engine(x), y))
        engine.step()
    parameters = list(engine.module.parameters())
    with deepspeed.zero.GatheredParameters(parameters):  # stage 3 holds partitions
        trained = [p.detach().cpu().tolist() for p in parameters]
    engine.destroy()
    return trained


def through_strategy(stage: int) -> list[Any]:
    """ZeRO ``stage`` through the package's DeepSpeed strategy of the device."""
    strategy = package.get_strategy(f"{STRATEGY}_stage_{stage}", devices=2)

    def train(strategy: Any) -> list[Any]:
        model = testing.reference_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = strategy.setup(model, optimizer)
        x, y = my_half(strategy.global_rank, strategy.world_size)
        x, y = x.to(strategy.root_device), y.to(strategy.root_device)
        for _ in range(STEPS):
            strategy.backward(nn.functional.mse_loss(model(x), y))
            strategy.optimizer_step(optimizer)
        return [t.tolist() for t in strategy.get_module_state_dict(model).values()]

    trained: list[Any] = strategy.launch(train)
    strategy.teardown()
    return trained


def facts() -> dict[str, Any]:
    """What DeepSpeed ran on."""
    from deepspeed.ops import op_builder

    accelerator = get_accelerator()
    return {
        "accelerator": type(accelerator).__name__,
        "device_name": accelerator.current_device_name(),
        "backend": dist.get_backend(),
        "fused_adam_builder": op_builder.FusedAdamBuilder.__module__,
    }


def report(name: str, case: Callable[[], Any]) -> None:
    try:
        outcome: dict[str, Any] = {"result": case()}
    except Exception:  # reported, and the next case runs
        outcome = {"error": traceback.format_exc()}
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(f"CASE {name} {json.dumps(outcome)}", flush=True)


for stage in STAGES:
    report(f"by_hand_stage_{stage}", functools.partial(by_hand, stage))
report("facts", facts)
if STRATEGY is not None:
    for stage in STAGES:
        report(f"{STRATEGY}_stage_{stage}", functools.partial(through_strategy, stage))
