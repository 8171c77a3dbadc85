"""``StrategyAdapter``: a spec's facts on a Lightning strategy, and ``register``.

A generated Lightning strategy is::

    class AcmeParallelStrategy(StrategyAdapter, lightning.pytorch.strategies.DDPStrategy):
        spec = acmelib.strategies.acme_parallel.AcmeParallelStrategy
        environments = (SLURMEnvironment, ...)   # Lightning-side, in the spec's detection order

The Lightning class after the mixin (``SingleDeviceStrategy``, ``DDPStrategy``, ``FSDPStrategy``,
``DeepSpeedStrategy``, ``ModelParallelStrategy``, ``XLAStrategy``, ... of ``lightning.pytorch``
or ``lightning.fabric``) does the training. The mixin adds what the spec knows:

- process-group backend: the spec's (or its accelerator's) backend unless the user passes
  ``process_group_backend``; the backend's ``init_hook`` runs once per process before the
  process group is created;
- reductions the backend cannot do natively (a 'mean' it lacks, dtypes it must widen) are
  emulated by ``stratcore.collectives.all_reduce``; everything else is Lightning's own;
- after every backward pass and optimizer step, the accelerator's step hooks run;
- a precision outside the spec's (and its accelerator's) supported precisions is refused when
  the Trainer or Fabric is built, and again in ``setup_environment``; mixed precision autocasts
  on the accelerator's device type (Lightning's connectors assume 'cuda' for accelerators they
  do not know);
- the cluster environment is the first of ``environments`` (the spec's detection order) that
  detects, where Lightning found none of its own (it falls back to ``LightningEnvironment``) or
  found one that comes later in that order (Lightning's SLURM environment inside a Ray worker
  started under srun): the strategy, the connector and the launcher use it alike;
- parallel strategies train on the device their environment gave them where it says (Ray's
  workers), else on their local rank's (``stratcore.parallel.choose_device``), and their samplers
  split the data over the environment's world size; DDP on a device other than CUDA is built
  without device ids (Lightning would build it inside a CUDA stream);
- a process group that exists already (Ray's, the script's own) is reused where its world
  size, ranks and backend fit, and refused in one line where they do not, left as it is.

The spec's ``default_precision`` cannot be applied: both connectors turn ``precision=None`` into
'32-true' before any strategy exists and hand the strategy only the finished plugin, so a plugin
for '32-true' the user asked for and one for no choice at all are the same. ``default_precision``
exposes the spec's default so that callers can pass it (``Trainer(precision=...)``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from . import check_lightning_version

check_lightning_version()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from lightning.fabric.plugins.environments import LightningEnvironment  # noqa: E402
from lightning.fabric.strategies import ParallelStrategy as FabricParallelStrategy  # noqa: E402
from lightning.pytorch.strategies import ParallelStrategy as TrainerParallelStrategy  # noqa: E402
from lightning.pytorch.strategies import Strategy as TrainerStrategy  # noqa: E402
from torch import nn  # noqa: E402
from torch.optim import Optimizer  # noqa: E402

from .. import collectives, process_group  # noqa: E402
from ..collectives import CollectiveBackend, normalize_reduce_op  # noqa: E402
from ..contract import DEFAULT_PRECISION, PRECISIONS  # noqa: E402
from ..exceptions import MisconfigurationError  # noqa: E402
from ..imports import import_object  # noqa: E402
from ..parallel import ParallelStrategyBase, choose_device  # noqa: E402
from ..parameter_moves import (  # noqa: E402
    follow_move,
    moves_replace_parameters,
    parameters_by_name,
)
from ..process_group import creating_process_group  # noqa: E402
from ..strategy import StrategyBase  # noqa: E402
from .accelerators import AcceleratorAdapter  # noqa: E402
from .precision import Flavour, build_precision  # noqa: E402
from .registration import register, register_accelerator, register_strategy  # noqa: E402

__all__ = ["StrategyAdapter", "register", "register_accelerator", "register_strategy"]

#: Init hooks that already ran in this process ('module:function').
_INIT_HOOKS_RUN: set[str] = set()


def refusal_on(plugin: type, device: torch.device) -> str | None:
    """Why the Lightning strategy ``plugin`` derives from cannot train on ``device``, or None.

    Lightning's FSDPStrategy wraps the model in torch's FSDP1, which flattens the module's
    Parameters in place (``Variable.set_data``): on a device whose moves replace Parameter
    objects (``parameter_moves.moves_replace_parameters``) that fails in every rank with
    "incompatible tensor type", so the plugin refuses in one line there instead."""
    lightning_bases = {b.__name__ for b in plugin.__mro__ if b.__module__.startswith("lightning.")}
    if "FSDPStrategy" in lightning_bases and moves_replace_parameters(device):
        return (
            f"{plugin.__name__}: Lightning's FSDPStrategy wraps the model in torch's FSDP1, "
            f"which needs Parameter objects kept across moves, and a move onto {device.type!r} "
            "replaces them (its backend does not register _has_compatible_shallow_copy_type); "
            "stratlib's FSDP2 strategies do not need that"
        )
    return None


class StrategyAdapter:
    """Mixin placed before a Lightning strategy class; see the module documentation.

    Generated classes set ``spec`` (the stratcore strategy class with the facts) and, for
    parallel strategies, ``environments``. The name it registers under is the spec's.
    """

    spec: ClassVar[type[StrategyBase]]
    #: The registry name: ``spec.name`` unless the class sets one of its own.
    strategy_name: ClassVar[str]
    #: Lightning-side ClusterEnvironment classes, in the spec's detection order.
    environments: ClassVar[tuple[Any, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        spec = cls.__dict__.get("spec")
        if spec is not None and spec.name and "strategy_name" not in cls.__dict__:
            cls.strategy_name = spec.name

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The backend the user asked for by name (None: the spec's).
        self._user_process_group_backend: str | None = getattr(self, "_process_group_backend", None)
        #: Whether the user gave a single-device strategy its device (its first argument).
        self._device_given = bool(args) or "device" in kwargs

    # -- the spec's facts -------------------------------------------------------------------

    @property
    def accelerator_spec(self) -> Any:
        """The stratcore accelerator behind this strategy's accelerator (None if not adapted)."""
        accelerator = getattr(self, "accelerator", None)
        if isinstance(accelerator, AcceleratorAdapter):
            return accelerator.spec_accelerator
        return None

    @property
    def supported_precisions(self) -> tuple[str, ...]:
        """Precisions the spec and its accelerator both support, in the spec's order (those
        the accelerator's probes decide, where the device here confirms them)."""
        supported = self.spec.supported_precisions
        accelerator = self.accelerator_spec
        if accelerator is not None:
            available = accelerator.available_precisions()
            supported = tuple(p for p in supported if p in available)
        return supported

    @property
    def default_precision(self) -> str:
        """The spec's default precision (its accelerator's when the spec names none)."""
        if self.spec.default_precision:
            return self.spec.default_precision
        accelerator = self.accelerator_spec
        return str(accelerator.default_precision) if accelerator is not None else DEFAULT_PRECISION

    def _spec_backend(self) -> CollectiveBackend | None:
        """The spec's backend (its accelerator's where it names none), on this device."""
        accelerator = self.accelerator_spec
        backend = self.spec.backend
        if backend is None and accelerator is not None:
            backend = accelerator.backend
        if backend is None:
            return None
        device_type = accelerator.device_type if accelerator is not None else "cpu"
        return backend.for_device(device_type)

    @property
    def collective_backend(self) -> CollectiveBackend:
        """The process-group backend in use, with what it can do natively."""
        spec_backend = self._spec_backend()
        chosen = self._user_process_group_backend
        if chosen is not None and (
            spec_backend is None
            or chosen not in (spec_backend.name, spec_backend.process_group_name)
        ):
            try:
                from ..registry import registry_of

                accelerator = self.accelerator_spec
                device_type = accelerator.device_type if accelerator is not None else "cpu"
                return registry_of(self.spec).backend(chosen).for_device(device_type)
            except MisconfigurationError:
                return CollectiveBackend(chosen)  # not known to the spec: assume it does all
        if spec_backend is not None:
            return spec_backend
        name = dist.get_backend() if dist.is_available() and dist.is_initialized() else "gloo"
        return CollectiveBackend(str(name))

    def _is_parallel(self) -> bool:
        return isinstance(self, TrainerParallelStrategy | FabricParallelStrategy)

    def _is_trainer_strategy(self) -> bool:
        return isinstance(self, TrainerStrategy)

    # -- process group ------------------------------------------------------------------------

    def _get_process_group_backend(self) -> str:
        if self._user_process_group_backend is not None or self._spec_backend() is not None:
            return self.collective_backend.process_group_name
        return str(super()._get_process_group_backend())  # type: ignore[misc]

    def _run_init_hook(self) -> None:
        """The backend's registration and init hook, once per process, before the process
        group exists."""
        backend = self.collective_backend
        backend.register()
        hook = backend.init_hook
        if hook is None or hook in _INIT_HOOKS_RUN:
            return
        if dist.is_available() and dist.is_initialized():
            return
        import_object(hook)()
        _INIT_HOOKS_RUN.add(hook)

    def setup_environment(self) -> None:
        """Check the precision, run the backend's init hook and create the process group, then
        set up as Lightning's base does."""
        self._check_precision()
        if not self._is_parallel():
            super().setup_environment()  # type: ignore[misc]
            return
        refusal = refusal_on(type(self), self.root_device)
        if refusal is not None:
            raise MisconfigurationError(refusal)
        self._check_existing_group()
        self._run_init_hook()
        # Lightning creates the group here. As around stratcore's own strategies, modules that
        # keep the default group as an argument default (the spec's engine's among them) are
        # imported before it exists, and the group is destroyed at exit, so gloo's threads do
        # not abort the interpreter's shutdown.
        modules = getattr(self.spec, "group_default_modules", None)
        with creating_process_group(modules or ParallelStrategyBase.group_default_modules):
            self._setup_lightning_environment()

    def _check_existing_group(self) -> None:
        """A group that exists already (Ray Train's, the script's own, an earlier fit's) is
        Lightning's to reuse only where it fits: else refused, and left as it is."""
        existing = process_group.existing_group()
        if existing is None:
            return
        backend = self._get_process_group_backend()
        world_size, rank = self.world_size, self.global_rank  # type: ignore[attr-defined]
        if (existing[1], existing[2]) == (world_size, rank) and process_group.backend_serves(
            existing[0], backend
        ):
            return
        environment = getattr(self, "cluster_environment", None)
        process_group.refuse_existing_group(
            type(self).__name__,
            backend,
            world_size,
            rank,
            environment=type(environment).__name__ if environment is not None else None,
        )

    def _setup_lightning_environment(self) -> None:
        """Lightning's ``setup_environment`` (which creates the process group)."""
        super().setup_environment()  # type: ignore[misc]

    # -- moves that replace parameters (Fabric) ---------------------------------------------

    def module_to_device(self, module: nn.Module) -> None:
        """Fabric: Lightning's move, remembering the parameters it replaced. A move onto a
        device whose tensors cannot take a CPU tensor's place (torch_xla's, a PrivateUse1
        device without ``_has_compatible_shallow_copy_type``) gives the module new Parameter
        objects, and Fabric points the optimizers at them only for its XLAStrategy
        (``lightning/fabric/fabric.py``, ``_move_model_to_device``): elsewhere the optimizer
        made before ``setup`` would step tensors the model no longer uses, silently."""
        before = parameters_by_name(module)
        super().module_to_device(module)  # type: ignore[misc]
        after = parameters_by_name(module)
        if any(after.get(name) is not parameter for name, parameter in before.items()):
            self.__dict__.setdefault("_replaced_by_moves", []).append((module, before))

    def setup_optimizer(self, optimizer: Optimizer) -> Optimizer:
        """Fabric: the optimizer follows the moves that replaced its parameters (see
        ``module_to_device``), as stratlib's strategies' optimizers do (``parameter_moves``),
        then Lightning sets it up."""
        self._follow_moves([optimizer])
        return super().setup_optimizer(optimizer)  # type: ignore[misc]

    def _follow_moves(self, optimizers: list[Optimizer]) -> None:
        """Point ``optimizers`` at the Parameters the moves ``module_to_device`` saw replace."""
        for module, before in self.__dict__.get("_replaced_by_moves", ()):
            follow_move(module, before, optimizers)

    # -- what the connector hands over ----------------------------------------------------------

    def _configure_launcher(self) -> None:
        """Called by Lightning's connector once accelerator, precision and cluster environment
        are set: apply the spec's backend and precision rules before the launcher exists."""
        if (
            self._is_parallel()
            and getattr(self, "_process_group_backend", "") is None
            and self._spec_backend() is not None
        ):
            setattr(  # noqa: B010
                self, "_process_group_backend", self.collective_backend.process_group_name
            )
        self._adapt_precision()
        self._check_precision()
        self._place_on_accelerator()
        accelerator = getattr(self, "accelerator", None)
        if isinstance(accelerator, AcceleratorAdapter):
            accelerator.adapted_strategy = True
        super()._configure_launcher()  # type: ignore[misc]

    def _place_on_accelerator(self) -> None:
        """A single-device strategy given no device (as the Trainer and Fabric build one from
        its registry name) runs on its accelerator's first device: Lightning's own default is
        the CPU, whatever the accelerator."""
        if self._is_parallel() or self._device_given:
            return
        accelerator = getattr(self, "accelerator", None)
        if isinstance(accelerator, AcceleratorAdapter):
            spec = accelerator.spec
            self._root_device = spec.get_parallel_devices(spec.parse_devices(1))[0]

    @property
    def cluster_environment(self) -> Any:
        """The cluster environment detected from the spec's list, in its order."""
        try:
            return self.__dict__["_adapter_cluster_environment"]
        except KeyError:  # single-device strategies have none (hasattr() says so)
            raise AttributeError(f"{type(self).__name__} has no cluster environment") from None

    @cluster_environment.setter
    def cluster_environment(self, environment: Any) -> None:
        self.__dict__["_adapter_cluster_environment"] = self._choose_environment(environment)

    def _choose_environment(self, environment: Any) -> Any:
        """Lightning's fallback (LightningEnvironment) gives way to the spec's environments, and
        an environment Lightning detected itself to those that come before it in the spec's
        order (by class name: the spec's SLURMEnvironment stands for Lightning's)."""
        if type(environment) is LightningEnvironment:
            candidates = self.environments
        elif type(environment).__module__.startswith("lightning."):
            names = [candidate.__name__ for candidate in self.environments]
            found = type(environment).__name__
            candidates = self.environments[: names.index(found)] if found in names else ()
        else:  # the user's
            candidates = ()
        for candidate in candidates:
            try:
                detected = candidate.detect()
            except NotImplementedError:  # Lightning's Kubeflow is never detected by itself
                continue
            if detected:
                return candidate()
        return environment

    # -- layout ---------------------------------------------------------------------------------

    @property
    def root_device(self) -> torch.device:
        """Parallel strategies whose cluster environment gave the process a device (Ray's
        workers): that device where it is one of theirs, else the one at the local rank
        (``stratcore.parallel.choose_device``; a worker that sees its own device alone has
        one). Everywhere else, Lightning's."""
        devices = getattr(self, "parallel_devices", None) if self._is_parallel() else None
        says = getattr(getattr(self, "cluster_environment", None), "device", None)
        given = says() if callable(says) else None
        if not devices or given is None:
            return super().root_device  # type: ignore[misc]
        local_rank: int = self.local_rank  # type: ignore[attr-defined]
        return choose_device(devices, given, local_rank)

    @property
    def distributed_sampler_kwargs(self) -> Any:
        """Lightning's, split over the environment's world size where Lightning counts
        ``num_nodes * num_processes`` and the environment started another number (Ray places
        workers on nodes itself, each seeing its own device)."""
        kwargs = super().distributed_sampler_kwargs  # type: ignore[misc]
        if not (self._is_parallel() and isinstance(kwargs, dict)):
            return kwargs
        counted = self.num_nodes * self.num_processes  # type: ignore[attr-defined]
        world_size: int = self.world_size  # type: ignore[attr-defined]
        if kwargs.get("num_replicas") == counted != world_size:
            return {**kwargs, "num_replicas": world_size}
        return kwargs

    # -- precision --------------------------------------------------------------------------

    @property
    def _precision_attribute(self) -> str:
        return "precision_plugin" if self._is_trainer_strategy() else "precision"

    def _adapt_precision(self) -> None:
        """Mixed precision autocasts on the accelerator's device type."""
        accelerator = self.accelerator_spec
        plugin = getattr(self, self._precision_attribute, None)
        if accelerator is None or plugin is None or type(plugin).__name__ != "MixedPrecision":
            return
        if getattr(plugin, "device", accelerator.device_type) == accelerator.device_type:
            return
        flavour: Flavour = "pytorch" if self._is_trainer_strategy() else "fabric"
        rebuilt = build_precision(plugin.precision, "none", flavour, accelerator.device_type)
        if type(rebuilt) is type(plugin) and getattr(plugin, "scaler", None) is None:
            setattr(self, self._precision_attribute, rebuilt)
        elif type(rebuilt) is type(plugin):
            rebuilt.scaler = plugin.scaler
            setattr(self, self._precision_attribute, rebuilt)

    def _check_precision(self) -> None:
        plugin = getattr(self, self._precision_attribute, None)
        name = getattr(plugin, "precision", None)
        if name is None:
            return
        supported = self.supported_precisions
        if name in supported or (name not in PRECISIONS and name in self.spec.supported_precisions):
            return
        accelerator = self.accelerator_spec
        refused = accelerator.precision_refused(name) if accelerator is not None else None
        if refused is not None and name in self.spec.supported_precisions:
            raise MisconfigurationError(f"strategy {self.strategy_name!r}: {refused}")
        raise MisconfigurationError(
            f"strategy {self.strategy_name!r} does not support precision={name!r}; it supports "
            f"{', '.join(repr(p) for p in supported) or 'none'} (default {self.default_precision!r})"
        )

    # -- collectives -----------------------------------------------------------------------

    def _needs_emulation(self, tensor: torch.Tensor, reduce_op: Any) -> bool:
        backend = self.collective_backend
        op = normalize_reduce_op("sum" if reduce_op is None else reduce_op)
        if op not in backend.reduce_ops or backend.cast_for(tensor.dtype) is not None:
            return True
        return op == "mean" and not (tensor.is_floating_point() or tensor.is_complex())

    def _reduce(self, tensor: Any, group: Any, reduce_op: Any) -> Any:
        if (
            isinstance(tensor, torch.Tensor)
            and self._is_parallel()
            and dist.is_available()
            and dist.is_initialized()
            and self._needs_emulation(tensor, reduce_op)
        ):
            op = "sum" if reduce_op is None else reduce_op
            return collectives.all_reduce(tensor, op, self.collective_backend, group)
        return None

    def reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        """Trainer strategies: reductions the backend cannot do are emulated; the rest is
        Lightning's (non-tensors come back unchanged, single processes reduce nothing)."""
        result = self._reduce(tensor, group, reduce_op)
        if result is not None:
            return result
        return super().reduce(tensor, group=group, reduce_op=reduce_op)  # type: ignore[misc]

    def all_reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        """Fabric strategies: as ``reduce``."""
        result = self._reduce(tensor, group, reduce_op)
        if result is not None:
            return result
        return super().all_reduce(tensor, group=group, reduce_op=reduce_op)  # type: ignore[misc]

    # -- steps -----------------------------------------------------------------------------

    def _step_hook(self, name: str) -> None:
        accelerator = getattr(self, "accelerator", None)
        if isinstance(accelerator, AcceleratorAdapter):
            getattr(accelerator, name)()

    def backward(self, *args: Any, **kwargs: Any) -> Any:
        """Lightning's backward (Trainer: closure_loss, optimizer, ...; Fabric: tensor, module,
        ...), then the accelerator's after-backward hook."""
        result = super().backward(*args, **kwargs)  # type: ignore[misc]
        self._step_hook("after_backward")
        return result

    def optimizer_step(self, *args: Any, **kwargs: Any) -> Any:
        """Lightning's optimizer step, then the accelerator's after-step hook."""
        result = super().optimizer_step(*args, **kwargs)  # type: ignore[misc]
        self._step_hook("after_optimizer_step")
        return result

    # -- registration ----------------------------------------------------------------------

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Register under ``strategy_name`` (aliases with presets: see ``register``)."""
        register_strategy(strategy_registry, cls.strategy_name, cls, {})
