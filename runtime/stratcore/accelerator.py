"""The Accelerator: which devices exist, how many, and how a process starts using one.

Generated accelerator classes only set the class attributes below from their spec; probes and
hooks are import paths (``'torch.cuda:is_available'``) resolved when first needed, so that a
missing hardware plugin costs nothing until it is used.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from .collectives import CollectiveBackend
from .contract import DEFAULT_PRECISION, PRECISIONS
from .exceptions import MisconfigurationError
from .imports import Requirement, import_object, require

GLOO = CollectiveBackend("gloo")


class Accelerator:
    """Base class of accelerators.

    Subclasses describe a device type through class attributes; the methods here turn the
    ``devices`` a user asks for into ``torch.device`` objects and prepare each process.
    """

    name: ClassVar[str] = ""
    device_type: ClassVar[str] = "cpu"
    #: Whether devices carry an index (cuda:0) or are addressed as a whole (cpu, hpu).
    indexed: ClassVar[bool] = True
    backend: ClassVar[CollectiveBackend] = GLOO
    default_precision: ClassVar[str] = DEFAULT_PRECISION
    supported_precisions: ClassVar[tuple[str, ...]] = PRECISIONS
    grad_scaler: ClassVar[bool] = False
    #: Devices selected by devices="auto"; None selects every available device.
    auto_devices: ClassVar[int | None] = None
    is_available_hook: ClassVar[str | None] = None
    #: Function counting devices; None for devices that are processes (any number).
    device_count_hook: ClassVar[str | None] = None
    visible_devices_env: ClassVar[str | None] = None
    set_device_hook: ClassVar[str | None] = None
    teardown_hook: ClassVar[str | None] = None
    after_backward_hook: ClassVar[str | None] = None
    after_optimizer_step_hook: ClassVar[str | None] = None
    requires: ClassVar[tuple[Requirement, ...]] = ()

    # -- what is here --------------------------------------------------------------------

    @classmethod
    def is_available(cls) -> bool:
        """Whether the device's software is installed and at least one device is present."""
        if not all(r.available for r in cls.requires):
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
    def check_available(cls) -> None:
        """Raise a clear error if this accelerator cannot be used here."""
        require(cls.requires, f"accelerator={cls.name!r}")
        if not cls.is_available():
            probe = (
                f" ({cls.is_available_hook.replace(':', '.')}() is False)"
                if cls.is_available_hook
                else ""
            )
            raise MisconfigurationError(
                f"accelerator={cls.name!r} is not available on this machine{probe}"
            )

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
        if cls.indexed:
            return [torch.device(cls.device_type, i) for i in indices]
        return [torch.device(cls.device_type) for _ in indices]

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
        if self.after_backward_hook is not None:
            self._step_hook(self.after_backward_hook)()

    def after_optimizer_step(self) -> None:
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
        if self.teardown_hook is not None and self.is_available():
            import_object(self.teardown_hook)()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: Any) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))
