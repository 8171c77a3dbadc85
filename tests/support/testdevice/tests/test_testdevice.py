"""The test device in one process: tensors, memory, copies, guard, RNG, autocast, training."""

from __future__ import annotations

from collections.abc import Callable

import pytest

RunCheck = Callable[..., list[str]]  # the run_check fixture of conftest.py


def test_tensors_live_on_two_devices_and_are_counted(run_check: RunCheck) -> None:
    run_check("tensors_and_memory")


def test_copies_round_trip_across_both_devices(run_check: RunCheck) -> None:
    run_check("copies")


def test_guard_switches_devices_and_streams_and_events_work(run_check: RunCheck) -> None:
    run_check("guard_streams_events")


def test_random_numbers_are_reproducible_per_seed_and_per_device(run_check: RunCheck) -> None:
    run_check("random")


def test_autocast_bf16_and_fp16(run_check: RunCheck) -> None:
    run_check("autocast")


def test_grad_scaler_steps_on_the_device(run_check: RunCheck) -> None:
    run_check("grad_scaler")


@pytest.mark.parametrize("count", ["2", "3"])
def test_accelerator_is_the_device_with_its_count(run_check: RunCheck, count: str) -> None:
    run_check("accelerator", env={"STRATGEN_TESTDEVICE_COUNT": count})


@pytest.mark.parametrize("keep", ["1", "0"], ids=["kept-as-vendors", "replaced-as-torch_xla"])
def test_module_to_keeps_or_replaces_parameters(run_check: RunCheck, keep: str) -> None:
    run_check("parameters", env={"STRATGEN_TESTDEVICE_KEEP_PARAMETERS": keep})


def test_training_matches_the_cpu(run_check: RunCheck) -> None:
    run_check("training")
