"""A script that creates the default process group itself, then uses the package's strategies.

Started as 2 processes (by hand, each with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT; or by torchrun), each calls ``init_process_group("gloo")`` first, as scripts
written for torch.distributed do, then:

- ``reused``: ``ddp`` with 2 processes (``--devices``) trains the documented code on that group;
- ``failed``: a launch whose function raises on every rank;
- ``other_size``: ``ddp`` asking for 1 process (the default environment, devices=1);
- ``other_backend``: ``ddp`` asking for a backend of another name ('gloo_alt', gloo registered
  again under that name);

after each, whether the group is still the script's own (the same object) and reduces. The
script destroys its group itself at the end, which fails if anything else did. Each rank writes
``rank<N>.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import newcomer
import torch
import torch.distributed as dist

import stratlib


def _gloo_alt(store: Any, rank: int, size: int, timeout: Any) -> Any:
    return dist.ProcessGroupGloo(store, rank, size, timeout)


def group_state(group: Any) -> dict[str, Any]:
    """Whether the default group is still ``group`` and reduces (ranks 0 and 1: 1 + 2)."""
    value = torch.ones(1) * (dist.get_rank() + 1)
    dist.all_reduce(value)
    return {
        "same_group": dist.distributed_c10d._get_default_group() is group,
        "sum": value.item(),
    }


def error_of(call: Any) -> str:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the error a user would see
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def fail(strategy: Any) -> None:
    raise ValueError("the training function failed")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    group = dist.distributed_c10d._get_default_group()
    dist.Backend.register_backend("gloo_alt", _gloo_alt, devices=["cpu"])
    report: dict[str, Any] = {}

    strategy = stratlib.get_strategy("ddp", accelerator="cpu", devices=args.devices)
    result = strategy.launch(newcomer.train, 3, 2, args.out)
    report["reused"] = {
        "params": result["params"],
        "samples_seen": result["samples_seen"],
        "environment": result["environment"],
        **group_state(group),
    }
    report["failed"] = {"error": error_of(lambda: strategy.launch(fail)), **group_state(group)}
    small = stratlib.get_strategy(
        "ddp", accelerator="cpu", devices=1, cluster_environment=stratlib.LightningEnvironment()
    )
    report["other_size"] = {"error": error_of(lambda: small.launch(fail)), **group_state(group)}
    other = stratlib.get_strategy(
        "ddp", accelerator="cpu", devices=args.devices, process_group_backend="gloo_alt"
    )
    report["other_backend"] = {"error": error_of(lambda: other.launch(fail)), **group_state(group)}

    rank = dist.get_rank()
    dist.destroy_process_group()  # raises where something else destroyed the script's group
    Path(args.out, f"rank{rank}.json").write_text(json.dumps(report), encoding="utf-8")


if __name__ == "__main__":
    main()
