"""``DeepSpeedAdapter``: a DeepSpeed spec's facts on Lightning's own ``DeepSpeedStrategy``, for
the Trainer and for Fabric, on the spec's devices.

Lightning 2.6's DeepSpeedStrategy refuses every accelerator but its own CUDAAccelerator: its
``setup_environment`` checks ``isinstance(self.accelerator, CUDAAccelerator)`` and otherwise
only runs ParallelStrategy's. The rest of it reaches the device through DeepSpeed's accelerator
(``deepspeed.accelerator.get_accelerator()``) and the strategy's ``root_device``, whatever its
type. So this adapter makes DeepSpeed train on the device's DeepSpeed accelerator (the
generated one where the accelerator spec says so, else DeepSpeed's own class selected by
``DS_ACCELERATOR``: ``stratcore.wrappers.deepspeed.select.select_for``), then runs
ParallelStrategy's ``setup_environment`` itself.

Fabric's DeepSpeedStrategy leaves DeepSpeed's own default clipping on (the gradient norm clipped
to 1.0: ``lightning/fabric/strategies/deepspeed.py`` never sets ``gradient_clipping``, where the
Trainer's sets it from ``gradient_clip_val``, 0 by default): the adapter sets it to 0 unless
the user's config says otherwise, as stratlib's own DeepSpeed strategies do, so that training
through Fabric only differs from plain PyTorch where the user asks for it. ``tests/runtime/lightning/test_lightning_deepspeed.py``
checks that the method it passes over still does nothing else.
"""

from __future__ import annotations

from typing import Any

from . import check_lightning_version

check_lightning_version()

from lightning.pytorch.strategies import (  # noqa: E402
    DeepSpeedStrategy as TrainerDeepSpeedStrategy,
)

from ..wrappers.deepspeed.config import CONFIG_DEFAULTS  # noqa: E402
from ..wrappers.deepspeed.select import select_for  # noqa: E402
from .strategies import StrategyAdapter  # noqa: E402

__all__ = ["DeepSpeedAdapter"]


class DeepSpeedAdapter(StrategyAdapter):
    """``StrategyAdapter`` for Lightning's DeepSpeedStrategy; see the module documentation.

    The spec's ``zero_stage`` option (its aliases' presets) is Lightning's ``stage``.
    """

    def __init__(self, *args: Any, zero_stage: int | None = None, **kwargs: Any) -> None:
        if zero_stage is not None:
            kwargs["stage"] = zero_stage
        super().__init__(*args, **kwargs)
        config = getattr(self, "config", None)
        if not self._is_trainer_strategy() and isinstance(config, dict):
            config.setdefault("gradient_clipping", CONFIG_DEFAULTS["gradient_clipping"])

    def setup_environment(self) -> None:
        # Before anything imports DeepSpeed: the modules imported before the process group is
        # created include DeepSpeed's backend (the spec's group_default_modules).
        accelerator = self.accelerator_spec
        if accelerator is not None and self._is_parallel():
            select_for(type(accelerator))
        super().setup_environment()

    def _setup_lightning_environment(self) -> None:
        if isinstance(self, TrainerDeepSpeedStrategy):
            super(TrainerDeepSpeedStrategy, self).setup_environment()
        else:
            from lightning.fabric.strategies import DeepSpeedStrategy as FabricDeepSpeedStrategy

            super(FabricDeepSpeedStrategy, self).setup_environment()  # type: ignore[misc]
