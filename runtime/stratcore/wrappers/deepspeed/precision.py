"""DeepSpeed's precision: the fp16 or bf16 section of the engine's config, not autocast."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from stratcore.precision.base import PrecisionBase, apply_to_tensors, default_dtype
from torch import nn


class DeepSpeedPrecisionBase(PrecisionBase):
    """Precision through the DeepSpeed config rather than autocast.

    The engine casts the module to float16 or bfloat16, keeps float32 master weights in its
    optimizer and scales the loss for float16; this plugin supplies the config section and
    casts floating-point inputs to the engine's dtype.
    """

    wraps_forward = True

    @property
    def dtype(self) -> torch.dtype | None:
        """The engine's 16-bit dtype, or None for float32."""
        if self.precision.startswith("bf16"):
            return torch.bfloat16
        if self.precision.startswith("16"):
            return torch.float16
        return None

    def deepspeed_config(self) -> dict[str, Any]:
        """The fp16 or bf16 section of the DeepSpeed config for this precision."""
        if self.dtype is torch.float16:
            # loss_scale 0 selects dynamic loss scaling.
            return {"fp16": {"enabled": True, "loss_scale": 0}}
        if self.dtype is torch.bfloat16:
            return {"bf16": {"enabled": True}}
        return {}

    def convert_module(self, module: nn.Module) -> nn.Module:
        if self.dtype is not None and self.precision.endswith("-true"):
            return module.to(dtype=self.dtype)
        return module

    def convert_input(self, data: Any) -> Any:
        dtype = self.dtype
        if dtype is None:
            return data
        return apply_to_tensors(data, lambda t: t.to(dtype) if torch.is_floating_point(t) else t)

    def convert_output(self, data: Any) -> Any:
        if self.dtype is None or self.precision.endswith("-true"):
            return data
        target = torch.get_default_dtype()
        return apply_to_tensors(data, lambda t: t.to(target) if torch.is_floating_point(t) else t)

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        if self.dtype is not None and self.precision.endswith("-true"):
            return default_dtype(self.dtype)
        return contextlib.nullcontext()
