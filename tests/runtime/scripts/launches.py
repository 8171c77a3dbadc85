"""Scripts whose ranks disagree between launches (a DDP job of 2 ranks started with python).

extra_launch   rank 1 launches a second time, rank 0 does not: rank 1 would wait for rank 0
               forever; the script must end with an error that says so.
fail_between   rank 1 fails after the first launch, outside any launch: rank 0's second
               launch must raise that failure.
fail_slowly    as fail_between, but rank 1 takes seconds to end after its connections close,
               as a process on a busy machine can: rank 0 must still report rank 1's error,
               not its own lost connection.
started        every rank says how it was started: its parent, its command line and whether
               /proc shows the job's marker variable.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from pathlib import Path

import torch

import stratlib


def step(strategy: stratlib.StrategyBase) -> float:
    return strategy.reduce(torch.tensor(float(strategy.global_rank)), reduce_op="sum").item()


def end_slowly() -> None:
    """Close this rank's connections, then take seconds to end."""
    torch.distributed.destroy_process_group()
    time.sleep(4.0)  # a busy machine can take this long to end a process


def main(mode: str) -> None:
    strategy = stratlib.get_strategy("ddp", accelerator="cpu", devices=2)
    total = strategy.launch(step)
    rank = strategy.global_rank
    print(f"rank {rank}: first launch summed {total}", flush=True)
    if mode == "started":
        shown = Path(f"/proc/{os.getpid()}/environ").read_bytes().split(b"\0")
        marked = [entry for entry in shown if entry.startswith(b"STRATCORE_WATCH_")]
        command = Path(f"/proc/{os.getpid()}/cmdline").read_bytes().split(b"\0")[1:-1]
        line = (
            f"rank {rank}: pid {os.getpid()} parent {os.getppid()} marked {len(marked)} "
            f"command {b' '.join(command).decode()}\n"
        )
        sys.stdout.flush()
        os.write(1, line.encode())  # one write: the ranks share the stream
    if mode == "extra_launch" and rank == 1:
        strategy.launch(step)
    if mode == "fewer_launches" and rank == 0:
        try:
            strategy.launch(step)
        except stratlib.ProcessFailedError as error:
            print(f"second launch failed: {error}", flush=True)
            sys.exit(7)
    if mode in ("fail_between", "fail_slowly"):
        if rank == 1:
            if mode == "fail_slowly":
                atexit.register(end_slowly)
            raise RuntimeError("rank 1 fails between launches")
        again = stratlib.get_strategy("ddp", accelerator="cpu", devices=2)
        try:
            again.launch(step)
        except stratlib.ProcessFailedError as error:
            print(f"second launch failed: {error}", flush=True)
            sys.exit(7)


if __name__ == "__main__":
    main(sys.argv[1])
