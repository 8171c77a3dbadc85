"""The test class of the generated tests of the Lightning target: a module per spec file holds
its plugins as a table and one subclass::

    class TestPlugins(PluginTests):
        accelerators = [("pytorch", pytorch.AcmeAccelerator), ("fabric", fabric.AcmeAccelerator)]
        rows = [PluginRow("pytorch", "acme_single", pytorch.SingleAcmeStrategy, devices=1), ...]

pytest runs each method once per row (``stratcore.testing.suite``), with ids that name the
framework and the registry name (``test_trains_like_one_process[pytorch-acme_single]``). The
cases: each plugin's name resolves in the registry of Lightning's Trainer or Fabric, and where
the device runs on this machine a Trainer fits and a Fabric loop trains on real processes like
one process on the whole batch.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ..jobs import ScenarioJobs, once_per_session
from ..suite import TableTests, over
from .assertions import assert_registered, assert_reports_like_one_process
from .runner import read_reports, run_cases, run_training, training_case


@dataclass(frozen=True)
class PluginRow:
    """A strategy plugin under one of its registry names in one framework.

    Attributes:
        framework: 'fabric' or 'pytorch' (the Trainer).
        name: The registry name.
        cls: The plugin class the name selects.
        preset: The options the name presets.
        devices: The processes it trains on, on the row that trains (one a class); None on
            the rows of its further names.
    """

    framework: str
    name: str
    cls: type
    preset: Mapping[str, Any] = field(default_factory=dict)
    devices: int | None = None


def _accelerator_params(accelerators: Sequence[tuple[str, type]]) -> list[Any]:
    return [
        pytest.param(framework, cls, id=f"{framework}-{cls.spec.name}")  # type: ignore[attr-defined]
        for framework, cls in accelerators
    ]


def _name_params(rows: Sequence[PluginRow]) -> list[Any]:
    return [pytest.param(row, id=f"{row.framework}-{row.name}") for row in rows]


def _training_params(rows: Sequence[PluginRow]) -> list[Any]:
    return _name_params([row for row in rows if row.devices is not None])


class PluginTests(TableTests):
    """The Lightning plugins of one spec file: each accelerator and each strategy name in its
    framework's registries, and each strategy plugin training like one process on the
    reference batch (where its device runs on this machine)."""

    #: (framework, accelerator plugin class)
    accelerators: ClassVar[Sequence[tuple[str, type]]] = ()
    rows: ClassVar[Sequence[PluginRow]] = ()

    @over(("framework", "cls"), _accelerator_params, table="accelerators")
    def test_accelerator_is_registered(self, framework: str, cls: type) -> None:
        """The accelerator plugin is in the framework's accelerator registry."""
        assert_registered(framework, [cls], [])

    @over(("row",), _name_params)
    def test_strategy_name_is_registered(self, row: PluginRow) -> None:
        """The registry name is in the framework's strategy registry, with its class and preset."""
        assert_registered(row.framework, [], [(row.name, row.cls, dict(row.preset))])

    @pytest.fixture(scope="class")
    def plugin_jobs(
        self, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
    ) -> PluginJobs:
        return PluginJobs(ScenarioJobs.for_session(tmp_path_factory, pytestconfig).folder)

    @pytest.mark.slow
    @over(("row",), _training_params)
    def test_trains_like_one_process(self, row: PluginRow, plugin_jobs: PluginJobs) -> None:
        """Training through the plugin on several processes ends where one process ends."""
        plugin_jobs.check(row, self.rows)


class PluginJobs:
    """The training scenarios of a table's rows, in one job (``testing.run_cases``) the first
    of its tests runs, shared by the others (and by pytest-xdist's workers, through
    ``folder``): starting Lightning costs far more than its few training steps. A row whose
    scenario the job did not finish trains again in a job of its own, for its error."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def check(self, row: PluginRow, rows: Sequence[PluginRow]) -> None:
        """Assert that ``row``'s plugin trains like one process (it skips where it cannot
        train here)."""
        case = self._case(row)  # skips the test where the plugin cannot train here
        runnable = []
        for other in rows:
            if other.devices is None:
                continue
            try:
                runnable.append(self._case(other))
            except pytest.skip.Exception:
                continue
        named = json.dumps(runnable, sort_keys=True).encode()
        key = f"lightning-{runnable[0]['module']}-{hashlib.sha256(named).hexdigest()[:12]}"
        once_per_session(self.folder, key, lambda: _job_outcome(run_cases(runnable)))
        reports = read_reports(case)
        if reports is None:  # the job failed before it: this scenario alone, for its error
            folder = Path(case["folder"]).with_name(Path(case["folder"]).name + "-alone")
            folder.mkdir(parents=True, exist_ok=True)
            reports = run_training({**case, "folder": str(folder)})
        assert_reports_like_one_process(case, reports)

    def _case(self, row: PluginRow) -> dict[str, Any]:
        module = row.cls.__module__.rsplit(".", 1)[0]  # the framework's package of plugins
        assert row.devices is not None
        folder = self.folder / f"lightning-{row.framework}-{module}-{row.name}-{row.devices}"
        folder.mkdir(parents=True, exist_ok=True)
        return training_case(row.framework, module, row.cls, folder, row.devices)


def _job_outcome(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return {"returncode": done.returncode, "stderr": done.stderr[-4000:]}
