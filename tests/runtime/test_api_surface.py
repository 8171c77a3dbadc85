"""The strategy API (Lightning's names) on every strategy class, construction, subclassing,
registry resolution and ``list_strategies``.

Every runnable registry strategy also runs the whole API with 2 real ranks (1 for the
single-process ones) in its generated test ``test_<name>_strategy_api_and_collectives``; here
the in-process ones run it with one device, and every class is checked for every member.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from stratcore import testing
from stratcore.launchers import InlineLauncher, PopenLauncher, SpawnLauncher
from stratcore.process_group import release_process_group

import stratlib
from stratlib import registry

ALL_CLASSES = sorted(
    {
        cls
        for cls in vars(stratlib).values()
        if isinstance(cls, type) and issubclass(cls, stratlib.StrategyBase)
    },
    key=lambda cls: cls.__name__,
)
CONCRETE = [cls for cls in ALL_CLASSES if not inspect.isabstract(cls)]


@pytest.fixture
def own_process_group() -> Iterator[None]:
    """In-process launches create a one-process group in this process; do not leave it behind."""
    yield
    release_process_group()


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda cls: cls.__name__)
def test_every_class_has_the_whole_api(cls: type) -> None:
    missing = [name for name in testing.API_METHODS if not callable(getattr(cls, name, None))]
    missing += [
        name
        for name in testing.API_PROPERTIES
        if not isinstance(inspect.getattr_static(cls, name, None), property)
    ]
    assert missing == []


def test_every_registry_class_is_enumerated() -> None:
    assert {entry.cls for entry in registry.REGISTRY.strategies.values()} <= set(CONCRETE)


RUNNABLE = [cls for cls in CONCRETE if testing.unavailable_reason(cls, "cpu") is None]
ELSEWHERE = [cls for cls in CONCRETE if cls not in RUNNABLE]


@pytest.mark.parametrize("cls", ELSEWHERE, ids=lambda cls: cls.__name__)
def test_a_class_that_cannot_run_here_says_why(cls: type) -> None:
    """Without its package, construction names it; with it but without the device, building
    the strategy for the CPU names the accelerators it needs."""
    missing = [r for r in cls.requires if not r.available]
    if missing:
        with pytest.raises(stratlib.MissingDependencyError, match=missing[0].module):
            cls()
        return
    with pytest.raises(stratlib.MisconfigurationError, match="runs on"):
        stratlib.get_strategy(cls, accelerator="cpu", devices=1)


@pytest.mark.parametrize("cls", RUNNABLE, ids=lambda cls: cls.__name__)
def test_every_concrete_class_can_be_constructed_directly(cls: type) -> None:
    strategy = cls()
    # With no accelerator named, a GPU where one is present and the class runs on it (as in
    # Lightning), else the CPU.
    on_gpu = torch.cuda.is_available() and "cuda" in (cls.accelerators or ("cuda",))
    device = torch.device("cuda", 0) if on_gpu else torch.device("cpu")
    assert strategy.root_device == device
    assert (strategy.global_rank, strategy.local_rank, strategy.node_rank) == (0, 0, 0)
    assert strategy.world_size == 1 and strategy.is_global_zero
    assert strategy.parallel_devices == [device]
    assert strategy.distributed_sampler_kwargs == {"num_replicas": 1, "rank": 0}
    assert strategy.accelerator.name == device.type
    assert strategy.precision_plugin.precision == "32-true"
    assert isinstance(strategy.checkpoint_io, stratlib.TorchCheckpointIO)
    assert strategy.model is None and strategy.optimizers == []
    expected = {"none": InlineLauncher, "popen": PopenLauncher, "spawn": SpawnLauncher}.get(
        cls.launcher_class.name
    )
    if expected is not None:
        assert type(strategy.launcher) is expected


@pytest.mark.parametrize("cls", RUNNABLE, ids=lambda cls: cls.__name__)
def test_every_concrete_class_can_be_subclassed(cls: type) -> None:
    class Custom(cls):  # type: ignore[misc, valid-type]
        def setup_module_and_optimizers(self, module, optimizers):  # type: ignore[no-untyped-def]
            self.customised = True
            return super().setup_module_and_optimizers(module, optimizers)

    strategy = stratlib.get_strategy(Custom, accelerator="cpu", devices=1)
    assert type(strategy) is Custom
    assert isinstance(strategy, cls)


@pytest.mark.parametrize(
    "name",
    sorted(
        name
        for name, entry in registry.REGISTRY.strategies.items()
        if testing.unavailable_reason(entry.cls, "cpu") is None
        and entry.cls.launcher_class.name in ("none", "popen")
        # DeepSpeed binds module-level state to the first process group it sees, so it runs
        # the whole API in fresh processes only (its generated api test).
        and entry.cls.wrapper != "deepspeed"
    ),
)
def test_runnable_in_process_strategies_run_the_whole_api(
    name: str, tmp_path: Path, own_process_group: None
) -> None:
    strategy = stratlib.get_strategy(name, accelerator="cpu", devices=1)
    report = strategy.launch(testing.scenarios.api, str(tmp_path))
    testing.assert_api(report, world_size=1)
    # teardown ran: the user's module is back on the CPU and the hooks are gone (sharding
    # wrappers let go of the module, whose shards live on the process group)
    if strategy.wrapper not in ("fsdp", "model_parallel"):
        assert next(strategy.lightning_module.parameters()).device == torch.device("cpu")


def test_subclass_instance_completed_by_get_strategy(own_process_group: None) -> None:
    class Quiet(stratlib.DDPStrategy):
        pass

    strategy = stratlib.get_strategy(
        Quiet(static_graph=True), accelerator="cpu", devices=1, precision="64"
    )
    assert strategy.static_graph is True
    assert strategy.precision_plugin.precision == "64-true"


@pytest.mark.parametrize(
    ("name", "cls", "options"),
    [
        ("ddp", stratlib.DDPStrategy, {"find_unused_parameters": False}),
        ("ddp_find_unused_parameters_true", stratlib.DDPStrategy, {"find_unused_parameters": True}),
        ("ddp_fork", stratlib.DDPSpawnStrategy, {"start_method": "fork"}),
        ("ddp_notebook", stratlib.DDPSpawnStrategy, {"start_method": "fork"}),
        ("ddp_spawn", stratlib.DDPSpawnStrategy, {"start_method": "spawn"}),
        ("dp", stratlib.DataParallelStrategy, {}),
        ("ddp2", stratlib.DDP2Strategy, {}),
    ],
)
def test_registry_names_resolve_to_presets(
    name: str, cls: type, options: dict[str, object]
) -> None:
    strategy = stratlib.get_strategy(
        name, accelerator="cpu", devices=2 if cls is not stratlib.DataParallelStrategy else 1
    )
    assert type(strategy) is cls
    for option, value in options.items():
        assert getattr(strategy, option) == value


def test_options_override_a_preset() -> None:
    strategy = stratlib.get_strategy(
        "ddp_fork", accelerator="cpu", devices=2, start_method="forkserver"
    )
    assert strategy.start_method == "forkserver"
    assert strategy.launcher.start_method == "forkserver"


def test_list_strategies_describes_the_registry() -> None:
    infos = {info.name: info for info in stratlib.list_strategies()}
    assert set(infos) == set(registry.REGISTRY.strategies)
    ddp = infos["ddp_find_unused_parameters_true"]
    assert ddp.strategy_class == "DDPStrategy" and ddp.preset == {"find_unused_parameters": True}
    assert ddp.launcher == "popen" and ddp.accelerators == ("cuda", "cpu") and ddp.available
    assert (
        "ddp_find_unused_parameters_true: DDPStrategy {'find_unused_parameters': True} (available)"
        in str(ddp)
    )
    assert infos["ddp_notebook"].launcher == "spawn"
