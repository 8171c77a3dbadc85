"""``python -m stratcore.testing --package PACKAGE SCENARIO STRATEGY``: run one scenario."""

from __future__ import annotations

import argparse
import importlib
import json
import os
from collections.abc import Sequence
from typing import Any

from .environ import use_package
from .scenarios import _api, _checkpoint, _collectives, _fail, _train

# --- running scenarios --------------------------------------------------------------------------


def _build(args: argparse.Namespace) -> Any:
    use_package(args.package)
    package = importlib.import_module(args.package)
    options = json.loads(args.options)
    return package.get_strategy(
        args.strategy,
        accelerator=args.accelerator,
        devices=args.devices,
        num_nodes=args.num_nodes,
        precision=args.precision,
        **options,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stratcore.testing")
    parser.add_argument("--package", required=True, help="the generated package to test")
    parser.add_argument("scenario", choices=["train", "collectives", "api", "checkpoint", "fail"])
    parser.add_argument("strategy")
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--precision", default=None)
    parser.add_argument("--options", default="{}", help="JSON object of strategy options")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--folder", default=".")
    parser.add_argument("--rank", type=int, default=1)
    parser.add_argument("--how", choices=["raise", "exit", "kill", "hang"], default="raise")
    args = parser.parse_args(argv)
    strategy = _build(args)
    if args.scenario == "train":
        result = strategy.launch(_train, args.steps, args.lr)
    elif args.scenario == "collectives":
        result = strategy.launch(_collectives)
    elif args.scenario == "api":
        result = strategy.launch(_api, args.folder)
    elif args.scenario == "checkpoint":
        result = strategy.launch(_checkpoint, args.folder)
    else:
        result = strategy.launch(_fail, args.rank, args.how, args.folder)
    # Processes started by the launcher (or by torchrun) run this too; only rank 0 reports.
    if os.environ.get("RANK", "0") == "0" and os.environ.get("LOCAL_RANK", "0") == "0":
        print("RESULT " + json.dumps(result, default=str), flush=True)
    return 0
