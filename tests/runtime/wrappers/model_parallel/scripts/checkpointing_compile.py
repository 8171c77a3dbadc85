"""Activation checkpointing and torch.compile with 'fsdp' and 'model_parallel' on 2 CPU ranks
over gloo. Each case is a launch of its own on the same two processes; rank 0 writes the
reports to ``--out``/result.json.

Cases:

- ``checkpointing``: ``activation_checkpointing_policy=["CountingBlock"]``; the block counts
  its forward calls, which recomputation during backward repeats;
- ``compiled_before``: a model compiled with torch.compile given to ``setup``;
- ``compiled_after``: torch.compile applied to the module ``setup`` returned.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

import stratlib

BATCH, FEATURES, HIDDEN, STEPS = 16, 8, 16, 3


class CountingBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(HIDDEN, HIDDEN)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return torch.tanh(self.linear(x))


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), CountingBlock(), nn.Linear(HIDDEN, 1))


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(BATCH, FEATURES, generator=generator), torch.randn(
        BATCH, 1, generator=generator
    )


def train(strategy: Any, case: str) -> dict[str, Any]:
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model = build_model()
    block = model[1]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    given = torch.compile(model) if case == "compiled_before" else model
    wrapped, optimizer = strategy.setup(given, optimizer)
    runner = torch.compile(wrapped) if case == "compiled_after" else wrapped
    sampler = strategy.distributed_sampler_kwargs
    x, y = batch()
    share = BATCH // sampler["num_replicas"]
    rows = slice(sampler["rank"] * share, (sampler["rank"] + 1) * share)
    for _ in range(STEPS):
        strategy.backward(nn.functional.mse_loss(runner(x[rows]), y[rows]))
        strategy.optimizer_step(optimizer)
    state = strategy.get_module_state_dict(wrapped)
    return {
        "block_forward_calls": block.calls,
        "compiled_graphs": int(torch._dynamo.utils.counters["stats"]["unique_graphs"]),
        "compiled_in_place": getattr(wrapped, "_compiled_call_impl", None) is not None,
        "params": {k: v.tolist() for k, v in state.items()},
    }


CASES: dict[str, dict[str, Any]] = {
    "checkpointing": {"activation_checkpointing_policy": ["CountingBlock"]},
    "compiled_before": {},
    "compiled_after": {},
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--runs", required=True, help="JSON list of [strategy, case]")
    args = parser.parse_args()
    from milestones import reached

    report = {}
    for name, case in json.loads(args.runs):
        strategy = stratlib.get_strategy(
            name, accelerator="cpu", devices=2, timeout=120, **CASES[case]
        )
        report[f"{name}/{case}"] = reached(args.out, f"{name}/{case}", strategy.launch(train, case))
    if os.environ.get("LOCAL_RANK", "0") == "0":
        (Path(args.out) / "result.json").write_text(json.dumps(report), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
