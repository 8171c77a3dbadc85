"""fairscale OSS + ShardedDataParallel ('ddp_sharded', 'ddp_sharded_spawn'): consolidated
optimizer state, loading on every rank, gradient buckets, mixed precision, and what happens
without fairscale, on 2 real CPU ranks over gloo."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from fairscale.optim.grad_scaler import ShardedGradScaler
from stratcore import testing
from stratcore.exceptions import MisconfigurationError
from stratcore.precision import base as precision_module
from stratcore.precision.base import make_grad_scaler
from stratcore.testing import reference_model, watch

import stratlib
from stratlib import DDPShardedStrategy, ShardedNativeMixedPrecisionPlugin

from ..support import (
    assert_close,
    environ,
    run_scenario,
    run_scenarios,
    run_script,
    train_alone,
)

#: Every test of the module runs in one pytest process, where they share the job of ``runs``.
pytestmark = pytest.mark.xdist_group("fairscale-sharded")
#: Gradient buckets of the reductions: none, and 8 MiB.
BUCKETS = [0, 2**23]
PRECISIONS = ["bf16-mixed", "16-mixed"]


@pytest.fixture(scope="module")
def resume_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sharded-resume")


@pytest.fixture(scope="module")
def runs(resume_folder: Path) -> dict[str, tuple[Any, Any]]:
    """The scenarios of 'ddp_sharded' that train, each a launch of its own, in one job (every
    test of the module runs in one pytest process, where they share it)."""
    return run_scenarios(
        {
            "resume": {
                "scenario": "resume",
                "strategy_name": "ddp_sharded",
                "options": {},
                "folder": str(resume_folder),
            },
            "warm_optimizer": {
                "scenario": "warm_optimizer",
                "strategy_name": "ddp_sharded",
                "options": {},
                "steps": 2,
            },
            **{
                f"buckets {size}": {
                    "scenario": "train",
                    "strategy_name": "ddp_sharded",
                    "options": {"reduce_buffer_size": size},
                }
                for size in BUCKETS
            },
            **{
                precision: {
                    "scenario": "train",
                    "strategy_name": "ddp_sharded",
                    "options": {},
                    "precision": precision,
                }
                for precision in PRECISIONS
            },
        }
    )


@pytest.mark.parametrize("strategy", ["ddp_sharded", "ddp_sharded_spawn"])
def test_optimizer_state_is_consolidated_on_rank_zero_and_loads_on_every_rank(
    runs: dict[str, tuple[Any, Any]], strategy: str, tmp_path: Path
) -> None:
    if strategy == "ddp_sharded":
        process, result = runs["resume"]
    else:  # spawned processes: a job of its own
        process, result = run_scenario("resume", strategy, steps=3, folder=tmp_path)
    assert process.returncode == 0, process.stderr
    assert result["optimizer_class"] == "OSS"
    reference = reference_model()
    optimizer = train_alone(reference, steps=3)
    consolidated = result["consolidated"]
    # torch's own format: integer keys in parameter order, every parameter's state present,
    # although each rank only ever held the state of the parameters it owns.
    assert sorted(consolidated["state"]) == ["0", "1", "2", "3"]
    for index, parameter in enumerate(reference.parameters()):
        assert_close(
            consolidated["state"][str(index)]["momentum_buffer"],
            optimizer.state[parameter]["momentum_buffer"],
        )
    (group,) = consolidated["param_groups"]
    assert (group["lr"], group["momentum"], group["params"]) == (0.1, 0.9, [0, 1, 2, 3])
    assert result["others_empty"] is True
    assert result["remaining"] == {"steps": 3}
    # Saved after 3 steps, restored on both ranks after 2 more: one more step equals 4 steps,
    # which needs every rank's share of the momentum back.
    expected = reference_model()
    train_alone(expected, steps=4)
    for actual, tensor in zip(result["params"], expected.state_dict().values(), strict=True):
        assert_close(actual, tensor)


def test_consolidated_state_loads_into_a_plain_optimizer(
    runs: dict[str, tuple[Any, Any]], resume_folder: Path
) -> None:
    process, _ = runs["resume"]
    assert process.returncode == 0, process.stderr
    checkpoint = torch.load(resume_folder / "resume.ckpt", weights_only=True)
    model = reference_model()
    model.load_state_dict(checkpoint["model"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer.load_state_dict(checkpoint["optimizer"])
    reference = reference_model()
    reference_optimizer = train_alone(reference, steps=3)
    for ours, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.allclose(ours, theirs, atol=1e-5)
        assert torch.allclose(
            optimizer.state[ours]["momentum_buffer"],
            reference_optimizer.state[theirs]["momentum_buffer"],
            atol=1e-5,
        )


def test_optimizer_state_from_before_setup_carries_over(runs: dict[str, tuple[Any, Any]]) -> None:
    process, result = runs["warm_optimizer"]
    assert process.returncode == 0, process.stderr
    expected = reference_model()
    train_alone(expected, steps=3)
    for actual, tensor in zip(result["params"], expected.state_dict().values(), strict=True):
        assert_close(actual, tensor)


@pytest.mark.parametrize("reduce_buffer_size", BUCKETS)
def test_trains_like_one_process_with_and_without_gradient_buckets(
    runs: dict[str, tuple[Any, Any]], reduce_buffer_size: int
) -> None:
    # With buckets, gradients are views into the reduction buffers: the strategy's
    # zero_grad(set_to_none=True) must keep them attached or the second step goes wrong.
    process, result = runs[f"buckets {reduce_buffer_size}"]
    assert result is not None, process.stderr
    assert result["model_type"] == "ShardedDataParallel"
    testing.assert_parameters_close(result["params"], testing.reference_parameters(steps=3))


@pytest.mark.parametrize("precision", PRECISIONS)
def test_mixed_precision_trains_with_the_sharded_plugin(
    runs: dict[str, tuple[Any, Any]], precision: str
) -> None:
    plugin = stratlib.registry.REGISTRY.precision_plugin_class(
        DDPShardedStrategy, stratlib.CPUAccelerator, precision
    )
    assert plugin is ShardedNativeMixedPrecisionPlugin
    process, result = runs[precision]
    assert result is not None, process.stderr
    assert result["precision"] == precision
    testing.assert_parameters_close(
        result["params"], testing.reference_parameters(steps=3), atol=5e-2
    )


class RecordingShardedGradScaler(ShardedGradScaler):
    """fairscale's scaler with its real signature, recording how it is constructed."""

    __signature__ = inspect.signature(ShardedGradScaler)
    calls: ClassVar[list[tuple[tuple[Any, ...], dict[str, Any]]]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append((args, kwargs))
        super().__init__(*args, **kwargs)


def test_sixteen_mixed_builds_fairscales_scaler_where_needed() -> None:
    plugin = ShardedNativeMixedPrecisionPlugin("16-mixed")
    plugin.connect(torch.device("cpu"), needs_grad_scaler=False)
    assert plugin.scaler is None  # the CPU needs no loss scaling
    plugin = ShardedNativeMixedPrecisionPlugin("16-mixed")
    with pytest.warns(UserWarning, match="CUDA is not available"):  # so fairscale disables it
        plugin.connect(torch.device("cuda"), needs_grad_scaler=True)
    assert isinstance(plugin.scaler, ShardedGradScaler)


def test_fairscales_scaler_is_built_without_a_device(monkeypatch: pytest.MonkeyPatch) -> None:
    # fairscale's first parameter is the initial scale: a device passed positionally, as
    # torch's scalers take it, would become the scale.
    assert next(iter(inspect.signature(ShardedGradScaler).parameters)) == "init_scale"
    plugin = ShardedNativeMixedPrecisionPlugin("16-mixed")
    assert plugin.grad_scaler == "fairscale.optim.grad_scaler:ShardedGradScaler"
    imported = []

    def import_recording(path: str) -> type:
        imported.append(path)
        return RecordingShardedGradScaler

    monkeypatch.setattr(precision_module, "import_object", import_recording)
    RecordingShardedGradScaler.calls.clear()
    with pytest.warns(UserWarning, match="CUDA is not available"):
        plugin.connect(torch.device("cuda"), needs_grad_scaler=True)
    assert imported == ["fairscale.optim.grad_scaler:ShardedGradScaler"]
    assert RecordingShardedGradScaler.calls == [((), {})]


def test_grad_scalers_get_the_device_only_when_they_take_it() -> None:
    torch_scaler = make_grad_scaler(torch.amp.GradScaler, torch.device("cpu"))
    assert torch_scaler._device == "cpu"
    assert torch_scaler._init_scale == 2.0**16


@pytest.mark.parametrize("attempt", [1, 2, 3])
def test_processes_exit_cleanly_after_asynchronous_collectives(attempt: int) -> None:
    # The wrappers hold the process group; freed only at interpreter shutdown, gloo's worker
    # threads aborted the process in about one run of three before teardown released them.
    process, result = run_scenario("async_burst", "ddp_sharded", steps=2)
    assert process.returncode == 0, process.stderr
    assert result == "done"


def test_setup_without_an_optimizer_is_refused() -> None:
    with pytest.raises(MisconfigurationError, match="pass the optimizers to setup"):
        DDPShardedStrategy().setup_module_and_optimizers(reference_model(), [])


def test_importing_the_package_does_not_import_fairscale() -> None:
    code = "import sys, stratlib; stratlib.get_strategy('ddp_sharded', accelerator='cpu', devices=2); print('fairscale' in sys.modules)"
    process = watch.run([sys.executable, "-c", code], env=environ())
    assert process.returncode == 0, process.stderr
    assert process.stdout.strip() == "False"


def test_without_fairscale_the_strategies_say_what_to_install() -> None:
    # A simulation: fairscale is installed here, so the script hides it with an import hook.
    process, result = run_script("without_fairscale.py")
    assert process.returncode == 0, process.stderr
    assert result["fairscale_findable"] is False
    assert result["fairscale_imported"] is False
    for name, user in [
        ("ddp_sharded", "DDPShardedStrategy"),
        ("ddp_sharded_spawn", "DDPSpawnShardedStrategy"),
        ("ddp_fully_sharded", "DDPFullyShardedStrategy"),
        ("sharded_plugin", "ShardedNativeMixedPrecisionPlugin"),
        ("ddp_sharded_16_mixed", "ShardedNativeMixedPrecisionPlugin"),
    ]:
        assert result[name] == {
            "error": "MissingDependencyError",
            "message": f"{user} needs the 'fairscale' package, which is not installed; "
            "install it with: pip install fairscale",
        }
    assert result["fsdp"] == {"error": "", "message": ""}  # torch's FSDP needs no fairscale
    assert result["listed_unavailable"] == ["ddp_fully_sharded", "ddp_sharded", "ddp_sharded_spawn"]
