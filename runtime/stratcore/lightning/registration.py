"""Registering generated Lightning plugins in Lightning's registries (no Lightning import)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["register", "register_accelerator", "register_strategy"]


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().split("\n", 1)[0].strip()


def _same_class(a: Any, b: Any) -> bool:
    """The same class, or its re-imported twin (same module and qualified name)."""
    return a is b or (
        isinstance(a, type)
        and isinstance(b, type)
        and (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__)
    )


def _check_free(kind: str, name: str, holder: Any, cls: type, override: bool) -> None:
    if holder is not None and not _same_class(holder, cls) and not override:
        where = f"{holder.__module__}.{holder.__qualname__}"
        raise ValueError(
            f"{kind} name {name!r} is already registered to {where}; pass override=True to "
            f"replace it with {cls.__module__}.{cls.__qualname__}"
        )


def register_accelerator(registry: Any, cls: type, override: bool = False) -> None:
    """Register a Lightning accelerator class under its spec's name (idempotent)."""
    name = cls.name()  # type: ignore[attr-defined]
    holder = (
        dict.__getitem__(registry, name)["accelerator"] if name in dict.keys(registry) else None
    )
    _check_free("accelerator", name, holder, cls, override)
    description = _first_line(getattr(cls, "spec", cls).__doc__)
    registry.register(name, cls, description=description, override=True)


def register_strategy(
    registry: Any,
    name: str,
    cls: type,
    preset: Mapping[str, Any] | None = None,
    override: bool = False,
) -> None:
    """Register a Lightning strategy class under ``name`` with ``preset`` init params."""
    holder = dict.__getitem__(registry, name)["strategy"] if name in dict.keys(registry) else None
    _check_free("strategy", name, holder, cls, override)
    description = _first_line(getattr(cls, "spec", cls).__doc__)
    registry.register(name, cls, description=description, override=True, **dict(preset or {}))


def register(
    accelerator_registry: Any,
    strategy_registry: Any,
    *,
    accelerators: Iterable[type] = (),
    strategies: Iterable[tuple[str, type, Mapping[str, Any]]] = (),
    override: bool = False,
) -> None:
    """Register generated Lightning classes into a pair of Lightning registries.

    ``accelerators`` are registered under their spec's name; each ``(name, cls, preset)`` of
    ``strategies`` registers ``cls`` under ``name`` with ``preset`` as its init params (an
    alias such as 'acme_parallel_find_unused_parameters_true'). Registering what is already
    registered (a re-import) changes nothing; a name held by another class is an error unless
    ``override`` is true. Use Lightning's pairs: ``lightning.pytorch.accelerators.AcceleratorRegistry``
    with ``lightning.pytorch.strategies.StrategyRegistry``, and
    ``lightning.fabric.accelerators.ACCELERATOR_REGISTRY`` with
    ``lightning.fabric.strategies.STRATEGY_REGISTRY``.
    """
    accelerators = list(accelerators)
    strategies = list(strategies)
    for cls in accelerators:
        register_accelerator(accelerator_registry, cls, override)
    for name, cls, preset in strategies:
        register_strategy(strategy_registry, name, cls, preset, override)
