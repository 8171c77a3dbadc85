"""The test device's c10d backend in two real processes (a FileStore each): collectives, DDP,
FSDP2 and DTensor on the device, with results compared to the CPU's."""

from __future__ import annotations

from collections.abc import Callable

RunCheck = Callable[..., list[str]]  # the run_check fixture of conftest.py


def test_collectives_on_the_device(run_check: RunCheck) -> None:
    run_check("collectives", ranks=2)


def test_ddp_and_fsdp2_steps_match_the_cpu(run_check: RunCheck) -> None:
    run_check("ddp_and_fsdp2", ranks=2)


def test_dtensor_redistributes_on_the_device(run_check: RunCheck) -> None:
    run_check("dtensor", ranks=2)
