"""The typed model of the spec format.

Each class is a frozen dataclass. Field types say what a spec may contain; ``doc`` metadata
documents each key. The same declarations drive validation (``parse``), the JSON
Schema (``json_schema``) and the spec reference of the documentation, so they cannot drift.

Fields that may be inherited through ``extends`` default to ``None`` in the spec classes;
``stratgen.resolve`` fills them in.
"""

# ruff: noqa: RUF009 - required(), described() and internal() return dataclasses.field(...)

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from stratcore import contract
from stratcore.contract import (
    DType,
    EnvVar,
    ModulePath,
    OptionType,
    Pattern,
    PrecisionName,
    ReduceOp,
)

from .errors import Location
from .fields import described, described_factory, internal, internal_locs, required

# --- constrained strings ------------------------------------------------------------------


Name = Annotated[
    str, Pattern(r"^[a-z][a-z0-9_]{0,62}$", "a lower_snake_case name such as 'ddp_spawn'", False)
]
ClassName = Annotated[
    str, Pattern(r"^[A-Z][A-Za-z0-9]{0,62}$", "a CamelCase class name such as 'DDPStrategy'", False)
]
ImportPath = Annotated[
    str,
    Pattern(
        r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$",
        "an import path 'package.module:attribute'",
    ),
]
ResourceName = Annotated[
    str,
    Pattern(
        r"^[A-Za-z_][A-Za-z0-9_.-]{0,62}$", "a Ray resource name such as 'GPU' or 'neuron_cores'"
    ),
]
HooksRef = Annotated[
    str,
    Pattern(
        r"^([A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
        r"|([A-Za-z0-9_-][A-Za-z0-9_.-]*/)*[A-Za-z0-9_-][A-Za-z0-9_.-]*\.py)$",
        "a module path 'pkg.hooks' or a file 'hooks/ipu.py' in or below the spec's folder",
    ),
]

# Vocabularies whose names are the keys of the contract's tables: a Literal of those keys.
if TYPE_CHECKING:
    Base = str
    Wrapper = str
    Launcher = str
    PrecisionKind = str
else:
    Base = Literal[tuple(contract.BASES)]
    Wrapper = Literal[tuple(contract.WRAPPERS)]
    Launcher = Literal[tuple(contract.LAUNCHERS)]
    PrecisionKind = Literal[tuple(contract.PRECISION_KINDS)]


# --- building blocks ----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Requirement(contract.Requirement):
    __doc__ = contract.Requirement.__doc__
    loc: Location = internal()
    locs: dict[str, Location] = internal_locs()


@dataclass(frozen=True, kw_only=True)
class PrecisionDefaults:
    """Which precisions are allowed and which one is used when the user names none."""

    default: PrecisionName | None = described("Precision used when the user does not choose one.")
    supported: tuple[PrecisionName, ...] | None = described(
        "Every precision this component accepts; omit to accept all."
    )
    probes: dict[PrecisionName, ImportPath] | None = described(
        "Accelerators only: supported precisions run only where a function says so (e.g. "
        "{bf16-mixed: 'torch_npu.npu:is_bf16_supported'}), refused elsewhere naming it."
    )
    loc: Location = internal()
    locs: dict[str, Location] = internal_locs()


@dataclass(frozen=True, kw_only=True)
class StepHooks:
    """Functions called at fixed points of each step (lazy-graph devices need them)."""

    after_backward: ImportPath | None = described("Called after every backward pass.")
    after_optimizer_step: ImportPath | None = described("Called after every optimizer step.")
    loc: Location = internal()
    locs: dict[str, Location] = internal_locs()


@dataclass(frozen=True, kw_only=True)
class Backend:
    """A collective-communication backend and what it can do."""

    name: Name = required("Name passed to torch.distributed.init_process_group, e.g. 'gloo'.")
    description: str = described("One line on what it is.", default="")
    reduce_ops: tuple[ReduceOp, ...] = described(
        "Reductions the backend performs natively; 'mean' is emulated as sum / world size "
        "when missing.",
        default=("sum", "product", "min", "max", "mean"),
    )
    casts: dict[DType, DType] = described_factory(
        "Tensor dtypes the backend cannot reduce, mapped to the dtype to reduce them in.", dict
    )
    init_hook: ImportPath | None = described(
        "Function called (without arguments) before the process group is created."
    )
    requires: tuple[Requirement, ...] = described("Modules the backend needs.", default=())
    torch_name: Name | None = described(
        "Name torch.distributed knows the backend by, where it differs from 'name' (two "
        "vendors' libraries may register the same one, e.g. 'hccl')."
    )
    registered_by: ModulePath | None = described(
        "Module whose import registers the backend with torch.distributed (imported first)."
    )
    from_device_map: bool = described(
        "The backend is whichever one torch maps the device type to "
        "(torch.distributed.Backend.default_device_backend_map), known at run time; "
        "'reduce_ops' and 'casts' are what the spec relies on from any of them.",
        default=False,
    )
    splits_groups: bool = described(
        "The backend can split a process group into subgroups (ProcessGroup's "
        "supportsSplitting): a group bound to its device then makes DeviceMesh's groups that "
        "way, as Lightning's ModelParallelStrategy binds it.",
        default=False,
    )
    loc: Location = internal()
    locs: dict[str, Location] = internal_locs()


@dataclass(frozen=True, kw_only=True)
class Option:
    """A constructor argument of a strategy, with its type and default. An option the runtime
    reads takes the type and default its runtime class declares, unless the spec gives them."""

    type: OptionType | tuple[OptionType, ...] | None = described(
        "Type of the value; a list allows several (e.g. [mapping, path]). Required unless the "
        "runtime reads the option (it declares the type)."
    )
    default: Any = described(
        "Default value; mapping and sequence options default to null. Where the runtime reads "
        "the option, its own default unless given here."
    )
    doc: str = described("What the option does, for the docstring.", default="")
    choices: tuple[Any, ...] | None = described("The only values allowed, if limited.")
    loc: Location = internal()
    locs: dict[str, Location] = internal_locs()

    @property
    def types(self) -> tuple[str, ...]:
        if self.type is None:
            return ()
        return self.type if isinstance(self.type, tuple) else (self.type,)


# --- accelerators -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AcceleratorSpec:
    """A kind of device: how to find it, count it and talk to it."""

    name: Name = required("Name users pass as accelerator=..., e.g. 'hpu'.", inherit=False)
    class_name: ClassName = required("Generated class, e.g. 'HPUAccelerator'.", inherit=False)
    device_type: Name | None = described(
        "torch.device type, e.g. 'cuda' or 'hpu'; required unless 'current_device' gives it."
    )
    current_device: ImportPath | None = described(
        "Function returning the device present at run time, whose type is the device type, "
        "e.g. 'torch.accelerator:current_accelerator'."
    )
    description: str = described("Docstring of the class.", default="", inherit=False)
    product: str | None = described(
        "The hardware as its users and its vendor name it: the title of the device's page and "
        "its entry in the devices index, e.g. 'MUSA: Moore Threads GPUs'; without it the page "
        "is titled with the accelerator's name.",
        inherit=False,
    )
    module: Name | None = described("Module name in the package; defaults to the accelerator name.")
    indexed: bool = described(
        "Whether devices carry an index (torch.device('cuda', 1)); false for devices "
        "addressed as a whole (torch.device('hpu')) and for CPU processes.",
        default=True,
    )
    requires: tuple[Requirement, ...] = described("Modules that must be importable.", default=())
    install: str | None = described(
        "What to install for the device where 'requires' cannot name it (e.g. a build of "
        "torch); shown by `stratgen list` and where the device is absent."
    )
    is_available: ImportPath | None = described(
        "Function returning whether the device is present; omit for always available."
    )
    build_marker: ImportPath | None = described(
        "Attribute ('module:name') set only by builds of torch for this device, which shares "
        "its device type with another (e.g. 'torch.version:hip'); unset, the device is absent."
    )
    device_count: ImportPath | None = described(
        "Function returning the number of devices; omit for devices that are processes "
        "(any number may be requested), or, where is_available is given, for one device."
    )
    auto_devices: int | None = described(
        "How many devices devices='auto' selects; omit for all available.", default=None
    )
    visible_devices_env: EnvVar | None = described(
        "Environment variable that restricts visible devices, e.g. CUDA_VISIBLE_DEVICES."
    )
    backend: Name = required(
        "Collective backend used with this device when a strategy says 'auto'."
    )
    ray_resource: ResourceName | None = described(
        "Ray resource that stands for one device ('GPU', 'NPU', 'HPU', 'neuron_cores', or a "
        "custom resource the Ray cluster declares): stratlib.ray asks one per worker. Omit for "
        "devices that are processes (CPU) or that Ray cannot schedule."
    )
    precision: PrecisionDefaults = described_factory(
        "Default and supported precisions on this device.", PrecisionDefaults
    )
    grad_scaler: bool = described(
        "Whether '16-mixed' needs a GradScaler on this device.", default=False
    )
    set_device: ImportPath | None = described(
        "Function called with the torch.device when a process starts using it."
    )
    teardown: ImportPath | None = described("Function called without arguments at teardown.")
    step_hooks: StepHooks = described_factory(
        "Functions called after backward / optimizer step.", StepHooks
    )
    deepspeed_accelerator: Name | None = described(
        "DS_ACCELERATOR value with which DeepSpeed strategies select DeepSpeed's own class for "
        "the device (e.g. 'npu'); omit where it is the device type or DeepSpeed has none."
    )
    deepspeed_generated: bool | None = described(
        "Whether DeepSpeed strategies train on the DeepSpeed accelerator generated from this "
        "spec (the deepspeed target) instead of DeepSpeed's own class; by default only where "
        "DeepSpeed has no class for the device."
    )
    sync_batchnorm: bool = described(
        "Whether torch.nn.SyncBatchNorm synchronises batch statistics on this device "
        "(sync_batchnorm=True is refused elsewhere).",
        default=False,
    )
    loc: Location = internal()
    locs: dict[str, Location] = internal_locs()


# --- strategies ---------------------------------------------------------------------------


#: What a strategy or precision plugin lists under 'requires'.
_NEEDS = "Modules that must be importable besides those every accelerator it is for needs."


@dataclass(frozen=True, kw_only=True)
class StrategySpec:
    """A training strategy: how processes start, talk and wrap the model."""

    name: Name = required("Registry name users pass as strategy=..., e.g. 'ddp'.", inherit=False)
    class_name: ClassName = required("Generated class, e.g. 'DDPStrategy'.", inherit=False)
    description: str = described("Docstring of the class.", default="", inherit=False)
    module: Name | None = described(
        "Module name in the package; defaults to the strategy name.", inherit=False
    )
    abstract: bool = described(
        "A base for other strategies that is not in the registry itself.",
        default=False,
        inherit=False,
    )
    base: Base | None = described(
        "Kind of strategy: 'single_device', 'parallel' or 'strategy' (the root). The class "
        "derives from that base spec's class and inherits its fields, unless 'extends' names "
        "another parent."
    )
    extends: Name | None = described(
        "Strategy whose fields and class this one inherits (from any spec file, built-in "
        "specs included).",
        inherit=False,
    )
    wrapper: Wrapper | None = described("How the model is wrapped for its backend.")
    launcher: Launcher | None = described(
        "How the training processes are started. A launcher that reads options from its "
        "strategy gives them to every strategy it starts: "
        + ", ".join(
            f"{o} of '{name}'"
            for name, options in contract.LAUNCHER_OPTIONS.items()
            for o in options
        )
        + "."
    )
    backend: Name | Backend | None = described(
        "Collective backend: 'auto' (from the accelerator), the name of a declared backend, "
        "or a mapping declaring one."
    )
    precision: PrecisionDefaults | None = described(
        "Default and supported precisions, within its accelerators' (whose default applies "
        "where none is given here)."
    )
    cluster: tuple[Name, ...] | None = described(
        "Cluster environments, in the order they are detected; the first whose detect() "
        "succeeds is used."
    )
    accelerators: tuple[Name, ...] | None = described(
        "Accelerators the strategy runs on, in order of preference for accelerator='auto'."
    )
    options: dict[Name, Option] | None = described(
        "Constructor arguments with their types and defaults. A child's entry replaces the "
        "parent's entry of the same name."
    )
    aliases: dict[Name, dict[Name, Any]] = described_factory(
        "Extra registry names, each a preset of option values.", dict, inherit=False
    )
    requires: tuple[Requirement, ...] | None = described(_NEEDS)
    hooks: HooksRef | None = described(
        "Hand-written hooks module whose functions the class calls at named points."
    )
    loc: Location = internal()
    locs: dict[str, Location] = internal_locs()


# --- precision plugins --------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PrecisionPluginSpec:
    """A precision plugin: which precisions it serves and where it applies."""

    name: Name = required("Name of the plugin in the registry.", inherit=False)
    class_name: ClassName = required(
        "Generated class, e.g. 'DoublePrecisionPlugin'.", inherit=False
    )
    description: str = described("Docstring of the class.", default="", inherit=False)
    module: Name | None = described(
        "Module name in the package; defaults to the plugin name.", inherit=False
    )
    abstract: bool = described(
        "A base for other plugins, never selected itself.", default=False, inherit=False
    )
    extends: Name | None = described(
        "Plugin whose fields and class this one inherits.", inherit=False
    )
    kind: PrecisionKind | None = described("Which core behaviour the plugin has.")
    modes: tuple[PrecisionName, ...] | None = described(
        "Precisions the plugin implements (not inherited).", inherit=False
    )
    wrappers: tuple[Wrapper, ...] | None = described(
        "Only for strategies with one of these wrappers; omit for any."
    )
    accelerators: tuple[Name, ...] | None = described("Only on these accelerators; omit for any.")
    grad_scaler: ImportPath | None = described(
        "Gradient scaler class used for '16-mixed' where the device needs one."
    )
    requires: tuple[Requirement, ...] | None = described(_NEEDS)
    loc: Location = internal()
    locs: dict[str, Location] = internal_locs()


# --- cluster environments -----------------------------------------------------------------


# Condition and ValueSource are the runtime's own types (stratcore.contract), here with where
# in the spec each value was written.


@dataclass(frozen=True, kw_only=True)
class Condition(contract.Condition):
    __doc__ = contract.Condition.__doc__
    loc: Location = internal()
    locs: dict[str, Location] = internal_locs()


@dataclass(frozen=True, kw_only=True)
class ValueSource(contract.ValueSource):
    __doc__ = contract.ValueSource.__doc__
    loc: Location = internal()
    locs: dict[str, Location] = internal_locs()


@dataclass(frozen=True, kw_only=True)
class ClusterEnvironmentSpec:
    """A cluster or launcher: how to tell it is there and where ranks and addresses live."""

    name: Name = required(
        "Name of the environment, used in strategies' 'cluster' lists.", inherit=False
    )
    class_name: ClassName = required("Generated class, e.g. 'SLURMEnvironment'.", inherit=False)
    description: str = described("Docstring of the class.", default="", inherit=False)
    module: Name | None = described(
        "Module name in the package; defaults to the name.", inherit=False
    )
    abstract: bool = described(
        "A base for other environments, never detected itself.", default=False, inherit=False
    )
    extends: Name | None = described(
        "Environment whose fields and class this one inherits.", inherit=False
    )
    detect: Condition | None = described("When the process runs under this environment.")
    creates_processes_externally: Condition | None = described(
        "When the environment (not the strategy) starts one process per device."
    )
    settable: bool | None = described(
        "Whether the strategy sets world size and global rank (true for environments that "
        "the strategy's own launcher fills in)."
    )
    world_size: ValueSource | None = described("Total number of processes.")
    global_rank: ValueSource | None = described("Rank of this process among all processes.")
    local_rank: ValueSource | None = described("Rank of this process on its node.")
    node_rank: ValueSource | None = described("Rank of this node.")
    main_address: ValueSource | None = described("Address of the rank-0 node.")
    main_port: ValueSource | None = described("Port of the rendezvous on the rank-0 node.")
    local_world_size: ValueSource | None = described(
        "Number of processes on this node, where the environment places processes on nodes "
        "itself (Ray): devices='auto' means that many, and devices and num_nodes are checked "
        "against it. Omit where the nodes are given (torchrun, srun)."
    )
    device: ValueSource | None = described(
        "The device the environment gave this process, as torch names it ('cuda:1'); a "
        "strategy trains on it where it is one of its devices, else on its local rank's."
    )
    runs_inside: tuple[Name, ...] | None = described(
        "Environments whose variables this one's processes may carry too (Ray started by "
        "SLURM's srun, on Kubernetes): every strategy that lists both must list this one first."
    )
    requires: tuple[Requirement, ...] | None = described("Modules that must be importable.")
    loc: Location = internal()
    locs: dict[str, Location] = internal_locs()


# --- a spec file --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SpecFile:
    """One YAML file under specs/. It may declare one accelerator and any number of the rest."""

    version: Literal[1] = described("Version of the spec format.", default=1)
    accelerator: AcceleratorSpec | None = described("The accelerator this file adds, if any.")
    backends: tuple[Backend, ...] = described("Collective backends declared here.", default=())
    strategies: tuple[StrategySpec, ...] = described("Strategies declared here.", default=())
    precision_plugins: tuple[PrecisionPluginSpec, ...] = described(
        "Precision plugins declared here.", default=()
    )
    cluster_environments: tuple[ClusterEnvironmentSpec, ...] = described(
        "Cluster environments declared here.", default=()
    )
    loc: Location = internal()
    locs: dict[str, Location] = internal_locs()
