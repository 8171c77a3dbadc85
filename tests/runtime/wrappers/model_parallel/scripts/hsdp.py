"""FSDP2 under each of Lightning's sharding strategies, on real CPU ranks over gloo.

Started once (``--num-nodes 1 --devices 4``: every strategy in turn, each a launch of its
own on the same processes) or once per node with NODE_RANK, MASTER_ADDR and MASTER_PORT set
(``--num-nodes 2 --devices 2``: hybrid sharding with the mesh taken from the nodes). Each
rank trains on its share of the batch (``distributed_sampler_kwargs``); rank 0 writes what it
saw to ``--out``/result.json.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor

import stratlib

BATCH, FEATURES, HIDDEN = 16, 8, 16


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(FEATURES, HIDDEN),
        nn.Tanh(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.Tanh(),
        nn.Linear(HIDDEN, 1),
    )


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(BATCH, FEATURES, generator=generator), torch.randn(
        BATCH, 1, generator=generator
    )


def train(strategy: Any, steps: int, folder: str) -> dict[str, Any]:
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = strategy.setup(model, optimizer)
    sampler = strategy.distributed_sampler_kwargs
    x, y = batch()
    share = BATCH // sampler["num_replicas"]
    rows = slice(sampler["rank"] * share, (sampler["rank"] + 1) * share)
    x, y = x[rows], y[rows]

    # Whether the inner groups keep their gathered parameters after forward.
    with torch.no_grad():
        model(x)
    kept_after_forward = not isinstance(model[2].weight, DTensor)

    for _ in range(steps):
        strategy.backward(nn.functional.mse_loss(model(x), y))
        strategy.optimizer_step(optimizer)
    weight = model[0].weight
    state = strategy.get_module_state_dict(model)
    path = Path(folder) / f"{strategy.sharding_strategy}.ckpt"
    strategy.save_checkpoint({"model": model, "optimizer": optimizer}, path)
    saved = {k: v.clone() for k, v in state.items()}
    strategy.backward(nn.functional.mse_loss(model(x), y))
    strategy.optimizer_step(optimizer)
    strategy.load_checkpoint(path, state={"model": model, "optimizer": optimizer})
    restored = strategy.get_module_state_dict(model)
    return {
        "mesh_shape": list(strategy.device_mesh.shape),
        "mesh_dims": list(strategy.device_mesh.mesh_dim_names or []),
        "placements": [repr(p) for p in weight.placements],
        "local_rows": weight.to_local().shape[0],
        "kept_after_forward": kept_after_forward,
        "sampler": sampler,
        "params": {k: v.tolist() for k, v in state.items()},
        "restored": all(torch.equal(saved[k], restored[k]) for k in saved),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--cases", required=True, help="JSON list of strategy option sets")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    from milestones import reached

    results = []
    for options in json.loads(args.cases):
        strategy = stratlib.get_strategy(
            "fsdp",
            accelerator="cpu",
            devices=args.devices,
            num_nodes=args.num_nodes,
            auto_wrap_layers=["Linear"],
            timeout=120,
            **options,
        )
        results.append(
            reached(args.out, str(options), strategy.launch(train, args.steps, args.out))
        )
    if os.environ.get("NODE_RANK", "0") == "0" and os.environ.get("LOCAL_RANK", "0") == "0":
        (Path(args.out) / "result.json").write_text(json.dumps(results), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
