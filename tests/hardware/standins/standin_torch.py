"""Stand-ins for the parts of torch that only its builds for a device have, used only by
stratgen's tests (CPU only): the built-in specs of Intel GPUs, AMD GPUs and the generic
torch.accelerator device name torch's own modules, which a package on the path cannot replace.

``sitecustomize`` applies the parts named in STANDIN_TORCH (comma-separated) as torch's modules
are imported:

- ``xpu``: torch.xpu answers as on a machine with STANDIN_XPU_COUNT Intel GPUs (2 by default,
  trimmed by ZE_AFFINITY_MASK); its set_device and empty_cache record their calls;
- ``accelerator``: torch.accelerator answers as on a machine with STANDIN_ACCELERATOR_COUNT
  devices; set_device_index and empty_cache record their calls;
- ``hip``: torch.version.hip is set, as on a ROCm build;
- ``xccl``, ``nccl``: torch.distributed has the backend of that name (built into torch's XPU
  and CUDA builds), with gloo underneath and for CPU tensors.

This is not the hardware: these builds' kernels and collectives run only on it.

Written from torch 2.13.0's own modules (torch/xpu, torch/accelerator, torch/version.py,
torch/distributed/distributed_c10d.py); tests/hardware/test_standin_apis.py checks the functions
it sets against the torch installed here.
"""

from __future__ import annotations

import os
from typing import Any

import standin_devices


def _xpu(module: Any) -> None:
    def device_count() -> int:
        return standin_devices.visible_count("STANDIN_XPU_COUNT", "ZE_AFFINITY_MASK")

    def set_device(device: Any) -> None:
        standin_devices.record("set_device", device=str(device))

    def empty_cache() -> None:
        standin_devices.record("empty_cache")

    def is_bf16_supported(including_emulation: bool = True) -> bool:
        return standin_devices.flag("STANDIN_XPU_BF16")

    module.device_count = device_count
    module.is_available = lambda: device_count() > 0
    module.set_device = set_device
    module.empty_cache = empty_cache
    module.is_bf16_supported = is_bf16_supported


def _accelerator(module: Any) -> None:
    def device_count() -> int:
        return int(os.environ.get("STANDIN_ACCELERATOR_COUNT", "2"))

    def set_device_index(device: Any, /) -> None:
        standin_devices.record("set_device_index", device=str(device))

    def empty_cache() -> None:
        standin_devices.record("empty_cache")

    module.device_count = device_count
    module.is_available = lambda: device_count() > 0
    module.set_device_index = set_device_index
    module.empty_cache = empty_cache


def _hip(module: Any) -> None:
    module.hip = "0.0.0-standin"


def _standin_process_group(base: Any, name: str) -> type:
    """A ``ProcessGroup<NAME>`` for a CPU build: torch builds it with its Options, and gets a
    gloo process group (a subclass, so that torch's isinstance checks hold)."""

    class Options:
        def __init__(self) -> None:
            self._timeout: Any = None
            self.is_high_priority_stream = False
            self.global_ranks_in_group: list[int] = []
            self.group_name = ""

    def __init__(self: Any, store: Any, rank: int, size: int, options: Any) -> None:
        base.__init__(self, store, rank, size, options._timeout)

    def _nothing(self: Any, *args: Any, **kwargs: Any) -> None:
        return None

    return type(
        f"StandIn{name}",
        (base,),
        {
            "Options": Options,
            "__init__": __init__,
            "_group_start": _nothing,
            "_group_end": _nothing,
            "_add_ephemeral_timeout": _nothing,
            "uid": -1,
        },
    )


def _backend(name: str) -> Any:
    def patch(module: Any) -> None:
        group = _standin_process_group(module.ProcessGroupGloo, name.upper())
        setattr(module, f"ProcessGroup{name.upper()}", group)
        setattr(module, f"is_{name}_available", lambda: True)
        module.Backend.backend_capability[name] = ["cpu"]

    return patch


#: Part -> (the torch module it changes, the change).
PARTS = {
    "xpu": ("torch.xpu", _xpu),
    "accelerator": ("torch.accelerator", _accelerator),
    "hip": ("torch.version", _hip),
    "xccl": ("torch.distributed.distributed_c10d", _backend("xccl")),
    "nccl": ("torch.distributed.distributed_c10d", _backend("nccl")),
}


def patches(names: str) -> dict[str, list[Any]]:
    """Module name -> the changes to apply once it is imported, for the parts in ``names``."""
    chosen: dict[str, list[Any]] = {}
    for name in filter(None, names.split(",")):
        module, change = PARTS[name]
        chosen.setdefault(module, []).append(change)
    return chosen
