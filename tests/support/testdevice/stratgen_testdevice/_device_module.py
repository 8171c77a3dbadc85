"""``torch.<name>``: the device module of the test device, as ``torch.cuda`` is CUDA's.

It offers what torch and the frameworks look up on a device module (torch.get_device_module,
torch.distributed's device handle, FSDP, AMP, torch.manual_seed). Streams and events are torch's
own ``torch.Stream`` and ``torch.Event``: the device's guard makes them synchronous.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType, TracebackType
from typing import Any

import torch

_ext: ModuleType | None = None  # the C++ extension, set by stratgen_testdevice.load
name = "testdev"

Device = torch.device | str | int | None


def _extension() -> ModuleType:
    if _ext is None:
        raise RuntimeError("the test device is not loaded: call stratgen_testdevice.load()")
    return _ext


def _index(device: Device = None) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != name:
        raise ValueError(f"expected a {name} device, got {device}")
    return current_device() if device.index is None else device.index


# ---- Devices
def is_available() -> bool:
    return _ext is not None and device_count() > 0


def is_initialized() -> bool:
    return _ext is not None


def init() -> None:
    _extension()


def _lazy_init() -> None:
    _extension()


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    return int(_extension().device_count())


def current_device() -> int:
    return int(_extension().current_device())


def set_device(device: Device) -> None:
    _extension().set_device(_index(device))


def synchronize(device: Device = None) -> None:
    _index(device)  # streams are synchronous: nothing is ever pending


def get_device_name(device: Device = None) -> str:
    return f"stratgen test device {_index(device)}"


@dataclass(frozen=True)
class DeviceProperties:
    """What ``get_device_properties`` tells of a device, with torch.cuda's field names."""

    name: str
    total_memory: int
    multi_processor_count: int = 1


def _total_memory() -> int:
    """The device's memory: the host's (frameworks size buffers by it)."""
    return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def get_device_properties(device: Device = None) -> DeviceProperties:
    """The device's name and memory."""
    _index(device)
    return DeviceProperties(get_device_name(device), _total_memory())


def mem_get_info(device: Device = None) -> tuple[int, int]:
    """(free, total) bytes of the device, as ``torch.cuda.mem_get_info`` answers: what the device's
    tensors hold counts as used."""
    total = _total_memory()
    return max(total - memory_allocated(device), 0), total


class device:  # noqa: N801 (torch.cuda.device's name)
    """Context manager that makes ``device`` current, and the previous one current again."""

    def __init__(self, device: Device) -> None:
        self.index = -1 if device is None else _index(device)
        self.previous = -1

    def __enter__(self) -> None:
        self.previous = current_device()
        if self.index >= 0:
            set_device(self.index)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        set_device(self.previous)


# ---- Random numbers: a generator per device
def default_generator(device: Device = None) -> torch.Generator:
    generator: torch.Generator = _extension().default_generator(_index(device))
    return generator


def manual_seed(seed: int) -> None:
    default_generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for index in range(device_count()):
        default_generator(index).manual_seed(int(seed))


def seed() -> None:
    default_generator().seed()


def seed_all() -> None:
    for index in range(device_count()):
        default_generator(index).seed()


def initial_seed() -> int:
    return int(default_generator().initial_seed())


def get_rng_state(device: Device = None) -> torch.Tensor:
    return default_generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: Device = None) -> None:
    default_generator(device).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(index) for index in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


# ---- Mixed precision
def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16]


# ---- Memory: host memory, counted per device; nothing is cached, so reserved == allocated
def memory_allocated(device: Device = None) -> int:
    return int(_extension().memory_allocated(_index(device)))


def max_memory_allocated(device: Device = None) -> int:
    return int(_extension().max_memory_allocated(_index(device)))


def memory_reserved(device: Device = None) -> int:
    return memory_allocated(device)


def max_memory_reserved(device: Device = None) -> int:
    return max_memory_allocated(device)


def reset_peak_memory_stats(device: Device = None) -> None:
    _extension().reset_peak_memory_stats(_index(device))


def reset_max_memory_allocated(device: Device = None) -> None:
    reset_peak_memory_stats(device)


def memory_stats(device: Device = None) -> dict[str, Any]:
    return {
        "allocated_bytes.all.current": memory_allocated(device),
        "allocated_bytes.all.peak": max_memory_allocated(device),
    }


def empty_cache() -> None:
    """Nothing to release: freed blocks go back to the host at once."""


# ---- Streams and events
class Stream(torch.Stream):
    """A stream of this device (``torch.Stream`` on it); work on it is done when issued."""

    def __new__(cls, device: Device = None, priority: int = 0, **kwargs: Any) -> Stream:
        return super().__new__(cls, device=torch.device(name, _index(device)), priority=priority)


def Event(  # noqa: N802 (torch.cuda.Event's name)
    enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
) -> torch.Event:
    """An event on the current device (a plain ``torch.Event``: torch.Event.elapsed_time
    accepts no subclass); it is complete once recorded."""
    return torch.Event(
        device=torch.device(name, current_device()),
        enable_timing=enable_timing,
        blocking=blocking,
        interprocess=interprocess,
    )


def current_stream(device: Device = None) -> torch.Stream:
    return torch.accelerator.current_stream(torch.device(name, _index(device)))


def default_stream(device: Device = None) -> torch.Stream:
    current = current_stream(device)
    return torch.Stream(
        stream_id=0, device_index=current.device_index, device_type=current.device_type
    )


def set_stream(stream: torch.Stream) -> None:
    torch.accelerator.set_stream(stream)


@contextlib.contextmanager
def stream(stream: torch.Stream | None) -> Iterator[None]:
    """Makes ``stream`` (and its device) current inside the block, as ``torch.cuda.stream``."""
    if stream is None:
        yield
        return
    previous_device = current_device()
    previous_stream = current_stream(stream.device_index)
    set_device(stream.device_index)
    set_stream(stream)
    try:
        yield
    finally:
        set_stream(previous_stream)
        set_device(previous_device)
