"""stratlib's generated DeepSpeed accelerators, against DeepSpeed's own checks and classes.

DeepSpeed's package ships two checks of an accelerator: its abstract base class
(``DeepSpeedAccelerator``, which refuses to instantiate a class missing any of its abstract
methods) and ``set_accelerator``'s validation (``real_accelerator._validate_accelerator``).
Every generated class passes both. What a class states comes from its spec, read here as plain
YAML; a class for processes on the CPU answers as DeepSpeed's own CPU accelerator does; a device
whose torch module DeepSpeed needs but does not find gets a clear error, never the CPU's
answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import yaml
from stratcore.exceptions import MisconfigurationError
from stratcore.wrappers.deepspeed.accelerator.base import DeepSpeedAcceleratorBase

import stratlib
import stratlib.deepspeed as generated
from tests.support import REPO

deepspeed = pytest.importorskip("deepspeed")
from deepspeed.accelerator import DeepSpeedAccelerator, real_accelerator  # noqa: E402
from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator  # noqa: E402

SPECS = REPO / "specs"
CLASSES = [getattr(generated, name) for name in generated.__all__]


def _accelerator_specs() -> dict[str, dict[str, Any]]:
    specs = (yaml.safe_load(p.read_text(encoding="utf-8")) for p in sorted(SPECS.glob("*.yaml")))
    return {s["accelerator"]["class_name"]: s["accelerator"] for s in specs if "accelerator" in s}


@pytest.fixture
def restored_accelerator() -> Iterator[None]:
    """DeepSpeed's accelerator of this process, put back after the test."""
    before = real_accelerator.ds_accelerator
    yield
    real_accelerator.ds_accelerator = before


def test_the_runtime_base_implements_every_abstract_method_itself() -> None:
    # The base and what it is made of (its memory methods), none of it DeepSpeed's.
    own = {name for cls in DeepSpeedAcceleratorBase.__mro__ for name in vars(cls)}
    missing = DeepSpeedAccelerator.__abstractmethods__ - own
    assert not missing, sorted(missing)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_deepspeeds_own_checks_accept_the_class(cls: type) -> None:
    accelerator = cls()  # DeepSpeed's ABC: every abstract method is implemented
    real_accelerator._validate_accelerator(accelerator)  # set_accelerator's own check
    assert isinstance(accelerator, DeepSpeedAccelerator) and isinstance(accelerator, cls)
    assert type(accelerator).__name__ == cls.__name__


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_the_class_states_its_specs_facts(cls: type) -> None:
    spec = _accelerator_specs()[cls.spec.__name__]
    accelerator = cls()
    env = spec.get("visible_devices_env")
    assert accelerator.visible_devices_envs() == ([env] if env else [])
    if "device_type" in spec:
        assert accelerator.device_name() == spec["device_type"]
        assert not accelerator.is_synchronized_device()  # a device with queues of its own
    supported = spec.get("precision", {}).get("supported", [])
    probes = spec.get("precision", {}).get("probes", {})
    # No device is present here, so no probe is asked: the spec's precisions stand.
    bf16 = any(p in supported for p in ("bf16-mixed", "bf16-true"))
    assert accelerator.is_bf16_supported() == bf16, (supported, probes)
    assert accelerator.is_fp16_supported() == any(p in supported for p in ("16-mixed", "16-true"))
    assert accelerator.is_fp64_supported() == ("64-true" in supported)
    assert not accelerator.is_triton_supported()


def test_installed_after_deepspeeds_import_deepspeed_uses_it(restored_accelerator: None) -> None:
    generated.NPUDeepSpeedAccelerator.install()
    assert (
        type(real_accelerator.get_accelerator())
        is generated.NPUDeepSpeedAccelerator.__dict__["_deepspeed_class"]
    )
    first = real_accelerator.get_accelerator()
    generated.NPUDeepSpeedAccelerator.install()  # already in use: kept
    assert real_accelerator.get_accelerator() is first


class HostDeepSpeedAccelerator(DeepSpeedAcceleratorBase):
    """The generated kind of class, for stratlib's CPU accelerator (whose devices are CPU
    processes; the deepspeed target leaves those to DeepSpeed's own class)."""

    spec = stratlib.CPUAccelerator


def test_for_processes_on_the_cpu_it_answers_as_deepspeeds_cpu_accelerator() -> None:
    ours, theirs = HostDeepSpeedAccelerator(), CPU_Accelerator()
    for ask in (
        lambda a: a.device_name(),
        lambda a: a.device_name(0),
        lambda a: a.is_synchronized_device(),
        lambda a: a.use_host_timers(),
        lambda a: a.Stream,
        lambda a: a.Event,
        lambda a: a.current_stream(),
        lambda a: a.default_stream(),
        lambda a: a.initial_seed(),
        lambda a: a.communication_backend_name(),
        lambda a: a.on_accelerator(torch.zeros(1)),
        lambda a: a.default_generator(0) is torch.default_generator,
        lambda a: a.is_bf16_supported(),
    ):
        assert ask(ours) == ask(theirs)
    assert torch.equal(ours.get_rng_state(), theirs.get_rng_state())
    ours.set_device(0)  # the CPU accelerator's set_device: nothing to select
    with ours.stream(None):
        pass
    assert ours.total_memory() > ours.available_memory() > 0


def test_a_device_without_a_torch_module_gets_clear_errors_not_the_cpus_answers() -> None:
    """torch_xla is not installed here: torch has no 'xla' module for the TPU's class."""
    accelerator = generated.TPUDeepSpeedAccelerator()
    assert accelerator.module is None
    with pytest.raises(MisconfigurationError, match=r"torch\.xla\) has none"):
        accelerator.get_rng_state()
    with pytest.raises(MisconfigurationError, match=r"no mem_get_info"):
        accelerator.total_memory()
    with pytest.raises(MisconfigurationError, match="graph capture is for CUDA"):
        accelerator.create_graph()
    assert accelerator.Stream is None and accelerator.current_stream() is None
    assert accelerator.memory_allocated() == 0 and accelerator.memory_stats() == {}
    accelerator.synchronize()
    accelerator.manual_seed(1234)  # torch's, which seeds every device torch knows
    assert torch.initial_seed() == 1234


def test_op_builders_are_unavailable_and_say_what_to_use_instead() -> None:
    builder = generated.MUSADeepSpeedAccelerator().create_op_builder("FusedAdamBuilder")
    assert not builder.is_compatible()
    with pytest.raises(MisconfigurationError, match=r"torch\.optim optimizer"):
        builder.load()
