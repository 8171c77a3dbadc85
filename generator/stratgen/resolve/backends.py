"""Resolution of the collective backends the specs declare (``resolver`` resolves the
rest)."""

from __future__ import annotations

from stratcore.wording import did_you_mean

from ..spec.errors import Location
from ..spec.model import Backend, StrategySpec
from . import device_checks
from .catalog import Catalog, Source, Strategy
from .checks import Problems, field_loc


def resolve_backends(catalog: Catalog, problems: Problems) -> None:
    """Every backend the specs declare, in ``backends:`` or inline in a strategy, into the
    catalog's one namespace of backends; the same name declared twice must be the same."""
    for source in catalog.sources:
        for index, backend in enumerate(source.spec.backends):
            _declare_backend(catalog, problems, backend, source, f"backends[{index}]")
    # Inline backends declared by strategies join the same namespace.
    for source in catalog.sources:
        for index, strategy in enumerate(source.spec.strategies):
            if isinstance(strategy.backend, Backend):
                _declare_backend(
                    catalog, problems, strategy.backend, source, f"strategies[{index}].backend"
                )


def _declare_backend(
    catalog: Catalog, problems: Problems, backend: Backend, source: Source, path: str
) -> None:
    existing = catalog.backends.get(backend.name)
    if existing is not None and existing != backend:
        problems.add(
            field_loc(backend, "name"),
            f"{path}.name",
            f"backend {backend.name!r} is already declared differently in "
            f"{catalog.backend_sources[backend.name].path}",
            related=existing.loc,
        )
        return
    if "sum" not in backend.reduce_ops:
        problems.add(
            field_loc(backend, "reduce_ops"),
            f"{path}.reduce_ops",
            "every backend must support 'sum' (reduce_boolean_decision and the emulated "
            "mean rely on it)",
        )
    for src, dst in backend.casts.items():
        if src == dst:
            problems.add(
                field_loc(backend, "casts"), f"{path}.casts.{src}", f"casts {src} to itself"
            )
    device_checks.check_backend_naming(problems, backend, path)
    catalog.backends.setdefault(backend.name, backend)
    catalog.backend_sources.setdefault(backend.name, source)


def backend_ref(
    catalog: Catalog, problems: Problems, ref: str, loc: Location, path: str
) -> Backend | None:
    """The backend a spec names, or None and a problem naming the declared ones."""
    if ref in catalog.backends:
        return catalog.backends[ref]
    problems.add(
        loc,
        path,
        f"no backend named {ref!r}{did_you_mean(ref, catalog.backends)}; "
        f"declared backends: {', '.join(catalog.backends) or 'none'}",
    )
    return None


def strategy_backend(
    catalog: Catalog, problems: Problems, spec: StrategySpec, path: str, parent: Strategy | None
) -> Backend | None:
    """A strategy's backend: 'auto' -> None (chosen from the accelerator); a declared name; or
    an inline declaration; unset, its parent's."""
    if spec.backend is None:
        return parent.backend if parent else None
    if isinstance(spec.backend, Backend):
        return catalog.backends.get(spec.backend.name)
    if spec.backend == "auto":
        return None
    return backend_ref(
        catalog, problems, spec.backend, field_loc(spec, "backend"), f"{path}.backend"
    )
