"""Graphcore IPUs: the strategy base and precision.

PopTorch replicates the model over the IPUs from one process and runs the forward pass, the
backward pass and the optimizer step inside one compiled graph. So the strategy base starts no
process, creates no process group and wraps nothing: the strategy's hooks (a hooks module of
the generated package) compile the model at ``setup``. The host-side steps of a precision
plugin do not apply either: the plugin only converts the module and its inputs, and refuses
what only the graph can do.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn
from torch.optim import Optimizer

from ..exceptions import MisconfigurationError
from ..parallel import OneProcessStrategyBase
from ..precision.base import PrecisionBase, apply_to_tensors, default_dtype


class IPUStrategyBase(OneProcessStrategyBase):
    """One process drives every IPU (PopTorch replicates the model): no process group, no
    launcher, and no wrapper; the hooks compile the model at ``setup``."""

    wrapper: ClassVar[str] = "ipu"


class IPUPrecisionBase(PrecisionBase):
    """float32, or float16 parameters and floating-point inputs ('16-true'), on IPUs."""

    wraps_forward = True

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the model runs in: float16 for '16-true', else float32."""
        return torch.float16 if self.precision == "16-true" else torch.float32

    def convert_module(self, module: nn.Module) -> nn.Module:
        return module.to(dtype=self.dtype) if self.dtype != torch.float32 else module

    def convert_input(self, data: Any) -> Any:
        if self.dtype == torch.float32:
            return data
        return apply_to_tensors(
            data, lambda t: t.to(self.dtype) if torch.is_floating_point(t) else t
        )

    def forward_context(self) -> Any:
        return default_dtype(self.dtype)

    def backward(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        raise MisconfigurationError(
            "on IPUs the backward pass runs inside the compiled model; use the IPU strategy, "
            "whose backward() confirms the step the model took"
        )

    def optimizer_step(self, optimizer: Optimizer, **kwargs: Any) -> Any:
        raise MisconfigurationError(
            "on IPUs the optimizer step runs inside the compiled model; use the IPU strategy, "
            "whose optimizer_step() passes changed optimizer settings to the model"
        )

    def clip_gradients(
        self, parameters: Any, optimizer: Optimizer, max_norm: float
    ) -> torch.Tensor:
        raise MisconfigurationError(
            "gradients live on the IPUs and cannot be clipped from the host: clipping would "
            "have to be part of the compiled graph"
        )
