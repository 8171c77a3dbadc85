"""The DeepSpeed strategy without starting processes: the config it builds from options, user
configs and precision; the errors for settings DeepSpeed cannot honour; the precision plugin;
the extension build lock; and what happens when deepspeed is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from stratcore import testing
from stratcore.exceptions import MisconfigurationError
from stratcore.testing import watch
from stratcore.wrappers.deepspeed.config import CONFIG_DEFAULTS, extension_build_lock, ops_to_build
from torch import nn

import stratlib
from stratlib import DeepSpeedPrecisionPlugin, DeepSpeedStrategy
from tests.support import REPO

GENERATED = REPO / "generated"


def _strategy(name: str = "deepspeed", **kwargs: Any) -> DeepSpeedStrategy:
    strategy = stratlib.get_strategy(name, accelerator="cpu", devices=2, **kwargs)
    assert isinstance(strategy, DeepSpeedStrategy)
    return strategy


def _built_directly(precision: str, **options: Any) -> DeepSpeedStrategy:
    """The strategy for ``precision``, made without get_strategy, which refuses float16 on a
    CPU without float16 kernels: the config it writes does not depend on the machine."""
    return DeepSpeedStrategy(precision_plugin=DeepSpeedPrecisionPlugin(precision), **options)


def _run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = testing.clean_environ(env)
    environ.pop("DS_ACCELERATOR", None)
    environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(GENERATED), environ.get("PYTHONPATH")])
    )
    return watch.run([sys.executable, "-c", textwrap.dedent(code)], env=environ)


# --- the config -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "zero"),
    [
        ("deepspeed", {"stage": 2}),
        ("deepspeed_stage_1", {"stage": 1}),
        ("deepspeed_stage_2", {"stage": 2}),
        ("deepspeed_stage_2_offload", {"stage": 2, "offload_optimizer": {"device": "cpu"}}),
        ("deepspeed_stage_3", {"stage": 3}),
        (
            "deepspeed_stage_3_offload",
            {
                "stage": 3,
                "offload_optimizer": {"device": "cpu"},
                "offload_param": {"device": "cpu"},
            },
        ),
    ],
)
def test_registry_names_build_their_zero_config(name: str, zero: dict[str, Any]) -> None:
    assert _strategy(name).deepspeed_config() == {
        "zero_optimization": zero,
        "train_micro_batch_size_per_gpu": 1,
        **CONFIG_DEFAULTS,
    }


def test_defaults_keep_training_equal_to_plain_pytorch() -> None:
    # DeepSpeed's own defaults clip gradients to norm 1.0 and let its micro-step counter
    # decide when to step; the strategy turns both off unless the config asks for them.
    assert CONFIG_DEFAULTS["gradient_clipping"] == 0.0
    assert CONFIG_DEFAULTS["managed_gradient_accumulation"] is False


def test_config_mapping_takes_precedence_and_options_fill_the_rest() -> None:
    user = {
        "zero_optimization": {"stage": 1, "reduce_bucket_size": 1000},
        "gradient_clipping": 0.5,
        "train_batch_size": 32,
    }
    config = _strategy(
        "deepspeed_stage_2_offload", config=user, logging_batch_size_per_gpu=4
    ).deepspeed_config()
    assert config["zero_optimization"] == {
        "stage": 1,
        "reduce_bucket_size": 1000,
        "offload_optimizer": {"device": "cpu"},
    }
    assert config["gradient_clipping"] == 0.5
    # The config gives a batch size, so the option does not add a micro-batch size.
    assert config["train_batch_size"] == 32 and "train_micro_batch_size_per_gpu" not in config
    assert user == {
        "zero_optimization": {"stage": 1, "reduce_bucket_size": 1000},
        "gradient_clipping": 0.5,
        "train_batch_size": 32,
    }, "the user's mapping was changed"


def test_logging_batch_size_becomes_the_micro_batch_size() -> None:
    assert (
        _strategy(logging_batch_size_per_gpu=8).deepspeed_config()["train_micro_batch_size_per_gpu"]
        == 8
    )


def test_config_from_a_json_file(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text(
        json.dumps({"zero_optimization": {"stage": 3}, "steps_per_print": 5}), encoding="utf-8"
    )
    for value in (str(path), path):
        config = _strategy(config=value).deepspeed_config()
        assert config["zero_optimization"] == {"stage": 3}
        assert config["steps_per_print"] == 5


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "there is no such file"),
        (
            '{"zero_optimization": {"stage": 2},\n "bf16": }',
            "is not valid JSON: Expecting value at line 2, column 10",
        ),
        ("[1, 2]", "must hold a JSON object, found list"),
    ],
)
def test_bad_config_files_are_named(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "ds.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(MisconfigurationError, match="config=") as info:
        _strategy(config=str(path)).deepspeed_config()
    assert message in str(info.value)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"zero_stage": 2, "offload_parameters": True}, "offload_parameters needs ZeRO stage 3"),
        (
            {"zero_stage": 0, "offload_optimizer": True},
            "offload_optimizer needs ZeRO stage 1, 2 or 3",
        ),
        (
            {"config": {"zero_optimization": {"stage": 7}}},
            "ZeRO stage 7 is not allowed; use one of 0, 1, 2, 3",
        ),
        ({"config": {"zero_optimization": "full"}}, "'zero_optimization' must be a mapping"),
        ({"config": 42}, "config=42 is not allowed; give a mapping or the path of a JSON file"),
        (
            {"config": {"bf16": {"enabled": True}}},
            "the DeepSpeed config enables bf16 but precision='32-true'",
        ),
    ],
)
def test_contradictory_settings_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(MisconfigurationError) as info:
        _strategy(**kwargs).deepspeed_config()
    assert message in str(info.value)


def test_zero_stage_outside_the_choices_is_refused_by_the_factory() -> None:
    with pytest.raises(
        MisconfigurationError, match=r"zero_stage=4 is not allowed for DeepSpeedStrategy"
    ):
        _strategy(zero_stage=4)


def test_mistakes_surface_when_launching_before_any_process_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Set, then removed: monkeypatch then removes what the strategy sets when the test ends
    # (a variable it only removes, absent, it leaves as the test leaves it).
    monkeypatch.setenv("DS_ACCELERATOR", "")
    monkeypatch.delenv("DS_ACCELERATOR")
    strategy = _strategy(zero_stage=1, offload_parameters=True)
    with pytest.raises(MisconfigurationError, match="offload_parameters needs ZeRO stage 3"):
        strategy.launch(lambda _: None)
    # Launching chose DeepSpeed's CPU accelerator for this process and those it starts.
    assert os.environ["DS_ACCELERATOR"] == "cpu"


def test_a_users_ds_accelerator_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "xpu")
    _strategy().select_deepspeed_accelerator()
    assert os.environ["DS_ACCELERATOR"] == "xpu"


def test_ops_compiled_for_config_optimizers_are_built_in_turn() -> None:
    def ops(optimizer: dict[str, Any], device: str = "cpu", **kwargs: Any) -> list[str]:
        strategy = _strategy(config={"optimizer": optimizer}, **kwargs)
        return ops_to_build(strategy.deepspeed_config(), device)

    assert ops({"type": "SGD", "params": {"lr": 0.1}}) == ["ShareMemCommBuilder"]
    assert ops({"type": "Adam"}) == ["ShareMemCommBuilder", "FusedAdamBuilder"]
    assert ops({"type": "AdamW"}, zero_stage=2, offload_optimizer=True) == [
        "ShareMemCommBuilder",
        "CPUAdamBuilder",
    ]
    assert ops({"type": "Adam", "params": {"torch_adam": True}}) == ["ShareMemCommBuilder"]
    # The shared-memory op is the CPU accelerator's only: an NPU accelerator's refuses to load.
    assert ops({"type": "SGD", "params": {"lr": 0.1}}, device="npu") == []
    assert ops({"type": "Adam"}, device="npu") == ["FusedAdamBuilder"]


# --- precision ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("precision", "sections"),
    [
        ("32-true", {}),
        ("bf16-mixed", {"bf16": {"enabled": True}}),
        ("bf16-true", {"bf16": {"enabled": True}}),
        ("16-mixed", {"fp16": {"enabled": True, "loss_scale": 0}}),
        ("16-true", {"fp16": {"enabled": True, "loss_scale": 0}}),
    ],
)
def test_precision_becomes_the_fp16_or_bf16_section(
    precision: str, sections: dict[str, Any]
) -> None:
    strategy = _built_directly(precision)
    assert type(strategy.precision_plugin) is DeepSpeedPrecisionPlugin
    config = strategy.deepspeed_config()
    assert {k: config[k] for k in ("fp16", "bf16") if k in config} == sections


def test_config_precision_settings_are_merged_when_they_agree() -> None:
    config = _built_directly(
        "16-mixed", config={"fp16": {"enabled": True, "initial_scale_power": 8}}
    ).deepspeed_config()
    assert config["fp16"] == {"enabled": True, "loss_scale": 0, "initial_scale_power": 8}


def test_double_precision_is_not_offered() -> None:
    with pytest.raises(
        MisconfigurationError, match="precision='64-true': DeepSpeedStrategy supports 32-true"
    ):
        _strategy(precision="64-true")


def _probe() -> tuple[nn.Module, torch.Tensor]:
    return nn.Linear(4, 2), torch.randn(3, 4)


@pytest.mark.parametrize(
    ("precision", "module_dtype", "input_dtype", "output_dtype"),
    [
        ("32-true", torch.float32, torch.float32, torch.float32),
        ("bf16-mixed", torch.float32, torch.bfloat16, torch.float32),
        ("16-mixed", torch.float32, torch.float16, torch.float32),
        ("bf16-true", torch.bfloat16, torch.bfloat16, torch.bfloat16),
        ("16-true", torch.float16, torch.float16, torch.float16),
    ],
)
def test_precision_plugin_conversions(
    precision: str, module_dtype: torch.dtype, input_dtype: torch.dtype, output_dtype: torch.dtype
) -> None:
    plugin = DeepSpeedPrecisionPlugin(precision)
    module, batch = _probe()
    # For mixed precision the engine converts the module; '-true' converts it up front.
    assert plugin.convert_module(module).weight.dtype == module_dtype
    converted = plugin.convert_input({"x": batch, "ids": torch.arange(3)})
    assert converted["x"].dtype == input_dtype and converted["ids"].dtype == torch.int64
    with plugin.forward_context():
        created = torch.zeros(1)
    assert created.dtype == (module_dtype if precision.endswith("-true") else torch.float32)
    assert plugin.convert_output(batch.to(input_dtype)).dtype == output_dtype


def test_clip_gradients_points_to_the_config() -> None:
    with pytest.raises(MisconfigurationError, match=r"set 'gradient_clipping' in the config"):
        _strategy().clip_gradients(nn.Linear(1, 1), None, 1.0)  # type: ignore[arg-type]


def test_keeping_gradients_after_a_step_is_refused() -> None:
    with pytest.raises(
        MisconfigurationError, match=r"engine\.step\(\) always clears the gradients"
    ):
        _strategy().optimizer_step(zero_grad=False)


# --- the extension build lock ---------------------------------------------------------------


def test_extension_builds_take_turns_across_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
                import sys, time
                from stratcore.wrappers.deepspeed.config import extension_build_lock
                with extension_build_lock("probe_op"):
                    print("locked", flush=True)
                    time.sleep(2.0)
                    print(time.time(), flush=True)
                """),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(GENERATED)},
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "locked"
    with extension_build_lock("probe_op"):
        acquired = time.time()
    released = float(holder.stdout.readline())
    holder.wait()  # it printed its last line
    assert acquired >= released, "the lock was taken while another process held it"
    assert (tmp_path / ".probe_op.build.lock").exists()


# --- without deepspeed ----------------------------------------------------------------------

# Simulates an environment without deepspeed: a meta-path finder refuses to find it.
HIDE_DEEPSPEED = """
import sys

class HideDeepSpeed:
    def find_spec(self, name, path=None, target=None):
        if name == "deepspeed" or name.startswith("deepspeed."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, HideDeepSpeed())
"""


def test_missing_deepspeed_is_a_clear_error_simulated() -> None:
    process = _run_python(HIDE_DEEPSPEED + """
import stratlib
from stratcore.exceptions import MissingDependencyError
info = {i.name: i.available for i in stratlib.list_strategies()}
assert info["deepspeed"] is False and info["deepspeed_stage_3_offload"] is False, info
try:
    stratlib.get_strategy("deepspeed_stage_3", accelerator="cpu", devices=2)
except MissingDependencyError as exc:
    print("ERROR", exc)
""")
    assert process.returncode == 0, process.stderr
    assert (
        "ERROR DeepSpeedStrategy needs the 'deepspeed' package, which is not installed; "
        "install it with: pip install deepspeed"
    ) in process.stdout


def test_the_package_and_strategy_construction_do_not_import_deepspeed() -> None:
    process = _run_python("""
import sys
import stratlib
strategy = stratlib.get_strategy("deepspeed_stage_3_offload", accelerator="cpu", devices=2, precision="bf16-mixed")
strategy.deepspeed_config()
print("IMPORTED", "deepspeed" in sys.modules)
""")
    assert process.returncode == 0, process.stderr
    assert "IMPORTED False" in process.stdout
