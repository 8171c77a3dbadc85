"""The names and inputs Lightning users type: registry aliases, any letter case, numbers given
as strings, NVMe offload, and precisions whose package is missing here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from stratcore.exceptions import MisconfigurationError, MissingDependencyError
from stratcore.imports import module_available

import stratlib

needs_deepspeed = pytest.mark.skipif(
    not module_available("deepspeed"), reason="deepspeed is not installed"
)


@pytest.mark.parametrize(
    ("name", "cls", "options"),
    [
        ("ddp_spawn_find_unused_parameters_false", "DDPSpawnStrategy", {"start_method": "spawn", "find_unused_parameters": False}),
        ("ddp_fork_find_unused_parameters_true", "DDPSpawnStrategy", {"start_method": "fork", "find_unused_parameters": True}),
        ("ddp_fork_find_unused_parameters_false", "DDPSpawnStrategy", {"start_method": "fork", "find_unused_parameters": False}),
        ("ddp_notebook_find_unused_parameters_true", "DDPSpawnStrategy", {"start_method": "fork", "find_unused_parameters": True}),
        ("ddp_notebook_find_unused_parameters_false", "DDPSpawnStrategy", {"start_method": "fork", "find_unused_parameters": False}),
        pytest.param("deepspeed_stage_1_offload", "DeepSpeedStrategy", {"zero_stage": 1, "offload_optimizer": True, "offload_parameters": False}, marks=needs_deepspeed),
    ],
)  # fmt: skip
def test_lightning_names_build_the_strategy_they_name(
    name: str, cls: str, options: dict[str, Any]
) -> None:
    strategy = stratlib.get_strategy(name, accelerator="cpu", devices=2)
    assert type(strategy).__name__ == cls
    assert {key: getattr(strategy, key) for key in options} == options


@needs_deepspeed
def test_deepspeed_stage_1_offload_config_offloads_the_optimizer_to_the_cpu() -> None:
    strategy: Any = stratlib.get_strategy("deepspeed_stage_1_offload", accelerator="cpu")
    zero = strategy.deepspeed_config()["zero_optimization"]
    assert zero["stage"] == 1
    assert zero["offload_optimizer"] == {"device": "cpu"}
    assert "offload_param" not in zero


@needs_deepspeed
def test_nvme_offload_without_a_path_is_a_clear_error() -> None:
    # The strategy can be built (as every registry name can); its DeepSpeed config, made when
    # the processes set up, cannot.
    strategy: Any = stratlib.get_strategy("deepspeed_stage_3_offload_nvme", accelerator="cpu")
    with pytest.raises(MisconfigurationError, match="offloading to NVMe needs nvme_path"):
        strategy.deepspeed_config()
    elsewhere: Any = stratlib.get_strategy(
        "deepspeed_stage_3_offload_nvme", accelerator="cpu", nvme_path="/no/such/nvme"
    )
    with pytest.raises(MisconfigurationError, match="is not an existing folder"):
        elsewhere.deepspeed_config()


@needs_deepspeed
def test_nvme_offload_config_names_the_folder(tmp_path: Path) -> None:
    strategy: Any = stratlib.get_strategy(
        "deepspeed_stage_3_offload_nvme", accelerator="cpu", nvme_path=str(tmp_path)
    )
    zero = strategy.deepspeed_config()["zero_optimization"]
    assert zero["stage"] == 3
    assert zero["offload_optimizer"] == {"device": "nvme", "nvme_path": str(tmp_path)}
    assert zero["offload_param"] == {"device": "nvme", "nvme_path": str(tmp_path)}
    # NVMe offload of the optimizer is ZeRO-Infinity, which only stage 3 has.
    lower: Any = stratlib.get_strategy(
        "deepspeed_stage_2_offload",
        accelerator="cpu",
        offload_optimizer_device="nvme",
        nvme_path=str(tmp_path),
    )
    with pytest.raises(MisconfigurationError, match="needs ZeRO stage 3"):
        lower.deepspeed_config()


@pytest.mark.parametrize("name", ["DDP", "Ddp_Spawn", " ddp_notebook ", "FSDP"])
def test_strategy_names_in_any_letter_case(name: str) -> None:
    expected = stratlib.registry.REGISTRY.strategies[name.strip().lower()]
    strategy = stratlib.get_strategy(name, accelerator="cpu", devices=2)
    assert type(strategy) is expected.cls


@pytest.mark.parametrize("accelerator", ["CPU", "Cpu", " cpu"])
def test_accelerator_names_in_any_letter_case(accelerator: str) -> None:
    strategy = stratlib.get_strategy("ddp", accelerator=accelerator, devices=2)
    assert strategy.accelerator.name == "cpu"


def test_devices_and_num_nodes_as_strings() -> None:
    strategy: Any = stratlib.get_strategy("ddp", accelerator="cpu", devices="3", num_nodes="2")
    assert strategy.num_processes == 3 and strategy.num_nodes == 2
    auto: Any = stratlib.get_strategy("ddp", accelerator="cpu", devices="AUTO", num_nodes=" 1 ")
    assert auto.num_nodes == 1
    for bad in ("two", "0", "-1", "1.5", ""):
        with pytest.raises(MisconfigurationError, match="num_nodes="):
            stratlib.get_strategy("ddp", accelerator="cpu", devices=2, num_nodes=bad)


@pytest.mark.skipif(module_available("torch_xla"), reason="torch_xla is installed here")
@pytest.mark.parametrize("name", ["xla_fsdp", "xla_debug", "XLA_FSDP"])
def test_xla_names_are_guarded(name: str) -> None:
    cls = stratlib.registry.REGISTRY.strategies[name.lower()].cls
    assert cls.accelerators == ("tpu",)
    with pytest.raises(MisconfigurationError, match="runs on tpu"):
        stratlib.get_strategy(name)
    with pytest.raises(MissingDependencyError, match="torch_xla"):
        stratlib.get_strategy(name, accelerator="tpu")
    with pytest.raises(MissingDependencyError, match="torch_xla"):
        cls()


def test_xla_debug_and_xla_fsdp_presets() -> None:
    assert stratlib.registry.REGISTRY.strategies["xla_debug"].preset == {"debug": True}
    entry = stratlib.registry.REGISTRY.strategies["xla_fsdp"]
    assert entry.cls.wrapper == "xla_fsdp" and entry.preset == {}


@pytest.mark.skipif(
    module_available("transformer_engine"), reason="transformer_engine is installed here"
)
@pytest.mark.parametrize("precision", ["transformer-engine", "transformer-engine-float16"])
@pytest.mark.parametrize("strategy", ["ddp", "single_device", "fsdp"])
def test_transformer_engine_precision_names_the_package(precision: str, strategy: str) -> None:
    devices = 1 if strategy == "single_device" else 2
    with pytest.raises(MissingDependencyError) as error:
        stratlib.get_strategy(strategy, accelerator="cpu", devices=devices, precision=precision)
    message = str(error.value)
    assert "transformer_engine" in message
    assert "pip install 'transformer_engine[pytorch]'" in message
    assert message.startswith(f"precision={precision!r}")
