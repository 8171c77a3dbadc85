"""Lightning's precision plugins for stratcore precision names and strategy kinds.

stratcore names precisions as Lightning does ('32-true', 'bf16-mixed', ...) and groups its
plugins by kind (plain, double, mixed, half, FSDP, DeepSpeed, XLA, Transformer Engine). This
module maps both onto Lightning's classes, for ``lightning.pytorch`` and ``lightning.fabric``
alike, choosing as Lightning's own connectors do: the strategy's wrapper first (XLA, DeepSpeed
and FSDP have their own plugin for every precision), then the precision.
"""

from __future__ import annotations

import warnings
from typing import Any, Literal

from . import check_lightning_version

check_lightning_version()

import torch  # noqa: E402

from ..exceptions import MisconfigurationError  # noqa: E402
from ..precision.base import canonical_precision  # noqa: E402

__all__ = [
    "KIND_CLASSES",
    "WRAPPER_KINDS",
    "build_precision",
    "lightning_precision_class",
    "precision_kind",
]

Flavour = Literal["pytorch", "fabric"]

#: stratcore plugin kind -> the name of Lightning's class (the same in both flavours).
KIND_CLASSES = {
    "precision": "Precision",
    "double": "DoublePrecision",
    "mixed": "MixedPrecision",
    "half": "HalfPrecision",
    "fsdp": "FSDPPrecision",
    "deepspeed": "DeepSpeedPrecision",
    "xla": "XLAPrecision",
    "transformer_engine": "TransformerEnginePrecision",
}
#: stratcore strategy wrappers whose Lightning strategies have a plugin of their own.
WRAPPER_KINDS = {
    "xla": "xla",
    "xla_fsdp": "xla",
    "deepspeed": "deepspeed",
    "fsdp": "fsdp",
    "fairscale_fsdp": "fsdp",
}
_BY_PRECISION = {
    "64-true": "double",
    "32-true": "precision",
    "16-mixed": "mixed",
    "bf16-mixed": "mixed",
    "16-true": "half",
    "bf16-true": "half",
    "transformer-engine": "transformer_engine",
    "transformer-engine-float16": "transformer_engine",
}
APEX_MESSAGE = (
    "precision={value!r}: NVIDIA apex AMP is not part of Lightning 2.x; use precision='16-mixed' "
    "(torch.amp) instead"
)


def _canonical(precision: Any) -> str:
    text = str(precision).strip().lower()
    if text.startswith("apex") or text in ("o1", "o2"):
        raise MisconfigurationError(APEX_MESSAGE.format(value=precision))
    return canonical_precision(precision)


def precision_kind(precision: Any, wrapper: str = "none") -> str:
    """The stratcore plugin kind serving ``precision`` under a strategy with ``wrapper``."""
    name = _canonical(precision)
    return WRAPPER_KINDS.get(wrapper) or _BY_PRECISION[name]


def lightning_precision_class(kind: str, flavour: Flavour = "pytorch") -> type:
    """Lightning's precision class for a stratcore plugin kind."""
    try:
        class_name = KIND_CLASSES[kind]
    except KeyError:
        raise MisconfigurationError(
            f"precision kind {kind!r} has no Lightning plugin; known kinds: {', '.join(KIND_CLASSES)}"
        ) from None
    if flavour == "pytorch":
        import lightning.pytorch.plugins.precision as module
    elif flavour == "fabric":
        import lightning.fabric.plugins.precision as module  # type: ignore[no-redef]
    else:
        raise MisconfigurationError(f"flavour={flavour!r}: use 'pytorch' or 'fabric'")
    cls: type = getattr(module, class_name)
    return cls


def build_precision(
    precision: Any,
    wrapper: str = "none",
    flavour: Flavour = "pytorch",
    device_type: str = "cpu",
) -> Any:
    """Lightning's precision plugin for ``precision`` under a strategy with ``wrapper``.

    ``device_type`` is the accelerator's torch device type, which mixed precision autocasts
    on. As Lightning's connectors do, '16-mixed' on the CPU becomes 'bf16-mixed' (with a
    warning): float16 autocast is not supported there.
    """
    name = _canonical(precision)
    kind = precision_kind(name, wrapper)
    cls = lightning_precision_class(kind, flavour)
    if kind in ("xla", "deepspeed", "fsdp", "half"):
        return cls(name)
    if kind in ("precision", "double"):
        return cls()
    if kind == "transformer_engine":
        dtype = torch.float16 if name == "transformer-engine-float16" else torch.bfloat16
        return cls(weights_dtype=dtype)
    if name == "16-mixed" and device_type == "cpu":
        warnings.warn(
            "precision='16-mixed' (float16 autocast) is not supported on the CPU; using "
            "'bf16-mixed' instead",
            stacklevel=2,
        )
        name = "bf16-mixed"
    return cls(name, device=device_type)
