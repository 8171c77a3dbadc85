"""Ray Train: the package's strategies inside a real ``TorchTrainer`` (``scripts/ray_train.py``).

One local Ray cluster (2 CPUs, no dashboard, its files in the test's folder) fits two trainers
of 2 workers, started with a SLURM step's and Kubernetes' variables in its environment, as
``ray start`` under srun and on KubeRay pass them to every worker:

- a plain ``TorchTrainer``: ``ddp`` and ``fsdp`` with their defaults train like one process on
  Ray's gloo group, with Ray's ranks; a wrong ``devices`` and a launch that wants a group of its
  own are refused in one line, and Ray's group still reduces afterwards;
- the trainer ``stratcore.ray`` configures for a generated package's strategy on the test
  device (``tests/support/testdevice``) with its own backend: the backend's module is imported
  in every worker before Ray creates the group, and ``testdev_ddp``, ``testdev_fsdp`` and a
  Lightning Trainer with the generated plugin train like one process on ``testdev:<local rank>``.

About a minute and under 3 GiB on two cores. Skipped where Ray is not installed (CI installs it:
the ``ray`` extra).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stratcore import testing
from stratcore.imports import module_available
from stratcore.testing import watch

from tests.support.generator import make_project, run_cli

from .support import SCRIPTS, script_env

pytestmark = [
    pytest.mark.skipif(
        not module_available("ray.train"),
        reason='Ray Train is not installed (pip install "stratcore[ray]"; CI installs it)',
    ),
    # One Ray cluster for every test here: in one pytest worker.
    pytest.mark.xdist_group("ray-train"),
    pytest.mark.slow,
]

#: The test device as a generated package's spec sees it: an accelerator whose module
#: (``testdev_runtime``) loads the device and registers its backend, and the strategies that
#: extend the built-in ones.
SPEC = """\
version: 1
backends:
  - name: testccl
    description: The test device's c10d backend, which loading the device registers.
    registered_by: testdev_runtime
    reduce_ops: [sum, product, min, max]
    requires: [testdev_runtime]
accelerator:
  name: testdev
  class_name: TestDevAccelerator
  description: The project's test device (tests/support/testdevice), loaded by testdev_runtime.
  device_type: testdev
  indexed: true
  requires: [testdev_runtime]
  is_available: testdev_runtime:is_available
  device_count: testdev_runtime:device_count
  backend: testccl
  ray_resource: testdev
  precision: {default: 32-true, supported: [32-true]}
strategies:
  - name: testdev_ddp
    class_name: TestDevDDPStrategy
    extends: ddp
    accelerators: [testdev]
  - name: testdev_fsdp
    class_name: TestDevFSDPStrategy
    extends: fsdp
    accelerators: [testdev]
"""

#: What a vendor's package does on import: the device and its backend are there.
RUNTIME = '''\
"""Loads the test device: devices 'testdev:0' and 'testdev:1', c10d backend 'testccl'."""

import stratgen_testdevice
import torch

stratgen_testdevice.load("testdev", "testccl")


def is_available() -> bool:
    return bool(torch.testdev.is_available())


def device_count() -> int:
    return int(torch.testdev.device_count())
'''

#: A SLURM step that ran ``ray start`` and a Kubernetes pod: what Ray's workers inherit.
LEFTOVERS = {
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NAME": "ray",
    "SLURM_NTASKS": "1",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_NODELIST": "node1",
    "KUBERNETES_PORT": "tcp://10.96.0.1:443",
    "KUBERNETES_SERVICE_HOST": "10.96.0.1",
}
PACKAGE = "testdevlib"
STEPS = 3


@pytest.fixture(scope="module")
def ray_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The trainers' reports: ``cpu/rank<N>.json`` and ``testdev/rank<N>.json``."""
    folder = tmp_path_factory.mktemp("ray_train")
    project = make_project(
        folder / "project",
        {"testdev.yaml": SPEC},
        package=PACKAGE,
        base=False,
        builtin=True,
        config='targets = ["stratlib", "lightning"]\n',
    )
    (project / "testdev_runtime.py").write_text(RUNTIME, encoding="utf-8")
    generated = run_cli("generate", "--project", project)
    assert generated.code == 0, generated.err
    # Ray's sockets live in its temporary folder, and a socket's path may not exceed 107
    # bytes: a short link leads into the test's folder.
    (folder / "ray").mkdir()
    link = Path(tempfile.mkdtemp(prefix="rt")) / "r"
    link.symlink_to(folder / "ray")
    path = os.pathsep.join([str(project / "out"), str(project), os.environ.get("PYTHONPATH", "")])
    env = script_env(
        PYTHONPATH=path.rstrip(os.pathsep),
        RAY_TMPDIR=str(link),
        RAY_AUTH_MODE="disabled",  # else Ray writes a token into ~/.ray
        RAY_USAGE_STATS_ENABLED="0",
        RAY_TRAIN_ENABLE_PRINT_PATCH="0",
        **LEFTOVERS,
    )
    job = watch.Job(
        [sys.executable, str(SCRIPTS / "ray_train.py"), str(folder / "out"), PACKAGE],
        what="Ray Train's trainers",
        env=env,
    )
    try:
        done = job.finish("the trainers of ray_train.py")
        assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
        yield folder / "out"
    finally:
        shutil.rmtree(link.parent, ignore_errors=True)


def reports(folder: Path) -> list[dict[str, Any]]:
    """Both workers' reports, Ray's rank 0 first."""
    return [json.loads((folder / f"rank{r}.json").read_text(encoding="utf-8")) for r in (0, 1)]


def assert_like_one_process(runs: list[dict[str, Any]], devices: list[str]) -> None:
    """Both workers trained as one process would on the whole data set, with Ray's ranks,
    each on its device: the whole model's weights (on both workers where the strategy gives
    them to every rank, on rank 0 where it gathers them there, as FSDP does) are the reference
    run's."""
    for rank, (run, device) in enumerate(zip(runs, devices, strict=True)):
        assert run["environment"] == "RayEnvironment"
        assert (run["world_size"], run["global_rank"], run["local_rank"]) == (2, rank, rank)
        assert run["root_device"] == device
        assert run["samples_seen"] == list(range(16)), "the workers did not split the data"
        assert run["every_rank_loaded"] is True
        if rank == 0 or run["params"]:
            testing.assert_parameters_close(run["params"], testing.reference_parameters(STEPS))
    if all(run["params"] for run in runs):
        assert runs[0]["params"] == runs[1]["params"], "the workers' weights differ"


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_a_strategy_with_its_defaults_trains_on_rays_workers(ray_run: Path, strategy: str) -> None:
    runs = [run[strategy] for run in reports(ray_run / "cpu")]
    assert_like_one_process(runs, ["cpu", "cpu"])
    assert {run["group_backend"] for run in runs} == {"gloo"}


def test_rays_workers_carry_what_ray_was_started_under(ray_run: Path) -> None:
    """The case is real: the SLURM step's and Kubernetes' variables reached the workers."""
    for rank, run in enumerate(reports(ray_run / "cpu")):
        env = run["env"]
        assert env["SLURM_NTASKS"] == "1" and env["KUBERNETES_PORT"]
        assert env["RAY_RAYLET_PID"] and env["ACCELERATE_TORCH_DEVICE"] == "cpu"
        assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == (str(rank), str(rank), "2")


def test_wrong_devices_are_refused_and_rays_group_is_left_alone(ray_run: Path) -> None:
    for run in reports(ray_run / "cpu"):
        error = run["wrong_devices"]
        assert error.startswith("MisconfigurationError: ") and "\n" not in error
        assert "3 device(s)" in error and "RayEnvironment started 2" in error
        assert run["after_wrong_devices"] == {"initialized": True, "sum": 3.0}


def test_a_launch_that_wants_its_own_group_is_refused_and_rays_is_left_alone(
    ray_run: Path,
) -> None:
    """The default environment asks for a group of one: Ray's group of two is not the
    runtime's, so it is neither replaced nor destroyed."""
    for rank, run in enumerate(reports(ray_run / "cpu")):
        error = run["own_group"]
        assert error.startswith("MisconfigurationError: ") and "\n" not in error
        assert f"a process group of 2 processes (rank {rank}, backend 'gloo')" in error
        assert "stratcore did not create" in error
        assert f"DDPStrategy asks for 1 (rank {rank}, backend 'gloo')" in error
        assert run["after_own_group"] == {"initialized": True, "sum": 3.0}


@pytest.mark.parametrize("strategy", ["testdev_ddp", "testdev_fsdp"])
def test_the_helper_creates_the_devices_own_backend_and_its_strategies_train(
    ray_run: Path, strategy: str
) -> None:
    runs = reports(ray_run / "testdev")
    assert {run["group_backend"] for run in runs} == {"testccl"}
    trained = [run[strategy] for run in runs]
    assert_like_one_process(trained, ["testdev:0", "testdev:1"])
    assert {run["group_backend"] for run in trained} == {"testccl"}
    assert all(run["after"] == {"initialized": True, "sum": 3.0} for run in runs)


def test_a_lightning_trainer_with_the_generated_plugin_trains_on_rays_workers(
    ray_run: Path,
) -> None:
    """Lightning's own SLURM environment would match the workers; the spec's order puts the
    ray environment first."""
    runs = [run["lightning"] for run in reports(ray_run / "testdev")]
    for rank, run in enumerate(runs):
        assert run["environment"] == "RayEnvironment"
        assert (run["world_size"], run["global_rank"]) == (2, rank)
        assert run["root_device"] == f"testdev:{rank}"
        assert run["sampler"] == {"num_replicas": 2, "rank": rank}
        assert run["process_group_backend"] == "testccl"
        assert run["runtime_owns_group"] is False, "Ray's group was counted as the runtime's"
        testing.assert_parameters_close(run["params"], testing.reference_parameters(STEPS))
    assert runs[0]["params"] == runs[1]["params"], "the workers' weights differ"


# --- the helper, without a cluster --------------------------------------------------------------


def helper() -> Any:
    import stratlib.ray

    return stratlib.ray


@pytest.mark.parametrize(
    ("strategy", "accelerator", "backend", "resources"),
    [
        ("ddp", "cpu", "gloo", {"CPU": 1}),
        ("ddp", "cuda", "nccl", {"GPU": 1}),
        ("npu_ddp", "auto", "hccl", {"NPU": 1}),  # the spec's ascend_hccl, under torch's name
        ("hpu_parallel", "auto", "hccl", {"HPU": 1}),
        ("xpu_fsdp", "auto", "xccl", {"GPU": 1}),
    ],
)
def test_the_trainer_gets_the_specs_backend_and_resource(
    strategy: str, accelerator: str, backend: str, resources: dict[str, int]
) -> None:
    from ray.train import ScalingConfig
    from ray.train.torch import TorchConfig

    from stratlib.registry import REGISTRY

    kwargs = helper().trainer_kwargs(strategy, workers=8, accelerator=accelerator)
    assert set(kwargs) == {"torch_config", "scaling_config"}
    config, scaling = kwargs["torch_config"], kwargs["scaling_config"]
    assert isinstance(config, TorchConfig) and isinstance(scaling, ScalingConfig)
    assert config.backend == backend
    spec_class = REGISTRY.strategy_entry(strategy).cls
    declared = spec_class.backend or config.accelerator.backend
    assert config.spec_backend == declared  # with its registering module and init hook
    assert (scaling.num_workers, scaling.resources_per_worker) == (8, resources)
    assert scaling.use_gpu is ("GPU" in resources)


def test_a_backend_taken_from_torchs_device_map_is_named_by_the_workers() -> None:
    """generic's backend is whatever torch maps the workers' device to: the driver cannot
    know it (here, without that device, it would say gloo)."""
    config = helper().torch_config("generic_ddp")
    assert config.backend is None and config.spec_backend.from_device_map


def test_a_device_whose_spec_names_no_ray_resource_is_a_clear_error() -> None:
    from stratcore.exceptions import MisconfigurationError

    with pytest.raises(MisconfigurationError, match=r"accelerator 'mlu' names no Ray resource"):
        helper().scaling_config("mlu_ddp", workers=2)
    given = helper().scaling_config("mlu_ddp", workers=2, resources_per_worker={"MLU": 1})
    assert given.resources_per_worker == {"MLU": 1}
    with pytest.raises(MisconfigurationError, match=r"workers=0 is not allowed"):
        helper().scaling_config("ddp", workers=0, accelerator="cpu")
    with pytest.raises(MisconfigurationError, match=r"accelerator='npu': DDPStrategy runs on"):
        helper().torch_config("ddp", accelerator="npu")
