"""fairscale's sharded training: optimizer state sharding (``OSS``) with gradient sharding
(``ShardedDataParallel``).

Every process keeps a full replica of the model, but each optimizer state and each gradient
lives on one process only: gradients are reduced to the process that owns the parameter, it
steps its share of the optimizer, and the updated parameters are broadcast back.

fairscale is imported only when a model is set up, so the package imports without it.
"""

from __future__ import annotations

import gc
import inspect
from collections.abc import Mapping
from typing import Any, ClassVar

from stratcore.exceptions import MisconfigurationError
from stratcore.imports import import_optional
from stratcore.parallel import ParallelStrategyBase
from torch import nn
from torch.optim import Optimizer

FAIRSCALE_INSTALL = "pip install fairscale"


def _fairscale(module: str, user: str) -> Any:
    return import_optional(module, user, FAIRSCALE_INSTALL)


class ShardedStrategyBase(ParallelStrategyBase):
    """Wraps each optimizer in fairscale's ``OSS`` and the model in ``ShardedDataParallel``.

    ``setup`` replaces every optimizer that is not an ``OSS`` yet by an ``OSS`` of the same
    class with the same parameter groups and hyper-parameters (and state, if it has any),
    and returns it: use the optimizers ``setup`` returns.

    Options:

    - ``reduce_buffer_size``: bytes of the buffers that batch the reductions of small
      gradients (0 reduces every gradient on its own).
    - ``broadcast_buffers``: send rank 0's module buffers (e.g. BatchNorm statistics) to the
      other ranks before every forward pass.

    Gradients of bucketed parameters are views into the reduction buffers; setting them to
    None, as ``Optimizer.zero_grad`` does by default, would cut them loose and corrupt later
    reductions. The ``OSS``'s ``zero_grad`` is therefore routed through
    ``ShardedDataParallel.zero_grad``, which zeroes those gradients in place.

    ``get_optimizer_state`` consolidates the sharded optimizer state on rank 0 (every rank must
    call it) and returns it there in torch's usual format, loadable by a plain optimizer of the
    same class; other ranks get an empty dict. Loading takes the full state on every rank, and
    each rank keeps the part it owns.
    """

    wrapper: ClassVar[str] = "fairscale_sharded"

    reduce_buffer_size: int = 2**23
    broadcast_buffers: bool = True
    group_default_modules = (*ParallelStrategyBase.group_default_modules, "fairscale.optim")

    def setup_module_and_optimizers(
        self, module: nn.Module, optimizers: list[Optimizer]
    ) -> tuple[nn.Module, list[Optimizer]]:
        sharded = [self.shard_optimizer(optimizer) for optimizer in optimizers]
        wrapped = self.configure_sharded_ddp(module, sharded)
        for optimizer in sharded:
            _route_zero_grad(optimizer, wrapped)
        return wrapped, sharded

    def shard_optimizer(self, optimizer: Optimizer) -> Optimizer:
        """An ``OSS`` in place of ``optimizer`` (which is returned as is if it is one)."""
        oss_class = _fairscale("fairscale.optim", type(self).__name__).OSS
        if isinstance(optimizer, oss_class):
            return optimizer
        state = optimizer.state_dict() if any(optimizer.state.values()) else None
        # The very group dicts of ``optimizer``, not copies: an LR scheduler made on it before
        # setup changes their hyperparameters, and OSS hands them to its shard at each step.
        sharded = oss_class(
            params=optimizer.param_groups,
            optim=type(optimizer),
            **_constructor_arguments(type(optimizer), optimizer.defaults),
        )
        if state is not None:
            self.load_optimizer_state_dict(sharded, state)
        return sharded

    def sharded_ddp_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ShardedDataParallel."""
        return {
            "reduce_buffer_size": self.reduce_buffer_size,
            "broadcast_buffers": self.broadcast_buffers,
        }

    def configure_sharded_ddp(self, module: nn.Module, optimizers: list[Optimizer]) -> nn.Module:
        """``module`` wrapped in fairscale's ShardedDataParallel over the optimizers' sharded
        states."""
        if not optimizers:
            # ShardedDataParallel reduces each gradient to the rank whose OSS owns it.
            raise MisconfigurationError(
                f"{type(self).__name__} shards gradients by the optimizer that owns them; pass the "
                "optimizers to setup(model, optimizer, ...)"
            )
        data_parallel = _fairscale("fairscale.nn.data_parallel", type(self).__name__)
        return data_parallel.ShardedDataParallel(
            module, sharded_optimizer=optimizers, **self.sharded_ddp_kwargs()
        )

    # -- checkpoints ---------------------------------------------------------------------

    def get_optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        oss_class = _fairscale("fairscale.optim", type(self).__name__).OSS
        if not isinstance(optimizer, oss_class):
            return super().get_optimizer_state(optimizer)
        optimizer.consolidate_state_dict(recipient_rank=0)
        return optimizer.state_dict() if self.global_rank == 0 else {}

    def load_optimizer_state_dict(
        self, optimizer: Optimizer, state_dict: Mapping[str, Any]
    ) -> None:
        # OSS.load_state_dict empties the entries of parameters other ranks own in the mapping
        # it is given; work on a copy so that the caller's mapping stays whole.
        copy = dict(state_dict)
        if isinstance(copy.get("state"), Mapping):
            copy["state"] = dict(copy["state"])
        groups = list(optimizer.param_groups)
        super().load_optimizer_state_dict(optimizer, copy)
        if len(groups) == len(optimizer.param_groups):
            # Loading replaces the group dicts; keep the ones a scheduler may hold, updated.
            for group, loaded in zip(groups, optimizer.param_groups, strict=True):
                group.update(loaded)
            optimizer.param_groups = groups

    def teardown(self) -> None:
        super().teardown()
        # OSS and ShardedDataParallel hold the process group, and they sit in reference cycles
        # (with each other and with autograd hooks). Left to the collector, the group may be
        # freed only while the interpreter shuts down, when gloo's worker threads can no longer
        # release the tensors of finished operations: the process aborts. Keep the user's
        # module and free the wrappers, and with them the group, now.
        if self._model is not None:
            self._model = self.unwrap(self._model)
        self._optimizers = []
        gc.collect()


def _constructor_arguments(cls: type, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of an optimizer's ``defaults`` its constructor accepts (torch's AdamW
    records 'decoupled_weight_decay', which only Adam takes)."""
    parameters = inspect.signature(cls).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return dict(defaults)
    return {key: value for key, value in defaults.items() if key in parameters}


def _route_zero_grad(optimizer: Optimizer, wrapped: nn.Module) -> None:
    zero_grad = wrapped.zero_grad

    def sharded_zero_grad(set_to_none: bool = True) -> None:
        zero_grad(set_to_none=set_to_none)

    optimizer.zero_grad = sharded_zero_grad  # type: ignore[method-assign]
