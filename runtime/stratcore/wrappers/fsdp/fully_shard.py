"""What the strategies built on FSDP2 share ('fsdp', 'model_parallel'): finding the sharded
modules, rebinding optimizers made before ``setup`` to the parameters that replaced theirs,
full state dicts of modules whose parameters are DTensors, and letting go of a sharded model
at teardown.

``fully_shard`` and ``parallelize_module`` replace a module's parameters with new ones (DTensors
holding this process's shard). An optimizer built on ``model.parameters()`` before ``setup``
would then update tensors the model no longer uses, so the strategies record each parameter's
name before laying the model out (``parameter_names``) and rebind the optimizers afterwards,
by name and in place (``rebind``).

``ShardedStateDicts`` is the strategies' mixin for checkpoints: the full state of a sharded
module or of its optimizer is gathered into host memory on rank 0 (the other ranks take part
and get an empty dict), and loading expects the full dicts on every rank, each keeping its
own shard. A module that holds no DTensors is left to the strategy's base class.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from stratcore.exceptions import MisconfigurationError
from torch import nn
from torch.optim import Optimizer

from .activation_checkpointing import apply_activation_checkpointing

if TYPE_CHECKING:
    from stratcore.strategy import StrategyBase

    _StrategyMixin = StrategyBase
else:
    _StrategyMixin = object


def fsdp2() -> Any:
    """The ``torch.distributed.fsdp`` module, checked to offer FSDP2 (``fully_shard``)."""
    import torch.distributed.fsdp as fsdp

    if not hasattr(fsdp, "fully_shard"):
        raise MisconfigurationError(
            f"torch {torch.__version__} has no torch.distributed.fsdp.fully_shard (FSDP2); "
            "the sharded strategies need torch 2.6 or newer"
        )
    return fsdp


def is_fsdp_module(module: nn.Module) -> bool:
    """Whether ``fully_shard`` was applied to ``module`` itself."""
    return isinstance(module, fsdp2().FSDPModule)


def fsdp_modules(module: nn.Module) -> list[nn.Module]:
    """``module`` and its submodules to which ``fully_shard`` was applied, outermost first."""
    fsdp_module = fsdp2().FSDPModule
    return [m for m in module.modules() if isinstance(m, fsdp_module)]


def holds_dtensors(module: nn.Module) -> bool:
    """Whether some parameter of ``module`` is a DTensor (sharded or laid out on a mesh)."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in module.parameters())


def has_run(module: nn.Module) -> bool:
    """Whether FSDP has initialised its per-step state on ``module``, which happens at the
    first forward pass."""
    get_state = getattr(module, "_get_fsdp_state", None)
    return callable(get_state) and getattr(get_state(), "_is_root", None) is not None


def reset_interrupted_step(root: nn.Module) -> None:
    """Bring the FSDP root ``root`` back to its sharded parameters after an exception
    interrupted a forward or backward pass (nothing to do before its first forward pass).

    torch's ``FSDPModule.reset_iter_state`` waits for the step's collectives, reshards every
    parameter group and clears the step's bookkeeping. torch 2.11 has no such method; there,
    once the device has finished its queued work, every FSDP module of ``root`` is resharded
    (``FSDPModule.reshard``): enough for teardown to move the module, which is not trained
    further. ``reshard`` leaves a module whose forward pass was cut short as it is where the
    module keeps its parameters after forward (the root does), so each is told not to keep
    them first.
    """
    if not has_run(root):
        return
    reset = getattr(root, "reset_iter_state", None)
    if callable(reset):
        reset()
        return
    if torch.accelerator.is_available():
        torch.accelerator.synchronize()
    for module in fsdp_modules(root):
        # An FSDPModule's methods (the list is typed as plain modules).
        module.set_reshard_after_forward(True, recurse=False)  # type: ignore[operator]
        module.reshard()  # type: ignore[operator]


def state_dict_options(**options: Any) -> Any:
    """``torch.distributed.checkpoint.state_dict.StateDictOptions(**options)``."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(**options)


# -- optimizers made before setup -----------------------------------------------------------


def parameter_names(module: nn.Module) -> dict[int, str]:
    """Every parameter of ``module`` by identity -> its name."""
    return {id(p): name for name, p in module.named_parameters()}


def check_rebindable(optimizer: Optimizer, names: Mapping[int, str]) -> None:
    """An optimizer can be rebound while it holds no state and only the module's parameters."""
    if any(optimizer.state.values()):
        raise MisconfigurationError(
            f"{type(optimizer).__name__} already holds state; FSDP replaces the module's parameters in "
            "setup, so set up the optimizer before its first step and load its state afterwards"
        )
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            if id(parameter) not in names:
                raise MisconfigurationError(
                    f"{type(optimizer).__name__} holds a parameter of shape {tuple(parameter.shape)} that "
                    "is not part of the module being set up; FSDP can only shard the module's own parameters"
                )


def lay_out(
    module: nn.Module,
    optimizers: Sequence[Optimizer],
    layout: Callable[[nn.Module], tuple[nn.Module, Collection[str] | None]],
    checkpointing: Sequence[Any] | None = None,
) -> nn.Module:
    """Apply activation checkpointing to the ``checkpointing`` layers, lay ``module`` out with
    ``layout`` (which returns the module laid out and, where it keeps only part of the model,
    the names of the parameters it holds), and rebind ``optimizers`` to the parameters that
    replaced theirs (see ``rebind``); returns the module laid out."""
    if checkpointing is not None:
        apply_activation_checkpointing(module, checkpointing)
    names = parameter_names(module)
    for optimizer in optimizers:
        check_rebindable(optimizer, names)
    module, held = layout(module)
    elsewhere = set(names.values()) - set(held) if held is not None else set()
    replacements = dict(module.named_parameters())
    for optimizer in optimizers:
        rebind(optimizer, names, replacements, elsewhere)
    return module


def rebind(
    optimizer: Optimizer,
    names: Mapping[int, str],
    replacements: Mapping[str, nn.Parameter],
    elsewhere: Collection[str] = (),
) -> None:
    """Point ``optimizer``'s parameter groups, in place and in order, at the parameters that
    replaced theirs (``replacements``, by name). Parameters named in ``elsewhere`` live in
    other processes now (another pipeline stage's) and leave the groups; any other name
    missing from ``replacements`` is an error."""
    for group in optimizer.param_groups:
        old = [names[id(p)] for p in group["params"]]
        missing = [n for n in old if n not in replacements and n not in elsewhere]
        if missing:
            raise MisconfigurationError(
                f"laying the model out renamed or removed parameters ({', '.join(missing[:3])}); "
                "create the optimizer after setup from the returned module's parameters"
            )
        # In place: some optimizers keep a reference to a group's parameter list.
        group["params"][:] = [replacements[n] for n in old if n in replacements]


# -- checkpoints and teardown ---------------------------------------------------------------


class ShardedStateDicts(_StrategyMixin):
    """Full state dicts of modules whose parameters are DTensors, and their optimizers'; see
    the module documentation. Mixed into the FSDP2 strategies before their base class."""

    #: The strategy's device mesh (released with the model).
    _device_mesh: Any = None

    def _sharded_model(self) -> nn.Module | None:
        """The model set up by ``setup``, if its parameters are DTensors."""
        model = self._model
        return model if model is not None and holds_dtensors(model) else None

    def get_module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        """The full state dict, gathered into host memory on rank 0 (empty on the others)."""
        if not holds_dtensors(module):
            return super().get_module_state_dict(module)
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(
            module, options=state_dict_options(full_state_dict=True, cpu_offload=True)
        )

    def load_module_state_dict(
        self, module: nn.Module, state_dict: Mapping[str, Any], strict: bool = True
    ) -> None:
        """Load a full state dict into ``module``; a sharded module keeps its shards of it on
        each process."""
        if not holds_dtensors(module):
            super().load_module_state_dict(module, state_dict, strict=strict)
            return
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        set_model_state_dict(
            module,
            dict(state_dict),
            options=state_dict_options(full_state_dict=True, strict=strict),
        )

    def get_optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        """The full optimizer state keyed by parameter name, on rank 0 (empty on the others)."""
        model = self._sharded_model()
        if model is None:
            return super().get_optimizer_state(optimizer)
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return get_optimizer_state_dict(
            model, optimizer, options=state_dict_options(full_state_dict=True, cpu_offload=True)
        )

    def load_optimizer_state_dict(
        self, optimizer: Optimizer, state_dict: Mapping[str, Any]
    ) -> None:
        """Load a full optimizer state dict into the optimizer of a sharded module."""
        model = self._sharded_model()
        if model is None:
            super().load_optimizer_state_dict(optimizer, state_dict)
            return
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        if not optimizer.state and not state_dict.get("state"):
            # An optimizer without per-parameter state (plain SGD) has only hyperparameters to
            # restore, and torch's loader cannot place a state that has no tensors.
            for group, saved in zip(
                optimizer.param_groups, state_dict["param_groups"], strict=True
            ):
                group.update({k: v for k, v in saved.items() if k != "params"})
            return
        set_optimizer_state_dict(
            model, optimizer, dict(state_dict), options=state_dict_options(full_state_dict=True)
        )

    def release_sharded_model(self, roots: Iterable[nn.Module]) -> None:
        """Teardown of a sharded model whose FSDP roots are ``roots``: reset the steps an
        exception interrupted, tear down, and let go of the model, its optimizers and the
        mesh (``_device_mesh``) now.

        A step interrupted by an exception leaves gathered parameters registered, and moving
        the module to the CPU would fail on them and hide the real error (before the first
        forward pass FSDP has no per-step state, and resetting it would fail). The sharded
        module, its optimizers (through the DTensors) and the mesh hold the process group:
        left to the collector, the group may be freed only while the interpreter shuts down,
        when gloo's worker threads can no longer release the tensors of finished operations,
        and the process aborts. Without its group the sharded module is unusable anyway.
        """
        for root in roots:
            reset_interrupted_step(root)
        super().teardown()
        self._device_mesh = None
        self._model = None
        self._optimizers = []
        gc.collect()
