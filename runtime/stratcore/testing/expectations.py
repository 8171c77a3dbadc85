"""What a generated test expects of its strategy class: where it can run, in which precisions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from ..contract import REDUCE_OPS
from ..exceptions import MisconfigurationError
from ..registry import registry_of
from .devices import devices_refused

if TYPE_CHECKING:
    from ..accelerator import Accelerator
    from ..precision.base import PrecisionBase
    from ..strategy import StrategyBase

# --- assertions for generated tests ------------------------------------------------------------


def runnable_accelerator(cls: type[StrategyBase], devices: int = 1) -> str:
    """The first accelerator ``cls`` supports that is present here with ``devices`` devices (a
    job of that many processes); else the first present with fewer, where the job cannot run
    (``unavailable_reason`` says why); 'cpu' if none is present."""
    accelerators = registry_of(cls).accelerators
    present = [
        str(name)
        for name in cls.accelerators or tuple(accelerators)
        if name in accelerators and accelerators[name].is_available()
    ]
    for name in present:
        if devices_refused(accelerators[name], devices) is None:
            return name
    return present[0] if present else "cpu"


def unavailable_reason(
    cls: type[StrategyBase], accelerator: str | None = None, devices: int = 1
) -> str | None:
    """Why ``cls`` cannot run a job of ``devices`` processes (on ``accelerator``, by default
    the one ``runnable_accelerator`` chooses) here, or None if it can."""
    accelerator = accelerator or runnable_accelerator(cls, devices)

    missing = [r for r in cls.requires if not r.available]
    if missing:
        return missing[0].message(cls.__name__)
    backend = cls.backend
    if backend is not None:
        absent = [r for r in backend.requires if not r.available]
        if absent:
            return absent[0].message(f"backend {backend.name!r}")
    supported = cls.accelerators
    if supported and accelerator not in supported:
        return f"{cls.__name__} does not run on {accelerator!r} (it runs on {', '.join(supported)})"
    accelerator_cls = registry_of(cls).accelerators.get(accelerator)
    if accelerator_cls is None or not accelerator_cls.is_available():
        return f"no {accelerator} device on this machine"
    return devices_refused(accelerator_cls, devices)


def unavailable_plugin_reason(cls: type[PrecisionBase]) -> str | None:
    """Why a precision plugin cannot run here (a missing package), or None."""
    missing = [r for r in cls.requires if not r.available]
    return missing[0].message(cls.__name__) if missing else None


def precision_variant(cls: type[StrategyBase], accelerator: str) -> str | None:
    """A precision other than the default that ``cls`` runs with on ``accelerator``, to train
    with in a test: '64-true' where possible (it can be compared exactly), else a mixed one."""
    registry = registry_of(cls)
    accelerator_cls = registry.accelerators.get(accelerator)
    if accelerator_cls is None:
        return None
    default = cls.default_precision or accelerator_cls.default_precision
    for mode in ("64-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true"):
        if mode == default or mode not in cls.supported_precisions:
            continue
        if mode not in accelerator_cls.supported_precisions:
            continue
        if cls.precision_refused(mode, accelerator_cls) is not None:
            continue
        try:
            registry.precision_plugin_class(cls, accelerator_cls, mode)
        except MisconfigurationError:
            continue
        return mode
    return None


@dataclass(frozen=True)
class Expectation:
    """What a strategy's spec says it does on one accelerator, for its generated tests.

    Attributes:
        default_precision: The precision it runs in when none is asked for.
        precisions: Every precision it accepts on this accelerator.
        devices: Processes (devices) its real-run tests start.
        backend: The collective backend of its process group (None for one process).
        reduce_ops: Reductions the backend performs natively ('mean' is emulated otherwise).
        casts: Tensor dtypes the backend reduces in another dtype, and that dtype.
        step_hooks: Functions (import paths) called after backward / optimizer step.
        backend_from_device_map: Whether the backend is the one torch maps the device type to
            (then ``backend`` is the spec's name for it, not the process group's).
        probes: Precisions the device runs only where a function (import path) says so.
    """

    default_precision: str
    precisions: tuple[str, ...]
    devices: int = 1
    backend: str | None = None
    reduce_ops: tuple[str, ...] = REDUCE_OPS
    casts: dict[str, str] = field(default_factory=dict)
    step_hooks: dict[str, str] = field(default_factory=dict)
    backend_from_device_map: bool = False
    probes: dict[str, str] = field(default_factory=dict)


def runnable_or_skip(cls: type[StrategyBase], devices: int = 1) -> str:
    """The accelerator ``cls`` runs a job of ``devices`` processes on here; skips the calling
    pytest test where it cannot run.

    Called inside tests, so that nothing is probed while pytest collects them.
    """
    import pytest

    accelerator = runnable_accelerator(cls, devices)
    reason = unavailable_reason(cls, accelerator, devices)
    if reason is not None:
        pytest.skip(reason)
    return accelerator


def available_or_skip(accelerator: type[Accelerator]) -> None:
    """Skip the calling pytest test unless the accelerator is present here."""
    import pytest

    if not accelerator.is_available():
        pytest.skip(f"no {accelerator.name} device on this machine")


def expectation_for(expected: dict[str, Expectation], accelerator: str) -> Expectation:
    """What a table row expects of a strategy on ``accelerator``."""
    assert (
        accelerator in expected
    ), f"the spec says nothing of {accelerator!r}; it declares {', '.join(expected)}"
    return expected[accelerator]


#: How far training in each precision may drift from the reference at that precision after a
#: few steps: data-parallel training sums its gradients in another order than one process.
PRECISION_TOLERANCE = {
    "64-true": 1e-10,
    "32-true": 1e-5,
    "16-mixed": 5e-3,
    "bf16-mixed": 1e-2,
    "16-true": 1e-2,
    "bf16-true": 5e-2,
}
_TRUE_DTYPES = {
    "64-true": torch.float64,
    "16-true": torch.float16,
    "bf16-true": torch.bfloat16,
}


def precision_tolerance(precision: str) -> float:
    """How far training in ``precision`` may end from training in float32."""
    return PRECISION_TOLERANCE[precision]


def reference_dtype(precision: str) -> torch.dtype:
    """The dtype the single-process reference trains in for ``precision``: the parameters'
    dtype under a '-true' precision, float32 otherwise."""
    return _TRUE_DTYPES.get(precision, torch.float32)
