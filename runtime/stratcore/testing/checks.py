"""The checks of the generated tests (``suite``), one a case, each fed a row of a table
(``rows``).

Each skips, with the reason, where this machine lacks the hardware or a package; each failure
names what was expected and what happened.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any

from ..exceptions import MisconfigurationError, MissingDependencyError
from ..registry import registry_of
from . import devices
from .assertions import assert_options, assert_precision_plugin_trains, assert_precisions
from .expectations import available_or_skip, runnable_or_skip, unavailable_plugin_reason
from .jobs import ScenarioJobs
from .rows import AcceleratorRow, EnvironmentRow, JobVariables, PrecisionPluginRow, StrategyRow

# --- strategies ----------------------------------------------------------------------------------


def assert_registry_name(row: StrategyRow, name: str, options: dict[str, Any]) -> None:
    """``get_strategy(name)`` builds the row's class holding ``options`` (its defaults and the
    name's preset)."""
    accelerator = runnable_or_skip(row.cls, row.devices)
    package = importlib.import_module(registry_of(row.cls).package)
    strategy = package.get_strategy(
        name, accelerator=accelerator, devices=row.expectation(accelerator).devices
    )
    built = type(strategy)
    assert built is row.cls, f"{name!r} built {built.__name__}, expected {row.cls.__name__}"
    assert_options(strategy, options)


def check_strategy(row: StrategyRow, case: str, monkeypatch: Any) -> None:
    """One case of ``rows.STRATEGY_CASES``: the default precision runs, every supported one
    runs and every other one is refused; with the variables of two cluster environments set,
    the one first in the strategy's order is detected."""
    if case == "runs_its_precisions_and_refuses_the_others":
        accelerator = runnable_or_skip(row.cls, row.devices)
        expected = row.expectation(accelerator)
        assert_precisions(row.cls, accelerator, expected.devices, expected)
    elif case == "detects_cluster_environments_in_order":
        devices.assert_detection_priority(row.cls, monkeypatch)
    else:
        raise ValueError(f"no strategy case {case!r}")


def check_real_run(row: StrategyRow, case: str, jobs: ScenarioJobs, folder: Path) -> None:
    """One real-run case, read from the report of the strategy's job (``jobs``): those of
    ``rows.RUN_CASES``, and rank 1 raising, which must end the job naming the rank and its
    error."""
    jobs.check(row, case)


# --- accelerators --------------------------------------------------------------------------------


def check_accelerator(row: AcceleratorRow, case: str, monkeypatch: Any) -> None:
    """One case of ``rows.ACCELERATOR_CASES`` for the accelerator of ``row``."""
    cls = row.cls
    if case == "is_registered_under_its_name":
        found = registry_of(cls).accelerators.get(row.name)
        assert found is cls, f"accelerator={row.name!r} selects {found!r}, not {cls.__name__}"
    elif case == "gives_processes_their_devices":
        devices.assert_devices_addressed(cls, device_type=row.device_type, indexed=row.indexed)
    elif case == "parses_devices":
        available_or_skip(cls)
        devices.assert_device_parsing(cls, indexed=row.indexed, counted=row.counted)
    elif case == "names_its_visible_devices_variable":
        assert row.visible_devices_env is not None, f"{row.name} names no such variable"
        available_or_skip(cls)
        devices.assert_visible_devices_named(cls, row.visible_devices_env, monkeypatch)
    elif case == "absent_is_a_clear_error":
        import pytest

        if cls.is_available():
            pytest.skip(f"a {row.name} device is present")
        named = re.escape(row.requires or row.name)
        with pytest.raises((MisconfigurationError, MissingDependencyError), match=named):
            cls.check_available()
    else:
        raise ValueError(f"no accelerator case {case!r}")


# --- cluster environments ------------------------------------------------------------------------


def check_environment(
    row: EnvironmentRow,
    case: str,
    variable: str | None,
    value: str | None,
    monkeypatch: Any,
    folder: Path,
) -> None:
    """One case of ``rows.ENVIRONMENT_CASES``: registered under its name, detected from its
    variables and reading the values they hold; not detected without ``variable`` (``value``
    None) or with it set to ``value``; the ranks of ``UNEVEN_JOB`` read as the scheduler set
    them, by the environment and by a strategy under it; detected inside the environment named
    ``variable``, before it."""
    if case == "detected_from_its_variables":
        _assert_environment_detected(row, monkeypatch, folder)
    elif case == "not_detected":
        assert variable is not None
        _assert_environment_not_detected(row, variable, value, monkeypatch, folder)
    elif case == "reads_the_ranks_of_an_uneven_job":
        assert row.uneven is not None
        _assert_uneven_ranks(row, row.uneven, monkeypatch, folder)
    elif case == "detected_inside":
        assert variable is not None
        _assert_detected_inside(row, variable, monkeypatch, folder)
    else:
        raise ValueError(f"no environment case {case!r}")


def _assert_environment_detected(row: EnvironmentRow, monkeypatch: Any, folder: Path) -> None:
    cls = row.cls
    found = registry_of(cls).cluster_environments.get(row.name)
    assert found is cls, f"{cls.__name__} is not registered as {row.name!r} ({found!r} is)"
    _assert_reads(row, JobVariables(row.environ, row.files, row.expected), monkeypatch, folder)
    assert (
        cls().creates_processes_externally is row.external
    ), f"{cls.__name__} is wrong about who starts the processes"


def _assert_reads(
    row: EnvironmentRow, job: JobVariables, monkeypatch: Any, folder: Path
) -> dict[str, Any]:
    """Under ``job``'s variables the row's environment is detected and reads what ``job``
    expects; returns what it read."""
    cls = row.cls
    devices.set_environment(monkeypatch, folder, dict(job.environ), files=dict(job.files))
    assert cls.detect(), f"{cls.__name__} is not detected although its variables are set"
    values = devices.environment_values(cls())
    assert values == devices.expected_values(dict(job.expected)), f"read {values}"
    return values


def _assert_environment_not_detected(
    row: EnvironmentRow, variable: str, value: str | None, monkeypatch: Any, folder: Path
) -> None:
    environ, files = dict(row.environ), dict(row.files)
    if value is None:
        environ.pop(variable, None)
        files.pop(variable, None)
    else:
        environ[variable] = value
    devices.set_environment(monkeypatch, folder, environ, files=files)
    assert not row.cls.detect(), f"{row.cls.__name__} detected with {variable}={value!r}"


def _assert_uneven_ranks(
    row: EnvironmentRow, job: JobVariables, monkeypatch: Any, folder: Path
) -> None:
    """The ranks of a job whose nodes hold unequal numbers of processes are the scheduler's:
    read so by the environment, and kept so by a parallel strategy of the package that
    detects it, once the strategy has configured its ranks (where the package has one that
    runs here on the CPU)."""
    from ..parallel import ParallelStrategyBase

    read = _assert_reads(row, job, monkeypatch, folder)
    registry = registry_of(row.cls)
    for name, entry in registry.strategies.items():
        cls = entry.cls
        if (
            entry.preset
            or inspect.isabstract(cls)
            or not issubclass(cls, ParallelStrategyBase)
            or cls.one_process_per_node
            or row.name not in cls.cluster
            or (cls.accelerators and "cpu" not in cls.accelerators)
            or not all(requirement.available for requirement in cls.requires)
        ):
            continue
        package = importlib.import_module(registry.package)
        strategy = package.get_strategy(name, accelerator="cpu", cluster_environment=row.cls())
        strategy.configure_ranks()
        ranks = {
            "world_size": strategy.world_size,
            "global_rank": strategy.global_rank,
            "local_rank": strategy.local_rank,
            "node_rank": strategy.node_rank,
        }
        expected = {key: read[key] for key in ranks}
        assert ranks == expected, f"{name!r} under {row.cls.__name__}: {ranks}, expected {expected}"
        return


def _assert_detected_inside(
    row: EnvironmentRow, outer: str, monkeypatch: Any, folder: Path
) -> None:
    """With the variables another environment leaves to the processes it runs (``outer``,
    which would be detected by them alone), the row's environment is detected, reads its own
    values, and every strategy of the package that may detect both detects it."""
    registry = registry_of(row.cls)
    outer_cls = registry.cluster_environments[outer]
    _assert_reads(row, row.inside[outer], monkeypatch, folder)
    assert outer_cls.detect(), (
        f"{outer_cls.__name__} is not detected by the variables it leaves: the case shows "
        "nothing"
    )
    for name, entry in registry.strategies.items():
        cluster = entry.cls.cluster
        if entry.preset or row.name not in cluster or outer not in cluster:
            continue
        detected = registry.detect_environment(entry.cls)
        assert type(detected) is row.cls, (
            f"{name!r} detected {type(detected).__name__} inside {outer_cls.__name__}, "
            f"expected {row.cls.__name__} (order: {', '.join(cluster)})"
        )


# --- precision plugins ---------------------------------------------------------------------------


def check_precision_plugin(row: PrecisionPluginRow, precision: str | None) -> None:
    """With ``precision`` None: the plugin is among the selectable ones. Else one training step
    in ``precision`` through a single-device strategy with the plugin."""
    if precision is None:
        assert (
            row.cls in registry_of(row.cls).precision_plugins
        ), f"{row.cls.__name__} is not among the selectable plugins"
        return
    reason = unavailable_plugin_reason(row.cls)
    if reason is not None:
        import pytest

        pytest.skip(reason)
    assert_precision_plugin_trains(row.cls, precision)


# --- abstract bases ------------------------------------------------------------------------------


def assert_abstract_base(cls: type[Any]) -> None:
    """An abstract base strategy has no registry name, an abstract cluster environment is never
    detected, and an abstract precision plugin never chosen."""
    from ..environment import ClusterEnvironmentBase
    from ..precision.base import PrecisionBase
    from ..strategy import StrategyBase

    registry = registry_of(cls)
    if issubclass(cls, StrategyBase):
        named = [name for name, entry in registry.strategies.items() if entry.cls is cls]
        assert not named, f"{cls.__name__}, an abstract base, is registered as {named}"
    elif issubclass(cls, ClusterEnvironmentBase):
        detectable = registry.cluster_environments.values()
        assert cls not in detectable, f"{cls.__name__}, an abstract base, is detectable"
    elif issubclass(cls, PrecisionBase):
        selectable = registry.precision_plugins
        assert cls not in selectable, f"{cls.__name__}, an abstract base, is selectable"
    else:
        raise TypeError(f"{cls.__name__} is no strategy, cluster environment or precision plugin")
