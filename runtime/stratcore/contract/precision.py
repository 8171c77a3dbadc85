"""Precisions: the names a spec and a user may give, their aliases, the runtime class of each
precision kind, and how a precision plugin is chosen among several that serve a precision.

Importing this module must not import torch: the generator imports it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, get_args

from .value_types import RuntimeClass

PrecisionName = Literal[
    "64-true",
    "32-true",
    "16-mixed",
    "bf16-mixed",
    "16-true",
    "bf16-true",
    "transformer-engine",
    "transformer-engine-float16",
]
PRECISIONS: tuple[str, ...] = get_args(PrecisionName)
#: The precision of an accelerator (and so of its strategies) whose spec names no default.
DEFAULT_PRECISION = "32-true"

#: What users may type for a precision, and the canonical name it stands for.
PRECISION_ALIASES: dict[str, str] = {
    "64": "64-true",
    "32": "32-true",
    "16": "16-mixed",
    "bf16": "bf16-mixed",
    "double": "64-true",
    "half": "16-true",
}

#: The root of every precision plugin class.
PRECISION_ROOT: RuntimeClass = ("stratcore.precision.base", "PrecisionBase")

#: Precision kind -> the runtime class that implements it.
PRECISION_KINDS: dict[str, RuntimeClass] = {
    "precision": PRECISION_ROOT,
    "double": ("stratcore.precision.base", "DoublePrecisionBase"),
    "mixed": ("stratcore.precision.base", "MixedPrecisionBase"),
    "half": ("stratcore.precision.base", "HalfPrecisionBase"),
    "deepspeed": ("stratcore.wrappers.deepspeed.precision", "DeepSpeedPrecisionBase"),
    "fsdp_mixed": ("stratcore.wrappers.fsdp.strategy", "FSDPPrecisionBase"),
    "xla": ("stratcore.wrappers.xla", "XLAPrecisionBase"),
    "ipu": ("stratcore.wrappers.poptorch", "IPUPrecisionBase"),
    "apex": ("stratcore.precision.base", "ApexPrecisionBase"),
    "transformer_engine": (
        "stratcore.precision.transformer_engine",
        "TransformerEnginePrecisionBase",
    ),
}


def specificity(wrappers: Iterable[str], accelerators: Iterable[str]) -> int:
    """How specific a precision plugin is: one made for a wrapper (2) beats one made for an
    accelerator (1), which beats a general one (0)."""
    return 2 * bool(tuple(wrappers)) + bool(tuple(accelerators))


def plugin_score(
    mode: str,
    wrapper: str,
    accelerator: str,
    modes: Iterable[str],
    wrappers: Iterable[str],
    accelerators: Iterable[str],
) -> int | None:
    """How well a precision plugin fits: None if it does not serve ``mode`` for this wrapper
    on this accelerator; else its ``specificity``."""
    wrappers, accelerators = tuple(wrappers), tuple(accelerators)
    if mode not in tuple(modes):
        return None
    if wrappers and wrapper not in wrappers:
        return None
    if accelerators and accelerator not in accelerators:
        return None
    return specificity(wrappers, accelerators)


def best_plugin(plugins: Iterable[Any], mode: str, wrapper: str, accelerator: str) -> Any | None:
    """The first of the most specific ``plugins`` (each with ``modes``, ``wrappers`` and
    ``accelerators``) serving ``mode`` for ``wrapper`` on ``accelerator``; None if none does."""
    best: Any | None = None
    best_score = -1
    for plugin in plugins:
        score = plugin_score(
            mode, wrapper, accelerator, plugin.modes, plugin.wrappers, plugin.accelerators
        )
        if score is not None and score > best_score:
            best, best_score = plugin, score
    return best
