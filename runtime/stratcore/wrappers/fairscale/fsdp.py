"""fairscale's FullyShardedDataParallel: parameters, gradients and optimizer states sharded
across processes, with parameters flattened into one tensor per wrapped module.

fairscale's implementation overlaps communication with computation on CUDA streams and runs
only on CUDA devices; on any other device the strategy stops with an error before it starts
processes (torch's FSDP2, strategy 'fsdp', runs everywhere). fairscale is imported only when
a model is set up, so the package imports without it.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import sys
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch
from stratcore import process_group
from stratcore.exceptions import MisconfigurationError
from stratcore.imports import import_optional
from stratcore.parallel import ParallelStrategyBase
from torch import nn
from torch.optim import Optimizer

from ..fsdp.strategy import FSDPPrecisionBase

FAIRSCALE_INSTALL = "pip install fairscale"


@process_group.on_release
def forget_cached_groups() -> None:
    """Forget the groups fairscale's FSDP keeps in a cache of its own (an attribute of
    ``get_process_group_cached``): they would outlive ``destroy_process_group``, and a later
    launch would get destroyed groups from it. fairscale makes the cache again when asked."""
    parallel = sys.modules.get("fairscale.internal.parallel")
    with contextlib.suppress(AttributeError):
        del parallel.get_process_group_cached._global_group_cache  # type: ignore[union-attr]


class FairscaleFSDPStrategyBase(ParallelStrategyBase):
    """Wraps the model in fairscale's ``FullyShardedDataParallel``.

    Options:

    - ``auto_wrap_min_params``: submodules with at least this many parameters (not counting
      those of submodules already wrapped) are wrapped on their own, innermost first
      (fairscale's ``auto_wrap`` with its ``default_auto_wrap_policy``); the root is wrapped
      last.
    - ``cpu_offload``: keep the sharded float32 parameters and their gradients in host
      memory; the optimizer step runs on the CPU.
    - ``reshard_after_forward``: free gathered parameters after the forward pass.

    Mixed precision comes from the precision plugin (``FSDPPrecisionBase``): computation in
    its dtype, gradients reduced in float32.

    fairscale flattens every wrapped module's parameters into one tensor, so an optimizer
    created before ``setup`` refers to parameters that no longer exist. ``setup`` builds a new
    optimizer of the same class and hyper-parameters over the flat parameters and returns it;
    this needs an optimizer with one parameter group (fairscale cannot gather state of several)
    that covers every parameter of the module and holds no state yet.

    ``get_module_state_dict`` returns the full state dict on every rank; ``get_optimizer_state``
    gathers the full optimizer state on rank 0 (other ranks get an empty dict), and loading
    takes that full state on every rank and keeps each rank's shard.
    """

    wrapper: ClassVar[str] = "fairscale_fsdp"

    auto_wrap_min_params: int | None = None
    group_default_modules = (*ParallelStrategyBase.group_default_modules, "fairscale.optim")
    cpu_offload: bool = False
    reshard_after_forward: bool = True

    # -- device check --------------------------------------------------------------------

    def check_device(self) -> None:
        """Stop with a clear error unless the strategy trains on CUDA devices."""
        device = self.root_device
        if device.type != "cuda":
            raise MisconfigurationError(
                f"{type(self).__name__} uses fairscale's FullyShardedDataParallel, which runs only on "
                f"CUDA devices (it needs CUDA streams), not on {device.type!r}; use strategy='fsdp' "
                "(torch's FSDP2), which also runs on the CPU"
            )

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.check_device()
        return super().launch(function, *args, **kwargs)

    def setup_environment(self) -> None:
        self.check_device()
        super().setup_environment()

    # -- wrapping ------------------------------------------------------------------------

    def setup_module_and_optimizers(
        self, module: nn.Module, optimizers: list[Optimizer]
    ) -> tuple[nn.Module, list[Optimizer]]:
        for optimizer in optimizers:
            _check_rebuildable(optimizer, module)
        wrapped = self.configure_fairscale_fsdp(module)
        return wrapped, [_rebuild(optimizer, wrapped) for optimizer in optimizers]

    def fairscale_fsdp_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for every FullyShardedDataParallel this strategy creates."""
        kwargs: dict[str, Any] = {
            "reshard_after_forward": self.reshard_after_forward,
            "move_params_to_cpu": self.cpu_offload,
            "compute_device": self.root_device,
        }
        plugin = self.precision_plugin
        if isinstance(plugin, FSDPPrecisionBase):
            kwargs.update(
                mixed_precision=True, compute_dtype=plugin.dtype, fp32_reduce_scatter=True
            )
        return kwargs

    def configure_fairscale_fsdp(self, module: nn.Module) -> nn.Module:
        """``module`` wrapped in fairscale's FullyShardedDataParallel with the strategy's
        options."""
        fairscale = import_optional("fairscale.nn", type(self).__name__, FAIRSCALE_INSTALL)
        fsdp_class = fairscale.FullyShardedDataParallel
        kwargs = self.fairscale_fsdp_kwargs()
        threshold = self.auto_wrap_min_params
        if threshold is not None:
            if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
                raise MisconfigurationError(
                    f"auto_wrap_min_params={threshold!r} is not allowed; use a positive number of "
                    "parameters or None"
                )
            policy = functools.partial(fairscale.default_auto_wrap_policy, min_num_params=threshold)
            with fairscale.enable_wrap(wrapper_cls=fsdp_class, auto_wrap_policy=policy, **kwargs):
                module = fairscale.auto_wrap(module)
        if isinstance(module, fsdp_class):
            return module
        return fsdp_class(module, **kwargs)

    def _is_fsdp(self, module: nn.Module) -> bool:
        fairscale = import_optional("fairscale.nn", type(self).__name__, FAIRSCALE_INSTALL)
        return isinstance(module, fairscale.FullyShardedDataParallel)

    def _fsdp_model(self) -> Any:
        model = self._model
        return model if model is not None and self._is_fsdp(model) else None

    # -- steps ---------------------------------------------------------------------------

    def clip_gradients(
        self, module: nn.Module, optimizer: Optimizer, max_norm: float
    ) -> torch.Tensor:
        if not self._is_fsdp(module):
            return super().clip_gradients(module, optimizer, max_norm)
        # The norm spans every shard, so fairscale computes it with a collective.
        self.precision_plugin.unscale_gradients(optimizer)
        return module.clip_grad_norm_(max_norm)  # type: ignore[operator]

    # -- checkpoints ---------------------------------------------------------------------

    def get_module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        if not self._is_fsdp(module):
            return super().get_module_state_dict(module)
        # FullyShardedDataParallel.state_dict gathers the full parameters on every rank.
        return dict(module.state_dict())

    def load_module_state_dict(
        self, module: nn.Module, state_dict: Mapping[str, Any], strict: bool = True
    ) -> None:
        if not self._is_fsdp(module):
            super().load_module_state_dict(module, state_dict, strict=strict)
            return
        module.load_state_dict(state_dict, strict=strict)

    def get_optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        model = self._fsdp_model()
        if model is None:
            return super().get_optimizer_state(optimizer)
        full = model.gather_full_optim_state_dict(optimizer)
        return full if full is not None else {}

    def load_optimizer_state_dict(
        self, optimizer: Optimizer, state_dict: Mapping[str, Any]
    ) -> None:
        model = self._fsdp_model()
        if model is None:
            super().load_optimizer_state_dict(optimizer, state_dict)
            return
        # get_shard_from_optim_state_dict consumes the mapping it is given.
        shard = model.get_shard_from_optim_state_dict(copy.deepcopy(dict(state_dict)))
        optimizer.load_state_dict(shard)


def _check_rebuildable(optimizer: Optimizer, module: nn.Module) -> None:
    name = type(optimizer).__name__
    if len(optimizer.param_groups) != 1:
        raise MisconfigurationError(
            f"{name} has {len(optimizer.param_groups)} parameter groups; fairscale's "
            "FullyShardedDataParallel flattens parameters and supports one group"
        )
    if any(optimizer.state.values()):
        raise MisconfigurationError(
            f"{name} already holds state; fairscale's FullyShardedDataParallel flattens the parameters "
            "in setup, so set up the optimizer before its first step and load its state afterwards"
        )
    held = {id(p) for p in optimizer.param_groups[0]["params"]}
    owned = {id(p) for p in module.parameters()}
    if held != owned:
        raise MisconfigurationError(
            f"{name} must optimise exactly the parameters of the module: fairscale's "
            "FullyShardedDataParallel flattens them all into shared tensors"
        )


def _rebuild(optimizer: Optimizer, wrapped: nn.Module) -> Optimizer:
    # The group's values win over the defaults (a scheduler may have changed the learning
    # rate); keys the constructor does not take (such as 'initial_lr') are left out.
    group = optimizer.param_groups[0]
    hyper_parameters = {key: group.get(key, default) for key, default in optimizer.defaults.items()}
    return type(optimizer)(wrapped.parameters(), **hyper_parameters)
