"""How a strategy turns the objects of a checkpoint into state dicts and back: whole (saved by
rank 0) or sharded (every process saves and loads its own part, see ``sharded_checkpoint``).

The functions take the strategy, whose methods (``get_module_state_dict``,
``load_optimizer_state_dict``, ...) a wrapper overrides; ``StrategyBase`` calls them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from torch import nn
from torch.optim import Optimizer

from .checkpoint_io import AsyncCheckpointIO, PathLike
from .exceptions import MisconfigurationError
from .sharded_checkpoint import consolidated, load_sharded, read_meta

if TYPE_CHECKING:
    from .strategy import StrategyBase


def state_to_save(strategy: StrategyBase, checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """``checkpoint`` with modules, optimizers and every other stateful object (anything
    with ``state_dict`` and ``load_state_dict``: schedulers, gradient scalers, samplers,
    precision plugins, user objects) replaced by its state dict."""
    converted: dict[str, Any] = {}
    for key, value in checkpoint.items():
        if isinstance(value, nn.Module):
            converted[key] = strategy.get_module_state_dict(value)
        elif strategy._is_optimizer(value):
            converted[key] = strategy.get_optimizer_state(value)
        elif is_stateful(value):
            converted[key] = value.state_dict()
        else:
            converted[key] = value
    return converted


def save_sharded(strategy: StrategyBase, checkpoint: Mapping[str, Any], filepath: PathLike) -> None:
    tensors: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    modules = [value for value in checkpoint.values() if isinstance(value, nn.Module)]
    for key, value in checkpoint.items():
        if isinstance(value, nn.Module):
            tensors[key] = strategy._sharded_module_state(value)
        elif strategy._is_optimizer(value):
            tensors[key] = strategy._sharded_optimizer_state(value, modules)
        elif is_stateful(value):
            meta[key] = value.state_dict()
        else:
            meta[key] = value
    asynchronous = isinstance(strategy.checkpoint_io, AsyncCheckpointIO)
    strategy._sharded_saver.save(tensors, meta, filepath, asynchronous=asynchronous)


def module_of(strategy: StrategyBase, optimizer: Any, modules: list[nn.Module]) -> nn.Module:
    """The module whose parameters ``optimizer`` updates (state dicts key it by their
    names)."""
    candidates = [strategy.unwrap(m) for m in modules]
    if strategy._model is not None:
        candidates.append(strategy.unwrap(strategy._model))
    own = {id(p) for group in optimizer.param_groups for p in group["params"]}
    for module in candidates:
        if own & {id(p) for p in module.parameters()}:
            return module
    raise MisconfigurationError(
        f"cannot tell which module {type(optimizer).__name__} belongs to: put the module in "
        "the same checkpoint, or set it up with the strategy first"
    )


def load_sharded_state(
    strategy: StrategyBase,
    filepath: PathLike,
    state: nn.Module | Optimizer | MutableMapping[str, Any] | None,
    strict: bool,
) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    record = read_meta(filepath)
    if state is None or isinstance(state, nn.Module) or strategy._is_optimizer(state):
        return strategy._restore(consolidated(filepath), state, strict, filepath)
    if not isinstance(state, MutableMapping):
        return strategy._restore({}, state, strict, filepath)  # raises the TypeError
    entries: dict[str, Any] = dict(record["entries"])
    check_entries(filepath, record, state, strict)
    modules = [value for value in state.values() if isinstance(value, nn.Module)]
    tensors: dict[str, Any] = {}
    for key in record["sharded"]:
        target = state.get(key)
        if isinstance(target, nn.Module):
            tensors[key] = strategy._sharded_module_state(target)
        elif target is not None and strategy._is_optimizer(target):
            tensors[key] = strategy._sharded_optimizer_state(target, modules)
    if tensors:
        load_sharded(filepath, tensors)
    for key, value in tensors.items():
        target = state[key]
        if isinstance(target, nn.Module):
            set_model_state_dict(
                strategy.unwrap(target), value, options=StateDictOptions(strict=strict)
            )
        else:
            set_optimizer_state_dict(strategy._module_of(target, modules), target, value)
    return restore_entries(entries, state)


def restore_state(
    strategy: StrategyBase,
    checkpoint: dict[str, Any],
    state: nn.Module | Optimizer | MutableMapping[str, Any] | None,
    strict: bool,
    filepath: PathLike,
) -> dict[str, Any]:
    """Restore ``state`` from a loaded checkpoint (see ``load_checkpoint``)."""
    if state is None:
        return checkpoint
    if isinstance(state, nn.Module):
        strategy.load_module_state_dict(state, checkpoint, strict=strict)
        return {}
    if strategy._is_optimizer(state):
        strategy.load_optimizer_state_dict(state, checkpoint)  # type: ignore[arg-type]
        return {}
    if not isinstance(state, MutableMapping):
        raise TypeError(
            f"load_checkpoint(state=...) takes a dict of objects to restore, a module or an "
            f"optimizer, not {type(state).__name__}"
        )
    missing = [key for key in state if key not in checkpoint]
    if strict and missing:
        raise KeyError(_missing_message(filepath, missing, list(checkpoint)))
    remaining = dict(checkpoint)
    for key, target in list(state.items()):
        if key not in remaining:
            continue
        value = remaining.pop(key)
        if isinstance(target, nn.Module):
            strategy.load_module_state_dict(target, value, strict=strict)
        elif strategy._is_optimizer(target):
            strategy.load_optimizer_state_dict(target, value)
        elif is_stateful(target):
            target.load_state_dict(value)
        else:
            state[key] = value
    return remaining


def is_stateful(value: Any) -> bool:
    """Whether ``value`` saves and restores itself through ``state_dict`` and
    ``load_state_dict`` (classes themselves do not count)."""
    return (
        not isinstance(value, type)
        and callable(getattr(value, "state_dict", None))
        and callable(getattr(value, "load_state_dict", None))
    )


def _missing_message(filepath: PathLike, missing: list[str], present: list[str]) -> str:
    return (
        f"the checkpoint {os.fspath(filepath)} has no entr{'y' if len(missing) == 1 else 'ies'} "
        f"{', '.join(map(repr, missing))} (it has {', '.join(map(repr, present)) or 'none'}); "
        "pass strict=False to restore only what it holds"
    )


def keyed_by_name(state_dict: Mapping[str, Any]) -> bool:
    """Whether an optimizer state dict names its parameters (as sharded strategies write it)."""
    groups = state_dict.get("param_groups") or []
    return any(isinstance(p, str) for group in groups for p in group.get("params", []))


def check_entries(
    filepath: PathLike, record: Mapping[str, Any], state: Mapping[str, Any], strict: bool
) -> None:
    """With ``strict``, fail unless the sharded checkpoint ``record`` describes holds every
    entry ``state`` names."""
    names = set(record["sharded"]) | set(record["entries"])
    missing = [key for key in state if key not in names]
    if strict and missing:
        raise KeyError(_missing_message(filepath, missing, sorted(names)))


def restore_entries(entries: Mapping[str, Any], state: MutableMapping[str, Any]) -> dict[str, Any]:
    """Restore the stateful entries of ``state`` in place and replace its plain ones from
    ``entries``; return the entries ``state`` does not name."""
    remaining = {}
    for key, value in entries.items():
        if key not in state:
            remaining[key] = value
        elif is_stateful(state[key]):
            state[key].load_state_dict(value)
        else:
            state[key] = value
    return remaining
