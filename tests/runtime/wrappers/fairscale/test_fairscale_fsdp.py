"""fairscale FullyShardedDataParallel ('ddp_fully_sharded'). fairscale's FSDP needs CUDA to
run, which this machine lacks; what runs without it is tested for real: the guard, the
options, and (on 2 real CPU ranks over gloo) the wrapping, the rebuilt optimizer and the
optimizer-state round trip. See scripts/fairscale_fsdp_wrap.py for the one stand-in."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import torch
from stratcore.exceptions import MisconfigurationError
from stratcore.testing import watch
from stratcore.testing.processes import run_given_a_port

import stratlib
from stratlib import (
    DDPFullyShardedStrategy,
    FullyShardedNativeMixedPrecisionPlugin,
    PrecisionPlugin,
)

from ..support import SCRIPTS, environ

#: The module's job (its module-scoped fixture) runs once: its tests share one pytest-xdist worker.
pytestmark = [
    pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA"),
    pytest.mark.xdist_group("fairscale-fsdp"),
]


def cpu_strategy(**options: Any) -> DDPFullyShardedStrategy:
    return DDPFullyShardedStrategy(
        accelerator=stratlib.CPUAccelerator(), parallel_devices=[torch.device("cpu")] * 2, **options
    )


def test_factory_refuses_the_cpu() -> None:
    with pytest.raises(
        MisconfigurationError, match=r"accelerator='cpu': DDPFullyShardedStrategy runs on cuda"
    ):
        stratlib.get_strategy("ddp_fully_sharded", accelerator="cpu", devices=2)


def test_launch_on_the_cpu_fails_before_starting_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def started(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a process was started before the refusal")

    # Both ways a launcher starts processes (popen runs the script again, spawn uses torch's).
    monkeypatch.setattr(subprocess, "Popen", started)
    monkeypatch.setattr(torch.multiprocessing, "start_processes", started)
    with pytest.raises(MisconfigurationError) as error:
        cpu_strategy().launch(print)
    message = str(error.value)
    assert "runs only on CUDA devices" in message
    assert "not on 'cpu'" in message
    assert "strategy='fsdp'" in message


def test_setup_on_the_cpu_fails_clearly() -> None:
    with pytest.raises(MisconfigurationError, match="runs only on CUDA devices"):
        cpu_strategy().setup_environment()


@pytest.mark.parametrize(
    ("options", "plugin", "expected"),
    [
        ({}, PrecisionPlugin(), {"reshard_after_forward": True, "move_params_to_cpu": False}),
        (
            {"cpu_offload": True, "reshard_after_forward": False},
            PrecisionPlugin(),
            {"reshard_after_forward": False, "move_params_to_cpu": True},
        ),
        (
            {},
            FullyShardedNativeMixedPrecisionPlugin("bf16-mixed"),
            {
                "reshard_after_forward": True,
                "move_params_to_cpu": False,
                "mixed_precision": True,
                "compute_dtype": torch.bfloat16,
                "fp32_reduce_scatter": True,
            },
        ),
        (
            {},
            FullyShardedNativeMixedPrecisionPlugin("16-mixed"),
            {
                "reshard_after_forward": True,
                "move_params_to_cpu": False,
                "mixed_precision": True,
                "compute_dtype": torch.float16,
                "fp32_reduce_scatter": True,
            },
        ),
    ],
)
def test_wrapper_arguments(options: dict[str, Any], plugin: Any, expected: dict[str, Any]) -> None:
    strategy = cpu_strategy(precision_plugin=plugin, **options)
    assert strategy.fairscale_fsdp_kwargs() == {**expected, "compute_device": torch.device("cpu")}


def test_mixed_precision_plugin_is_selected_for_it() -> None:
    for precision in ("16-mixed", "bf16-mixed"):
        plugin = stratlib.registry.REGISTRY.precision_plugin_class(
            DDPFullyShardedStrategy, stratlib.CUDAAccelerator, precision
        )
        assert plugin is FullyShardedNativeMixedPrecisionPlugin


@pytest.fixture(scope="module")
def two_ranks() -> list[dict[str, Any]]:
    """scripts/fairscale_fsdp_wrap.py on 2 ranks; each rank's report."""
    import json

    def start(port: str) -> list[watch.Job]:
        return [
            watch.Job(
                [sys.executable, os.fspath(SCRIPTS / "fairscale_fsdp_wrap.py")],
                env=environ(
                    RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port
                ),
            )
            for rank in range(2)
        ]

    outputs = run_given_a_port(start)
    for done in outputs:
        assert done.returncode == 0, done.stderr
    (line,) = [line for line in outputs[0].stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(line[len("RESULT ") :])


def test_wrapping_with_the_real_fairscale_class(two_ranks: list[dict[str, Any]]) -> None:
    for report in two_ranks:
        wrapping = report["wrapping"]
        plain = wrapping["plain"]
        assert [i["name"] for i in plain["instances"]] == [""]
        assert plain["instances"][0] == {
            "name": "",
            "mixed_precision": False,
            "compute_dtype": "torch.float32",
            "fp32_reduce_scatter": False,
            "move_params_to_cpu": False,
            "reshard_after_forward": True,
            "compute_device": "cpu",
        }
        # Linear 16->16 (272 parameters) is the only submodule with at least 200.
        assert [i["name"] for i in wrapping["auto_wrap"]["instances"]] == [
            "",
            "_fsdp_wrapped_module._fpw_module.1",
        ]
        mixed = wrapping["bf16_offload"]["instances"][0]
        assert (mixed["mixed_precision"], mixed["compute_dtype"], mixed["fp32_reduce_scatter"]) == (
            True,
            "torch.bfloat16",
            True,
        )
        assert (mixed["move_params_to_cpu"], mixed["reshard_after_forward"]) == (True, False)
        for case in wrapping.values():
            assert case["optimizer"] == "SGD" and case["new_optimizer"] is True
            assert case["hyper_parameters"] == {"lr": 0.05, "momentum": 0.5, "nesterov": True}
            assert case["optimizer_params_are_flat"] is True
            assert 0.5 <= case["shard_fraction"] < 0.52  # each rank holds half (plus padding)


def test_optimizers_it_cannot_rebuild_are_refused(two_ranks: list[dict[str, Any]]) -> None:
    refusals = two_ranks[0]["refusals"]
    assert "SGD has 2 parameter groups" in refusals["two_groups"]
    assert "must optimise exactly the parameters of the module" in refusals["partial"]


def test_optimizer_state_gathers_on_rank_zero_and_loads_on_every_rank(
    two_ranks: list[dict[str, Any]],
) -> None:
    rank0, rank1 = (report["optimizer_state"] for report in two_ranks)
    assert rank0["gathered_here"] == [
        "param_groups",
        "param_id_map",
        "state",
        "uncollected_local_ids",
    ]
    assert rank1["gathered_here"] == []
    # Unflattened again: one entry per original parameter, with its shape. Rank r stepped its
    # shard with gradients r + 1, and Linear 16->16 straddles the two shards.
    assert rank0["full_shapes"] == rank0["param_shapes"]
    assert rank0["full_values"] == [[1.0], [1.0], [1.0, 2.0], [2.0], [2.0], [2.0]]
    for report in (rank0, rank1):
        assert report["restored"] is True
        assert report["caller_mapping_kept"] is True
    assert rank1["padding"] == [1]


def test_module_state_calls_go_to_the_wrapper(two_ranks: list[dict[str, Any]]) -> None:
    for report in two_ranks:
        calls = report["module_state"]
        assert calls["state_dict_calls"] == 1
        assert calls["returned"] == ["0.0.weight"]
        assert calls["load_calls"] == [[["0.0.weight"], {"strict": False}]]
