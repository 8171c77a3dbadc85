"""The adapters in one process: registries, precision, cluster environments, imports.

Lightning itself is the oracle where it has an answer (its connectors, its registries)."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from typing import Any, ClassVar

import acme
import acme.lightning_fabric as acme_fabric
import acme.lightning_pytorch as acme_pytorch
import lightning
import pytest
import torch
from lightning.fabric import Fabric
from lightning.fabric.accelerators import ACCELERATOR_REGISTRY
from lightning.fabric.plugins.environments import LightningEnvironment, TorchElasticEnvironment
from lightning.fabric.strategies import STRATEGY_REGISTRY
from lightning.pytorch import Trainer
from lightning.pytorch.accelerators import AcceleratorRegistry
from lightning.pytorch.strategies import DDPStrategy, StrategyRegistry
from stratcore.accelerator import Accelerator
from stratcore.exceptions import MisconfigurationError, MissingDependencyError
from stratcore.lightning import check_lightning_version
from stratcore.lightning.accelerators import AcceleratorAdapter
from stratcore.lightning.precision import build_precision, lightning_precision_class
from stratcore.lightning.strategies import StrategyAdapter, register
from stratcore.single_device import SingleDeviceStrategyBase
from stratcore.testing import watch

from tests.support import REPO

ROOT = REPO
SCHEDULER_VARIABLES = (
    "ACME_JOB_ID",
    "ACME_NTASKS",
    "ACME_RANK",
    "ACME_LOCAL_RANK",
    "RANK",
    "GROUP_RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "WORLD_SIZE",
    "TORCHELASTIC_RUN_ID",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "LSB_JOBID",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in SCHEDULER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    yield


def trainer(**kwargs: object) -> Any:
    options: dict[str, object] = {
        "strategy": "acme_parallel",
        "accelerator": "acme",
        "devices": 2,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
    }
    options.update(kwargs)
    return Trainer(**options)  # type: ignore[arg-type]


# -- registries ------------------------------------------------------------------------------


def test_names_resolve_in_both_registries() -> None:
    assert isinstance(AcceleratorRegistry.get("acme"), acme_pytorch.AcmeAccelerator)
    assert isinstance(ACCELERATOR_REGISTRY.get("acme"), acme_fabric.AcmeAccelerator)
    assert isinstance(StrategyRegistry.get("acme_parallel"), acme_pytorch.AcmeParallelStrategy)
    assert isinstance(STRATEGY_REGISTRY.get("acme_parallel"), acme_fabric.AcmeParallelStrategy)
    assert AcceleratorRegistry["acme"]["description"].startswith("Made-up accelerator")


def test_aliases_carry_their_presets() -> None:
    plain = StrategyRegistry.get("acme_parallel")
    spawn = StrategyRegistry.get("acme_parallel_spawn")
    unused = StrategyRegistry.get("acme_parallel_find_unused_parameters_true")
    assert plain._start_method == "popen" and spawn._start_method == "spawn"
    assert unused._ddp_kwargs == {"find_unused_parameters": True}
    assert "find_unused_parameters" not in plain._ddp_kwargs
    fabric_unused = STRATEGY_REGISTRY.get("acme_parallel_find_unused_parameters_true")
    assert fabric_unused._ddp_kwargs == {"find_unused_parameters": True}
    # a Trainer given an alias gets the preset, as with Lightning's own 'ddp_spawn'
    assert trainer(strategy="acme_parallel_spawn").strategy._start_method == "spawn"


def test_registering_again_is_harmless_and_clashes_are_refused() -> None:
    before = dict(StrategyRegistry["acme_parallel"])
    importlib.reload(acme_pytorch)  # a re-import registers twin classes under the same names
    assert StrategyRegistry["acme_parallel"]["strategy"] is acme_pytorch.AcmeParallelStrategy
    assert StrategyRegistry["acme_parallel"]["init_params"] == before["init_params"]
    with pytest.raises(ValueError, match=r"'ddp' is already registered to .*DDPStrategy"):
        register(
            AcceleratorRegistry,
            StrategyRegistry,
            strategies=[("ddp", acme_pytorch.AcmeParallelStrategy, {})],
        )
    assert StrategyRegistry["ddp"]["strategy"] is DDPStrategy


# -- what the connector builds -------------------------------------------------------------------


def test_devices_and_backend_come_from_the_spec() -> None:
    built = trainer(devices="auto")  # the spec's 'auto' is 2 processes
    assert built.num_devices == 2
    assert built.strategy.parallel_devices == [torch.device("cpu")] * 2
    assert built.strategy.process_group_backend == "gloo"
    assert built.strategy.collective_backend is acme.ACME_BACKEND
    assert built.strategy.default_precision == "bf16-mixed"
    assert built.strategy.supported_precisions == ("32-true", "bf16-mixed")
    user = trainer(strategy=acme_pytorch.AcmeParallelStrategy(process_group_backend="mpi"))
    assert user.strategy.process_group_backend == "mpi"


class _TwoMetaDevices(Accelerator):
    """A made-up accelerator with two devices of torch's 'meta' type (a type other than the
    CPU that any torch build has): the Lightning classes below place strategies on them."""

    name: ClassVar[str] = "two_meta"
    device_type: ClassVar[str] = "meta"

    @classmethod
    def is_available(cls) -> bool:
        return True

    @classmethod
    def device_count(cls) -> int | None:
        return 2


class _OnOneMetaDevice(SingleDeviceStrategyBase):
    name: ClassVar[str | None] = None


class _TwoMetaTrainerAccelerator(AcceleratorAdapter, lightning.pytorch.accelerators.Accelerator):
    spec = _TwoMetaDevices


class _TwoMetaFabricAccelerator(AcceleratorAdapter, lightning.fabric.accelerators.Accelerator):
    spec = _TwoMetaDevices


class _SingleMetaTrainerStrategy(
    StrategyAdapter, lightning.pytorch.strategies.SingleDeviceStrategy
):
    spec = _OnOneMetaDevice
    strategy_name = "single_two_meta"


class _SingleMetaFabricStrategy(StrategyAdapter, lightning.fabric.strategies.SingleDeviceStrategy):
    spec = _OnOneMetaDevice
    strategy_name = "single_two_meta"


def test_a_single_device_strategy_given_no_device_runs_on_its_accelerators_first() -> None:
    # As the Trainer and Fabric build one from its registry name: with no device, where
    # Lightning's own default would be the CPU whatever the accelerator.
    options: dict[str, Any] = {"devices": 1, "logger": False, "enable_checkpointing": False}
    built = Trainer(
        accelerator=_TwoMetaTrainerAccelerator(), strategy=_SingleMetaTrainerStrategy(), **options
    )
    assert built.strategy.root_device == torch.device("meta", 0)
    fabric = Fabric(accelerator=_TwoMetaFabricAccelerator(), strategy=_SingleMetaFabricStrategy())
    assert fabric.device == torch.device("meta", 0)
    # A device the user gives is kept.
    chosen = _SingleMetaTrainerStrategy(device=torch.device("meta", 1))
    Trainer(accelerator=_TwoMetaTrainerAccelerator(), strategy=chosen, **options)
    assert chosen.root_device == torch.device("meta", 1)


def test_unsupported_precision_is_refused_with_what_is_supported() -> None:
    message = (
        r"'acme_parallel' does not support precision='64-true'; it supports '32-true', 'bf16-mixed'"
    )
    with pytest.raises(MisconfigurationError, match=message):
        trainer(precision="64-true")  # the accelerator's, not the strategy's
    with pytest.raises(MisconfigurationError, match="does not support precision='16-true'"):
        trainer(precision="16-true")  # the strategy's, not the accelerator's
    with pytest.raises(MisconfigurationError, match="does not support precision='64-true'"):
        Fabric(strategy="acme_parallel", accelerator="acme", devices=2, precision="64-true")


def test_mixed_precision_autocasts_on_the_accelerators_device() -> None:
    # Lightning's connector would pick 'cuda' for an accelerator it does not know
    plugin = trainer(precision="bf16-mixed").precision_plugin
    assert type(plugin).__name__ == "MixedPrecision" and plugin.device == "cpu"
    fabric: Any = Fabric(
        strategy="acme_parallel", accelerator="acme", devices=2, precision="bf16-mixed"
    )
    assert fabric.strategy.precision.device == "cpu"


# -- cluster environments --------------------------------------------------------------------


def test_the_spec_environment_is_used_when_lightning_detects_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert type(trainer().strategy.cluster_environment) is LightningEnvironment
    monkeypatch.setenv("ACME_JOB_ID", "7")
    monkeypatch.setenv("ACME_NTASKS", "2")
    monkeypatch.setenv("ACME_RANK", "1")
    monkeypatch.setenv("ACME_LOCAL_RANK", "1")
    built = trainer()
    environment = built.strategy.cluster_environment
    assert isinstance(environment, acme_pytorch.AcmeEnvironment)
    assert built._accelerator_connector.cluster_environment is environment
    assert built.strategy.launcher.cluster_environment is environment
    assert environment.creates_processes_externally  # the launcher starts no process
    assert (built.global_rank, built.local_rank, built.world_size) == (1, 1, 2)
    assert (environment.main_address, environment.main_port) == ("127.0.0.1", 29577)
    fabric: Any = Fabric(strategy="acme_parallel", accelerator="acme", devices=2)
    assert isinstance(fabric.strategy.cluster_environment, acme_fabric.AcmeEnvironment)
    assert fabric.global_rank == 1


def test_lightnings_own_detection_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACME_JOB_ID", "7")
    torchrun = {"TORCHELASTIC_RUN_ID": "x", "RANK": "0", "GROUP_RANK": "0", "LOCAL_RANK": "0"}
    for name, value in torchrun.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("WORLD_SIZE", "2")
    environment = trainer().strategy.cluster_environment
    assert type(environment) is TorchElasticEnvironment


def test_environment_adapter_delegates_to_the_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not acme_pytorch.AcmeEnvironment.detect()
    monkeypatch.setenv("ACME_JOB_ID", "1")
    monkeypatch.setenv("ACME_NTASKS", "3")
    monkeypatch.setenv("ACME_RANK", "2")
    assert acme_pytorch.AcmeEnvironment.detect()
    environment = acme_pytorch.AcmeEnvironment()
    environment.set_world_size(8)  # the scheduler decides; ignored as by the spec
    assert (environment.world_size(), environment.global_rank()) == (3, 2)
    with pytest.raises(MisconfigurationError, match="started 3"):
        environment.validate_settings(num_devices=2, num_nodes=1)


# -- precision mapping ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "precision", ["32-true", "64-true", "bf16-mixed", "16-true", "bf16-true", "32", "bf16"]
)
def test_precision_plugins_match_lightnings_connector(precision: str) -> None:
    lightning = Trainer(accelerator="cpu", devices=1, precision=precision, logger=False)  # type: ignore[arg-type]
    ours = build_precision(precision, "ddp", "pytorch", "cpu")
    assert type(ours) is type(lightning.precision_plugin)
    assert ours.precision == lightning.precision_plugin.precision
    fabric = Fabric(accelerator="cpu", devices=1, precision=precision)  # type: ignore[arg-type]
    assert type(build_precision(precision, "none", "fabric", "cpu")) is type(fabric._precision)


def test_wrapper_kinds_and_apex() -> None:
    assert lightning_precision_class("fsdp", "fabric").__name__ == "FSDPPrecision"
    assert lightning_precision_class("deepspeed").__module__.startswith("lightning.pytorch")
    assert type(build_precision("bf16-mixed", "fsdp", "pytorch")).__name__ == "FSDPPrecision"
    assert lightning_precision_class("xla", "fabric").__name__ == "XLAPrecision"
    with pytest.warns(UserWarning, match="bf16-mixed"):
        assert build_precision("16-mixed", device_type="cpu").precision == "bf16-mixed"
    with pytest.raises(MisconfigurationError, match=r"apex.*use precision='16-mixed'"):
        build_precision("apex")


# -- versions and imports -------------------------------------------------------------------------


def test_version_check_names_installed_and_supported() -> None:
    assert check_lightning_version().startswith("2.6.")
    with pytest.raises(MissingDependencyError) as error:
        check_lightning_version("2.5.3")
    message = str(error.value)
    assert "lightning 2.5.3 is installed" in message and ">=2.6,<2.7" in message
    assert "pip install 'lightning>=2.6,<2.7'" in message and "\n" not in message


def test_importing_stratcore_and_generated_packages_does_not_import_lightning() -> None:
    code = (
        "import sys, stratcore, stratlib, stratcore.lightning, acme; "
        "import stratcore.parallel, stratcore.strategy, stratlib.registry; "
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('lightning', 'pytorch_lightning', 'lightning_fabric')); "
        "print(loaded); sys.exit(1 if loaded else 0)"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        str(ROOT / part)
        for part in ("runtime", "generator", "generated", "tests/runtime/lightning/support")
    )
    done = watch.run([sys.executable, "-c", code], env=env)
    assert done.returncode == 0, done.stdout + done.stderr
