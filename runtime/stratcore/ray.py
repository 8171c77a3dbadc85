"""Ray Train for a generated package's strategies: what a ``TorchTrainer`` needs so that a train
function that builds a strategy runs unchanged in Ray's workers.

Ray Train starts the workers, gives each one its devices (a resource per worker) and creates the
process group before the train function runs; there, ``get_strategy(...)`` detects the ``ray``
cluster environment, takes Ray's layout and reuses the group. What Ray cannot know comes from
the spec:

- ``torch_config``: a ``TorchConfig`` whose backend is the strategy's (its accelerator's where
  it names none), under the name torch.distributed knows it by, and whose workers make that
  backend known to torch before Ray creates the group: each imports the module that registers
  it (the backend's ``registered_by``) and runs its ``init_hook``, once a process;
- ``scaling_config``: the accelerator's Ray resource (``ray_resource``: 'GPU', a resource of
  another accelerator Ray knows, or a custom resource the cluster declares), one per worker;
- ``trainer_kwargs``: both, as ``TorchTrainer``'s keyword arguments.

A generated package binds them to its registry as its ``ray`` module::

    from ray.train.torch import TorchTrainer
    from stratlib.ray import trainer_kwargs

    def train(config):
        strategy = stratlib.get_strategy("acme_ddp")   # Ray's ranks, devices and group
        ...

    TorchTrainer(train, **trainer_kwargs("acme_ddp", workers=8)).fit()

Ray is an optional dependency (``pip install "stratcore[ray]"``): this module imports it only
when a function needs it, and the workers import this module to set themselves up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, Any

from .collectives import CollectiveBackend
from .exceptions import MisconfigurationError
from .imports import import_object, import_optional, require

if TYPE_CHECKING:
    from .accelerator import Accelerator
    from .registry import Registry
    from .strategy import StrategyBase

__all__ = ["RayTrain", "prepare_worker"]

#: What to install for this module.
INSTALL = 'pip install "stratcore[ray]" (Ray Train)'

#: Init hooks that already ran in this process ('module:function').
_INIT_HOOKS_RUN: set[str] = set()


def prepare_worker(backend: CollectiveBackend, accelerator: type[Accelerator] | None) -> str:
    """In a Ray worker, before Ray creates the process group: make ``backend`` known to
    torch.distributed (import the module that registers it, run its init hook once a process)
    and return the name ``init_process_group`` takes for it on ``accelerator``'s devices, as
    this worker finds them (an accelerator for whichever device torch finds has its device
    type here, not on the driver). Missing packages are a one-line error naming what to
    install."""
    require(backend.requires, f"backend {backend.name!r}")
    backend.register()
    hook = backend.init_hook
    if hook is not None and hook not in _INIT_HOOKS_RUN:
        import_object(hook)()
        _INIT_HOOKS_RUN.add(hook)
    device_type = accelerator.device_type if accelerator is not None else "cpu"
    return backend.for_device(device_type).process_group_name


@cache
def _config_class() -> type[Any]:
    """``TorchConfig`` with the spec's backend, whose backend prepares every worker first.

    Ray Train runs its torch backend's ``on_start`` before it creates the process group, in
    Train V2 and V1 alike; it is the one place where code of ours runs on every worker in
    time. The backend class is taken from ``TorchConfig().backend_cls``.
    """
    torch_train = import_optional("ray.train.torch", "stratcore.ray", INSTALL)
    ray_config: Any = torch_train.TorchConfig
    ray_backend: Any = ray_config().backend_cls

    class SpecTorchBackend(ray_backend):
        """Ray's torch backend, with each worker prepared (``prepare_worker``) before the
        group is created with the name the workers found for the spec's backend."""

        def on_start(self, worker_group: Any, backend_config: Any) -> None:
            names = worker_group.execute(
                prepare_worker, backend_config.spec_backend, backend_config.accelerator
            )
            if len(set(names)) > 1:
                raise MisconfigurationError(
                    f"backend {backend_config.spec_backend.name!r} has different names on "
                    f"Ray's workers ({', '.join(sorted(set(names)))}); their torch installs differ"
                )
            backend_config.backend = names[0]
            super().on_start(worker_group, backend_config)

    @dataclasses.dataclass
    class SpecTorchConfig(ray_config):
        """``TorchConfig`` whose backend is a spec's: ``backend`` holds the name
        torch.distributed knows it by (None until the workers say it, for backends taken from
        torch's device map); ``spec_backend`` is the backend with what it needs, and
        ``accelerator`` the accelerator whose devices it serves."""

        spec_backend: CollectiveBackend = dataclasses.field(
            default_factory=lambda: CollectiveBackend("gloo")
        )
        accelerator: type[Accelerator] | None = None

        @property
        def backend_cls(self) -> type[Any]:
            return SpecTorchBackend

    # Named as users read it ('SpecTorchConfig(backend=...)'); Ray pickles both classes by
    # value, since the module has no attribute of that name.
    SpecTorchBackend.__qualname__ = "SpecTorchBackend"
    SpecTorchConfig.__qualname__ = "SpecTorchConfig"
    return SpecTorchConfig


class RayTrain:
    """``torch_config``, ``scaling_config`` and ``trainer_kwargs`` for the strategies of one
    generated package (its ``Registry``); see the module documentation.

    ``strategy`` is a registry name, a strategy class or a strategy; ``accelerator`` is
    ``"auto"`` (the strategy's one accelerator, or the first of its accelerators available on
    this machine: name it where the driver does not have the workers' devices), a name or an
    Accelerator. ``process_group_backend`` names another backend, as the strategy option of
    that name does; the train function must then pass the same option.
    """

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    # -- what the strategy says -----------------------------------------------------------------

    def _strategy_class(self, strategy: str | type[StrategyBase] | StrategyBase) -> type[Any]:
        from .strategy import StrategyBase

        if isinstance(strategy, StrategyBase):
            return type(strategy)
        if isinstance(strategy, type) and issubclass(strategy, StrategyBase):
            return strategy
        if isinstance(strategy, str):
            return self.registry.strategy_entry(strategy.strip().lower()).cls
        raise MisconfigurationError(
            f"strategy={strategy!r} is not allowed; give a registry name, a strategy class or a strategy"
        )

    def _accelerator(
        self, cls: type[Any], strategy: Any, accelerator: str | Accelerator
    ) -> type[Accelerator]:
        from .accelerator import Accelerator
        from .strategy import StrategyBase

        supported = tuple(cls.accelerators) or tuple(self.registry.accelerators)
        if isinstance(accelerator, Accelerator):
            chosen: type[Accelerator] = type(accelerator)
        elif accelerator == "auto":
            if isinstance(strategy, StrategyBase) and strategy.has_accelerator:
                return type(strategy.accelerator)
            if len(supported) == 1:
                return self.registry.accelerator_class(supported[0])
            chosen = type(self.registry.default_accelerator(cls))
        elif isinstance(accelerator, str):
            name = accelerator.strip().lower()
            chosen = self.registry.accelerator_class("cuda" if name == "gpu" else name)
        else:
            raise MisconfigurationError(
                f"accelerator={accelerator!r} is not allowed; give a name or an Accelerator"
            )
        if chosen.name not in supported:
            raise MisconfigurationError(
                f"accelerator={chosen.name!r}: {cls.__name__} runs on {', '.join(supported)}"
            )
        return chosen

    def backend(
        self,
        strategy: str | type[StrategyBase] | StrategyBase = "ddp",
        *,
        accelerator: str | Accelerator = "auto",
        process_group_backend: str | None = None,
    ) -> CollectiveBackend:
        """The collective backend the strategy's process group uses on its accelerator (as
        declared: a backend taken from torch's device map is resolved in the workers)."""
        cls = self._strategy_class(strategy)
        accelerator_cls = self._accelerator(cls, strategy, accelerator)
        backend: CollectiveBackend = cls.backend or accelerator_cls.backend
        chosen = process_group_backend
        if chosen is None:
            chosen = getattr(strategy, "process_group_backend", None)
        if chosen is not None and chosen not in (backend.name, backend.torch_name):
            if chosen not in self.registry.known_backends():
                known = ", ".join(self.registry.known_backends())
                raise MisconfigurationError(
                    f"process_group_backend={chosen!r} is not a collective backend; use one of {known}"
                )
            backend = self.registry.backend(chosen)
        return backend

    # -- Ray's configurations -------------------------------------------------------------------

    def torch_config(
        self,
        strategy: str | type[StrategyBase] | StrategyBase = "ddp",
        *,
        accelerator: str | Accelerator = "auto",
        process_group_backend: str | None = None,
        timeout_s: int | None = None,
    ) -> Any:
        """A ``ray.train.torch.TorchConfig`` whose process group has the strategy's backend,
        made known to torch in every worker before Ray creates the group. ``timeout_s``: how
        long collectives wait, by default the strategy's ``timeout`` (Ray's group keeps it)."""
        cls = self._strategy_class(strategy)
        accelerator_cls = self._accelerator(cls, strategy, accelerator)
        backend = self.backend(
            strategy, accelerator=accelerator, process_group_backend=process_group_backend
        )
        if timeout_s is None:
            timeout_s = int(getattr(strategy, "timeout", getattr(cls, "timeout", 1800)))
        config = _config_class()
        return config(
            backend=None if backend.from_device_map else backend.process_group_name,
            timeout_s=timeout_s,
            spec_backend=backend,
            accelerator=accelerator_cls,
        )

    def resources_per_worker(
        self,
        strategy: str | type[StrategyBase] | StrategyBase = "ddp",
        *,
        accelerator: str | Accelerator = "auto",
    ) -> dict[str, float]:
        """What each worker asks of Ray: one of the accelerator's Ray resource, or one CPU for
        devices that are processes. An accelerator whose spec names no resource is refused."""
        cls = self._strategy_class(strategy)
        accelerator_cls = self._accelerator(cls, strategy, accelerator)
        resource = accelerator_cls.ray_resource
        if resource is not None:
            return {resource: 1}
        if not accelerator_cls.indexed or accelerator_cls.device_count_hook is None:
            return {"CPU": 1}
        raise MisconfigurationError(
            f"accelerator {accelerator_cls.name!r} names no Ray resource for its devices; "
            "set ray_resource in its spec (a custom resource the Ray cluster declares), or "
            "pass resources_per_worker"
        )

    def scaling_config(
        self,
        strategy: str | type[StrategyBase] | StrategyBase = "ddp",
        *,
        workers: int,
        accelerator: str | Accelerator = "auto",
        resources_per_worker: Mapping[str, float] | None = None,
        **scaling: Any,
    ) -> Any:
        """A ``ray.train.ScalingConfig`` of ``workers`` workers, each with one device of the
        strategy's accelerator (``resources_per_worker``: others; ``scaling``: the rest of
        ``ScalingConfig``'s arguments, ``placement_strategy`` for one)."""
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise MisconfigurationError(
                f"workers={workers!r} is not allowed; use a positive number"
            )
        if resources_per_worker is None:
            resources = self.resources_per_worker(strategy, accelerator=accelerator)
        else:
            resources = dict(resources_per_worker)
        train = import_optional("ray.train", "stratcore.ray", INSTALL)
        return train.ScalingConfig(
            num_workers=workers,
            use_gpu=resources.get("GPU", 0) > 0,
            resources_per_worker=resources,
            **scaling,
        )

    def trainer_kwargs(
        self,
        strategy: str | type[StrategyBase] | StrategyBase = "ddp",
        *,
        workers: int,
        accelerator: str | Accelerator = "auto",
        process_group_backend: str | None = None,
        timeout_s: int | None = None,
        resources_per_worker: Mapping[str, float] | None = None,
        **scaling: Any,
    ) -> dict[str, Any]:
        """``torch_config`` and ``scaling_config``, as the keyword arguments of
        ``TorchTrainer(train, **trainer_kwargs("acme_ddp", workers=8))``."""
        return {
            "torch_config": self.torch_config(
                strategy,
                accelerator=accelerator,
                process_group_backend=process_group_backend,
                timeout_s=timeout_s,
            ),
            "scaling_config": self.scaling_config(
                strategy,
                workers=workers,
                accelerator=accelerator,
                resources_per_worker=resources_per_worker,
                **scaling,
            ),
        }
