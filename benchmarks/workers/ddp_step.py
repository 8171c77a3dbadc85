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
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

VARIANTS = ("torch", "stratlib-ddp", "stratlib-ddp_spawn", "fabric")


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
    does (``stratcore.parallel.import_group_defaults``).

    DistributedDataParallel's constructor imports it otherwise, while the group exists, and
    its functions then keep the group as a default argument past ``destroy_process_group``:
    gloo's threads live into interpreter shutdown, which now and then aborts a rank after its
    figures are written. The baselines would fail the run; the import costs every variant the
    same, within the measured launch.
    """
    import torch.distributed.nn.functional  # noqa: F401


# --- hand-written torch ---------------------------------------------------------------------


def _torch_worker(rank: int, cfg: Config, port: int, results: Any) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    launched = prepare_threads(cfg)
    import_group_defaults()
    dist.init_process_group("gloo", rank=rank, world_size=cfg.ranks)
    module = build_model(cfg)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.01)
    model = DistributedDataParallel(module)

    def step(inputs: Any, targets: Any) -> None:
        _loss(model, inputs, targets).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    result = timed_loop(cfg, rank, step)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        results.put({**result, "threads_as_launched": launched})


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_torch(cfg: Config) -> dict[str, Any]:
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    processes = mp.start_processes(
        _torch_worker,
        args=(cfg, _free_port(), results),
        nprocs=cfg.ranks,
        join=False,
        start_method="spawn",
    )
    result: dict[str, Any] = results.get()
    processes.join()
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
    fabric = Fabric(accelerator="cpu", devices=cfg.ranks, strategy="ddp", precision="32-true")
    result: dict[str, Any] | None = fabric.launch(functools.partial(_fabric_train, cfg=cfg))
    # Lightning destroys only NCCL groups at exit; a gloo group left to interpreter shutdown
    # can abort the process like the defaults above. Destroyed after the measurement.
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
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
