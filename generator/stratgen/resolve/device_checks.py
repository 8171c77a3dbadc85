"""Checks on what specs say of devices: how an accelerator finds its device type, which
precisions it runs only where a probe allows, and how a backend is named and registered.

Like ``checks``, every check reports into a ``Problems`` list instead of raising.
"""

from __future__ import annotations

from dataclasses import replace

from stratcore.wording import did_you_mean

from ..spec.errors import one_of
from ..spec.model import AcceleratorSpec, Backend, PrecisionDefaults
from .checks import Problems, field_loc
from .deepspeed_accelerators import DEEPSPEED_ACCELERATORS, deepspeed_generated


def check_accelerator(
    problems: Problems, spec: AcceleratorSpec, supported: tuple[str, ...]
) -> None:
    """What an accelerator says of its device type and its probed precisions."""
    check_device_type(problems, spec)
    check_deepspeed_accelerator(problems, spec)
    precision = spec.precision
    check_precision_probes(
        problems, precision, "accelerator.precision", precision.default, supported
    )


def check_device_type(problems: Problems, spec: AcceleratorSpec) -> None:
    """An accelerator has a device type, or a function that finds it at run time; not both."""
    if spec.device_type is None and spec.current_device is None:
        problems.add(
            spec.loc,
            "accelerator.device_type",
            f"accelerator {spec.name!r} needs 'device_type' (e.g. 'cuda'), or 'current_device' "
            "for one whose device is found at run time",
        )
    elif spec.device_type is not None and spec.current_device is not None:
        problems.add(
            field_loc(spec, "current_device"),
            "accelerator.current_device",
            f"accelerator {spec.name!r} has device_type {spec.device_type!r}; 'current_device' "
            "is for an accelerator without one, whose device type is found at run time",
        )


def check_deepspeed_accelerator(problems: Problems, spec: AcceleratorSpec) -> None:
    """``deepspeed_accelerator`` names one of DeepSpeed's classes; a device DeepSpeed has no
    class for trains on the generated one."""
    name = spec.deepspeed_accelerator
    if name is not None and name not in DEEPSPEED_ACCELERATORS:
        problems.add(
            field_loc(spec, "deepspeed_accelerator"),
            "accelerator.deepspeed_accelerator",
            f"DeepSpeed has no accelerator {name!r}{did_you_mean(name, DEEPSPEED_ACCELERATORS)}; "
            f"its accelerators: {', '.join(DEEPSPEED_ACCELERATORS)}. Omit the key for a device "
            "DeepSpeed has no class for: it trains on the generated one",
        )
    elif spec.deepspeed_generated is False and deepspeed_generated(
        replace(spec, deepspeed_generated=None)
    ):
        problems.add(
            field_loc(spec, "deepspeed_generated"),
            "accelerator.deepspeed_generated",
            f"DeepSpeed has no class of its own for device type {spec.device_type!r}, so its "
            "strategies need the generated one; give 'deepspeed_accelerator' or drop "
            "'deepspeed_generated: false'",
        )


def check_precision_probes(
    problems: Problems,
    precision: PrecisionDefaults,
    path: str,
    default: str | None,
    supported: tuple[str, ...],
) -> None:
    """Probed precisions are supported ones, and the default never depends on a probe."""
    for mode in precision.probes or {}:
        loc = field_loc(precision, "probes", f"probes.{mode}")
        if mode not in supported:
            problems.add(
                loc,
                f"{path}.probes.{mode}",
                f"probes {mode!r}, which is not among the supported precisions: "
                f"{one_of(supported)}; a probe can only withdraw a supported precision",
            )
        elif mode == default:
            problems.add(
                loc,
                f"{path}.probes.{mode}",
                f"the default precision {mode!r} depends on a probe, so the device might refuse "
                "its own default; choose a default every such device runs",
            )


def check_no_probes(problems: Problems, precision: PrecisionDefaults | None, path: str) -> None:
    """Probes describe a device: a strategy may not declare them."""
    if precision is not None and precision.probes:
        problems.add(
            field_loc(precision, "probes"),
            f"{path}.probes",
            "precision probes say what a device can run; declare them in the accelerator's "
            "'precision', not a strategy's",
        )


def check_backend_naming(problems: Problems, backend: Backend, path: str) -> None:
    """A backend taken from torch's device map has no fixed torch name."""
    if backend.from_device_map and backend.torch_name is not None:
        problems.add(
            field_loc(backend, "torch_name"),
            f"{path}.torch_name",
            f"backend {backend.name!r} is taken from torch's device map (from_device_map), so "
            "torch names it at run time; drop 'torch_name' or 'from_device_map'",
        )
