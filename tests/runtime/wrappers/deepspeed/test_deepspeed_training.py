"""DeepSpeed on two real CPU processes over gloo: every ZeRO stage and offload mode trains like
one process on the whole batch, accumulates gradients, and round-trips checkpoints; configs,
config-defined optimizers, precisions and the launchers behave as documented."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from stratcore import testing
from stratcore.wrappers.deepspeed.config import cpu_has_fp16_kernels

#: Every test of the module runs in one pytest process, where they share the jobs.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("deepspeed-training"),
    pytest.mark.skipif(
        testing.unavailable_reason(__import__("stratlib").DeepSpeedStrategy, "cpu") is not None,
        reason=str(testing.unavailable_reason(__import__("stratlib").DeepSpeedStrategy, "cpu")),
    ),
]


#: Optimizers with other hyperparameters than the scenarios' ones, which loading replaces.
OTHER_OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.5),
    "adam": lambda params: torch.optim.Adam(params, lr=0.5, betas=(0.5, 0.5)),
}


def _assert_ok(process: subprocess.CompletedProcess[str], result: Any) -> None:
    assert process.returncode == 0, process.stderr[-6000:]
    assert result is not None, process.stdout[-3000:]


def _assert_train_run(
    result: dict[str, Any], reference: Any, optimizer_name: str = "sgd", atol: float = 1e-5
) -> None:
    """Training, checkpoint and resume of the 'train' scenario against the reference."""
    testing.assert_parameters_close(result["after_two"], reference(2, optimizer_name)[0], atol=atol)
    testing.assert_parameters_close(
        result["after_three"], reference(3, optimizer_name)[0], atol=atol
    )
    # Loading puts back the state of step 2, optimizer state included: step 3 comes out the same.
    testing.assert_parameters_close(
        result["restored"], [torch.tensor(p) for p in result["after_two"]], atol=0
    )
    testing.assert_parameters_close(
        result["after_three_again"], [torch.tensor(p) for p in result["after_three"]]
    )
    assert result["remaining"] == {"step": 2}


def _assert_checkpoint_is_plain_torch(
    path: str, reference: Any, optimizer_name: str = "sgd"
) -> None:
    """The file holds ordinary tensors: the full model and a torch-format optimizer state
    equal to those of the single-process reference after two steps."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    assert set(checkpoint) == {"model", "optimizer", "step"}
    params, expected = reference(2, optimizer_name)
    model = checkpoint["model"]
    assert all(t.dtype == torch.float32 for t in model.values())
    testing.assert_parameters_close([t.tolist() for t in model.values()], params)
    saved = checkpoint["optimizer"]
    assert saved["param_groups"] == expected["param_groups"]
    assert sorted(saved["state"]) == sorted(expected["state"])
    for index, state in expected["state"].items():
        assert sorted(saved["state"][index]) == sorted(state), f"state keys of parameter {index}"
        for key, value in state.items():
            got = saved["state"][index][key]
            assert torch.allclose(got, value, atol=1e-5), f"{key} of parameter {index}"
    # It loads into a plain PyTorch optimizer over the same parameters.
    plain = OTHER_OPTIMIZERS[optimizer_name](testing.reference_model().parameters())
    plain.load_state_dict(saved)
    assert plain.state_dict()["param_groups"] == expected["param_groups"]


#: ZeRO stages and offload modes, each trained by the 'train' scenario: (strategy, optimizer,
#: stage, optimizer offloaded, parameters offloaded).
STAGES = [
    ("deepspeed_stage_1", "sgd", 1, False, False),
    ("deepspeed_stage_3", "sgd", 3, False, False),
    ("deepspeed_stage_2_offload", "sgd", 2, True, False),
    ("deepspeed_stage_3_offload", "adam", 3, True, True),
]
#: The config of ``test_config_mapping_wins_over_options_and_drives_accumulation``: the alias
#: asks for stage 3; the config's stage 0 wins. With gradient_accumulation_steps=2 DeepSpeed
#: divides each micro-batch's loss by 2, so the scenario does not.
CONFIG = {
    "zero_optimization": {"stage": 0},
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 2,
}
#: The JSON config of ``test_json_config_with_its_own_optimizer_and_managed_accumulation``.
JSON_CONFIG = {
    "zero_optimization": {"stage": 1},
    "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
    "managed_gradient_accumulation": True,
}

Runs = tuple[subprocess.CompletedProcess[str], dict[str, Any]]


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory, cases_runner: Callable[[list[dict[str, Any]]], Runs]
) -> Runs:
    """The runs of the 2-process scenarios that start their processes alike (the strategy's
    own launcher, which starts the script again), as launches of one job; each test reads its
    case's result. A resumed run is a job of its own, as are the runs that must fail and those
    whose processes start otherwise."""
    folder = tmp_path_factory.mktemp("deepspeed")

    def case(
        name: str,
        scenario: str,
        strategy: str,
        options: dict[str, Any] | None = None,
        precision: str | None = None,
        **args: Any,
    ) -> dict[str, Any]:
        """A case of the job; the 'train' scenario's folder is a new one of its own."""
        if scenario == "train":
            args["folder"] = str(folder / name)
            (folder / name).mkdir()
        return {
            "case": name,
            "scenario": scenario,
            "strategy": strategy,
            "options": options or {},
            "precision": precision,
            "args": args,
        }

    config = folder / "ds_config.json"
    config.write_text(json.dumps(JSON_CONFIG), encoding="utf-8")
    cases = [
        case(strategy, "train", strategy, optimizer_name=optimizer)
        for strategy, optimizer, *_ in STAGES
    ]
    cases += [
        case("stage_2", "train", "deepspeed_stage_2", optimizer_name="adam"),
        case("config", "train", "deepspeed_stage_3", {"config": CONFIG}, divide=False),
        case("json_config", "config_opt", "deepspeed", {"config": str(config)}),
        case("bf16", "train", "deepspeed", precision="bf16-mixed"),
    ]
    return cases_runner(cases)


def _result(runs: Runs, case: str) -> Any:
    process, results = runs
    assert case in results, f"the job ended before case {case!r}:\n{process.stderr[-6000:]}"
    return results[case]


def test_each_launch_frees_its_model_and_engine(runs: Runs) -> None:
    """ZeRO stage 3 keeps every model it set up (and its engine and process groups) unless
    the strategy's teardown lets go of it; after the teardown, the strategy holds the user's
    optimizers, not the engine's, which hold its groups."""
    process, results = runs
    assert results, process.stderr[-6000:]
    alive = {case: result["models_alive"] for case, result in results.items()}
    assert alive == dict.fromkeys(results, 0)
    # DeepSpeed's wrappers (ZeRO's, bf16's) live in deepspeed.runtime; what they wrap does not.
    wrappers = {
        case: [
            module for module in result["optimizers_held"] if module.startswith("deepspeed.runtime")
        ]
        for case, result in results.items()
    }
    assert wrappers == {case: [] for case in results}
    assert all(result["optimizers_held"] for result in results.values()), results


@pytest.fixture(scope="module")
def stage_2_run(runs: Runs) -> tuple[subprocess.CompletedProcess[str], Any]:
    """The 'train' scenario under deepspeed_stage_2 with Adam, shared by the tests that read
    its checkpoint."""
    return runs[0], _result(runs, "stage_2")


@pytest.mark.parametrize(
    ("strategy", "optimizer_name", "stage", "offload_optimizer", "offload_param"), STAGES
)
def test_stage_trains_accumulates_and_round_trips(
    runs: Runs,
    reference: Any,
    strategy: str,
    optimizer_name: str,
    stage: int,
    offload_optimizer: bool,
    offload_param: bool,
) -> None:
    result = _result(runs, strategy)
    info = result["info"]
    assert (info["stage"], info["offload_optimizer"], info["offload_param"]) == (
        stage,
        offload_optimizer,
        offload_param,
    )
    assert info["optimizer"] == (
        "DeepSpeedZeroOptimizer_Stage3" if stage == 3 else "DeepSpeedZeroOptimizer"
    )
    _assert_train_run(result, reference, optimizer_name)
    _assert_checkpoint_is_plain_torch(result["checkpoint"], reference, optimizer_name)


def test_stage_2_trains_accumulates_and_round_trips(stage_2_run: Any, reference: Any) -> None:
    process, result = stage_2_run
    _assert_ok(process, result)
    info = result["info"]
    assert (info["stage"], info["optimizer"], info["param_dtype"]) == (
        2,
        "DeepSpeedZeroOptimizer",
        "torch.float32",
    )
    # The defaults the strategy puts into the config.
    config = info["config"]
    assert config["train_micro_batch_size_per_gpu"] == 1
    assert config["gradient_clipping"] == 0.0
    assert config["managed_gradient_accumulation"] is False
    assert "fp16" not in config and "bf16" not in config
    _assert_train_run(result, reference, "adam")
    _assert_checkpoint_is_plain_torch(result["checkpoint"], reference, "adam")


def test_every_rank_runs_on_deepspeeds_cpu_accelerator(stage_2_run: Any) -> None:
    process, result = stage_2_run
    _assert_ok(process, result)
    ranks = result["info"]["ranks"]
    assert [r["ds_accelerator"] for r in ranks] == ["cpu", "cpu"]
    # Rank 0 is the launching process, which the strategy sets up; rank 1 inherits the variable.
    assert [r["started_with_ds_accelerator"] for r in ranks] == [None, "cpu"]
    assert not any(r["deepspeed_imported_by_package"] for r in ranks)


def test_checkpoint_resumes_in_new_processes_under_another_stage(
    runner: Any, stage_2_run: Any, reference: Any
) -> None:
    process, saved = stage_2_run
    _assert_ok(process, saved)
    # A fresh model (other initial weights) and an Adam with other hyperparameters that has
    # not stepped, so has no state yet, under stage 3 instead of 2.
    process, result = runner(
        "resume",
        "deepspeed_stage_3",
        args={"checkpoint": saved["checkpoint"], "optimizer_name": "adam"},
    )
    _assert_ok(process, result)
    assert result["info"]["stage"] == 3
    assert result["remaining"] == {"step": 2}
    expected = reference(2, "adam")[1]["param_groups"][0]
    assert result["hyperparameters"] == {
        k: list(v) if isinstance(v, tuple) else v for k, v in expected.items() if k != "params"
    }
    testing.assert_parameters_close(result["loaded"], reference(2, "adam")[0])
    testing.assert_parameters_close(result["after_three"], reference(3, "adam")[0])


def test_config_mapping_wins_over_options_and_drives_accumulation(
    runs: Runs, reference: Any
) -> None:
    result = _result(runs, "config")
    info = result["info"]
    assert (info["stage"], info["micro_batch"], info["accumulation_steps"]) == (0, 4, 2)
    assert info["optimizer"] == "SGD"  # stage 0 in float32 steps the torch optimizer itself
    _assert_train_run(result, reference)
    _assert_checkpoint_is_plain_torch(result["checkpoint"], reference)


def test_json_config_with_its_own_optimizer_and_managed_accumulation(runs: Runs) -> None:
    result = _result(runs, "json_config")
    assert "names an optimizer and setup() got one as well" in result["both"]
    assert "DeepSpeed drives one optimizer per model; setup() got 2" in result["two"]
    assert result["returned_engine"] is True
    assert result["info"]["stage"] == 1
    assert result["inner_optimizer"] == "SGD"
    # Managed accumulation under stage 1 skips the first micro-batch's reduction through
    # engine.no_sync(); the result is still the whole-batch gradient.
    testing.assert_parameters_close(result["params"], testing.reference_parameters(steps=3))


def test_bf16_mixed_keeps_float32_masters(runs: Runs, reference: Any) -> None:
    result = _result(runs, "bf16")
    info = result["info"]
    assert info["config"]["bf16"] == {"enabled": True}
    assert info["param_dtype"] == "torch.bfloat16"
    assert info["state_dtypes"] == ["torch.float32"]
    # bfloat16 forward and backward passes: close to the float32 reference, not equal.
    testing.assert_parameters_close(result["after_three"], reference(3)[0], atol=5e-2)
    testing.assert_parameters_close(
        result["restored"], [torch.tensor(p) for p in result["after_two"]], atol=0
    )
    assert result["remaining"] == {"step": 2}


def _deepspeed_cpu_supports_fp16() -> bool:
    probe = "from deepspeed.accelerator import get_accelerator; print(get_accelerator().is_fp16_supported())"
    env = {**os.environ, "DS_ACCELERATOR": "cpu"}
    output = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
    )
    return output.stdout.strip().splitlines()[-1] == "True"


def test_float16_trains_or_says_the_cpu_cannot(runner: Any, tmp_path: Path, reference: Any) -> None:
    process, result = runner(
        "train", "deepspeed", precision="16-mixed", args={"folder": str(tmp_path)}
    )
    supported = _deepspeed_cpu_supports_fp16()
    # stratcore asks the CPU what DeepSpeed's CPU accelerator asks, without importing it.
    assert cpu_has_fp16_kernels() is supported
    if supported:
        _assert_ok(process, result)
        assert result["info"]["config"]["fp16"]["enabled"] is True
        testing.assert_parameters_close(result["after_three"], reference(3)[0], atol=5e-2)
    else:
        assert process.returncode != 0
        assert (
            "cannot train in float16 on this machine; use precision='bf16-mixed'" in process.stderr
        )


def test_spawned_processes_inherit_the_cpu_accelerator(
    runner: Any, tmp_path: Path, reference: Any
) -> None:
    process, result = runner(
        "spawn", "-", options={"zero_stage": 3}, args={"folder": str(tmp_path)}
    )
    _assert_ok(process, result)
    ranks = result["info"]["ranks"]
    # Both ranks are new processes started after the strategy chose the accelerator.
    assert [r["started_with_ds_accelerator"] for r in ranks] == ["cpu", "cpu"]
    assert [r["ds_accelerator"] for r in ranks] == ["cpu", "cpu"]
    _assert_train_run(result, reference)


@pytest.mark.skipif(
    os.environ.get("STRATLIB_TEST_DEEPSPEED_BUILD") != "1",
    reason="compiles DeepSpeed's CPU comm op from scratch, which takes minutes; set STRATLIB_TEST_DEEPSPEED_BUILD=1",
)
def test_both_ranks_start_with_an_empty_extension_cache(
    runner: Any, tmp_path: Path, reference: Any
) -> None:
    cache = tmp_path / "torch_extensions"
    process, result = runner(
        "train",
        "deepspeed_stage_2",
        args={"folder": str(tmp_path)},
        env={"TORCH_EXTENSIONS_DIR": str(cache)},
    )
    _assert_ok(process, result)
    assert list(
        cache.glob("deepspeed_shm_comm/*.so")
    ), "the comm op was not built into the fresh cache"
    assert (cache / ".deepspeed_shm_comm.build.lock").exists()
    _assert_train_run(result, reference)
