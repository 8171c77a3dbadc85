"""Train one MLP with DistributedDataParallel on CPU ranks (gloo) and time every step.

``python -m benchmarks.workers.ddp_step --variant VARIANT ... --out result.json``

Variants differ only in who launches the processes and wraps the model:

- ``torch``: hand-written torch.multiprocessing spawn, init_process_group and DDP.
- ``stratlib-ddp`` / ``stratlib-ddp_spawn``: ``stratlib.get_strategy(...).launch(...)``.
- ``fabric``: Lightning Fabric's ``ddp`` strategy.

Model, data, optimizer and threads per rank are the same for all. Rank 0 writes the step
times and the monotonic time at which its first step ended (for launch latency).
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

VARIANTS = ("torch", "stratlib-ddp", "stratlib-ddp_spawn", "fabric")
#: Seconds between looks at the ranks of the hand-written launch.
POLL = 0.1


@dataclass(frozen=True)
class Config:
    width: int
    depth: int
    batch: int
    warmup: int
    steps: int
    #: Intra-op threads per rank; 0 leaves what the launcher chose.
    threads: int
    ranks: int = 2


def build_model(cfg: Config) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(cfg.depth):
        layers += [nn.Linear(cfg.width, cfg.width), nn.ReLU()]
    layers.append(nn.Linear(cfg.width, cfg.width))
    return nn.Sequential(*layers)


def make_batches(cfg: Config, rank: int) -> list[tuple[Any, Any]]:
    import torch

    generator = torch.Generator().manual_seed(1000 + rank)
    return [
        (
            torch.randn(cfg.batch, cfg.width, generator=generator),
            torch.randn(cfg.batch, cfg.width, generator=generator),
        )
        for _ in range(4)
    ]


def prepare_threads(cfg: Config) -> int:
    """Pin the intra-op threads; returns how many the process had as launched."""
    import torch

    launched = torch.get_num_threads()
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    return launched


def timed_loop(cfg: Config, rank: int, step: Callable[[Any, Any], None]) -> dict[str, Any]:
    batches = make_batches(cfg, rank)
    times: list[float] = []
    first_step_end: float | None = None
    for index in range(cfg.warmup + cfg.steps):
        inputs, targets = batches[index % len(batches)]
        started = time.perf_counter()
        step(inputs, targets)
        elapsed = time.perf_counter() - started
        if first_step_end is None:
            first_step_end = time.monotonic()
        if index >= cfg.warmup:
            times.append(elapsed)
    return {"step_times": times, "first_step_end": first_step_end}


def _loss(model: Any, inputs: Any, targets: Any) -> Any:
    from torch.nn import functional

    return functional.mse_loss(model(inputs), targets)


def import_group_defaults() -> None:
    """Import ``torch.distributed.nn.functional`` before the process group exists, as stratlib
    does (``stratcore.process_group.import_group_defaults``).

    DistributedDataParallel's constructor imports it otherwise, while the group exists, and
    its functions then keep the group as a default argument past ``destroy_process_group``:
    gloo's threads live into interpreter shutdown, which now and then aborts a rank after its
    figures are written. The baselines would fail the run; the import costs every variant the
    same, within the measured launch.
    """
    import torch.distributed.nn.functional  # noqa: F401


# --- hand-written torch ---------------------------------------------------------------------


def _torch_worker(rank: int, cfg: Config, port: int, results: Any) -> None:
    import torch.distributed as dist

    launched = prepare_threads(cfg)
    import_group_defaults()
    store = dist.TCPStore("127.0.0.1", port, cfg.ranks, is_master=False)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=cfg.ranks)
    result = _train_torch(cfg, rank)
    release_group()
    if rank == 0:
        results.put({**result, "threads_as_launched": launched})


def _train_torch(cfg: Config, rank: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    module = build_model(cfg)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.01)
    model = DistributedDataParallel(module)

    def step(inputs: Any, targets: Any) -> None:
        _loss(model, inputs, targets).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    result = timed_loop(cfg, rank, step)
    dist.barrier()
    return result


def release_group() -> None:
    """Destroy the default process group, once the DDP module that used it is gone.

    A DDP module keeps the group alive through its reducer. Freed after
    ``destroy_process_group`` (at the end of the function that holds it, or later by the
    garbage collector: DDP sits in reference cycles), the reducer destroys the group itself,
    with the GIL held, and the group's destructor waits for its gloo worker thread, which may
    be waiting for the GIL to release what its last work item held: both wait forever (about
    one run in five of the hand-written launch under load). Collected while the group is still
    registered, the reducer only lets go of it, and ``destroy_process_group`` destroys it
    without the GIL.
    """
    import torch.distributed as dist

    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()


def held_store(ranks: int, multi_tenant: bool = False) -> Any:
    """The rendezvous store of a job, listening on a port of the kernel's choosing from before
    the ranks start until the job ends, as stratlib's launchers and torchrun's agent hold it.

    A port picked free and closed again (bind to port 0, close, hand out the number) stays
    free until rank 0 binds it, seconds later on a busy machine: another process can take it
    meanwhile, rank 0 then fails with EADDRINUSE, and the other ranks wait for it, or join
    whatever listens there now. With ``multi_tenant``, an ``env://`` rendezvous of rank 0 in
    this process uses this store instead of binding the port again.
    """
    import torch.distributed as dist

    return dist.TCPStore(
        "127.0.0.1",
        0,
        ranks,
        is_master=True,
        wait_for_workers=False,
        multi_tenant=multi_tenant,
    )


def run_torch(cfg: Config) -> dict[str, Any]:
    import torch.multiprocessing as mp

    store = held_store(cfg.ranks)
    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    processes = mp.start_processes(
        _torch_worker,
        args=(cfg, store.port, results),
        nprocs=cfg.ranks,
        join=False,
        start_method="spawn",
    )
    # join() returns once every rank ended; as soon as one fails it stops the others and
    # raises with the failed rank's traceback (rank 0 writes its small result into the pipe
    # before it ends).
    while not processes.join(timeout=POLL):
        pass
    result: dict[str, Any] = results.get()
    return result


# --- stratlib -------------------------------------------------------------------------------


def _stratlib_train(strategy: Any, cfg: Config) -> dict[str, Any] | None:
    import torch

    launched = prepare_threads(cfg)
    module = build_model(cfg)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.01)
    model, optimizer = strategy.setup(module, optimizer)

    def step(inputs: Any, targets: Any) -> None:
        strategy.backward(_loss(model, inputs, targets))
        strategy.optimizer_step(optimizer)

    result = timed_loop(cfg, strategy.global_rank, step)
    if not strategy.is_global_zero:
        return None
    return {
        **result,
        "threads_as_launched": launched,
        "forward_hooks": len(getattr(strategy, "_forward_hooks", [])),
        "precision_plugin": type(strategy.precision_plugin).__name__,
        "wrapped_model": type(model).__name__,
    }


def run_stratlib(cfg: Config, name: str) -> dict[str, Any] | None:
    import stratlib

    strategy = stratlib.get_strategy(name, accelerator="cpu", devices=cfg.ranks)
    result: dict[str, Any] | None = strategy.launch(_stratlib_train, cfg)
    return result


# --- Lightning Fabric -----------------------------------------------------------------------


def _fabric_train(fabric: Any, cfg: Config) -> dict[str, Any] | None:
    import torch

    launched = prepare_threads(cfg)
    module = build_model(cfg)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.01)
    model, optimizer = fabric.setup(module, optimizer)

    def step(inputs: Any, targets: Any) -> None:
        fabric.backward(_loss(model, inputs, targets))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    result = timed_loop(cfg, fabric.global_rank, step)
    fabric.barrier()
    if fabric.global_rank != 0:
        return None
    return {**result, "threads_as_launched": launched}


def run_fabric(cfg: Config) -> dict[str, Any] | None:
    from lightning.fabric import Fabric

    import_group_defaults()  # Fabric creates the group in launch()
    store = None
    if "LOCAL_RANK" not in os.environ:  # not one of the ranks Fabric starts
        # Fabric would pick a port and close it again; this process is its rank 0, whose
        # env:// rendezvous finds the held store by its port.
        store = held_store(cfg.ranks, multi_tenant=True)
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(store.port)
    fabric = Fabric(accelerator="cpu", devices=cfg.ranks, strategy="ddp", precision="32-true")
    result: dict[str, Any] | None = fabric.launch(functools.partial(_fabric_train, cfg=cfg))
    # Lightning destroys only NCCL groups at exit; a gloo group left to interpreter shutdown
    # can abort the process like the defaults above. Destroyed after the measurement.
    del fabric
    release_group()
    del store
    return result


# --- entry point ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=VARIANTS, required=True)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    cfg = Config(args.width, args.depth, args.batch, args.warmup, args.steps, args.threads)

    result: dict[str, Any] | None
    if args.variant == "torch":
        result = run_torch(cfg)
    elif args.variant == "fabric":
        result = run_fabric(cfg)
    else:
        result = run_stratlib(cfg, args.variant.removeprefix("stratlib-"))
    if result is None:  # a rank other than 0, started again by the launcher under test
        return
    import torch

    result.update(variant=args.variant, config=asdict(cfg), torch=torch.__version__)
    args.out.write_text(json.dumps(result), encoding="utf-8")


if __name__ == "__main__":
    main()
