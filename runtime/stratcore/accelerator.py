"""The Accelerator: which devices exist, how many, and how a process starts using one.

Generated accelerator classes only set the class attributes below from their spec; probes and
hooks are import paths (``'torch.cuda:is_available'``) resolved when first needed, so that a
missing hardware plugin costs nothing until it is used. An accelerator whose device type is
known only at run time (``current_device_hook``, e.g. whatever ``torch.accelerator`` finds) asks
for it each time ``device_type`` is read.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch

from .collectives import CollectiveBackend
from .contract import DEFAULT_PRECISION, PRECISIONS
from .exceptions import MisconfigurationError
from .imports import Requirement, import_object, require

GLOO = CollectiveBackend("gloo")


class _DeviceType:
    """``Accelerator.device_type`` where a class does not set it: the type of the device its
    ``current_device_hook`` returns (the CPU where that is None or there is no hook)."""

    def __get__(self, instance: Any, owner: type[Accelerator]) -> str:
        hook = owner.current_device_hook
        device = import_object(hook)() if hook is not None else None
        return torch.device(device).type if device is not None else "cpu"


class Accelerator:
    """Base class of accelerators.

    Subclasses describe a device type through class attributes; the methods here turn the
    ``devices`` a user asks for into ``torch.device`` objects and prepare each process.
    """

    name: ClassVar[str] = ""
    #: torch.device type of the devices; see ``_DeviceType`` for classes that do not set it.
    device_type: ClassVar[str] = _DeviceType()  # type: ignore[assignment]
    #: Function returning the device torch uses at run time (an accelerator for whichever
    #: device is present); its type is ``device_type``.
    current_device_hook: ClassVar[str | None] = None
    #: Whether devices carry an index (cuda:0) or are addressed as a whole (cpu processes).
    indexed: ClassVar[bool] = True
    backend: ClassVar[CollectiveBackend] = GLOO
    #: The Ray resource that stands for one device ('GPU', a custom resource), which
    #: ``stratcore.ray`` asks one of per worker; None for devices that are processes.
    ray_resource: ClassVar[str | None] = None
    default_precision: ClassVar[str] = DEFAULT_PRECISION
    supported_precisions: ClassVar[tuple[str, ...]] = PRECISIONS
    #: Supported precisions the device has only where a function says so (precision ->
    #: 'module:function'), e.g. bfloat16 on devices that report it.
    precision_probes: ClassVar[Mapping[str, str]] = {}
    grad_scaler: ClassVar[bool] = False
    #: Devices selected by devices="auto"; None selects every available device.
    auto_devices: ClassVar[int | None] = None
    is_available_hook: ClassVar[str | None] = None
    #: 'module:attribute' that only builds of torch for this device set (not None, not empty),
    #: for devices that share a device type with another build's devices.
    build_marker: ClassVar[str | None] = None
    #: Function counting devices; None for devices that are processes (any number).
    device_count_hook: ClassVar[str | None] = None
    visible_devices_env: ClassVar[str | None] = None
    set_device_hook: ClassVar[str | None] = None
    teardown_hook: ClassVar[str | None] = None
    after_backward_hook: ClassVar[str | None] = None
    after_optimizer_step_hook: ClassVar[str | None] = None
    requires: ClassVar[tuple[Requirement, ...]] = ()
    #: What to install to use the device, where ``requires`` cannot name it.
    install: ClassVar[str | None] = None
    #: DeepSpeed's name for the device (the DS_ACCELERATOR value of its accelerator class),
    #: where it is not the device type.
    deepspeed_accelerator: ClassVar[str | None] = None
    #: Whether DeepSpeed strategies train on the DeepSpeed accelerator generated from the spec
    #: (``stratcore.wrappers.deepspeed.accelerator.base``) rather than on DeepSpeed's own class.
    deepspeed_generated: ClassVar[bool] = False
    #: Whether torch.nn.SyncBatchNorm synchronises batch statistics on this device.
    sync_batchnorm: ClassVar[bool] = False

    # -- what is here --------------------------------------------------------------------

    @classmethod
    def is_available(cls) -> bool:
        """Whether the device's software is installed and at least one device is present."""
        if not all(r.available for r in cls.requires) or not cls.built_for():
            return False
        if cls.is_available_hook is None:
            return True
        try:
            return bool(import_object(cls.is_available_hook)())
        except Exception:  # a probe that cannot run means "not here"
            return False

    @classmethod
    def device_count(cls) -> int | None:
        """Number of devices present, or None when any number of processes can be used."""
        if cls.device_count_hook is None:
            return None if cls.is_available_hook is None else int(cls.is_available())
        return int(import_object(cls.device_count_hook)()) if cls.is_available() else 0

    @classmethod
    def built_for(cls) -> bool:
        """Whether this build of torch is one for the device (always, without a build marker)."""
        if cls.build_marker is None:
            return True
        try:
            return bool(import_object(cls.build_marker))
        except (ImportError, AttributeError):
            return False

    @classmethod
    def check_available(cls) -> None:
        """Raise a clear error if this accelerator cannot be used here."""
        require(cls.requires, f"accelerator={cls.name!r}")
        hint = f"; it needs: {cls.install}" if cls.install else ""
        if not cls.built_for():
            marker = str(cls.build_marker).replace(":", ".")
            raise MisconfigurationError(
                f"accelerator={cls.name!r} needs a build of torch for it, and this one "
                f"(torch {torch.__version__}) is not: {marker} is not set{hint}"
            )
        if not cls.is_available():
            probe = (
                f" ({cls.is_available_hook.replace(':', '.')}() is False)"
                if cls.is_available_hook
                else ""
            )
            raise MisconfigurationError(
                f"accelerator={cls.name!r} is not available on this machine{probe}{hint}"
            )

    @classmethod
    def collective_backend(cls) -> CollectiveBackend:
        """The backend processes on this device use by default (for a backend taken from
        torch's device map, the one torch maps ``device_type`` to)."""
        return cls.backend.for_device(cls.device_type)

    # -- precisions ----------------------------------------------------------------------

    @classmethod
    def precision_refused(cls, precision: str) -> str | None:
        """Why the device here cannot run ``precision``, one of its supported precisions that
        a probe decides; None when it can (or when no device is present to ask)."""
        probe = cls.precision_probes.get(precision)
        if probe is None or not cls.is_available():
            return None
        try:
            supported = bool(import_object(probe)())
        except Exception as exc:  # a probe that cannot run answers "no"
            supported, failure = False, f" ({type(exc).__name__}: {exc})"
        else:
            failure = ""
        if supported:
            return None
        return (
            f"precision={precision!r}: accelerator {cls.name!r} runs it only where "
            f"{probe.replace(':', '.')}() is True, and it is not on this machine{failure}"
        )

    @classmethod
    def available_precisions(cls) -> tuple[str, ...]:
        """The supported precisions the device here runs (the probed ones it confirms)."""
        return tuple(p for p in cls.supported_precisions if cls.precision_refused(p) is None)

    # -- which devices -------------------------------------------------------------------

    @classmethod
    def parse_devices(cls, devices: int | str | Sequence[int]) -> list[int]:
        """Turn ``devices`` (an int, 'auto', -1, '0,1', or a list of indices) into indices."""
        count = cls.device_count()
        name = cls.name
        if isinstance(devices, str):
            text = devices.strip()
            if text == "auto":
                wanted = cls.auto_devices if cls.auto_devices is not None else count
                if wanted is None:
                    wanted = 1
                if wanted < 1:
                    raise MisconfigurationError(f"devices='auto' found no {name} device")
                return list(range(wanted))
            if "," in text:
                try:
                    devices = [int(part) for part in text.split(",") if part.strip()]
                except ValueError:
                    raise MisconfigurationError(
                        f"devices={devices!r} is not a list of device indices such as '0,1'"
                    ) from None
            else:
                try:
                    devices = int(text)
                except ValueError:
                    raise MisconfigurationError(
                        f"devices={devices!r} is not understood; use a positive number, 'auto', "
                        "-1 for all devices, or a list of indices such as [0, 1]"
                    ) from None
        if isinstance(devices, bool) or not isinstance(devices, int | list | tuple):
            raise MisconfigurationError(
                f"devices={devices!r} is not understood; use a positive number, 'auto', -1 for "
                "all devices, or a list of indices such as [0, 1]"
            )
        if isinstance(devices, int):
            if devices == -1:
                if count is None:
                    raise MisconfigurationError(
                        f"devices=-1 (all devices) means nothing for {name!r}, whose devices are "
                        "processes; give a number"
                    )
                devices = count
            elif devices < 1:
                raise MisconfigurationError(
                    f"devices={devices} is not allowed; use a positive number, 'auto', or -1 for all devices"
                )
            if count is not None and devices > count:
                visible = (
                    os.environ.get(cls.visible_devices_env) if cls.visible_devices_env else None
                )
                shown = f" ({cls.visible_devices_env}={visible!r})" if visible is not None else ""
                raise MisconfigurationError(
                    f"devices={devices} asks for more {name} devices than the {count} present{shown}"
                )
            return list(range(devices))
        indices = list(devices)
        if not indices:
            raise MisconfigurationError("devices=[] selects no device; give at least one index")
        if not cls.indexed:
            raise MisconfigurationError(
                f"devices={devices!r}: {name!r} devices are not addressed by index; give devices as a number"
            )
        for index in indices:
            if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                raise MisconfigurationError(f"devices={devices!r}: {index!r} is not a device index")
            if count is not None and index >= count:
                visible = (
                    os.environ.get(cls.visible_devices_env) if cls.visible_devices_env else None
                )
                shown = f"; {cls.visible_devices_env}={visible!r}" if visible is not None else ""
                raise MisconfigurationError(
                    f"devices={devices!r}: there is no {name} device {index} (found {count}{shown})"
                )
        if len(set(indices)) != len(indices):
            raise MisconfigurationError(f"devices={devices!r} names a device twice")
        return indices

    @classmethod
    def get_parallel_devices(cls, indices: Sequence[int]) -> list[torch.device]:
        """One ``torch.device`` per process. The device's software is imported first: an
        extension of torch (a PrivateUse1 device) gives torch the device type's name."""
        for requirement in cls.requires:
            if requirement.available:
                importlib.import_module(requirement.module)
        try:
            if cls.indexed:
                return [torch.device(cls.device_type, i) for i in indices]
            return [torch.device(cls.device_type) for _ in indices]
        except RuntimeError:  # a device type torch does not know without the device's software
            require(cls.requires, f"accelerator={cls.name!r}")
            raise

    # -- per process ---------------------------------------------------------------------

    def setup_device(self, device: torch.device) -> None:
        """Prepare this process to use ``device``."""
        if device.type != self.device_type:
            raise MisconfigurationError(
                f"device {device} is not a {self.name!r} device ({self.device_type})"
            )
        if self.set_device_hook is not None:
            import_object(self.set_device_hook)(device)

    def after_backward(self) -> None:
        """Call the device's hook after a backward pass (the spec's
        ``step_hooks.after_backward``), if it has one."""
        if self.after_backward_hook is not None:
            self._step_hook(self.after_backward_hook)()

    def after_optimizer_step(self) -> None:
        """Call the device's hook after an optimizer step (the spec's
        ``step_hooks.after_optimizer_step``), if it has one."""
        if self.after_optimizer_step_hook is not None:
            self._step_hook(self.after_optimizer_step_hook)()

    def _step_hook(self, path: str) -> Any:
        """The function a step hook names, imported on its first call (the device's software is
        an optional package) and kept: step hooks run every step."""
        hooks: dict[str, Any] = self.__dict__.setdefault("_step_hooks", {})
        if path not in hooks:
            hooks[path] = import_object(path)
        return hooks[path]

    def teardown(self) -> None:
        """Release what the device holds (the spec's ``teardown`` function) where the device is
        present."""
        if self.teardown_hook is not None and self.is_available():
            import_object(self.teardown_hook)()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: Any) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))
