"""The named dimensions of 'model_parallel' (pp, dp_replicate, dp_shard, cp, tp): sizes resolved
from the options, and on 4 CPU ranks (gloo) hybrid sharding, context parallelism's data and
gradient layout and tensor parallelism against one process on the whole batch."""

from __future__ import annotations

import importlib.util
import itertools
import math
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from stratcore.exceptions import MisconfigurationError
from stratcore.wrappers.model_parallel.parallel_dims import NAMED_DIMS, named_dims
from torch import nn

import stratlib

from .support import SCRIPTS, assert_close, run_job


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mesh_dims_script", SCRIPTS / "mesh_dims.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MD = script()


def reference(layout: str) -> tuple[dict[str, torch.Tensor], list[float]]:
    """Weights after STEPS Adam steps on the whole batch in one process, and the losses."""
    model = MD.build_model(layout)
    optimizer = torch.optim.Adam(model.parameters(), lr=MD.LR)
    x, y = MD.batch()
    losses = []
    for _ in range(MD.STEPS):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, losses


def expected_sizes(layout: str) -> dict[str, int]:
    """Every dimension's size, from what the layout's options mean."""
    sizes = {name: MD.LAYOUTS[layout].get(name, 1) for name in NAMED_DIMS}
    replicate, shard, cp = sizes["dp_replicate"], sizes["dp_shard"], sizes["cp"]
    return {**sizes, "dp": replicate * shard, "fsdp": shard * cp, "dp_cp": replicate * shard * cp}


#: The module's job (its module-scoped fixture) runs once: its tests share one pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("mesh-dims")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    result: dict[str, Any] = run_job("mesh_dims.py", tmp_path_factory.mktemp("mesh_dims"))
    return result


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(MD.LAYOUTS))
def test_each_layout_trains_like_one_process(report: dict[str, Any], layout: str) -> None:
    result = report[layout]
    sizes = expected_sizes(layout)
    assert result["mesh"] == {"shape": [sizes[n] for n in NAMED_DIMS], "dims": list(NAMED_DIMS)}
    assert result["sizes"] == sizes  # a sum of ones over each dimension's group
    weights, losses = reference(layout)
    assert_close(result["params"], weights, atol=1e-5)
    assert result["losses"] == pytest.approx(losses, abs=1e-5)


@pytest.mark.slow
def test_hybrid_sharding_replicates_across_and_shards_within(report: dict[str, Any]) -> None:
    result = report["hsdp"]
    assert result["fsdp_mesh"] == ["dp_replicate", "fsdp"]
    assert result["placements"] == ["Replicate()", "Shard(dim=0)"]
    # Every process is a data rank of its own.
    assert result["samplers"] == [[4, rank] for rank in range(4)]


@pytest.mark.slow
def test_context_parallel_processes_read_the_same_samples_and_share_gradients(
    report: dict[str, Any],
) -> None:
    result = report["cp"]
    # cp is the inner dimension: ranks 0 and 1 split the same sequences.
    assert result["samplers"] == [[2, rank // 2] for rank in range(4)]
    # Parameters are sharded over dp_shard x cp, so gradients average over all four.
    assert result["fsdp_mesh"] == ["fsdp"] and result["placements"] == ["Shard(dim=0)"]
    assert "cannot run attention on 'cpu' devices" in result["context_parallel_error"]


@pytest.mark.slow
def test_tensor_parallel_pairs_read_the_same_samples(report: dict[str, Any]) -> None:
    assert report["tp"]["samplers"] == [[2, rank // 2] for rank in range(4)]


# --- sizes, in this process -------------------------------------------------------------------

sizes_strategy = st.fixed_dictionaries({name: st.integers(1, 3) for name in NAMED_DIMS})


@given(sizes_strategy)
def test_given_sizes_are_kept_and_must_cover_the_world(sizes: dict[str, int]) -> None:
    world = math.prod(sizes.values())
    assert named_dims(sizes, world, 1).sizes == tuple(sizes[n] for n in NAMED_DIMS)
    with pytest.raises(MisconfigurationError, match="must multiply to the world size"):
        named_dims(sizes, world + 1, 1)


@given(sizes_strategy)
def test_dp_shard_takes_the_processes_the_others_leave(sizes: dict[str, int]) -> None:
    world = math.prod(sizes.values())
    for shard in (None, "auto"):
        dims = named_dims({**sizes, "dp_shard": shard}, world, 1)
        assert dims.size("dp_shard") == sizes["dp_shard"]


@given(sizes_strategy)
def test_coordinates_place_every_process_once_and_joined_dimensions_follow_their_parts(
    sizes: dict[str, int],
) -> None:
    world = math.prod(sizes.values())
    dims = named_dims(sizes, world, 1)
    coordinates = [tuple(dims.coordinate(r, n) for n in NAMED_DIMS) for r in range(world)]
    # Every point of the grid is one process, in row-major order (as init_device_mesh).
    assert coordinates == list(itertools.product(*(range(sizes[n]) for n in NAMED_DIMS)))
    for joined, parts in dims.joined.items():
        seen = {}
        for rank in range(world):
            key = tuple(dims.coordinate(rank, part) for part in parts)
            # Two processes share a joined coordinate exactly when they share its parts'.
            assert seen.setdefault(key, dims.coordinate(rank, joined)) == dims.coordinate(
                rank, joined
            )
        assert sorted(set(seen.values())) == list(range(dims.size(joined)))


def test_dp_replicate_auto_is_the_nodes_when_dp_shard_is_auto_too() -> None:
    assert named_dims({"dp_replicate": "auto"}, 8, 2).sizes == (1, 2, 4, 1, 1)
    assert named_dims({"dp_replicate": "auto", "dp_shard": 2}, 8, 2).sizes == (1, 4, 2, 1, 1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"pp": 3}, "pp=3 x dp_replicate=1 x cp=1 x tp=1 is 3 processes, which does not divide the job's 4"),
        ({"tp": 2, "dp_shard": 3}, "pp=1 x dp_replicate=1 x dp_shard=3 x cp=1 x tp=2 is 6 processes, but the job has 4"),
        ({"cp": 0}, "cp=0 is not allowed; give a positive number of processes"),
        ({"dp_shard": "half"}, "dp_shard='half' is not allowed; give a positive number of processes or 'auto'"),
    ],
)  # fmt: skip
def test_sizes_that_cannot_work_are_refused_in_one_line(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(MisconfigurationError, match=message) as error:
        named_dims(options, 4, 1)
    assert "\n" not in str(error.value)


def sampler_of(rank: int, **options: Any) -> dict[str, int]:
    strategy: Any = stratlib.get_strategy("model_parallel", accelerator="cpu", devices=8, **options)
    strategy.cluster_environment.set_global_rank(rank)
    return dict(strategy.distributed_sampler_kwargs)


def test_sampler_arguments_count_the_data_dimensions_only_before_launch() -> None:
    # pp=2 x dp_replicate=2 x dp_shard=2: rank 5 is pipeline rank 1, replica 0, shard 1.
    assert sampler_of(5, pp=2, dp_replicate=2, pipeline_split=["x"]) == {
        "num_replicas": 4,
        "rank": 1,
    }
    # tp=2 x cp=2 x dp_shard=2: ranks 0-3 share data rank 0.
    assert [sampler_of(r, tp=2, cp=2)["rank"] for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_a_default_layout_with_tensor_parallelism_needs_a_parallelize_fn() -> None:
    strategy: Any = stratlib.get_strategy("model_parallel", accelerator="cpu", devices=4, tp=2)
    with pytest.raises(MisconfigurationError, match="tp=2 needs a parallelize_fn"):
        strategy.parallelize(nn.Linear(2, 2))


def test_context_parallel_changes_nothing_without_a_cp_dimension() -> None:
    from stratcore.wrappers.model_parallel.context_parallel import context_parallel

    x = torch.arange(8.0).view(1, 8)
    with context_parallel(None, torch.device("cpu"), [x], seq_dims=[1]):
        assert x.shape == (1, 8)
    with (
        pytest.raises(MisconfigurationError, match="2 buffers and 1 seq_dims"),
        context_parallel(None, torch.device("cpu"), [x, x], seq_dims=[1]),
    ):
        pass
