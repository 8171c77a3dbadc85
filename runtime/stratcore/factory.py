"""Build a ready strategy from what a user types: a registry name, an accelerator, devices,
nodes, a precision and options. Every argument is checked against the strategy's spec, and a
mistake gets a one-line error that names the argument and what is allowed."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, Union

from .accelerator import Accelerator
from .checkpoints.io import CheckpointIO
from .contract import CONSTRUCTOR_ARGUMENT_NAMES
from .environment import ClusterEnvironmentBase
from .exceptions import MisconfigurationError
from .imports import require
from .layer_sync import TorchSyncBatchNorm
from .precision.base import canonical_precision
from .registry import Registry
from .strategy import StrategyBase
from .wording import did_you_mean

# --- options -------------------------------------------------------------------------------------


@cache
def _constructors(cls: type[StrategyBase]) -> tuple[Any, ...]:
    """The ``__init__`` methods that together take a class's arguments, the class's own first:
    each in the MRO until one that passes no ``**kwargs`` on (a generated class declares its
    own options and passes the rest on to its base)."""
    found = []
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None:
            continue
        found.append(init)
        kinds = {p.kind for p in inspect.signature(init).parameters.values()}
        if inspect.Parameter.VAR_KEYWORD not in kinds:
            break
    return tuple(found)


@cache
def strategy_options(cls: type[StrategyBase]) -> dict[str, inspect.Parameter]:
    """The options (keyword arguments other than the core's) a strategy class takes, its
    bases' first, each with the default of the class nearest ``cls`` that declares it."""
    options: dict[str, inspect.Parameter] = {}
    for init in reversed(_constructors(cls)):
        for name, p in inspect.signature(init).parameters.items():
            if (
                name != "self"
                and name not in CONSTRUCTOR_ARGUMENT_NAMES
                and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
            ):
                options[name] = p
    return options


def _annotation(cls: type[StrategyBase], name: str) -> Any:
    for init in _constructors(cls):
        if name in inspect.signature(init).parameters:
            try:
                return typing.get_type_hints(init).get(name, Any)
            except Exception:  # annotations that cannot be evaluated are not checked
                return Any
    return Any


def _fits(value: Any, annotation: Any) -> tuple[bool, str]:
    """Whether ``value`` matches a simple annotation, and a description of what is allowed."""
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return True, "any value"
    if origin is Literal:
        choices = typing.get_args(annotation)
        return value in choices, "one of " + ", ".join(repr(c) for c in choices)
    if origin in (Union, types.UnionType):
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
    """Refuse, in one line, an option ``cls`` does not take (naming those it takes) or a value of
    the wrong type."""
    allowed = strategy_options(cls)
    for name, value in options.items():
        if name not in allowed:
            listed = ", ".join(allowed) or "none"
            raise MisconfigurationError(
                f"{name}={value!r}: {cls.__name__} takes no option {name!r}"
                f"{did_you_mean(name, allowed)}; its options: {listed}"
            )
        ok, expected = _fits(value, _annotation(cls, name))
        if not ok:
            raise MisconfigurationError(
                f"{name}={value!r} is not allowed for {cls.__name__}; expected {expected}"
            )


# --- the factory ---------------------------------------------------------------------------------


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


def _cluster_environment(
    registry: Registry, cluster_environment: Any
) -> ClusterEnvironmentBase | None:
    """``cluster_environment`` as an environment: None, an instance, or the name of one the
    package registers (as ``accelerator`` takes a name or an Accelerator)."""
    if cluster_environment is None or isinstance(cluster_environment, ClusterEnvironmentBase):
        return cluster_environment
    known = list(registry.cluster_environments)
    if isinstance(cluster_environment, str):
        name = cluster_environment.strip().lower()
        if name in registry.cluster_environments:
            return registry.cluster_environments[name]()
        raise MisconfigurationError(
            f"cluster_environment={cluster_environment!r}: this package has no cluster "
            f"environment {name!r}{did_you_mean(name, known)}; its environments: "
            f"{', '.join(known)}, or give an instance"
        )
    raise MisconfigurationError(
        f"cluster_environment={cluster_environment!r} is not allowed; give the name of a cluster "
        f"environment ({', '.join(known)}) or an instance of one"
    )


def _check_core_arguments(checkpoint_io: Any, sync_batchnorm: Any) -> None:
    """The arguments of ``get_strategy`` that take one kind of object, checked as options are
    (``check_options``): one line naming the argument and what it takes."""
    if checkpoint_io is not None and not isinstance(checkpoint_io, CheckpointIO):
        raise MisconfigurationError(
            f"checkpoint_io={checkpoint_io!r} is not allowed; expected a CheckpointIO such as "
            "TorchCheckpointIO() or AsyncCheckpointIO(), or None"
        )
    if not isinstance(sync_batchnorm, bool):
        raise MisconfigurationError(
            f"sync_batchnorm={sync_batchnorm!r} is not allowed; expected True or False"
        )


def _processes_started_per_node(
    registry: Registry,
    cls: type[StrategyBase],
    environment: ClusterEnvironmentBase | None,
    num_nodes: int,
) -> int | None:
    """Under a scheduler that started the processes (torchrun, srun, Ray, ...), how many it
    started per node (on this node, where it says: Ray places them unevenly); devices that are
    processes (CPU) then default to that number."""
    from .parallel import ParallelStrategyBase

    if not issubclass(cls, ParallelStrategyBase) or cls.one_process_per_node:
        return None  # strategies with their own notion of processes per node (DP, DDP2)
    environment = environment or registry.detect_environment(cls)
    if environment.settable or not environment.creates_processes_externally:
        return None
    try:
        local = environment.local_world_size()
        if local is not None:
            return local
        world_size = environment.world_size()
    except MisconfigurationError:
        return None
    return (
        world_size // num_nodes if world_size % num_nodes == 0 and world_size >= num_nodes else None
    )


def auto_strategy(registry: Registry, accelerator: Accelerator, processes: int) -> str:
    """What strategy='auto' means on ``accelerator``: 'single_device' for one process and
    'ddp' for several, or the first registered strategy of that kind made for the device
    (e.g. 'acme_single' and 'acme_parallel' on a device 'acme' whose spec provides them)."""
    wanted = "single_device" if processes == 1 else "parallel"
    preferred = "single_device" if wanted == "single_device" else "ddp"
    candidates: list[str] = []
    for name, entry in registry.strategies.items():
        cls = entry.cls
        if entry.preset or cls.name != name or _kind(cls) != wanted:
            continue
        if cls.accelerators and accelerator.name not in cls.accelerators:
            continue
        if not all(r.available for r in cls.requires):
            continue
        candidates.append(name)
    if preferred in candidates:
        return preferred
    if candidates:
        return candidates[0]
    raise MisconfigurationError(
        f"strategy='auto': no registered strategy runs {processes} process(es) on "
        f"{accelerator.name!r}; name one"
    )


def _kind(cls: type[StrategyBase]) -> str:
    from .parallel import ParallelStrategyBase
    from .single_device import SingleDeviceStrategyBase

    if issubclass(cls, ParallelStrategyBase):
        return "parallel"
    if issubclass(cls, SingleDeviceStrategyBase):
        return "single_device"
    return "strategy"


def _resolve_accelerator(
    registry: Registry,
    cls: type[StrategyBase],
    accelerator: str | Accelerator,
    instance: StrategyBase | None,
) -> Accelerator:
    supported = cls.accelerators
    if isinstance(accelerator, Accelerator):
        obj = accelerator
    elif accelerator == "auto":
        if instance is not None and instance.has_accelerator:
            obj = instance.accelerator
        else:
            obj = registry.default_accelerator(cls)
    elif isinstance(accelerator, str):
        name = accelerator.strip().lower()
        name = "cuda" if name == "gpu" else name
        obj = registry.accelerator_class(name)()
    else:
        raise MisconfigurationError(
            f"accelerator={accelerator!r} is not allowed; give a name or an Accelerator"
        )
    if supported and obj.name not in supported:
        raise MisconfigurationError(
            f"accelerator={obj.name!r}: {cls.__name__} runs on {', '.join(supported)}"
        )
    obj.check_available()
    return obj


def _require_precision_packages(registry: Registry, mode: str, asked: Any) -> None:
    """A precision that only plugins needing a missing package implement (FP8 through
    Transformer Engine, ...) is refused first, naming the package to install."""
    plugins = [p for p in registry.precision_plugins if mode in p.modes]
    if plugins and not any(all(r.available for r in p.requires) for p in plugins):
        require(plugins[0].requires, f"precision={asked if asked is not None else mode!r}")


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
            f"precision={shown!r}: accelerator {accelerator.name!r} supports "
            f"{', '.join(accelerator.supported_precisions)}"
        )
    refused = cls.precision_refused(mode, type(accelerator))
    if refused is not None:
        raise MisconfigurationError(refused)


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


class StrategyFactory:
    """``get_strategy`` and ``list_strategies`` of one generated package: registry names,
    accelerators and precision plugins are looked up in its [`Registry`][stratcore.registry.Registry].
    """

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def get_strategy(
        self,
        strategy: str | type[StrategyBase] | StrategyBase = "auto",
        *,
        accelerator: str | Accelerator = "auto",
        devices: int | str | Sequence[int] = "auto",
        num_nodes: int | str = 1,
        precision: str | int | None = None,
        cluster_environment: ClusterEnvironmentBase | str | None = None,
        checkpoint_io: CheckpointIO | None = None,
        sync_batchnorm: bool = False,
        **options: Any,
    ) -> StrategyBase:
        """Build a strategy ready to ``launch``.

        Args:
            strategy: A registry name in any letter case (``"ddp"``, ``"ddp_spawn"``, ``"ddp_find_unused_parameters_true"``,
                ...), ``"auto"`` (``"single_device"`` for one device, else ``"ddp"``, or the
                strategies a device's spec provides for them, such as ``"acme_parallel"``), a strategy
                class, or an instance to complete.
            accelerator: ``"auto"`` (the first available one the strategy supports), a name such
                as ``"cpu"`` or ``"cuda"`` in any letter case, or an Accelerator.
            devices: Devices per node: a number, ``"auto"``, ``-1`` for all, or a list of indices;
                also as a string (``"2"``, ``"-1"``, ``"0,1"``).
            num_nodes: Number of machines (an int, or its digits as a string).
            precision: ``"32-true"``, ``"16-mixed"``, ``"bf16-mixed"``, ``"64-true"``, ``"16-true"``,
                ``"bf16-true"`` or the short forms ``"32"``, ``"16"``, ``"bf16"``, ``"64"``; by
                default the strategy's or accelerator's default.
            cluster_environment: An environment to use instead of detecting one: an instance, or
                the name of one the package registers (``"slurm"``, ``"torchelastic"``, ...).
            checkpoint_io: A CheckpointIO to use instead of ``TorchCheckpointIO``.
            sync_batchnorm: Convert BatchNorm layers to SyncBatchNorm in ``setup``.
            **options: Options of the strategy (see its class), on top of the registry name's preset.
        """
        from .parallel import ParallelStrategyBase

        registry = self.registry
        num_nodes = _count_of_nodes(num_nodes)
        _check_core_arguments(checkpoint_io, sync_batchnorm)
        cluster_environment = _cluster_environment(registry, cluster_environment)
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
                # The abstract root stands for any strategy: every accelerator is allowed.
                probe = _resolve_accelerator(
                    registry, StrategyBase, accelerator, None  # type: ignore[type-abstract]
                )
                name = auto_strategy(registry, probe, len(probe.parse_devices(devices)) * num_nodes)
            entry = registry.strategy_entry(name)
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

        accelerator_obj = _resolve_accelerator(registry, cls, accelerator, instance)
        kind = _kind(cls)
        if kind == "parallel" and devices == "auto" and not accelerator_obj.indexed:
            devices = (
                _processes_started_per_node(registry, cls, cluster_environment, num_nodes)
                or devices
            )
        if kind == "single_device" and devices == "auto":
            devices = 1  # a single-device strategy takes the first device, however many there are
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
        _require_precision_packages(registry, mode, precision)
        _check_precision(cls, accelerator_obj, mode, precision)
        plugin = registry.select_precision_plugin(cls, accelerator_obj, mode)

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
            if not instance.has_precision_plugin or precision is not None:
                instance.precision_plugin = plugin
            if checkpoint_io is not None:
                instance.checkpoint_io = checkpoint_io
            if isinstance(instance, ParallelStrategyBase):
                if not instance.has_parallel_devices or devices != "auto":
                    instance.parallel_devices = device_list
                instance.num_nodes = num_nodes
                if cluster_environment is not None:
                    instance.cluster_environment = cluster_environment
        if isinstance(instance, ParallelStrategyBase):
            instance.cluster_environment.validate_settings(instance.num_processes, num_nodes)
        instance.validate_configuration()
        if sync_batchnorm:
            instance.layer_sync = TorchSyncBatchNorm()
        return instance

    def list_strategies(self) -> list[StrategyInfo]:
        """Every registry name with its class, preset, accelerators, launcher and backend, and
        whether it can run on this machine."""
        infos = []
        accelerators = self.registry.accelerators
        for name, entry in self.registry.strategies.items():
            cls = entry.cls
            doc = (cls.__doc__ or "").strip().splitlines()
            available = all(r.available for r in cls.requires) and any(
                accelerators[a].is_available() for a in cls.accelerators if a in accelerators
            )
            infos.append(
                StrategyInfo(
                    name=name,
                    strategy_class=cls.__name__,
                    preset=dict(entry.preset),
                    description=doc[0] if doc else "",
                    accelerators=cls.accelerators,
                    launcher=cls.launcher_class.name,
                    backend=cls.backend.name if cls.backend else "auto",
                    available=available,
                )
            )
        return infos
