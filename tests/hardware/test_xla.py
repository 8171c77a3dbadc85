"""TPU / XLA support, defined by specs/xla.yaml and core/wrappers/xla.py.

torch_xla needs its own torch release and TPUs. The launcher, the strategies and the precision
plugins run here against a CPU stand-in of ``torch_xla`` (tests/hardware/standins): its spawn
starts CPU processes with torch.multiprocessing, its 'xla' process group is gloo, and every
call is recorded. It is not PyTorch/XLA.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from stratcore.testing import assert_parameters_close, reference_parameters

import stratlib
from stratlib import SingleTPUStrategy, TPUAccelerator, TPUSpawnStrategy, XLAEnvironment

from .support import run_script

SCRIPT = """
import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

import standin_events
import stratlib
from stratlib import TPUAccelerator, TPUBf16PrecisionPlugin, TPUPrecisionPlugin
from stratcore import testing
from stratcore.exceptions import MisconfigurationError


class CPUStandInTPU(TPUAccelerator):
    # The generated TPUAccelerator (probes, mark_step hook, XLA backend), on CPU tensors.
    device_type = "cpu"


def train(strategy, steps, folder):
    rank, world = strategy.global_rank, strategy.world_size
    standin_events.record("rank", rank=rank, world_size=world, local_rank=strategy.local_rank)
    # Rank 1 starts elsewhere: only sync_module_states makes the replicas agree.
    model = testing.reference_model(seed=0 if rank == 0 else 7)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = strategy.setup(model, optimizer)
    optimizer.register_step_post_hook(lambda *_: standin_events.record("optimizer.step"))
    x, y = testing.reference_batch()
    xs, ys = testing.shard(x, rank, world), testing.shard(y, rank, world)
    for _ in range(steps):
        strategy.backward(nn.functional.mse_loss(model(xs), ys))
        strategy.optimizer_step(optimizer)
    strategy.save_checkpoint({"model": model, "step": steps}, os.path.join(folder, "last.ckpt"))
    return {
        "params": [t.tolist() for t in strategy.get_module_state_dict(model).values()],
        "world_size": world,
        "backend": dist.get_backend() if dist.is_initialized() else None,
        "mean": strategy.reduce(torch.tensor(float(rank + 1)), reduce_op="mean").item(),
        "broadcast": strategy.broadcast({"from": rank}),
        "model_type": type(model).__name__,
    }


def spawn_arguments(devices):
    strategy = stratlib.get_strategy("tpu_spawn", accelerator=CPUStandInTPU(), devices=devices, precision="32-true")
    try:
        return strategy.launcher.spawn_arguments()
    except MisconfigurationError as exc:
        return str(exc)


def bf16():
    before = os.environ.get("XLA_USE_BF16")
    plugin = TPUBf16PrecisionPlugin("bf16-true")
    during = os.environ.get("XLA_USE_BF16")
    module = plugin.convert_module(nn.Linear(2, 2))
    converted = plugin.convert_input((torch.ones(2), torch.ones(2, dtype=torch.int64)))
    plugin.teardown()
    full = TPUPrecisionPlugin("32-true")
    chosen = stratlib.get_strategy("single_tpu", accelerator=CPUStandInTPU(), devices=1, precision="bf16-true")
    chosen_during = os.environ.get("XLA_USE_BF16")
    chosen.precision_plugin.teardown()
    return {
        "before": before,
        "during": during,
        "after": os.environ.get("XLA_USE_BF16"),
        "module_dtype": str(module.weight.dtype),
        "input_dtypes": [str(t.dtype) for t in converted],
        "full_precision_sets": os.environ.get("XLA_USE_BF16"),
        "full_module_dtype": str(full.convert_module(nn.Linear(2, 2)).weight.dtype),
        "selected": type(chosen.precision_plugin).__name__,
        "selected_sets": chosen_during,
        "selected_after": os.environ.get("XLA_USE_BF16"),
    }


if __name__ == "__main__":
    mode, folder = sys.argv[1], os.getcwd()
    if mode == "spawn":
        strategy = stratlib.get_strategy("tpu_spawn", accelerator=CPUStandInTPU(), devices=2, precision="32-true")
        result = strategy.launch(train, 3, folder)
        result["checkpoint"] = sorted(torch.load(os.path.join(folder, "last.ckpt"), map_location="cpu"))
    elif mode == "single":
        strategy = stratlib.get_strategy("single_xla", accelerator=CPUStandInTPU(), devices=1, precision="32-true")
        result = strategy.launch(train, 3, folder)
    elif mode == "arguments":
        result = {str(devices): spawn_arguments(devices) for devices in (1, 4, 2)}
    else:
        result = bf16()
    print("RESULT " + json.dumps(result))
"""


def test_tpu_spawn_on_a_cpu_stand_in(tmp_path: Path) -> None:
    """tpu_spawn through get_strategy: the xla launcher hands a picklable worker to xmp.spawn
    (fork, every device), each process takes its rank from the XLA runtime, joins the 'xla'
    process group through 'xla://', starts from rank 0's parameters, averages gradients
    before each optimizer step and marks the step after it; rank 0's result comes back."""
    run = run_script(tmp_path, SCRIPT, standins=("torch_xla",), args=("spawn",)).check()
    result = run.result
    assert_parameters_close(result["params"], reference_parameters(steps=3))
    assert result["world_size"] == 2
    assert result["backend"] == "xla"
    assert result["mean"] == 1.5
    assert result["broadcast"] == {"from": 0}
    assert result["model_type"] == "Sequential"  # the model is not wrapped
    assert result["checkpoint"] == ["model", "step"]
    (spawn,) = run.named("spawn")
    assert spawn == {
        "pid": spawn["pid"],
        "event": "spawn",
        "nprocs": None,
        "start_method": "fork",
        "function": "_xla_worker",
    }
    workers = [pid for pid in run.pids() if pid != spawn["pid"]]
    assert len(workers) == 2
    ranks = sorted((e["rank"], e["local_rank"], e["world_size"]) for e in run.named("rank"))
    assert ranks == [(0, 0, 2), (1, 1, 2)]
    for pid in workers:
        assert [e["url"] for e in run.named("xla_rendezvous", pid=pid)] == ["xla://"]
        assert len(run.named("broadcast_master_param", pid=pid)) == 1
        steps = [
            e["event"]
            for e in run.named("reduce_gradients", "optimizer.step", "mark_step", pid=pid)
        ]
        assert steps == ["reduce_gradients", "optimizer.step", "mark_step"] * 3
        tags = [e["tag"] for e in run.named("rendezvous", pid=pid)]
        assert tags == ["save_checkpoint", "teardown"]
        # torch_xla ends its processes without atexit handlers: the worker itself destroys
        # the process group, or gloo's threads meet the process's end.
        assert [e["process_group_alive"] for e in run.named("process_end", pid=pid)] == [False]


def test_single_tpu_on_a_cpu_stand_in(tmp_path: Path) -> None:
    """single_xla (alias of single_tpu): no processes, no process group, no gradient averaging,
    mark_step after every optimizer step."""
    run = run_script(tmp_path, SCRIPT, standins=("torch_xla",), args=("single",)).check()
    assert_parameters_close(run.result["params"], reference_parameters(steps=3))
    assert run.result["backend"] is None
    assert run.named("spawn", "xla_rendezvous", "reduce_gradients", "broadcast_master_param") == []
    assert [e["event"] for e in run.named("optimizer.step", "mark_step")] == [
        "optimizer.step",
        "mark_step",
    ] * 3


def test_xla_launcher_spawn_arguments(tmp_path: Path) -> None:
    """torch_xla starts one process or one per device of the host, nothing in between."""
    run = run_script(
        tmp_path,
        SCRIPT,
        standins=("torch_xla",),
        args=("arguments",),
        env={"STANDIN_TPU_DEVICES": "4"},
    )
    result = run.check().result
    assert result["1"] == {"nprocs": 1, "start_method": "fork"}
    assert result["4"] == {"nprocs": None, "start_method": "fork"}
    assert (
        result["2"]
        == "devices=2: torch_xla starts one process or one per device; use devices=1 or devices=4"
    )


def test_tpu_bf16_plugin_sets_and_restores_xla_use_bf16(tmp_path: Path) -> None:
    run = run_script(tmp_path, SCRIPT, standins=("torch_xla",), args=("bf16",)).check()
    assert run.result == {
        "before": None,
        "during": "1",
        "after": None,
        "module_dtype": "torch.bfloat16",
        "input_dtypes": ["torch.bfloat16", "torch.int64"],
        "full_precision_sets": None,
        "full_module_dtype": "torch.float32",
        "selected": "TPUBf16PrecisionPlugin",
        "selected_sets": "1",
        "selected_after": None,
    }


def test_xla_facts_without_torch_xla() -> None:
    assert TPUAccelerator.device_type == "xla"
    assert TPUAccelerator.backend.name == "xla"
    assert "mean" not in TPUAccelerator.backend.reduce_ops
    assert TPUAccelerator.after_optimizer_step_hook == "torch_xla.core.xla_model:mark_step"
    assert TPUSpawnStrategy.launcher_class.name == "xla"
    assert SingleTPUStrategy.launcher_class.name == "none"
    assert XLAEnvironment.settable is True
    assert not TPUAccelerator.is_available()
    with pytest.raises(
        stratlib.MissingDependencyError, match=r"'torch_xla'.*torch_xla\[tpu\]~=2\.9\.0"
    ):
        stratlib.get_strategy("xla", accelerator="tpu", devices=8)
    with pytest.raises(stratlib.MisconfigurationError, match="start_method='forkserver'"):
        stratlib.get_strategy("tpu_spawn", accelerator="tpu", start_method="forkserver")
