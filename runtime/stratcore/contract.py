"""The contract between the spec language and the runtime, in one place.

Every vocabulary a spec may use (wrappers, launchers, precisions, reduce ops, dtypes, value
parsers and fallbacks, precision kinds, option types, strategy bases), the runtime class each
name stands for, the constructor arguments the runtime takes, and (from ``stratcore.values``)
the small value types both sides share (``Condition``, ``ValueSource``, ``Requirement``). The
generator derives its model, JSON Schema and spec reference from these tables, the runtime
imports the shared types and the precision-plugin scoring, and ``tests/test_contract.py`` checks
that every name has an implementation in the runtime and every implementation a name.

Importing this module must not import torch: the generator imports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, get_args

from .values import (
    VALUE_FALLBACKS as VALUE_FALLBACKS,
)
from .values import (
    VALUE_PARSERS as VALUE_PARSERS,
)
from .values import (
    Condition as Condition,
)
from .values import (
    EnvVar as EnvVar,
)
from .values import (
    LauncherOption as LauncherOption,
)
from .values import (
    ModulePath as ModulePath,
)
from .values import (
    Pattern as Pattern,
)
from .values import (
    Requirement as Requirement,
)
from .values import (
    ValueFallback as ValueFallback,
)
from .values import (
    ValueParser as ValueParser,
)
from .values import (
    ValueSource as ValueSource,
)
from .values import (
    module_available as module_available,
)

#: A runtime class, named by its module and class name, e.g. ('stratcore.wrappers.ddp', 'DDPStrategyBase').
Ref = tuple[str, str]

# --- plain vocabularies ------------------------------------------------------------------------

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

ReduceOp = Literal["sum", "product", "min", "max", "mean"]
REDUCE_OPS: tuple[str, ...] = get_args(ReduceOp)

#: Tensor dtypes a backend may cast, by their name in ``torch``.
DType = Literal[
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
]
DTYPES: tuple[str, ...] = get_args(DType)

#: Types an option of a strategy may have.
OptionType = Literal["bool", "int", "float", "str", "path", "mapping", "sequence", "any"]
OPTION_TYPES: tuple[str, ...] = get_args(OptionType)

#: The Python types a spec literal of each option type may have.
OPTION_PYTYPES: dict[str, tuple[type, ...]] = {
    "bool": (bool,),
    "int": (int,),
    "float": (int, float),
    "str": (str,),
    "path": (str,),
    "mapping": (dict,),
    "sequence": (list, tuple),
    "any": (object,),
}


def value_fits(value: Any, types: Iterable[str]) -> bool:
    """Whether a literal from a spec has one of the option types (a bool is no number)."""
    for t in types:
        if isinstance(value, bool) and t in ("int", "float"):
            continue
        if isinstance(value, OPTION_PYTYPES[t]):
            return True
    return False


# --- strategies ----------------------------------------------------------------------------------

#: The root classes of generated classes, one per family.
STRATEGY_ROOT: Ref = ("stratcore.strategy", "StrategyBase")
PRECISION_ROOT: Ref = ("stratcore.precision", "PrecisionBase")
ENVIRONMENT_ROOT: Ref = ("stratcore.environment", "ClusterEnvironmentBase")
ACCELERATOR_ROOT: Ref = ("stratcore.accelerator", "Accelerator")
#: The base of the DeepSpeed accelerators the deepspeed target generates.
DEEPSPEED_ACCELERATOR_ROOT: Ref = (
    "stratcore.wrappers.deepspeed_accelerator",
    "DeepSpeedAcceleratorBase",
)
LAUNCHER_ROOT: Ref = ("stratcore.launchers", "Launcher")


def deepspeed_accelerator_name(accelerator: str) -> str:
    """An accelerator class's DeepSpeed accelerator: AcmeAccelerator -> AcmeDeepSpeedAccelerator."""
    return accelerator.removesuffix("Accelerator") + "DeepSpeedAccelerator"


#: Runtime names a generated package exports next to its generated classes.
PACKAGE_EXPORTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("stratcore.accelerator", ("Accelerator",)),
    ("stratcore.checkpoint_io", ("AsyncCheckpointIO", "CheckpointIO", "TorchCheckpointIO")),
    ("stratcore.environment", ("ClusterEnvironmentBase",)),
    (
        "stratcore.exceptions",
        ("MisconfigurationError", "MissingDependencyError", "ProcessFailedError"),
    ),
    ("stratcore.layer_sync", ("LayerSync", "TorchSyncBatchNorm")),
    ("stratcore.precision", ("PrecisionBase",)),
    ("stratcore.strategy", ("StrategyBase",)),
)

#: Runtime names a generated package's registry module imports.
REGISTRY_IMPORTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("stratcore.factory", ("StrategyFactory",)),
    ("stratcore.registry", ("Registry", "StrategyEntry", "register")),
)

#: The runtime's value types generated modules construct, by their module.
VALUE_TYPES: dict[str, Ref] = {
    "Condition": ("stratcore.contract", "Condition"),
    "ValueSource": ("stratcore.contract", "ValueSource"),
    "Requirement": ("stratcore.imports", "Requirement"),
    "CollectiveBackend": ("stratcore.collectives", "CollectiveBackend"),
}

#: Strategy base kind -> the runtime class a strategy of that kind derives from.
BASES: dict[str, Ref] = {
    "strategy": STRATEGY_ROOT,
    "single_device": ("stratcore.single_device", "SingleDeviceStrategyBase"),
    "parallel": ("stratcore.parallel", "ParallelStrategyBase"),
}
#: The base kind of the root strategy spec, from which every other strategy derives.
ROOT_BASE = "strategy"
#: The kinds a strategy spec chooses from (the root's belongs to the root spec alone).
STRATEGY_KINDS: tuple[str, ...] = tuple(kind for kind in BASES if kind != ROOT_BASE)

#: Options every parallel strategy's runtime base reads, with their types.
PARALLEL_OPTIONS: dict[str, tuple[str, ...]] = {
    "timeout": ("float", "int"),
    "process_group_backend": ("str",),
    "start_method": ("str",),
}


@dataclass(frozen=True)
class WrapperEntry:
    """How the model is wrapped: the runtime base class (None for no wrapper), the strategy
    bases it works with, and the options the runtime class reads with their types."""

    base: Ref | None
    bases: frozenset[str]
    options: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


_DDP_OPTIONS = {
    "find_unused_parameters": ("bool",),
    "static_graph": ("bool",),
    "gradient_as_bucket_view": ("bool",),
    "bucket_cap_mb": ("float", "int"),
    "broadcast_buffers": ("bool",),
}
_XLA_OPTIONS = {"sync_module_states": ("bool",), "debug": ("bool",)}
_PARALLEL = frozenset({"parallel"})

WRAPPERS: dict[str, WrapperEntry] = {
    "none": WrapperEntry(None, frozenset(BASES)),
    "dp": WrapperEntry(("stratcore.wrappers.dp", "DataParallelStrategyBase"), _PARALLEL),
    "ddp": WrapperEntry(("stratcore.wrappers.ddp", "DDPStrategyBase"), _PARALLEL, _DDP_OPTIONS),
    "ddp2": WrapperEntry(("stratcore.wrappers.ddp", "DDP2StrategyBase"), _PARALLEL, _DDP_OPTIONS),
    "fsdp": WrapperEntry(
        ("stratcore.wrappers.fsdp", "FSDPStrategyBase"),
        _PARALLEL,
        {
            "auto_wrap_min_params": ("int",),
            "auto_wrap_layers": ("sequence",),
            "cpu_offload": ("bool",),
            "reshard_after_forward": ("bool",),
            "state_dict_type": ("str",),
            "sharding_strategy": ("str",),
            "device_mesh": ("sequence",),
            "activation_checkpointing_policy": ("sequence",),
        },
    ),
    "model_parallel": WrapperEntry(
        ("stratcore.wrappers.model_parallel", "ModelParallelStrategyBase"),
        _PARALLEL,
        {
            "parallelize_fn": ("any",),
            "data_parallel_size": ("int", "str"),
            "tensor_parallel_size": ("int", "str"),
            "dp_replicate": ("int", "str"),
            "dp_shard": ("int", "str"),
            "tp": ("int",),
            "pp": ("int",),
            "cp": ("int",),
            "pipeline_fn": ("any",),
            "pipeline_split": ("sequence",),
            "pipeline_schedule": ("str",),
            "microbatches": ("int",),
            "save_distributed_checkpoint": ("bool",),
            "activation_checkpointing_policy": ("sequence",),
        },
    ),
    "fairscale_sharded": WrapperEntry(
        ("stratcore.wrappers.sharded", "ShardedStrategyBase"),
        _PARALLEL,
        {"reduce_buffer_size": ("int",), "broadcast_buffers": ("bool",)},
    ),
    "fairscale_fsdp": WrapperEntry(
        ("stratcore.wrappers.fairscale_fsdp", "FairscaleFSDPStrategyBase"),
        _PARALLEL,
        {
            "auto_wrap_min_params": ("int",),
            "cpu_offload": ("bool",),
            "reshard_after_forward": ("bool",),
        },
    ),
    "deepspeed": WrapperEntry(
        ("stratcore.wrappers.deepspeed", "DeepSpeedStrategyBase"),
        _PARALLEL,
        {
            "zero_stage": ("int",),
            "offload_optimizer": ("bool",),
            "offload_parameters": ("bool",),
            "offload_optimizer_device": ("str",),
            "offload_params_device": ("str",),
            "nvme_path": ("path",),
            "config": ("mapping", "path"),
            "logging_batch_size_per_gpu": ("int",),
            "state_dict_type": ("str",),
        },
    ),
    "horovod": WrapperEntry(
        ("stratcore.wrappers.horovod", "HorovodStrategyBase"),
        _PARALLEL,
        {"backward_passes_per_step": ("int",), "gradient_compression": ("str",)},
    ),
    "bagua": WrapperEntry(
        ("stratcore.wrappers.bagua", "BaguaStrategyBase"),
        _PARALLEL,
        {"algorithm": ("str",), "flatten": ("bool",), "algorithm_kwargs": ("mapping",)},
    ),
    "xla": WrapperEntry(
        ("stratcore.wrappers.xla", "XLAStrategyBase"),
        frozenset({"single_device", "parallel"}),
        _XLA_OPTIONS,
    ),
    "xla_fsdp": WrapperEntry(
        ("stratcore.wrappers.xla", "XLAFSDPStrategyBase"),
        frozenset({"single_device", "parallel"}),
        _XLA_OPTIONS,
    ),
    # One host process drives every IPU; PopTorch replicates the model inside its graph.
    "ipu": WrapperEntry(("stratcore.ipu", "IPUStrategyBase"), _PARALLEL),
}

#: How processes are started: launcher name -> runtime Launcher class.
LAUNCHERS: dict[str, Ref] = {
    "none": ("stratcore.launchers", "InlineLauncher"),
    "popen": ("stratcore.launchers", "PopenLauncher"),
    "spawn": ("stratcore.launchers", "SpawnLauncher"),
    "fork": ("stratcore.launchers", "ForkLauncher"),
    "forkserver": ("stratcore.launchers", "ForkServerLauncher"),
    "xla": ("stratcore.wrappers.xla", "XLALauncher"),
    "external": ("stratcore.launchers", "ExternalLauncher"),
    "horovodrun": ("stratcore.wrappers.horovod", "HorovodRunLauncher"),
}


#: Options each launcher reads from its strategy, by launcher name.
LAUNCHER_OPTIONS: dict[str, dict[str, LauncherOption]] = {
    "spawn": {
        "start_method": LauncherOption(
            ("str",),
            "spawn",
            ("spawn", "fork", "forkserver"),
            "How torch.multiprocessing starts the processes.",
        )
    },
    "xla": {
        "start_method": LauncherOption(
            ("str",),
            "fork",
            ("fork", "spawn"),
            "How torch_xla starts the processes; 'fork' also works from notebooks.",
        )
    },
}

#: Launchers that start a process per device (or, 'external', find them started) for any
#: wrapper: the rest run in the calling process ('none') or come with their engine.
GENERAL_LAUNCHERS: tuple[str, ...] = tuple(
    name for name, (module, _) in LAUNCHERS.items() if module == LAUNCHER_ROOT[0] and name != "none"
)


def core_read_options() -> frozenset[str]:
    """Options the runtime itself reads (a spec may declare them, with a matching type)."""
    return frozenset(PARALLEL_OPTIONS) | {o for w in WRAPPERS.values() for o in w.options}


# --- constructor plumbing ------------------------------------------------------------------------

#: Constructor arguments the runtime takes, by strategy base, in their order; options may not
#: reuse these names.
PLUMBING: dict[str, tuple[str, ...]] = {
    "strategy": ("accelerator", "checkpoint_io", "precision_plugin"),
    "single_device": ("device", "accelerator", "checkpoint_io", "precision_plugin"),
    "parallel": (
        "accelerator",
        "parallel_devices",
        "cluster_environment",
        "checkpoint_io",
        "precision_plugin",
        "num_nodes",
    ),
}

#: Names of every constructor argument of the runtime (``factory.strategy_options`` skips them).
PLUMBING_NAMES: frozenset[str] = frozenset(name for names in PLUMBING.values() for name in names)

# --- precision plugins ---------------------------------------------------------------------------

#: Precision kind -> the runtime class that implements it.
PRECISION_KINDS: dict[str, Ref] = {
    "precision": PRECISION_ROOT,
    "double": ("stratcore.precision", "DoublePrecisionBase"),
    "mixed": ("stratcore.precision", "MixedPrecisionBase"),
    "half": ("stratcore.precision", "HalfPrecisionBase"),
    "deepspeed": ("stratcore.wrappers.deepspeed_precision", "DeepSpeedPrecisionBase"),
    "fsdp_mixed": ("stratcore.wrappers.fsdp", "FSDPPrecisionBase"),
    "xla": ("stratcore.wrappers.xla", "XLAPrecisionBase"),
    "ipu": ("stratcore.ipu", "IPUPrecisionBase"),
    "apex": ("stratcore.precision", "ApexPrecisionBase"),
    "transformer_engine": ("stratcore.transformer_engine", "TransformerEnginePrecisionBase"),
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


#: The values every cluster environment provides, each from a ``ValueSource``.
ENVIRONMENT_VALUES = (
    "world_size",
    "global_rank",
    "local_rank",
    "node_rank",
    "main_address",
    "main_port",
)

#: The job every generated environment test describes: four processes on two nodes, seen from
#: the second process of the second node, its rendezvous at 10.1.2.3:29400. A test sets a
#: cluster environment's own variables to these values and expects them read back, except where
#: the environment derives a value otherwise (SLURM's address from its node list, a port from
#: the job id), which the test then states.
EXAMPLE_JOB: Mapping[str, Any] = MappingProxyType(
    dict(zip(ENVIRONMENT_VALUES, (4, 3, 1, 1, "10.1.2.3", 29400), strict=True))
)
