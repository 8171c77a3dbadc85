"""What a strategy or precision plugin takes from what it builds on (``resolver``
resolves the rest): the modules its accelerators need, the options its launcher reads, and the
types and defaults of the options the runtime reads."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from stratcore.contract import LAUNCHER_OPTIONS

from ..spec.model import Option
from .catalog import Catalog, PrecisionPlugin, Strategy
from .checks import Problems
from .runtime_facts import runtime_bases, runtime_option


def requirements(
    catalog: Catalog,
    spec: Any,
    parent: Strategy | PrecisionPlugin | None,
    accelerators: Iterable[str],
) -> tuple[Any, ...]:
    """What a strategy or precision plugin needs: the modules its spec (or the nearest
    ancestor's that names any) lists, then those that every accelerator it is made for needs,
    each module once. A device's own strategies thus need its package without restating it."""
    declared = spec.requires
    while declared is None and parent is not None:
        declared, parent = parent.spec.requires, parent.parent
    found = [catalog.accelerators[a] for a in accelerators if a in catalog.accelerators]
    shared = [
        requirement
        for requirement in (found[0].spec.requires if found else ())
        if all(any(r.module == requirement.module for r in a.spec.requires) for a in found[1:])
    ]
    requirements: dict[str, Any] = {}
    for requirement in (*(declared or ()), *shared):
        requirements.setdefault(requirement.module, requirement)
    return tuple(requirements.values())


def _option_type(types: tuple[str, ...]) -> Any:
    """An option's ``type`` as a spec writes it: one name, or a tuple of several."""
    return types[0] if len(types) == 1 else types


def launcher_options(launcher: str) -> dict[str, Option]:
    """The options the strategy's launcher reads from it, as the contract declares them."""
    return {
        name: Option(
            type=_option_type(facts.types),
            default=facts.default,
            doc=facts.doc,
            choices=facts.choices,
        )
        for name, facts in LAUNCHER_OPTIONS.get(launcher, {}).items()
    }


def given_over(declared: Option, given: Option) -> Option:
    """What a spec says of an option its launcher declares: the spec's fields where it gives
    them, the launcher's for the rest."""
    filled = [key for key in ("type", "default", "doc", "choices") if key not in given.locs]
    return dataclasses.replace(
        given,
        **{key: getattr(declared, key) for key in filled},
        locs={**{key: given.loc for key in filled}, **given.locs},
    )


def with_runtime_facts(
    problems: Problems, path: str, name: str, option: Option, base: str, wrapper: str
) -> Option:
    """``option`` with the type and default the runtime class that reads it declares, where
    the spec gives none; a problem where it gives no type and the runtime declares none."""
    if option.type is not None and "default" in option.locs:
        return option
    facts = runtime_option(runtime_bases(base, wrapper), name)
    if facts is None:
        if option.type is None:
            problems.add(
                option.loc,
                f"{path}.options.{name}.type",
                f"option {name!r} needs a type: the runtime declares none for it",
            )
        return option
    types, default = facts
    return dataclasses.replace(
        option,
        type=option.type if option.type is not None else _option_type(types),
        default=option.default if "default" in option.locs else default,
    )
