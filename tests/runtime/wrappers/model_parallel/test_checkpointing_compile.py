"""Activation checkpointing for 'fsdp' and 'model_parallel', and torch.compile before and
after ``setup``, on 2 CPU ranks over gloo, against one process on the whole batch."""

from __future__ import annotations

import importlib.util
import json
from types import ModuleType
from typing import Any

import pytest
import torch
from stratcore.wrappers.fsdp.activation_checkpointing import apply_activation_checkpointing
from torch import nn

from .support import SCRIPTS, assert_close, run_job, train_alone


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cc_script", SCRIPTS / "checkpointing_compile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CC = script()
RUNS = [
    ("fsdp", "checkpointing"),
    ("model_parallel", "checkpointing"),
    ("fsdp", "compiled_before"),
    ("fsdp", "compiled_after"),
]


#: The module's job (its module-scoped fixture) runs once: its tests share one pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("checkpointing-compile")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("checkpointing_compile")
    result: dict[str, Any] = run_job("checkpointing_compile.py", folder, "--runs", json.dumps(RUNS))
    return result


def reference() -> dict[str, torch.Tensor]:
    return train_alone(CC.build_model(), *CC.batch(), steps=CC.STEPS)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["fsdp", "model_parallel"])
def test_activation_checkpointing_recomputes_and_trains_alike(
    reports: dict[str, Any], strategy: str
) -> None:
    report = reports[f"{strategy}/checkpointing"]
    # One forward per step, and one recomputation of it during each backward.
    assert report["block_forward_calls"] == 2 * CC.STEPS
    assert_close(report["params"], reference())


@pytest.mark.slow
@pytest.mark.parametrize("case", ["compiled_before", "compiled_after"])
def test_compiled_models_train_alike(reports: dict[str, Any], case: str) -> None:
    report = reports[f"fsdp/{case}"]
    assert report["compiled_graphs"] > 0, "nothing was compiled"
    # Compiled before setup: compiled again in place, around the sharded module.
    assert report["compiled_in_place"] is (case == "compiled_before")
    assert report["block_forward_calls"] == CC.STEPS
    assert_close(report["params"], reference())


def test_checkpointing_keeps_names_and_gradients_in_one_process() -> None:
    plain, checkpointed = CC.build_model(), CC.build_model()
    names = [name for name, _ in checkpointed.named_parameters()]
    assert apply_activation_checkpointing(checkpointed, ["CountingBlock"]) == [checkpointed[1]]
    assert [name for name, _ in checkpointed.named_parameters()] == names
    x, y = CC.batch()
    for model in (plain, checkpointed):
        nn.functional.mse_loss(model(x), y).backward()
    assert (plain[1].calls, checkpointed[1].calls) == (1, 2)
    for a, b in zip(plain.parameters(), checkpointed.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(a.grad, b.grad)
    # Applying it twice checkpoints once.
    apply_activation_checkpointing(checkpointed, ["CountingBlock"])
    checkpointed.zero_grad()
    nn.functional.mse_loss(checkpointed(x), y).backward()
    assert checkpointed[1].calls == 4
