"""A 2-rank job whose rendezvous port is taken by another process (a listening socket here).

``python rendezvous.py STRATEGY picked``: the port the environment's ``free_port`` fallback
picks is taken before the job binds it, as another process on a busy machine may take it; a
launcher that hands out picked ports fails then (rank 0: EADDRINUSE) or hangs.
``python rendezvous.py STRATEGY given``: MASTER_PORT names the taken port; the launch must
fail at once, naming the port.
``python rendezvous.py STRATEGY late``: the strategy's timeout is 2 s and rank 1 reaches the
rendezvous 6 s after rank 0 (a process slow to start, on a busy machine): the ranks must
still meet.

Rank 0 prints the sum of the ranks and the port the ranks met on.
"""

from __future__ import annotations

import os
import socket
import sys
import time

import torch
from stratcore import environment

import stratlib


def report(strategy: stratlib.StrategyBase) -> tuple[float, str]:
    total = strategy.reduce(torch.tensor(float(strategy.global_rank)), reduce_op="sum")
    return total.item(), os.environ["MASTER_PORT"]


#: The strategy's timeout in the 'late' mode, and how much later rank 1 starts.
TIMEOUT, LATE = 2.0, 6.0


def main(name: str, mode: str) -> None:
    if mode == "late":
        if os.environ.get("LOCAL_RANK", "0") != "0":  # the rank the launcher started
            time.sleep(LATE)
        strategy = stratlib.get_strategy(name, accelerator="cpu", devices=2, timeout=TIMEOUT)
        total, met_on = strategy.launch(report)
        if strategy.is_global_zero:
            print(f"sum {total:g}, met on {met_on}", flush=True)
        return
    if "TAKEN_PORT" in os.environ:  # a rank the script started: the port is taken already
        port = int(os.environ["TAKEN_PORT"])
    else:
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        os.environ["TAKEN_PORT"] = str(port)
        print(f"taken port {port}", flush=True)
    if mode == "picked":
        environment.find_free_port = lambda: port
    else:
        os.environ["MASTER_PORT"] = str(port)
    strategy = stratlib.get_strategy(name, accelerator="cpu", devices=2)
    result = strategy.launch(report)
    if strategy.is_global_zero:
        total, met_on = result
        print(f"sum {total:g}, met on {met_on}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
