"""The table ``stratgen list`` prints, with a probe of what runs on this machine."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable
from functools import cache

from ..resolve.catalog import Accelerator, Catalog
from ..resolve.selection import Selection
from ..targets.docs.device_table import device_blocks, device_rows


@cache
def module_present(name: str) -> bool:
    """Whether a module can be imported, without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _call(path: str) -> object:
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)()


def _accelerator_available(accelerator: Accelerator) -> tuple[bool, str]:
    spec = accelerator.spec
    requires = tuple(r.module for r in spec.requires)
    return _probe(spec.name, requires, spec.is_available, spec.build_marker)


@cache
def _probe(
    name: str, requires: tuple[str, ...], is_available: str | None, build_marker: str | None
) -> tuple[bool, str]:
    """Whether an accelerator is usable here; probing may import its runtime, so once only."""
    missing = [module for module in requires if not module_present(module)]
    if missing:
        return False, f"needs {', '.join(missing)}"
    if build_marker is not None:
        module, _, attribute = build_marker.partition(":")
        if not getattr(importlib.import_module(module), attribute, None):
            return False, f"not a build with {module}.{attribute}"
    if is_available is None:
        return True, ""
    module = is_available.partition(":")[0]
    if not module_present(module.split(".")[0]):
        return False, f"needs {module.split('.')[0]}"
    try:
        return (True, "") if _call(is_available) else (False, f"no {name} device")
    except Exception as exc:  # a probe that fails means "not here"
        return False, f"probe failed: {type(exc).__name__}"


def availability(catalog: Catalog, strategy_name: str) -> str:
    strategy = catalog.strategies[strategy_name]
    missing = [r.module for r in strategy.requires if not module_present(r.module)]
    if strategy.backend is not None:
        missing += [r.module for r in strategy.backend.requires if not module_present(r.module)]
    if missing:
        return "no: needs " + ", ".join(dict.fromkeys(missing))
    reasons = []
    for name in strategy.accelerators:
        ok, why = _accelerator_available(catalog.accelerators[name])
        if ok:
            return f"yes ({name})"
        reasons.append(why)
    return "no: " + "; ".join(dict.fromkeys(reasons))


def table(rows: Iterable[list[str]], header: list[str]) -> str:
    rows = [header, *rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def strategy_rows(catalog: Catalog, selection: Selection, probe: bool) -> list[list[str]]:
    rows = []
    for name in selection.strategies:
        strategy = catalog.strategies[name]
        if strategy.abstract:
            continue
        backend = strategy.backend.name if strategy.backend else "auto"
        status = availability(catalog, name) if probe else "-"
        for alias in strategy.registry_names:
            shown = alias if alias == name else f"  {alias}"
            rows.append(
                [
                    shown,
                    strategy.class_name,
                    ", ".join(strategy.accelerators),
                    backend,
                    strategy.launcher,
                    status if alias == name else "",
                ]
            )
    return rows


def strategy_table(
    catalog: Catalog,
    selection: Selection,
    probe: bool = True,
    lightning_target: bool = False,
    deepspeed_target: bool = False,
) -> str:
    header = ["strategy", "class", "accelerators", "backend", "launcher", "available here"]
    out = [table(strategy_rows(catalog, selection, probe), header), ""]
    accel_rows = []
    for name in selection.accelerators:
        accelerator = catalog.accelerators[name]
        if probe:
            ok, why = _accelerator_available(accelerator)
            status = "yes" if ok else f"no: {why}"
        else:
            status = "-"
        backend = accelerator.backend
        if backend.from_device_map:
            shown = f"{backend.name} (torch's map)"
        else:
            shown = backend.name + (f" ({backend.torch_name})" if backend.torch_name else "")
        accel_rows.append([name, accelerator.class_name, shown, status])
    out.append(table(accel_rows, ["accelerator", "class", "backend", "available here"]))
    rows = device_rows(
        catalog, selection.strategies, selection.accelerators, lightning_target, deepspeed_target
    )
    out += ["", "Devices and frameworks:", "", device_blocks(rows)]
    return "\n".join(out)
