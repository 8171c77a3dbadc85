"""The generic spec and Ascend's NPU spec on the project's real non-CPU test device.

The generated tests of both specs run on the device in the stand-in runs
(``test_generated_on_standins``: single device, DDP, FSDP, model parallelism and DeepSpeed,
checkpoints, another precision, the Lightning plugins). Here, what the generated tests do not
cover, for each spec, each compared with one process on the CPU (``stratcore.testing``'s
reference problem) at the precision's tolerance:

- DDP with processes torch.multiprocessing spawns (``<prefix>_ddp_spawn``);
- hybrid sharding (FSDP2 on a 2 x 2 mesh) and model parallelism on a (data, tensor) mesh of 2 x 2,
  on four devices;
- pipeline parallelism, two stages on two devices;
- 16-mixed with the GradScaler on the device, and bf16-mixed;
- DeepSpeed's ZeRO stages 1, 2 and 3 by registry name (by hand, as the DeepSpeed guide shows:
  ``test_deepspeed_accelerators``);
- a sharded checkpoint saved on the device, resumed onto it by a new launch in new processes;
- moves that replace Parameter objects (the device's switch, as torch_xla's moves do): stratlib's
  strategies and Fabric's plugins train the parameters the moved model holds;
- Lightning's ``strategy="auto"`` on the device: a clear error naming the spec's strategy.

The generic device is the test device as torch finds it at start (backend autoload,
``STRATGEN_TESTDEVICE``); the NPU is the test device renamed 'npu' by the torch_npu stand-in,
with HCCL's name for its backend (``standins/``).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from stratcore import testing
from stratcore.testing import clean_environ, watch

from .support import GENERATED, REPO, install_standins

pytestmark = pytest.mark.slow

JOB = Path(__file__).with_name("device_job.py")
STEPS = 3


@dataclass(frozen=True)
class Spec:
    """How a spec's device is made present: the stand-in packages and the environment."""

    device_type: str
    packages: tuple[str, ...] = ()
    environ: dict[str, str] = field(default_factory=dict)
    #: The variable that sets how many devices the process has.
    count_env: str = "STRATGEN_TESTDEVICE_COUNT"


SPECS = {
    "generic": Spec("testdev", environ={"STRATGEN_TESTDEVICE": "testdev"}),
    "npu": Spec(
        "npu",
        packages=("torch_npu",),
        environ={
            # torch imports torch_npu at start (its 'torch.backends' entry point), so a process
            # torch.multiprocessing spawns knows 'npu' devices before it unpickles its work:
            # the test device loads as 'npu' there, as the stand-in loads it where imported.
            "STRATGEN_TESTDEVICE": "npu:hccl",
            # DeepSpeed's NPU accelerator reads CANN's folder when it hands out an op builder.
            "ASCEND_HOME_PATH": "/usr/local/Ascend/ascend-toolkit/latest",
        },
        count_env="STANDIN_NPU_COUNT",
    ),
}

#: The jobs of each spec, in order: name -> (devices, cases).
JOBS = {
    "two_devices": (
        2,
        (
            "pipeline",
            "precision_16-mixed",
            "precision_bf16-mixed",
            "deepspeed_stage_1",
            "deepspeed_stage_2",
            "deepspeed_stage_3",
            "save",
        ),
    ),
    "resumed": (2, ("resume",)),
    "spawned": (2, ("ddp_spawn",)),
    "four_devices": (4, ("hsdp", "dp_tp")),
}


def device_environ(spec: str, folder: Path, devices: int, **extra: str) -> dict[str, str]:
    """The environment of a process that has ``spec``'s device, ``devices`` of them."""
    spec_facts = SPECS[spec]
    site = install_standins(folder, spec_facts.packages)
    environ = clean_environ({**spec_facts.environ, **extra})
    environ[spec_facts.count_env] = environ["STRATGEN_TESTDEVICE_COUNT"] = str(devices)
    environ["PYTHONPATH"] = os.pathsep.join([str(site), str(GENERATED), str(REPO)])
    return environ


def run_job(spec: str, folder: Path, job: str) -> dict[str, Any]:
    """Rank 0's report of every case of a job, by case."""
    devices, cases = JOBS[job]
    command = [sys.executable, str(JOB), spec, str(folder), *cases]
    done = watch.run(command, cwd=folder, env=device_environ(spec, folder, devices))
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    reports = {}
    for line in done.stdout.splitlines():
        if line.startswith("CASE "):
            _, case, report = line.split(" ", 2)
            reports[case] = json.loads(report)
    assert sorted(reports) == sorted(cases), done.stdout[-3000:]
    return reports


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every case of both specs: each spec's jobs in turn (the resumed job reads what the first
    wrote), both specs' at the same time."""
    started: dict[str, dict[str, Any]] = {}
    for spec in SPECS:
        folder = tmp_path_factory.mktemp(f"device-{spec}")
        started[spec] = {}
        for job in JOBS:
            started[spec].update(run_job(spec, folder, job))
    return started


def _cases() -> list[Any]:
    return [
        pytest.param(spec, case, id=f"{spec}-{case}")
        for spec in SPECS
        for _, cases in JOBS.values()
        for case in cases
        if case != "save"
    ]


@pytest.mark.xdist_group("test-device-jobs")
@pytest.mark.parametrize(("spec", "case"), _cases())
def test_trains_on_the_device_like_one_process(
    spec: str, case: str, reports: dict[str, dict[str, Any]]
) -> None:
    report = reports[spec][case]
    assert report["device_type"] == SPECS[spec].device_type
    precision = report["precision"]
    if case.startswith("precision_"):
        assert precision == case.removeprefix("precision_")
    else:
        assert precision == "32-true"
    if precision == "16-mixed":  # float16's gradients are scaled, on the device
        assert report["grad_scaler"] == "GradScaler"
    assert report["world_size"] == (4 if case in JOBS["four_devices"][1] else 2)
    expected = testing.reference_parameters(STEPS, dtype=testing.reference_dtype(precision))
    testing.assert_parameters_close(
        report["params"], expected, atol=testing.precision_tolerance(precision)
    )


# --- moves that replace Parameter objects --------------------------------------------------------


@pytest.mark.parametrize("strategy", ["generic_single", "generic_ddp"])
def test_stratlib_trains_after_moves_that_replace_parameters(strategy: str, tmp_path: Path) -> None:
    """On a device whose moves give the module new Parameter objects, the optimizer made
    before ``setup`` trains the parameters the moved module holds."""
    devices = 1 if strategy.endswith("_single") else 2
    environ = device_environ("generic", tmp_path, devices, STRATGEN_TESTDEVICE_KEEP_PARAMETERS="0")
    done, result = testing.run_scenario(
        "train", strategy, devices=devices, accelerator="generic", env=environ
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    expected = testing.reference_parameters(STEPS)
    tolerance = testing.precision_tolerance("32-true")
    testing.assert_parameters_close(result["params"], expected, atol=tolerance)


@pytest.mark.parametrize(
    ("framework", "strategy"),
    [
        ("fabric", "generic_single"),
        ("fabric", "generic_ddp"),
        ("fabric", "generic_deepspeed"),
        ("pytorch", "generic_deepspeed"),
    ],
)
def test_plugins_train_after_moves_that_replace_parameters(
    framework: str, strategy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fabric re-points the optimizers at the moved parameters for its XLAStrategy alone, and
    DeepSpeed's ``initialize`` moves the module after its optimizer was made (the Trainer's
    and Fabric's); the plugins move first and re-point the optimizers for any device whose
    moves replace Parameters, so they train there too."""
    pytest.importorskip("lightning")
    if "deepspeed" in strategy:
        pytest.importorskip("deepspeed")
    from stratcore.testing.lightning import assertions, runner

    devices = 1 if strategy.endswith("_single") else 2
    for name, value in device_environ(
        "generic", tmp_path, devices, STRATGEN_TESTDEVICE_KEEP_PARAMETERS="0"
    ).items():
        monkeypatch.setenv(name, value)
    case = {
        "framework": framework,
        "module": f"stratlib.lightning.{framework}",
        "strategy": strategy,
        "accelerator": "generic",
        "devices": devices,
        "precision": "32-true",
        "steps": STEPS,
        "folder": str(tmp_path),
        "script": devices > 1,
    }
    assertions.assert_reports_like_one_process(case, runner.run_training(case))


# --- Lightning's own strategy choice ------------------------------------------------------------

AUTO = """
import sys

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

import stratlib.lightning.pytorch  # noqa: F401 (the plugins)


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, index):
        return self.layer(batch[0]).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)


trainer = pl.Trainer(
    accelerator=sys.argv[1],
    strategy=sys.argv[2] if len(sys.argv) > 2 else "auto",
    devices=1, max_steps=1, logger=False, enable_checkpointing=False,
    enable_progress_bar=False, enable_model_summary=False,
)
trainer.fit(Model())
"""


@pytest.mark.parametrize("spec", list(SPECS))
def test_lightnings_auto_strategy_names_the_plugin_to_pass(spec: str, tmp_path: Path) -> None:
    """With ``strategy="auto"`` and one device Lightning picks ``SingleDeviceStrategy`` on the
    CPU for an accelerator it does not know: the accelerator refuses at once, naming the spec's
    single-device strategy."""
    pytest.importorskip("lightning")
    script = tmp_path / "auto.py"
    script.write_text(AUTO, encoding="utf-8")
    accelerator = "generic" if spec == "generic" else spec
    done = watch.run(
        [sys.executable, str(script), accelerator],
        cwd=tmp_path,
        env=device_environ(spec, tmp_path, 1),
    )
    assert done.returncode != 0
    single = f"'{spec}_single'"
    assert f"pass the spec's strategy, {single} for one device" in done.stderr, done.stderr[-3000:]


def test_lightnings_fsdp_plugin_refuses_a_device_whose_moves_replace_parameters(
    tmp_path: Path,
) -> None:
    """Torch's FSDP1, which Lightning's FSDPStrategy wraps the model in, flattens Parameters in
    place: on a device whose moves replace them the plugin refuses in one line, naming why,
    where FSDP1 would fail in every rank with "incompatible tensor type"."""
    pytest.importorskip("lightning")
    script = tmp_path / "fsdp.py"
    script.write_text(AUTO, encoding="utf-8")
    environ = device_environ("generic", tmp_path, 1, STRATGEN_TESTDEVICE_KEEP_PARAMETERS="0")
    done = watch.run(
        [sys.executable, str(script), "generic", "generic_fsdp"], cwd=tmp_path, env=environ
    )
    assert done.returncode != 0
    expected = "needs Parameter objects kept across moves, and a move onto 'testdev' replaces them"
    assert expected in done.stderr, done.stderr[-3000:]
    assert "incompatible tensor type" not in done.stderr
