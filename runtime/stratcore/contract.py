"""The contract between the spec language and the runtime, in one place.

Every vocabulary a spec may use (wrappers, launchers, precisions, reduce ops, dtypes, value
parsers and fallbacks, precision kinds, option types, strategy bases), the runtime class each
name stands for, the constructor arguments the runtime takes, and the small value types that
both sides share (``Condition``, ``ValueSource``, ``Requirement``) are declared here once. The
generator derives its model, JSON Schema and README reference from these tables, the runtime
imports the shared types and the precision-plugin scoring, and ``tests/test_contract.py`` checks
that every name has an implementation in the runtime and every implementation a name.

Importing this module must not import torch: the generator imports it.
"""

# ruff: noqa: RUF009 - _doc() returns dataclasses.field(...)

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Annotated, Any, ClassVar, Literal, get_args

#: A runtime class, named by its module and class name, e.g. ('stratcore.wrappers.ddp', 'DDPStrategyBase').
Ref = tuple[str, str]

# --- constrained strings ---------------------------------------------------------------------


@dataclass(frozen=True)
class Pattern:
    """A regular expression a string must match, and what to call such a string."""

    regex: str
    what: str
    keyword_ok: bool = True


ModulePath = Annotated[
    str,
    Pattern(
        r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$",
        "a dotted module path such as 'torch.distributed'",
    ),
]
EnvVar = Annotated[
    str, Pattern(r"^[A-Za-z_][A-Za-z0-9_]*$", "an environment variable name such as 'SLURM_NTASKS'")
]

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

#: How a cluster value is read from its variable (``stratcore.environment.PARSERS``).
ValueParser = Literal[
    "int",
    "str",
    "slurm_first_host",
    "slurm_job_port",
    "lsf_first_host",
    "lsf_node_rank",
    "lsf_job_port",
]
VALUE_PARSERS: tuple[str, ...] = get_args(ValueParser)

#: Values computed when no variable is set (``ClusterEnvironmentBase._fallback``).
ValueFallback = Literal["free_port", "hostname", "ranks_per_node"]
VALUE_FALLBACKS: tuple[str, ...] = get_args(ValueFallback)

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
LAUNCHER_ROOT: Ref = ("stratcore.launchers", "Launcher")

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

#: Every constructor argument of the runtime: (annotation, default, the runtime class the
#: annotation names or None).
PLUMBING_PARAMS: dict[str, tuple[str, str, Ref | None]] = {
    "accelerator": ("Accelerator | None", "None", ACCELERATOR_ROOT),
    "device": ("torch.device | str | int | None", "None", None),
    "parallel_devices": ("list[torch.device] | None", "None", None),
    "cluster_environment": ("ClusterEnvironmentBase | None", "None", ENVIRONMENT_ROOT),
    "checkpoint_io": ("CheckpointIO | None", "None", ("stratcore.checkpoint_io", "CheckpointIO")),
    "precision_plugin": ("PrecisionBase | None", "None", PRECISION_ROOT),
    "num_nodes": ("int", "1", None),
}

#: Names of every constructor argument of the runtime (``factory.strategy_options`` skips them).
PLUMBING_NAMES: frozenset[str] = frozenset(PLUMBING_PARAMS)

# --- precision plugins ---------------------------------------------------------------------------

#: Precision kind -> the runtime class that implements it.
PRECISION_KINDS: dict[str, Ref] = {
    "precision": PRECISION_ROOT,
    "double": ("stratcore.precision", "DoublePrecisionBase"),
    "mixed": ("stratcore.precision", "MixedPrecisionBase"),
    "half": ("stratcore.precision", "HalfPrecisionBase"),
    "deepspeed": ("stratcore.wrappers.deepspeed", "DeepSpeedPrecisionBase"),
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


# --- shared value types --------------------------------------------------------------------------


def _doc(text: str, default: Any = None, **kwargs: Any) -> Any:
    """A field documented for the spec reference."""
    return field(default=default, metadata={"doc": text}, **kwargs)


@cache
def module_available(name: str) -> bool:
    """Whether ``name`` can be imported, found without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True)
class Requirement:
    """A Python module that must be importable, and how to install it."""

    module: ModulePath = field(metadata={"doc": "Module to import, e.g. 'deepspeed'."})
    install: str = _doc("Command or instruction shown when the module is missing.", "")

    #: A spec may write a requirement as this field alone.
    __shorthand__: ClassVar[str] = "module"

    @property
    def available(self) -> bool:
        parts = self.module.split(".")
        return all(module_available(".".join(parts[: i + 1])) for i in range(len(parts)))

    def message(self, user: str) -> str:
        hint = f"; install it with: {self.install}" if self.install else ""
        return f"{user} needs the '{self.module}' package, which is not installed{hint}"


@dataclass(frozen=True)
class Condition:
    """A test on environment variables."""

    always: bool = _doc("True regardless of the environment.", False)
    all_set: tuple[EnvVar, ...] = _doc("Every one of these variables is set.", ())
    any_set: tuple[EnvVar, ...] = _doc("At least one of these variables is set.", ())
    not_equal: dict[EnvVar, tuple[str, ...]] = field(
        default_factory=dict,
        metadata={"doc": "None of these variables has one of the listed values."},
    )

    def holds(self, environ: Mapping[str, str] | None = None) -> bool:
        """Whether the condition holds in ``environ`` (the process environment by default);
        a condition that names no variable and is not ``always`` never holds."""
        env = os.environ if environ is None else environ
        if self.always:
            return True
        if not (self.all_set or self.any_set):
            return False
        if not all(name in env for name in self.all_set):
            return False
        if self.any_set and not any(name in env for name in self.any_set):
            return False
        return all(env.get(name) not in values for name, values in self.not_equal.items())


@dataclass(frozen=True)
class ValueSource:
    """Where a cluster value comes from: environment variables, parsed, with a fallback."""

    env: tuple[EnvVar, ...] = _doc("Variables to read; the first one set wins.", ())
    parse: ValueParser | None = _doc(
        "How to read the value: 'int' and 'str', or a scheduler-specific parser."
    )
    default: int | str | None = _doc("Value when no variable is set.")
    fallback: ValueFallback | None = _doc(
        "Computed value when no variable is set and no default is given."
    )

    #: A spec may write a value source as this field alone.
    __shorthand__: ClassVar[str] = "env"


#: The values every cluster environment provides, each from a ``ValueSource``.
ENVIRONMENT_VALUES = (
    "world_size",
    "global_rank",
    "local_rank",
    "node_rank",
    "main_address",
    "main_port",
)
