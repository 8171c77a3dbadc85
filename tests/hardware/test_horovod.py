"""Horovod support, defined by specs/horovod.yaml and core/wrappers/horovod.py.

Horovod does not build against this torch. HorovodStrategyBase's control flow and the horovodrun
launcher run here against a one-process stand-in of ``horovod.torch`` (tests/hardware/standins)
that records each call; it is not Horovod and communicates with nobody.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from stratcore.testing import assert_parameters_close, reference_parameters
from stratcore.wrappers.horovod import HOROVOD_OPS, horovodrun_command

import stratlib
from stratlib import HorovodEnvironment, HorovodStrategy

from .support import run_script

SCRIPT = """
import json
import os
import sys

import torch
from torch import nn

import stratlib
from stratcore import testing
from stratcore.exceptions import MisconfigurationError


def train(strategy, steps):
    model = testing.reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = strategy.setup(model, optimizer)
    x, y = testing.reference_batch()
    for step in range(steps):
        loss = nn.functional.mse_loss(model(x), y)
        strategy.backward(loss)
        if step == 1:
            strategy.clip_gradients(model, optimizer, max_norm=1e6)
        strategy.optimizer_step(optimizer)
    result = {
        "params": [t.tolist() for t in strategy.get_module_state_dict(model).values()],
        "optimizer_is_sgd": isinstance(optimizer, torch.optim.SGD),
        "mean": strategy.reduce(torch.tensor(3), reduce_op="mean").tolist(),
        "max": strategy.reduce(torch.tensor(3.0), reduce_op="max").tolist(),
        "gathered": strategy.all_gather(torch.tensor([1.0, 2.0])).tolist(),
        "broadcast": strategy.broadcast({"sender": strategy.global_rank}),
        "all_true": strategy.reduce_boolean_decision(True),
    }
    strategy.barrier("end")
    return result


def where_am_i(strategy):
    return {
        "rank": strategy.global_rank,
        "world_size": strategy.world_size,
        "local_rank": strategy.local_rank,
        "environment": type(strategy.cluster_environment).__name__,
        "launcher": type(strategy.launcher).__name__,
    }


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "train":
        strategy = stratlib.get_strategy(
            "horovod", accelerator="cpu", devices=1, precision="32-true", gradient_compression="fp16"
        )
        result = strategy.launch(train, 3)
    elif mode == "outside":
        strategy = stratlib.get_strategy("horovod", accelerator="cpu", devices=2)
        try:
            strategy.launch(where_am_i)
            result = {"error": None}
        except MisconfigurationError as exc:
            result = {"error": str(exc)}
    else:
        strategy = stratlib.get_strategy("horovod", accelerator="cpu", devices=2)
        result = strategy.launch(where_am_i)
    print("RESULT " + json.dumps(result))
"""


def test_horovod_control_flow_on_a_stand_in(tmp_path: Path) -> None:
    """One process through HorovodStrategyBase: hvd.init before anything else, rank 0's parameters
    and optimizer state broadcast, the optimizer wrapped in DistributedOptimizer with the
    spec's options, gradients averaged exactly once per step (clipping included), and
    collectives through Horovod's operations."""
    run = run_script(tmp_path, SCRIPT, standins=("horovod",), args=("train",)).check()
    result = run.result
    assert_parameters_close(result["params"], reference_parameters(steps=3))
    assert result["optimizer_is_sgd"] is True
    events = [e["event"] for e in run.events]
    assert events[:4] == [
        "init",
        "broadcast_parameters",
        "broadcast_optimizer_state",
        "DistributedOptimizer",
    ]
    (wrapping,) = run.named("DistributedOptimizer")
    assert wrapping["names"] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert wrapping["compression"] == "fp16"
    assert wrapping["backward_passes_per_step"] == 1
    assert wrapping["op"] == "Average"
    steps = [e["event"] for e in run.named("synchronize", "step")]
    assert steps == ["synchronize", "step"] * 3
    assert all(e["synchronized"] for e in run.named("step"))
    assert [(e["op"], e["dtype"]) for e in run.named("allreduce")] == [
        ("Average", "torch.float32"),  # an int64 mean is taken in floating point
        ("Max", "torch.float32"),
        ("Sum", "torch.int64"),  # reduce_boolean_decision
    ]
    assert result["mean"] == 3.0 and result["max"] == 3.0
    assert result["gathered"] == [[1.0, 2.0]]
    assert result["broadcast"] == {"sender": 0}
    assert result["all_true"] is True
    assert [e["root_rank"] for e in run.named("broadcast_object")] == [0]
    assert len(run.named("barrier")) == 2  # the script's and the one before teardown


def test_horovodrun_launcher_names_the_command_outside_horovodrun(tmp_path: Path) -> None:
    run = run_script(tmp_path, SCRIPT, standins=("horovod",), args=("outside",)).check()
    command = shlex.join([sys.executable, str(tmp_path / "script.py"), "outside"])
    assert run.result["error"] == (
        f"HorovodStrategy does not start processes itself: horovodrun does. Run: horovodrun -np 2 {command}"
    )
    assert run.named("init") == []


def test_horovodrun_launcher_runs_in_place_under_horovodrun(tmp_path: Path) -> None:
    """With the variables horovodrun sets, the process is one rank of the job: no new
    processes, ranks from the horovod environment, agreeing with hvd.rank() / hvd.size()."""
    horovodrun = {
        "HOROVOD_RANK": "1",
        "HOROVOD_SIZE": "2",
        "HOROVOD_LOCAL_RANK": "1",
        "HOROVOD_CROSS_RANK": "0",
    }
    run = run_script(
        tmp_path, SCRIPT, standins=("horovod",), args=("inside",), env=horovodrun
    ).check()
    assert run.result == {
        "rank": 1,
        "world_size": 2,
        "local_rank": 1,
        "environment": "HorovodEnvironment",
        "launcher": "HorovodRunLauncher",
    }
    assert [e["event"] for e in run.events] == ["init", "barrier"]


def test_horovodrun_command_lines() -> None:
    single = horovodrun_command(2, num_nodes=1, processes_per_node=2)
    assert single.startswith("horovodrun -np 2 ") and " -H " not in single
    multi = horovodrun_command(8, num_nodes=2, processes_per_node=4)
    assert multi.startswith("horovodrun -np 8 -H host1:4,host2:4 ")


def test_horovod_facts_without_horovod() -> None:
    assert HorovodStrategy.launcher_class.name == "horovodrun"
    assert HorovodStrategy.cluster == ("horovod", "mpi")
    assert HorovodStrategy.backend is not None and HorovodStrategy.backend.name == "horovod"
    assert HorovodStrategy.backend.reduce_ops == frozenset(HOROVOD_OPS)
    assert HorovodEnvironment.detect_condition.all_set == ("HOROVOD_RANK", "HOROVOD_SIZE")
    with pytest.raises(
        stratlib.MissingDependencyError,
        match=r"'horovod\.torch'.*HOROVOD_WITH_PYTORCH=1 pip install",
    ):
        stratlib.get_strategy("horovod", accelerator="cpu", devices=2)
    with pytest.raises(stratlib.MisconfigurationError, match="gradient_compression='zip'"):
        stratlib.get_strategy("horovod", accelerator="cpu", gradient_compression="zip")
