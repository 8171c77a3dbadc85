"""Device meshes and sharding layouts for the strategies built on FSDP2 ('fsdp' and
'model_parallel').

FSDP2 (``fully_shard``) takes its layout from the mesh it is given: on a one-dimensional mesh
it shards every parameter across all processes; on a two-dimensional ``(replicate, shard)``
mesh it shards within each group of the second dimension and keeps a replica per group of the
first (hybrid sharding, HSDP). Whether gathered parameters are freed after the forward pass is
its ``reshard_after_forward`` argument. Lightning's ``sharding_strategy`` names map onto
these two knobs (``sharding_layout``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stratcore.exceptions import MisconfigurationError

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

#: Lightning's ``sharding_strategy`` values (torch's ShardingStrategy names).
SHARDING_STRATEGIES = (
    "FULL_SHARD",
    "SHARD_GRAD_OP",
    "NO_SHARD",
    "HYBRID_SHARD",
    "_HYBRID_SHARD_ZERO2",
)
#: Names of the two dimensions of a hybrid-sharding mesh.
HYBRID_DIMS = ("replicate", "shard")


@dataclass(frozen=True)
class ShardingLayout:
    """How FSDP2 is applied: the mesh's shape and the default ``reshard_after_forward``."""

    #: Mesh shape: ``(world,)`` to shard over every process, ``(replicate, shard)`` for HSDP.
    mesh_shape: tuple[int, ...]
    #: Free gathered parameters after forward (None: FSDP2's default, True but for the root).
    reshard_after_forward: bool | None

    @property
    def hybrid(self) -> bool:
        """Whether the layout replicates over one dimension and shards over the other."""
        return len(self.mesh_shape) == 2


def sharding_strategy_name(value: Any) -> str:
    """``value`` (a name in any case, or torch's ShardingStrategy member) as a known name."""
    name = getattr(value, "name", value)
    text = name.strip().upper() if isinstance(name, str) else None
    if text not in SHARDING_STRATEGIES:
        raise MisconfigurationError(
            f"sharding_strategy={value!r} is not allowed; use one of {', '.join(SHARDING_STRATEGIES)}"
        )
    return text


def check_mesh_layout(device_mesh: Any) -> None:
    """A ``device_mesh`` option must be None, a DeviceMesh, or two positive sizes."""
    if device_mesh is None or _is_device_mesh(device_mesh):
        return
    if (
        isinstance(device_mesh, str)
        or not isinstance(device_mesh, Sequence)
        or len(device_mesh) != 2
        or not all(
            isinstance(size, int) and not isinstance(size, bool) and size > 0
            for size in device_mesh
        )
    ):
        raise MisconfigurationError(
            f"device_mesh={device_mesh!r} is not allowed; give (replicate, shard) sizes such as "
            "(2, 4), a torch DeviceMesh, or None"
        )


def sharding_layout(
    sharding_strategy: Any, device_mesh: Any, world_size: int, num_nodes: int
) -> ShardingLayout:
    """FSDP2's layout for a Lightning ``sharding_strategy``.

    FULL_SHARD shards everything over all processes (ZeRO-3); SHARD_GRAD_OP keeps the
    gathered parameters from forward to backward (ZeRO-2); NO_SHARD keeps a full replica in
    every process (a ``(world, 1)`` mesh: gradients are all-reduced, as DDP does);
    HYBRID_SHARD shards within a node and replicates across nodes, on the ``device_mesh``
    sizes when given, else ``(num_nodes, processes per node)``; _HYBRID_SHARD_ZERO2 is
    HYBRID_SHARD that keeps gathered parameters as SHARD_GRAD_OP does.
    """
    name = sharding_strategy_name(sharding_strategy)
    check_mesh_layout(device_mesh)
    if device_mesh is not None and "HYBRID" not in name:
        raise MisconfigurationError(
            f"device_mesh={_describe(device_mesh)} sets the replicate x shard layout of hybrid "
            f"sharding; use it with sharding_strategy='HYBRID_SHARD' (not {name!r})"
        )
    reshard = False if name in ("SHARD_GRAD_OP", "NO_SHARD", "_HYBRID_SHARD_ZERO2") else None
    if name == "NO_SHARD":
        return ShardingLayout((world_size, 1), reshard)
    if "HYBRID" not in name:
        return ShardingLayout((world_size,), reshard)
    if device_mesh is None:
        if world_size % num_nodes:
            raise MisconfigurationError(
                f"sharding_strategy={name!r}: {world_size} processes do not divide into "
                f"{num_nodes} nodes; give device_mesh=(replicate, shard)"
            )
        shape = (num_nodes, world_size // num_nodes)
    else:
        shape = tuple(device_mesh.shape) if _is_device_mesh(device_mesh) else tuple(device_mesh)
    if shape[0] * shape[1] != world_size:
        raise MisconfigurationError(
            f"device_mesh={shape}: {shape[0]} x {shape[1]} processes, but the job has "
            f"{world_size}; the sizes must multiply to the world size"
        )
    return ShardingLayout(shape, reshard)


def build_mesh(
    device_type: str, shape: tuple[int, ...], dim_names: tuple[str, ...] | None = None
) -> DeviceMesh:
    """A DeviceMesh over every process (the process group must exist)."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device_type, shape, mesh_dim_names=dim_names)


def _is_device_mesh(value: Any) -> bool:
    from torch.distributed.device_mesh import DeviceMesh

    return isinstance(value, DeviceMesh)


def _describe(device_mesh: Any) -> str:
    return (
        f"DeviceMesh{tuple(device_mesh.shape)}"
        if _is_device_mesh(device_mesh)
        else repr(device_mesh)
    )
