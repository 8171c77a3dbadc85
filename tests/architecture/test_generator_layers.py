"""The generator's stages import one way, and its targets one another only through a documented
seam.

Every module of ``generator/stratgen`` belongs to one layer of ``LAYERS``; it imports modules
of its own layer and of the layers before it, never of a later one (counting imports inside
functions, not those under ``if TYPE_CHECKING:``, which only annotate). The order is the one in
which the stages may know one another, not the order they run in: ``project`` runs load
(``spec``), ``resolve``, render (``targets``, with ``codegen``'s tools), format
(``codegen.formatting``) and write (``output``), and the commands drive ``project``.

Inside ``targets``, each target is a folder; a target's modules import no other target's, but
for the seams of ``TARGET_SEAMS``. ``stratgen.targets.rendering``, which renders the targets a
project asks for, is in no target's folder and may import them all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.import_graph import Layers, find_cycle, import_graph, layer_violations

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "generator" / "stratgen"

#: The generator's layers, earliest first: (name, the modules and packages it is made of).
LAYERS: Layers = [
    # The package's own module: its version, which anything may name.
    ("package", ["stratgen"]),
    # Load and parse: YAML with positions, the typed model, the JSON Schema; user errors.
    ("spec", ["stratgen.spec"]),
    # Extends and references, checks, the runtime's facts, what a package selects.
    ("resolve", ["stratgen.resolve"]),
    # Python source from values, jinja2, black: tools of every target.
    ("codegen", ["stratgen.codegen"]),
    # What a project generates: stratlib, lightning, deepspeed, docs.
    ("targets", ["stratgen.targets"]),
    # Writing the planned files, the manifest, drift.
    ("output", ["stratgen.output"]),
    # The pipeline: a project's configuration and every stage in order.
    ("project", ["stratgen.project"]),
    # What each command does.
    ("commands", ["stratgen.commands"]),
    # The command line and ``python -m stratgen``.
    ("entry points", ["stratgen.cli", "stratgen.__main__"]),
]

#: Imports from one target into another that the architecture allows, each for its reason.
TARGET_SEAMS: dict[str, dict[str, str]] = {
    "docs": {
        # A device's page and the devices table say which strategies the Lightning target
        # makes plugins of, for the Trainer and for Fabric (``select``) ...
        "stratgen.targets.lightning.plugins": "which strategies get Lightning plugins",
        # ... and which DeepSpeed accelerator class the deepspeed target generates for the
        # device (``class_name``, ``rendered``).
        "stratgen.targets.deepspeed.accelerators": "the DeepSpeed accelerator of a device",
    },
}


def target_of(module: str) -> str | None:
    """The target folder ``module`` is in ('stratlib', 'docs', ...), or None."""
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[:2] == ["stratgen", "targets"] else None


def violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import of ``graph`` that the layers or the targets' seams forbid, as a sentence."""
    return layer_violations(graph, LAYERS, target_of, TARGET_SEAMS, "target", "TARGET_SEAMS")


def test_the_check_finds_a_late_import_and_one_across_targets() -> None:
    graph = {
        "stratgen.spec.model": {"stratgen.resolve.catalog"},
        "stratgen.resolve.catalog": set(),
        "stratgen.targets.lightning.plugins": {"stratgen.targets.stratlib.package"},
        "stratgen.targets.stratlib.package": set(),
        "stratgen.targets.docs.device_table": {"stratgen.targets.deepspeed.accelerators"},
        "stratgen.targets.deepspeed.accelerators": set(),
        "stratgen.targets.rendering": {"stratgen.targets.docs.device_table"},
        "stratgen.somewhere": set(),
    }
    assert violations(graph) == [
        "stratgen.somewhere belongs to no layer (add it to LAYERS)",
        "stratgen.spec.model (spec) imports stratgen.resolve.catalog (resolve), a later layer",
        "stratgen.targets.lightning.plugins (target lightning) imports "
        "stratgen.targets.stratlib.package (target stratlib), outside TARGET_SEAMS",
    ]


def test_the_generator_has_no_import_cycle() -> None:
    graph = import_graph(PACKAGE)
    assert "stratgen.resolve.catalog" in graph and graph["stratgen.resolve.resolver"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_each_stage_imports_only_earlier_stages_and_targets_only_their_seams() -> None:
    found = violations(import_graph(PACKAGE))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("target", sorted(TARGET_SEAMS))
def test_every_seam_is_in_use(target: str) -> None:
    """A seam no module uses any more is taken out of TARGET_SEAMS."""
    graph = import_graph(PACKAGE)
    used = {
        other
        for module, imported in graph.items()
        if target_of(module) == target
        for other in imported
    }
    assert set(TARGET_SEAMS[target]) <= used
