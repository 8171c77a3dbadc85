"""A 2-rank job whose rendezvous port is taken by another process (a listening socket here).

``python rendezvous.py STRATEGY picked``: the port the environment's ``free_port`` fallback
picks is taken before the job binds it, as another process on a busy machine may take it; a
launcher that hands out picked ports fails then (rank 0: EADDRINUSE) or hangs.
``python rendezvous.py STRATEGY given``: MASTER_PORT names the taken port; the launch must
fail at once, naming the port.

Rank 0 prints the sum of the ranks and the port the ranks met on.
"""

from __future__ import annotations

import os
import socket
import sys

import torch
from stratcore import environment

import stratlib


def report(strategy: stratlib.StrategyBase) -> tuple[float, str]:
    total = strategy.reduce(torch.tensor(float(strategy.global_rank)), reduce_op="sum")
    return total.item(), os.environ["MASTER_PORT"]


def main(name: str, mode: str) -> None:
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
