"""What the Lightning target maps the spec language onto: plain data, no torch, no Lightning.

The generator reads this module to render Lightning plugins from specs; the adapters in this
package (``stratcore.lightning.accelerators``, ``.strategies``, ``.environments``) implement
them, and ``tests/runtime/lightning/test_lightning_contract.py`` checks every name here against the
installed Lightning.
"""

from __future__ import annotations

#: The versions of Lightning the generated plugins and the adapters support: the 2.6 series.
SUPPORTED_SERIES = (2, 6)
SUPPORTED = ">=2.6,<2.7"
REQUIREMENT = f"lightning{SUPPORTED}"

#: The two frameworks a spec renders for: the name the target uses -> Lightning's package.
FRAMEWORKS: dict[str, str] = {"pytorch": "lightning.pytorch", "fabric": "lightning.fabric"}

#: (topology base, wrapper) -> the Lightning strategy class a generated strategy extends, per
#: framework; a pair or framework missing here has no Lightning counterpart (Lightning 2 has
#: no DataParallel, fairscale, Horovod, Bagua or IPU strategy), and is not rendered.
STRATEGY_BASES: dict[tuple[str, str], dict[str, str]] = {
    ("single_device", "none"): {
        "pytorch": "SingleDeviceStrategy",
        "fabric": "SingleDeviceStrategy",
    },
    ("parallel", "ddp"): {"pytorch": "DDPStrategy", "fabric": "DDPStrategy"},
    ("parallel", "fsdp"): {"pytorch": "FSDPStrategy", "fabric": "FSDPStrategy"},
    ("parallel", "deepspeed"): {"pytorch": "DeepSpeedStrategy", "fabric": "DeepSpeedStrategy"},
    ("parallel", "xla"): {"pytorch": "XLAStrategy", "fabric": "XLAStrategy"},
    ("single_device", "xla"): {
        "pytorch": "SingleDeviceXLAStrategy",
        "fabric": "SingleDeviceXLAStrategy",
    },
    ("parallel", "xla_fsdp"): {"fabric": "XLAFSDPStrategy"},
    ("parallel", "model_parallel"): {
        "pytorch": "ModelParallelStrategy",
        "fabric": "ModelParallelStrategy",
    },
}

#: Lightning strategies that refuse some accelerators: class -> (the Lightning accelerators it
#: accepts, or None for any that drives a non-CPU device; why). Lightning's FSDPStrategy wraps
#: the model in torch's FSDP1, which needs a non-CPU device; its DeepSpeedStrategy checks that
#: each process's device index is its local rank, and CPU devices have no index. (It also
#: checks for its own CUDAAccelerator, which ``stratcore.lightning.deepspeed`` passes over.)
DEVICE_LIMITS: dict[str, tuple[frozenset[str] | None, str]] = {
    "DeepSpeedStrategy": (
        None,
        "Lightning's DeepSpeedStrategy needs each process's device index to be its local rank "
        "(_validate_device_index_selection), and CPU devices have no index",
    ),
    "FSDPStrategy": (
        None,
        "Lightning's FSDPStrategy wraps the model in torch's FSDP1, which needs a non-CPU device",
    ),
}

#: Lightning strategies that run only on devices addressed by index (torch.device(type, i)):
#: Lightning's DeepSpeedStrategy requires each process's device index to be its local rank
#: (lightning/fabric/strategies/deepspeed.py: _validate_device_index_selection). Strategies
#: for devices addressed as a whole get no plugin of these.
INDEXED_DEVICES_ONLY: frozenset[str] = frozenset({"DeepSpeedStrategy"})

#: Launcher -> the constructor arguments with which Lightning's DDP strategies start processes
#: that way ('popen' and 'external' are their default).
LAUNCHER_PRESETS: dict[str, dict[str, str]] = {
    "spawn": {"start_method": "spawn"},
    "fork": {"start_method": "fork"},
    "forkserver": {"start_method": "forkserver"},
}

#: Registry names Lightning itself defines, per framework: a spec's strategy or alias of one of
#: these names is Lightning's own, and gets no generated plugin.
STRATEGY_NAMES: dict[str, frozenset[str]] = {
    "pytorch": frozenset(
        {
            "ddp",
            "ddp_find_unused_parameters_false",
            "ddp_find_unused_parameters_true",
            "ddp_fork",
            "ddp_fork_find_unused_parameters_false",
            "ddp_fork_find_unused_parameters_true",
            "ddp_notebook",
            "ddp_notebook_find_unused_parameters_false",
            "ddp_notebook_find_unused_parameters_true",
            "ddp_spawn",
            "ddp_spawn_find_unused_parameters_false",
            "ddp_spawn_find_unused_parameters_true",
            "deepspeed",
            "deepspeed_stage_1",
            "deepspeed_stage_2",
            "deepspeed_stage_2_offload",
            "deepspeed_stage_3",
            "deepspeed_stage_3_offload",
            "deepspeed_stage_3_offload_nvme",
            "fsdp",
            "fsdp_cpu_offload",
            "single_device",
            "single_tpu",
            "single_xla",
            "xla",
            "xla_debug",
        }
    ),
    "fabric": frozenset(
        {
            "ddp",
            "ddp_find_unused_parameters_true",
            "ddp_fork",
            "ddp_notebook",
            "ddp_spawn",
            "deepspeed",
            "deepspeed_stage_1",
            "deepspeed_stage_1_offload",
            "deepspeed_stage_2",
            "deepspeed_stage_2_offload",
            "deepspeed_stage_3",
            "deepspeed_stage_3_offload",
            "deepspeed_stage_3_offload_nvme",
            "dp",
            "fsdp",
            "fsdp_cpu_offload",
            "single_tpu",
            "single_xla",
            "xla",
            "xla_fsdp",
        }
    ),
}

#: torch device type -> the Lightning accelerator class a generated accelerator extends (in both
#: frameworks' ``accelerators`` package); any other type extends ``Accelerator``. A device that
#: is a CPU process is a ``CPUAccelerator`` for Lightning, whose spawning launchers copy a
#: module's tensors for CPU accelerators only: without that, spawned processes share one set of
#: parameters and every optimizer step lands once per process.
ACCELERATOR_BASES: dict[str, str] = {"cpu": "CPUAccelerator"}


def accelerator_base(device_type: str) -> str:
    """The Lightning accelerator class a generated accelerator of ``device_type`` extends."""
    return ACCELERATOR_BASES.get(device_type, "Accelerator")


#: Accelerator names Lightning registers itself.
ACCELERATOR_NAMES: frozenset[str] = frozenset({"cpu", "cuda", "gpu", "mps", "tpu"})

#: Cluster environments Lightning has, by the name specs give them -> their class in
#: ``lightning.fabric.plugins.environments`` (Trainer and Fabric share them).
ENVIRONMENTS: dict[str, str] = {
    "lightning": "LightningEnvironment",
    "torchelastic": "TorchElasticEnvironment",
    "slurm": "SLURMEnvironment",
    "lsf": "LSFEnvironment",
    "kubeflow": "KubeflowEnvironment",
    "mpi": "MPIEnvironment",
    "xla": "XLAEnvironment",
}

#: The module of Lightning's cluster environments.
ENVIRONMENTS_MODULE = "lightning.fabric.plugins.environments"

#: The adapters generated classes derive from, before their Lightning base: kind -> (module,
#: class); and the function that registers them.
ADAPTERS: dict[str, tuple[str, str]] = {
    "accelerator": ("stratcore.lightning.accelerators", "AcceleratorAdapter"),
    "strategy": ("stratcore.lightning.strategies", "StrategyAdapter"),
    "ddp_strategy": ("stratcore.lightning.ddp", "DDPAdapter"),
    "model_parallel_strategy": ("stratcore.lightning.model_parallel", "ModelParallelAdapter"),
    "deepspeed_strategy": ("stratcore.lightning.deepspeed", "DeepSpeedAdapter"),
    "environment": ("stratcore.lightning.environments", "EnvironmentAdapter"),
}
#: Wrappers whose Lightning strategies derive from an adapter of their own (a kind of
#: ``ADAPTERS``) instead of ``StrategyAdapter``.
WRAPPER_ADAPTERS: dict[str, str] = {
    "ddp": "ddp_strategy",
    "model_parallel": "model_parallel_strategy",
    "deepspeed": "deepspeed_strategy",
}
REGISTER: tuple[str, str] = ("stratcore.lightning.registration", "register")

#: Lightning's accelerator and strategy registries, per framework (in its ``accelerators`` and
#: ``strategies`` packages).
REGISTRIES: dict[str, tuple[str, str]] = {
    "pytorch": ("AcceleratorRegistry", "StrategyRegistry"),
    "fabric": ("ACCELERATOR_REGISTRY", "STRATEGY_REGISTRY"),
}


def imported_names() -> frozenset[str]:
    """Every name a generated module of the Lightning target imports besides generated
    classes: a spec class of the same name would shadow it (but the Lightning strategy it
    derives from, which the module then imports as ``Lightning<Name>``)."""
    names = {name for classes in STRATEGY_BASES.values() for name in classes.values()}
    names |= set(ENVIRONMENTS.values()) | {"ClusterEnvironment", "Accelerator"}
    names |= set(ACCELERATOR_BASES.values())
    names |= {name for _, name in ADAPTERS.values()}
    names |= {name for pair in REGISTRIES.values() for name in pair}
    return frozenset(names)


def strategy_adapter(wrapper: str) -> tuple[str, str]:
    """The adapter (module, class) a generated strategy of this wrapper derives from."""
    return ADAPTERS[WRAPPER_ADAPTERS.get(wrapper, "strategy")]


def strategy_base(framework: str, base: str, wrapper: str) -> str | None:
    """The Lightning strategy class a strategy of this base and wrapper extends, if any."""
    return STRATEGY_BASES.get((base, wrapper), {}).get(framework)
