"""The docs target: a Markdown page for each device of a project's specs, and an index.

``targets = ["stratlib", "docs"]`` under ``[tool.stratgen]`` (``docs`` names the folder,
``docs/devices`` by default) renders, for each accelerator of the project's own specs, a page
a user of that device reads: what the spec declares and where each fact comes from (the spec's
comments), its strategies and aliases for stratlib and Lightning, its precisions and the probes
that gate them, what to install, how to select it, what its code has run on (the project's
verification record, ``verification``) and what only the hardware itself can prove; and
``index.md``, the devices table. The pages are generated files like any other:
``stratgen check`` reports a stale or hand-edited one. Templates: ``templates/docs``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import jinja2
from stratcore.contract import DEFAULT_PRECISION, PRECISIONS
from stratcore.lightning.contract import ACCELERATOR_NAMES, FRAMEWORKS, REQUIREMENT, STRATEGY_NAMES

from ...codegen.python_source import first_sentence, literal
from ...codegen.templating import RenderedFile, Renderer, header, template_problem
from ...resolve.catalog import Accelerator, Catalog, Strategy, test_module_name
from ...resolve.selection import Selection
from ...spec.errors import StratgenError
from ...spec.model import Backend
from ..lightning import plugins as lightning_plugins
from .device_table import device_rows, install_text
from .markdown import call, code, paragraphs, text, tidy
from .spec_comments import SpecText, facts
from .verification import KINDS, SHORT, Record

INDEX = "index.md"
#: What the Trainer and Fabric columns say of a framework the project does not render for.
NOT_A_TARGET = "not a target of this project"


@dataclass(frozen=True)
class StrategyEntry:
    """A strategy that runs on the device, as its page shows it."""

    name: str
    class_name: str
    description: str
    note: str
    declared_in: str
    facts: list[tuple[str, str]]
    #: (registry name, preset, Trainer, Fabric)
    names: list[tuple[str, str, str, str]]
    #: (option, type, default, meaning)
    options: list[tuple[str, str, str, str]]


@dataclass(frozen=True)
class Usage:
    """How to select the device: a stratlib call, and for each Lightning framework either a
    snippet or why there is none."""

    stratlib: str
    trainer: str
    trainer_note: str
    fabric: str
    fabric_note: str


@dataclass(frozen=True)
class Status:
    """What the device's code has run on, from the verification record: a row per entry
    (ran on, what ran, when), and whether the hardware itself has reported."""

    record: str
    rows: list[tuple[str, str, str]]
    reported: bool
    hardware: str


@dataclass(frozen=True)
class DevicePage:
    path: str
    name: str
    title: str
    summary: str
    description: str
    spec_path: str
    spec_notes: str
    tests_path: str
    package: str
    install: list[str]
    usage: Usage
    strategies: list[StrategyEntry]
    precisions: list[tuple[str, str, str]]
    declared: list[tuple[str, str, str]]
    backend_title: str
    backend: list[tuple[str, str, str]]
    hardware_only: list[str]
    status: Status | None = None
    standin_checks: list[str] = field(default_factory=list)


# --- pages ------------------------------------------------------------------------------------


def paged_accelerators(catalog: Catalog, selection: Selection) -> list[Accelerator]:
    """The devices that get a page: those of the project's own specs, or every one where all
    the specs are stratgen's own (this repository)."""
    chosen = [catalog.accelerators[name] for name in selection.accelerators]
    local = [a for a in chosen if not a.source.builtin]
    return local if any(not s.builtin for s in catalog.sources) else chosen


def _runs_on(catalog: Catalog, selection: Selection, device: str) -> list[Strategy]:
    return [
        catalog.strategies[name]
        for name in selection.strategies
        if not catalog.strategies[name].abstract and device in catalog.strategies[name].accelerators
    ]


def _lightning_cell(name: str, framework: str, plugins: dict[str, set[str]] | None) -> str:
    if plugins is None:
        return NOT_A_TARGET
    if name in STRATEGY_NAMES[framework]:
        return "Lightning's own"
    return "plugin" if name in plugins[framework] else "no"


def _option_rows(strategy: Strategy) -> list[tuple[str, str, str, str]]:
    rows = []
    for name, option in strategy.options.items():
        types = " or ".join(option.types) or "any"
        if option.choices:
            types += ": " + ", ".join(code(literal(c)) for c in option.choices)
        rows.append((code(name), types, code(literal(option.default)), text(option.doc)))
    return rows


def _strategy_entry(
    catalog: Catalog, strategy: Strategy, device: Accelerator, plugins: dict[str, set[str]] | None
) -> StrategyEntry:
    spec_text = SpecText.of(strategy.source)
    node = spec_text.entry("strategies", strategy.name)
    note = spec_text.entry_note(node) if node is not None else ""
    parent = strategy.spec.extends or strategy.spec.base
    backend = strategy.backend.name if strategy.backend else f"auto: {device.backend.name}"
    entries = [
        ("builds on", code(parent) if parent else "the root strategy"),
        ("wrapper", code(strategy.wrapper)),
        ("launcher", code(strategy.launcher)),
        ("backend", code(backend)),
    ]
    if strategy.cluster:
        entries.append(("cluster environments", ", ".join(code(c) for c in strategy.cluster)))
    if strategy.requires:
        entries.append(("needs", "; ".join(_requirement(r) for r in strategy.requires)))
    if strategy.spec.precision is not None:
        supported = strategy.supported_precisions or device.spec.precision.supported or PRECISIONS
        entries.append(("precisions", ", ".join(code(p) for p in supported)))
    names = [
        (
            code(name),
            code(", ".join(f"{k}={literal(v)}" for k, v in preset.items())),
            _lightning_cell(name, "pytorch", plugins),
            _lightning_cell(name, "fabric", plugins),
        )
        for name, preset in [(strategy.name, {}), *strategy.aliases.items()]
    ]
    return StrategyEntry(
        name=strategy.name,
        class_name=strategy.class_name,
        description=paragraphs(strategy.description),
        note=text(note),
        declared_in=code(strategy.source.path),
        facts=entries,
        names=names,
        options=_option_rows(strategy),
    )


def _requirement(requirement: object) -> str:
    module, install = getattr(requirement, "module", ""), getattr(requirement, "install", "")
    return f"{code(module)} ({text(install)})" if install else code(module)


def _precision_rows(accelerator: Accelerator) -> list[tuple[str, str, str]]:
    spec = accelerator.spec.precision
    supported = spec.supported or PRECISIONS
    default = spec.default or DEFAULT_PRECISION
    probes = dict(spec.probes or {})
    rows = []
    for mode in PRECISIONS:
        if mode not in supported:
            rows.append((code(mode), "refused", ""))
            continue
        where = f"where {call(probes[mode])} returns true" if mode in probes else "yes"
        rows.append((code(mode), where, "default" if mode == default else ""))
    return rows


def _fact_rows(
    spec_text: SpecText, node: object, skip: frozenset[str]
) -> list[tuple[str, str, str]]:
    from ...spec.yaml_loader import Node

    if not isinstance(node, Node):
        return []
    return [(code(f.key), code(f.value), text(f.note)) for f in facts(spec_text, node, skip)]


def _backend_rows(catalog: Catalog, backend: Backend) -> tuple[str, list[tuple[str, str, str]]]:
    """Where the device's backend is declared, and its facts with their notes there."""
    source = catalog.backend_sources.get(backend.name)
    if source is None:
        return "", []
    spec_text = SpecText.of(source)
    node = spec_text.backend(backend.name)
    title = f"{code(backend.name)}, declared in {code(source.path)}"
    return title, _fact_rows(spec_text, node, frozenset({"description"}))


def _usage(
    package: str,
    device: Accelerator,
    strategies: list[Strategy],
    plugins: dict[str, set[str]] | None,
) -> Usage:
    own = [s for s in strategies if s.source.path == device.source.path] or strategies
    example = next((s for s in own if s.base == "parallel"), own[0] if own else None)
    if example is None:
        return Usage("", "", "No strategy runs on this device.", "", "")
    devices = 2 if example.base == "parallel" else 1
    precision = device.spec.precision.default or DEFAULT_PRECISION
    arguments = (
        f'"{example.name}", accelerator="{device.name}", devices={devices}, '
        f'precision="{precision}"'
    )
    stratlib = f"import {package}\n\n" + _call(f"strategy = {package}.get_strategy", arguments)
    snippets, notes = {}, {}
    for framework in FRAMEWORKS:
        cell = _lightning_cell(example.name, framework, plugins)
        if cell == NOT_A_TARGET:
            notes[framework] = (
                'The project does not render the Lightning target: add `"lightning"` to '
                "`targets` under `[tool.stratgen]`."
            )
            continue
        if cell == "no":
            notes[framework] = (
                f"Lightning has no counterpart of {code(example.name)}'s wrapper for this device, "
                "so no plugin is rendered for it."
            )
            continue
        register = (
            ""
            if cell == "Lightning's own" and device.name in ACCELERATOR_NAMES
            else f"import {package}.lightning.{framework}  # registers the plugins\n"
        )
        keywords = (
            f'strategy="{example.name}", accelerator="{device.name}", devices={devices}, '
            f'precision="{precision}"'
        )
        if framework == "pytorch":
            snippets[framework] = f"import lightning.pytorch as pl\n{register}\n" + _call(
                "trainer = pl.Trainer", keywords
            )
        else:
            snippets[framework] = f"from lightning.fabric import Fabric\n{register}\n" + _call(
                "fabric = Fabric", keywords
            )
    return Usage(
        stratlib,
        snippets.get("pytorch", ""),
        notes.get("pytorch", ""),
        snippets.get("fabric", ""),
        notes.get("fabric", ""),
    )


#: The longest line of a snippet on a device page: the site's code blocks hold about 100
#: characters, a narrower page less.
SNIPPET_WIDTH = 88


def _call(callee: str, arguments: str) -> str:
    """A call on one line where it fits ``SNIPPET_WIDTH``, else its arguments on a line of
    their own, as black lays it out."""
    line = f"{callee}({arguments})"
    return line if len(line) <= SNIPPET_WIDTH else f"{callee}(\n    {arguments}\n)"


def _hardware_only(device: Accelerator, strategies: list[Strategy]) -> list[str]:
    """What the generated tests cannot show without the device itself, from what the spec
    declares: every fact that calls into the vendor's software or names its hardware."""
    spec = device.spec
    named = (
        spec.is_available,
        spec.device_count,
        spec.build_marker,
        spec.current_device,
        spec.set_device,
        spec.teardown,
        spec.step_hooks.after_backward,
        spec.step_hooks.after_optimizer_step,
        *(spec.precision.probes or {}).values(),
    )
    present_everywhere = not spec.requires and not any(named)
    if present_everywhere:
        return []
    where = (
        f"whichever device {call(spec.current_device)} returns"
        if spec.current_device
        else f"devices of type {code(spec.device_type)}"
    )
    items = [f"That tensors live on {where}, what the device computes and how fast."]
    probes = [p for p in (spec.is_available, spec.device_count) if p]
    if probes:
        items.append(
            f"What {' and '.join(call(p) for p in probes)} answer on a machine with the device."
        )
    backend = device.backend
    if backend.from_device_map:
        items.append(
            "The collective library torch maps the device type to: the tests check the "
            "reductions the spec relies on, over a stand-in."
        )
    elif backend.name != "gloo":
        native = ", ".join(backend.reduce_ops)
        casts = ", ".join(f"{a} as {b}" for a, b in backend.casts.items())
        rules = f"native reductions {native}" + (f"; {casts}" if casts else "")
        items.append(
            f"The collective library {code(backend.torch_name or backend.name)} itself: the "
            f"tests hold it to the declared rules ({rules}) over a stand-in."
        )
    gated: dict[str, list[str]] = {}
    for mode, probe in (spec.precision.probes or {}).items():
        gated.setdefault(probe, []).append(code(mode))
    for probe, modes in gated.items():
        items.append(
            f"Whether {call(probe)} is true on a given chip (it gates {', '.join(modes)})."
        )
    hooks = [h for h in (spec.step_hooks.after_backward, spec.step_hooks.after_optimizer_step) if h]
    for hook in dict.fromkeys(hooks):
        items.append(
            f"What {call(hook)} does on the device (the tests check that it runs once per step)."
        )
    for function in (spec.set_device, spec.teardown):
        if function:
            items.append(f"The effect of {call(function)} on the device.")
    if any(s.wrapper == "deepspeed" for s in strategies):
        name = spec.deepspeed_accelerator or spec.device_type or device.name
        items.append(f"DeepSpeed's accelerator class for the device (`DS_ACCELERATOR={name}`).")
    return items


def product_of(device: Accelerator) -> str:
    """What the device's page is titled: its product, else its accelerator's name."""
    return device.spec.product or device.name


def _hardware_name(device: Accelerator) -> str:
    """The hardware, as the status names it: the product after the page title's colon."""
    product = device.spec.product or ""
    return product.split(":", 1)[-1].strip() or "the device"


def status_of(
    device: Accelerator, record: Record | None, everywhere: bool = False
) -> Status | None:
    """The device's rows of the verification record; None without a record. A device that is
    on every machine (``everywhere``: CPU processes) runs on its hardware wherever its tests
    run, and waits for no report."""
    if record is None:
        return None
    rows = []
    for entry in record.of(device.name):
        if entry.on == "hardware":
            when = f"{text(entry.date)}, commit {code(entry.commit)}: {code(entry.report)}"
        else:
            when = text(entry.when)
        rows.append((entry.label, text(entry.what), when))
    reported = everywhere or bool(record.hardware(device.name))
    if not reported:
        rows.append((KINDS["hardware"], "no report yet", ""))
    return Status(code(record.path), rows, reported, text(_hardware_name(device)))


def status_summary(device: Accelerator, record: Record | None, everywhere: bool = False) -> str:
    """The device's status in a few words, for the devices index."""
    if record is None:
        return ""
    kinds = [k for k in KINDS if k != "hardware" and any(e.on == k for e in record.of(device.name))]
    ran = ", ".join(SHORT[k] for k in kinds)
    reports = record.hardware(device.name)
    if everywhere and not reports:
        return ran
    hardware = f"hardware {reports[0].date}" if reports else "no hardware report"
    return f"{ran}; {hardware}" if ran else hardware


def device_page(
    catalog: Catalog,
    selection: Selection,
    device: Accelerator,
    package: str,
    tests_dir: str,
    folder: str,
    plugins: dict[str, set[str]] | None,
    record: Record | None = None,
) -> DevicePage:
    source = device.source
    spec_text = SpecText.of(source)
    strategies = _runs_on(catalog, selection, device.name)
    node = spec_text.entry("accelerator", device.name)
    skip = frozenset({"name", "description", "class_name", "product"})
    backend_title, backend_rows = _backend_rows(catalog, device.backend)
    hardware_only = _hardware_only(device, strategies)
    install = [text(install_text(device))]
    for strategy in strategies:
        extra = [r for r in strategy.requires if r not in device.spec.requires]
        if extra:
            needs = "; ".join(_requirement(r) for r in extra)
            install.append(f"for {code(strategy.name)}: {needs}")
    if plugins is not None:
        install.append(f"for Lightning's Trainer and Fabric: {code(REQUIREMENT)}")
    return DevicePage(
        path=f"{folder}/{device.name}.md",
        name=device.name,
        title=text(product_of(device)),
        summary=text(first_sentence(device.spec.description) or device.class_name),
        description=paragraphs(device.spec.description),
        spec_path=code(source.path),
        spec_notes=paragraphs(spec_text.header()),
        tests_path=code(f"{tests_dir}/{test_module_name(source)}"),
        package=package,
        install=install,
        usage=_usage(package, device, strategies, plugins),
        strategies=[_strategy_entry(catalog, s, device, plugins) for s in strategies],
        precisions=_precision_rows(device),
        declared=_fact_rows(spec_text, node, skip),
        backend_title=backend_title,
        backend=backend_rows,
        hardware_only=hardware_only,
        status=status_of(device, record, everywhere=not hardware_only),
    )


def _plugins(
    catalog: Catalog, selection: Selection, targets: Iterable[str]
) -> dict[str, set[str]] | None:
    """Registry names the Lightning target renders a plugin for, by framework; None without
    that target."""
    if "lightning" not in targets:
        return None
    return {
        framework: {
            name
            for plugin in lightning_plugins.select(
                catalog, selection.strategies, framework
            ).strategies
            for name, _ in plugin.names
        }
        for framework in FRAMEWORKS
    }


def _lightning_summary(
    catalog: Catalog,
    selection: Selection,
    device: Accelerator,
    plugins: dict[str, set[str]] | None,
) -> str:
    """How Lightning's Trainer and Fabric serve the device, in a few words: Lightning's own
    accelerator, plugins rendered for it, both, or neither."""
    if plugins is None:
        return NOT_A_TARGET
    names = [
        name
        for strategy in _runs_on(catalog, selection, device.name)
        for name in (strategy.name, *strategy.aliases)
    ]
    said = {}
    for framework in FRAMEWORKS:
        own = device.name in ACCELERATOR_NAMES
        rendered = any(name in plugins[framework] for name in names)
        said[framework] = (
            "Lightning's own and plugins"
            if own and rendered
            else "Lightning's own" if own else "plugins" if rendered else "no"
        )
    trainer, fabric = said["pytorch"], said["fabric"]
    return trainer if trainer == fabric else f"Trainer: {trainer}; Fabric: {fabric}"


def render_pages(
    catalog: Catalog,
    selection: Selection,
    renderer: Renderer,
    package: str,
    tests_dir: str,
    folder: str,
    targets: Iterable[str],
    record: Record | None = None,
) -> list[RenderedFile]:
    """The device pages and their index; a broken template is a clean error, and so is a
    device the project's verification record (``record``) says nothing of."""
    targets = tuple(targets)
    plugins = _plugins(catalog, selection, targets)
    devices = paged_accelerators(catalog, selection)
    for device in devices:
        if f"{device.name}.md" == INDEX:
            raise StratgenError(
                f"{device.source.path}: a device named 'index' would overwrite the index of "
                f"{folder}/; give the accelerator another name"
            )
    if record is not None:
        record.require(d.name for d in devices)
    try:
        page_template = renderer.template("docs/device.md.j2")
        files = []
        for device in devices:
            page = device_page(
                catalog, selection, device, package, tests_dir, folder, plugins, record
            )
            text_ = page_template.render(
                header=header(_page_sources(device.source.path, record), markup="markdown"),
                page=page,
            )
            files.append(RenderedFile(page.path, tidy(text_), False))
        rows = device_rows(
            catalog, selection.strategies, [d.name for d in devices], plugins is not None
        )
        specs = ", ".join(sorted({d.source.path for d in devices})) or "the specs"
        index = renderer.template("docs/index.md.j2").render(
            header=header(_page_sources(specs, record), markup="markdown"),
            devices=[
                (
                    f"[{code(device.name)}]({device.name}.md)",
                    text(_hardware_name(device)) if device.spec.product else "",
                    text(install_text(device)),
                    text(
                        status_summary(
                            device,
                            record,
                            not _hardware_only(device, _runs_on(catalog, selection, device.name)),
                        )
                    ),
                )
                for device in devices
            ],
            frameworks=[
                (
                    f"[{code(row.device)}]({row.device}.md)",
                    text(row.stratlib),
                    text(_lightning_summary(catalog, selection, device, plugins)),
                    text(row.deepspeed),
                    text(row.ray),
                    text(row.precisions),
                )
                for device, row in zip(devices, rows, strict=True)
            ],
            package=package,
            record=code(record.path) if record is not None else "",
            generic="generic" in {d.name for d in devices},
        )
        files.append(RenderedFile(f"{folder}/{INDEX}", tidy(index), False))
        return files
    except jinja2.TemplateError as exc:
        raise StratgenError(template_problem(exc)) from None


def _page_sources(specs: str, record: Record | None) -> str:
    """What a page is made from, as its header names it: the specs, and the record."""
    return f"{specs} and {record.path}" if record is not None else specs
