"""Lightning's DeepSpeed strategies on the specs' devices, through ``DeepSpeedAdapter``.

Lightning 2.6's DeepSpeedStrategy refuses every accelerator but its CUDAAccelerator in
``setup_environment``; read from Lightning's source here, that method does nothing else than
run the next class's. The adapter runs that after selecting the device's DeepSpeed accelerator,
so a Trainer and a Fabric built by the spec's names (torch.xpu answering as on a machine with
two Intel GPUs) set up past Lightning's check, with the spec's ZeRO stage as Lightning's stage.
Training needs the devices (Lightning requires device indices equal to local ranks, which the
CPU stand-ins cannot give): tests/hardware/test_deepspeed_accelerators.py trains the same
accelerators with DeepSpeed directly.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
import torch

import stratlib

pl = pytest.importorskip("lightning.pytorch")
pytest.importorskip("deepspeed")
from lightning.fabric import Fabric  # noqa: E402
from lightning.fabric.strategies import DeepSpeedStrategy as FabricDeepSpeedStrategy  # noqa: E402
from lightning.pytorch.strategies import DeepSpeedStrategy as TrainerDeepSpeedStrategy  # noqa: E402


@pytest.mark.parametrize("lightning_class", [TrainerDeepSpeedStrategy, FabricDeepSpeedStrategy])
def test_lightnings_setup_environment_only_checks_for_cuda_before_the_next_classes(
    lightning_class: type,
) -> None:
    source = textwrap.dedent(inspect.getsource(lightning_class.setup_environment))
    (function,) = ast.parse(source).body
    assert isinstance(function, ast.FunctionDef)
    check, rest = function.body
    assert isinstance(check, ast.If) and not check.orelse
    assert ast.unparse(check.test) == "not isinstance(self.accelerator, CUDAAccelerator)"
    assert [type(node) for node in check.body] == [ast.Raise]
    assert ast.unparse(rest) == "super().setup_environment()"


@pytest.fixture
def two_xpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.xpu, "is_available", lambda: True)
    monkeypatch.setattr(torch.xpu, "device_count", lambda: 2)
    monkeypatch.setattr(torch.xpu, "is_bf16_supported", lambda including_emulation=True: True)


def _set_up(strategy: Any, lightning_class: type, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Run the strategy's setup_environment with the class after Lightning's DeepSpeedStrategy
    (which would create the process group), the accelerator selection and the modules imported
    before the group exists recorded."""
    calls: list[str] = []
    mro = type(strategy).__mro__
    following = mro[mro.index(lightning_class) + 1]
    monkeypatch.setattr(following, "setup_environment", lambda self: calls.append("lightning"))
    monkeypatch.setattr(
        "stratcore.lightning.deepspeed.select_for",
        lambda accelerator: calls.append(f"select {accelerator.__name__}"),
    )

    @contextlib.contextmanager
    def creating_process_group(modules: tuple[str, ...]) -> Iterator[None]:
        calls.append(f"import {', '.join(modules)}")
        yield

    monkeypatch.setattr(
        "stratcore.lightning.strategies.creating_process_group", creating_process_group
    )
    strategy.setup_environment()
    return calls


#: Imported before the process group exists, after the selection (DeepSpeed binds its op
#: builders to the accelerator it has when it is first imported).
GROUP_DEFAULTS = "import torch.distributed.nn.functional, deepspeed.comm.torch"


def test_a_trainer_sets_up_the_devices_deepspeed_strategy(
    two_xpus: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import stratlib.lightning.pytorch as plugins

    trainer = pl.Trainer(
        accelerator="xpu", strategy="xpu_deepspeed_stage_3", devices=2, logger=False
    )
    strategy = trainer.strategy
    assert type(strategy) is plugins.XPUDeepSpeedStrategy
    assert type(trainer.accelerator) is plugins.XPUAccelerator
    assert strategy.config["zero_optimization"]["stage"] == 3
    assert strategy.parallel_devices == [torch.device("xpu", i) for i in (0, 1)]
    calls = _set_up(strategy, TrainerDeepSpeedStrategy, monkeypatch)
    assert calls == [f"select {stratlib.XPUAccelerator.__name__}", GROUP_DEFAULTS, "lightning"]


def test_fabric_sets_up_the_devices_deepspeed_strategy(
    two_xpus: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import stratlib.lightning.fabric as plugins

    fabric = Fabric(accelerator="xpu", strategy="xpu_deepspeed_stage_1", devices=2)
    strategy = fabric.strategy
    assert type(strategy) is plugins.XPUDeepSpeedStrategy
    assert strategy.config["zero_optimization"]["stage"] == 1
    calls = _set_up(strategy, FabricDeepSpeedStrategy, monkeypatch)
    assert calls == [f"select {stratlib.XPUAccelerator.__name__}", GROUP_DEFAULTS, "lightning"]
