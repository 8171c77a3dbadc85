"""Activation checkpointing for the strategies built on FSDP2 ('fsdp' and 'model_parallel'):
the layers a user names (``activation_checkpointing_policy``) recompute their activations during
backward instead of keeping them from forward.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from stratcore.exceptions import MisconfigurationError
from stratcore.imports import import_object
from torch import nn


def layer_matcher(layers: Any, option: str) -> Callable[[nn.Module], bool]:
    """A test for module classes given as classes, import paths (``"torch.nn.Linear"``,
    ``"mypkg.model:Block"``) or bare class names (matched against a module's class and its
    bases); ``option`` names the setting in errors."""
    if isinstance(layers, str | type) or not isinstance(layers, Sequence):
        raise MisconfigurationError(
            f"{option}={layers!r} is not allowed; give a list of module classes, import paths "
            "such as 'torch.nn.Linear', or class names"
        )
    classes: list[type] = []
    names: set[str] = set()
    for layer in layers:
        if isinstance(layer, type) and issubclass(layer, nn.Module):
            classes.append(layer)
        elif isinstance(layer, str) and ("." in layer or ":" in layer):
            classes.append(_module_class(layer, option))
        elif isinstance(layer, str) and layer.isidentifier():
            names.add(layer)
        else:
            raise MisconfigurationError(
                f"{option} entry {layer!r} is not allowed; give a module class, an import path "
                "such as 'torch.nn.Linear', or a class name"
            )
    found = tuple(classes)

    def matches(module: nn.Module) -> bool:
        if found and isinstance(module, found):
            return True
        return any(cls.__name__ in names for cls in type(module).__mro__)

    return matches


def _module_class(path: str, option: str) -> type:
    target = path if ":" in path else ":".join(path.rsplit(".", 1))
    try:
        cls = import_object(target)
    except (ImportError, AttributeError) as error:
        raise MisconfigurationError(
            f"{option} entry {path!r} cannot be imported: {error}"
        ) from None
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise MisconfigurationError(f"{option} entry {path!r} is not a torch.nn.Module class")
    return cls


def apply_activation_checkpointing(module: nn.Module, layers: Any) -> list[nn.Module]:
    """Recompute the activations of every submodule whose class is in ``layers`` during
    backward instead of keeping them from forward; returns those submodules.

    Each one's ``forward`` is replaced, in place, by a non-reentrant
    ``torch.utils.checkpoint.checkpoint`` of itself, so module structure and parameter names
    stay as they were (tensor-parallel plans and optimizers still find them) and the
    sharding wrappers' hooks, which run around ``forward``, are not run twice.
    """
    matches = layer_matcher(layers, "activation_checkpointing_policy")
    selected = [m for m in module.modules() if m is not module and matches(m)]
    for layer in selected:
        if CHECKPOINTED not in vars(layer):
            layer.forward = _checkpointed(layer.forward)
            setattr(layer, CHECKPOINTED, True)
    return selected


#: Attribute marking a module whose forward is checkpointed already.
CHECKPOINTED = "_activation_checkpointed"


def _checkpointed(forward: Callable[..., Any]) -> Callable[..., Any]:
    from torch.utils.checkpoint import checkpoint

    def checkpointed_forward(*args: Any, **kwargs: Any) -> Any:
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    return checkpointed_forward
