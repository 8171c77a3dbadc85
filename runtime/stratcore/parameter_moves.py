"""Optimizers follow their module onto its device.

Moving a module (``module.to(device)``, or a conversion to another dtype) keeps its Parameter
objects where torch can change a tensor in place, as between the CPU and CUDA. Where it cannot,
``nn.Module._apply`` gives the module new Parameter objects: on every move from the CPU to an
XLA device (torch_xla), and on every conversion once
``torch.__future__.set_overwrite_module_params_on_conversion(True)`` is set. An optimizer made
from the module before the move then holds the old Parameters: it steps tensors the model no
longer uses, and the model never trains, silently. A Parameter that several modules share
(tied weights) becomes one Parameter per module, each trained apart.

``parameters_by_name`` records a module's parameters before a move; ``follow_move``, after it,
ties again what the move untied and points the optimizers at the Parameters the module now
holds. The state an optimizer keeps for a parameter (momentum, Adam's moments: an optimizer
that loaded a checkpoint before the move has some) follows it, each tensor placed on its
parameter's device and dtype as ``torch.optim.Optimizer.load_state_dict`` places it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer


def moves_replace_parameters(device: torch.device) -> bool:
    """Whether moving a CPU module onto ``device`` gives it new Parameter objects: where a
    tensor of the device cannot take a CPU tensor's place (``nn.Module._apply`` asks
    ``torch._has_compatible_shallow_copy_type``), or where every conversion overwrites them
    (``torch.__future__``). Makes one empty tensor on the device."""
    if torch.__future__.get_overwrite_module_params_on_conversion():
        return True
    if device.type in ("cpu", "meta"):
        return False
    on_device = torch.empty(0, device=device)
    return not torch._has_compatible_shallow_copy_type(torch.empty(0), on_device)


def parameters_by_name(module: nn.Module) -> dict[str, nn.Parameter]:
    """Every parameter of ``module`` under each of its names (a shared one under several)."""
    return dict(module.named_parameters(remove_duplicate=False))


def follow_move(
    module: nn.Module, before: Mapping[str, nn.Parameter], optimizers: Iterable[Optimizer]
) -> None:
    """After ``module`` moved from the parameters ``before`` (``parameters_by_name``), tie
    again the parameters the move untied, and make ``optimizers`` and their state follow the
    parameters to what the module now holds."""
    _tie_again(module, before)
    after = parameters_by_name(module)
    moved: dict[nn.Parameter, nn.Parameter] = {}
    for name, old in before.items():
        new = after.get(name)
        # A module that replaced a layer (another shape) does not train the old parameter.
        if new is not None and new.shape == old.shape and old not in moved:
            moved[old] = new
    for optimizer in optimizers:
        _follow(optimizer, moved)


def _tie_again(module: nn.Module, before: Mapping[str, nn.Parameter]) -> None:
    """Give every name that shared a Parameter before the move the Parameter its first name
    holds now (as Lightning's ``set_shared_parameters`` does after an XLA move)."""
    first: dict[nn.Parameter, str] = {}
    for name, old in before.items():
        if old not in first:
            first[old] = name
            continue
        owner, _, attribute = name.rpartition(".")
        shared, current = module.get_parameter(first[old]), module.get_parameter(name)
        if current is not shared and current.shape == shared.shape:
            setattr(module.get_submodule(owner), attribute, shared)


def _follow(optimizer: Optimizer, moved: Mapping[nn.Parameter, nn.Parameter]) -> None:
    state = optimizer.state
    for group in optimizer.param_groups:
        params = group["params"]
        for index, old in enumerate(params):
            new = moved.get(old, old)
            if old in moved and old in state:
                state[new] = _placed(state.pop(old), new, group, key=None)
            params[index] = new  # in place: whoever holds the group's list sees the new ones


def _placed(value: Any, parameter: torch.Tensor, group: Mapping[str, Any], key: Any) -> Any:
    """``value`` of a parameter's optimizer state where ``load_state_dict`` puts it: a tensor
    on the parameter's device and, where the parameter is floating-point, in its dtype; the
    step count where it is (torch keeps it on the CPU) unless the optimizer is capturable or
    fused."""
    if isinstance(value, torch.Tensor):
        if key == "step":
            if group.get("capturable") or group.get("fused"):
                return value.to(dtype=torch.float32, device=parameter.device)
            return value
        if parameter.is_floating_point():
            return value.to(dtype=parameter.dtype, device=parameter.device)
        return value.to(device=parameter.device)
    if isinstance(value, dict):
        return {k: _placed(v, parameter, group, key=k) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_placed(v, parameter, group, key=key) for v in value)
    return value
