"""The rows of a generated test module: what a spec says of each strategy, accelerator, cluster
environment and precision plugin, as data, and the pytest parameters made from them.

A generated test module holds one table per kind of entry (``STRATEGIES``, ``ACCELERATORS``,
...) and a few test functions parametrized over it; each parameter's id names the entry and,
where one entry has several cases, the case (``ddp_spawn-trains_like_one_process``). The checks
the rows feed are in ``assertions``, ``devices`` and ``jobs``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..contract import EXAMPLE_JOB as EXAMPLE_JOB
from ..contract import EXAMPLE_LAYOUT as EXAMPLE_LAYOUT
from ..contract import UNEVEN_JOB as UNEVEN_JOB
from .expectations import Expectation, expectation_for

if TYPE_CHECKING:
    from ..accelerator import Accelerator
    from ..precision.base import PrecisionBase
    from ..strategy import StrategyBase


@dataclass(frozen=True)
class StrategyRow:
    """What a spec says of one strategy.

    Attributes:
        name: Its registry name.
        cls: Its class.
        devices: Processes per node its real runs start.
        expected: What it does on each accelerator it runs on (``devices`` aside).
        options: Its options, as a strategy built under its own name holds them.
        presets: Each registry name (its own too) with the options that name changes.
        parallel: Whether it detects a cluster environment (a parallel strategy).
    """

    name: str
    cls: type[StrategyBase]
    devices: int
    expected: Mapping[str, Expectation]
    options: Mapping[str, Any] = field(default_factory=dict)
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    parallel: bool = False

    def expectation(self, accelerator: str) -> Expectation:
        """What the spec says it does on ``accelerator``, run on ``devices`` processes."""
        return dataclasses.replace(
            expectation_for(dict(self.expected), accelerator), devices=self.devices
        )


@dataclass(frozen=True)
class AcceleratorRow:
    """What a spec says of an accelerator.

    Attributes:
        name: Its name (``accelerator=...``).
        cls: Its class.
        device_type: The ``torch.device`` type its processes get (None: the type it finds at
            run time, through its ``current_device`` function).
        indexed: Whether its devices carry an index ('cuda:1') or are addressed as a whole.
        counted: Whether it can count its devices (the spec names a count function).
        visible_devices_env: The variable that limits which devices a job sees, if any.
        requires: The module an absent device's error names (its first requirement).
    """

    name: str
    cls: type[Accelerator]
    device_type: str | None
    indexed: bool
    counted: bool
    visible_devices_env: str | None = None
    requires: str | None = None


@dataclass(frozen=True)
class JobVariables:
    """The variables (and files) that describe a job to a cluster environment, and the values
    it must then read.

    Attributes:
        environ: The variables to set.
        files: Variables that hold the path of a file, and the file's content.
        expected: The values it reads ('<hostname>' stands for this machine's name); a layout
            value (``LAYOUT_VALUES``) of None: the environment says nothing of it.
    """

    environ: Mapping[str, str]
    files: Mapping[str, str]
    expected: Mapping[str, Any]


@dataclass(frozen=True)
class EnvironmentRow:
    """A consistent set of variables (and files) under which a cluster environment must be
    detected, and the values it must then read.

    Attributes:
        name: Its registry name.
        cls: Its class.
        environ: The variables to set.
        files: Variables that hold the path of a file, and the file's content.
        expected: The values it reads ('<hostname>' stands for this machine's name); most
            are those of ``EXAMPLE_JOB``.
        external: Whether it says that something else started the processes.
        negatives: (variable, value) under which it must not be detected: the variable
            removed (None) or set to a value the spec refuses or to any value (a variable
            that must not be set).
        uneven: ``UNEVEN_JOB`` described to it, for environments that number the processes
            themselves: the ranks it reads are the scheduler's, also through a strategy.
        inside: For each environment it runs inside (its ``runs_inside``), its variables
            together with the ones that environment leaves to its processes: it is still
            detected, before the other, and reads its own values.
    """

    name: str
    cls: type[Any]
    environ: Mapping[str, str]
    files: Mapping[str, str]
    expected: Mapping[str, Any]
    external: bool
    negatives: Sequence[tuple[str, str | None]] = ()
    uneven: JobVariables | None = None
    inside: Mapping[str, JobVariables] = field(default_factory=dict)


@dataclass(frozen=True)
class PrecisionPluginRow:
    """A selectable precision plugin and the precisions it serves."""

    name: str
    cls: type[PrecisionBase]
    modes: tuple[str, ...]


Row = StrategyRow | AcceleratorRow | EnvironmentRow | PrecisionPluginRow


def _param(values: tuple[Any, ...], id: str) -> Any:
    import pytest

    return pytest.param(*values, id=id)


def registry_params(rows: Iterable[StrategyRow]) -> list[Any]:
    """(row, registry name, the options a strategy built under that name holds), one for each
    registry name of each strategy."""
    return [
        _param((row, name, {**row.options, **preset}), f"{row.name}-{name}")
        for row in rows
        for name, preset in row.presets.items()
    ]


def strategy_params(rows: Iterable[StrategyRow]) -> list[Any]:
    """(row, case): its precisions, and for a parallel strategy how it detects environments."""
    return [
        _param((row, case), f"{row.name}-{case}")
        for row in rows
        for case in STRATEGY_CASES
        if case != "detects_cluster_environments_in_order" or row.parallel
    ]


def real_run_params(rows: Iterable[StrategyRow]) -> list[Any]:
    """(row, case): every real-run case (``RUN_CASES``), and where the strategy starts
    several processes, one of them failing."""
    return [
        _param((row, case), f"{row.name}-{case}")
        for row in rows
        for case in (*RUN_CASES, "rank_failure_stops_the_job")
        if case != "rank_failure_stops_the_job" or row.devices > 1
    ]


#: The real-run cases of a strategy that one job runs together (``jobs``), in the order the
#: tests list them.
RUN_CASES = (
    "trains_like_one_process",
    "trains_after_moves_that_replace_parameters",
    "trains_in_another_precision",
    "strategy_api_and_collectives",
    "checkpoint_round_trip",
)
#: What a generated test checks of a strategy besides its names and real runs.
STRATEGY_CASES = (
    "runs_its_precisions_and_refuses_the_others",
    "detects_cluster_environments_in_order",
)
#: What a generated test checks of an accelerator, each a case of its own.
ACCELERATOR_CASES = (
    "is_registered_under_its_name",
    "gives_processes_their_devices",
    "parses_devices",
    "names_its_visible_devices_variable",
    "absent_is_a_clear_error",
)


def accelerator_params(rows: Iterable[AcceleratorRow]) -> list[Any]:
    """(row, case) for every accelerator and case it has (naming a visible-devices variable
    needs one, and a count of devices)."""
    return [
        _param((row, case), f"{row.name}-{case}")
        for row in rows
        for case in ACCELERATOR_CASES
        if case != "names_its_visible_devices_variable"
        or (row.visible_devices_env is not None and row.counted)
    ]


#: The cases of an environment row (``checks.check_environment``).
ENVIRONMENT_CASES = (
    "detected_from_its_variables",
    "not_detected",
    "reads_the_ranks_of_an_uneven_job",
    "detected_inside",
)


def environment_params(rows: Iterable[EnvironmentRow]) -> list[Any]:
    """(row, case, variable, value), the cases of ``ENVIRONMENT_CASES``: detected from its
    variables; not detected without ``variable`` (value None) or with it set to ``value``;
    the ranks of ``UNEVEN_JOB``, where the row has it; detected inside the environment named
    ``variable``, for each of the row's ``inside``."""
    params = []
    for row in rows:
        detected, refused, uneven, inside = ENVIRONMENT_CASES
        params.append(_param((row, detected, None, None), f"{row.name}-{detected}"))
        for variable, value in row.negatives:
            how = f"without_{variable}" if value is None else f"with_{variable}={value}"
            params.append(_param((row, refused, variable, value), f"{row.name}-{refused}_{how}"))
        if row.uneven is not None:
            params.append(_param((row, uneven, None, None), f"{row.name}-{uneven}"))
        for outer in row.inside:
            params.append(_param((row, inside, outer, None), f"{row.name}-{inside}_{outer}"))
    return params


def plugin_params(rows: Iterable[PrecisionPluginRow]) -> list[Any]:
    """(row, None): the plugin is selectable; (row, precision): it trains in ``precision``."""
    return [
        _param((row, mode), f"{row.name}-" + (f"trains_in_{mode}" if mode else "is_selectable"))
        for row in rows
        for mode in (None, *row.modes)
    ]


def class_params(classes: Iterable[type[Any]]) -> list[Any]:
    """One parameter a class (abstract bases), its id the class name."""
    return [_param((cls,), cls.__name__) for cls in classes]
