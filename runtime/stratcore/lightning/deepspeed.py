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
through Fabric only differs from plain PyTorch where the user asks for it.
``tests/runtime/lightning/test_lightning_deepspeed.py`` checks that the method it passes over
still does nothing else.

On a device whose moves give a module new Parameter objects (``parameter_moves``), DeepSpeed's
``initialize`` moves the module after the optimizer was made from it, and its ZeRO optimizer
fails on the Parameters it no longer finds (``KeyError: Parameter``). The adapter moves the
module first there: for the Trainer before ``configure_optimizers`` runs
(``lightning/pytorch/strategies/deepspeed.py``, ``DeepSpeedStrategy.setup`` makes the optimizers
before ``init_deepspeed``), for Fabric before ``setup_module_and_optimizers`` hands DeepSpeed
the user's optimizer, which it points at the moved Parameters, as stratlib's strategies do.
"""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.optim import Optimizer

from . import check_lightning_version

check_lightning_version()

from lightning.pytorch.strategies import (  # noqa: E402
    DeepSpeedStrategy as TrainerDeepSpeedStrategy,
)

from ..parameter_moves import (  # noqa: E402
    follow_move,
    moves_replace_parameters,
    parameters_by_name,
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

    def _setup_model(self, model: nn.Module) -> Any:
        """The Trainer: the module on its device before its optimizers are made, where the move
        replaces its Parameters (see the module documentation). Lightning's DeepSpeedStrategy
        returns the module as it is here (its DDPStrategy base would wrap it)."""
        model = super()._setup_model(model)  # type: ignore[misc]
        device = self.root_device
        if moves_replace_parameters(device):
            model.to(device)
        return model

    def setup_module_and_optimizers(
        self, module: nn.Module, optimizers: list[Optimizer], *args: Any, **kwargs: Any
    ) -> Any:
        """Fabric: where a move replaces the module's Parameters, the user's optimizers follow
        the move Fabric made (``module_to_device``), or the module goes to its device first
        where Fabric was told not to move it (see the module documentation)."""
        self._follow_moves(optimizers)
        device = self.root_device
        if moves_replace_parameters(device):
            before = parameters_by_name(module)
            module.to(device)
            follow_move(module, before, optimizers)
        return super().setup_module_and_optimizers(  # type: ignore[misc]
            module, optimizers, *args, **kwargs
        )

    def _setup_lightning_environment(self) -> None:
        if isinstance(self, TrainerDeepSpeedStrategy):
            super(TrainerDeepSpeedStrategy, self).setup_environment()
        else:
            from lightning.fabric.strategies import DeepSpeedStrategy as FabricDeepSpeedStrategy

            super(FabricDeepSpeedStrategy, self).setup_environment()  # type: ignore[misc]
