"""Checkpoints of pipelined models ('model_parallel' with pp > 1).

Each process holds its stages' part of the model under the model's own names
(``pipeline.PipelineModel``). A distributed checkpoint stores every process's part as it is;
only the optimizers' parameter groups, values a distributed checkpoint keeps once for all
processes, are made to list the parameters of every stage first. A full state dict is
gathered on rank 0 from the first process of every stage (whose other coordinates are 0),
in the model's order of keys; loading a whole model's state dict keeps what this process's
stages hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.optim import Optimizer

from ..fsdp.fully_shard import ShardedStateDicts, holds_dtensors, state_dict_options
from .parallel_dims import ParallelDims
from .pipeline import Pipeline, PipelineModel


class PipelineStateDicts(ShardedStateDicts):
    """State dicts of pipelined models and their optimizers, on top of ``ShardedStateDicts``
    (see the module documentation). The strategy provides ``parallel_dims``, ``mesh`` and
    ``_pipeline``."""

    _pipeline: Pipeline | None = None

    def parallel_dims(self) -> ParallelDims:
        """The strategy's parallel dimensions."""
        raise NotImplementedError

    def mesh(self, name: str) -> Any:
        """The device mesh of the dimension called ``name``."""
        raise NotImplementedError

    def _gathered(self, state: dict[str, Any]) -> list[Any]:
        """Every pipeline rank's ``state`` on rank 0 (see ``pipeline.gather_on_rank_zero``)."""
        dims = self.parallel_dims()
        others = [n for n in dims.names if n != "pp"]
        takes_part = all(dims.coordinate(self.global_rank, n) == 0 for n in others)
        return gather_on_rank_zero(state, self.mesh("pp").get_group(), takes_part)

    def get_module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        """The full state dict on rank 0 (empty on the others), every stage's part of it."""
        if not isinstance(module, PipelineModel):
            return super().get_module_state_dict(module)
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        options = state_dict_options(full_state_dict=True)
        local = (
            get_model_state_dict(module, options=options)
            if holds_dtensors(module)
            else module.state_dict()
        )
        states = self._gathered(_to_cpu(local))
        return merge_states(states, module._pipeline.key_order)

    def load_module_state_dict(
        self, module: nn.Module, state_dict: Mapping[str, Any], strict: bool = True
    ) -> None:
        if isinstance(module, PipelineModel):
            state_dict = local_module_state(state_dict, list(module.state_dict()), strict)
        super().load_module_state_dict(module, state_dict, strict=strict)

    def get_optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        model = self._model
        if not isinstance(model, PipelineModel):
            return super().get_optimizer_state(optimizer)
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        options = state_dict_options(full_state_dict=True)
        local = self._every_stage(get_optimizer_state_dict(model, optimizer, options=options))
        states = self._gathered(_to_cpu(local["state"]))
        if not states:
            return {}
        return {**local, "state": merge_states(states, model._pipeline.key_order)}

    def sharded_optimizer_state(self, optimizer: Any, modules: list[nn.Module]) -> dict[str, Any]:
        """The optimizer's sharded state, of every pipeline stage where the model is pipelined."""
        state = super().sharded_optimizer_state(optimizer, modules)
        return self._every_stage(state) if self._pipeline is not None else state

    def _every_stage(self, state: dict[str, Any]) -> dict[str, Any]:
        assert self._pipeline is not None
        group, order = self.mesh("pp").get_group(), self._pipeline.key_order
        return global_param_groups(state, group, order)

    def load_optimizer_state_dict(
        self, optimizer: Optimizer, state_dict: Mapping[str, Any]
    ) -> None:
        model = self._model
        if isinstance(model, PipelineModel):
            held = {name for name, _ in model.named_parameters()}
            state_dict = local_optimizer_state(state_dict, held)
        super().load_optimizer_state_dict(optimizer, state_dict)


def gather_on_rank_zero(state: dict[str, Any], group: Any, takes_part: bool) -> list[Any]:
    """Every pipeline rank's ``state`` on global rank 0, in pipeline order (an empty list
    elsewhere). ``takes_part``: whether this process is in rank 0's pipeline group (its
    other coordinates are 0); only those processes send."""
    if not takes_part:
        return []
    gathered: list[Any] | None = [None] * dist.get_world_size(group)
    if dist.get_rank() != 0:
        gathered = None
    dist.gather_object(state, gathered, dst=0, group=group)
    return list(gathered or [])


def merge_states(states: Sequence[Mapping[str, Any]], order: Sequence[str]) -> dict[str, Any]:
    """The stages' states (of modules, or of optimizers' parameters) as one, in the model's
    order of keys."""
    merged: dict[str, Any] = {}
    for state in states:
        merged.update(state)
    ranked = {key: index for index, key in enumerate(order)}
    return {k: merged[k] for k in sorted(merged, key=lambda k: ranked.get(k, len(ranked)))}


def global_param_groups(
    state_dict: Mapping[str, Any], group: Any, order: Sequence[str]
) -> dict[str, Any]:
    """An optimizer state (keyed by parameter name) whose parameter groups list the
    parameters of every stage, the same in every process of the pipeline group (whose
    members all call this): a distributed checkpoint stores such values once, and a state
    loaded whole restores every stage's groups."""
    local = [list(g["params"]) for g in state_dict["param_groups"]]
    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, local, group=group)
    ranked = {key: index for index, key in enumerate(order)}
    groups = []
    for index, saved in enumerate(state_dict["param_groups"]):
        names = {name for stage in gathered for name in stage[index]}
        ordered = sorted(names, key=lambda n: (ranked.get(n, len(ranked)), n))
        groups.append({**saved, "params": ordered})
    return {**state_dict, "param_groups": groups}


def local_module_state(
    state_dict: Mapping[str, Any], names: Sequence[str], strict: bool
) -> dict[str, Any]:
    """The entries of a whole model's state dict that this process's stages hold."""
    missing = [name for name in names if name not in state_dict]
    if strict and missing:
        raise KeyError(
            f"the state dict has no {', '.join(map(repr, missing[:3]))} for this process's "
            "pipeline stages; pass strict=False to load only what it holds"
        )
    return {name: state_dict[name] for name in names if name in state_dict}


def local_optimizer_state(state_dict: Mapping[str, Any], names: set[str]) -> dict[str, Any]:
    """A whole model's optimizer state (keyed by parameter name) cut to this process's
    parameters."""
    return {
        **state_dict,
        "state": {k: v for k, v in state_dict.get("state", {}).items() if k in names},
        "param_groups": [
            {**group, "params": [p for p in group["params"] if p in names]}
            for group in state_dict.get("param_groups", [])
        ],
    }


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_cpu(v) for v in value]
    return value
