"""Lightning's sharding strategies on FSDP2 ('fsdp'), on 4 real CPU ranks over gloo: as one
node of 4, and as 2 "nodes" of 2 started once per node, the way a cluster starts them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from stratcore.exceptions import MisconfigurationError

import stratlib

from .support import SCRIPTS, assert_close, run_job, train_alone

#: The module's job (its module-scoped fixture) runs once: its tests share one pytest-xdist worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("hsdp")]
STEPS = 3


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hsdp_script", SCRIPTS / "hsdp.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference() -> dict[str, Any]:
    hsdp = script()
    return train_alone(hsdp.build_model(), *hsdp.batch(), steps=STEPS)


def run(
    tmp_path: Path, cases: list[dict[str, Any]], devices: int, nodes: int
) -> list[dict[str, Any]]:
    args = ["--devices", str(devices), "--num-nodes", str(nodes), "--cases", json.dumps(cases)]
    result: list[dict[str, Any]] = run_job(
        "hsdp.py", tmp_path, *args, "--steps", str(STEPS), nodes=nodes
    )
    return result


@pytest.fixture(scope="module")
def one_node(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    cases = [
        {"sharding_strategy": "FULL_SHARD"},
        {"sharding_strategy": "SHARD_GRAD_OP"},
        {"sharding_strategy": "NO_SHARD"},
        {"sharding_strategy": "HYBRID_SHARD", "device_mesh": [2, 2]},
        {"sharding_strategy": "_HYBRID_SHARD_ZERO2", "device_mesh": [2, 2]},
    ]
    results = run(tmp_path_factory.mktemp("hsdp"), cases, devices=4, nodes=1)
    return {case["sharding_strategy"]: result for case, result in zip(cases, results, strict=True)}


# (mesh shape, placements of a parameter, rows of a 16-row weight held per rank, whether
# gathered parameters are kept after forward), from what each strategy means on 4 ranks.
LAYOUTS = {
    "FULL_SHARD": ([4], ["Shard(dim=0)"], 4, False),
    "SHARD_GRAD_OP": ([4], ["Shard(dim=0)"], 4, True),
    "NO_SHARD": ([4, 1], ["Replicate()", "Shard(dim=0)"], 16, True),
    "HYBRID_SHARD": ([2, 2], ["Replicate()", "Shard(dim=0)"], 8, False),
    "_HYBRID_SHARD_ZERO2": ([2, 2], ["Replicate()", "Shard(dim=0)"], 8, True),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_sharding_strategy_layout_and_training(one_node: dict[str, Any], name: str) -> None:
    result = one_node[name]
    shape, placements, rows, kept = LAYOUTS[name]
    assert result["mesh_shape"] == shape
    assert result["placements"] == placements
    assert result["local_rows"] == rows
    assert result["kept_after_forward"] is kept
    assert result["sampler"] == {"num_replicas": 4, "rank": 0}
    assert_close(result["params"], reference())
    assert result["restored"], "load_checkpoint did not restore the saved state"


def test_hybrid_sharding_on_two_nodes_takes_the_mesh_from_the_nodes(tmp_path: Path) -> None:
    (result,) = run(tmp_path, [{"sharding_strategy": "HYBRID_SHARD"}], devices=2, nodes=2)
    assert result["mesh_shape"] == [2, 2]
    assert result["mesh_dims"] == ["replicate", "shard"]
    assert result["placements"] == ["Replicate()", "Shard(dim=0)"]
    assert result["local_rows"] == 8
    assert result["sampler"] == {"num_replicas": 4, "rank": 0}
    assert_close(result["params"], reference())
    assert result["restored"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sharding_strategy": "FULL_SHARD", "device_mesh": (2, 2)}, "use it with sharding_strategy='HYBRID_SHARD'"),
        ({"sharding_strategy": "HYBRID_SHARD", "device_mesh": (2,)}, "give (replicate, shard) sizes"),
        ({"sharding_strategy": "HYBRID_SHARD", "device_mesh": (0, 4)}, "give (replicate, shard) sizes"),
        ({"sharding_strategy": "ZERO3"}, "sharding_strategy='ZERO3' is not allowed"),
    ],
)  # fmt: skip
def test_bad_sharding_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(
        MisconfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")
    ):
        stratlib.get_strategy("fsdp", accelerator="cpu", devices=4, **options)


def test_a_mesh_that_does_not_cover_the_world_is_refused() -> None:
    strategy: Any = stratlib.get_strategy(
        "fsdp", accelerator="cpu", devices=4, sharding_strategy="HYBRID_SHARD", device_mesh=(2, 3)
    )
    strategy.configure_ranks()
    with pytest.raises(MisconfigurationError, match="must multiply to the world size"):
        strategy.sharding_layout()
