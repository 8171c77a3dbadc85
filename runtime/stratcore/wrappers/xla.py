"""PyTorch/XLA (TPUs): strategies and precision built on torch_xla.

torch_xla starts one process per device itself (``xmp.spawn``), so the ``xla`` launcher
(``stratcore.launchers.xla``) hands the work to it and collects rank 0's result. The model is not wrapped: gradients are
all-reduced across processes (``xm.reduce_gradients``) right before each optimizer step, and
collectives run on torch_xla's process group (``init_method='xla://'``). torch_xla is imported
only when a strategy, plugin or launcher of this module is used.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from types import ModuleType
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import nn
from torch.optim import Optimizer

from ..collectives import broadcast_object
from ..exceptions import MisconfigurationError
from ..imports import Requirement, require
from ..parallel import ParallelStrategyBase
from ..precision.base import PrecisionBase, apply_to_tensors, default_dtype
from ..process_group import creating_process_group
from ..strategy import StrategyBase

#: Set to print PyTorch/XLA's debug information.
XLA_DEBUG_ENV = "PT_XLA_DEBUG"


def _import(requirements: tuple[Requirement, ...], user: str, module: str) -> ModuleType:
    require(requirements, user)
    return importlib.import_module(module)


class XLAStrategyBase(StrategyBase):
    """Runs on XLA devices; for parallel strategies, in processes started by torch_xla."""

    wrapper: ClassVar[str] = "xla"

    #: Start every process from rank 0's parameters.
    sync_module_states: bool = True
    #: Print PyTorch/XLA debug information.
    debug: bool = False

    def xla_module(self, name: str = "torch_xla") -> ModuleType:
        """A torch_xla module; a clear error names the package if it is missing."""
        return _import(self.requires, type(self).__name__, name)

    @property
    def _is_parallel(self) -> bool:
        return isinstance(self, ParallelStrategyBase)

    def _xla_distributed(self) -> bool:
        return self._is_parallel and dist.is_available() and dist.is_initialized()

    # -- devices, ranks, connection ------------------------------------------------------

    @property
    def root_device(self) -> torch.device:
        if self._is_parallel:
            # torch_xla gives each process its device; asking for it starts the XLA runtime,
            # which must only happen in the spawned processes.
            return torch.device(self.xla_module().device())
        return super().root_device  # type: ignore[safe-super]

    def setup_environment(self) -> None:
        if self.debug:
            os.environ[XLA_DEBUG_ENV] = "1"
        super().setup_environment()

    def configure_ranks(self) -> None:
        """World size and global rank come from the XLA runtime of this process."""
        runtime = self.xla_module("torch_xla.runtime")
        environment = self.cluster_environment
        environment.set_world_size(int(runtime.world_size()))
        environment.set_global_rank(int(runtime.global_ordinal()))

    def setup_distributed(self) -> None:
        """Join torch_xla's process group; it finds ranks and the master itself."""
        if dist.is_initialized():
            return
        backend: Any = getattr(self, "collective_backend", self.backend)
        require(backend.requires, f"backend {backend.name!r}")
        # Importing the module registers the 'xla' backend and the 'xla://' rendezvous.
        self.xla_module("torch_xla.distributed.xla_backend")
        with creating_process_group(ParallelStrategyBase.group_default_modules):
            dist.init_process_group(backend.name, init_method="xla://")

    # -- model and optimizers ------------------------------------------------------------

    def setup_module_and_optimizers(
        self, module: nn.Module, optimizers: list[Optimizer]
    ) -> tuple[nn.Module, list[Optimizer]]:
        if self._xla_distributed() and self.sync_module_states:
            self.xla_module("torch_xla.core.xla_model").broadcast_master_param(module)
        return module, optimizers

    def _optimizer_step(self, optimizer: Optimizer, **kwargs: Any) -> Any:
        if self._xla_distributed():
            self.xla_module("torch_xla.core.xla_model").reduce_gradients(optimizer)
        return super()._optimizer_step(optimizer, **kwargs)

    # -- collectives ---------------------------------------------------------------------

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        if not self._xla_distributed():
            return super().broadcast(obj, src)  # type: ignore[safe-super]
        # The XLA process group only moves tensors that live on the XLA device.
        return broadcast_object(obj, src, device=self.root_device)

    def barrier(self, name: str | None = None) -> None:
        if not self._xla_distributed():
            super().barrier(name)  # type: ignore[safe-super]
            return
        self.xla_module("torch_xla.core.xla_model").rendezvous(name or "barrier")

    # -- checkpoints ---------------------------------------------------------------------

    def state_to_save(self, checkpoint: Mapping[str, Any]) -> dict[str, Any]:
        """Checkpoints hold CPU tensors, so that they load without torch_xla."""
        state = super().state_to_save(checkpoint)
        return apply_to_tensors(state, lambda tensor: tensor.detach().cpu())


class XLAFSDPStrategyBase(XLAStrategyBase):
    """Fully sharded data parallelism on XLA devices (torch_xla's XlaFullyShardedDataParallel).

    ``setup`` wraps the module; its parameters are flattened and sharded across the processes,
    so optimizers are created afterwards from the returned module's parameters (an optimizer
    given to ``setup`` together with the module is refused). Gradients are reduce-scattered
    during backward, so the optimizer step needs no all-reduce.

    ``get_module_state_dict`` consolidates every rank's shard into the full state dict on
    rank 0 (the other ranks take part and get an empty dict). A wrapped module cannot load a
    full state dict: load the weights into the module before ``setup``.
    """

    wrapper: ClassVar[str] = "xla_fsdp"

    #: ``setup`` takes the module alone; optimizers are made from the module it returns.
    optimizers_in_setup: ClassVar[bool] = False

    def setup_module_and_optimizers(
        self, module: nn.Module, optimizers: list[Optimizer]
    ) -> tuple[nn.Module, list[Optimizer]]:
        if optimizers:
            raise MisconfigurationError(
                f"{type(self).__name__} flattens and shards the module's parameters in setup; "
                "set up the module alone, then create the optimizer from the parameters of the "
                "module setup returns"
            )
        module, _ = super().setup_module_and_optimizers(module, [])
        fsdp = self.xla_module("torch_xla.distributed.fsdp")
        return fsdp.XlaFullyShardedDataParallel(module), []

    def _optimizer_step(self, optimizer: Optimizer, **kwargs: Any) -> Any:
        # Skip XLAStrategyBase's gradient all-reduce: FSDP has reduce-scattered them already.
        return super(XLAStrategyBase, self)._optimizer_step(optimizer, **kwargs)

    def get_module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        fsdp = self.xla_module("torch_xla.distributed.fsdp")
        if not isinstance(module, fsdp.XlaFullyShardedDataParallel):
            return super().get_module_state_dict(module)
        shard = {
            "model": apply_to_tensors(module.state_dict(), lambda t: t.detach().cpu()),
            "shard_metadata": module.get_shard_metadata(),
        }
        shards: list[Any] = [None] * self.world_size
        dist.all_gather_object(shards, shard)
        if not self.is_global_zero:
            return {}
        full, _ = fsdp.consolidate_sharded_state_dicts(
            [s["model"] for s in shards], shards[0]["shard_metadata"]
        )
        return dict(full)

    def load_module_state_dict(
        self, module: nn.Module, state_dict: Mapping[str, Any], strict: bool = True
    ) -> None:
        fsdp = self.xla_module("torch_xla.distributed.fsdp")
        if isinstance(module, fsdp.XlaFullyShardedDataParallel):
            raise MisconfigurationError(
                f"{type(self).__name__} cannot load a full state dict into a sharded module; "
                "load it into the module before setup"
            )
        super().load_module_state_dict(module, state_dict, strict=strict)


class XLAPrecisionBase(PrecisionBase):
    """Precision on XLA devices.

    '32-true' changes nothing. The '-true' half precisions cast the module and floating-point
    inputs, and set the torch_xla variable that stores float32 tensors in that type on the
    device; the variable is set when the plugin is created, before torch_xla starts its
    runtime in the spawned processes, and restored at teardown.
    """

    #: Precision -> (torch_xla environment variable, dtype).
    XLA_DTYPES: dict[str, tuple[str, torch.dtype]] = {
        "bf16-true": ("XLA_USE_BF16", torch.bfloat16),
        "16-true": ("XLA_USE_F16", torch.float16),
    }
    wraps_forward = True

    def __init__(self, precision: str | None = None, *, device_type: str | None = None) -> None:
        super().__init__(precision, device_type=device_type)
        self._saved_variable: tuple[str, str | None] | None = None
        if self.precision in self.XLA_DTYPES:
            variable, _ = self.XLA_DTYPES[self.precision]
            self._saved_variable = (variable, os.environ.get(variable))
            os.environ[variable] = "1"

    @property
    def dtype(self) -> torch.dtype | None:
        """The dtype of parameters and inputs; None for float32."""
        entry = self.XLA_DTYPES.get(self.precision)
        return entry[1] if entry else None

    def convert_module(self, module: nn.Module) -> nn.Module:
        return module.to(dtype=self.dtype) if self.dtype is not None else module

    def convert_input(self, data: Any) -> Any:
        dtype = self.dtype
        if dtype is None:
            return data
        return apply_to_tensors(data, lambda t: t.to(dtype) if torch.is_floating_point(t) else t)

    def forward_context(self) -> Any:
        return default_dtype(self.dtype) if self.dtype is not None else super().forward_context()

    def teardown(self) -> None:
        if self._saved_variable is not None:
            variable, previous = self._saved_variable
            if previous is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = previous
            self._saved_variable = None
        super().teardown()
