"""What the ``horovod`` strategy says without a horovodrun job: the command lines it names, its
facts, and its errors where Horovod is missing or the script was not started by horovodrun."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from stratcore.imports import module_available
from stratcore.launchers.horovodrun import HorovodRunLauncher, horovodrun_command
from stratcore.wrappers.horovod import HOROVOD_OPS

import stratlib
from stratlib import HorovodEnvironment, HorovodStrategy


@pytest.fixture
def without_horovod(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Horovod made impossible to import (it is installed here)."""
    monkeypatch.setitem(sys.modules, "horovod", None)
    module_available.cache_clear()
    yield
    module_available.cache_clear()


def test_horovodrun_command_lines() -> None:
    single = horovodrun_command(2, num_nodes=1, processes_per_node=2)
    assert single.startswith("horovodrun -np 2 ") and " -H " not in single
    multi = horovodrun_command(8, num_nodes=2, processes_per_node=4)
    assert multi.startswith("horovodrun -np 8 -H host1:4,host2:4 ")


def test_a_job_on_this_machine_is_started_by_horovodrun_with_gloo() -> None:
    command = HorovodRunLauncher.job_command(["python", "train.py"], 2)
    assert command[1:] == ["-np", "2", "-H", "localhost:2", "--gloo", "python", "train.py"]
    assert command[0].endswith("horovodrun")


def test_horovod_facts() -> None:
    assert HorovodStrategy.launcher_class is HorovodRunLauncher
    assert HorovodStrategy.cluster == ("horovod", "mpi")
    assert HorovodStrategy.backend is not None and HorovodStrategy.backend.name == "horovod"
    assert HorovodStrategy.backend.reduce_ops == frozenset(HOROVOD_OPS)
    assert HorovodEnvironment.detect_condition.all_set == ("HOROVOD_RANK", "HOROVOD_SIZE")
    with pytest.raises(stratlib.MisconfigurationError, match="gradient_compression='zip'"):
        stratlib.get_strategy("horovod", accelerator="cpu", gradient_compression="zip")


@pytest.mark.usefixtures("without_horovod")
def test_without_horovod_the_error_says_how_to_install_it() -> None:
    with pytest.raises(
        stratlib.MissingDependencyError,
        match=r"'horovod\.torch'.*HOROVOD_WITH_PYTORCH=1 pip install .*C\+\+ standard raised to 17",
    ):
        stratlib.get_strategy("horovod", accelerator="cpu", devices=2)


@pytest.mark.usefixtures("horovod")
def test_outside_horovodrun_the_error_names_the_command() -> None:
    """Two processes asked for, none started by horovodrun: nothing runs, and the error says
    how to start the script."""
    ran = []
    strategy = stratlib.get_strategy("horovod", accelerator="cpu", devices=2)
    with pytest.raises(stratlib.MisconfigurationError) as raised:
        strategy.launch(lambda strategy: ran.append(strategy))
    assert str(raised.value).startswith(
        "HorovodStrategy does not start processes itself: horovodrun does. Run: horovodrun -np 2 "
    )
    assert ran == []
