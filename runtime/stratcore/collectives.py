"""Collective operations over torch.distributed, shaped by what each backend can do.

A ``CollectiveBackend`` records which reductions a backend performs natively and which dtypes
it cannot reduce. ``all_reduce`` emulates the rest: 'mean' becomes a sum divided by the world
size, and unsupported dtypes are reduced in a wider one and cast back.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import FunctionType
from typing import Any

import torch
import torch.distributed as dist

from .contract import REDUCE_OPS
from .exceptions import CollectiveTimeoutError, MisconfigurationError
from .imports import Requirement

_ALIASES = {"avg": "mean", "add": "sum", "prod": "product", "mul": "product"}


@dataclass(frozen=True)
class CollectiveBackend:
    """A torch.distributed backend and its capabilities."""

    name: str
    reduce_ops: frozenset[str] = frozenset(REDUCE_OPS)
    casts: Mapping[str, str] = field(default_factory=dict)
    init_hook: str | None = None
    requires: tuple[Requirement, ...] = ()
    #: The name torch.distributed knows the backend by, where it differs from ``name`` (two
    #: vendors' libraries may register the same name).
    torch_name: str | None = None
    #: Module whose import registers the backend with torch.distributed.
    registered_by: str | None = None
    #: Whether the backend is the one torch maps the device type to
    #: (``Backend.default_device_backend_map``), known only at run time (``for_device``).
    from_device_map: bool = False

    @property
    def process_group_name(self) -> str:
        """The name ``torch.distributed.init_process_group`` takes for this backend."""
        return self.torch_name or self.name

    def for_device(self, device_type: str) -> CollectiveBackend:
        """This backend on devices of ``device_type``: for a backend taken from torch's device
        map, the one torch maps that type to, with this backend's capabilities."""
        if not self.from_device_map:
            return self
        self.register()
        mapped = dist.Backend.default_device_backend_map.get(device_type)
        if mapped is None:
            raise MisconfigurationError(
                f"backend {self.name!r} is the one torch.distributed maps the device type to, and "
                f"it maps none to {device_type!r} (Backend.default_device_backend_map: "
                f"{dict(dist.Backend.default_device_backend_map)}); name a backend with "
                "process_group_backend"
            )
        return replace(self, torch_name=str(mapped), from_device_map=False)

    def register(self) -> None:
        """Make the backend known to torch.distributed: import the module that registers it."""
        if self.registered_by is not None:
            importlib.import_module(self.registered_by)

    def cast_for(self, dtype: torch.dtype) -> torch.dtype | None:
        """The dtype to reduce ``dtype`` in, or None if the backend handles it as is."""
        target = self.casts.get(str(dtype).removeprefix("torch."))
        return getattr(torch, target) if target else None


def normalize_reduce_op(op: Any) -> str:
    """Accept 'mean', 'sum', ..., their aliases ('avg'), or a torch ReduceOp."""
    if op is None:
        return "mean"
    if isinstance(op, dist.ReduceOp) or type(op).__name__ == "RedOpType":
        name = str(op).rsplit(".", 1)[-1].lower()
    else:
        name = str(op).lower()
    name = _ALIASES.get(name, name)
    if name not in REDUCE_OPS:
        raise MisconfigurationError(
            f"reduce_op={op!r} is not supported; use one of {', '.join(REDUCE_OPS)}"
        )
    return name


def reduce_each(
    data: Any, device: torch.device, reduce: Callable[[torch.Tensor], torch.Tensor]
) -> Any:
    """Apply ``reduce`` to every tensor in ``data``: a tensor, a Python number (made a tensor
    on ``device``), or dicts, lists and tuples of them, nested; the result has the same shape
    of containers. Anything else is a TypeError naming where it was found."""

    def visit(value: Any, where: str) -> Any:
        if isinstance(value, torch.Tensor):
            return reduce(value)
        if isinstance(value, bool | int | float):
            return reduce(torch.tensor(value, device=device))
        if isinstance(value, Mapping):
            return type(value)(  # type: ignore[call-arg]
                (key, visit(item, f"{where}[{key!r}]")) for key, item in value.items()
            )
        if isinstance(value, tuple) and hasattr(value, "_fields"):  # named tuple
            return type(value)(
                *(
                    visit(item, f"{where}.{name}")
                    for name, item in zip(value._fields, value, strict=True)
                )
            )
        if isinstance(value, list | tuple):
            return type(value)(visit(item, f"{where}[{index}]") for index, item in enumerate(value))
        raise TypeError(
            f"reduce() takes tensors, numbers, and dicts, lists or tuples of them; {where} is "
            f"a {type(value).__name__}"
        )

    return visit(data, "the input")


_TORCH_OPS = {
    "sum": dist.ReduceOp.SUM,
    "product": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
    "mean": dist.ReduceOp.AVG,
}


def all_reduce(
    tensor: torch.Tensor,
    op: Any,
    backend: CollectiveBackend,
    group: Any = None,
) -> torch.Tensor:
    """Reduce ``tensor`` over every process and return the result (the input is untouched)."""
    name = normalize_reduce_op(op)
    world_size = dist.get_world_size(group)
    result = tensor.detach().clone()
    if name == "mean" and not result.is_floating_point() and not result.is_complex():
        result = result.to(torch.get_default_dtype())
    out_dtype = result.dtype
    wider = backend.cast_for(result.dtype)
    if wider is not None:
        result = result.to(wider)
    if name == "mean" and "mean" not in backend.reduce_ops:
        dist.all_reduce(result, op=dist.ReduceOp.SUM, group=group)
        result = result / world_size
    elif name not in backend.reduce_ops:
        raise MisconfigurationError(
            f"backend {backend.name!r} cannot reduce with {name!r}; it supports "
            f"{', '.join(sorted(backend.reduce_ops))} (and 'mean' by emulation)"
        )
    else:
        dist.all_reduce(result, op=_TORCH_OPS[name], group=group)
    return result.to(out_dtype) if result.dtype != out_dtype else result


def all_gather(
    tensor: torch.Tensor, backend: CollectiveBackend, group: Any = None, sync_grads: bool = False
) -> torch.Tensor:
    """Gather ``tensor`` from every process into a new leading dimension of size world_size."""
    if sync_grads:
        from torch.distributed.nn.functional import all_gather as differentiable_all_gather

        return torch.stack(
            differentiable_all_gather(tensor.contiguous(), group=group or dist.group.WORLD)
        )
    tensor = tensor.detach().contiguous()
    out_dtype = tensor.dtype
    wider = backend.cast_for(tensor.dtype)
    if wider is not None:
        tensor = tensor.to(wider)
    gathered = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, tensor, group=group)
    return torch.stack(gathered).to(out_dtype)


def broadcast_object(
    obj: Any, src: int, group: Any = None, device: torch.device | None = None
) -> Any:
    """Send a picklable object from rank ``src`` to every process and return it."""
    holder = [obj]
    dist.broadcast_object_list(holder, src=src, group=group, device=device)
    return holder[0]


#: How backends word a timeout: gloo "Timed out waiting 5000ms for recv operation", the store
#: "Timed out after 5 seconds waiting for clients", NCCL's watchdog "...timeout...".
_TIMEOUT_WORDING = re.compile(r"\btimed? ?out\b|\btimeout\b", re.IGNORECASE)


def is_timeout_error(error: BaseException) -> bool:
    """Whether a backend's error means that a peer did not answer in time."""
    if isinstance(error, CollectiveTimeoutError):
        return False
    if isinstance(error, TimeoutError):
        return True
    return isinstance(error, RuntimeError) and bool(_TIMEOUT_WORDING.search(str(error)))


def release_process_group() -> None:
    """Destroy the default process group of this process, if there is one, with every group
    made from it, so that their threads end while the interpreter is whole: during its
    shutdown, gloo's threads can abort the process after a successful run.

    A group lives as long as something holds it, destroyed or not. Besides the modules that
    take it as a default argument (``parallel.import_group_defaults``), what holds groups is
    let go of first: DTensor's and fairscale's caches, the models DeepSpeed keeps
    (``forget_deepspeed_models``) and defaults of modules imported after the group existed;
    then reference cycles (DDP's reducer, engines) are freed.
    """
    _clear_dtensor_caches()
    _clear_fairscale_group_cache()
    forget_deepspeed_models()
    _drop_group_defaults()
    gc.collect()  # also where the group is destroyed already: what still holds it is freed
    if not (dist.is_available() and dist.is_initialized()):
        return
    with contextlib.suppress(Exception):
        deepspeed_comm = sys.modules.get("deepspeed.comm.comm")
        if getattr(deepspeed_comm, "cdb", None) is not None:
            # DeepSpeed keeps groups of its own (its world group among them); its
            # destroy_process_group destroys torch's groups and lets go of those.
            deepspeed_comm.destroy_process_group()  # type: ignore[union-attr]
        else:
            dist.destroy_process_group()


#: Modules (with their submodules) whose functions take the default group as a default
#: argument, evaluated on import (``parallel.import_group_defaults``); strategies add theirs.
GROUP_DEFAULT_MODULES: set[str] = set()


def _drop_group_defaults() -> None:
    """Replace by None every default argument that holds a process group in the functions and
    classes of ``GROUP_DEFAULT_MODULES``: imported after the group existed (a later launch
    reusing the group of an earlier one with other modules), they would keep it alive. None
    is the default group at call time, what the defaults meant."""
    if not (GROUP_DEFAULT_MODULES and dist.is_available()):
        return
    prefixes = tuple(f"{name}." for name in GROUP_DEFAULT_MODULES)
    for name, module in list(sys.modules.items()):
        if module is None or (name not in GROUP_DEFAULT_MODULES and not name.startswith(prefixes)):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, type) and value.__module__ == name:
                members = [getattr(member, "__func__", member) for member in vars(value).values()]
            else:
                members = [value]
            for function in members:
                if isinstance(function, FunctionType):
                    _drop_defaults(function)


def _drop_defaults(function: FunctionType) -> None:
    def holds_group(values: Iterable[Any]) -> bool:
        return any(isinstance(value, dist.ProcessGroup) for value in values)

    def dropped(value: Any) -> Any:
        return None if isinstance(value, dist.ProcessGroup) else value

    if function.__defaults__ and holds_group(function.__defaults__):
        function.__defaults__ = tuple(map(dropped, function.__defaults__))
    if function.__kwdefaults__ and holds_group(function.__kwdefaults__.values()):
        function.__kwdefaults__ = {k: dropped(v) for k, v in function.__kwdefaults__.items()}


def forget_deepspeed_models(module: Any = None) -> None:
    """Let go of what DeepSpeed's ZeRO stage 3 keeps of ``module`` (of every model without
    one), where DeepSpeed is imported.

    A stage-3 engine puts its model on a list of DeepSpeed's (``FWD_MODULE_STACK``) when it is
    set up, and its parameter coordinator remembers itself in a cache of its class's; neither
    lets go, not in ``engine.destroy()`` either, so the model, its engine and the engine's
    process groups would live as long as the process. The cache only saves recomputing which
    parameters to release after each module: it is emptied for every engine.
    """
    offload = sys.modules.get("deepspeed.runtime.zero.parameter_offload")
    stack = getattr(offload, "FWD_MODULE_STACK", None)
    if isinstance(stack, list):
        stack[:] = [] if module is None else [held for held in stack if held is not module]
    coordinator = sys.modules.get("deepspeed.runtime.zero.partitioned_param_coordinator")
    coordinator_class = getattr(coordinator, "PartitionedParameterCoordinator", None)
    method = getattr(coordinator_class, "_PartitionedParameterCoordinator__params_to_release", None)
    # The cached function is wrapped in DeepSpeed's profiling decorator: its closure holds it.
    for cell in getattr(method, "__closure__", None) or ():
        with contextlib.suppress(ValueError):  # an empty cell
            clear = getattr(cell.cell_contents, "cache_clear", None)
            if callable(clear):
                clear()


def _clear_fairscale_group_cache() -> None:
    """Forget the groups fairscale's FSDP keeps in a cache of its own (an attribute of
    ``get_process_group_cached``): they would outlive ``destroy_process_group``, and a later
    launch would get destroyed groups from it. fairscale makes the cache again when asked."""
    parallel = sys.modules.get("fairscale.internal.parallel")
    with contextlib.suppress(AttributeError):
        del parallel.get_process_group_cached._global_group_cache  # type: ignore[union-attr]


def _clear_dtensor_caches() -> None:
    """Empty DTensor's caches of sharding plans (FSDP2 fills them): their entries hold device
    meshes, and the meshes the process group, which would then outlive
    ``destroy_process_group`` like the defaults described in ``import_group_defaults``."""
    if "torch.distributed.tensor" not in sys.modules:
        return
    with contextlib.suppress(Exception):
        from torch.distributed.tensor import _collective_utils, _redistribute
        from torch.distributed.tensor.debug import _clear_sharding_prop_cache

        _clear_sharding_prop_cache()
        _redistribute.clear_redistribute_planner_cache()
        _redistribute._gen_transform_infos.cache_clear()
        _collective_utils.MeshTopoInfo.build_from_mesh.cache_clear()
