"""``python -m stratcore.testing --package PACKAGE SCENARIO STRATEGY``: run one scenario, or with
``cases`` several of them in one job."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import time
from collections.abc import Sequence
from typing import Any

from .environ import use_package
from .scenarios import CASE_STARTED_MARKER, FAILURES, SCENARIOS, run_case

# --- running scenarios --------------------------------------------------------------------------


def _build(args: argparse.Namespace, precision: str | None) -> Any:
    use_package(args.package)
    package = importlib.import_module(args.package)
    options = json.loads(args.options)
    return package.get_strategy(
        args.strategy,
        accelerator=args.accelerator,
        devices=args.devices,
        num_nodes=args.num_nodes,
        precision=precision,
        **options,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m stratcore.testing SCENARIO STRATEGY --package PACKAGE``: run a scenario (or a
    job's cases) against a generated package; the exit code."""
    parser = argparse.ArgumentParser(prog="python -m stratcore.testing")
    parser.add_argument("--package", required=True, help="the generated package to test")
    parser.add_argument("scenario", choices=[*SCENARIOS, "cases"])
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
    parser.add_argument("--how", choices=FAILURES, default="raise")
    parser.add_argument(
        "--cases",
        default="[]",
        help='with "cases": a JSON list of {"case", "scenario", "args", "precision"}, each run '
        "in a launch of its own (a strategy built for it) and reported as it ends (run_case)",
    )
    args = parser.parse_args(argv)
    if args.scenario == "cases":
        # One launch a case, each of a new strategy, in the processes of one job: the launchers
        # that start the script again for every rank (popen) keep those processes for every
        # launch, as they do for any script that launches more than once.
        result: Any = {}
        for case in json.loads(args.cases):
            strategy = _build(args, case.get("precision", args.precision))
            if _launching():
                started = {"case": case["case"], "time": time.time()}
                print(CASE_STARTED_MARKER + json.dumps(started), flush=True)
            result[case["case"]] = strategy.launch(run_case, case)
    else:
        strategy = _build(args, args.precision)
        arguments = {
            "train": (args.steps, args.lr),
            "train_after_replacing_moves": (args.steps, args.lr),
            "collectives": (),
            "api": (args.folder,),
            "checkpoint": (args.folder,),
            "fail": (args.rank, args.how, args.folder),
        }[args.scenario]
        result = strategy.launch(SCENARIOS[args.scenario], *arguments)
    if _launching():
        print("RESULT " + json.dumps(result, default=str), flush=True)
    return 0


def _launching() -> bool:
    """Whether this is the process the job started with: processes started by the launcher (or
    by torchrun) run this too, and only rank 0 reports."""
    return os.environ.get("RANK", "0") == "0" and os.environ.get("LOCAL_RANK", "0") == "0"
