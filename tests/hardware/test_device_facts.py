"""The built-in device specs against the sources they cite: torch itself, DeepSpeed, and the
vendors' packages where they import here.

The specs were written from those sources (each fact names its file); these tests read the same
facts back from the installed software, so that a spec that drifts from it, or a new torch or
DeepSpeed release that changes a fact, fails here:

- each accelerator's collective backend is the one torch maps its device type to, where torch
  knows the type (cpu, cuda, xpu, mps, and the type a ROCm build drives);
- every function and attribute a spec names resolves, where its module imports here, and the
  visible-devices variable is one the device's own module reads;
- every accelerator a DeepSpeed strategy runs on with DeepSpeed's own class names a class
  DeepSpeed has, whose communication backend and visible-devices variable are the spec's (those
  on a generated DeepSpeed accelerator: tests/runtime/wrappers/deepspeed/test_generated_accelerator_classes.py).

The vendors' packages (torch_npu, torch_mlu, torch_musa, habana_frameworks) cannot be installed
beside this torch build; their facts are checked where they are installed, and skip here.
"""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys
from typing import Any

import pytest
import torch.distributed as dist
from stratcore.imports import import_object
from stratcore.testing import clean_environ

from stratlib import XPUAccelerator
from stratlib.registry import REGISTRY

from .support import install_standins

ACCELERATORS = dict(REGISTRY.accelerators)


def _installed(cls: Any) -> str | None:
    """Why a spec's facts cannot be read here (its package is missing), or None."""
    missing = [r for r in cls.requires if not r.available]
    return missing[0].message(f"reading the facts of accelerator={cls.name!r}") if missing else None


# --- backends and torch's device map -------------------------------------------------------------


def test_each_backend_is_the_one_torch_maps_the_device_type_to() -> None:
    checked = []
    for name, cls in ACCELERATORS.items():
        if _installed(cls) is not None:
            continue  # the map learns the device when its package registers the backend
        mapped = dist.Backend.default_device_backend_map.get(cls.device_type)
        if mapped is None:
            continue
        backend = cls.collective_backend()
        assert backend.process_group_name == mapped, (
            f"accelerator {name!r} ({cls.device_type}) uses backend {backend.name!r} "
            f"(torch name {backend.process_group_name!r}); torch maps {cls.device_type!r} to "
            f"{mapped!r}"
        )
        checked.append(name)
    # xpu -> xccl, and a ROCm build's 'cuda' devices -> 'nccl' (RCCL), among them.
    assert {"cpu", "cuda", "xpu", "rocm", "mps"} <= set(checked), checked


def test_the_xpu_backend_is_torchs_builtin_xccl() -> None:
    assert dist.Backend.XCCL == XPUAccelerator.backend.process_group_name == "xccl"
    assert "xccl" in dist.Backend.backend_list


@pytest.mark.parametrize(
    "name", [n for n, c in ACCELERATORS.items() if c.collective_backend().registered_by]
)
def test_a_vendor_package_registers_the_backend_its_spec_names(name: str) -> None:
    cls = ACCELERATORS[name]
    reason = _installed(cls)
    if reason is not None:
        pytest.skip(reason)
    backend = cls.collective_backend()
    backend.register()
    assert dist.Backend.default_device_backend_map.get(cls.device_type) == (
        backend.process_group_name
    )


# --- what the specs name, in the modules that have it ----------------------------------------------

HOOKS = (
    "current_device_hook",
    "is_available_hook",
    "device_count_hook",
    "set_device_hook",
    "teardown_hook",
    "after_backward_hook",
    "after_optimizer_step_hook",
)


@pytest.mark.parametrize("name", list(ACCELERATORS))
def test_every_function_a_spec_names_exists(name: str) -> None:
    cls = ACCELERATORS[name]
    reason = _installed(cls)
    if reason is not None:
        pytest.skip(reason)
    paths = [getattr(cls, hook) for hook in HOOKS] + list(cls.precision_probes.values())
    for path in filter(None, paths):
        assert callable(import_object(path)), f"{name}: {path} is not a function"
    if cls.build_marker is not None:
        module, _, attribute = cls.build_marker.partition(":")
        assert hasattr(importlib.import_module(module), attribute), cls.build_marker


@pytest.mark.parametrize(
    "name", [n for n, c in ACCELERATORS.items() if c.visible_devices_env and c.device_count_hook]
)
def test_the_visible_devices_variable_is_read_by_the_devices_module(name: str) -> None:
    cls = ACCELERATORS[name]
    reason = _installed(cls)
    if reason is not None:
        pytest.skip(reason)
    module = importlib.import_module(str(cls.device_count_hook).partition(":")[0])
    assert cls.visible_devices_env in inspect.getsource(module), (
        f"{module.__name__} never names {cls.visible_devices_env}, which the spec of "
        f"accelerator {name!r} gives as its visible-devices variable"
    )


# --- DeepSpeed's accelerator classes -----------------------------------------------------------------

DEEPSPEED_FACTS = """
import importlib, json, sys
from deepspeed.accelerator import real_accelerator
facts = {"supported": real_accelerator.SUPPORTED_ACCELERATOR_LIST, "classes": {}}
for name in sys.argv[1:]:
    module = importlib.import_module(f"deepspeed.accelerator.{name}_accelerator")
    cls = next(c for c in vars(module).values() if isinstance(c, type) and c.__module__ == module.__name__
               and c.__name__.lower() == f"{name}_accelerator")
    accelerator = cls()
    facts["classes"][name] = {
        "backend": accelerator.communication_backend_name(),
        "visible": accelerator.visible_devices_envs(),
    }
print(json.dumps(facts))
"""


#: DeepSpeed classes that name another visible-devices variable than the device's own, on
#: purpose (deepspeed/accelerator/hpu_accelerator.py: visible_devices_envs keeps
#: CUDA_VISIBLE_DEVICES); only DeepSpeed's own launcher reads it.
OTHER_VISIBLE_DEVICES = {"hpu": ["CUDA_VISIBLE_DEVICES"]}


def _deepspeed_devices() -> dict[str, Any]:
    """Accelerator name -> class, for every accelerator a DeepSpeed strategy runs on with
    DeepSpeed's own accelerator class."""
    used = {}
    for entry in REGISTRY.strategies.values():
        if entry.cls.wrapper == "deepspeed":
            used.update({a: ACCELERATORS[a] for a in entry.cls.accelerators})
    return {name: cls for name, cls in used.items() if not cls.deepspeed_generated}


#: The module's job (its module-scoped fixture) runs once: its tests share one pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("device-facts")


@pytest.fixture(scope="module")
def deepspeed_facts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """DeepSpeed's own facts, read in a process of their own (importing DeepSpeed chooses its
    accelerator for the whole process). DeepSpeed's HPU class refuses to be made without
    habana_frameworks: the stand-in stands in for it."""
    pytest.importorskip("deepspeed")
    names = sorted(
        {c.deepspeed_accelerator or c.device_type for c in _deepspeed_devices().values()}
    )
    site = install_standins(tmp_path_factory.mktemp("deepspeed-facts"), ("habana_frameworks",))
    process = subprocess.run(
        [sys.executable, "-c", DEEPSPEED_FACTS, *names],
        capture_output=True,
        text=True,
        env=clean_environ({"DS_ACCELERATOR": "cpu", "PYTHONPATH": str(site)}),
        check=False,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    facts: dict[str, Any] = json.loads(process.stdout.strip().splitlines()[-1])
    return facts


def test_deepspeed_strategies_run_on_accelerators_deepspeed_has(
    deepspeed_facts: dict[str, Any],
) -> None:
    devices = _deepspeed_devices()
    assert {"cpu", "cuda", "xpu", "npu", "mlu", "rocm"} <= set(devices), sorted(devices)
    for name, cls in devices.items():
        ds_name = cls.deepspeed_accelerator or cls.device_type
        assert ds_name in deepspeed_facts["supported"], (
            f"accelerator {name!r} selects DS_ACCELERATOR={ds_name!r}; DeepSpeed knows "
            f"{deepspeed_facts['supported']}"
        )
        ds = deepspeed_facts["classes"][ds_name]
        assert ds["backend"] == cls.collective_backend().process_group_name, (
            f"DeepSpeed's {ds_name} accelerator communicates over {ds['backend']!r}, the spec "
            f"of {name!r} over {cls.collective_backend().process_group_name!r}"
        )
        if ds_name == name and cls.visible_devices_env:  # DeepSpeed's class for this device
            expected = OTHER_VISIBLE_DEVICES.get(name, [cls.visible_devices_env])
            assert ds["visible"] == expected, (name, ds["visible"])
