"""The generated Lightning plugins in Ray Train's workers, in one process with the variables Ray
sets: the ray environment wins over what Lightning detects itself, the device is the one Ray
gave the worker, the sampler splits the data over Ray's world size, and a process group that
exists already is reused only where it fits. (A real Trainer in Ray's workers: tests/runtime/
test_ray.py.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from lightning.fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment
from stratcore import process_group, testing
from stratcore.exceptions import MisconfigurationError

from stratlib.lightning.environments import RayEnvironment
from stratlib.lightning.pytorch.npu import NPUDDPStrategy

#: The second worker of 4 on the second node, as Ray Train sets its variables.
RAY = {
    "RAY_RAYLET_PID": "4321",
    "ACCELERATE_TORCH_DEVICE": "cuda:1",
    "RANK": "3",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "WORLD_SIZE": "4",
    "NODE_RANK": "1",
}
#: What `ray start` run by srun passes on to every worker.
SLURM_STEP = {
    "SLURM_NTASKS": "1",
    "SLURM_PROCID": "0",
    "SLURM_JOB_ID": "42",
    "SLURM_JOB_NAME": "ray",
}


@pytest.fixture(autouse=True)
def cluster_free(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    testing.isolated_environment(monkeypatch)
    yield


def set_variables(monkeypatch: pytest.MonkeyPatch, *groups: dict[str, str]) -> None:
    for group in groups:
        for name, value in group.items():
            monkeypatch.setenv(name, value)


def strategy_under(environment: object) -> NPUDDPStrategy:
    """A generated plugin given ``environment`` as Lightning's connector gives it."""
    strategy = NPUDDPStrategy()
    strategy.cluster_environment = environment
    return strategy


def test_the_ray_environment_wins_over_lightnings_own_slurm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Lightning detects SLURM from the variables of the step that started Ray; the spec's
    order puts ray before slurm."""
    set_variables(monkeypatch, SLURM_STEP, RAY)
    assert SLURMEnvironment.detect()
    strategy = strategy_under(SLURMEnvironment())
    assert type(strategy.cluster_environment) is RayEnvironment
    assert (strategy.world_size, strategy.global_rank, strategy.local_rank) == (4, 3, 1)


def test_lightnings_own_environment_stays_where_nothing_before_it_detects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A SLURM job without Ray keeps Lightning's SLURMEnvironment (its requeue on preemption
    looks for that class); a user's environment is never replaced."""
    set_variables(monkeypatch, SLURM_STEP)
    strategy = strategy_under(SLURMEnvironment())
    assert type(strategy.cluster_environment) is SLURMEnvironment
    set_variables(monkeypatch, RAY)
    custom = type("Mine", (TorchElasticEnvironment,), {"__module__": "users_module"})()
    assert strategy_under(custom).cluster_environment is custom


def test_a_ray_worker_trains_on_the_device_ray_named(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, RAY)
    strategy = strategy_under(RayEnvironment())
    strategy.parallel_devices = [torch.device("cuda", 0), torch.device("cuda", 1)]
    monkeypatch.setenv("LOCAL_RANK", "0")  # Ray's local rank need not be the device's index
    assert strategy.root_device == torch.device("cuda", 1)


def test_a_worker_that_sees_its_own_device_alone_trains_on_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ray makes one NPU visible to each worker: devices='auto' finds one, whatever the local
    rank; the sampler still splits the data over Ray's 4 workers."""
    set_variables(monkeypatch, RAY, {"ACCELERATE_TORCH_DEVICE": "cpu"})
    strategy = strategy_under(RayEnvironment())
    strategy.parallel_devices = [torch.device("cpu")]
    assert strategy.root_device == torch.device("cpu")
    assert strategy.distributed_sampler_kwargs == {"num_replicas": 4, "rank": 3}


def test_lightnings_own_choice_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under torchrun (no device given) the device and the sampler are Lightning's."""
    set_variables(
        monkeypatch,
        {"RANK": "1", "LOCAL_RANK": "1", "GROUP_RANK": "0", "LOCAL_WORLD_SIZE": "2"},
        {"WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "job"},
    )
    strategy = strategy_under(TorchElasticEnvironment())
    strategy.parallel_devices = [torch.device("cuda", 0), torch.device("cuda", 1)]
    assert strategy.root_device == torch.device("cuda", 1)
    assert strategy.distributed_sampler_kwargs == {"num_replicas": 2, "rank": 1}


def test_an_existing_group_that_does_not_fit_is_refused_and_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A group of one the script created; the plugin (here without its accelerator: on the
    CPU, gloo) asks for Ray's layout of 4."""
    set_variables(monkeypatch, RAY)
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        strategy = strategy_under(RayEnvironment())
        strategy.parallel_devices = [torch.device("cpu")]
        with pytest.raises(MisconfigurationError) as error:
            strategy._check_existing_group()
        message = str(error.value)
        assert "\n" not in message
        assert "a process group of 1 processes (rank 0, backend 'gloo')" in message
        assert "under RayEnvironment" in message
        assert "NPUDDPStrategy asks for 4 (rank 3, backend 'gloo')" in message
        assert dist.is_initialized() and not process_group.created_by_runtime()
    finally:
        dist.destroy_process_group()
