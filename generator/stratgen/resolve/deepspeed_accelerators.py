"""Which DeepSpeed accelerator a device's DeepSpeed strategies train on.

DeepSpeed has accelerator classes of its own for some device types; a device without one
trains on the accelerator the deepspeed target generates from its spec (or that the runtime
makes from the same facts where the project does not generate it). The spec may say which
(``deepspeed_accelerator``, ``deepspeed_generated``); what it leaves out is decided here, where
the checks of device specs (``device_checks``), the stratlib target (the accelerator's
``deepspeed_generated`` fact), the deepspeed target and the docs target read it.
"""

from __future__ import annotations

from ..spec.model import AcceleratorSpec

#: DeepSpeed's own accelerator classes, by the DS_ACCELERATOR names that select them
#: (deepspeed 0.19.8, deepspeed/accelerator/real_accelerator.py: SUPPORTED_ACCELERATOR_LIST;
#: tests/generator/targets/test_deepspeed.py compares it with the installed DeepSpeed).
DEEPSPEED_ACCELERATORS = ("cuda", "cpu", "xpu", "npu", "mps", "hpu", "mlu", "sdaa", "supa", "klxpu")


def deepspeed_generated(spec: AcceleratorSpec) -> bool:
    """Whether the device's DeepSpeed strategies train on the generated DeepSpeed accelerator:
    where the spec says so, and by default where DeepSpeed has no class of its own for it
    (no ``deepspeed_accelerator``, and a device type that is none of DeepSpeed's names or is
    found only at run time)."""
    if spec.deepspeed_generated is not None:
        return spec.deepspeed_generated
    return spec.deepspeed_accelerator is None and spec.device_type not in DEEPSPEED_ACCELERATORS
