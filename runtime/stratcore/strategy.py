"""The base of every strategy.

A strategy composes an Accelerator, a precision plugin and a CheckpointIO (parallel strategies
add a ClusterEnvironment). It launches the training processes, sets up communication, owns the
model and its optimizers, and offers one collective interface: ``reduce``, ``all_gather``,
``broadcast``, ``barrier`` and ``reduce_boolean_decision``.

Generated strategy classes derive from this class through the bases that choose the topology
(``SingleDeviceStrategyBase``, ``ParallelStrategyBase``) and the model wrapper
(``DDPStrategyBase``, ``FSDPStrategyBase``, ``DeepSpeedStrategyBase``, ...). Their class
attributes carry the facts of their spec.
"""

from __future__ import annotations

import contextlib
import sys
from abc import abstractmethod
from collections.abc import Callable, Generator, Mapping
from types import ModuleType
from typing import Any, ClassVar

import torch
from torch import nn
from torch.optim import Optimizer

from .accelerator import Accelerator
from .checkpoints.io import CheckpointIO, TorchCheckpointIO
from .checkpoints.state import CheckpointingBase
from .collectives import CollectiveBackend
from .contract import PRECISIONS
from .exceptions import MisconfigurationError
from .imports import Requirement, require
from .launchers import InlineLauncher, Launcher
from .layer_sync import LayerSync
from .parameter_moves import follow_move, parameters_by_name
from .precision.base import PrecisionBase
from .registry import registry_of


class StrategyBase(CheckpointingBase):
    """Base class of all strategies; see the module documentation (checkpoints:
    ``CheckpointingBase``)."""

    #: Registry name of the strategy (None for abstract bases).
    name: ClassVar[str | None] = None
    #: How the model is wrapped: 'none', 'ddp', 'fsdp', 'deepspeed', ...; each wrapper base
    #: declares its own.
    wrapper: ClassVar[str] = "none"
    #: How processes start: the launcher class, made with the strategy into ``launcher``.
    launcher_class: ClassVar[type[Launcher]] = InlineLauncher
    #: Whether one process per node drives every device of the node (a single-device
    #: strategy's one process; DataParallel) rather than one process per device.
    one_process_per_node: ClassVar[bool] = True
    #: Collective backend; None to use the accelerator's.
    backend: ClassVar[CollectiveBackend | None] = None
    default_precision: ClassVar[str | None] = None
    supported_precisions: ClassVar[tuple[str, ...]] = PRECISIONS
    #: Cluster environments in detection order.
    cluster: ClassVar[tuple[str, ...]] = ()
    #: Accelerators the strategy runs on, in order of preference.
    accelerators: ClassVar[tuple[str, ...]] = ()
    requires: ClassVar[tuple[Requirement, ...]] = ()
    #: Module of hand-written hooks called at named points (see ``call_hook``): the module
    #: object itself.
    hooks: ClassVar[ModuleType | None] = None

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: PrecisionBase | None = None,
    ) -> None:
        require(self.requires, f"{type(self).__name__}")
        self._accelerator = accelerator
        self._checkpoint_io = checkpoint_io
        self._precision_plugin = precision_plugin
        self._launcher: Launcher | None = None
        self._model: nn.Module | None = None
        self._optimizers: list[Optimizer] = []
        self._layer_sync: LayerSync | None = None
        self._environment_ready = False
        self._forward_hooks: list[Any] = []

    # -- composition ---------------------------------------------------------------------

    @property
    def accelerator(self) -> Accelerator:
        """The strategy's accelerator, built from the registry on first use."""
        if self._accelerator is None:
            self._accelerator = self._default_accelerator()
        return self._accelerator

    @accelerator.setter
    def accelerator(self, accelerator: Accelerator) -> None:
        self._accelerator = accelerator

    def _default_accelerator(self) -> Accelerator:
        return registry_of(type(self)).default_accelerator(type(self))

    @property
    def has_accelerator(self) -> bool:
        """Whether an accelerator was given or chosen already (else ``accelerator`` chooses the
        first available one on first use)."""
        return self._accelerator is not None

    @property
    def has_precision_plugin(self) -> bool:
        """Whether a precision plugin was given or chosen already (else ``precision_plugin``
        chooses one on first use)."""
        return self._precision_plugin is not None

    @property
    def precision_plugin(self) -> PrecisionBase:
        """The precision plugin chosen for the precision, wrapper and accelerator, built on first
        use."""
        if self._precision_plugin is None:
            precision = self.default_precision or self.accelerator.default_precision
            self._precision_plugin = registry_of(type(self)).select_precision_plugin(
                type(self), self.accelerator, precision
            )
        return self._precision_plugin

    @precision_plugin.setter
    def precision_plugin(self, plugin: PrecisionBase) -> None:
        self._precision_plugin = plugin

    @property
    def checkpoint_io(self) -> CheckpointIO:
        if self._checkpoint_io is None:
            self._checkpoint_io = TorchCheckpointIO()
        return self._checkpoint_io

    @checkpoint_io.setter
    def checkpoint_io(self, io: CheckpointIO) -> None:
        self._checkpoint_io = io

    @property
    def layer_sync(self) -> LayerSync | None:
        """What converts the model's batch norms for synchronisation (``sync_batchnorm=True``),
        if anything."""
        return self._layer_sync

    @layer_sync.setter
    def layer_sync(self, layer_sync: LayerSync | None) -> None:
        self._layer_sync = layer_sync

    @property
    def cluster_environment(self) -> Any:
        """The cluster environment (None for strategies that use a single process)."""
        return None

    @property
    def launcher(self) -> Launcher:
        """The strategy's launcher (Lightning's name), made from ``launcher_class`` on first
        use."""
        if self._launcher is None:
            self._launcher = self.launcher_class(self)
        return self._launcher

    @property
    def model(self) -> nn.Module | None:
        """The model as set up by ``setup`` (wrapped for the backend)."""
        return self._model

    @model.setter
    def model(self, model: nn.Module | None) -> None:
        self._model = model

    @property
    def optimizers(self) -> list[Optimizer]:
        return self._optimizers

    @optimizers.setter
    def optimizers(self, optimizers: list[Optimizer]) -> None:
        self._optimizers = list(optimizers)

    @property
    def lightning_module(self) -> nn.Module | None:
        """The user's module inside any wrapper (the name Lightning's strategies give it)."""
        return self.unwrap(self._model) if self._model is not None else None

    # -- devices and ranks ---------------------------------------------------------------

    @property
    @abstractmethod
    def root_device(self) -> torch.device:
        """The device this process trains on."""

    @property
    def global_rank(self) -> int:
        """This process's rank: 0, in a strategy of one process (and so its local and node
        rank)."""
        return 0

    local_rank = node_rank = global_rank

    @property
    def world_size(self) -> int:
        """Number of processes in the job (1 for a single device)."""
        return 1

    @property
    def is_global_zero(self) -> bool:
        return self.global_rank == 0

    @property
    def parallel_devices(self) -> list[torch.device]:
        """The devices of this node's processes."""
        return [self.root_device]

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        """Arguments for ``torch.utils.data.DistributedSampler``."""
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    # -- launching and environment -------------------------------------------------------

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``function(strategy, *args, **kwargs)`` in every training process.

        Returns rank 0's return value. If any process fails, every process is stopped and the
        failure is raised here (as ``ProcessFailedError`` when another process failed).
        """
        return self.launcher.launch(function, *args, **kwargs)

    def run_worker(
        self, function: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> Any:
        """Run one process's share of ``launch``: set up, call ``function``, tear down."""
        self.setup_environment()
        try:
            result = function(self, *args, **kwargs)
            # No process may close its connections while another is still communicating.
            self.barrier("teardown")
            return result
        finally:
            self.teardown()

    @classmethod
    def precision_refused(cls, precision: str, accelerator: type[Accelerator]) -> str | None:
        """Why this strategy cannot train in ``precision`` (one it and ``accelerator`` support)
        on this machine, or None if it can: by default the accelerator's probes decide
        (``Accelerator.precision_refused``); wrappers with limits of their own add them."""
        return accelerator.precision_refused(precision)

    def validate_configuration(self) -> None:
        """Check option values that their types alone do not rule out; raises
        MisconfigurationError naming the option. Called by ``get_strategy`` and again before
        a process starts using the strategy, for strategies constructed directly."""
        return None

    def setup_environment(self) -> None:
        """Prepare this process: claim the device (parallel strategies also connect)."""
        if self._environment_ready:
            return
        self.validate_configuration()
        self.accelerator.check_available()
        self.accelerator.setup_device(self.root_device)
        self.precision_plugin.connect(self.root_device, self.accelerator.grad_scaler)
        self.call_hook("setup_environment")
        self._environment_ready = True

    # -- model and optimizers ------------------------------------------------------------

    def setup(self, module: nn.Module, *optimizers: Optimizer) -> Any:
        """Convert, move and wrap ``module`` and set up ``optimizers``; the strategy owns them.

        ``optimizers`` made from the module before train the parameters the moved module holds
        (pointed at new Parameter objects where the move made some, as moves onto XLA devices
        do), and the state they hold follows the parameters' device and dtype (see
        ``parameter_moves``).

        Returns the wrapped module, or the module and the optimizers as a tuple when
        optimizers are given. A module compiled with ``torch.compile`` is set up without its
        compiled wrapper and compiled again once wrapped (in place, ``nn.Module.compile`` with
        torch.compile's default options), so that the compiled code includes the wrapper.
        """
        self.setup_environment()
        module, compiled = _uncompiled(module)
        before = parameters_by_name(module)
        module = self.precision_plugin.convert_module(module)
        if self._layer_sync is not None:
            self._layer_sync.check_supported(
                module, self.root_device, self.world_size, self.accelerator
            )
            module = self._layer_sync.apply(module)
        module = self.model_to_device(module)
        # A move onto some devices (XLA's) gives the module new Parameter objects.
        follow_move(module, before, optimizers)
        hook = self.hook("setup")
        if hook is not None:
            module, optimizer_list = hook(self, module, list(optimizers))
        else:
            module, optimizer_list = self.setup_module_and_optimizers(module, list(optimizers))
        self._install_precision_forward(module)
        if compiled:
            module.compile()
        self._model = module
        self._optimizers = list(optimizer_list)
        return (module, *optimizer_list) if optimizers else module

    def setup_module_and_optimizers(
        self, module: nn.Module, optimizers: list[Optimizer]
    ) -> tuple[nn.Module, list[Optimizer]]:
        """Wrap the module for the backend; the wrapper bases override this."""
        return module, optimizers

    def model_to_device(self, module: nn.Module) -> nn.Module:
        """Move ``module`` to the process's device."""
        return module.to(self.root_device)

    def _install_precision_forward(self, module: nn.Module) -> None:
        """Run every forward pass inside the precision plugin's context, inputs converted."""
        plugin = self.precision_plugin
        if not plugin.wraps_forward:
            return
        contexts: list[Any] = []

        def before(_: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            context = plugin.forward_context()
            context.__enter__()
            contexts.append(context)
            return plugin.convert_input(args), plugin.convert_input(kwargs)

        def after(_: nn.Module, args: Any, kwargs: Any, output: Any) -> Any:
            if contexts:
                contexts.pop().__exit__(None, None, None)
            return plugin.convert_output(output)

        self._forward_hooks = [
            module.register_forward_pre_hook(before, with_kwargs=True),
            module.register_forward_hook(after, with_kwargs=True, always_call=True),
        ]

    @staticmethod
    def unwrap(module: nn.Module) -> nn.Module:
        """The user's module inside DDP, DataParallel or similar wrappers."""
        while hasattr(module, "module") and isinstance(module.module, nn.Module):
            module = module.module
        return module

    # -- training steps ------------------------------------------------------------------

    def backward(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Backpropagate ``tensor`` (scaled by the precision plugin where needed)."""
        tensor = self.precision_plugin.pre_backward(tensor)
        hook = self.hook("backward")
        if hook is not None:
            hook(self, tensor, *args, **kwargs)
        else:
            self._backward(tensor, *args, **kwargs)
        self.accelerator.after_backward()

    def _backward(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        self.precision_plugin.backward(tensor, *args, **kwargs)

    def optimizer_step(
        self, optimizer: Optimizer | None = None, *, zero_grad: bool = True, **kwargs: Any
    ) -> Any:
        """Step ``optimizer`` (the first one set up by default), then clear its gradients.

        Pass ``zero_grad=False`` to keep gradients, e.g. to inspect them.
        """
        if optimizer is None:
            if not self._optimizers:
                raise MisconfigurationError(
                    "optimizer_step() needs an optimizer: pass one or set it up with setup()"
                )
            optimizer = self._optimizers[0]
        hook = self.hook("optimizer_step")
        result = (
            hook(self, optimizer, **kwargs)
            if hook is not None
            else self._optimizer_step(optimizer, **kwargs)
        )
        self.accelerator.after_optimizer_step()
        if zero_grad:
            self._zero_grad(optimizer)
        return result

    def _optimizer_step(self, optimizer: Optimizer, **kwargs: Any) -> Any:
        return self.precision_plugin.optimizer_step(optimizer, **kwargs)

    def _zero_grad(self, optimizer: Optimizer) -> None:
        """Clear ``optimizer``'s gradients after its step (to None: nothing is kept)."""
        optimizer.zero_grad(set_to_none=True)

    def clip_gradients(
        self, module: nn.Module, optimizer: Optimizer, max_norm: float
    ) -> torch.Tensor:
        """Clip the gradient norm of ``module``'s parameters to ``max_norm``."""
        return self.precision_plugin.clip_gradients(module.parameters(), optimizer, max_norm)

    @contextlib.contextmanager
    def block_backward_sync(self) -> Generator[None, None, None]:
        """Skip gradient synchronisation in backward passes inside this block (for gradient
        accumulation); the first backward after the block synchronises again."""
        yield

    # -- collectives ---------------------------------------------------------------------

    @abstractmethod
    def reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        """Reduce ``tensor`` over all processes ('mean', 'sum', 'min', 'max', 'product')."""

    @abstractmethod
    def all_gather(
        self, tensor: torch.Tensor, group: Any = None, sync_grads: bool = False
    ) -> torch.Tensor:
        """Gather ``tensor`` from all processes into a new leading dimension."""

    @abstractmethod
    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """Send ``obj`` from rank ``src`` to every process and return it."""

    @abstractmethod
    def barrier(self, name: str | None = None) -> None:
        """Wait until every process reaches this point."""

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """Combine a decision of every process: ``all`` (default) or ``any``."""
        tensor = torch.tensor(int(decision), device=self.root_device)
        total = self.reduce(tensor, reduce_op="sum")
        return bool(total == self.world_size) if all else bool(total > 0)

    # -- hooks ---------------------------------------------------------------------------

    def hook(self, name: str) -> Callable[..., Any] | None:
        """The function ``name`` of the strategy's hooks module, if it defines one."""
        return getattr(self.hooks, name, None)

    def call_hook(self, name: str, *args: Any) -> Any:
        """Call the spec's hook called ``name`` with the strategy and ``args``, if it declares
        one; its result."""
        hook = self.hook(name)
        return hook(self, *args) if hook is not None else None

    # -- teardown ------------------------------------------------------------------------

    def teardown(self) -> None:
        """Release what the strategy holds: ``model`` becomes the user's module, unwrapped and
        back on the CPU (the wrapper belongs to the communication that ends here)."""
        self.close_checkpoints()
        self.call_hook("teardown")
        for handle in self._forward_hooks:
            handle.remove()
        self._forward_hooks = []
        if self._model is not None:
            self._model = self.unwrap(self._model).to("cpu")
        if self._precision_plugin is not None:
            self._precision_plugin.teardown()
        if self._environment_ready:
            self.accelerator.teardown()
        self.checkpoint_io.teardown()
        self._environment_ready = False

    def __repr__(self) -> str:
        name = f" {self.name!r}" if self.name else ""
        return f"<{type(self).__name__}{name} on {self.accelerator.name or 'cpu'}>"


def _uncompiled(module: nn.Module) -> tuple[nn.Module, bool]:
    """The module inside a ``torch.compile`` wrapper, and whether there was one."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    if eval_frame is not None and isinstance(module, eval_frame.OptimizedModule):
        inner: nn.Module = module._orig_mod
        return inner, True
    return module, False  # nothing was compiled in this process: torch.compile imports dynamo
