"""``AcceleratorAdapter``: Lightning's Accelerator interface, implemented from a stratcore spec.

A generated Lightning accelerator is::

    class AcmeAccelerator(AcceleratorAdapter, lightning.pytorch.accelerators.Accelerator):
        spec = acmelib.accelerators.acme.AcmeAccelerator

(or the same over ``lightning.fabric.accelerators.Accelerator``; a spec whose devices are CPU
processes extends ``CPUAccelerator`` instead, see ``contract.ACCELERATOR_BASES``). Lightning calls
``is_available``, ``auto_device_count``, ``parse_devices`` and ``get_parallel_devices`` on the
class, and ``setup_device`` and ``teardown`` on an instance; each is answered by the spec, so
Lightning's ``devices=`` means what it means for the spec's own strategies. Strategies built with
``StrategyAdapter`` call ``after_backward`` and ``after_optimizer_step`` after every step.

Lightning's own strategies assume CUDA or the CPU for a device they do not know: with
``strategy="auto"``, one device of an accelerator Lightning does not know gets
``SingleDeviceStrategy(device="cpu")``, and several get Lightning's own ``DDPStrategy``, which
wraps the model on a CUDA stream (``_choose_strategy`` in
``lightning/pytorch/trainer/connectors/accelerator_connector.py`` and its Fabric twin). On a
device that is neither, ``setup_device`` refuses a strategy that is not one of the spec's
plugins at once, naming the plugin to pass, instead of failing later on the wrong device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from . import check_lightning_version

check_lightning_version()

from ..accelerator import Accelerator as AcceleratorSpec  # noqa: E402
from ..exceptions import MisconfigurationError  # noqa: E402
from .registration import register_accelerator  # noqa: E402

__all__ = ["AcceleratorAdapter"]


class AcceleratorAdapter:
    """Mixin placed before a Lightning ``Accelerator`` class; see the module documentation.

    Generated classes set ``spec``: the stratcore ``Accelerator`` subclass with the facts.
    """

    spec: ClassVar[type[AcceleratorSpec]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spec_accelerator: AcceleratorSpec = self.spec()
        #: Whether a strategy of the spec's plugins (``StrategyAdapter``) drives this
        #: accelerator; it says so when Lightning's connector hands it the accelerator.
        self.adapted_strategy = False

    # -- on the class (Lightning's connector calls these before any instance exists) ------

    @classmethod
    def name(cls) -> str:
        """The accelerator's registry name, from the spec."""
        return cls.spec.name

    @classmethod
    def is_available(cls) -> bool:
        """Whether the device is present, as the spec's probe says."""
        return cls.spec.is_available()

    @classmethod
    def auto_device_count(cls) -> int:
        """How many devices ``devices='auto'`` selects for the spec (0 when none is present)."""
        try:
            return len(cls.spec.parse_devices("auto"))
        except MisconfigurationError:
            return 0

    @classmethod
    def parse_devices(cls, devices: Any) -> list[int]:
        """Lightning's ``devices`` (an int, -1, 'auto', '0,1', a list) -> device indices."""
        return cls.spec.parse_devices(devices)

    @classmethod
    def get_parallel_devices(cls, devices: Sequence[int]) -> list[torch.device]:
        """Device indices (``parse_devices``'s result) -> one ``torch.device`` per process."""
        return cls.spec.get_parallel_devices(devices)

    @classmethod
    def register_accelerators(cls, accelerator_registry: Any) -> None:
        """Register under the spec's name; registering the same class again is a no-op."""
        register_accelerator(accelerator_registry, cls)

    # -- per process ------------------------------------------------------------------------

    def setup_device(self, device: torch.device) -> None:
        """Run the spec's checks and set-device hook for the device this process uses; refuse
        one of Lightning's own strategies on a device that is neither CUDA nor the CPU (see
        the module documentation)."""
        device_type = self.spec_accelerator.device_type
        if not self.adapted_strategy and device_type not in ("cuda", "cpu"):
            raise MisconfigurationError(self._plugin_needed(device))
        self.spec_accelerator.setup_device(device)

    def _plugin_needed(self, device: torch.device) -> str:
        from ..factory import auto_strategy
        from ..registry import registry_of

        registry = registry_of(self.spec)
        names = []
        for processes in (1, 2):
            try:
                names.append(repr(auto_strategy(registry, self.spec_accelerator, processes)))
            except MisconfigurationError:
                continue
        choice = " for one device, or ".join(names) + (" for several" if len(names) > 1 else "")
        return (
            f"accelerator {self.spec.name!r} runs on {self.spec_accelerator.device_type!r} "
            "devices, which Lightning's own strategies do not know (with strategy='auto' or one "
            f"of Lightning's strategies, this process got {device}): pass the spec's strategy, "
            f"{choice or 'one of its own'} (registered by importing the package's Lightning "
            "plugins)"
        )

    def teardown(self) -> None:
        """Release what the device holds, as the spec's accelerator does."""
        self.spec_accelerator.teardown()

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        """Device statistics for Lightning's DeviceStatsMonitor: none are known from a spec."""
        return {}

    def after_backward(self) -> None:
        """The spec's hook after every backward pass (e.g. a lazy-graph device's mark_step)."""
        self.spec_accelerator.after_backward()

    def after_optimizer_step(self) -> None:
        """The spec's hook after every optimizer step."""
        self.spec_accelerator.after_optimizer_step()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
