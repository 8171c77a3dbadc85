"""torch FSDP2 ('fsdp'): auto-wrapping, CPU offload, mixed precision, optimizer rebinding and
full state dicts, on 2 real CPU ranks over gloo."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from stratcore.exceptions import MisconfigurationError
from stratcore.testing import reference_model
from torch import nn
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

import stratlib
from stratlib import FSDPStrategy, FullyShardedNativeMixedPrecisionPlugin

from ..support import assert_close, run_scenario, run_scenarios, scenarios_module, train_alone

SCENARIOS = scenarios_module()


def wrapped_names(strategy: FSDPStrategy, model: nn.Module) -> list[str]:
    names = {id(module): name for name, module in model.named_modules()}
    return [names[id(module)] for module in strategy.auto_wrap_modules(model)]


# --- the auto-wrap policy (which submodules get their own group) ------------------------------


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, []),
        ({"auto_wrap_min_params": 1_000_000}, []),
        ({"auto_wrap_min_params": 100}, ["0.inner", "1"]),
        ({"auto_wrap_min_params": 150}, ["1"]),
        ({"auto_wrap_layers": ["torch.nn.Linear"]}, ["0.inner", "1", "3"]),
        ({"auto_wrap_layers": ["torch.nn:Linear"]}, ["0.inner", "1", "3"]),
        ({"auto_wrap_layers": ["Linear"]}, ["0.inner", "1", "3"]),
        ({"auto_wrap_layers": ["Block"]}, ["0"]),
        ({"auto_wrap_layers": [SCENARIOS.Block]}, ["0"]),
        ({"auto_wrap_min_params": 300, "auto_wrap_layers": ["Block"]}, ["0"]),
        ({"auto_wrap_min_params": 200, "auto_wrap_layers": ["Block"]}, ["0", "1"]),
    ],
)
def test_auto_wrap_selects_submodules(options: dict[str, Any], expected: list[str]) -> None:
    strategy = FSDPStrategy(**options)
    assert sorted(wrapped_names(strategy, SCENARIOS.nested_model())) == expected


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.child = nn.Linear(4, 4)
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.child(x) * self.scale


def test_auto_wrap_goes_innermost_first() -> None:
    model = nn.Sequential(Outer(), nn.Linear(4, 1))
    strategy = FSDPStrategy(auto_wrap_layers=["Outer", "Linear"])
    # fully_shard must run bottom-up: a module after every submodule it contains.
    assert wrapped_names(strategy, model) == ["1", "0.child", "0"]


def test_modules_whose_parameters_are_all_claimed_are_not_wrapped() -> None:
    strategy = FSDPStrategy(auto_wrap_layers=["Block", "Linear"])
    # Block holds nothing but its inner Linear, which is wrapped already.
    assert sorted(wrapped_names(strategy, SCENARIOS.nested_model())) == ["0.inner", "1", "3"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"auto_wrap_layers": "Linear"}, "auto_wrap_layers='Linear' is not allowed"),
        ({"auto_wrap_layers": ["no.such.Module"]}, "'no.such.Module' cannot be imported"),
        ({"auto_wrap_layers": ["torch.Tensor"]}, "'torch.Tensor' is not a torch.nn.Module class"),
        ({"auto_wrap_layers": [3]}, "entry 3 is not allowed"),
        ({"auto_wrap_min_params": 0}, "auto_wrap_min_params=0 is not allowed"),
    ],
)
def test_bad_auto_wrap_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(MisconfigurationError, match=message.replace("(", r"\(")):
        FSDPStrategy(**options).auto_wrap_modules(SCENARIOS.nested_model())


def test_auto_wrap_option_types_are_checked_by_the_factory() -> None:
    with pytest.raises(MisconfigurationError, match="auto_wrap_min_params='many'"):
        stratlib.get_strategy("fsdp", accelerator="cpu", devices=2, auto_wrap_min_params="many")


#: The scenarios that train, run in one job: (scenario, strategy, options[, precision]).
AUTO_WRAP = {"auto_wrap_min_params": 100}
RUNS = {
    "whole": ("fsdp_nested", "fsdp", {}),
    "auto_wrap": ("fsdp_nested", "fsdp", AUTO_WRAP),
    "layers": ("fsdp_nested", "fsdp", {"auto_wrap_layers": ["torch.nn.Linear"]}),
    "cpu_offload": ("fsdp_nested", "fsdp_cpu_offload", AUTO_WRAP),
    "bf16-mixed": ("fsdp_nested", "fsdp", AUTO_WRAP, "bf16-mixed"),
    "16-mixed": ("fsdp_nested", "fsdp", AUTO_WRAP, "16-mixed"),
    "stale_optimizer": ("stale_optimizer", "fsdp", {}),
}


#: The module's job (its module-scoped fixture) runs once: its tests share one pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("fsdp2")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Any]]:
    """Every training scenario of this module, each a launch of its own, in one job (its
    processes start once); the resume scenario saves into a folder of its own."""
    folder = tmp_path_factory.mktemp("fsdp-resume")
    requests: dict[str, dict[str, Any]] = {
        name: {
            "scenario": run[0],
            "strategy_name": run[1],
            "options": run[2],
            "precision": run[3] if len(run) > 3 else None,
        }
        for name, run in RUNS.items()
    }
    requests["resume"] = {
        "scenario": "resume",
        "strategy_name": "fsdp",
        "options": {},
        "folder": str(folder),
    }
    return run_scenarios(requests)


def nested_reference(steps: int) -> dict[str, torch.Tensor]:
    model = SCENARIOS.nested_model()
    train_alone(model, steps)
    return model.state_dict()


@pytest.mark.parametrize(
    ("run", "wrapped"),
    [("whole", [""]), ("auto_wrap", ["", "0.inner", "1"]), ("layers", ["", "0.inner", "1", "3"])],
)
def test_auto_wrapped_model_trains_like_one_process(
    runs: dict[str, tuple[Any, Any]], run: str, wrapped: list[str]
) -> None:
    process, result = runs[run]
    assert process.returncode == 0, process.stderr
    assert result["wrapped"] == wrapped
    assert result["dtensors"] is True
    expected = nested_reference(steps=3)
    assert sorted(result["params"]) == sorted(expected)
    for name, tensor in expected.items():
        assert_close(result["params"][name], tensor)


# --- CPU offload -----------------------------------------------------------------------------


def test_cpu_offload_alias_selects_the_offload_policy() -> None:
    strategy = stratlib.get_strategy("fsdp_cpu_offload", accelerator="cpu", devices=2)
    assert isinstance(strategy, FSDPStrategy)
    assert strategy.cpu_offload is True
    policy = strategy.fsdp_kwargs()["offload_policy"]
    assert isinstance(policy, CPUOffloadPolicy)
    assert policy.pin_memory is False  # pinning needs an accelerator
    assert (
        "offload_policy"
        not in stratlib.get_strategy("fsdp", accelerator="cpu", devices=2).fsdp_kwargs()
    )


@pytest.mark.parametrize(
    ("run", "policy"), [("cpu_offload", "CPUOffloadPolicy"), ("auto_wrap", "OffloadPolicy")]
)
def test_cpu_offload_reaches_every_group_and_trains_like_one_process(
    runs: dict[str, tuple[Any, Any]], run: str, policy: str
) -> None:
    process, result = runs[run]
    assert process.returncode == 0, process.stderr
    # The root keeps the last Linear's parameters, so all three groups hold some.
    assert result["offload"] == {name: policy for name in ["", "0.inner", "1"]}
    assert result["local_devices"] == ["cpu"]
    for name, tensor in nested_reference(steps=3).items():
        assert_close(result["params"][name], tensor)


# --- mixed precision -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("precision", "dtype"), [("bf16-mixed", torch.bfloat16), ("16-mixed", torch.float16)]
)
def test_mixed_precision_policy(precision: str, dtype: torch.dtype) -> None:
    plugin = FullyShardedNativeMixedPrecisionPlugin(precision)
    strategy = FSDPStrategy(precision_plugin=plugin)
    root = strategy.fsdp_kwargs(root=True)["mp_policy"]
    inner = strategy.fsdp_kwargs(root=False)["mp_policy"]
    assert isinstance(root, MixedPrecisionPolicy)
    assert (root.param_dtype, root.reduce_dtype, root.output_dtype) == (
        dtype,
        torch.float32,
        torch.float32,
    )
    # Inner groups hand their outputs on in half precision, as the next group computes in it.
    assert (inner.param_dtype, inner.reduce_dtype, inner.output_dtype) == (
        dtype,
        torch.float32,
        None,
    )
    assert plugin.wraps_forward is False  # FSDP casts; no autocast around the forward pass
    assert "mp_policy" not in FSDPStrategy().fsdp_kwargs()


def test_sixteen_mixed_builds_torchs_sharded_grad_scaler_where_needed() -> None:
    plugin = FullyShardedNativeMixedPrecisionPlugin("16-mixed")
    plugin.connect(torch.device("cpu"), needs_grad_scaler=False)
    assert plugin.scaler is None
    plugin = FullyShardedNativeMixedPrecisionPlugin("16-mixed")
    with pytest.warns(UserWarning):  # no CUDA here: torch builds the scaler disabled
        plugin.connect(torch.device("cuda"), needs_grad_scaler=True)
    assert isinstance(plugin.scaler, ShardedGradScaler)
    assert plugin.scaler._device == "cuda"


@pytest.mark.parametrize(
    ("precision", "dtype"), [("bf16-mixed", "torch.bfloat16"), ("16-mixed", "torch.float16")]
)
def test_mixed_precision_computes_in_half_and_keeps_float32_shards(
    runs: dict[str, tuple[Any, Any]], precision: str, dtype: str
) -> None:
    process, result = runs[precision]
    assert process.returncode == 0, process.stderr
    assert result["plugin"] == "FullyShardedNativeMixedPrecisionPlugin"
    assert result["seen"] == {"weight": dtype, "input": dtype}  # inside the wrapped layer's forward
    assert result["outputs"] == ["torch.float32"] * 3
    assert result["sharded_dtypes"] == ["torch.float32"]
    for name, tensor in nested_reference(steps=3).items():
        assert_close(result["params"][name], tensor, atol=5e-2)


@pytest.mark.parametrize("scenario", ["interrupted", "interrupted_without_reset"])
def test_exception_in_a_sharded_forward_pass_surfaces_as_itself(scenario: str) -> None:
    # interrupted_without_reset: FSDP2 without FSDPModule.reset_iter_state, as in torch 2.11,
    # where teardown reshards the modules itself.
    process, _ = run_scenario(scenario, "fsdp", options={"auto_wrap_min_params": 100})
    assert process.returncode != 0
    assert process.stderr.rstrip().endswith("RuntimeError: deliberate failure in forward")
    assert "_local_tensor" not in process.stderr  # teardown did not trip over gathered parameters


@pytest.mark.parametrize("attempt", [1, 2])
def test_processes_exit_cleanly_after_asynchronous_collectives(attempt: int) -> None:
    # The sharded module, its optimizer and the mesh hold the process group; freed only at
    # interpreter shutdown, gloo's worker threads could abort the process.
    process, result = run_scenario("async_burst", "fsdp", steps=2)
    assert process.returncode == 0, process.stderr
    assert result == "done"


def test_full_precision_computes_in_float32(runs: dict[str, tuple[Any, Any]]) -> None:
    process, result = runs["auto_wrap"]
    assert process.returncode == 0, process.stderr
    assert result["plugin"] == "PrecisionPlugin"
    assert result["seen"] == {"weight": "torch.float32", "input": "torch.float32"}


# --- optimizers created before setup ---------------------------------------------------------


def test_optimizer_created_before_setup_is_rebound_to_the_sharded_parameters(
    runs: dict[str, tuple[Any, Any]],
) -> None:
    process, result = runs["auto_wrap"]
    assert process.returncode == 0, process.stderr
    assert result["replaced"] is True  # fully_shard swapped every parameter
    assert result["optimizer_uses_model_parameters"] is True
    assert result["rebound_in_place"] is True  # the same list object, now holding the new ones
    assert result["momentum_is_dtensor"] is True  # state was created for the sharded parameters


def test_optimizer_that_already_stepped_is_refused(runs: dict[str, tuple[Any, Any]]) -> None:
    process, result = runs["stale_optimizer"]
    assert process.returncode == 0, process.stderr
    assert "SGD already holds state" in result["error"]
    assert "load its state afterwards" in result["error"]


def test_optimizer_with_foreign_parameters_is_refused() -> None:
    model = reference_model()
    stray = nn.Parameter(torch.zeros(3, 2))
    optimizer = torch.optim.SGD([*model.parameters(), stray], lr=0.1)
    with pytest.raises(
        MisconfigurationError, match=r"shape \(3, 2\) that is not part of the module"
    ):
        FSDPStrategy().setup_module_and_optimizers(model, [optimizer])


# --- full state dicts --------------------------------------------------------------------------


def test_optimizer_state_is_full_on_rank_zero_and_loads_on_every_rank(
    runs: dict[str, tuple[Any, Any]],
) -> None:
    process, result = runs["resume"]
    assert process.returncode == 0, process.stderr
    reference = reference_model()
    optimizer = train_alone(reference, steps=3)
    names = [name for name, _ in reference.named_parameters()]
    state = result["consolidated"]["state"]
    assert sorted(state) == sorted(names)  # keyed by parameter name, every parameter present
    for name, parameter in reference.named_parameters():
        assert_close(state[name]["momentum_buffer"], optimizer.state[parameter]["momentum_buffer"])
    assert result["others_empty"] is True
    assert result["remaining"] == {"steps": 3}
    # Saved after 3 steps, restored on both ranks after 2 more: one more step equals 4 steps.
    expected = reference_model()
    train_alone(expected, steps=4)
    for actual, tensor in zip(result["params"], expected.state_dict().values(), strict=True):
        assert_close(actual, tensor)
