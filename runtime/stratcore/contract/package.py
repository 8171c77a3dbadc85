"""What a generated package is built on: the runtime root class of each family of generated
classes, the runtime names a package exports and its registry imports, and the value types its
modules construct.

Importing this module must not import torch: the generator imports it.
"""

from __future__ import annotations

from .value_types import RuntimeClass

#: The root classes of generated classes, one per family.
STRATEGY_ROOT: RuntimeClass = ("stratcore.strategy", "StrategyBase")
ENVIRONMENT_ROOT: RuntimeClass = ("stratcore.environment", "ClusterEnvironmentBase")
ACCELERATOR_ROOT: RuntimeClass = ("stratcore.accelerator", "Accelerator")
#: The base of the DeepSpeed accelerators the deepspeed target generates.
DEEPSPEED_ACCELERATOR_ROOT: RuntimeClass = (
    "stratcore.wrappers.deepspeed.accelerator.base",
    "DeepSpeedAcceleratorBase",
)
LAUNCHER_ROOT: RuntimeClass = ("stratcore.launchers", "Launcher")


def deepspeed_accelerator_name(accelerator: str) -> str:
    """An accelerator class's DeepSpeed accelerator: AcmeAccelerator -> AcmeDeepSpeedAccelerator."""
    return accelerator.removesuffix("Accelerator") + "DeepSpeedAccelerator"


#: Runtime names a generated package exports next to its generated classes.
PACKAGE_EXPORTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("stratcore.accelerator", ("Accelerator",)),
    ("stratcore.checkpoints.io", ("AsyncCheckpointIO", "CheckpointIO", "TorchCheckpointIO")),
    ("stratcore.environment", ("ClusterEnvironmentBase",)),
    (
        "stratcore.exceptions",
        ("MisconfigurationError", "MissingDependencyError", "ProcessFailedError"),
    ),
    ("stratcore.layer_sync", ("LayerSync", "TorchSyncBatchNorm")),
    ("stratcore.precision.base", ("PrecisionBase",)),
    ("stratcore.strategy", ("StrategyBase",)),
)

#: Runtime names a generated package's registry module imports.
REGISTRY_IMPORTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("stratcore.factory", ("StrategyFactory",)),
    ("stratcore.registry", ("Registry", "StrategyEntry", "register")),
)

#: Runtime names a generated package's ``ray`` module imports (Ray Train for its strategies).
RAY_IMPORTS: tuple[tuple[str, tuple[str, ...]], ...] = (("stratcore.ray", ("RayTrain",)),)

#: The runtime's value types generated modules construct, by their module.
VALUE_TYPES: dict[str, RuntimeClass] = {
    "Condition": ("stratcore.contract", "Condition"),
    "ValueSource": ("stratcore.contract", "ValueSource"),
    "Requirement": ("stratcore.imports", "Requirement"),
    "CollectiveBackend": ("stratcore.collectives", "CollectiveBackend"),
}
