"""Model parallelism on a device mesh of named dimensions: fully sharded data parallelism
(FSDP2), tensor, pipeline and context parallelism, each a dimension with its own process
groups (see ``parallel_dims`` for the two layouts and their names).

The user's ``parallelize_fn(module, device_mesh)`` lays the model (or, with pipeline
parallelism, each stage of it) out on the mesh: typically
``torch.distributed.tensor.parallel.parallelize_module`` over the tensor-parallel dimension
and ``fully_shard`` over the data dimensions. Pipeline parallelism cuts the model into
stages and trains through ``forward_backward`` (see ``pipeline``); context parallelism runs
attention over sequences split across the ``cp`` dimension (see ``context_parallel``). The
strategy owns the mesh and its process groups, feeds the processes that share a data
coordinate the same samples (``distributed_sampler_kwargs`` count the data dimensions only),
reduces over any dimension (``group=<name>``) and saves checkpoints as folders of shards
through ``torch.distributed.checkpoint``, or as one full file.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Sequence
from typing import Any, ClassVar

import torch
from stratcore.exceptions import MisconfigurationError
from stratcore.parallel import ParallelStrategyBase
from torch import nn
from torch.optim import Optimizer

from ..fsdp.fully_shard import fsdp2, fsdp_modules, lay_out
from ..fsdp.mesh import build_mesh
from ..fsdp.strategy import FSDPPrecisionBase
from .context_parallel import context_parallel
from .parallel_dims import (
    AUTO_DIMS,
    NAMED_DIMS,
    ParallelDims,
    ParallelMesh,
    is_size,
    lightning_dims,
    lightning_sizes,
    named_dims,
)
from .pipeline import SCHEDULES, Pipeline, PipelineModel, build_pipeline
from .pipeline_state import PipelineStateDicts

#: Options that size Lightning's two dimensions.
LIGHTNING_OPTIONS = ("data_parallel_size", "tensor_parallel_size")
#: Options that take a function, and what the function does.
CALLABLES = {
    "parallelize_fn": "parallelize_fn(module, device_mesh) that returns the module",
    "pipeline_fn": "pipeline_fn(module, stage_index, num_stages) that returns the stage's module",
}


class ModelParallelStrategyBase(PipelineStateDicts, ParallelStrategyBase):
    """FSDP2 with tensor, pipeline and context parallelism on a device mesh.

    Options that size the mesh, one of two kinds (see ``parallel_dims``):

    - ``data_parallel_size`` and ``tensor_parallel_size`` (Lightning's): a
      ``(data_parallel, tensor_parallel)`` mesh. 'auto' resolves as Lightning's
      ModelParallelStrategy does: the number of nodes and the processes per node. Without a
      ``parallelize_fn`` there is nothing to split tensors over, so an 'auto' tensor-parallel
      size is 1 and an 'auto' data-parallel size takes the remaining processes.
    - ``dp_replicate``, ``dp_shard``, ``tp``, ``pp``, ``cp`` (torchtitan's): a
      ``(pp, dp_replicate, dp_shard, cp, tp)`` mesh; ``device_mesh`` is then a
      ``ParallelMesh`` that also names the joined dimensions ``dp``, ``fsdp`` and ``dp_cp``.

    The product of the sizes is the world size. Other options:

    - ``parallelize_fn``: ``parallelize_fn(module, device_mesh) -> module`` applies tensor
      parallelism and ``fully_shard``. Without one, the module is sharded with
      ``fully_shard`` over the data dimensions.
    - ``pipeline_fn(module, stage_index, num_stages) -> stage module`` or ``pipeline_split``
      (module names where stages begin) cut the model into stages for ``pp`` > 1;
      ``pipeline_schedule`` ('GPipe', '1F1B', 'Interleaved1F1B') and ``microbatches`` (None:
      one per stage) say how a batch runs through them.
    - ``save_distributed_checkpoint``: save a folder of shards through
      ``torch.distributed.checkpoint`` (every rank writes its own); False gathers the full
      state into one file written by rank 0.
    - ``activation_checkpointing_policy``: layer classes whose activations are recomputed
      during backward, applied before ``parallelize_fn``.

    Collectives run over every process by default; give ``group=<dimension>`` (or a process
    group) to reduce or gather over one dimension of the mesh. Optimizers created before
    ``setup`` are rebound, in place, to the parameters that replaced theirs (matched by
    name; with a pipeline, to those of this process's stages).
    """

    wrapper: ClassVar[str] = "model_parallel"

    parallelize_fn: Callable[[nn.Module, Any], nn.Module] | None = None
    data_parallel_size: int | str = "auto"
    tensor_parallel_size: int | str = "auto"
    dp_replicate: int | str | None = None
    dp_shard: int | str | None = None
    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    pipeline_fn: Callable[[nn.Module, int, int], nn.Module] | None = None
    pipeline_split: Sequence[str] | None = None
    pipeline_schedule: str = "1F1B"
    microbatches: int | None = None
    save_distributed_checkpoint: bool = True
    activation_checkpointing_policy: Sequence[Any] | None = None

    #: The mesh: a DeviceMesh (Lightning's layout) or a ParallelMesh (the named one).
    _device_mesh: Any = None
    _pipeline: Pipeline | None = None

    # -- the mesh --------------------------------------------------------------------------

    def parallel_dims(self) -> ParallelDims:
        """The mesh's dimensions and sizes, 'auto' resolved."""
        named = {n: getattr(self, n) for n in NAMED_DIMS if getattr(self, n) is not None}
        if named:
            return named_dims(named, self.world_size, self.num_nodes)
        return lightning_dims(*self.parallel_sizes())

    def parallel_sizes(self) -> tuple[int, int]:
        """Lightning's (data-parallel, tensor-parallel) sizes, 'auto' resolved."""
        world = self.world_size
        data, tensor = lightning_sizes(
            self.data_parallel_size,
            self.tensor_parallel_size,
            world=world,
            nodes=self.num_nodes,
            processes_per_node=self.num_processes,
            layout_given=self.parallelize_fn is not None,
        )
        if not (is_size(data) and is_size(tensor)):
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
    def device_mesh(self) -> Any:
        """The mesh over every process: a DeviceMesh ``(data_parallel, tensor_parallel)``, or
        a ParallelMesh of the named dimensions."""
        if self._device_mesh is None:
            if not self._distributed():
                raise MisconfigurationError(
                    "the device mesh exists once the processes are connected: use it inside "
                    "the function given to launch (after setup_environment)"
                )
            dims = self.parallel_dims()
            device = self.root_device.type
            self._device_mesh = (
                ParallelMesh.build(dims, device)
                if dims.named
                else build_mesh(device, dims.sizes, dims.names)
            )
        return self._device_mesh

    def mesh(self, name: str) -> Any:
        """The DeviceMesh of one dimension of the mesh (a real or a joined one)."""
        names = self.parallel_dims().dimension_names()
        if name not in names:
            raise MisconfigurationError(
                f"{name!r} is not a dimension of the mesh; use one of {', '.join(names)}"
            )
        return self.device_mesh[name]

    def validate_configuration(self) -> None:
        super().validate_configuration()
        for option in LIGHTNING_OPTIONS:
            value = getattr(self, option)
            if value != "auto" and not is_size(value):
                raise MisconfigurationError(
                    f"{option}={value!r} is not allowed; give a positive number of processes or 'auto'"
                )
        named = [n for n in NAMED_DIMS if getattr(self, n) is not None]
        for name in named:
            value = getattr(self, name)
            if not (is_size(value) or (value == "auto" and name in AUTO_DIMS)):
                auto = " or 'auto'" if name in AUTO_DIMS else ""
                raise MisconfigurationError(
                    f"{name}={value!r} is not allowed; give a positive number of processes{auto}"
                )
        given = [o for o in LIGHTNING_OPTIONS if getattr(self, o) != "auto"]
        if named and given:
            raise MisconfigurationError(
                f"{given[0]} and {named[0]} size the mesh in two ways; give either "
                "data_parallel_size/tensor_parallel_size (Lightning's two dimensions) or "
                "dp_replicate/dp_shard/tp/pp/cp"
            )
        for option, signature in CALLABLES.items():
            value = getattr(self, option)
            if value is not None and not callable(value):
                raise MisconfigurationError(
                    f"{option}={value!r} is not callable; give a function {signature}"
                )
        self._validate_pipeline()

    def _validate_pipeline(self) -> None:
        stages = int(self.pp or 1)
        ways = [o for o in ("pipeline_fn", "pipeline_split") if getattr(self, o) is not None]
        if stages > 1 and len(ways) != 1:
            raise MisconfigurationError(
                f"pp={stages} cuts the model into pipeline stages: give pipeline_split (module "
                "names where stages begin) or pipeline_fn, one of them"
            )
        if stages == 1 and ways:
            raise MisconfigurationError(f"{ways[0]} cuts the model into stages for pp > 1")
        if self.pipeline_schedule not in SCHEDULES:
            raise MisconfigurationError(
                f"pipeline_schedule={self.pipeline_schedule!r} is not allowed; use one of "
                f"{', '.join(SCHEDULES)}"
            )
        if self.microbatches is not None and not is_size(self.microbatches):
            raise MisconfigurationError(
                f"microbatches={self.microbatches!r} is not allowed; give a positive number"
            )

    def setup_environment(self) -> None:
        if self._environment_ready:
            return
        super().setup_environment()
        _ = self.device_mesh  # mistakes in the sizes surface here, before any model is touched

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        """Processes that differ only in their tensor, pipeline or context coordinate read the
        same samples: the replicas and this process's index count the data dimensions."""
        dims = self.parallel_dims()
        if self._distributed():
            mesh = self.device_mesh[dims.data_dim]
            return {"num_replicas": mesh.size(), "rank": mesh.get_local_rank()}
        rank = dims.coordinate(self.global_rank, dims.data_dim)
        return {"num_replicas": dims.size(dims.data_dim), "rank": rank}

    # -- model and optimizers ----------------------------------------------------------------

    def setup_module_and_optimizers(
        self, module: nn.Module, optimizers: list[Optimizer]
    ) -> tuple[nn.Module, list[Optimizer]]:
        policy = self.activation_checkpointing_policy
        return lay_out(module, optimizers, self._lay_out, policy), optimizers

    def _lay_out(self, module: nn.Module) -> tuple[nn.Module, set[str] | None]:
        """The module laid out on the mesh, and with pipeline parallelism the names of the
        parameters this process's stages hold."""
        dims = self.parallel_dims()
        if dims.named and dims.size("pp") > 1:
            return self._build_pipeline(module, dims)
        return self.parallelize(module), None

    def _build_pipeline(self, module: nn.Module, dims: ParallelDims) -> tuple[nn.Module, set[str]]:
        options = {
            o: getattr(self, o)
            for o in ("pipeline_split", "pipeline_fn", "pipeline_schedule", "microbatches")
        }
        model, held = build_pipeline(
            module,
            options,
            self.parallelize,
            pp_rank=dims.coordinate(self.global_rank, "pp"),
            pp_size=dims.size("pp"),
            device=self.root_device,
            group=self.device_mesh["pp"].get_group(),
            precision=self.precision_plugin,
        )
        self._pipeline = model._pipeline
        return model, held

    def parallelize(self, module: nn.Module) -> nn.Module:
        """Lay ``module`` (or a pipeline stage) out on the mesh: the user's ``parallelize_fn``,
        or ``fully_shard`` over the data dimensions."""
        dims = self.parallel_dims()
        data = dims.size("dp_cp") if dims.named else dims.size("data_parallel")
        fsdp_mesh = "device_mesh.fsdp_mesh" if dims.named else "device_mesh['data_parallel']"
        if self.parallelize_fn is None and dims.named and dims.size("tp") > 1:
            raise MisconfigurationError(
                f"tp={dims.size('tp')} needs a parallelize_fn that applies tensor parallelism "
                "over device_mesh['tp']"
            )
        mesh = self.device_mesh
        if self.parallelize_fn is None:
            if dims.named and data == 1:
                return module  # nothing to shard over
            target = mesh.fsdp_mesh if dims.named else mesh["data_parallel"]
            return fsdp2().fully_shard(module, mesh=target, **self._fsdp_kwargs())
        result = self.parallelize_fn(module, mesh)
        if not isinstance(result, nn.Module):
            raise MisconfigurationError(
                f"parallelize_fn must return the module it laid out, not {type(result).__name__}"
            )
        if data > 1 and not fsdp_modules(result):
            raise MisconfigurationError(
                f"parallelize_fn applied no fully_shard, so the {data} data-parallel replicas "
                f"would train apart; call fully_shard(module, mesh={fsdp_mesh})"
            )
        return result

    def _fsdp_kwargs(self) -> dict[str, Any]:
        plugin = self.precision_plugin
        if isinstance(plugin, FSDPPrecisionBase):
            return {"mp_policy": plugin.mixed_precision_policy(root=True)}
        return {}

    def _fsdp_roots(self) -> list[nn.Module]:
        """The modules the layout was applied to: the model, or its pipeline stages."""
        if self._pipeline is not None:
            return [stage.submod for stage in self._pipeline.stages]
        return [self._model] if self._model is not None else []

    # -- steps ---------------------------------------------------------------------------

    def forward_backward(
        self,
        model: nn.Module,
        *inputs: Any,
        target: Any,
        loss_fn: Callable[[Any, Any], torch.Tensor],
    ) -> torch.Tensor:
        """Forward pass, ``loss_fn(output, target)`` and backward pass of one batch; returns
        the loss, detached. With pipeline parallelism the schedule runs them, microbatch by
        microbatch (the loss is the mean over microbatches, on every process of the
        pipeline); otherwise it is ``backward(loss_fn(model(*inputs), target))``."""
        if isinstance(model, PipelineModel):
            loss = model._pipeline.step(inputs, target, loss_fn)
            self.accelerator.after_backward()
            return loss
        loss = loss_fn(model(*inputs), target)
        self.backward(loss)
        return loss.detach()

    def context_parallel(
        self,
        buffers: Sequence[torch.Tensor],
        seq_dims: Sequence[int],
        no_restore_buffers: set[torch.Tensor] | None = None,
    ) -> contextlib.AbstractContextManager[None]:
        """A block in which ``buffers`` are cut along ``seq_dims`` over the ``cp`` dimension
        and attention runs across it (see ``context_parallel``); unchanged for ``cp`` = 1."""
        dims = self.parallel_dims()
        mesh = self.device_mesh["cp"] if dims.named and dims.size("cp") > 1 else None
        return context_parallel(mesh, self.root_device, buffers, seq_dims, no_restore_buffers)

    @contextlib.contextmanager
    def block_backward_sync(self) -> Generator[None, None, None]:
        modules = [m for root in self._fsdp_roots() for m in fsdp_modules(root)]
        for module in modules:
            module.set_requires_gradient_sync(False)  # type: ignore[operator]
        try:
            yield
        finally:
            for module in modules:
                module.set_requires_gradient_sync(True)  # type: ignore[operator]

    # -- collectives -------------------------------------------------------------------------

    def _group(self, group: Any) -> Any:
        return self.mesh(group).get_group() if isinstance(group, str) else group

    def reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        return super().reduce(tensor, self._group(group), reduce_op)

    def all_gather(
        self, tensor: torch.Tensor, group: Any = None, sync_grads: bool = False
    ) -> torch.Tensor:
        return super().all_gather(tensor, self._group(group), sync_grads)

    @property
    def saves_sharded(self) -> bool:
        """``save_checkpoint`` writes a folder of shards (see ``sharded_checkpoint``) unless
        ``save_distributed_checkpoint`` is off."""
        return bool(self.save_distributed_checkpoint)

    @property
    def reads_sharded_checkpoints(self) -> bool:
        return True

    # -- teardown ----------------------------------------------------------------------------

    def teardown(self) -> None:
        roots = self._fsdp_roots()
        if self._pipeline is not None:
            self._pipeline.settle()
        self._pipeline = None
        self.release_sharded_model(roots)
