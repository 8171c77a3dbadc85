"""How a strategy saves and loads checkpoints: the objects of a checkpoint turned into state
dicts and back, whole (saved by rank 0) or sharded (every process saves and loads its own
part, see ``stratcore.checkpoints.sharded``).

``CheckpointingBase`` holds the behaviour, and ``StrategyBase`` derives from it. What it needs
of a strategy is its abstract members: the CheckpointIO, the model and optimizers ``setup``
returned, the ranks and two collectives, and ``unwrap``. Wrappers override the state-dict
methods (``get_module_state_dict``, ``load_optimizer_state_dict``, ...), ``saves_sharded``,
and for their own sharded format ``save_sharded_checkpoint`` and ``load_sharded_checkpoint``;
those that write sharded checkpoints say so with ``reads_sharded_checkpoints``, and only they
read a folder.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, MutableMapping
from typing import Any

from torch import nn
from torch.optim import Optimizer

from ..exceptions import MisconfigurationError
from .io import AsyncCheckpointIO, CheckpointIO, CheckpointLoadError, PathLike
from .sharded import (
    ShardedSaver,
    consolidated,
    is_sharded_checkpoint,
    load_sharded,
    read_meta,
    resolve_checkpoint,
)

#: What ``load_checkpoint`` restores: a module, an optimizer, or a dict of objects (or nothing).
State = nn.Module | Optimizer | MutableMapping[str, Any] | None


class CheckpointingBase(ABC):
    """Checkpoints of a strategy; see the module documentation."""

    _saver: ShardedSaver | None = None

    # -- what the strategy provides ------------------------------------------------------

    @property
    @abstractmethod
    def checkpoint_io(self) -> CheckpointIO:
        """Writes and reads whole checkpoints."""

    @property
    @abstractmethod
    def model(self) -> nn.Module | None:
        """The model ``setup`` returned."""

    @property
    @abstractmethod
    def optimizers(self) -> list[Optimizer]:
        """The optimizers ``setup`` returned."""

    @property
    @abstractmethod
    def global_rank(self) -> int:
        """This process's rank."""

    @property
    @abstractmethod
    def is_global_zero(self) -> bool:
        """Whether this is rank 0."""

    @abstractmethod
    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """Send ``obj`` from rank ``src`` to every process and return it."""

    @abstractmethod
    def barrier(self, name: str | None = None) -> None:
        """Wait until every process reaches this point."""

    @staticmethod
    @abstractmethod
    def unwrap(module: nn.Module) -> nn.Module:
        """The user's module inside any wrapper."""

    # -- state dicts ---------------------------------------------------------------------

    def get_module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        """The full, unsharded state dict of ``module`` (wrappers removed)."""
        return self.unwrap(module).state_dict()

    def load_module_state_dict(
        self, module: nn.Module, state_dict: Mapping[str, Any], strict: bool = True
    ) -> None:
        """Load a saved state dict into ``module`` (unwrapped from its wrapper first)."""
        self.unwrap(module).load_state_dict(state_dict, strict=strict)

    def get_optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        """The optimizer's complete state (consolidated from every rank where it is sharded)."""
        return optimizer.state_dict()

    def load_optimizer_state_dict(
        self, optimizer: Optimizer, state_dict: Mapping[str, Any]
    ) -> None:
        """Load a saved state dict into ``optimizer``: keyed by position, or by parameter name
        where a sharded strategy wrote it."""
        if keyed_by_name(state_dict) and self.model is not None:
            # Written by a sharded strategy (or converted from a sharded checkpoint): its
            # state is keyed by parameter name rather than position.
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                set_optimizer_state_dict,
            )

            set_optimizer_state_dict(
                self.module_of(optimizer, []),
                optimizer,
                dict(state_dict),
                options=StateDictOptions(full_state_dict=True),
            )
            return
        optimizer.load_state_dict(dict(state_dict))

    def is_optimizer(self, value: Any) -> bool:
        """Torch optimizers, and the optimizers ``setup`` returned (engines such as DeepSpeed
        return their own optimizer classes)."""
        return isinstance(value, Optimizer) or any(value is o for o in self.optimizers)

    def module_of(self, optimizer: Any, modules: list[nn.Module]) -> nn.Module:
        """The module whose parameters ``optimizer`` updates, among ``modules`` and the model
        (state dicts key its state by their names)."""
        candidates = [self.unwrap(m) for m in modules]
        if self.model is not None:
            candidates.append(self.unwrap(self.model))
        own = {id(p) for group in optimizer.param_groups for p in group["params"]}
        for module in candidates:
            if own & {id(p) for p in module.parameters()}:
                return module
        raise MisconfigurationError(
            f"cannot tell which module {type(optimizer).__name__} belongs to: put the module in "
            "the same checkpoint, or set it up with the strategy first"
        )

    def state_to_save(self, checkpoint: Mapping[str, Any]) -> dict[str, Any]:
        """``checkpoint`` with modules, optimizers and every other stateful object (anything
        with ``state_dict`` and ``load_state_dict``: schedulers, gradient scalers, samplers,
        precision plugins, user objects) replaced by its state dict."""
        converted: dict[str, Any] = {}
        for key, value in checkpoint.items():
            if isinstance(value, nn.Module):
                converted[key] = self.get_module_state_dict(value)
            elif self.is_optimizer(value):
                converted[key] = self.get_optimizer_state(value)
            elif is_stateful(value):
                converted[key] = value.state_dict()
            else:
                converted[key] = value
        return converted

    # -- saving --------------------------------------------------------------------------

    def save_checkpoint(
        self, checkpoint: Mapping[str, Any], filepath: PathLike, storage_options: Any = None
    ) -> None:
        """Save ``checkpoint`` to ``filepath`` from rank 0.

        Modules, optimizers and other stateful objects in the mapping are replaced by their
        full state dicts; other values are saved as they are. Returns once the file is
        complete, or, with an asynchronous CheckpointIO, once the write is queued
        (``load_checkpoint`` waits for it).
        """
        if self.saves_sharded:
            if storage_options is not None:
                raise TypeError("sharded checkpoints take no storage_options")
            self.save_sharded_checkpoint(checkpoint, filepath)
            return
        state = self.state_to_save(checkpoint)
        if self.is_global_zero:
            self.checkpoint_io.save_checkpoint(state, filepath, storage_options=storage_options)
        self.barrier("save_checkpoint")

    @property
    def saves_sharded(self) -> bool:
        """Whether ``save_checkpoint`` writes a sharded checkpoint folder (strategies whose
        processes hold parts of the model); every strategy loads one."""
        return False

    @property
    def reads_sharded_checkpoints(self) -> bool:
        """Whether ``load_checkpoint`` reads a sharded checkpoint folder: only strategies that
        can write one do (a folder is handed to ``torch.distributed.checkpoint``, or to an
        engine, nowhere else); the others refuse it, naming ``consolidate``."""
        return False

    @property
    def sharded_saver(self) -> ShardedSaver:
        """What writes this process's sharded checkpoints, made on first use."""
        if self._saver is None:
            self._saver = ShardedSaver(
                lambda: self.global_rank, lambda obj, src: self.broadcast(obj, src), self.barrier
            )
        return self._saver

    def save_sharded_checkpoint(self, checkpoint: Mapping[str, Any], filepath: PathLike) -> None:
        """Every process writes its shards of the modules and optimizers; rank 0 the rest."""
        tensors: dict[str, Any] = {}
        meta: dict[str, Any] = {}
        modules = [value for value in checkpoint.values() if isinstance(value, nn.Module)]
        for key, value in checkpoint.items():
            if isinstance(value, nn.Module):
                tensors[key] = self.sharded_module_state(value)
            elif self.is_optimizer(value):
                tensors[key] = self.sharded_optimizer_state(value, modules)
            elif is_stateful(value):
                meta[key] = value.state_dict()
            else:
                meta[key] = value
        asynchronous = isinstance(self.checkpoint_io, AsyncCheckpointIO)
        self.sharded_saver.save(tensors, meta, filepath, asynchronous=asynchronous)

    def sharded_module_state(self, module: nn.Module) -> dict[str, Any]:
        """``module``'s state dict as this process holds it (shards where it is sharded)."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(self.unwrap(module))

    def sharded_optimizer_state(self, optimizer: Any, modules: list[nn.Module]) -> dict[str, Any]:
        """``optimizer``'s state as this process holds it, keyed by parameter name."""
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return get_optimizer_state_dict(self.module_of(optimizer, modules), optimizer)

    def finish_saves(self) -> None:
        """Wait until this process's asynchronous saves are complete."""
        self.checkpoint_io.wait()
        if self._saver is not None:
            self._saver.wait()

    def close_checkpoints(self) -> None:
        """Finish and let go of the sharded saver (its asynchronous saves need the processes'
        connections, so teardown calls this first)."""
        if self._saver is not None:
            saver, self._saver = self._saver, None
            saver.close()

    # -- loading -------------------------------------------------------------------------

    def load_checkpoint(
        self, filepath: PathLike, state: State = None, strict: bool = True
    ) -> dict[str, Any]:
        """Load a checkpoint on every rank and restore ``state`` from it.

        ``state`` may be:

        - None or an empty dict: the whole checkpoint is returned.
        - A module (or optimizer): the file holds its bare state dict, which is loaded into
          it; returns an empty dict.
        - A dict of objects: modules, optimizers and other stateful objects are restored in
          place from the entries of the same name; any other entry of ``state`` is replaced
          by the checkpoint's value. Returns the checkpoint's entries ``state`` did not name.
          With ``strict``, a name of ``state`` missing from the checkpoint is an error (and
          module state dicts must match exactly).
        """
        # Every rank finishes its outstanding (asynchronous) saves before any rank reads.
        self.finish_saves()
        self.barrier("load_checkpoint")
        filepath = resolve_checkpoint(filepath)
        if is_sharded_checkpoint(filepath):
            if not self.reads_sharded_checkpoints:
                raise CheckpointLoadError(
                    f"{os.fspath(filepath)} is a sharded checkpoint folder, which only strategies "
                    f"that write sharded checkpoints read ({type(self).__name__} does not); "
                    "convert it into one file with python -m stratcore.checkpoints.consolidate "
                    f"{os.fspath(filepath)} <file>"
                )
            return self.load_sharded_checkpoint(filepath, state, strict)
        checkpoint = self.checkpoint_io.load_checkpoint(filepath, map_location="cpu")
        return self._restore(checkpoint, state, strict, filepath)

    def load_sharded_checkpoint(
        self, filepath: PathLike, state: State, strict: bool
    ) -> dict[str, Any]:
        """``load_checkpoint`` of a sharded checkpoint folder: every process reads the shards
        it holds (of any world size), or the whole of it for a module or optimizer alone."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        record = read_meta(filepath)
        if state is None or isinstance(state, nn.Module) or self.is_optimizer(state):
            return self._restore(consolidated(filepath), state, strict, filepath)
        if not isinstance(state, MutableMapping):
            return self._restore({}, state, strict, filepath)  # raises the TypeError
        entries: dict[str, Any] = dict(record["entries"])
        check_entries(filepath, record, state, strict)
        modules = [value for value in state.values() if isinstance(value, nn.Module)]
        tensors: dict[str, Any] = {}
        for key in record["sharded"]:
            target = state.get(key)
            if isinstance(target, nn.Module):
                tensors[key] = self.sharded_module_state(target)
            elif target is not None and self.is_optimizer(target):
                tensors[key] = self.sharded_optimizer_state(target, modules)
        if tensors:
            load_sharded(filepath, tensors)
        for key, value in tensors.items():
            target = state[key]
            if isinstance(target, nn.Module):
                set_model_state_dict(
                    self.unwrap(target), value, options=StateDictOptions(strict=strict)
                )
            else:
                set_optimizer_state_dict(self.module_of(target, modules), target, value)
        return restore_entries(entries, state)

    def _restore(
        self, checkpoint: dict[str, Any], state: State, strict: bool, filepath: PathLike
    ) -> dict[str, Any]:
        """Restore ``state`` from a loaded checkpoint (see ``load_checkpoint``)."""
        if state is None:
            return checkpoint
        if isinstance(state, nn.Module):
            self.load_module_state_dict(state, checkpoint, strict=strict)
            return {}
        if self.is_optimizer(state):
            self.load_optimizer_state_dict(state, checkpoint)  # type: ignore[arg-type]
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
                self.load_module_state_dict(target, value, strict=strict)
            elif self.is_optimizer(target):
                self.load_optimizer_state_dict(target, value)
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
