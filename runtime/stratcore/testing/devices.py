"""Assertions of the generated tests about accelerators and cluster environments."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..exceptions import MisconfigurationError
from ..registry import registry_of
from .environ import cluster_variables

if TYPE_CHECKING:
    from ..accelerator import Accelerator
    from ..strategy import StrategyBase


def devices_refused(accelerator: type[Accelerator], devices: Any) -> str | None:
    """The accelerator's own error for ``devices`` (``parse_devices``), or None if it takes
    them."""
    try:
        accelerator.parse_devices(devices)
    except MisconfigurationError as exc:
        return str(exc)
    return None


def assert_device_parsing(accelerator: type[Accelerator], *, indexed: bool, counted: bool) -> None:
    """Device selection of an available accelerator: numbers, 'auto' and -1 as the device count
    says, index lists only for indexed devices, and clear errors for the rest."""
    name = accelerator.__name__
    count = accelerator.device_count()
    assert (count is not None) is counted, f"{name}.device_count() is {count!r}: expected " + (
        "a number (the spec names a count function)" if counted else "None (devices are processes)"
    )
    for one in (1, "1"):
        assert accelerator.parse_devices(one) == [0], f"devices={one!r} is not one device"
    assert len(accelerator.parse_devices("auto")) >= 1, "devices='auto' selects no device"
    if count is None:
        assert accelerator.parse_devices(3) == [0, 1, 2], "devices=3 is not three processes"
        assert devices_refused(
            accelerator, -1
        ), "devices=-1 accepted although any number may be started"
    else:
        for every in (-1, "-1"):
            assert accelerator.parse_devices(every) == list(
                range(count)
            ), f"devices={every!r} does not select all {count} devices"
        assert devices_refused(
            accelerator, count + 1
        ), f"devices={count + 1} accepted with {count} present"
    listed = devices_refused(accelerator, [0])
    if indexed:
        assert listed is None, f"devices=[0] refused by an indexed accelerator: {listed}"
    else:
        assert (
            listed is not None and "not addressed by index" in listed
        ), f"devices=[0] should be refused: {name} devices are not addressed by index ({listed})"
    for bad in (0, -2, "x", 1.5, True):
        message = devices_refused(accelerator, bad)
        assert message is not None, f"devices={bad!r} was accepted"
        assert "devices=" in message, f"the error for devices={bad!r} does not name it: {message}"


def assert_devices_addressed(
    accelerator: type[Accelerator], *, device_type: str | None, indexed: bool
) -> None:
    """Processes get devices of the declared type (None: the type the accelerator finds at
    run time), each its own index or all the whole device."""
    device_type = device_type or accelerator.device_type
    missing = [r for r in accelerator.requires if not r.available]
    if missing and not _torch_names(device_type):
        import pytest  # the device's software, absent here, gives torch its device type

        pytest.skip(missing[0].message(f"accelerator={accelerator.name!r}"))
    devices = accelerator.get_parallel_devices([0, 1])
    expected = (
        [torch.device(device_type, i) for i in (0, 1)]
        if indexed
        else [torch.device(device_type)] * 2
    )
    assert devices == expected, f"two processes get {devices}, expected {expected}"


def _torch_names(device_type: str) -> bool:
    """Whether torch knows ``device_type`` (an extension's type is known once it is imported)."""
    try:
        torch.device(device_type)
    except RuntimeError:
        return False
    return True


def assert_visible_devices_named(
    accelerator: type[Accelerator], variable: str, monkeypatch: Any
) -> None:
    """Asking for more devices than are visible names the visible-devices variable."""
    monkeypatch.setenv(variable, "0")
    count = accelerator.device_count()
    assert count is not None, f"{accelerator.__name__} cannot count its visible devices"
    message = devices_refused(accelerator, count + 1)
    assert message is not None, f"devices={count + 1} accepted with {count} visible"
    assert f"{variable}='0'" in message, f"the error does not name {variable}: {message}"


def set_environment(
    monkeypatch: Any, folder: Any, environ: dict[str, str], files: dict[str, str]
) -> None:
    """Set variables for an environment test; ``files`` become files whose paths the variables
    hold. '<hostname>' stands for this machine's host name."""
    import socket

    for name in cluster_variables():
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    for name, content in files.items():
        path = Path(folder) / f"{name.lower()}.txt"
        path.write_text(content.replace("<hostname>", socket.gethostname()), encoding="utf-8")
        monkeypatch.setenv(name, str(path))


def _satisfying(condition: Any) -> dict[str, str]:
    """Variables under which a detection condition holds."""
    environ = dict.fromkeys(condition.all_set, "1")
    if condition.any_set and not any(name in environ for name in condition.any_set):
        environ[condition.any_set[0]] = "1"
    return environ


def assert_detection_priority(cls: type[StrategyBase], monkeypatch: Any) -> None:
    """With the variables of two environments set at once, ``cls`` detects the one that comes
    first in its order (or one before it that the same variables also satisfy)."""
    registry = registry_of(cls)
    environments = registry.cluster_environments
    order = [name for name in cls.cluster if name in environments]
    checked = 0
    for first_index, first in enumerate(order):
        for second in order[first_index + 1 :]:
            environ = {
                **_satisfying(environments[second].detect_condition),
                **_satisfying(environments[first].detect_condition),
            }
            if not environments[first].detect_condition.holds(environ):
                continue
            for name in cluster_variables():
                monkeypatch.delenv(name, raising=False)
            for name, value in environ.items():
                monkeypatch.setenv(name, value)
            expected = next(
                n
                for n in order
                if environments[n].detect_condition.holds(environ) and environments[n].detect()
            )
            detected = registry.detect_environment(cls)
            assert type(detected) is environments[expected], (
                f"with {sorted(environ)} set, {cls.__name__} detected {type(detected).__name__}, "
                f"expected {environments[expected].__name__} (order: {', '.join(order)})"
            )
            assert order.index(expected) <= first_index
            checked += 1
    assert checked or len(order) < 2, f"{cls.__name__}: no pair of environments could be checked"


def environment_values(environment: Any) -> dict[str, Any]:
    """Every value a cluster environment reads (world size, ranks, address, port, and the
    layout where it says it: None where it does not), by name."""
    return {
        "world_size": environment.world_size(),
        "global_rank": environment.global_rank(),
        "local_rank": environment.local_rank(),
        "node_rank": environment.node_rank(),
        "main_address": environment.main_address,
        "main_port": environment.main_port,
        "local_world_size": environment.local_world_size(),
        "device": environment.device(),
    }


def expected_values(expected: dict[str, Any]) -> dict[str, Any]:
    """Expected readings, '<hostname>' replaced; readings the example leaves open are taken
    as read (they come from fallbacks such as a free port)."""
    import socket

    resolved = {k: socket.gethostname() if v == "<hostname>" else v for k, v in expected.items()}
    return _OpenDict(resolved)


class _OpenDict(dict[str, Any]):
    """Compares equal to a dict that agrees on every key this one has."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, dict) and all(other.get(k) == v for k, v in self.items())

    __hash__ = None
