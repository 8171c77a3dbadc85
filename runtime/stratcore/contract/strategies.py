"""Strategies: the runtime class each strategy base and each wrapper stands for, the options the
runtime reads for each, and the constructor arguments the runtime takes (which options may not
reuse).

Importing this module must not import torch: the generator imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .package import STRATEGY_ROOT
from .value_types import RuntimeClass

#: Strategy base kind -> the runtime class a strategy of that kind derives from.
BASES: dict[str, RuntimeClass] = {
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

    base: RuntimeClass | None
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
        ("stratcore.wrappers.fsdp.strategy", "FSDPStrategyBase"),
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
        ("stratcore.wrappers.model_parallel.strategy", "ModelParallelStrategyBase"),
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
        ("stratcore.wrappers.fairscale.oss", "ShardedStrategyBase"),
        _PARALLEL,
        {"reduce_buffer_size": ("int",), "broadcast_buffers": ("bool",)},
    ),
    "fairscale_fsdp": WrapperEntry(
        ("stratcore.wrappers.fairscale.fsdp", "FairscaleFSDPStrategyBase"),
        _PARALLEL,
        {
            "auto_wrap_min_params": ("int",),
            "cpu_offload": ("bool",),
            "reshard_after_forward": ("bool",),
        },
    ),
    "deepspeed": WrapperEntry(
        ("stratcore.wrappers.deepspeed.strategy", "DeepSpeedStrategyBase"),
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
    "ipu": WrapperEntry(("stratcore.wrappers.poptorch", "IPUStrategyBase"), _PARALLEL),
}


def core_read_options() -> frozenset[str]:
    """Options the runtime itself reads (a spec may declare them, with a matching type)."""
    return frozenset(PARALLEL_OPTIONS) | {o for w in WRAPPERS.values() for o in w.options}


#: Constructor arguments the runtime takes, by strategy base, in their order; options may not
#: reuse these names.
CONSTRUCTOR_ARGUMENTS: dict[str, tuple[str, ...]] = {
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
CONSTRUCTOR_ARGUMENT_NAMES: frozenset[str] = frozenset(
    name for names in CONSTRUCTOR_ARGUMENTS.values() for name in names
)
