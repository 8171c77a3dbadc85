"""Short 2-rank gloo jobs that end right after asynchronous collectives, for each strategy.

Usage: ``python exit_after_collectives.py RUNS STRATEGY [STRATEGY ...]``: RUNS jobs of each. A
strategy named with ``+raise`` (``ddp+raise``) trains as the others, then raises: the script
ends with an uncaught exception, and each rank must exit with code 1. Strategies joined by
commas (``ddp,ddp_sharded``) are launched one after the other in the same processes, the later
ones reusing the group the first created.

This process imports torch, torch._dynamo and stratlib once, then forks the two ranks of each
job (as a cluster scheduler would start them: ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_PORT``
set), so a job costs a fraction of a second instead of two interpreter start-ups. Each rank
trains a few steps through the strategy (DistributedDataParallel reduces gradients in
asynchronous buckets), runs a burst of asynchronous broadcasts, and leaves the script
normally: the interpreter shuts down as in any job, which is where gloo aborted now and then.

The abort came from a process group that outlived ``destroy_process_group``: whatever holds a
group keeps its threads alive. ``torch.distributed.nn.functional``, imported while the group
exists, keeps it in its functions' default arguments (in a fresh process DDP's constructor
imports it through torch._dynamo); this process drops that module after importing
torch._dynamo, so that every rank imports it anew, after the group exists, as training code
using its differentiable collectives does. FSDP2's DTensor caches, DeepSpeed's own references
to its groups and the models its ZeRO stage 3 keeps hold them too. After stratlib's exit
handler ran, each rank checks that no gloo thread is left (``group_release``), and exits with
code 3 naming them if one is. Python keeps the exception that ended a script, and with it the
frames that hold the strategy. Prints ``RESULT <json>`` with the number of jobs of each strategy
and every rank that did not exit with the expected code.
"""

from __future__ import annotations

import gc
import json
import os
import socket
import sys
from typing import Any

import group_release
import torch
from torch import nn

import stratlib

#: What a rank of a ``+raise`` job raises, after its training and collectives.
RAISING = "+raise"


def train(strategy: Any, raising: bool = False) -> None:
    import torch.distributed as dist
    import torch.distributed.nn.functional  # noqa: F401  (see the module documentation)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = strategy.setup(model, optimizer)
    x = torch.randn(8, 16)
    for _ in range(2):
        strategy.backward(model(x).pow(2).mean())
        strategy.optimizer_step(optimizer)
        optimizer.zero_grad()
    tensors = [torch.full((1000,), float(i)) for i in range(100)]
    for handle in [dist.broadcast(t, 0, async_op=True) for t in tensors]:
        handle.wait()
    if raising:
        raise RuntimeError("the script's deliberate failure, after training")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_jobs(runs: int, strategies: list[str]) -> tuple[int, int, str] | None:
    """In this process: fork every job's ranks and wait for them. In a rank: return
    (rank, port, strategy name) for the caller to run."""
    failures: list[dict[str, Any]] = []
    for strategy_name in strategies:
        for job in range(runs):
            port = free_port()
            children = {}
            for rank in (0, 1):
                pid = os.fork()
                if pid == 0:
                    return rank, port, strategy_name
                children[pid] = rank
            for pid, rank in children.items():
                _, status = os.waitpid(pid, 0)
                code = os.waitstatus_to_exitcode(status)
                if code != (1 if strategy_name.endswith(RAISING) else 0):
                    failures.append(
                        {"strategy": strategy_name, "job": job, "rank": rank, "exit": code}
                    )
    runs_of = {strategy_name: runs for strategy_name in strategies}
    print("RESULT " + json.dumps({"runs": runs_of, "failures": failures}), flush=True)
    return None


def run_rank(rank: int, port: int, strategy_name: str) -> None:
    group_release.check_at_exit()  # before the launch creates the group
    os.environ.update(
        LOCAL_RANK=str(rank),
        NODE_RANK="0",
        WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    names, raising = strategy_name.removesuffix(RAISING), strategy_name.endswith(RAISING)
    for name in names.split(","):  # launches one after the other, reusing the group
        strategy = stratlib.get_strategy(name, accelerator="cpu", devices=2)
        strategy.launch(train, raising)


if __name__ == "__main__":
    import torch._dynamo  # noqa: F401  (imported once here, as the module documentation says)

    sys.modules.pop("torch.distributed.nn.functional", None)
    gc.freeze()  # the ranks inherit these objects: their collections need not copy them
    assignment = run_jobs(int(sys.argv[1]), sys.argv[2:])
    if assignment is not None:
        run_rank(*assignment)
