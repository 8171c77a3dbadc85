"""The stratgen test device: a real, non-CPU PyTorch device for the project's own tests.

A PrivateUse1 extension in C++ (``csrc/``), built with ``torch.utils.cpp_extension`` against the
installed torch and cached per torch version and source hash (``_build.py``). After ``load()`` the
process has ``count`` devices named ``name`` (``testdev:0``, ``testdev:1``, ...) with an allocator
that counts bytes, a device guard, synchronous streams and events, a generator per device,
autocast for fp16 and bf16, and a c10d backend ``backend`` that stages collectives through gloo on
the host. It simplifies on purpose: memory is host memory, streams are synchronous, and most ops
run on the CPU through torch's CPU fallback.

    import stratgen_testdevice
    stratgen_testdevice.load()            # name "testdev", backend "testccl", 2 devices
    x = torch.ones(3, device="testdev:1")

Environment: ``STRATGEN_TESTDEVICE_COUNT`` (devices, default 2),
``STRATGEN_TESTDEVICE_KEEP_PARAMETERS`` (``1``, the default: ``Module.to()`` keeps Parameter
objects, as vendor extensions do; ``0``: it replaces them, as torch_xla does),
``STRATGEN_TESTDEVICE_CACHE`` (where builds are cached).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from . import _device_module
from ._autoload import AUTOLOAD_ENV
from ._build import BuildError, build_dir, build_log_path, extension

__all__ = [
    "AUTOLOAD_ENV",
    "COUNT_ENV",
    "KEEP_PARAMETERS_ENV",
    "BuildError",
    "build",
    "build_dir",
    "build_log_path",
    "keeps_parameters",
    "load_named",
    "load",
    "loaded",
    "memory_allocated",
    "module",
]

COUNT_ENV = "STRATGEN_TESTDEVICE_COUNT"
KEEP_PARAMETERS_ENV = "STRATGEN_TESTDEVICE_KEEP_PARAMETERS"
_MAX_DEVICES = 16

_lock = threading.Lock()
_loaded: tuple[str, str, int] | None = None  # (name, backend, count) once loaded


def build() -> Path:
    """Builds the extension unless the cache holds it (and loads it here); returns its folder."""
    with _lock:
        if _device_module._ext is None:
            _device_module._ext = extension()
    return build_dir()


def load(name: str = "testdev", backend: str = "testccl", count: int | None = None) -> None:
    """Makes the test device ``name`` and its c10d backend ``backend`` ready in this process.

    ``count`` devices: else ``$STRATGEN_TESTDEVICE_COUNT``, else 2. Idempotent for the same
    name and backend (and count, if given). PrivateUse1 has one name per process, so another name,
    or a PrivateUse1 that something else has renamed already, is an error.
    """
    global _loaded
    with _lock:
        if _loaded is not None:
            if _loaded[:2] != (name, backend) or count not in (None, _loaded[2]):
                raise RuntimeError(
                    f"the test device is loaded as {_loaded[0]!r} (backend {_loaded[1]!r}, "
                    f"{_loaded[2]} devices) in this process: it cannot also be {name!r} "
                    f"(backend {backend!r}, {count or _loaded[2]} devices)"
                )
            return
        count = _count(count)
        current = torch._C._get_privateuse1_backend_name()
        if current != "privateuseone":
            raise RuntimeError(f"PrivateUse1 is already named {current!r} in this process")
        if _device_module._ext is None:
            _device_module._ext = extension()
        ext = _device_module._ext
        ext.set_device_count(count)
        ext.set_keeps_parameters(os.environ.get(KEEP_PARAMETERS_ENV, "1") != "0")
        torch.utils.rename_privateuse1_backend(name)
        _device_module.name = name
        torch._register_device_module(name, _device_module)
        torch.utils.generate_methods_for_privateuse1_backend()
        if torch.distributed.is_available():
            _register_backend(ext, name, backend)
        atexit.register(_drain_autograd, ext)
        _loaded = (name, backend, count)


def load_named() -> None:
    """Load the device ``$STRATGEN_TESTDEVICE`` names (``testdev``, or ``npu:hccl`` for a device
    type and a backend), if it names one: what torch's backend autoload runs at ``import torch``
    (``_autoload``)."""
    wanted = os.environ.get(AUTOLOAD_ENV, "").strip()
    if wanted:
        name, _, backend = wanted.partition(":")
        load(name, backend or "testccl")


def loaded() -> bool:
    return _loaded is not None


def module() -> ModuleType:
    """The device module, ``torch.<name>`` once loaded."""
    return _device_module


def keeps_parameters(keep: bool | None = None) -> bool:
    """Whether ``Module.to(device)`` keeps Parameter objects; ``keep`` switches it first.

    On: the device answers ``_has_compatible_shallow_copy_type`` with yes for dense CPU and device
    tensors, so ``Module._apply`` assigns ``param.data`` (real vendor extensions). Off: torch's
    own answer (no), so ``_apply`` makes new Parameter objects (torch_xla).
    """
    ext = _device_module._extension()
    if keep is not None:
        ext.set_keeps_parameters(bool(keep))
    return bool(ext.keeps_parameters())


def memory_allocated(index: int) -> int:
    """Bytes live on device ``index``, from the C++ allocator's counter."""
    return int(_device_module._extension().memory_allocated(index))


def _count(count: int | None) -> int:
    if count is None:
        text = os.environ.get(COUNT_ENV, "2")
        try:
            count = int(text)
        except ValueError:
            raise ValueError(f"{COUNT_ENV} must be a whole number, not {text!r}") from None
    if not 1 <= count <= _MAX_DEVICES:
        raise ValueError(f"the test device has 1 to {_MAX_DEVICES} devices, not {count}")
    return count


def _drain_autograd(ext: ModuleType) -> None:
    """At exit: lets autograd's device threads release their graphs (csrc/backend.cpp says why)."""
    # A child forked after autograd started its threads has none (and autograd refuses to run).
    with contextlib.suppress(RuntimeError):
        ext.drain_autograd()


def _register_backend(ext: ModuleType, name: str, backend: str) -> None:
    """Registers the C++ backend for device type ``name`` under ``backend``."""
    import torch.distributed as dist

    def create(options: Any, backend_options: Any) -> Any:
        # The gloo that carries the host copies: torch's wheels have no gloo headers, so it is
        # made here and handed to C++. Its own prefix keeps its keys apart in the shared store.
        store = dist.PrefixStore(f"{backend}-gloo/", options.store)
        timeout = options.timeout
        if not isinstance(timeout, timedelta):
            timeout = timedelta(seconds=float(timeout))
        gloo = dist.ProcessGroupGloo(store, options.group_rank, options.group_size, timeout)
        return ext.make_backend(gloo, options.group_rank, options.group_size, backend)

    dist.Backend.register_backend(backend, create, extended_api=True, devices=[name])


# torch's backend autoload could not load the device if this package's import started torch's.
if not loaded():
    load_named()
