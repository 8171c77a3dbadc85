"""The test class of the generated tests of the Lightning target: a module per spec file holds
its plugins as a table and one subclass::

    class TestPlugins(PluginTests):
        accelerators = [("pytorch", pytorch.AcmeAccelerator), ("fabric", fabric.AcmeAccelerator)]
        rows = [PluginRow("pytorch", "acme_single", pytorch.SingleAcmeStrategy, devices=1), ...]

pytest runs each method once per row (``stratcore.testing.suite``), with ids that name the
framework and the registry name (``test_trains_like_one_process[pytorch-acme_single]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ..testing.suite import TableTests, over
from .testing import assert_registered, assert_trains_like_one_process


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
        assert_registered(framework, [cls], [])

    @over(("row",), _name_params)
    def test_strategy_name_is_registered(self, row: PluginRow) -> None:
        assert_registered(row.framework, [], [(row.name, row.cls, dict(row.preset))])

    @pytest.mark.slow
    @over(("row",), _training_params)
    def test_trains_like_one_process(self, row: PluginRow, tmp_path: Path) -> None:
        module = row.cls.__module__.rsplit(".", 1)[0]  # the framework's package of plugins
        assert row.devices is not None
        assert_trains_like_one_process(row.framework, module, row.cls, tmp_path, row.devices)
