"""DeepSpeed's ZeRO state in PyTorch's format: the module's full state dict (float32 masters
included) and the optimizer's state, gathered from the partitions of every rank into a
checkpoint, and written back into them from one."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from stratcore.exceptions import MisconfigurationError
from torch import nn
from torch.optim import Optimizer


def gather_optimizer_state(
    optimizer: Optimizer, groups: list[list[nn.Parameter]]
) -> dict[str, Any]:
    """The state of DeepSpeed's optimizer in PyTorch's format, gathered from every partition
    (``groups``: the model parameters of each of its groups). Every rank must call this."""
    from deepspeed.utils import safe_get_full_optimizer_state

    tensor_keys, scalars = state_layout(optimizer)
    state: dict[int, dict[str, Any]] = {}
    param_groups = []
    index = 0
    for group, params in zip(optimizer.param_groups, groups, strict=True):
        indices = []
        for param in params:
            entry: dict[str, Any] = {}
            if has_master(param):
                shape = getattr(param, "ds_shape", param.shape)
                for key in tensor_keys:
                    value = safe_get_full_optimizer_state(param, key)
                    entry[key] = value.detach().reshape(shape).clone()
                entry.update({key: detached_copy(value) for key, value in scalars.items()})
            if entry:
                state[index] = entry
            indices.append(index)
            index += 1
        hyper = {key: copy.deepcopy(value) for key, value in group.items() if key != "params"}
        param_groups.append({**hyper, "params": indices})
    return {"state": state, "param_groups": param_groups}


def restore_optimizer_state(
    optimizer: Optimizer, groups: list[list[nn.Parameter]], state_dict: Mapping[str, Any]
) -> None:
    """Load a state in PyTorch's format into DeepSpeed's partitions of every parameter."""
    saved_groups = state_dict["param_groups"]
    ours = [len(params) for params in groups]
    theirs = [len(group["params"]) for group in saved_groups]
    if ours != theirs:
        raise MisconfigurationError(
            f"the checkpoint's optimizer has parameter groups of sizes {theirs}, this optimizer {ours}"
        )
    for group, saved in zip(optimizer.param_groups, saved_groups, strict=True):
        group.update({key: copy.deepcopy(value) for key, value in saved.items() if key != "params"})
    saved_state = {int(k): v for k, v in state_dict["state"].items()}
    tensor_keys: list[str] = []
    scalars: dict[str, Any] = {}
    for entry in saved_state.values():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                if key not in tensor_keys:
                    tensor_keys.append(key)
            else:
                scalars.setdefault(key, value)
    create_missing_state(optimizer, tensor_keys, scalars)
    every_param = [param for params in groups for param in params]
    for index, param in enumerate(every_param):
        entry = saved_state.get(index, {})
        for key in tensor_keys:
            if key in entry and has_master(param):
                set_full_master(param, entry[key], key)


def flat_partitions(optimizer: Optimizer) -> list[torch.Tensor]:
    """The float32 partitions the wrapped torch optimizer steps, which key its state."""
    # ZeRO-3 hands its partitions to the wrapped optimizer only for the duration of a step.
    stage_3_partitions = getattr(optimizer, "fp32_partitioned_groups_flat", None)
    if stage_3_partitions is not None:
        return list(stage_3_partitions)
    inner = getattr(optimizer, "optimizer", optimizer)
    return [p for group in inner.param_groups for p in group["params"]]


def state_layout(optimizer: Optimizer) -> tuple[list[str], dict[str, Any]]:
    """State keys shaped like the partitions (gathered per parameter) and scalar entries
    (the same for every parameter, such as Adam's step), agreed on by every rank."""
    inner = getattr(optimizer, "optimizer", optimizer)
    tensor_keys: list[str] = []
    scalars: dict[str, Any] = {}
    for flat in flat_partitions(optimizer):
        for key, value in inner.state.get(flat, {}).items():
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape == flat.shape:
                if key not in tensor_keys:
                    tensor_keys.append(key)
            else:
                scalars.setdefault(key, detached_copy(value))
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        views: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(views, (tensor_keys, scalars))
        tensor_keys = []
        scalars = {}
        for keys, values in views:
            tensor_keys += [key for key in keys if key not in tensor_keys]
            for key, value in values.items():
                scalars.setdefault(key, value)
    return tensor_keys, scalars


def create_missing_state(
    optimizer: Optimizer, tensor_keys: list[str], scalars: dict[str, Any]
) -> None:
    """Give the wrapped optimizer the state entries a checkpoint restores, so that an
    optimizer that has not stepped yet can take them, and scalars from the checkpoint."""
    inner = getattr(optimizer, "optimizer", optimizer)
    created = False
    for flat in flat_partitions(optimizer):
        state = inner.state[flat]
        for key in tensor_keys:
            if key not in state:
                state[key] = torch.zeros_like(flat, dtype=torch.float32)
                created = True
        for key, value in scalars.items():
            state[key] = detached_copy(value)
    relink = getattr(optimizer, "_lazy_init_hp_params_optimizer_state", None)
    if created and callable(relink):
        # Stages 1 and 2 map each parameter to its slice of the state when the state
        # first appears; redo that for the entries made here.
        optimizer._hp_optimizer_states_linked = False  # type: ignore[attr-defined]
        relink()


def has_master(param: nn.Parameter) -> bool:
    """Whether DeepSpeed's optimizer keeps a float32 master of ``param`` (stages 1-3, bf16)."""
    return hasattr(param, "_hp_mapping") or hasattr(param, "_z3_optimizer")


def set_full_master(param: nn.Parameter, value: torch.Tensor, key: str | None = None) -> None:
    """Write this rank's slice of the full float32 master of ``param`` (or of its optimizer
    state ``key``)."""
    if not hasattr(param, "ds_id"):
        from deepspeed.utils import safe_set_full_fp32_param, safe_set_full_optimizer_state

        value = value.detach().to(torch.float32)
        if key is None:
            safe_set_full_fp32_param(param, value)
        else:
            safe_set_full_optimizer_state(param, value, key)
        return
    # ZeRO-3: DeepSpeed's own setter cannot fill the last rank's partition of a parameter
    # whose size does not divide by the number of ranks (it is padded), so slice it here.
    optimizer = param._z3_optimizer  # type: ignore[attr-defined]
    partition, _ = optimizer._get_fp32_opt_state_partition(
        param, release_swap_buffers=False, optim_state_key=key
    )
    size = partition.numel()
    start = size * optimizer._get_param_partition_rank(param)
    flat = value.detach().flatten()
    count = max(0, min(size, flat.numel() - start))
    if count:
        with torch.no_grad():
            partition.narrow(0, 0, count).copy_(flat.narrow(0, start, count))


def detached_copy(value: Any) -> Any:
    """A copy of a state value that shares no memory or autograd history with it."""
    return value.detach().clone() if isinstance(value, torch.Tensor) else copy.deepcopy(value)


def gathered(engine: Any, module: nn.Module, modifier_rank: int | None) -> Any:
    """Under ZeRO stage 3, ``module``'s full parameters for the duration of the block (a
    context manager); rank ``modifier_rank``'s changes are partitioned again when it ends."""
    if engine.zero_optimization_stage() != 3:
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=modifier_rank)


def full_module_state(engine: Any) -> dict[str, Any]:
    """The full state dict of the engine's module, float32 masters in place of 16-bit
    parameters where the engine's optimizer keeps them. Every rank must call this."""
    from deepspeed.utils import safe_get_full_fp32_param

    inner = engine.module
    with gathered(engine, inner, modifier_rank=None):
        state = {name: value.detach().clone() for name, value in inner.state_dict().items()}
    for names, param in parameters_by_identity(inner):
        if not has_master(param):
            continue
        master = safe_get_full_fp32_param(param)
        if master is None:
            continue
        for name in names:
            if name in state:
                state[name] = master.detach().reshape(state[name].shape).clone()
    return state


def load_full_module_state(engine: Any, state_dict: Mapping[str, Any], strict: bool) -> None:
    """Load a full state dict into the engine's module, and into the float32 masters of its
    optimizer where it keeps them."""
    inner = engine.module
    with gathered(engine, inner, modifier_rank=0):
        inner.load_state_dict(state_dict, strict=strict)
    for names, param in parameters_by_identity(inner):
        value = next((state_dict[name] for name in names if name in state_dict), None)
        if value is not None and has_master(param):
            set_full_master(param, value)


def parameters_by_identity(module: nn.Module) -> list[tuple[list[str], nn.Parameter]]:
    """Each distinct parameter with every state-dict name it appears under, in module order."""
    found: dict[int, tuple[list[str], nn.Parameter]] = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        found.setdefault(id(param), ([], param))[0].append(name)
    return list(found.values())
