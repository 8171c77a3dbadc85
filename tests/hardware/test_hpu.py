"""HPU support, defined by specs/hpu.yaml alone.

No Habana device or software exists here. The HCCL rules are exercised for real on two gloo
processes; the strategies' control flow runs against a CPU stand-in of ``habana_frameworks``
(tests/hardware/standins) whose calls are recorded. The stand-in is not Habana's software:
it proves the order of calls, not that Gaudi hardware trains.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from stratcore.testing import assert_parameters_close, reference_parameters

from stratlib import HPUAccelerator, HPUParallelStrategy
from stratlib.backends import GLOO, HCCL

from .support import run_script

# --- the HCCL capability table, on two real gloo processes ------------------------------------

HCCL_SCRIPT = """
import json
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from stratlib.backends import GLOO, HCCL
from stratcore import collectives
from stratcore.exceptions import MisconfigurationError

BACKENDS = {"hccl": HCCL, "gloo": GLOO}


def reductions(backend, rank, calls):
    calls.clear()
    out = {}
    mean = collectives.all_reduce(torch.tensor([float(rank + 1), 10.0 * rank]), "mean", backend)
    out["mean"] = [mean.tolist(), str(mean.dtype)]
    small = collectives.all_reduce(torch.tensor([rank + 1, -rank]), "sum", backend)
    out["int_sum"] = [small.tolist(), str(small.dtype)]
    large = collectives.all_reduce(torch.tensor([2**40 + rank]), "sum", backend)
    out["large_int_sum"] = [large.tolist(), str(large.dtype)]
    int_mean = collectives.all_reduce(torch.tensor([rank + 2]), "avg", backend)
    out["int_mean"] = [int_mean.tolist(), str(int_mean.dtype)]
    out["max"] = collectives.all_reduce(torch.tensor([float(rank)]), "max", backend).tolist()
    try:
        collectives.all_reduce(torch.tensor([2.0]), "product", backend)
        out["product"] = "reduced"
    except MisconfigurationError as exc:
        out["product"] = str(exc)
    out["calls"] = list(calls)
    return out


def worker(rank, port, results):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    calls = []
    real_all_reduce = dist.all_reduce

    def recording_all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        calls.append([str(op).rsplit(".", 1)[-1], str(tensor.dtype)])
        return real_all_reduce(tensor, op=op, group=group, async_op=async_op)

    dist.all_reduce = recording_all_reduce
    out = {name: reductions(backend, rank, calls) for name, backend in BACKENDS.items()}
    dist.destroy_process_group()
    if rank == 0:
        results.put(out)


if __name__ == "__main__":
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    results = mp.get_context("fork").SimpleQueue()
    mp.start_processes(worker, args=(port, results), nprocs=2, start_method="fork")
    print("RESULT " + json.dumps(results.get()))
"""


#: The module's job (its module-scoped fixture) runs once: its tests share one pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("hpu")


@pytest.fixture(scope="module")
def two_rank_reductions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every reduction of the script, with each backend's table, from rank 0 of two."""
    return run_script(tmp_path_factory.mktemp("hccl"), HCCL_SCRIPT).check().result


def test_hccl_capabilities_come_from_the_spec() -> None:
    assert HCCL.name == "hccl"
    assert HCCL.reduce_ops == frozenset({"sum", "min", "max"})
    assert HCCL.cast_for(torch.int64) is torch.float32
    assert HCCL.cast_for(torch.float32) is None
    assert HCCL.init_hook == "habana_frameworks.torch.distributed.hccl:initialize_distributed_hpu"
    assert HPUAccelerator.backend is HCCL
    assert HPUParallelStrategy.backend is HCCL


def test_hccl_rules_on_two_gloo_ranks(two_rank_reductions: dict[str, Any]) -> None:
    """HCCL's table, applied by stratcore.collectives to real reductions: no native mean
    (a sum divided by the world size), int64 reduced as float32 and cast back."""
    result = two_rank_reductions["hccl"]
    assert result["mean"] == [[1.5, 5.0], "torch.float32"]
    assert result["int_sum"] == [[3, -1], "torch.int64"]
    assert result["int_mean"] == [[2.5], "torch.float32"]
    assert result["max"] == [1.0]
    # float32 cannot hold 2**40 + 1: the sum went through float32, as HCCL requires.
    assert result["large_int_sum"] == [[2**41], "torch.int64"]
    assert "backend 'hccl' cannot reduce with 'product'" in result["product"]
    # What reached torch.distributed: only sums and maxima, never a mean, never int64.
    assert result["calls"] == [
        ["SUM", "torch.float32"],
        ["SUM", "torch.float32"],
        ["SUM", "torch.float32"],
        ["SUM", "torch.float32"],
        ["MAX", "torch.float32"],
    ]


def test_gloo_table_reduces_natively_for_contrast(two_rank_reductions: dict[str, Any]) -> None:
    """The same reductions with gloo's table: mean and int64 reach torch.distributed as they are."""
    assert GLOO.reduce_ops >= {"mean", "product"}
    result = two_rank_reductions["gloo"]
    assert result["large_int_sum"] == [[2**41 + 1], "torch.int64"]
    assert result["product"] == "reduced"
    assert result["calls"][0] == ["AVG", "torch.float32"]
    assert result["calls"][1] == ["SUM", "torch.int64"]


# --- the strategies' control flow, on a stand-in of habana_frameworks ---------------------------

TRAIN_SCRIPT = """
import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

import standin_events
import stratlib
from stratlib import HPUAccelerator
from stratcore import testing
from stratcore.exceptions import MisconfigurationError


class CPUStandInHPU(HPUAccelerator):
    # The generated HPUAccelerator (probes, step hooks, HCCL), placing tensors on the CPU.
    device_type = "cpu"


real_all_reduce = dist.all_reduce


def recording_all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
    standin_events.record("all_reduce", op=str(op).rsplit(".", 1)[-1], dtype=str(tensor.dtype))
    return real_all_reduce(tensor, op=op, group=group, async_op=async_op)


dist.all_reduce = recording_all_reduce


def train(strategy, steps):
    backend = dist.get_backend() if dist.is_initialized() else None
    standin_events.record("rank", rank=strategy.global_rank, backend=backend)
    model = testing.reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = strategy.setup(model, optimizer)
    first = next(strategy.unwrap(model).parameters())
    first.register_hook(lambda grad: standin_events.record("backward"))
    optimizer.register_step_post_hook(lambda *_: standin_events.record("optimizer.step"))
    x, y = testing.reference_batch()
    rank, world = strategy.global_rank, strategy.world_size
    xs, ys = testing.shard(x, rank, world), testing.shard(y, rank, world)
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(xs), ys)
        strategy.backward(loss)
        strategy.optimizer_step(optimizer)
    standin_events.record("collectives")
    out = {
        "params": [t.tolist() for t in strategy.get_module_state_dict(model).values()],
        "world_size": world,
        "mean": strategy.reduce(torch.tensor(float(rank + 1)), reduce_op="mean").item(),
        "int_sum": strategy.reduce(torch.tensor(rank + 1), reduce_op="sum").tolist(),
        "any_rank0": strategy.reduce_boolean_decision(rank == 0, all=False),
    }
    try:
        strategy.reduce(torch.tensor(1.0), reduce_op="product")
    except MisconfigurationError as exc:
        out["product"] = str(exc)
    return out


if __name__ == "__main__":
    name, devices = sys.argv[1], int(sys.argv[2])
    accelerator = CPUStandInHPU()
    strategy = stratlib.get_strategy(name, accelerator=accelerator, devices=devices, precision="32-true")
    result = strategy.launch(train, 3)
    unasked = stratlib.get_strategy(name, accelerator=CPUStandInHPU(), devices=devices)
    result["precision_unasked"] = unasked.precision_plugin.precision
    result["devices"] = [str(d) for d in HPUAccelerator.get_parallel_devices(HPUAccelerator.parse_devices(2))]
    for bad in ([0, 1], 3):
        try:
            HPUAccelerator.parse_devices(bad)
        except MisconfigurationError as exc:
            result.setdefault("device_errors", []).append(str(exc))
    if os.environ.get("LOCAL_RANK", "0") == "0":
        print("RESULT " + json.dumps(result))
"""

STEP = ["backward", "mark_step", "optimizer.step", "mark_step"]


def test_hpu_parallel_on_a_cpu_stand_in(tmp_path: Path) -> None:
    """hpu_parallel through get_strategy on two processes, with a stand-in habana_frameworks:
    HCCL's init hook runs before the process group exists, the process group is 'hccl' (gloo
    underneath), mark_step follows every backward and every optimizer step, and training
    equals one process on the whole batch."""
    run = run_script(
        tmp_path, TRAIN_SCRIPT, standins=("habana_frameworks",), args=("hpu_parallel", "2")
    ).check()
    result = run.result
    assert result["world_size"] == 2
    # specs/hpu.yaml: HPUs train in bf16-mixed unless another precision is asked for.
    assert result["precision_unasked"] == "bf16-mixed"
    assert_parameters_close(result["params"], reference_parameters(steps=3))
    assert len(run.pids()) == 2
    for pid in run.pids():
        events = [e["event"] for e in run.events if e["pid"] == pid]
        assert events[0] == "initialize_distributed_hpu"
        (init,) = run.named("initialize_distributed_hpu", pid=pid)
        assert init["process_group_exists"] is False
        (rank,) = run.named("rank", pid=pid)
        assert rank["backend"] == "hccl"
        steps = [e["event"] for e in run.named("backward", "mark_step", "optimizer.step", pid=pid)]
        assert steps == STEP * 3
        # HCCL's table shaped every reduction the strategy made after training.
        after = events[events.index("collectives") :]
        reductions = [(e["op"], e["dtype"]) for e in run.named("all_reduce", pid=pid)]
        assert after.count("all_reduce") == len(reductions) == 3
        assert set(reductions) == {("SUM", "torch.float32")}
    assert result["mean"] == 1.5
    assert result["int_sum"] == 3
    assert result["any_rank0"] is True
    assert "backend 'hccl' cannot reduce with 'product'" in result["product"]
    assert result["devices"] == ["hpu", "hpu"]
    assert "not addressed by index" in result["device_errors"][0]
    assert "more hpu devices than the 2 present" in result["device_errors"][1]


def test_hpu_single_on_a_cpu_stand_in(tmp_path: Path) -> None:
    """hpu_single: one process, no process group, mark_step after backward and optimizer step."""
    run = run_script(
        tmp_path, TRAIN_SCRIPT, standins=("habana_frameworks",), args=("hpu_single", "1")
    ).check()
    assert run.result["world_size"] == 1
    # specs/hpu.yaml: HPUs train in bf16-mixed unless another precision is asked for.
    assert run.result["precision_unasked"] == "bf16-mixed"
    assert_parameters_close(run.result["params"], reference_parameters(steps=3))
    assert run.named("initialize_distributed_hpu") == []
    steps = [e["event"] for e in run.named("backward", "mark_step", "optimizer.step")]
    assert steps == STEP * 3


def test_hpu_defaults_and_errors_without_habana() -> None:
    assert HPUAccelerator.default_precision == "bf16-mixed"
    assert HPUAccelerator.visible_devices_env == "HABANA_VISIBLE_MODULES"
    assert HPUAccelerator.indexed is False
    assert not HPUAccelerator.is_available()
    import stratlib

    with pytest.raises(
        stratlib.MissingDependencyError,
        match=r"'habana_frameworks\.torch'.*pip install habana-torch-plugin",
    ):
        stratlib.get_strategy("hpu_parallel", accelerator="hpu", devices=2)
    with pytest.raises(
        stratlib.MisconfigurationError, match="runs on hpu, and none of them is available"
    ):
        stratlib.get_strategy("hpu_single")
