"""Stand-in for ``torch_xla.core.xla_model``: the functions stratlib calls, on gloo and CPUs."""

from __future__ import annotations

import standin_events
import torch
import torch.distributed as dist


def mark_step() -> None:
    standin_events.record("mark_step")


def reduce_gradients(optimizer: torch.optim.Optimizer) -> None:
    """Average the gradients over every process, as torch_xla does."""
    standin_events.record("reduce_gradients")
    world = dist.get_world_size()
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            if parameter.grad is not None:
                dist.all_reduce(parameter.grad)
                parameter.grad.div_(world)


def broadcast_master_param(model: torch.nn.Module) -> None:
    standin_events.record("broadcast_master_param")
    for parameter in model.parameters():
        dist.broadcast(parameter.data, src=0)


def rendezvous(tag: str) -> None:
    standin_events.record("rendezvous", tag=tag)
    dist.barrier()
