"""DeepSpeed's memory interface on a device's torch module: the allocator's statistics, the
device's free and total memory, and pinned host memory.

Where the device module has no such function, statistics are 0 (or empty), and processes on
the CPU report the host's memory and pin nothing, as DeepSpeed's CPU accelerator does.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from stratcore.exceptions import MisconfigurationError


def _memory_function(*names: str, empty: Any = 0) -> Callable[..., Any]:
    """A memory method of DeepSpeed's interface: the first of the device module's functions
    ``names`` there is, called with the device index; ``empty`` where there is none."""

    def method(self: DeviceMemory, device_index: int | None = None) -> Any:
        return self._memory(names, device_index, empty)

    method.__name__ = names[0]
    method.__doc__ = (
        f"The device module's ``{names[0]}`` of device ``device_index``; {empty!r} where it "
        "has none (as for processes on the CPU)."
    )
    return method


class DeviceMemory:
    """The memory methods of
    [`DeepSpeedAcceleratorBase`][stratcore.wrappers.deepspeed.accelerator.base.DeepSpeedAcceleratorBase], on what it
    says of the device: its type, whether its devices are processes on the CPU, and its torch
    module's functions."""

    if TYPE_CHECKING:  # what DeepSpeedAcceleratorBase defines

        @property
        def device_type(self) -> str: ...

        @property
        def on_host(self) -> bool: ...

        def _function(self, name: str) -> Callable[..., Any] | None: ...

    def _memory(self, names: Sequence[str], device_index: int | None, empty: Any = 0) -> Any:
        """The first of the device module's functions ``names`` there is, called; ``empty``
        where there is none."""
        for name in names:
            function = self._function(name)
            if function is not None and not self.on_host:
                return function(device_index)
        return empty

    def empty_cache(self) -> None:
        """Release the device allocator's cached memory, where it has one."""
        function = self._function("empty_cache")
        if function is not None and not self.on_host:
            function()

    # Statistics of the device's caching allocator: 0 (or no statistics) where it has none.
    memory_allocated = _memory_function("memory_allocated")
    max_memory_allocated = _memory_function("max_memory_allocated")
    reset_max_memory_allocated = _memory_function(
        "reset_max_memory_allocated", "reset_peak_memory_stats", empty=None
    )
    memory_cached = _memory_function("memory_cached", "memory_reserved")
    max_memory_cached = _memory_function("max_memory_cached", "max_memory_reserved")
    reset_max_memory_cached = _memory_function(
        "reset_max_memory_cached", "reset_peak_memory_stats", empty=None
    )
    memory_stats = _memory_function("memory_stats", empty={})
    reset_peak_memory_stats = _memory_function("reset_peak_memory_stats", empty=None)
    memory_reserved = _memory_function("memory_reserved")
    max_memory_reserved = _memory_function("max_memory_reserved")

    def _memory_info(self, device_index: int | None) -> tuple[int, int]:
        """(free, total) bytes of the device, or of the host's memory for the CPU."""
        if self.on_host:
            page = os.sysconf("SC_PAGE_SIZE")
            return page * os.sysconf("SC_AVPHYS_PAGES"), page * os.sysconf("SC_PHYS_PAGES")
        function = self._function("mem_get_info")
        if function is None:
            raise MisconfigurationError(
                f"DeepSpeed asked how much memory a {self.device_type!r} device has, and its "
                f"torch module (torch.{self.device_type}) has no mem_get_info()"
            )
        free, total = function(device_index)
        return int(free), int(total)

    def total_memory(self, device_index: int | None = None) -> int:
        """Bytes of memory of the device (of the host for processes on the CPU)."""
        return self._memory_info(device_index)[1]

    def available_memory(self, device_index: int | None = None) -> int:
        """Bytes of free memory of the device (of the host for processes on the CPU)."""
        return self._memory_info(device_index)[0]

    # pinned host memory: the CPU has none to pin (DeepSpeed's CPU accelerator does the same)
    @property
    def _torch_pins_host_memory(self) -> bool:
        return not self.on_host

    def _torch_pin_memory(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor if self.on_host else tensor.pin_memory()

    def _torch_empty_pinned(self, tensor: torch.Tensor, shape: Any) -> torch.Tensor:
        return tensor.new_empty(shape, pin_memory=not self.on_host)

    def _torch_is_pinned(self, tensor: torch.Tensor) -> bool:
        return False if self.on_host else bool(tensor.is_pinned())
