"""'model_parallel': a transformer block with column- and row-parallel linears on 4 CPU ranks
(data_parallel_size 2 x tensor_parallel_size 2, gloo) against one process on the whole batch;
the mesh, the sampler arguments and collectives over each dimension; sharded and full
checkpoints, saved and resumed."""

from __future__ import annotations

import importlib.util
from types import ModuleType
from typing import Any

import pytest
from stratcore.exceptions import MisconfigurationError

import stratlib

from .support import SCRIPTS, assert_close, run_job, train_alone


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "model_parallel_script", SCRIPTS / "model_parallel.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MP = script()


def reference(steps: int) -> dict[str, Any]:
    return train_alone(MP.build_model(), *MP.batch(), steps=steps)


#: The module's job (its module-scoped fixture) runs once: its tests share one pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("model-parallel")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_job("model_parallel.py", tmp_path_factory.mktemp("model_parallel"))


@pytest.mark.slow
def test_two_by_two_mesh_trains_like_one_process(report: dict[str, Any]) -> None:
    result = report["train"]
    assert result["mesh"] == {"shape": [2, 2], "dims": ["data_parallel", "tensor_parallel"]}
    # Ranks 0, 1 form the first tensor-parallel pair and read the first half of the batch.
    assert result["samplers"] == [[2, 0], [2, 0], [2, 1], [2, 1]]
    # w1 (64 x 16) is split by rows over the pair (column-parallel), then over the replicas.
    assert result["w1_placements"][1] == "Shard(dim=0)"
    assert result["w1_local_shape"] == [16, 16]
    assert_close(result["params"], reference(MP.STEPS), atol=1e-5)


@pytest.mark.slow
def test_collectives_over_each_dimension_of_the_mesh(report: dict[str, Any]) -> None:
    result = report["train"]
    assert result["sum_world"] == 4
    assert result["sum_tensor_parallel"] == 2 and result["sum_data_parallel"] == 2
    assert result["gather_tensor_parallel"] == [0, 1]  # rank 0's pair
    assert result["gather_data_parallel"] == [0, 2]  # rank 0 and its replica


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "layout"),
    [
        ("sharded", {"is_dir": True, "is_file": False}),
        ("full", {"is_dir": False, "is_file": True}),
    ],
)
def test_checkpoint_saves_and_resumes(
    report: dict[str, Any], kind: str, layout: dict[str, bool]
) -> None:
    assert report[kind]["save"] == layout
    resumed = report[kind]["resume"]
    assert resumed["remaining"] == {"step": MP.SAVED}
    # The momentum came back too: the resumed run ends where uninterrupted training does.
    assert_close(resumed["params"], reference(MP.STEPS), atol=1e-5)
    assert resumed["whole_keys"] == ["model", "optimizer", "step"]
    # Loaded without a model to fill, the checkpoint comes back as full tensors (a sharded
    # one in the checkpoint's order of keys).
    assert_close(resumed["whole_model"], reference(MP.SAVED), atol=1e-5, ordered=False)


def test_the_reference_moves() -> None:
    start, trained = reference(0), reference(MP.STEPS)
    assert any((start[k] - trained[k]).abs().max() > 1e-3 for k in start)


def sizes(nodes: int, devices: int, **options: Any) -> tuple[int, int]:
    strategy: Any = stratlib.get_strategy(
        "model_parallel", accelerator="cpu", devices=devices, num_nodes=nodes, **options
    )
    strategy.configure_ranks()
    return strategy.parallel_sizes()


def test_auto_sizes_as_lightning_resolves_them() -> None:
    with_fn = {"parallelize_fn": MP.parallelize}
    assert sizes(2, 4, **with_fn) == (2, 4)  # nodes x processes per node
    assert sizes(1, 4, **with_fn) == (1, 4)
    assert sizes(1, 4, data_parallel_size=2, tensor_parallel_size=2, **with_fn) == (2, 2)
    # Without a parallelize_fn nothing is split over tensors: every process is a replica.
    assert sizes(1, 4) == (4, 1)
    assert sizes(1, 4, tensor_parallel_size=2) == (2, 2)


def test_sizes_that_do_not_cover_the_world_are_refused() -> None:
    with pytest.raises(MisconfigurationError, match="must multiply to the world size"):
        sizes(1, 4, parallelize_fn=MP.parallelize, data_parallel_size=2)
    with pytest.raises(MisconfigurationError, match="must multiply to the world size"):
        sizes(1, 4, data_parallel_size=3, tensor_parallel_size=1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"data_parallel_size": 0}, "data_parallel_size=0 is not allowed"),
        ({"tensor_parallel_size": "two"}, "tensor_parallel_size='two' is not allowed"),
        ({"parallelize_fn": "parallelize"}, "parallelize_fn='parallelize' is not callable"),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(MisconfigurationError, match=message):
        stratlib.get_strategy("model_parallel", accelerator="cpu", devices=4, **options)
