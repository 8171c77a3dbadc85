"""Stand-in devices on the CPU, for running the generated tests of hardware specs here.

Python imports this module at start-up when the stand-in folder is on the PYTHONPATH. For the
accelerators named in STANDIN_ON_CPU (comma-separated accelerator names, e.g. 'hpu,cuda:2'), the
generated accelerator class is changed as it is defined: its processes get the CPU, so
that tensors live where this machine can hold them (and DeepSpeed runs on its CPU accelerator),
while everything else (probes, step hooks, backends, strategies) stays as the spec generated it
and runs against the stand-in packages. STANDIN_TORCH names parts of torch's device builds to
stand in for (``standin_torch``). This is not the hardware: where tensors live and what the
device computes are only checked on the real device.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from typing import Any


def _parse(text: str) -> dict[str, int | None]:
    """'hpu,cuda:2' -> {'hpu': None, 'cuda': 2}."""
    entries: dict[str, int | None] = {}
    for item in filter(None, text.split(",")):
        name, _, count = item.partition(":")
        entries[name] = int(count) if count else None
    return entries


#: Accelerators whose processes get the CPU; with a count, the accelerator is also made
#: present with that many devices (for devices such as CUDA whose probes are torch's own,
#: which no stand-in package can answer without changing torch).
ON_CPU = _parse(os.environ.get("STANDIN_ON_CPU", ""))


def standin_present() -> bool:
    return True


def standin_count() -> int:
    counts = [count for count in ON_CPU.values() if count is not None]
    return counts[0] if counts else 1


def _whole_cpus(cls: type, indices: Any) -> list[Any]:
    """Every process gets the CPU (an index such as cpu:1 would not match its tensors')."""
    import torch

    return [torch.device("cpu") for _ in indices]


def _place_on_cpu(accelerator_base: type) -> None:
    def __init_subclass__(cls: type, **kwargs: Any) -> None:  # noqa: N807
        super(accelerator_base, cls).__init_subclass__(**kwargs)
        name = cls.__dict__.get("name")
        if name in ON_CPU:
            cls.device_type = "cpu"  # type: ignore[attr-defined]
            cls.deepspeed_accelerator = None  # type: ignore[attr-defined]
            cls.get_parallel_devices = classmethod(_whole_cpus)  # type: ignore[attr-defined]
            if ON_CPU[name] is not None:
                cls.is_available_hook = "sitecustomize:standin_present"  # type: ignore[attr-defined]
                cls.device_count_hook = "sitecustomize:standin_count"  # type: ignore[attr-defined]
                cls.set_device_hook = None  # type: ignore[attr-defined]

    accelerator_base.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]


class _PatchingFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of ``patches`` as usual, then applies their changes to them."""

    def __init__(self, patches: dict[str, list[Any]]) -> None:
        self.patches = patches

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in self.patches:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        execute = loader.exec_module

        def exec_module(module: Any) -> None:
            execute(module)
            for change in self.patches[name]:
                change(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_PATCHES: dict[str, list[Any]] = {}
if ON_CPU:
    _PATCHES["stratcore.accelerator"] = [lambda module: _place_on_cpu(module.Accelerator)]
if os.environ.get("STANDIN_TORCH"):
    import standin_torch

    _PATCHES.update(standin_torch.patches(os.environ["STANDIN_TORCH"]))
if _PATCHES:
    sys.meta_path.insert(0, _PatchingFinder(_PATCHES))
