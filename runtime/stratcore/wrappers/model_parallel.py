"""Two-dimensional model parallelism: tensor parallelism within a group of processes and fully
sharded data parallelism (FSDP2) across the groups, on one ``DeviceMesh``.

The mesh has the dimensions ``("data_parallel", "tensor_parallel")``. The user's
``parallelize_fn(module, device_mesh)`` lays the model out on it, typically with
``torch.distributed.tensor.parallel.parallelize_module(module, device_mesh["tensor_parallel"],
plan)`` and ``fully_shard(..., mesh=device_mesh["data_parallel"])``, and returns the module.
The strategy owns the mesh and its process groups, feeds every process of a tensor-parallel
group the same data (``distributed_sampler_kwargs`` count the data-parallel dimension only),
and saves checkpoints sharded, through ``torch.distributed.checkpoint``, or as one full file.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn
from torch.optim import Optimizer

from ..exceptions import MisconfigurationError
from ..parallel import ParallelStrategyBase
from ..precision import PrecisionBase
from .fsdp import FSDPPrecisionBase, _check_rebindable, _fsdp2, _has_run, _parameter_names
from .mesh import apply_activation_checkpointing, build_mesh

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

#: Names of the mesh's dimensions, outermost first.
MESH_DIMS = ("data_parallel", "tensor_parallel")
#: File of a sharded checkpoint folder that holds the entries other than modules and
#: optimizers (steps, epochs, ...), written by rank 0.


def _state_dict_options(**options: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(**options)


def _holds_dtensors(module: nn.Module) -> bool:
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in module.parameters())


def _fsdp_modules(module: nn.Module) -> list[nn.Module]:
    fsdp_module = _fsdp2().FSDPModule
    return [m for m in module.modules() if isinstance(m, fsdp_module)]


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class ModelParallelStrategyBase(ParallelStrategyBase):
    """Tensor parallelism and FSDP2 on a ``(data_parallel, tensor_parallel)`` device mesh.

    Options:

    - ``parallelize_fn``: ``parallelize_fn(module, device_mesh) -> module`` applies tensor
      parallelism and ``fully_shard``. Without one, the module is sharded with ``fully_shard``
      over the data-parallel dimension.
    - ``data_parallel_size`` and ``tensor_parallel_size``: the mesh's sizes, whose product is
      the world size. 'auto' resolves as Lightning's ModelParallelStrategy does: the number of
      nodes for the data-parallel size and the processes per node for the tensor-parallel
      size. Without a ``parallelize_fn`` there is nothing to split tensors over, so an 'auto'
      tensor-parallel size is 1 and an 'auto' data-parallel size takes the remaining processes.
    - ``save_distributed_checkpoint``: save a folder of shards through
      ``torch.distributed.checkpoint`` (every rank writes its own); False gathers the full state
      into one file written by rank 0.
    - ``activation_checkpointing_policy``: layer classes whose activations are recomputed during
      backward, applied before ``parallelize_fn``.

    Collectives run over every process by default; give ``group="data_parallel"`` or
    ``group="tensor_parallel"`` (or a process group) to reduce or gather over one dimension of
    the mesh. Optimizers created before ``setup`` are rebound, in place, to the parameters that
    replaced theirs (matched by name), as for 'fsdp'.
    """

    wrapper: ClassVar[str] = "model_parallel"

    parallelize_fn: Callable[[nn.Module, DeviceMesh], nn.Module] | None = None
    data_parallel_size: int | str = "auto"
    tensor_parallel_size: int | str = "auto"
    save_distributed_checkpoint: bool = True
    activation_checkpointing_policy: Sequence[Any] | None = None

    _device_mesh: DeviceMesh | None = None

    # -- the mesh --------------------------------------------------------------------------

    def parallel_sizes(self) -> tuple[int, int]:
        """The (data-parallel, tensor-parallel) sizes, 'auto' resolved."""
        world = self.world_size
        if self.parallelize_fn is None:
            tensor = 1 if self.tensor_parallel_size == "auto" else self.tensor_parallel_size
            auto_data = (
                world // int(tensor) if _is_size(tensor) and world % int(tensor) == 0 else world
            )
        else:
            tensor = (
                self.num_processes
                if self.tensor_parallel_size == "auto"
                else self.tensor_parallel_size
            )
            auto_data = self.num_nodes
        data = auto_data if self.data_parallel_size == "auto" else self.data_parallel_size
        if not (_is_size(data) and _is_size(tensor)):
            self.validate_configuration()  # raises, naming the option
        sizes = (int(data), int(tensor))
        if sizes[0] * sizes[1] != world:
            raise MisconfigurationError(
                f"data_parallel_size={sizes[0]} x tensor_parallel_size={sizes[1]} is "
                f"{sizes[0] * sizes[1]} processes, but the job has {world}; the sizes must "
                "multiply to the world size"
            )
        return sizes

    @property
    def device_mesh(self) -> DeviceMesh:
        """The ``(data_parallel, tensor_parallel)`` mesh over every process."""
        if self._device_mesh is None:
            if not self._distributed():
                raise MisconfigurationError(
                    "the device mesh exists once the processes are connected: use it inside "
                    "the function given to launch (after setup_environment)"
                )
            self._device_mesh = build_mesh(self.root_device.type, self.parallel_sizes(), MESH_DIMS)
        return self._device_mesh

    def validate_configuration(self) -> None:
        super().validate_configuration()
        for option in ("data_parallel_size", "tensor_parallel_size"):
            value = getattr(self, option)
            if value != "auto" and not _is_size(value):
                raise MisconfigurationError(
                    f"{option}={value!r} is not allowed; give a positive number of processes or 'auto'"
                )
        if self.parallelize_fn is not None and not callable(self.parallelize_fn):
            raise MisconfigurationError(
                f"parallelize_fn={self.parallelize_fn!r} is not callable; give a function "
                "parallelize_fn(module, device_mesh) that returns the module"
            )

    def setup_environment(self) -> None:
        if self._environment_ready:
            return
        super().setup_environment()
        _ = self.device_mesh  # mistakes in the sizes surface here, before any model is touched

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        """Processes of one tensor-parallel group read the same samples: the replicas and
        this process's index count the data-parallel dimension only."""
        if self._distributed():
            mesh = self.device_mesh["data_parallel"]
            return {"num_replicas": mesh.size(), "rank": mesh.get_local_rank()}
        data, tensor = self.parallel_sizes()
        return {"num_replicas": data, "rank": self.global_rank // tensor}

    # -- model and optimizers ----------------------------------------------------------------

    def setup_module_and_optimizers(
        self, module: nn.Module, optimizers: list[Optimizer]
    ) -> tuple[nn.Module, list[Optimizer]]:
        if self.activation_checkpointing_policy is not None:
            apply_activation_checkpointing(module, self.activation_checkpointing_policy)
        names = _parameter_names(module)
        for optimizer in optimizers:
            _check_rebindable(optimizer, names)
        module = self.parallelize(module)
        replacements = dict(module.named_parameters())
        for optimizer in optimizers:
            for group in optimizer.param_groups:
                missing = [
                    names[id(p)] for p in group["params"] if names[id(p)] not in replacements
                ]
                if missing:
                    raise MisconfigurationError(
                        f"parallelize_fn renamed or removed parameters ({', '.join(missing[:3])}); "
                        "create the optimizer after setup from the returned module's parameters"
                    )
                group["params"][:] = [replacements[names[id(p)]] for p in group["params"]]
        return module, optimizers

    def parallelize(self, module: nn.Module) -> nn.Module:
        """Lay ``module`` out on the mesh: the user's ``parallelize_fn``, or ``fully_shard``
        over the data-parallel dimension."""
        mesh = self.device_mesh
        if self.parallelize_fn is None:
            fully_shard = _fsdp2().fully_shard
            return fully_shard(module, mesh=mesh["data_parallel"], **self._fsdp_kwargs())
        result = self.parallelize_fn(module, mesh)
        if not isinstance(result, nn.Module):
            raise MisconfigurationError(
                f"parallelize_fn must return the module it laid out, not {type(result).__name__}"
            )
        data, _ = self.parallel_sizes()
        if data > 1 and not _fsdp_modules(result):
            raise MisconfigurationError(
                f"parallelize_fn applied no fully_shard, so the {data} data-parallel replicas "
                "would train apart; call fully_shard(module, mesh=device_mesh['data_parallel'])"
            )
        return result

    def _fsdp_kwargs(self) -> dict[str, Any]:
        plugin: PrecisionBase = self.precision_plugin
        if isinstance(plugin, FSDPPrecisionBase):
            return {"mp_policy": plugin.mixed_precision_policy(root=True)}
        return {}

    @contextlib.contextmanager
    def block_backward_sync(self) -> Generator[None, None, None]:
        modules = _fsdp_modules(self._model) if self._model is not None else []
        for module in modules:
            module.set_requires_gradient_sync(False)  # type: ignore[operator]
        try:
            yield
        finally:
            for module in modules:
                module.set_requires_gradient_sync(True)  # type: ignore[operator]

    # -- collectives -------------------------------------------------------------------------

    def _group(self, group: Any) -> Any:
        if isinstance(group, str):
            if group not in MESH_DIMS:
                raise MisconfigurationError(
                    f"group={group!r} is not a dimension of the mesh; use one of {', '.join(MESH_DIMS)}, "
                    "a process group, or None for every process"
                )
            return self.device_mesh.get_group(group)
        return group

    def reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        return super().reduce(tensor, self._group(group), reduce_op)

    def all_gather(
        self, tensor: torch.Tensor, group: Any = None, sync_grads: bool = False
    ) -> torch.Tensor:
        return super().all_gather(tensor, self._group(group), sync_grads)

    # -- checkpoints -------------------------------------------------------------------------

    def get_module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        """The full state dict, gathered into host memory on rank 0 (empty on the others)."""
        if not _holds_dtensors(module):
            return super().get_module_state_dict(module)
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(
            module, options=_state_dict_options(full_state_dict=True, cpu_offload=True)
        )

    def load_module_state_dict(
        self, module: nn.Module, state_dict: Mapping[str, Any], strict: bool = True
    ) -> None:
        if not _holds_dtensors(module):
            super().load_module_state_dict(module, state_dict, strict=strict)
            return
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        set_model_state_dict(
            module,
            dict(state_dict),
            options=_state_dict_options(full_state_dict=True, strict=strict),
        )

    def get_optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        module = self._model
        if module is None or not _holds_dtensors(module):
            return super().get_optimizer_state(optimizer)
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return get_optimizer_state_dict(
            module, optimizer, options=_state_dict_options(full_state_dict=True, cpu_offload=True)
        )

    def load_optimizer_state_dict(
        self, optimizer: Optimizer, state_dict: Mapping[str, Any]
    ) -> None:
        module = self._model
        if module is None or not _holds_dtensors(module):
            super().load_optimizer_state_dict(optimizer, state_dict)
            return
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        set_optimizer_state_dict(
            module, optimizer, dict(state_dict), options=_state_dict_options(full_state_dict=True)
        )

    @property
    def saves_sharded(self) -> bool:
        """``save_checkpoint`` writes a folder of shards (see ``sharded_checkpoint``) unless
        ``save_distributed_checkpoint`` is off."""
        return bool(self.save_distributed_checkpoint)

    # -- teardown ----------------------------------------------------------------------------

    def teardown(self) -> None:
        reset = getattr(self._model, "reset_iter_state", None)
        if self._model is not None and callable(reset) and _has_run(self._model):
            reset()
        super().teardown()
        # As for 'fsdp': the sharded module, its optimizers and the mesh hold the process
        # group; let go of them now, while gloo can still release their work.
        self._device_mesh = None
        self._model = None
        self._optimizers = []
        gc.collect()
