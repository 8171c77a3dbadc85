"""What DeepSpeed holds of process groups, let go of when the runtime releases them.

Importing this module registers both with ``stratcore.process_group``: ``forget_models`` (the
models, and so the engines and their groups, that DeepSpeed's ZeRO stage 3 keeps) and
``destroy_process_group`` (DeepSpeed keeps groups of its own, its world group among them, and its
``destroy_process_group`` destroys torch's groups and lets go of those). Nothing of DeepSpeed is
imported here: each looks for DeepSpeed's modules among those already imported.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from stratcore import process_group


@process_group.on_release
def forget_models(module: Any = None) -> None:
    """Let go of what DeepSpeed's ZeRO stage 3 keeps of ``module`` (of every model without
    one), where DeepSpeed is imported.

    A stage-3 engine puts its model on a list of DeepSpeed's (``FWD_MODULE_STACK``) when it is
    set up, and its parameter coordinator remembers itself in a cache of its class's; neither
    lets go, not in ``engine.destroy()`` either, so the model, its engine and the engine's
    process groups would live as long as the process. The cache only saves recomputing which
    parameters to release after each module: it is emptied for every engine.
    """
    offload = sys.modules.get("deepspeed.runtime.zero.parameter_offload")
    stack = getattr(offload, "FWD_MODULE_STACK", None)
    if isinstance(stack, list):
        stack[:] = [] if module is None else [held for held in stack if held is not module]
    coordinator = sys.modules.get("deepspeed.runtime.zero.partitioned_param_coordinator")
    coordinator_class = getattr(coordinator, "PartitionedParameterCoordinator", None)
    method = getattr(coordinator_class, "_PartitionedParameterCoordinator__params_to_release", None)
    # The cached function is wrapped in DeepSpeed's profiling decorator: its closure holds it.
    for cell in getattr(method, "__closure__", None) or ():
        with contextlib.suppress(ValueError):  # an empty cell
            clear = getattr(cell.cell_contents, "cache_clear", None)
            if callable(clear):
                clear()


@process_group.destroy_with
def destroy_process_group() -> bool:
    """Destroy the default group with DeepSpeed's ``destroy_process_group`` where DeepSpeed's
    communication layer is set up; False where it is not."""
    deepspeed_comm = sys.modules.get("deepspeed.comm.comm")
    if getattr(deepspeed_comm, "cdb", None) is None:
        return False
    deepspeed_comm.destroy_process_group()  # type: ignore[union-attr]
    return True
