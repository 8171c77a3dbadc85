"""The two-process checks of the test device's c10d backend, run by test_testdevice_distributed.py.

Usage: ``python testdevice_ranks.py CHECK RANK WORLD FOLDER``, once per rank; FOLDER holds the
FileStores. Each rank loads the device, binds to device RANK and joins a process group of the
test device's backend; every result is compared with the same computation on the CPU.
"""

from __future__ import annotations

import copy
import sys
import warnings
from datetime import timedelta
from pathlib import Path

import stratgen_testdevice
import torch
from testdevice_checks import NAME, close, progress
from torch import nn

BACKEND = "testccl"


def _init(rank: int, world: int, store_file: Path, backend: str = BACKEND) -> torch.device:
    import torch.distributed as dist

    stratgen_testdevice.load()
    stratgen_testdevice.module().set_device(rank)
    dist.init_process_group(
        backend=backend,
        store=dist.FileStore(str(store_file), world),
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=120),  # a rank that hangs fails here, not in the test's wait
    )
    return torch.device(NAME, rank)


def _inputs(world: int, shape: tuple[int, ...]) -> list[torch.Tensor]:
    """Every rank's input, the same on every rank: the CPU references need them all."""
    generator = torch.Generator().manual_seed(1234)
    return [torch.randn(*shape, generator=generator) for _ in range(world)]


def rank_collectives(rank: int, world: int, folder: Path) -> None:
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    dev = _init(rank, world, folder / "collectives")
    inputs = _inputs(world, (2 * world, 3))
    total = sum(inputs, torch.zeros_like(inputs[0]))
    mine = inputs[rank].to(dev)

    summed = mine.clone()
    dist.all_reduce(summed)
    averaged = mine.clone()
    dist.all_reduce(averaged, op=dist.ReduceOp.AVG)
    assert summed.device == dev and close(summed, total) and close(averaged, total / world)
    progress("all_reduce")
    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gathered = torch.empty(2 * world * world, 3, device=dev)
    all_gather(gathered, mine)
    assert close(gathered, torch.cat(inputs))
    progress("all_gather_into_tensor")
    reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    scattered = torch.empty(2, 3, device=dev)
    reduce_scatter(scattered, mine)
    assert close(scattered, total.chunk(world)[rank])
    progress("reduce_scatter_tensor")
    broadcast = mine.clone()
    dist.broadcast(broadcast, src=world - 1)
    assert close(broadcast, inputs[world - 1])
    chunks = [torch.empty(2 * world, 3, device=dev) for _ in range(world)]
    dist.all_gather(chunks, mine)
    assert all(close(c, i) for c, i in zip(chunks, inputs, strict=True))
    exchanged = torch.empty_like(mine)
    dist.all_to_all_single(exchanged, mine)
    expected = torch.cat([inputs[r].chunk(world)[rank] for r in range(world)])
    assert close(exchanged, expected)
    if rank == 0:
        dist.send(mine, dst=1)
    elif rank == 1:
        received = torch.empty_like(mine)
        dist.recv(received, src=0)
        assert close(received, inputs[0])
    work = dist.all_reduce(mine.clone(), async_op=True)
    assert work is not None and work.wait()
    assert close(work.get_future().value()[0], total)
    dist.barrier()
    progress("broadcast, all_gather, all_to_all, send/recv, futures, barrier")
    reduced = mine.clone()
    dist.reduce(reduced, dst=0)
    assert close(reduced, total if rank == 0 else inputs[rank])
    pieces = torch.empty(2, 3, device=dev)
    dist.reduce_scatter(pieces, list(mine.chunk(world)))
    assert close(pieces, total.chunk(world)[rank])
    bucket = [torch.empty_like(mine) for _ in range(world)] if rank == 0 else None
    dist.gather(mine, bucket, dst=0)
    assert bucket is None or all(close(b, i) for b, i in zip(bucket, inputs, strict=True))
    piece = torch.empty_like(mine)
    dist.scatter(piece, [i.to(dev) for i in inputs] if rank == 0 else None, src=0)
    assert close(piece, inputs[rank])
    objects: list[object] = [None] * world
    dist.all_gather_object(objects, {"rank": rank})
    assert objects == [{"rank": r} for r in range(world)]
    subgroup = dist.new_group(list(range(world)))
    again = mine.clone()
    dist.all_reduce(again, group=subgroup)
    assert close(again, total)
    progress("reduce, reduce_scatter, gather, scatter, objects, a new group")
    world_group = dist.group.WORLD
    assert world_group is not None
    with warnings.catch_warnings():  # the names are deprecated in torch 2.13, not gone
        warnings.simplefilter("ignore", FutureWarning)
        gathered = funcol.all_gather_tensor(mine, 0, world_group)
        scattered = funcol.reduce_scatter_tensor(mine, "sum", 0, world_group)
    assert gathered.device == dev and close(gathered, torch.cat(inputs))
    assert scattered.device == dev and close(scattered, total.chunk(world)[rank])
    progress("functional collectives")
    dist.destroy_process_group()

    dev = _init(rank, world, folder / "mixed", backend=f"cpu:gloo,{NAME}:{BACKEND}")
    on_cpu, on_device = inputs[rank].clone(), inputs[rank].to(dev)
    dist.all_reduce(on_cpu)
    dist.all_reduce(on_device)
    assert on_cpu.is_cpu and close(on_cpu, total) and close(on_device, total)
    dist.barrier()
    progress(f"cpu:gloo,{NAME}:{BACKEND}")
    dist.destroy_process_group()


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(6, 8)
        self.second = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x)))


def _cpu_reference(model: nn.Module, inputs: list[torch.Tensor], steps: int) -> nn.Module:
    """The training that data parallelism must reproduce: the mean of the ranks' losses."""
    model = copy.deepcopy(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(steps):
        optimizer.zero_grad()
        (sum(model(x).square().mean() for x in inputs) / len(inputs)).backward()
        optimizer.step()
    return model


def rank_ddp_and_fsdp2(rank: int, world: int, folder: Path) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    dev = _init(rank, world, folder / "store")
    inputs, steps = _inputs(world, (5, 6)), 2
    torch.manual_seed(0)
    start = _Model()
    reference = _cpu_reference(start, inputs, steps)

    ddp_model = copy.deepcopy(start).to(dev)
    ddp = DistributedDataParallel(ddp_model)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=0.01)
    for _ in range(steps):
        optimizer.zero_grad()
        ddp(inputs[rank].to(dev)).square().mean().backward()
        optimizer.step()
    for (key, expected), actual in zip(
        reference.state_dict().items(), ddp_model.state_dict().values(), strict=True
    ):
        assert actual.device == dev and close(actual, expected), key
    progress("DDP matches the CPU")

    mesh = init_device_mesh(NAME, (world,))
    fsdp_model = copy.deepcopy(start).to(dev)
    fully_shard(fsdp_model.first, mesh=mesh)
    fully_shard(fsdp_model, mesh=mesh)
    optimizer = torch.optim.Adam(fsdp_model.parameters(), lr=0.01)
    for _ in range(steps):
        optimizer.zero_grad()
        fsdp_model(inputs[rank].to(dev)).square().mean().backward()
        optimizer.step()
    for (key, expected), actual in zip(
        reference.state_dict().items(), fsdp_model.state_dict().values(), strict=True
    ):
        assert actual.to_local().device == dev, key
        assert close(actual.full_tensor(), expected), key
    progress("FSDP2 matches the CPU")
    torch.distributed.destroy_process_group()


def rank_dtensor(rank: int, world: int, folder: Path) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    dev = _init(rank, world, folder / "store")
    mesh = init_device_mesh(NAME, (world,))
    inputs = _inputs(world, (2 * world, 3))
    whole = inputs[0]
    sharded = distribute_tensor(whole.to(dev), mesh, [Shard(0)])
    assert sharded.to_local().device == dev and close(sharded.to_local(), whole.chunk(world)[rank])
    replicated = sharded.redistribute(mesh, [Replicate()])
    assert replicated.to_local().device == dev and close(replicated.to_local(), whole)
    progress("Shard(0) -> Replicate")
    partial = DTensor.from_local(inputs[rank].to(dev), mesh, [Partial()])
    total = sum(inputs, torch.zeros_like(whole))
    assert close(partial.redistribute(mesh, [Replicate()]).to_local(), total)
    assert close(partial.redistribute(mesh, [Shard(0)]).to_local(), total.chunk(world)[rank])
    progress("Partial -> Replicate, Partial -> Shard(0)")
    transposed = replicated.T
    assert isinstance(transposed, DTensor)
    product = replicated @ transposed.redistribute(mesh, [Shard(1)])
    assert isinstance(product, DTensor) and product.placements == (Shard(1),)
    assert product.to_local().device == dev and close(product.full_tensor(), whole @ whole.T)
    back = replicated.redistribute(mesh, [Shard(1)]).full_tensor()
    assert close(back, whole)
    progress("a sharded matmul and Shard(1)")
    torch.distributed.destroy_process_group()


def main(argv: list[str]) -> None:
    rank, world, folder = int(argv[1]), int(argv[2]), Path(argv[3])
    globals()[f"rank_{argv[0]}"](rank, world, folder)
    print(f"ok: {argv[0]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
