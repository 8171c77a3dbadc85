"""FP8 precision with NVIDIA's Transformer Engine (``transformer_engine.pytorch``).

Transformer Engine runs the matrix multiplications of its own layers in FP8 inside
``fp8_autocast``; everything else runs in the weights' dtype. The package is imported only
when a plugin of this module is constructed, and a machine without it gets a
``MissingDependencyError`` that names it.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

import torch
from torch import nn

from .base import PrecisionBase, apply_to_tensors, default_dtype

#: Transformer Engine's FP8 kernels need both sides of a matrix product divisible by 16.
FP8_ALIGNMENT = 16


def _te() -> Any:
    return importlib.import_module("transformer_engine.pytorch")


class TransformerEnginePrecisionBase(PrecisionBase):
    """FP8 matrix multiplications through Transformer Engine.

    ``convert_module`` replaces every ``nn.Linear`` whose sizes FP8 supports and every
    ``nn.LayerNorm`` by Transformer Engine's layer, weights copied, then converts the module to
    the weights' dtype: bfloat16 for 'transformer-engine', float16 for
    'transformer-engine-float16'. Forward passes run in ``fp8_autocast`` with that default
    dtype; floating-point inputs are cast to it and outputs back to the default dtype.
    """

    wraps_forward = True

    #: FP8 scaling recipe handed to ``fp8_autocast``; None for Transformer Engine's default.
    recipe: Any = None

    @property
    def dtype(self) -> torch.dtype:
        """The dtype outside Transformer Engine's layers: float16 or bfloat16, as the precision
        says."""
        return torch.float16 if self.precision.endswith("float16") else torch.bfloat16

    def convert_module(self, module: nn.Module) -> nn.Module:
        _replace_layers(module, _te())
        return module.to(dtype=self.dtype)

    def convert_input(self, data: Any) -> Any:
        return apply_to_tensors(data, self._cast(self.dtype))

    def convert_output(self, data: Any) -> Any:
        return apply_to_tensors(data, self._cast(torch.get_default_dtype()))

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        stack = contextlib.ExitStack()
        stack.enter_context(default_dtype(self.dtype))
        stack.enter_context(_te().fp8_autocast(enabled=True, fp8_recipe=self.recipe))
        return stack

    @staticmethod
    def _cast(dtype: torch.dtype) -> Any:
        def cast(tensor: torch.Tensor) -> torch.Tensor:
            return tensor.to(dtype) if torch.is_floating_point(tensor) else tensor

        return cast


def _replace_layers(module: nn.Module, te: Any) -> None:
    """Swap torch's Linear and LayerNorm layers for Transformer Engine's, in place."""
    for name, child in module.named_children():
        if isinstance(child, nn.Linear) and not (
            child.in_features % FP8_ALIGNMENT or child.out_features % FP8_ALIGNMENT
        ):
            replacement = te.Linear(
                child.in_features, child.out_features, bias=child.bias is not None
            )
            with torch.no_grad():
                replacement.weight.copy_(child.weight)
                if child.bias is not None:
                    replacement.bias.copy_(child.bias)
            setattr(module, name, replacement)
        elif isinstance(child, nn.LayerNorm) and child.bias is not None:
            replacement = te.LayerNorm(child.normalized_shape[0], eps=child.eps)
            with torch.no_grad():
                replacement.weight.copy_(child.weight)
                replacement.bias.copy_(child.bias)
            setattr(module, name, replacement)
        else:
            _replace_layers(child, te)
