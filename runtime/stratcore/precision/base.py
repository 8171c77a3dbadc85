"""Precision plugins: how the module, its inputs, the forward pass, backward and optimizer steps
are carried out at a given numerical precision.

``PrecisionBase`` is full float32 precision; its subclasses here change what differs for float64,
autocast mixed precision and true half precision. Generated plugin classes set which
precisions they serve (``modes``) and where they apply.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Generator, Iterable
from typing import Any, ClassVar

import torch
from torch import nn
from torch.optim import Optimizer

from ..contract import DEFAULT_PRECISION, PRECISIONS, PRECISION_ALIASES
from ..exceptions import MisconfigurationError
from ..imports import Requirement, import_object, require


def canonical_precision(value: Any) -> str:
    """'16' -> '16-mixed', 32 -> '32-true', ...; raises for anything else."""
    text = str(value).strip().lower() if value is not None else ""
    text = PRECISION_ALIASES.get(text, text)
    if text not in PRECISIONS:
        raise MisconfigurationError(
            f"precision={value!r} is not supported; use one of {', '.join(PRECISIONS)} "
            f"(or the short forms {', '.join(repr(k) for k in PRECISION_ALIASES)})"
        )
    return text


def apply_to_tensors(data: Any, function: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """Apply ``function`` to every tensor inside nested lists, tuples and dicts."""
    if isinstance(data, torch.Tensor):
        return function(data)
    if isinstance(data, dict):
        return type(data)((k, apply_to_tensors(v, function)) for k, v in data.items())
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # named tuple
        return type(data)(*(apply_to_tensors(v, function) for v in data))
    if isinstance(data, list | tuple):
        return type(data)(apply_to_tensors(v, function) for v in data)
    return data


def _cast_floating(dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    def cast(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(dtype) if torch.is_floating_point(tensor) else tensor

    return cast


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Generator[None, None, None]:
    """Make ``dtype`` torch's default dtype inside the block, and restore the previous one after
    it."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def make_grad_scaler(scaler_class: Callable[..., Any], device: torch.device) -> Any:
    """Build a gradient scaler for ``device``.

    torch's scalers take the device type as ``device``; others (fairscale's ShardedGradScaler,
    which is CUDA-only) take no device and would read a positional one as the initial scale.
    """
    try:
        takes_device = "device" in inspect.signature(scaler_class).parameters
    except (TypeError, ValueError):  # builtins without a signature
        takes_device = False
    return scaler_class(device=device.type) if takes_device else scaler_class()


class PrecisionBase:
    """Full float32 precision, and the interface every precision plugin implements."""

    name: ClassVar[str | None] = None
    modes: ClassVar[tuple[str, ...]] = (DEFAULT_PRECISION,)
    wrappers: ClassVar[tuple[str, ...]] = ()
    accelerators: ClassVar[tuple[str, ...]] = ()
    grad_scaler: ClassVar[str | None] = None
    requires: ClassVar[tuple[Requirement, ...]] = ()
    #: Whether forward passes must run inside ``forward_context`` with converted inputs.
    wraps_forward: ClassVar[bool] = False

    def __init__(self, precision: str | None = None, *, device_type: str | None = None) -> None:
        require(self.requires, type(self).__name__)
        mode = canonical_precision(precision) if precision is not None else self.modes[0]
        if mode not in self.modes:
            raise MisconfigurationError(
                f"{type(self).__name__} implements precision {', '.join(repr(m) for m in self.modes)}, "
                f"not {precision!r}"
            )
        self.precision = mode
        self.device_type = device_type

    def connect(self, device: torch.device, needs_grad_scaler: bool) -> None:
        """Called by the strategy once it knows its device."""
        if self.device_type is None:
            self.device_type = device.type

    # -- module and data -----------------------------------------------------------------

    def convert_module(self, module: nn.Module) -> nn.Module:
        """The module converted to the precision (unchanged here)."""
        return module

    def convert_input(self, data: Any) -> Any:
        """Inputs converted to the precision (unchanged here)."""
        return data

    def convert_output(self, data: Any) -> Any:
        """Outputs converted back from the precision (unchanged here)."""
        return data

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        """Context in which the model's forward pass runs."""
        return contextlib.nullcontext()

    # -- steps -------------------------------------------------------------------------

    def pre_backward(self, tensor: torch.Tensor) -> torch.Tensor:
        """The loss as backward should see it (a gradient scaler scales it)."""
        return tensor

    def backward(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Run the backward pass of ``tensor``."""
        tensor.backward(*args, **kwargs)

    def optimizer_step(self, optimizer: Optimizer, **kwargs: Any) -> Any:
        """Step ``optimizer`` (through the gradient scaler where there is one); its result."""
        return optimizer.step(**kwargs)

    def unscale_gradients(self, optimizer: Optimizer) -> None:
        """Bring gradients to their true scale (before clipping)."""

    def clip_gradients(
        self, parameters: Iterable[torch.Tensor], optimizer: Optimizer, max_norm: float
    ) -> torch.Tensor:
        """Clip the gradients of ``parameters`` to a total norm of ``max_norm``; the norm before
        clipping."""
        self.unscale_gradients(optimizer)
        return torch.nn.utils.clip_grad_norm_(list(parameters), max_norm)

    def state_dict(self) -> dict[str, Any]:
        """What the plugin keeps in a checkpoint (a gradient scaler's state)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (a loss scaler's state, for instance)."""

    def teardown(self) -> None:
        """Release what the plugin holds."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(precision={self.precision!r})"


class CastPrecisionBase(PrecisionBase):
    """Parameters and floating-point inputs in ``dtype``, and so every computation, without
    autocast (DoublePrecisionBase, HalfPrecisionBase)."""

    wraps_forward = True

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the module and its inputs are cast to."""
        raise NotImplementedError

    def convert_module(self, module: nn.Module) -> nn.Module:
        return module.to(dtype=self.dtype)

    def convert_input(self, data: Any) -> Any:
        return apply_to_tensors(data, _cast_floating(self.dtype))

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        return default_dtype(self.dtype)


class DoublePrecisionBase(CastPrecisionBase):
    """float64 parameters, inputs and computations."""

    @property
    def dtype(self) -> torch.dtype:
        return torch.float64


class HalfPrecisionBase(CastPrecisionBase):
    """float16 or bfloat16 parameters and inputs, without autocast."""

    @property
    def dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.precision.startswith("bf16") else torch.float16


class MixedPrecisionBase(PrecisionBase):
    """torch.autocast, with a gradient scaler for '16-mixed' on devices that need one."""

    wraps_forward = True

    def __init__(
        self, precision: str | None = None, *, device_type: str | None = None, scaler: Any = None
    ) -> None:
        super().__init__(precision, device_type=device_type)
        self.scaler = scaler

    @property
    def dtype(self) -> torch.dtype:
        """The dtype autocast runs in: bfloat16 for 'bf16-mixed', else float16."""
        return torch.bfloat16 if self.precision.startswith("bf16") else torch.float16

    def connect(self, device: torch.device, needs_grad_scaler: bool) -> None:
        super().connect(device, needs_grad_scaler)
        if (
            self.scaler is None
            and self.precision == "16-mixed"
            and needs_grad_scaler
            and self.grad_scaler
        ):
            self.scaler = make_grad_scaler(import_object(self.grad_scaler), device)

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        return torch.autocast(self.device_type or "cpu", dtype=self.dtype)

    def convert_output(self, data: Any) -> Any:
        return apply_to_tensors(data, _cast_floating(torch.get_default_dtype()))

    def pre_backward(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.scaler.scale(tensor) if self.scaler is not None else tensor

    def optimizer_step(self, optimizer: Optimizer, **kwargs: Any) -> Any:
        if self.scaler is None:
            return optimizer.step(**kwargs)
        result = self.scaler.step(optimizer, **kwargs)
        self.scaler.update()
        return result

    def unscale_gradients(self, optimizer: Optimizer) -> None:
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def state_dict(self) -> dict[str, Any]:
        return {"scaler": self.scaler.state_dict()} if self.scaler is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.scaler is not None and "scaler" in state_dict:
            self.scaler.load_state_dict(state_dict["scaler"])


class ApexPrecisionBase(PrecisionBase):
    """NVIDIA Apex's amp, which is retired upstream."""

    def __init__(self, precision: str | None = None, **kwargs: Any) -> None:
        raise MisconfigurationError(
            "Apex mixed precision is retired upstream (NVIDIA recommends torch.autocast); "
            "use precision='16-mixed', which gives the same float16 training with torch.autocast "
            "and a GradScaler"
        )
