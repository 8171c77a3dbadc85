"""Which DeepSpeed accelerator a DeepSpeed strategy trains on, for its device.

DeepSpeed's own class, selected by ``DS_ACCELERATOR``, where the device has one; else, where
the accelerator says ``deepspeed_generated``, the DeepSpeed accelerator generated from its spec:
the deepspeed target's class (``<package>.deepspeed``), or, in a package generated without that
target, the same class made here from the accelerator's facts.
"""

from __future__ import annotations

import importlib
import os
from typing import cast

from stratcore.accelerator import Accelerator
from stratcore.contract import deepspeed_accelerator_name

from .accelerator.base import DeepSpeedAcceleratorBase
from .accelerator.install import GENERATED
from .config import DS_ACCELERATOR_ENV

__all__ = ["generated_class", "select_for"]


def generated_class(accelerator: type[Accelerator]) -> type[DeepSpeedAcceleratorBase]:
    """The DeepSpeed accelerator generated for ``accelerator``: the deepspeed target's class
    (``<package>.deepspeed``, imported here), else one made here the same way, on the facts of
    ``accelerator`` (a subclass of an accelerator gets a subclass of its class)."""
    from stratcore.registry import registry_of

    if accelerator not in GENERATED:
        package = registry_of(accelerator).package
        try:
            importlib.import_module(f"{package}.deepspeed")
        except ModuleNotFoundError as exc:
            if exc.name != f"{package}.deepspeed":
                raise
    if accelerator not in GENERATED:
        base = next((GENERATED[k] for k in accelerator.__mro__ if k in GENERATED), None)
        name = deepspeed_accelerator_name(accelerator.__name__)
        namespace = {"spec": accelerator, "__module__": accelerator.__module__}
        type(name, (base or DeepSpeedAcceleratorBase,), namespace)  # it registers itself
    # Every class in GENERATED is a DeepSpeedAcceleratorBase: each registers itself there.
    return cast("type[DeepSpeedAcceleratorBase]", GENERATED[accelerator])


def select_for(accelerator: type[Accelerator]) -> str:
    """Make DeepSpeed train on the class for ``accelerator``'s devices: the generated DeepSpeed
    accelerator where its spec says so (``deepspeed_generated``; installed, before DeepSpeed
    is imported where it is not yet), else DeepSpeed's own class, selected by DS_ACCELERATOR
    (read when DeepSpeed is first imported; processes started afterwards inherit it; a value
    the user set is kept). Returns what selects it, for error messages."""
    if accelerator.deepspeed_generated:
        generated = generated_class(accelerator)
        generated.install()
        return f"{generated.__module__}.{generated.__name__}.install()"
    name = accelerator.deepspeed_accelerator or accelerator.device_type
    os.environ.setdefault(DS_ACCELERATOR_ENV, name)
    return f"{DS_ACCELERATOR_ENV}={name}"
