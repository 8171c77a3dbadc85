"""Cluster environments: reading schedulers' variables, detection order, overriding, and
agreement between what the user asks for and what the scheduler started.

Real multi-process runs under torchrun and per-node starts are in test_newcomer.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import stratlib
from stratlib.registry import REGISTRY

TORCHRUN = {
    "RANK": "1",
    "LOCAL_RANK": "1",
    "GROUP_RANK": "0",
    "LOCAL_WORLD_SIZE": "2",
    "WORLD_SIZE": "4",
    "MASTER_ADDR": "10.1.0.1",
    "MASTER_PORT": "29400",
    "TORCHELASTIC_RUN_ID": "job",
}
SLURM = {
    "SLURM_NTASKS": "8",
    "SLURM_PROCID": "5",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "2",
    "SLURM_JOB_ID": "4123456",
    "SLURM_JOB_NAME": "train",
    "SLURM_NODELIST": "gpu[003-007,9],cpu1",
}
MPI = {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}
KUBEFLOW = {
    "KUBERNETES_PORT": "tcp://10.0.0.1:443",
    "MASTER_ADDR": "master-0",
    "MASTER_PORT": "23456",
    "WORLD_SIZE": "3",
    "RANK": "2",
}


def set_variables(monkeypatch: pytest.MonkeyPatch, *groups: dict[str, str]) -> None:
    for group in groups:
        for name, value in group.items():
            monkeypatch.setenv(name, value)


@pytest.mark.parametrize(
    ("nodelist", "first"),
    [
        ("node1", "node1"),
        ("node1,node2", "node1"),
        ("node[1-4]", "node1"),
        ("node[003-004]", "node003"),
        ("gpu[003-007,9],cpu1", "gpu003"),
        ("node[7,2-3]-ib", "node7-ib"),
        ("rack[2-3]-node[01-04]", "rack2-node01"),
        ("host-a,host-b", "host-a"),
        ("a[1-2],b[3-4]", "a1"),
        ("10.0.0.5", "10.0.0.5"),
    ],
)
def test_slurm_main_address_is_the_first_host_of_the_node_list(
    monkeypatch: pytest.MonkeyPatch, nodelist: str, first: str
) -> None:
    set_variables(monkeypatch, SLURM, {"SLURM_NODELIST": nodelist})
    assert stratlib.SLURMEnvironment().main_address == first


@pytest.mark.parametrize("nodelist", ["node[1-2", "node[a-b]", "]x["])
def test_slurm_unreadable_node_list_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, nodelist: str
) -> None:
    set_variables(monkeypatch, SLURM, {"SLURM_NODELIST": nodelist})
    with pytest.raises(
        stratlib.MisconfigurationError, match="cannot read main_address from SLURM_NODELIST="
    ):
        _ = stratlib.SLURMEnvironment().main_address


def test_slurm_reads_ranks_and_derives_the_port_from_the_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_variables(monkeypatch, SLURM)
    environment = stratlib.SLURMEnvironment()
    assert stratlib.SLURMEnvironment.detect()
    assert (
        environment.world_size(),
        environment.global_rank(),
        environment.local_rank(),
        environment.node_rank(),
    ) == (8, 5, 1, 2)
    assert environment.main_port == 15000 + 3456
    monkeypatch.setenv("MASTER_PORT", "23000")
    monkeypatch.setenv("MASTER_ADDR", "10.9.9.9")
    assert (environment.main_address, environment.main_port) == ("10.9.9.9", 23000)


@pytest.mark.parametrize("name", ["bash", "interactive"])
def test_slurm_interactive_session_is_not_a_managed_job(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    set_variables(monkeypatch, SLURM, {"SLURM_JOB_NAME": name})
    assert not stratlib.SLURMEnvironment.detect()
    assert type(REGISTRY.detect_environment(stratlib.DDPStrategy)) is stratlib.LightningEnvironment


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        ((), "LightningEnvironment"),
        ((MPI,), "MPIEnvironment"),
        ((SLURM, MPI), "SLURMEnvironment"),
        ((TORCHRUN, SLURM, MPI), "TorchElasticEnvironment"),
        ((KUBEFLOW, MPI), "KubeflowEnvironment"),
        ((TORCHRUN, KUBEFLOW), "TorchElasticEnvironment"),
    ],
)
def test_detection_follows_the_priority_order(
    monkeypatch: pytest.MonkeyPatch, groups: tuple[dict[str, str], ...], expected: str
) -> None:
    set_variables(monkeypatch, *groups)
    assert type(REGISTRY.detect_environment(stratlib.DDPStrategy)).__name__ == expected
    assert type(stratlib.DDPStrategy().cluster_environment).__name__ == expected


def test_lsf_priority_and_rank_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import socket

    rankfile = tmp_path / "rankfile"
    rankfile.write_text(
        f"launch\n{socket.gethostname()}\n{socket.gethostname()}\nother\n", encoding="utf-8"
    )
    set_variables(
        monkeypatch,
        MPI,
        {
            "LSB_JOBID": "77",
            "LSB_DJOB_RANKFILE": str(rankfile),
            "JSM_NAMESPACE_LOCAL_RANK": "1",
            "JSM_NAMESPACE_SIZE": "3",
            "JSM_NAMESPACE_RANK": "1",
        },
    )
    environment = REGISTRY.detect_environment(stratlib.DDPStrategy)
    assert type(environment) is stratlib.LSFEnvironment
    assert (environment.world_size(), environment.global_rank(), environment.node_rank()) == (
        3,
        1,
        0,
    )
    assert environment.main_address == socket.gethostname()
    assert environment.main_port == 15077


def test_environment_can_be_overridden(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, TORCHRUN)
    chosen = stratlib.LightningEnvironment()
    strategy = stratlib.get_strategy(
        "ddp", accelerator="cpu", devices=2, cluster_environment=chosen
    )
    assert strategy.cluster_environment is chosen
    detected = stratlib.get_strategy("ddp", accelerator="cpu", devices=2, num_nodes=2)
    assert type(detected.cluster_environment) is stratlib.TorchElasticEnvironment


def test_devices_auto_under_torchrun_takes_the_processes_it_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_variables(monkeypatch, TORCHRUN)
    strategy = stratlib.get_strategy("ddp", accelerator="cpu", num_nodes=2)
    assert strategy.num_processes == 2
    assert (strategy.global_rank, strategy.local_rank, strategy.node_rank, strategy.world_size) == (
        1,
        1,
        0,
        4,
    )
    assert strategy.distributed_sampler_kwargs == {"num_replicas": 4, "rank": 1}


def test_num_nodes_that_torchrun_contradicts_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_variables(monkeypatch, TORCHRUN)
    with pytest.raises(stratlib.MisconfigurationError) as error:
        stratlib.get_strategy("ddp", accelerator="cpu", devices=2, num_nodes=3)
    assert str(error.value) == (
        "num_nodes=3 with 2 device(s) per node means 6 processes, but TorchElasticEnvironment "
        "started 4; make them agree"
    )


def test_mpi_node_rank_from_ranks_per_node(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, MPI, {"OMPI_COMM_WORLD_LOCAL_SIZE": "2"})
    environment = stratlib.MPIEnvironment()
    assert (
        environment.world_size(),
        environment.global_rank(),
        environment.local_rank(),
        environment.node_rank(),
    ) == (4, 3, 1, 1)
    assert environment.main_port == 29500


def test_kubeflow_reads_its_pod_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, KUBEFLOW)
    environment = REGISTRY.detect_environment(stratlib.DDPStrategy)
    assert type(environment) is stratlib.KubeflowEnvironment
    assert (
        environment.world_size(),
        environment.global_rank(),
        environment.local_rank(),
        environment.node_rank(),
    ) == (3, 2, 0, 2)
    assert (environment.main_address, environment.main_port) == ("master-0", 23456)


def test_lightning_environment_is_filled_in_by_the_strategy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NODE_RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    strategy = stratlib.get_strategy("ddp", accelerator="cpu", devices=2, num_nodes=2)
    strategy.configure_ranks()
    assert (strategy.global_rank, strategy.world_size, strategy.node_rank) == (3, 4, 1)
    assert strategy.cluster_environment.creates_processes_externally


# --- Ray Train's workers ----------------------------------------------------------------------

#: The second worker on the second node of a Ray Train job of 4 workers, 2 a node, as Ray Train
#: sets its variables (RAY_RAYLET_PID: the raylet that started it).
RAY = {
    "RAY_RAYLET_PID": "4321",
    "ACCELERATE_TORCH_DEVICE": "cpu",
    "RANK": "3",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "WORLD_SIZE": "4",
    "NODE_RANK": "1",
    "MASTER_ADDR": "10.1.0.1",
    "MASTER_PORT": "29400",
}


def test_devices_auto_under_ray_takes_the_workers_of_this_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The defaults need nothing from the script: the layout and the ranks are Ray's, and the
    number of nodes is not asked for."""
    set_variables(monkeypatch, RAY, SLURM, KUBEFLOW, RAY)
    strategy = stratlib.get_strategy("ddp", accelerator="cpu")
    assert type(strategy.cluster_environment) is stratlib.RayEnvironment
    assert strategy.num_processes == 2
    strategy.configure_ranks()
    ranks = (strategy.global_rank, strategy.local_rank, strategy.node_rank, strategy.world_size)
    assert ranks == (3, 1, 1, 4)
    assert strategy.distributed_sampler_kwargs == {"num_replicas": 4, "rank": 3}


@pytest.mark.parametrize(("devices", "num_nodes"), [(1, 1), (2, 1), (2, 2), (4, 1), (1, 4)])
def test_devices_that_agree_with_rays_layout_are_accepted(
    devices: int, num_nodes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One device per worker, the workers of this node, or devices x nodes = Ray's world."""
    set_variables(monkeypatch, RAY)
    strategy = stratlib.get_strategy("ddp", accelerator="cpu", devices=devices, num_nodes=num_nodes)
    strategy.configure_ranks()
    assert (strategy.global_rank, strategy.world_size) == (3, 4)


@pytest.mark.parametrize(("devices", "num_nodes", "means"), [(3, 1, 3), (2, 3, 6), (1, 2, 2)])
def test_devices_that_contradict_rays_layout_are_a_clear_error(
    devices: int, num_nodes: int, means: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_variables(monkeypatch, RAY)
    with pytest.raises(stratlib.MisconfigurationError) as error:
        stratlib.get_strategy("ddp", accelerator="cpu", devices=devices, num_nodes=num_nodes)
    assert str(error.value) == (
        f"num_nodes={num_nodes} with {devices} device(s) per node means {means} processes, but "
        "RayEnvironment started 4 (2 on this node); leave devices and num_nodes at their "
        "defaults to take its layout"
    )


def test_ray_places_workers_unevenly_and_its_ranks_are_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """3 workers, 2 on the first node: the one alone on the second node is rank 2, not
    node_rank x devices + local_rank = 1."""
    uneven = {"RANK": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "WORLD_SIZE": "3"}
    set_variables(monkeypatch, RAY, uneven)
    strategy = stratlib.get_strategy("ddp", accelerator="cpu")
    strategy.configure_ranks()
    assert (strategy.num_processes, strategy.global_rank, strategy.world_size) == (1, 2, 3)


def test_plain_ray_tasks_and_torchrun_inside_ray_are_not_ray_train(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Ray task without Train's variables, and torchrun started inside a Ray Train worker
    (it inherits the raylet and the device, and sets its own run id), are not Ray's workers."""
    set_variables(monkeypatch, {"RAY_RAYLET_PID": "4321", "RAY_JOB_ID": "01000000"})
    assert not stratlib.RayEnvironment.detect()
    set_variables(monkeypatch, RAY, TORCHRUN)
    environment = REGISTRY.detect_environment(stratlib.DDPStrategy)
    assert type(environment) is stratlib.TorchElasticEnvironment


@pytest.mark.parametrize(
    ("given", "devices", "local_rank", "chosen"),
    [
        # Ray shares a node's GPUs among its workers and names each one's own.
        ("cuda:1", ["cuda:0", "cuda:1"], 0, "cuda:1"),
        # A device of another type, or none with an index: the local rank's.
        ("cpu", ["cuda:0", "cuda:1"], 1, "cuda:1"),
        ("hpu", ["hpu", "hpu"], 1, "hpu"),
        # Not among the devices the strategy was given: the local rank's.
        ("cuda:3", ["cuda:0", "cuda:1"], 1, "cuda:1"),
        # A worker that sees its own device alone trains on it, whatever its local rank.
        ("cpu", ["cuda:0"], 5, "cuda:0"),
        (None, ["cuda:0", "cuda:1"], 1, "cuda:1"),
    ],
)
def test_a_process_trains_on_the_device_its_environment_gave_it(
    given: str | None, devices: list[str], local_rank: int, chosen: str
) -> None:
    from stratcore.parallel import choose_device

    found = choose_device([torch.device(d) for d in devices], given, local_rank)
    assert found == torch.device(chosen)


def test_a_ray_workers_root_device_is_the_one_ray_named(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, RAY, {"ACCELERATE_TORCH_DEVICE": "cpu"})
    strategy = stratlib.get_strategy("ddp", accelerator="cpu")
    assert strategy.root_device == torch.device("cpu")
    assert strategy.cluster_environment.device() == "cpu"
    assert strategy.cluster_environment.local_world_size() == 2
    assert stratlib.TorchElasticEnvironment().device() is None
