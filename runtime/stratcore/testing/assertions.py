"""Assertions of the generated tests about training, collectives and the strategy API."""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..contract import DEFAULT_PRECISION, PRECISIONS
from ..exceptions import MisconfigurationError, MissingDependencyError
from ..imports import import_object
from ..registry import registry_of
from .expectations import Expectation, precision_tolerance, reference_dtype
from .reference import LARGE_INT, reference_batch, reference_model, reference_parameters

if TYPE_CHECKING:
    from ..precision.base import PrecisionBase
    from ..strategy import StrategyBase


def assert_parameters_close(
    actual: Sequence[Any], expected: Sequence[torch.Tensor], atol: float = 1e-5
) -> None:
    """Assert that trained parameters equal the expected ones within ``atol``, naming the first
    that differs."""
    assert len(actual) == len(expected), f"{len(actual)} tensors, expected {len(expected)}"
    for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
        got = torch.tensor(a, dtype=e.dtype if e.dtype == torch.float64 else torch.float32)
        assert got.shape == e.shape, f"tensor {index}: shape {tuple(got.shape)} != {tuple(e.shape)}"
        assert torch.allclose(got, e.to(got.dtype), atol=atol, rtol=0), (
            f"tensor {index} differs from the single-process reference by "
            f"{(got - e.to(got.dtype)).abs().max().item():.3g}"
        )


def assert_training_converges(result: dict[str, Any]) -> None:
    """Losses of the ``train`` scenario are finite and the last is below the first."""
    losses = result["losses"]
    assert losses and all(math.isfinite(v) for v in losses), f"losses not finite: {losses}"
    assert losses[-1] < losses[0], f"the loss did not decrease: {losses}"


def assert_options(strategy: Any, expected: dict[str, Any]) -> None:
    """A built strategy holds every option at the expected value."""
    actual = {name: getattr(strategy, name, "<missing>") for name in expected}
    assert actual == expected, (
        f"{type(strategy).__name__} was built with options {actual}, "
        f"expected {expected} (the spec's defaults and the registry name's preset)"
    )


def assert_precisions(
    cls: type[StrategyBase], accelerator: str, devices: int, expected: Expectation
) -> None:
    """``get_strategy`` runs the default precision when none is given, every supported one
    when asked, and refuses every other one with a clear error."""
    package = importlib.import_module(registry_of(cls).package)
    name = cls.name
    chosen = package.get_strategy(name, accelerator=accelerator, devices=devices)
    assert chosen.precision_plugin.precision == expected.default_precision, (
        f"{name} runs in {chosen.precision_plugin.precision!r} by default on {accelerator!r}, "
        f"expected {expected.default_precision!r}"
    )
    for mode in PRECISIONS:
        if _probe_refuses(package, cls, accelerator, devices, mode, expected):
            continue
        if mode in expected.precisions and _machine_refuses(
            package, cls, accelerator, devices, mode
        ):
            continue
        if mode in expected.precisions:
            try:
                built = package.get_strategy(
                    name, accelerator=accelerator, devices=devices, precision=mode
                )
            except MissingDependencyError as exc:
                # A guarded precision: supported, but its package is not installed here.
                assert mode in str(exc) and "install" in str(exc), (
                    f"{name} refused the supported precision {mode!r} without naming what to "
                    f"install: {exc}"
                )
                continue
            assert (
                built.precision_plugin.precision == mode
            ), f"{name} asked for {mode!r} runs in {built.precision_plugin.precision!r}"
            continue
        try:
            package.get_strategy(name, accelerator=accelerator, devices=devices, precision=mode)
        except (MisconfigurationError, MissingDependencyError) as exc:
            # A precision whose package is missing is refused by naming the package first.
            assert mode in str(exc), f"refusing {mode!r}, the error does not name it: {exc}"
        else:
            raise AssertionError(
                f"{name} accepted precision={mode!r} on {accelerator!r}; "
                f"it supports only {', '.join(expected.precisions)}"
            )


def _probe_refuses(
    package: Any,
    cls: type[StrategyBase],
    accelerator: str,
    devices: int,
    mode: str,
    expected: Expectation,
) -> bool:
    """For a precision the device runs only where its probe says so: whether the probe, asked
    here, says no, after checking that ``get_strategy`` refuses the precision naming it."""
    probe = expected.probes.get(mode)
    if probe is None or not registry_of(cls).accelerators[accelerator].is_available():
        return False
    name = cls.name
    if import_object(probe)():
        return False
    try:
        package.get_strategy(name, accelerator=accelerator, devices=devices, precision=mode)
    except MisconfigurationError as exc:
        shown = probe.replace(":", ".")
        assert mode in str(exc) and shown in str(exc), (
            f"refusing {mode!r}, which {shown}() says the device lacks, the error names "
            f"neither: {exc}"
        )
        return True
    raise AssertionError(
        f"{name} accepted precision={mode!r} on {accelerator!r} although {probe} says the "
        "device cannot run it"
    )


def _machine_refuses(
    package: Any, cls: type[StrategyBase], accelerator: str, devices: int, mode: str
) -> bool:
    """For a supported precision the strategy itself cannot run on this machine (its
    ``precision_refused``, e.g. DeepSpeed in float16 on a CPU without float16 kernels):
    whether it says so, after checking that ``get_strategy`` refuses it with that reason."""
    refused = cls.precision_refused(mode, registry_of(cls).accelerators[accelerator])
    if refused is None:
        return False
    try:
        package.get_strategy(cls.name, accelerator=accelerator, devices=devices, precision=mode)
    except MisconfigurationError as exc:
        assert str(exc) == refused, f"refusing {mode!r}, the error is not the reason: {exc}"
        return True
    raise AssertionError(f"{cls.name} accepted precision={mode!r} on {accelerator!r}: {refused}")


def assert_trains_like_one_process(
    result: dict[str, Any], steps: int, expected: Expectation
) -> None:
    """Rank 0's parameters after ``steps`` equal one process training on the whole batch, at
    the same precision (parameters in the precision's dtype) within its tolerance."""
    precision = result["precision"]
    assert (
        precision == expected.default_precision
    ), f"trained in {precision!r}, expected the default {expected.default_precision!r}"
    assert (
        result["world_size"] == expected.devices
    ), f"trained on {result['world_size']} processes, expected {expected.devices}"
    reference = reference_parameters(steps=steps, dtype=reference_dtype(precision))
    assert_parameters_close(result["params"], reference, atol=precision_tolerance(precision))
    assert_hooks_called(result["hook_calls"], steps, expected)


def assert_trains_in_precision(result: dict[str, Any], precision: str) -> None:
    """The ``train`` scenario of a strategy asked for ``precision`` ran in it and its loss
    went down."""
    assert (
        result["precision"] == precision
    ), f"trained in {result['precision']!r}, asked for {precision!r}"
    assert_training_converges(result)


def assert_checkpoint_round_trip(result: dict[str, Any]) -> None:
    """The ``checkpoint`` scenario saved ``{"model", "optimizer", "step": 1}``, trained on and
    loaded with ``state={"model", "optimizer"}``: the saved weights came back in place, and
    ``load_checkpoint`` returned the one entry the state did not name (its documented
    behaviour); the file (or a sharded checkpoint's folder) exists and rank 0 reported."""
    expected = {"restored": True, "remaining": {"step": 1}, "exists": True, "rank": 0}
    assert (
        result == expected
    ), f"the checkpoint did not restore the saved state: {result} (expected {expected})"


def assert_hooks_called(calls: dict[str, int], steps: int, expected: Expectation) -> None:
    """Each step hook ran once per step at its point (twice where one function serves both)."""
    wanted: dict[str, int] = {}
    for path in expected.step_hooks.values():
        wanted[path] = wanted.get(path, 0) + steps
    assert calls == wanted, (
        f"step hooks ran {calls} times in {steps} steps, expected {wanted} "
        f"(hooks: {expected.step_hooks})"
    )


def assert_collectives(
    result: dict[str, Any], world_size: int, expected: Expectation | None = None
) -> None:
    """Check rank 0's view of the ``collectives`` scenario against what the backend declares:
    its reductions are exact, 'mean' is emulated where it is not declared, other reductions
    are refused with an error naming the backend, and declared casts are applied and undone."""
    expected = expected or Expectation(
        devices=world_size, default_precision=DEFAULT_PRECISION, precisions=()
    )
    ranks = list(range(world_size))
    assert (
        result["world_size"] == world_size
    ), f"world size {result['world_size']}, expected {world_size}"
    assert result["rank"] == 0, f"rank 0 reported as rank {result['rank']}"
    values = [float(r + 1) for r in ranks]
    exact = {
        "sum": sum(values),
        "product": math.prod(values),
        "min": min(values),
        "max": max(values),
        "mean": sum(values) / world_size,
    }
    reductions = result["reductions"]
    for op, value in exact.items():
        got = reductions[op]
        if op in expected.reduce_ops or op == "mean" or world_size == 1:
            assert (
                isinstance(got, float) and abs(got - value) < 1e-6
            ), f"reduce_op={op!r} over {world_size} ranks gave {got!r}, expected {value}"
        else:
            assert isinstance(got, str) and got.startswith("refused:") and op in got, (
                f"reduce_op={op!r}, which backend {expected.backend!r} does not declare, "
                f"gave {got!r}; expected a clear refusal"
            )
    cast = expected.casts.get("int64") if world_size > 1 else None
    addends = [torch.tensor(LARGE_INT + r) for r in ranks]
    if cast is not None:
        addends = [a.to(getattr(torch, cast)) for a in addends]
    large = int(sum(addends[1:], addends[0]).to(torch.int64).item())
    assert result["large_int_sum"] == [large, "int64"], (
        f"summing int64 {LARGE_INT}+rank gave {result['large_int_sum']}, expected {large} as "
        f"int64 ({'reduced as ' + cast if cast else 'reduced exactly'})"
    )
    if world_size > 1 and result["process_group_backend"] is not None:
        wanted = expected.backend
        if expected.backend_from_device_map:
            import torch.distributed as dist

            wanted = dist.Backend.default_device_backend_map.get(result["device_type"])
        assert (
            result["process_group_backend"] == wanted
        ), f"the process group runs {result['process_group_backend']!r}, expected {wanted!r}"
    assert result["gather"] == [[r, 10 * r] for r in ranks], f"all_gather gave {result['gather']}"
    assert result["broadcast"] == {
        "sender": 0,
        "items": [1, 2],
    }, f"broadcast gave {result['broadcast']}"
    assert result["all_true"] is True, "reduce_boolean_decision(True, all=True) is not True"
    assert result["all_rank0"] is (
        world_size == 1
    ), "reduce_boolean_decision(rank == 0, all=True) is wrong"
    assert result["any_rank0"] is True, "reduce_boolean_decision(rank == 0, all=False) is not True"
    assert result["sampler"] == {
        "num_replicas": world_size,
        "rank": 0,
    }, f"distributed_sampler_kwargs: {result['sampler']}"
    assert result["every_rank"] == ranks, f"ranks seen after the barrier: {result['every_rank']}"


def assert_api(
    result: dict[str, Any], world_size: int, expected: Expectation | None = None
) -> None:
    """Check rank 0's report of the ``api`` scenario: every member exists and behaves."""
    assert result["missing_methods"] == [], f"missing methods: {result['missing_methods']}"
    assert result["missing_properties"] == [], f"missing properties: {result['missing_properties']}"
    props = result["properties"]
    assert (
        props["global_rank"] == 0 and props["local_rank"] == 0 and props["node_rank"] == 0
    ), f"rank 0 reports ranks {props['global_rank']}, {props['local_rank']}, {props['node_rank']}"
    assert (
        props["world_size"] == world_size and props["is_global_zero"] is True
    ), f"world size {props['world_size']} (expected {world_size}), global zero {props['is_global_zero']}"
    assert props["root_device"] in props["parallel_devices"], props
    assert props["distributed_sampler_kwargs"] == {
        "num_replicas": world_size,
        "rank": 0,
    }, f"distributed_sampler_kwargs: {props['distributed_sampler_kwargs']}"
    for plugin in ("accelerator", "precision_plugin", "checkpoint_io", "launcher"):
        assert isinstance(props[plugin], str) and props[plugin], f"{plugin}: {props[plugin]!r}"
    assert result["empty_before_setup"], "model or optimizers set before setup()"
    assert result["model_to_device"], "model_to_device did not move the module to root_device"
    assert (
        result["owns_model"] and result["owns_optimizer"]
    ), "the strategy does not hold what setup() returned"
    assert result["step_changed_parameters"], "backward + optimizer_step changed no parameter"
    assert result["grads_synced"] in (True, None), "gradients differ across ranks after backward"
    assert result["grads_agree_after_block"] in (
        True,
        None,
    ), "gradients not synchronised after block_backward_sync"
    assert_collectives(result["collectives"], world_size, expected)
    assert result[
        "full_state_dict"
    ], "get_module_state_dict is not the full state of the user's module"
    assert result["checkpoint_loaded_on_every_rank"], "a rank could not load the checkpoint"
    assert result["checkpoint_restored"], "load_checkpoint did not restore the saved state"


def assert_precision_plugin_trains(plugin_cls: type[PrecisionBase], precision: str) -> None:
    """One training step through a single-device strategy with this plugin on the CPU."""
    package = importlib.import_module(registry_of(plugin_cls).package)
    plugin = plugin_cls(precision)
    if plugin_cls.wrappers or (plugin_cls.accelerators and "cpu" not in plugin_cls.accelerators):
        return  # exercised by the tests of the strategies it belongs to
    strategy = package.SingleDeviceStrategy(
        device="cpu", accelerator=package.CPUAccelerator(), precision_plugin=plugin
    )
    model = reference_model()
    model, _ = strategy.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    before = [p.detach().clone() for p in model.parameters()]
    x, y = reference_batch()
    output = model(x)
    assert output.dtype == torch.get_default_dtype() or plugin.precision.endswith("-true")
    loss = nn.functional.mse_loss(output.float(), y)
    assert torch.isfinite(loss)
    strategy.backward(loss)
    strategy.optimizer_step()
    after = list(model.parameters())
    assert any(
        not torch.equal(a, b) for a, b in zip(after, before, strict=True)
    ), "no parameter changed"
    strategy.teardown()
