"""DeepSpeed's accelerator interface for any device a spec describes.

DeepSpeed reaches its device through one object, ``deepspeed.accelerator.get_accelerator()``:
an instance of a subclass of ``deepspeed.accelerator.DeepSpeedAccelerator``, either one of
DeepSpeed's own classes (picked by ``DS_ACCELERATOR`` from a closed list) or one installed with
``deepspeed.accelerator.set_accelerator``. [`DeepSpeedAcceleratorBase`][stratcore.wrappers.deepspeed.accelerator.base.DeepSpeedAcceleratorBase] implements every
method of that interface from a stratcore accelerator class (``spec``) and the device's torch
module (``torch.<device type>``, which torch and device extensions register):

- devices: ``set_device`` runs the spec's ``set_device`` hook on the torch.device the
  accelerator gives an index; names and counts come from the spec;
- communication: the spec's backend under torch's name, and its visible-devices variable;
- precisions: the spec's supported precisions, asked of its probes;
- RNG, streams, events, graphs and memory: the device module's functions where it has them.
  Where it has none: processes on the CPU work as on DeepSpeed's CPU accelerator (no streams,
  the CPU's generator, the host's memory); other devices get a no-op where nothing is lost
  (profiler ranges, memory statistics of 0) and a clear error where something would be (an RNG
  state, a graph, the device's total memory);
- op builders: DeepSpeed's compiled ops target its own accelerators, so every op builder
  reports itself unavailable (``is_compatible()`` is False, ``load()`` says what to use
  instead) rather than compiling CUDA code.

A generated class only sets ``spec``, and importing it imports nothing of DeepSpeed: the class
DeepSpeed sees, a subclass of the generated class and of ``DeepSpeedAccelerator``, is made
with the first instance. So ``install()`` can run before DeepSpeed is imported, which is when
DeepSpeed binds its op builder classes (``deepspeed.ops.op_builder``) to its accelerator.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any, ClassVar

import torch
from stratcore.accelerator import Accelerator
from stratcore.environment import int_variable
from stratcore.exceptions import MisconfigurationError

from .install import GENERATED, deepspeed_class, install, unavailable_op_builder
from .memory import DeviceMemory

#: Where DeepSpeed's CPU op builders live: the ops listed for a generated accelerator.
OP_BUILDER_DIR = "deepspeed.ops.op_builder.cpu"


def _tensor_type(dtype: torch.dtype) -> property:
    """A tensor constructor of DeepSpeed's interface: ``torch.tensor`` on the device type."""

    def constructor(self: DeepSpeedAcceleratorBase) -> Callable[..., torch.Tensor]:
        return functools.partial(torch.tensor, dtype=dtype, device=self.device_type)

    constructor.__doc__ = f"``torch.tensor`` with dtype {dtype} on the device type."
    return property(constructor)


class DeepSpeedAcceleratorBase(DeviceMemory):
    """DeepSpeed's accelerator interface on the facts of a stratcore accelerator (``spec``).

    Instances are instances of ``deepspeed.accelerator.DeepSpeedAccelerator`` too (see the
    module documentation), so ``deepspeed.accelerator.set_accelerator(cls())`` accepts them;
    [`install`][stratcore.wrappers.deepspeed.accelerator.base.DeepSpeedAcceleratorBase.install] does that at the right moment.
    """

    #: The stratcore accelerator class whose facts this class states to DeepSpeed.
    spec: ClassVar[type[Accelerator]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        spec = cls.__dict__.get("spec")
        if spec is not None and "_deepspeed_class" not in cls.__dict__:
            GENERATED.setdefault(spec, cls)

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return object.__new__(deepspeed_class(cls))

    def __init__(self) -> None:
        self._compile_backend = "inductor"
        self._facts = self.spec()
        self._devices: dict[int, torch.device] = {}
        self._index: int | None = None

    @classmethod
    def install(cls) -> None:
        """Make DeepSpeed train on this accelerator.

        Called before DeepSpeed is imported, it hands DeepSpeed an instance the moment DeepSpeed
        creates its accelerator module, before anything asks for an accelerator: what DeepSpeed
        binds at import (its op builder classes) is then this accelerator's. Called later, it is
        ``set_accelerator(cls())``, and what DeepSpeed bound at import stays with the
        accelerator it found then. The process groups DeepSpeed creates are destroyed when the
        process ends (``stratcore.process_group``).
        """
        install(cls)

    # -- what the device is ------------------------------------------------------------------

    @property
    def device_type(self) -> str:
        """The spec's device type (``torch.device(...).type``)."""
        return self.spec.device_type

    @property
    def on_host(self) -> bool:
        """Whether the devices are processes on the CPU, whose work the host waits for."""
        return self.device_type == "cpu"

    @functools.cached_property
    def module(self) -> ModuleType | None:
        """torch's module of the device type (``torch.<type>``), None where there is none. The
        device's software is imported first: a device extension registers the module."""
        self.spec.get_parallel_devices([0])
        return getattr(torch, self.device_type, None)

    def _function(self, name: str) -> Callable[..., Any] | None:
        return getattr(self.module, name, None)

    # What DeepSpeed reads of its own classes' attributes.
    _name = property(lambda self: self.device_name())
    _communication_backend_name = property(lambda self: self.communication_backend_name())

    def is_synchronized_device(self) -> bool:
        """Whether the host waits for the device's work: true only for processes on the CPU."""
        return self.on_host

    def use_host_timers(self) -> bool:
        """Whether DeepSpeed's timers read the host clock: where the device is synchronized."""
        return self.is_synchronized_device()

    def resolves_data_dependency(self) -> bool:
        """Whether the device orders dependent work itself: where it is synchronized."""
        return self.is_synchronized_device()

    def handles_memory_backpressure(self) -> bool:
        """Whether the device throttles memory use itself: where it is synchronized."""
        return self.is_synchronized_device()

    # -- devices -----------------------------------------------------------------------------

    def _device(self, index: int | str | torch.device) -> torch.device:
        """The torch.device of device ``index`` (DeepSpeed passes ints, digit strings and
        devices), as the stratcore accelerator gives it."""
        if isinstance(index, torch.device):
            return index
        key = int(index)
        if key not in self._devices:
            self._devices[key] = self.spec.get_parallel_devices([key])[0]
        return self._devices[key]

    def device_name(self, device_index: int | str | None = None) -> str:
        """The device type, or the name of device ``device_index`` (as ``str(torch.device)``)."""
        if device_index is None:
            return self.device_type
        return str(self._device(device_index))

    def device(self, device_index: int | None = None) -> Any:
        """The device module's device context, None where it has none (as on the CPU)."""
        function = self._function("device")
        return None if self.on_host or function is None else function(device_index)

    def set_device(self, device_index: int | str | torch.device) -> None:
        """Make device ``device_index`` this process's device, with the spec's ``set_device`` hook."""
        device = self._device(device_index)
        self._facts.setup_device(device)
        if not isinstance(device_index, torch.device):
            self._index = int(device_index)
        elif device.index is not None:
            self._index = device.index

    def current_device(self) -> int:
        """This process's device index: the device module's, else the one set, else ``LOCAL_RANK``."""
        function = self._function("current_device")
        current = function() if function is not None and not self.on_host else None
        if isinstance(current, int):
            return current
        if self._index is not None:
            return self._index
        return int_variable("LOCAL_RANK", 0, 0)

    def current_device_name(self) -> str:
        """The name of this process's device."""
        return self.device_name(self.current_device())

    def device_count(self) -> int:
        """The spec's count; for devices that are processes, the processes of this node."""
        count = self.spec.device_count()
        return count if count is not None else int_variable("LOCAL_WORLD_SIZE", 1, 1)

    def synchronize(self, device_index: int | None = None) -> None:
        """Wait for the device's queued work, where its module can."""
        function = self._function("synchronize")
        if function is not None:
            function(device_index)

    # -- random numbers ----------------------------------------------------------------------

    def _rng(self, name: str) -> tuple[Callable[..., Any], bool]:
        """The device module's RNG function ``name`` (and True), or torch's own for processes
        on the CPU (and False: it takes no device)."""
        function = self._function(name)
        if function is not None and not self.on_host:
            return function, True
        if self.on_host:
            return getattr(torch, name), False
        raise MisconfigurationError(
            f"DeepSpeed asked for {name}() of the {self.device_type!r} devices, and their torch "
            f"module (torch.{self.device_type}) has none"
        )

    def random(self) -> ModuleType:
        """torch's RNG module."""
        return torch.random

    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> Any:
        """Set the device's RNG state (torch's for processes on the CPU)."""
        function, per_device = self._rng("set_rng_state")
        if per_device and device_index is not None:
            return function(new_state, device_index)
        return function(new_state)

    def get_rng_state(self, device_index: int | None = None) -> torch.Tensor:
        """The device's RNG state (torch's for processes on the CPU)."""
        function, per_device = self._rng("get_rng_state")
        return function(device_index) if per_device and device_index is not None else function()

    def manual_seed(self, seed: int) -> Any:
        """The device module's, else torch's (which seeds every device torch knows)."""
        return (self._function("manual_seed") or torch.manual_seed)(seed)

    def manual_seed_all(self, seed: int) -> Any:
        """Seed every device of the type (torch's generator for processes on the CPU)."""
        return (self._function("manual_seed_all") or torch.manual_seed)(seed)

    def initial_seed(self) -> int:
        """The seed the device's generator started from."""
        return int((self._function("initial_seed") or torch.initial_seed)())

    def default_generator(self, device_index: int) -> torch.Generator:
        """The default generator of device ``device_index`` (torch's on the CPU)."""
        generators = getattr(self.module, "default_generators", None)
        if self.on_host or generators is None:
            self._rng("default_generator")  # raises unless on the CPU
            return torch.default_generator
        return generators[device_index]

    # -- streams, events and graphs ----------------------------------------------------------

    @property
    def Stream(self) -> Any:  # noqa: N802 - DeepSpeed's name
        """The device module's stream class; None for processes on the CPU."""
        return None if self.on_host else self._function("Stream")

    def stream(self, stream: Any) -> Any:
        """A context that runs work on ``stream``; a no-op where there are no streams."""
        function = self._function("stream")
        if self.on_host or function is None or stream is None:
            return contextlib.nullcontext()
        return function(stream)

    def current_stream(self, device_index: int | None = None) -> Any:
        """The device's current stream, None where there are no streams."""
        function = self._function("current_stream")
        return None if self.on_host or function is None else function(device_index)

    def default_stream(self, device_index: int | None = None) -> Any:
        """The device's default stream, None where there are no streams."""
        function = self._function("default_stream")
        return None if self.on_host or function is None else function(device_index)

    @property
    def Event(self) -> Any:  # noqa: N802 - DeepSpeed's name
        """The device module's event class; None for processes on the CPU."""
        return None if self.on_host else self._function("Event")

    def _no_graphs(self) -> MisconfigurationError:
        return MisconfigurationError(
            f"DeepSpeed's graph capture is for CUDA devices; turn it off in the config for "
            f"{self.device_type!r} devices"
        )

    def create_graph(self) -> Any:
        """None on the CPU; elsewhere an error: graph capture is for DeepSpeed's CUDA devices."""
        if self.on_host:
            return None
        raise self._no_graphs()

    def capture_to_graph(self, graph: Any, pool: Any = None, stream: Any = None) -> Any:
        """A no-op context on the CPU; elsewhere an error (see [`create_graph`][stratcore.wrappers.deepspeed.accelerator.base.DeepSpeedAcceleratorBase.create_graph])."""
        if self.on_host:
            return contextlib.nullcontext()
        raise self._no_graphs()

    def replay_graph(self, graph: Any) -> None:
        """Nothing on the CPU; elsewhere an error (see [`create_graph`][stratcore.wrappers.deepspeed.accelerator.base.DeepSpeedAcceleratorBase.create_graph])."""
        if not self.on_host:
            raise self._no_graphs()

    # -- data types --------------------------------------------------------------------------

    def _runs(self, *precisions: str) -> bool:
        supported = self.spec.supported_precisions
        return any(p in supported and self.spec.precision_refused(p) is None for p in precisions)

    def is_bf16_supported(self) -> bool:
        """Whether the spec runs a bfloat16 precision on this machine (its probes asked)."""
        return self._runs("bf16-mixed", "bf16-true")

    def is_fp16_supported(self) -> bool:
        """Whether the spec runs a float16 precision on this machine (its probes asked)."""
        return self._runs("16-mixed", "16-true")

    def is_fp64_supported(self) -> bool:
        """Whether the spec runs 64-true on this machine."""
        return self._runs("64-true")

    def supported_dtypes(self) -> list[torch.dtype]:
        """float32, and float16 and bfloat16 where the spec runs them."""
        dtypes = [torch.float32]
        if self.is_fp16_supported():
            dtypes.append(torch.float16)
        if self.is_bf16_supported():
            dtypes.append(torch.bfloat16)
        return dtypes

    BFloat16Tensor = _tensor_type(torch.bfloat16)
    ByteTensor = _tensor_type(torch.uint8)
    DoubleTensor = _tensor_type(torch.float64)
    FloatTensor = _tensor_type(torch.float32)
    HalfTensor = _tensor_type(torch.float16)
    IntTensor = _tensor_type(torch.int32)
    LongTensor = _tensor_type(torch.int64)

    def on_accelerator(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is on a device of this type."""
        return tensor.device.type == self.device_type

    # -- everything else ---------------------------------------------------------------------

    def is_available(self) -> bool:
        """Whether the spec's device is available on this machine."""
        return self.spec.is_available()

    def range_push(self, msg: str, domain: Any = None, category: Any = None) -> None:
        """Profiler ranges are the device vendor's own tracer API: none here."""

    def range_pop(self, domain: Any = None) -> None:
        """See [`range_push`][stratcore.wrappers.deepspeed.accelerator.base.DeepSpeedAcceleratorBase.range_push]."""

    def lazy_call(self, callback: Callable[[], Any]) -> Any:
        """Run ``callback`` when the device module initializes (now where it has no lazy calls)."""
        function = self._function("_lazy_call")
        return callback() if self.on_host or function is None else function(callback)

    def communication_backend_name(self) -> str:
        """The spec's backend under torch's name, registered by the package the spec says
        registers it (``registered_by``), for DeepSpeed to create the process group with."""
        backend = self.spec.collective_backend()
        backend.register()
        return backend.process_group_name

    def is_triton_supported(self) -> bool:
        """DeepSpeed's Triton kernels are written for its own GPU accelerators."""
        return False

    def op_builder_dir(self) -> str:
        """The module of op builders DeepSpeed lists: its CPU builders' (see [`get_op_builder`][stratcore.wrappers.deepspeed.accelerator.base.DeepSpeedAcceleratorBase.get_op_builder])."""
        return OP_BUILDER_DIR

    def create_op_builder(self, class_name: str) -> Any:
        """An instance of [`get_op_builder`][stratcore.wrappers.deepspeed.accelerator.base.DeepSpeedAcceleratorBase.get_op_builder]'s class."""
        return self.get_op_builder(class_name)()

    def get_op_builder(self, class_name: str) -> type:
        """An op builder that reports itself unavailable and says what to use instead."""
        return unavailable_op_builder(class_name, self.device_type)

    def build_extension(self) -> type:
        """torch's ``BuildExtension``, the setuptools command DeepSpeed builds ops with."""
        from torch.utils.cpp_extension import BuildExtension

        return BuildExtension

    def export_envs(self) -> list[str]:
        """Prefixes of variables DeepSpeed's own multi-node launcher copies to the nodes; jobs
        of these devices start under torchrun, which keeps the environment as it is."""
        return []

    def visible_devices_envs(self) -> list[str]:
        """The spec's visible-devices variable, where it has one."""
        env = self.spec.visible_devices_env
        return [env] if env else []

    def set_visible_devices_envs(self, current_env: dict[str, str], ids: Any) -> None:
        """Set every visible-devices variable in ``current_env`` to ``ids``."""
        for env in self.visible_devices_envs():
            current_env[env] = ",".join(map(str, ids))

    def get_compile_backend(self) -> str:
        """The ``torch.compile`` backend DeepSpeed compiles with (``'inductor'`` unless set)."""
        return self._compile_backend

    def set_compile_backend(self, backend: str) -> None:
        """Compile with ``backend``, one of torch's registered ``torch.compile`` backends."""
        supported = torch._dynamo.list_backends(exclude_tags=())
        if backend not in supported:
            raise ValueError(
                f"{backend} not supported by {self.device_name()}. Supported Backends are {supported}"
            )
        self._compile_backend = backend

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
