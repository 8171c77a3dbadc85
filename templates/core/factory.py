"""Build a ready strategy from what a user types: a registry name, an accelerator, devices,
nodes, a precision and options. Every argument is checked against the strategy's spec, and a
mistake gets a one-line error that names the argument and what is allowed."""

from __future__ import annotations

import difflib
import inspect
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, Union

from .accelerator import Accelerator
from .checkpoint_io import CheckpointIO
from .collectives import CollectiveBackend
from .environment import ClusterEnvironmentBase
from .exceptions import MisconfigurationError
from .imports import require
from .layer_sync import TorchSyncBatchNorm
from .precision import PrecisionBase, canonical_precision
from .registry import StrategyEntry, generated_registry
from .strategy import StrategyBase

#: Arguments of the core constructors; everything else a strategy takes is an option.
PLUMBING = frozenset(
    {
        "accelerator",
        "device",
        "parallel_devices",
        "cluster_environment",
        "checkpoint_io",
        "precision_plugin",
        "num_nodes",
    }
)


def _close(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.5)
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


# --- lookups ------------------------------------------------------------------------------------


def strategy_entry(name: str) -> StrategyEntry:
    strategies = generated_registry().STRATEGIES
    if name not in strategies:
        raise MisconfigurationError(
            f"strategy={name!r} is not a registered strategy{_close(name, list(strategies))} "
            f"(registered: {', '.join(sorted(strategies))})"
        )
    return strategies[name]


def accelerator_class(name: str) -> type[Accelerator]:
    accelerators = generated_registry().ACCELERATORS
    if name not in accelerators:
        raise MisconfigurationError(
            f"accelerator={name!r} is not known{_close(name, list(accelerators))} "
            f"(known: {', '.join(accelerators)}, or 'auto')"
        )
    return accelerators[name]


def backend_named(name: str) -> CollectiveBackend:
    """A declared backend, or one with default capabilities for names the specs do not know."""
    return generated_registry().BACKENDS.get(name) or CollectiveBackend(name)


def known_backends() -> list[str]:
    """Backends a process group can use: those the specs declare and those torch knows
    (including ones registered by plugins)."""
    import torch.distributed as dist

    names = list(generated_registry().BACKENDS)
    torch_names = getattr(getattr(dist, "Backend", None), "backend_list", [])
    names += [n for n in torch_names if n not in names and n not in ("undefined", "fake")]
    return names


def default_accelerator(strategy: type[StrategyBase]) -> Accelerator:
    """The first available accelerator among those the strategy supports."""
    accelerators = generated_registry().ACCELERATORS
    names = strategy.supported_accelerators or tuple(accelerators)
    for name in names:
        cls = accelerators.get(name)
        if cls is not None and cls.is_available():
            return cls()
    raise MisconfigurationError(
        f"{strategy.__name__} runs on {', '.join(names)}, and none of them is available here"
    )


def detect_environment(strategy: type[StrategyBase]) -> ClusterEnvironmentBase:
    """The first environment, in the strategy's detection order, that this process runs under."""
    environments = generated_registry().CLUSTER_ENVIRONMENTS
    for name in strategy.cluster_environments:
        cls = environments.get(name)
        if cls is not None and cls.detect():
            return cls()
    if "lightning" in environments:
        return environments["lightning"]()
    raise MisconfigurationError(
        f"{strategy.__name__}: none of the cluster environments {', '.join(strategy.cluster_environments)} "
        "applies to this process; pass cluster_environment=..."
    )


def select_precision_plugin(
    strategy: type[StrategyBase], accelerator: Accelerator, precision: Any
) -> PrecisionBase:
    """The most specific plugin serving ``precision`` for this strategy on this accelerator."""
    mode = canonical_precision(precision)
    return precision_plugin_class(strategy, accelerator, mode)(
        mode, device_type=accelerator.device_type
    )


def precision_plugin_class(
    strategy: type[StrategyBase], accelerator: Accelerator | type[Accelerator], precision: Any
) -> type[PrecisionBase]:
    """The plugin class ``select_precision_plugin`` builds, found without constructing it."""
    mode = canonical_precision(precision)
    best: type[PrecisionBase] | None = None
    best_score = -1
    for plugin in generated_registry().PRECISION_PLUGINS:
        if mode not in plugin.modes:
            continue
        if plugin.wrappers and strategy.wrapper not in plugin.wrappers:
            continue
        if plugin.accelerators and accelerator.accelerator_name not in plugin.accelerators:
            continue
        score = 2 * bool(plugin.wrappers) + bool(plugin.accelerators)
        if score > best_score:
            best, best_score = plugin, score
    if best is None:
        raise MisconfigurationError(
            f"precision={precision!r}: no precision plugin serves it for {strategy.__name__} on "
            f"{accelerator.accelerator_name!r}"
        )
    return best


# --- options -------------------------------------------------------------------------------------


@cache
def strategy_options(cls: type[StrategyBase]) -> dict[str, inspect.Parameter]:
    """The options (keyword arguments other than the core's) a strategy class takes."""
    parameters = inspect.signature(cls.__init__).parameters
    return {
        name: p
        for name, p in parameters.items()
        if name != "self"
        and name not in PLUMBING
        and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    }


def _annotation(cls: type, name: str) -> Any:
    try:
        constructor: Any = cls
        return typing.get_type_hints(constructor.__init__).get(name, Any)
    except Exception:  # annotations that cannot be evaluated are not checked
        return Any


def _fits(value: Any, annotation: Any) -> tuple[bool, str]:
    """Whether ``value`` matches a simple annotation, and a description of what is allowed."""
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return True, "any value"
    if origin is Literal:
        choices = typing.get_args(annotation)
        return value in choices, "one of " + ", ".join(repr(c) for c in choices)
    if origin in (Union, getattr(__import__("types"), "UnionType", Union)):
        results = [_fits(value, member) for member in typing.get_args(annotation)]
        return any(ok for ok, _ in results), " or ".join(text for _, text in results)
    if annotation is type(None):
        return value is None, "None"
    if annotation is bool:
        return isinstance(value, bool), "True or False"
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool), "an integer"
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool), "a number"
    if annotation is str:
        return isinstance(value, str), "a string"
    return True, "a value"


def check_options(cls: type[StrategyBase], options: dict[str, Any]) -> None:
    allowed = strategy_options(cls)
    for name, value in options.items():
        if name not in allowed:
            listed = ", ".join(allowed) or "none"
            raise MisconfigurationError(
                f"{name}={value!r}: {cls.__name__} takes no option {name!r}{_close(name, list(allowed))} "
                f"(its options: {listed})"
            )
        ok, expected = _fits(value, _annotation(cls, name))
        if not ok:
            raise MisconfigurationError(
                f"{name}={value!r} is not allowed for {cls.__name__}; expected {expected}"
            )


# --- the factory ---------------------------------------------------------------------------------


def get_strategy(
    strategy: str | type[StrategyBase] | StrategyBase = "auto",
    *,
    accelerator: str | Accelerator = "auto",
    devices: int | str | Sequence[int] = "auto",
    num_nodes: int | str = 1,
    precision: str | int | None = None,
    cluster_environment: ClusterEnvironmentBase | None = None,
    checkpoint_io: CheckpointIO | None = None,
    sync_batchnorm: bool = False,
    **options: Any,
) -> StrategyBase:
    """Build a strategy ready to ``launch``.

    Args:
        strategy: A registry name in any letter case (``"ddp"``, ``"ddp_spawn"``, ``"ddp_find_unused_parameters_true"``,
            ...), ``"auto"`` (``"single_device"`` for one device, else ``"ddp"``, or the
            strategies a device's spec provides for them, such as ``"hpu_parallel"``), a strategy
            class, or an instance to complete.
        accelerator: ``"auto"`` (the first available one the strategy supports), a name such
            as ``"cpu"`` or ``"cuda"`` in any letter case, or an Accelerator.
        devices: Devices per node: a number, ``"auto"``, ``-1`` for all, or a list of indices;
            also as a string (``"2"``, ``"-1"``, ``"0,1"``).
        num_nodes: Number of machines (an int, or its digits as a string).
        precision: ``"32-true"``, ``"16-mixed"``, ``"bf16-mixed"``, ``"64-true"``, ``"16-true"``,
            ``"bf16-true"`` or the short forms ``"32"``, ``"16"``, ``"bf16"``, ``"64"``; by
            default the strategy's or accelerator's default.
        cluster_environment: An environment to use instead of detecting one.
        checkpoint_io: A CheckpointIO to use instead of ``TorchCheckpointIO``.
        sync_batchnorm: Convert BatchNorm layers to SyncBatchNorm in ``setup``.
        **options: Options of the strategy (see its class), on top of the registry name's preset.
    """
    num_nodes = _count_of_nodes(num_nodes)
    if isinstance(devices, str):
        devices = devices.strip().lower()
    instance: StrategyBase | None = None
    preset: dict[str, Any] = {}
    if isinstance(strategy, StrategyBase):
        instance, cls = strategy, type(strategy)
        if options:
            raise MisconfigurationError(
                f"options {', '.join(options)} cannot be applied to a strategy that is already built; "
                "pass them to its constructor"
            )
    elif isinstance(strategy, type) and issubclass(strategy, StrategyBase):
        cls = strategy
    elif isinstance(strategy, str):
        name = strategy.strip().lower()
        if name == "auto":
            any_strategy: Any = StrategyBase
            probe = _resolve_accelerator(any_strategy, accelerator, None)
            name = auto_strategy(probe, len(probe.parse_devices(devices)) * num_nodes)
        entry = strategy_entry(name)
        cls, preset = entry.cls, dict(entry.preset)
    else:
        raise MisconfigurationError(
            f"strategy={strategy!r} is not allowed; give a registry name, a strategy class or a strategy"
        )
    if inspect.isabstract(cls):
        raise MisconfigurationError(
            f"{cls.__name__} is an abstract base; choose a concrete strategy"
        )

    merged = {**preset, **options}
    check_options(cls, merged)

    accelerator_obj = _resolve_accelerator(cls, accelerator, instance)
    kind = _kind(cls)
    if kind == "parallel" and devices == "auto" and not accelerator_obj.indexed:
        devices = _processes_started_per_node(cls, cluster_environment, num_nodes) or devices
    indices = accelerator_obj.parse_devices(devices)
    device_list = accelerator_obj.get_parallel_devices(indices)
    if kind == "single_device":
        if len(device_list) != 1:
            raise MisconfigurationError(
                f"devices={devices!r}: {cls.__name__} trains on exactly one device; use a parallel "
                "strategy such as 'ddp' for more"
            )
        if num_nodes != 1:
            raise MisconfigurationError(
                f"num_nodes={num_nodes}: {cls.__name__} runs on one machine"
            )

    mode = (
        canonical_precision(precision)
        if precision is not None
        else (cls.default_precision or accelerator_obj.default_precision)
    )
    _require_precision_packages(mode, precision)
    _check_precision(cls, accelerator_obj, mode, precision)
    plugin = select_precision_plugin(cls, accelerator_obj, mode)

    if instance is None:
        kwargs: dict[str, Any] = {
            "accelerator": accelerator_obj,
            "precision_plugin": plugin,
            **merged,
        }
        if checkpoint_io is not None:
            kwargs["checkpoint_io"] = checkpoint_io
        if kind == "single_device":
            kwargs["device"] = device_list[0]
        elif kind == "parallel":
            kwargs["parallel_devices"] = device_list
            kwargs["num_nodes"] = num_nodes
            if cluster_environment is not None:
                kwargs["cluster_environment"] = cluster_environment
        instance = cls(**kwargs)
    else:
        instance.accelerator = accelerator_obj
        if instance._precision_plugin is None or precision is not None:
            instance.precision_plugin = plugin
        if checkpoint_io is not None:
            instance.checkpoint_io = checkpoint_io
        if kind == "parallel":
            existing: Any = instance
            if getattr(existing, "_parallel_devices", None) is None or devices != "auto":
                existing.parallel_devices = device_list
            existing.num_nodes = num_nodes
            if cluster_environment is not None:
                existing.cluster_environment = cluster_environment
    if kind == "parallel":
        parallel: Any = instance
        parallel.cluster_environment.validate_settings(parallel.num_processes, num_nodes)
    instance.validate_configuration()
    if sync_batchnorm:
        instance.layer_sync = TorchSyncBatchNorm()
    return instance


def _count_of_nodes(num_nodes: Any) -> int:
    """``num_nodes`` as a positive int; digits in a string (from a command line or a config
    file) are accepted."""
    value = num_nodes
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MisconfigurationError(
            f"num_nodes={num_nodes!r} is not allowed; use a positive number"
        )
    return value


def _processes_started_per_node(
    cls: type[StrategyBase], environment: ClusterEnvironmentBase | None, num_nodes: int
) -> int | None:
    """Under a scheduler that started the processes (torchrun, srun, ...), how many it started
    per node; devices that are processes (CPU) then default to that number."""
    from .parallel import ParallelMixin

    if not issubclass(cls, ParallelMixin) or cls.num_processes is not ParallelMixin.num_processes:
        return None  # strategies with their own notion of processes per node (DP, DDP2)
    environment = environment or detect_environment(cls)
    if environment.settable or not environment.creates_processes_externally:
        return None
    try:
        world_size = environment.world_size()
    except MisconfigurationError:
        return None
    return (
        world_size // num_nodes if world_size % num_nodes == 0 and world_size >= num_nodes else None
    )


def auto_strategy(accelerator: Accelerator, processes: int) -> str:
    """What strategy='auto' means on ``accelerator``: 'single_device' for one process and
    'ddp' for several, or the first registered strategy of that kind made for the device
    (e.g. 'hpu_single' and 'hpu_parallel' on Habana devices)."""
    wanted = "single_device" if processes == 1 else "parallel"
    preferred = "single_device" if wanted == "single_device" else "ddp"
    candidates: list[str] = []
    for name, entry in generated_registry().STRATEGIES.items():
        cls = entry.cls
        if entry.preset or cls.strategy_name != name or _kind(cls) != wanted:
            continue
        if (
            cls.supported_accelerators
            and accelerator.accelerator_name not in cls.supported_accelerators
        ):
            continue
        if not all(r.available for r in cls.requirements):
            continue
        candidates.append(name)
    if preferred in candidates:
        return preferred
    if candidates:
        return candidates[0]
    raise MisconfigurationError(
        f"strategy='auto': no registered strategy runs {processes} process(es) on "
        f"{accelerator.accelerator_name!r}; name one"
    )


def _kind(cls: type[StrategyBase]) -> str:
    from .parallel import ParallelMixin
    from .single_device import SingleDeviceMixin

    if issubclass(cls, ParallelMixin):
        return "parallel"
    if issubclass(cls, SingleDeviceMixin):
        return "single_device"
    return "strategy"


def _resolve_accelerator(
    cls: type[StrategyBase], accelerator: str | Accelerator, instance: StrategyBase | None
) -> Accelerator:
    supported = cls.supported_accelerators
    if isinstance(accelerator, Accelerator):
        obj = accelerator
    elif accelerator == "auto":
        if instance is not None and instance._accelerator is not None:
            obj = instance._accelerator
        else:
            obj = default_accelerator(cls)
    elif isinstance(accelerator, str):
        name = accelerator.strip().lower()
        name = "cuda" if name == "gpu" else name
        obj = accelerator_class(name)()
    else:
        raise MisconfigurationError(
            f"accelerator={accelerator!r} is not allowed; give a name or an Accelerator"
        )
    if supported and obj.accelerator_name not in supported:
        raise MisconfigurationError(
            f"accelerator={obj.accelerator_name!r}: {cls.__name__} runs on {', '.join(supported)}"
        )
    obj.check_available()
    return obj


def _require_precision_packages(mode: str, asked: Any) -> None:
    """A precision that only plugins needing a missing package implement (FP8 through
    Transformer Engine, ...) is refused first, naming the package to install."""
    plugins = [p for p in generated_registry().PRECISION_PLUGINS if mode in p.modes]
    if plugins and not any(all(r.available for r in p.requirements) for p in plugins):
        require(plugins[0].requirements, f"precision={asked if asked is not None else mode!r}")


def _check_precision(
    cls: type[StrategyBase], accelerator: Accelerator, mode: str, asked: Any
) -> None:
    shown = asked if asked is not None else mode
    if mode not in cls.supported_precisions:
        raise MisconfigurationError(
            f"precision={shown!r}: {cls.__name__} supports {', '.join(cls.supported_precisions)}"
        )
    if mode not in accelerator.supported_precisions:
        raise MisconfigurationError(
            f"precision={shown!r}: accelerator {accelerator.accelerator_name!r} supports "
            f"{', '.join(accelerator.supported_precisions)}"
        )


# --- describing the registry -------------------------------------------------------------------


@dataclass(frozen=True)
class StrategyInfo:
    """One registry name, as ``list_strategies`` describes it."""

    name: str
    strategy_class: str
    preset: dict[str, Any]
    description: str
    accelerators: tuple[str, ...]
    launcher: str
    backend: str
    available: bool

    def __str__(self) -> str:
        preset = f" {self.preset}" if self.preset else ""
        state = "available" if self.available else "not available here"
        return f"{self.name}: {self.strategy_class}{preset} ({state}) - {self.description}"


def list_strategies() -> list[StrategyInfo]:
    """Every registry name with its class, preset, accelerators, launcher and backend, and
    whether it can run on this machine."""
    infos = []
    accelerators = generated_registry().ACCELERATORS
    for name, entry in generated_registry().STRATEGIES.items():
        cls = entry.cls
        doc = (cls.__doc__ or "").strip().splitlines()
        available = all(r.available for r in cls.requirements) and any(
            accelerators[a].is_available() for a in cls.supported_accelerators if a in accelerators
        )
        infos.append(
            StrategyInfo(
                name=name,
                strategy_class=cls.__name__,
                preset=dict(entry.preset),
                description=doc[0] if doc else "",
                accelerators=cls.supported_accelerators,
                launcher=cls.launcher_name,
                backend=cls.backend.name if cls.backend else "auto",
                available=available,
            )
        )
    return infos
