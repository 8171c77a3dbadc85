"""The test classes of generated test modules: each case a test method, parametrized over the
rows of a table the module sets (``rows``), one test per row and case.

A generated module holds what its spec says as tables (``stratcore.testing.rows``) and one
subclass per table::

    class TestStrategies(StrategyTests):
        rows = STRATEGIES

pytest collects the methods below through each subclass; ``pytest_generate_tests`` gives each
method its parameters from the subclass's rows, with ids that name the row and the case
(``TestStrategies::test_real_run[ddp-trains_like_one_process]``). A method never runs without
rows: every row has each method's first case. The ``scenario_jobs`` fixture comes from the
generated ``conftest.py`` (``jobs.ScenarioJobs.for_session``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from . import checks
from . import rows as tables
from .jobs import ScenarioJobs
from .rows import AcceleratorRow, EnvironmentRow, PrecisionPluginRow, StrategyRow


def over(
    names: tuple[str, ...], parameters: Callable[[Sequence[Any]], list[Any]], table: str = "rows"
) -> Any:
    """Mark a test method of a ``TableTests`` class as run once for each parameter
    ``parameters(rows)`` gives, ``rows`` being the class's attribute named ``table``."""

    def mark(method: Any) -> Any:
        method.table = (names, parameters, table)
        return method

    return mark


class TableTests:
    """Base of the test classes over tables: pytest parametrizes each method marked with
    ``over`` from the subclass's table."""

    rows: ClassVar[Sequence[Any]] = ()

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize each test over the rows of the table it is marked with, a case per row."""
        marked: tuple[tuple[str, ...], Callable[[Sequence[Any]], list[Any]], str] | None
        marked = getattr(metafunc.function, "table", None)
        if marked is not None:
            names, parameters, table = marked
            metafunc.parametrize(names, parameters(getattr(self, table)))


class StrategyTests(TableTests):
    """Each strategy: its registry names, its precisions, how it finds its cluster environment,
    and real runs (training like one process, also after moves that replace the model's
    Parameters, and in another precision, the strategy API and collectives, a checkpoint round
    trip, a rank that fails)."""

    rows: ClassVar[Sequence[StrategyRow]] = ()

    @over(("row", "name", "options"), tables.registry_params)
    def test_registry_name(self, row: StrategyRow, name: str, options: dict[str, Any]) -> None:
        """The registry name builds the strategy with its options."""
        checks.assert_registry_name(row, name, options)

    @over(("row", "case"), tables.strategy_params)
    def test_strategy(self, row: StrategyRow, case: str, monkeypatch: pytest.MonkeyPatch) -> None:
        """One check of a strategy row that needs no processes (construction, options,
        precisions)."""
        checks.check_strategy(row, case, monkeypatch)

    @pytest.mark.slow
    @over(("row", "case"), tables.real_run_params)
    def test_real_run(
        self, row: StrategyRow, case: str, scenario_jobs: ScenarioJobs, tmp_path: Path
    ) -> None:
        """One case of the strategy's job of real processes (training, collectives, checkpoints,
        failures)."""
        checks.check_real_run(row, case, scenario_jobs, tmp_path)


class AcceleratorTests(TableTests):
    """Each accelerator: registered under its name, the devices its processes get, how it
    parses and counts devices, and the error where none is present."""

    rows: ClassVar[Sequence[AcceleratorRow]] = ()

    @over(("row", "case"), tables.accelerator_params)
    def test_accelerator(
        self, row: AcceleratorRow, case: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """One check of an accelerator row (probes, device parsing, devices of its type)."""
        checks.check_accelerator(row, case, monkeypatch)


class EnvironmentTests(TableTests):
    """Each cluster environment: detected from its variables and reading their values, not
    detected when one of them is missing or refused, reading the scheduler's ranks however it
    placed the processes, and detected before the environments it runs inside."""

    rows: ClassVar[Sequence[EnvironmentRow]] = ()

    @over(("row", "case", "variable", "value"), tables.environment_params)
    def test_environment(
        self,
        row: EnvironmentRow,
        case: str,
        variable: str | None,
        value: str | None,
        monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path,
    ) -> None:
        """One case of a cluster environment row (``rows.ENVIRONMENT_CASES``): detected from
        its variables and reading their values, or not detected, or the ranks of an uneven
        job, or detected inside another environment."""
        checks.check_environment(row, case, variable, value, monkeypatch, tmp_path)


class PrecisionPluginTests(TableTests):
    """Each selectable precision plugin: selectable, and training in each of its precisions."""

    rows: ClassVar[Sequence[PrecisionPluginRow]] = ()

    @over(("row", "precision"), tables.plugin_params)
    def test_precision_plugin(self, row: PrecisionPluginRow, precision: str | None) -> None:
        """One check of a precision plugin row: the precisions it serves, and refuses."""
        checks.check_precision_plugin(row, precision)


class AbstractBaseTests(TableTests):
    """Abstract bases (strategies, cluster environments, precision plugins): never selected
    by a name, detected or chosen."""

    rows: ClassVar[Sequence[type[Any]]] = ()

    @over(("cls",), tables.class_params)
    def test_abstract_base(self, cls: type[Any]) -> None:
        """An abstract base is never selected, nor registered."""
        checks.assert_abstract_base(cls)
