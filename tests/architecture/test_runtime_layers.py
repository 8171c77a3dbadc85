"""The runtime's layers import one way, and its engine families one another only through a
documented seam.

Every module of ``runtime/stratcore`` belongs to one layer of ``LAYERS``; it imports modules of
its own layer and of the layers before it, never of a later one (counting imports inside
functions, not those under ``if TYPE_CHECKING:``, which only annotate). ARCHITECTURE.md's
runtime section describes the same layers, a paragraph each.

Inside ``wrappers``, each engine is a module or a folder of its own (``wrappers.fsdp``,
``wrappers.deepspeed``, ...); a family imports no other family but for the seams of
``FAMILY_SEAMS``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.import_graph import Layers, find_cycle, import_graph, layer_violations

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "runtime" / "stratcore"

#: The runtime's layers, earliest first: (name, the modules and packages it is made of).
LAYERS: Layers = [
    # What the spec language and every layer below read: no torch.
    (
        "facts",
        [
            "stratcore",
            "stratcore.version",
            "stratcore.exceptions",
            "stratcore.wording",
            "stratcore.file_modes",
            "stratcore.contract",
            "stratcore.imports",
        ],
    ),
    # The parts a strategy is made of, each on its own: process groups and collectives, the
    # rendezvous store, precision plugins, cluster environments, accelerators, batch-norm
    # synchronisation, optimizers following a move, the registry, checkpoint files.
    (
        "parts",
        [
            "stratcore.process_group",
            "stratcore.collectives",
            "stratcore.rendezvous",
            "stratcore.precision",
            "stratcore.environment",
            "stratcore.accelerator",
            "stratcore.layer_sync",
            "stratcore.parameter_moves",
            "stratcore.registry",
            "stratcore.checkpoints",
        ],
    ),
    # How the ranks of a job start.
    ("launchers", ["stratcore.launchers"]),
    # The strategy bases, and the engines that wrap a model, a family each.
    (
        "strategies",
        [
            "stratcore.strategy",
            "stratcore.single_device",
            "stratcore.parallel",
            "stratcore.wrappers",
        ],
    ),
    # What users call: get_strategy and list_strategies, Ray Train's configuration.
    ("entry points", ["stratcore.factory", "stratcore.ray"]),
    # The Lightning target's adapters (the only modules that import Lightning, with the
    # Lightning part of the test support).
    ("lightning", ["stratcore.lightning"]),
    # What generated tests and the benchmarks import.
    ("testing", ["stratcore.testing"]),
]

#: Imports from one engine family into another that the architecture allows, each for its
#: reason.
FAMILY_SEAMS: dict[str, dict[str, str]] = {
    # fairscale's FullyShardedDataParallel takes torch's FSDP precision plugin.
    "fairscale": {"stratcore.wrappers.fsdp": "the FSDP precision plugin"},
    # model_parallel shards with FSDP2 on a mesh, as the fsdp strategy does.
    "model_parallel": {"stratcore.wrappers.fsdp": "fully_shard, the mesh, checkpointing"},
}


def family_of(module: str) -> str | None:
    """The engine family ``module`` is in ('fsdp', 'deepspeed', 'ddp', ...), or None."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["stratcore", "wrappers"] else None


def violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import of ``graph`` that the layers or the families' seams forbid, as a sentence."""
    return layer_violations(graph, LAYERS, family_of, FAMILY_SEAMS, "family", "FAMILY_SEAMS")


def test_the_check_finds_a_late_import_and_one_across_families() -> None:
    graph = {
        "stratcore.collectives": {"stratcore.wrappers.deepspeed.strategy"},
        "stratcore.wrappers.deepspeed.strategy": {"stratcore.parallel"},
        "stratcore.parallel": set(),
        "stratcore.wrappers.horovod": {"stratcore.wrappers.ddp"},
        "stratcore.wrappers.ddp": set(),
        "stratcore.wrappers.model_parallel.strategy": {"stratcore.wrappers.fsdp.mesh"},
        "stratcore.wrappers.fsdp.mesh": set(),
        "elsewhere": set(),
    }
    assert violations(graph) == [
        "elsewhere belongs to no layer (add it to LAYERS)",
        "stratcore.collectives (parts) imports stratcore.wrappers.deepspeed.strategy "
        "(strategies), a later layer",
        "stratcore.wrappers.horovod (family horovod) imports stratcore.wrappers.ddp "
        "(family ddp), outside FAMILY_SEAMS",
    ]


def test_the_runtime_has_no_import_cycle() -> None:
    graph = import_graph(PACKAGE)
    assert "stratcore.wrappers.fsdp.strategy" in graph and graph["stratcore.factory"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_each_layer_imports_only_earlier_layers_and_families_only_their_seams() -> None:
    found = violations(import_graph(PACKAGE))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("family", sorted(FAMILY_SEAMS))
def test_every_seam_is_in_use(family: str) -> None:
    """A seam no module uses any more is taken out of FAMILY_SEAMS."""
    graph = import_graph(PACKAGE)
    used = {
        other
        for module, imported in graph.items()
        if family_of(module) == family
        for other in imported
    }
    for seam in FAMILY_SEAMS[family]:
        assert any(u == seam or u.startswith(seam + ".") for u in used), seam
