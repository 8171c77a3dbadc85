"""The devices x frameworks table: for each accelerator of the specs, which strategies run on it
with the generated package, with Lightning's Trainer and with Lightning Fabric, which DeepSpeed
accelerator DeepSpeed strategies train on, what Ray Train's workers ask for it and with which
backend, in which precisions, and what to install.
``stratgen list`` prints it, and the docs target's index page
shows its cells, from the same function (its Lightning columns summed up in one)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from stratcore.contract import PRECISIONS
from stratcore.lightning.contract import ACCELERATOR_NAMES, FRAMEWORKS

from ...resolve.catalog import Accelerator, Catalog, Strategy
from ...resolve.deepspeed_accelerators import deepspeed_generated
from ..deepspeed.accelerators import class_name, rendered
from ..lightning import plugins as lightning_plugins

HEADER = [
    "device",
    "stratlib",
    "Lightning Trainer",
    "Lightning Fabric",
    "DeepSpeed",
    "Ray Train",
    "precisions",
    "install",
]


@dataclass(frozen=True)
class DeviceRow:
    """What one accelerator's row says, cell by cell."""

    device: str
    stratlib: str
    trainer: str
    fabric: str
    deepspeed: str
    ray: str
    precisions: str
    install: str

    def cells(self) -> list[str]:
        return [
            self.device,
            self.stratlib,
            self.trainer,
            self.fabric,
            self.deepspeed,
            self.ray,
            self.precisions,
            self.install,
        ]


def precisions_text(accelerator: Accelerator) -> str:
    """The device's precisions; those behind a probe grouped after the probe that decides."""
    spec = accelerator.spec
    supported = spec.precision.supported or PRECISIONS
    probes = dict(spec.precision.probes or {})
    parts = [", ".join(m for m in supported if m not in probes)]
    by_probe: dict[str, list[str]] = {}
    for mode in supported:
        if mode in probes:
            by_probe.setdefault(probes[mode], []).append(mode)
    for probe, modes in by_probe.items():
        parts.append(f"{', '.join(modes)} where {probe.replace(':', '.')}()")
    return "; ".join(p for p in parts if p)


def install_text(accelerator: Accelerator) -> str:
    """What to install for the device: its own install hint and its requirements' hints."""
    spec = accelerator.spec
    hints = [spec.install] if spec.install else []
    hints += [r.install or f"the '{r.module}' package" for r in spec.requires]
    return "; ".join(dict.fromkeys(hints)) or "torch"


def deepspeed_text(accelerator: Accelerator, deepspeed_target: bool = True) -> str:
    """Which DeepSpeed accelerator the device's DeepSpeed strategies train on: DeepSpeed's own
    class (by its DS_ACCELERATOR name) or the one the deepspeed target generates."""
    spec = accelerator.spec
    if not deepspeed_generated(spec) or not rendered(accelerator):
        return f"DeepSpeed's own ({spec.deepspeed_accelerator or spec.device_type})"
    if not deepspeed_target:
        return "generated (made at run time: not a target of this project)"
    return f"generated ({class_name(accelerator)})"


def ray_text(accelerator: Accelerator, strategies: Iterable[Strategy]) -> str:
    """What a Ray Train worker of the device asks for (the spec's Ray resource, a CPU for
    devices that are processes) and the backend of the group Ray creates for it
    (``stratcore.ray``), where a strategy that runs on it detects the ``ray`` environment."""
    if not any("ray" in strategy.cluster for strategy in strategies):
        return "no"
    spec = accelerator.spec
    backend = accelerator.backend
    name = (
        "the one torch maps the device to"
        if backend.from_device_map
        else (backend.torch_name or backend.name)
    )
    if spec.ray_resource:
        return f"{spec.ray_resource} per worker; backend {name}"
    if not spec.indexed or spec.device_count is None:
        return f"CPU per worker; backend {name}"
    return f"no Ray resource in its spec (ray_resource); backend {name}"


def _lightning_text(name: str, selection: lightning_plugins.Selection) -> str:
    """Which Lightning plugins serve the device in ``framework``: Lightning's own accelerator
    and strategies, and the generated plugins for the strategies Lightning lacks."""
    plugins = [
        registry_name
        for plugin in selection.strategies
        if name in plugin.strategy.accelerators
        for registry_name, _ in plugin.names
    ]
    if name in ACCELERATOR_NAMES:
        own = "Lightning's own"
        return f"{own}; plugins: {', '.join(plugins)}" if plugins else own
    rendered = any(a.name == name for a in selection.accelerators)
    if not rendered or not plugins:
        return "no"
    return f"plugins: {', '.join(plugins)}"


def device_rows(
    catalog: Catalog,
    strategy_names: Iterable[str],
    accelerator_names: Iterable[str],
    lightning_target: bool = True,
    deepspeed_target: bool = True,
) -> list[DeviceRow]:
    """One row per accelerator, for the selected strategies; without the Lightning target, the
    Lightning columns say so, and without the deepspeed target the DeepSpeed column."""
    names = list(strategy_names)
    selections = {f: lightning_plugins.select(catalog, names, f) for f in FRAMEWORKS}
    rows = []
    for name in accelerator_names:
        accelerator = catalog.accelerators[name]
        runs = [
            n
            for n in names
            if not catalog.strategies[n].abstract and name in catalog.strategies[n].accelerators
        ]
        if lightning_target:
            trainer = _lightning_text(name, selections["pytorch"])
            fabric = _lightning_text(name, selections["fabric"])
        else:
            trainer = fabric = "not a target of this project"
        rows.append(
            DeviceRow(
                device=name,
                stratlib=", ".join(runs) or "no strategy",
                trainer=trainer,
                fabric=fabric,
                deepspeed=deepspeed_text(accelerator, deepspeed_target),
                ray=ray_text(accelerator, [catalog.strategies[n] for n in runs]),
                precisions=precisions_text(accelerator),
                install=install_text(accelerator),
            )
        )
    return rows


def device_blocks(rows: Iterable[DeviceRow]) -> str:
    """The rows as text for a terminal: one block per device, a line per column."""
    width = max(len(h) for h in HEADER[1:]) + 2
    blocks = []
    for row in rows:
        lines = [row.device]
        lines += [
            f"  {(h + ':').ljust(width)}{c}"
            for h, c in zip(HEADER[1:], row.cells()[1:], strict=True)
        ]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
