"""Collective operations over torch.distributed, shaped by what each backend can do.

A ``CollectiveBackend`` records which reductions a backend performs natively and which dtypes
it cannot reduce. ``all_reduce`` emulates the rest: 'mean' becomes a sum divided by the world
size, and unsupported dtypes are reduced in a wider one and cast back.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
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
    #: Whether the backend can split a process group into subgroups (its
    #: ``supportsSplitting``): DeviceMesh makes its groups that way from a group bound to its
    #: device (``init_process_group(device_id=...)``), and fails on a backend that cannot.
    splits_groups: bool = False

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
