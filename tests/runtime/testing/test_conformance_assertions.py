"""The assertions of the generated tests fail when the runtime does not do what a spec says.

Each check of ``stratcore.testing`` that a generated test uses is given a report that
agrees with the spec, which must pass, and reports that each differ in one way, which must
fail with a message naming what differs.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from stratcore import testing

from stratlib import CPUAccelerator

HCCL_LIKE = testing.Expectation(
    devices=2,
    default_precision="bf16-mixed",
    precisions=("32-true", "bf16-mixed"),
    backend="hccl",
    reduce_ops=("sum", "max"),
    casts={"int64": "float32"},
    step_hooks={"after_backward": "dev:mark_step", "after_optimizer_step": "dev:mark_step"},
)

#: Rank 0's view of the collectives scenario on two ranks of a backend like HCCL_LIKE.
AGREEING: dict[str, Any] = {
    "rank": 0,
    "world_size": 2,
    "reductions": {
        "sum": 3.0,
        "product": "refused: backend 'hccl' cannot reduce with 'product'",
        "min": "refused: backend 'hccl' cannot reduce with 'min'",
        "max": 2.0,
        "mean": 1.5,
    },
    # float32 cannot hold 2**40 + 1: both addends round to 2**40.
    "large_int_sum": [2**41, "int64"],
    "gather": [[0, 0], [1, 10]],
    "broadcast": {"sender": 0, "items": [1, 2]},
    "all_true": True,
    "all_rank0": False,
    "any_rank0": True,
    "sampler": {"num_replicas": 2, "rank": 0},
    "process_group_backend": "hccl",
    "every_rank": [0, 1],
}


def test_collectives_that_agree_with_the_spec_pass() -> None:
    testing.assert_collectives(AGREEING, 2, HCCL_LIKE)


def _set(path: tuple[str, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(report: dict[str, Any]) -> None:
        for key in path[:-1]:
            report = report[key]
        report[path[-1]] = value

    return change


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(
            _set(("reductions", "min"), 1.0), "does not declare", id="undeclared min reduces"
        ),
        pytest.param(
            _set(("reductions", "mean"), 2.0), "reduce_op='mean'", id="emulated mean is wrong"
        ),
        pytest.param(
            _set(("reductions", "max"), "refused: no"), "reduce_op='max'", id="declared max refused"
        ),
        pytest.param(
            _set(("large_int_sum",), [2**41 + 1, "int64"]),
            "reduced as float32",
            id="int64 cast not applied",
        ),
        pytest.param(
            _set(("large_int_sum",), [2**41, "float32"]),
            "as int64",
            id="int64 not cast back",
        ),
        pytest.param(
            _set(("process_group_backend",), "gloo"), "expected 'hccl'", id="another backend"
        ),
    ],
)
def test_collectives_that_differ_from_the_spec_fail(
    change: Callable[[dict[str, Any]], None], message: str
) -> None:
    report = copy.deepcopy(AGREEING)
    change(report)
    with pytest.raises(AssertionError, match=message):
        testing.assert_collectives(report, 2, HCCL_LIKE)


def test_step_hooks_must_run_once_per_step_at_each_point() -> None:
    testing.assert_hooks_called({"dev:mark_step": 6}, 3, HCCL_LIKE)
    with pytest.raises(AssertionError, match="expected"):
        testing.assert_hooks_called({"dev:mark_step": 3}, 3, HCCL_LIKE)


def test_training_must_match_one_process_within_the_precision_tolerance() -> None:
    reference = [t.tolist() for t in testing.reference_parameters(steps=3)]
    result = {
        "precision": "bf16-mixed",
        "world_size": 2,
        "params": reference,
        "hook_calls": {"dev:mark_step": 6},
    }
    testing.assert_trains_like_one_process(result, steps=3, expected=HCCL_LIKE)
    drifted = copy.deepcopy(result)
    drifted["params"][0][0][0] += 0.05
    with pytest.raises(AssertionError, match="differs from the single-process reference"):
        testing.assert_trains_like_one_process(drifted, steps=3, expected=HCCL_LIKE)
    with pytest.raises(AssertionError, match="expected the default 'bf16-mixed'"):
        testing.assert_trains_like_one_process(
            {**result, "precision": "32-true"}, steps=3, expected=HCCL_LIKE
        )


class IndexedCPU(CPUAccelerator):
    """The CPU accelerator claiming indexed devices, as a spec mistake would."""

    indexed = True


def test_device_parsing_follows_the_indexed_flag() -> None:
    testing.assert_device_parsing(CPUAccelerator, indexed=False, counted=False)
    with pytest.raises(AssertionError, match="not addressed by index"):
        testing.assert_device_parsing(IndexedCPU, indexed=False, counted=False)
    with pytest.raises(AssertionError, match="refused by an indexed accelerator"):
        testing.assert_device_parsing(CPUAccelerator, indexed=True, counted=False)
    with pytest.raises(AssertionError, match="expected a number"):
        testing.assert_device_parsing(CPUAccelerator, indexed=False, counted=True)
