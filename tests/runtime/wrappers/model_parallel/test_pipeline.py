"""Pipeline parallelism with 'model_parallel': pp=2 x dp_shard=2 on 4 CPU ranks (gloo), with
the 1F1B, GPipe and interleaved schedules, against one process training on the whole batch;
distributed and full checkpoints saved and resumed; and how models are cut into stages."""

from __future__ import annotations

import importlib.util
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from stratcore.exceptions import MisconfigurationError
from stratcore.wrappers.model_parallel.pipeline import (
    pipeline_units,
    split_units,
    stage_count,
    stage_module,
)
from torch import nn

import stratlib

from .support import SCRIPTS, assert_close, run_job


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pipeline_script", SCRIPTS / "pipeline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PP = script()
SCHEDULES = ["1F1B", "GPipe", "Interleaved1F1B"]


def reference(steps: int) -> tuple[nn.Module, list[float]]:
    """The model after ``steps`` Adam steps on the whole batch in one process, and the loss
    of each step."""
    model = PP.build_model()
    optimizer = PP.make_optimizer(model)
    x, y = PP.batch()
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model, losses


def weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


#: The module's job (its module-scoped fixture) runs once: its tests share one pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("pipeline")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    result: dict[str, Any] = run_job("pipeline.py", tmp_path_factory.mktemp("pipeline"))
    return result


@pytest.mark.slow
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_pipeline_trains_like_one_process(report: dict[str, Any], schedule: str) -> None:
    result = report[schedule]
    model, losses = reference(PP.STEPS)
    assert_close(result["params"], weights(model), atol=1e-5)
    assert result["losses"] == pytest.approx(losses, abs=1e-5)
    # Rank 0 holds the first stage (and, interleaved, the third): the embedding and the
    # first layers, under the model's own names.
    layers = ["layers.0", "layers.2"] if schedule == "Interleaved1F1B" else ["layers.0", "layers.1"]
    expected = sorted(
        name
        for name, _ in PP.build_model().named_parameters()
        if name.startswith("embed.") or any(name.startswith(f"{layer}.") for layer in layers)
    )
    assert result["local_parameters"] == expected


@pytest.mark.slow
def test_mesh_sampler_and_collectives_of_a_pipeline(report: dict[str, Any]) -> None:
    result = report["1F1B"]
    assert result["mesh"] == {
        "shape": [2, 1, 2, 1, 1],
        "dims": ["pp", "dp_replicate", "dp_shard", "cp", "tp"],
    }
    # Ranks fill the mesh row-major: rank r is pipeline rank r // 2 and data rank r % 2, and
    # the two stages of one data rank read the same samples.
    assert result["samplers"] == [[2, rank % 2] for rank in range(4)]
    assert result["gather_pp"] == [0, 2]  # rank 0 and the rank holding its second stage
    assert result["gather_dp"] == [0, 1]
    assert result["sum_fsdp"] == 2


@pytest.mark.slow
def test_calling_the_model_runs_the_forward_passes_of_the_pipeline(
    report: dict[str, Any],
) -> None:
    outputs = torch.tensor(report["1F1B"]["outputs"])
    model, _ = reference(PP.STEPS)
    x, _ = PP.batch()
    with torch.no_grad():
        expected = model(x)
    half = PP.BATCH // 2
    assert outputs[:2].isnan().all(), "the first stage has no output"
    for rank in (2, 3):  # the last stage, data ranks 0 and 1
        rows = expected[(rank % 2) * half : (rank % 2 + 1) * half]
        assert (outputs[rank] - rows).abs().max() <= 1e-5


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "layout"),
    [
        ("sharded", {"is_dir": True, "is_file": False}),
        ("full", {"is_dir": False, "is_file": True}),
    ],
)
def test_pipeline_checkpoint_saves_and_resumes(
    report: dict[str, Any], kind: str, layout: dict[str, bool]
) -> None:
    assert report[kind]["save"] == layout
    resumed = report[kind]["resume"]
    assert resumed["remaining"] == {"step": PP.SAVED}
    # Adam's moments came back too: the resumed job ends where uninterrupted training does.
    assert_close(resumed["params"], weights(reference(PP.STEPS)[0]), atol=1e-5)
    assert resumed["whole_keys"] == ["model", "optimizer", "step"]
    # Loaded whole, the checkpoint is the model's own state dict, every stage's part of it.
    assert_close(resumed["whole_model"], weights(reference(PP.SAVED)[0]), atol=1e-5, ordered=False)


# --- cutting a model into stages, in this process -----------------------------------------------


def run_stages(stages: list[nn.Module], x: torch.Tensor) -> torch.Tensor:
    for stage in stages:
        x = stage(x)
    return x


@pytest.mark.parametrize(
    ("split", "expected"),
    [
        (["layers.2"], [["embed", "layers.0", "layers.1"], ["layers.2", "layers.3", "norm", "head"]]),
        (["layers.1", "norm"], [["embed", "layers.0"], ["layers.1", "layers.2", "layers.3"], ["norm", "head"]]),
    ],
)  # fmt: skip
def test_pipeline_split_cuts_where_named_and_the_stages_compose_to_the_model(
    split: list[str], expected: list[list[str]]
) -> None:
    model = PP.build_model()
    stages = split_units(model, split)
    assert [[unit.name for unit in stage] for stage in stages] == expected
    units = [unit for stage in stages for unit in stage]
    modules = [stage_module(model, units, stage) for stage in stages]
    x, _ = PP.batch()
    with torch.no_grad():
        assert torch.equal(run_stages(modules, x), model(x))
    # Each stage holds its own parameters, the model's objects under the model's names.
    own = dict(model.named_parameters())
    for stage, names in zip(modules, expected, strict=True):
        for name, parameter in stage.named_parameters():
            assert name.split(".")[0] in {n.split(".")[0] for n in names}
            assert parameter is own[name]
    # The model itself is untouched.
    assert len(model.layers) == PP.LAYERS and model.head is not None


def test_a_sequential_model_is_cut_between_its_entries() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))
    stages = split_units(model, ["2"])
    units = [unit for stage in stages for unit in stage]
    modules = [stage_module(model, units, stage) for stage in stages]
    assert [list(dict(m.named_parameters())) for m in modules] == [
        ["0.weight", "0.bias"],
        ["2.weight", "2.bias", "4.weight", "4.bias"],
    ]
    x = torch.randn(3, 4)
    with torch.no_grad():
        assert torch.equal(run_stages(modules, x), model(x))


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 4, bias=False)
        self.head = nn.Linear(4, 4, bias=False)
        self.head.weight = self.embed.weight


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))
        self.body = nn.Linear(2, 2)
        self.head = nn.Linear(2, 2)


@pytest.mark.parametrize(
    ("model", "split", "message"),
    [
        (PP.build_model, ["layers.9"], "names 'layers.9', which is not a module the pipeline can place"),
        (PP.build_model, ["layers.2", "layers.1"], "must name modules after the first"),
        (PP.build_model, ["embed"], "must name modules after the first"),
        (PP.build_model, "layers.2", "give the names of the modules where a stage begins"),
        (Tied, ["head"], "pipeline stages cannot share parameters"),
        (Scaled, ["head"], "cannot place the parameter 'scale'"),
    ],
)  # fmt: skip
def test_splits_that_cannot_work_are_refused(model: Any, split: Any, message: str) -> None:
    from stratcore.wrappers.model_parallel.pipeline import _check_unshared

    with pytest.raises(MisconfigurationError, match=message.replace("(", r"\(")):
        _check_unshared(split_units(model(), split))


@pytest.mark.parametrize(
    ("split", "schedule", "pp", "count"),
    [(["a"], "1F1B", 2, 2), (None, "GPipe", 4, 4), (None, "Interleaved1F1B", 2, 4), (["a", "b", "c", "d", "e"], "Interleaved1F1B", 3, 6)],
)  # fmt: skip
def test_stage_counts(split: list[str] | None, schedule: str, pp: int, count: int) -> None:
    assert stage_count(split, schedule, pp) == count


@pytest.mark.parametrize(
    ("split", "schedule", "pp", "message"),
    [
        (["a", "b"], "1F1B", 2, "runs one stage per process, but pipeline_split makes 3 stages"),
        (["a", "b"], "Interleaved1F1B", 2, "3 stages do not divide among them"),
    ],
)  # fmt: skip
def test_stage_counts_a_schedule_cannot_run_are_refused(
    split: list[str], schedule: str, pp: int, message: str
) -> None:
    with pytest.raises(MisconfigurationError, match=message):
        stage_count(split, schedule, pp)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"pp": 2}, "pp=2 cuts the model into pipeline stages: give pipeline_split"),
        ({"pp": 2, "pipeline_split": ["b"], "pipeline_fn": len}, "give pipeline_split .* one of them"),
        ({"pipeline_split": ["b"]}, "pipeline_split cuts the model into stages for pp > 1"),
        ({"pp": 2, "pipeline_split": ["b"], "microbatches": 0}, "microbatches=0 is not allowed"),
        ({"pp": 2, "pipeline_fn": "split"}, "pipeline_fn='split' is not callable"),
        ({"pp": 0}, "pp=0 is not allowed; give a positive number of processes"),
        ({"cp": "auto"}, "cp='auto' is not allowed for ModelParallelStrategy; expected an integer"),
        ({"tp": 2, "data_parallel_size": 2}, "data_parallel_size and tp size the mesh in two ways"),
    ],
)  # fmt: skip
def test_bad_pipeline_and_mesh_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(MisconfigurationError, match=message):
        stratlib.get_strategy("model_parallel", accelerator="cpu", devices=4, **options)


def test_an_unknown_schedule_is_refused() -> None:
    with pytest.raises(MisconfigurationError, match="pipeline_schedule='ZeroBubble'"):
        stratlib.get_strategy(
            "model_parallel", accelerator="cpu", devices=4, pipeline_schedule="ZeroBubble"
        )


@settings(max_examples=20, deadline=None)
@given(st.sets(st.integers(1, 6), min_size=1, max_size=6))
def test_any_cut_gives_stages_that_compose_to_the_model(cuts: set[int]) -> None:
    model = PP.build_model()
    names = [unit.name for unit in pipeline_units(model)]  # embed, layers.0-3, norm, head
    stages = split_units(model, [names[i] for i in sorted(cuts)])
    assert [unit.name for stage in stages for unit in stage] == names
    units = [unit for stage in stages for unit in stage]
    modules = [stage_module(model, units, stage) for stage in stages]
    x, _ = PP.batch()
    with torch.no_grad():
        assert torch.equal(run_stages(modules, x), model(x))
    held = [{name for name, _ in module.named_parameters()} for module in modules]
    assert set.union(*held) == set(dict(model.named_parameters()))
    assert sum(map(len, held)) == len(dict(model.named_parameters()))  # each in one stage
