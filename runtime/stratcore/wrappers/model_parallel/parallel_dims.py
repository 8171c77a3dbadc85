"""The dimensions of 'model_parallel''s device mesh, from the strategy's options.

Two layouts, chosen by which options are given:

- Lightning's, from ``data_parallel_size`` x ``tensor_parallel_size``: a two-dimensional mesh
  ``("data_parallel", "tensor_parallel")``, exactly as Lightning's ModelParallelStrategy
  builds it; ``fully_shard`` runs over ``data_parallel``.
- torchtitan's, from any of ``dp_replicate``, ``dp_shard``, ``tp``, ``pp`` and ``cp``: a mesh
  ``("pp", "dp_replicate", "dp_shard", "cp", "tp")`` (outermost first; a dimension of size 1
  stays, so that code can always name it), with three dimensions joined from them:
  ``dp`` (``dp_replicate`` x ``dp_shard``: processes that read different samples), ``fsdp``
  (``dp_shard`` x ``cp``: what ``fully_shard`` shards over, since the processes of a
  context-parallel group hold the same parameters) and ``dp_cp`` (all three: the processes
  whose gradients are averaged).

``ParallelDims`` is the layout as plain data (sizes, names, which dimensions are data
dimensions), computed without any process; ``ParallelMesh`` holds the meshes built from it
once the processes are connected: the torch ``DeviceMesh`` over every process and the joined
dimensions (kept here rather than sliced from the root mesh, which torch deprecates).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stratcore.exceptions import MisconfigurationError

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

#: Lightning's two dimensions.
LIGHTNING_DIMS = ("data_parallel", "tensor_parallel")
#: torchtitan's dimensions, outermost first, and the options that size them.
NAMED_DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
#: Joined dimensions of the named layout -> the dimensions each one joins.
JOINED_DIMS: dict[str, tuple[str, ...]] = {
    "dp": ("dp_replicate", "dp_shard"),
    "fsdp": ("dp_shard", "cp"),
    "dp_cp": ("dp_replicate", "dp_shard", "cp"),
}
#: The named options that may be 'auto'.
AUTO_DIMS = ("dp_replicate", "dp_shard")


def is_size(value: Any) -> bool:
    """A positive number of processes (a bool is no number)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


@dataclass(frozen=True)
class ParallelDims:
    """A resolved layout: the mesh's dimensions and sizes, outermost first."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    #: Joined dimension -> the dimensions it joins (named layout only).
    joined: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def named(self) -> bool:
        """Whether this is torchtitan's layout (else Lightning's two dimensions)."""
        return self.names == NAMED_DIMS

    @property
    def world_size(self) -> int:
        """Number of processes the dimensions need: the product of their sizes."""
        return math.prod(self.sizes)

    def size(self, name: str) -> int:
        """The size of a dimension, real or joined."""
        if name in self.joined:
            return math.prod(self.size(part) for part in self.joined[name])
        return self.sizes[self.names.index(name)]

    @property
    def data_dim(self) -> str:
        """The dimension over which processes read different samples."""
        return "dp" if self.named else "data_parallel"

    @property
    def fsdp_dims(self) -> tuple[str, ...]:
        """The dimensions ``fully_shard`` lays parameters over: ``(replicate, shard)`` for
        hybrid sharding, else the shard dimension alone."""
        if not self.named:
            return ("data_parallel",)
        return ("dp_replicate", "fsdp") if self.size("dp_replicate") > 1 else ("fsdp",)

    def dimension_names(self) -> tuple[str, ...]:
        """Every name ``reduce(group=...)`` and ``ParallelMesh`` accept."""
        return (*self.names, *self.joined)

    def coordinate(self, rank: int, name: str) -> int:
        """Process ``rank``'s index along dimension ``name`` (real or joined); ranks fill the
        mesh in row-major order, as ``init_device_mesh`` lays them out."""
        if name in self.joined:
            index = 0
            for part in self.joined[name]:
                index = index * self.size(part) + self.coordinate(rank, part)
            return index
        position = self.names.index(name)
        inner = math.prod(self.sizes[position + 1 :])
        return (rank // inner) % self.sizes[position]

    def describe(self) -> str:
        """The dimensions as a reader writes them: 'pp=2 x dp_shard=2'."""
        return " x ".join(f"{n}={s}" for n, s in zip(self.names, self.sizes, strict=True))


def lightning_sizes(
    data: Any, tensor: Any, *, world: int, nodes: int, processes_per_node: int, layout_given: bool
) -> tuple[Any, Any]:
    """Lightning's two sizes with 'auto' resolved (values that are not sizes are returned
    as they are, for the caller to refuse). 'auto' is what Lightning's ModelParallelStrategy
    takes, the number of nodes (data) and the processes per node (tensor), when the user
    lays the model out (``layout_given``); otherwise nothing is split over tensors, so the
    tensor size is 1 and the data size takes the remaining processes."""
    if layout_given:
        tensor = processes_per_node if tensor == "auto" else tensor
        auto_data: Any = nodes
    else:
        tensor = 1 if tensor == "auto" else tensor
        auto_data = world // tensor if is_size(tensor) and world % tensor == 0 else world
    return (auto_data if data == "auto" else data), tensor


def lightning_dims(data: Any, tensor: Any) -> ParallelDims:
    """The two dimensions of Lightning's ModelParallelStrategy: data and tensor parallel sizes."""
    return ParallelDims(LIGHTNING_DIMS, (int(data), int(tensor)))


def named_dims(options: Mapping[str, Any], world_size: int, num_nodes: int) -> ParallelDims:
    """torchtitan's layout from the named options (None: not given). ``tp``, ``pp``, ``cp``
    and ``dp_replicate`` default to 1, ``dp_shard`` to 'auto': the processes the other
    dimensions leave. ``dp_replicate='auto'`` is the number of nodes when ``dp_shard`` is
    'auto' too (replicas across nodes, shards within one), else the processes left."""
    values = {name: options.get(name) for name in NAMED_DIMS}
    for name, value in values.items():
        if value is None or is_size(value) or (value == "auto" and name in AUTO_DIMS):
            continue
        allowed = (
            "a positive number of processes or 'auto'"
            if name in AUTO_DIMS
            else ("a positive number of processes")
        )
        raise MisconfigurationError(f"{name}={value!r} is not allowed; give {allowed}")
    sizes = {n: 1 if v is None else v for n, v in values.items()}
    if values["dp_shard"] is None:
        sizes["dp_shard"] = "auto"
    if sizes["dp_replicate"] == "auto" and sizes["dp_shard"] == "auto":
        sizes["dp_replicate"] = num_nodes
    auto = [n for n in AUTO_DIMS if sizes[n] == "auto"]
    if auto:
        (name,) = auto
        given = math.prod(int(sizes[n]) for n in NAMED_DIMS if n != name)
        if world_size % given:
            fixed = " x ".join(f"{n}={sizes[n]}" for n in NAMED_DIMS if n != name)
            raise MisconfigurationError(
                f"{fixed} is {given} processes, which does not divide the job's {world_size}; "
                f"{name}='auto' takes what the other sizes leave"
            )
        sizes[name] = world_size // given
    dims = ParallelDims(NAMED_DIMS, tuple(int(sizes[n]) for n in NAMED_DIMS), JOINED_DIMS)
    if dims.world_size != world_size:
        raise MisconfigurationError(
            f"{dims.describe()} is {dims.world_size} processes, but the job has {world_size}; "
            "the sizes must multiply to the world size"
        )
    return dims


class ParallelMesh:
    """The meshes of a named layout: index it with any dimension name (``mesh["tp"]``,
    ``mesh["fsdp"]``, ``mesh["dp_replicate", "fsdp"]``, ...) for a ``DeviceMesh``;
    ``fsdp_mesh`` is the mesh ``fully_shard`` takes, and every other attribute is the
    ``DeviceMesh`` over every process (``root``)."""

    def __init__(self, dims: ParallelDims, root: DeviceMesh) -> None:
        self.dims = dims
        self.root = root
        #: Joined dimensions, and the two-dimensional (replicate, shard) mesh of HSDP.
        self._meshes: dict[Any, DeviceMesh] = {}
        for name, parts in dims.joined.items():
            self._meshes[name] = root[parts]._flatten(name)
        if len(dims.fsdp_dims) == 2:
            sizes = (dims.size("dp_replicate"), dims.size("fsdp"))
            self._meshes[dims.fsdp_dims] = self._meshes["dp_cp"]._unflatten(
                0, sizes, dims.fsdp_dims
            )

    @classmethod
    def build(cls, dims: ParallelDims, device_type: str) -> ParallelMesh:
        """Build every mesh of ``dims`` (the processes must be connected; every process
        builds the same ones, in the same order)."""
        from torch.distributed.device_mesh import init_device_mesh

        root = init_device_mesh(device_type, dims.sizes, mesh_dim_names=dims.names)
        return cls(dims, root)

    def __getitem__(self, names: str | tuple[str, ...]) -> DeviceMesh:
        key = names[0] if isinstance(names, tuple) and len(names) == 1 else names
        if key in self._meshes:
            return self._meshes[key]
        wanted = (key,) if isinstance(key, str) else tuple(key)
        unknown = [n for n in wanted if n not in self.dims.names]
        if unknown:
            raise KeyError(
                f"{unknown[0]!r} is not a dimension of the mesh; use one of "
                f"{', '.join(self.dims.dimension_names())}"
            )
        return self.root[key]

    @property
    def fsdp_mesh(self) -> DeviceMesh:
        """The mesh ``fully_shard`` takes: ``fsdp``, or ``(dp_replicate, fsdp)`` for hybrid
        sharding when ``dp_replicate`` > 1."""
        return self[self.dims.fsdp_dims]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("dims", "root", "_meshes"):
            raise AttributeError(name)
        return getattr(self.root, name)

    def __repr__(self) -> str:
        return f"ParallelMesh({self.dims.describe()})"
