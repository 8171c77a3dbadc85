"""DeepSpeed trains on generated DeepSpeed accelerators of devices it has no class for.

Two devices without a DeepSpeed class of their own: Moore Threads' ``musa`` (stratlib's
``MUSADeepSpeedAccelerator``) and the made-up Boreal device whose spec the guide
docs/guides/deepspeed-accelerators.md gives, generated here as the guide says. Both are real
devices here: their extensions' stand-ins (``standins/``: torch_musa, and below a torch_boreal of
the same kind) load the project's test device under the vendor's device type and backend name,
so DeepSpeed runs its real engine on ``musa:N`` and ``boreal:N`` tensors, with gloo on the host
underneath each device's backend.

One torchrun job per device, two processes each (``deepspeed_job.py``), trains the reference
problem with ZeRO stages 1, 2 and 3 written as a user would (the generated accelerator
installed before ``import deepspeed``, then ``deepspeed.initialize`` with an SGD optimizer), and
through the device's DeepSpeed strategy by registry name; each case must end at the weights of
one process trained on the whole batch. The jobs also report what DeepSpeed ran on: the
generated class, the spec's backend, and op builders bound to the generated accelerator at
import. The stand-in's call log shows every process selecting its device through the vendor's
function. Each process ends with no process group left alive after the generated accelerator's
release at exit (the job fails otherwise): one left alive is how gloo now and then aborted a
rank after a successful run.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from stratcore import testing
from stratcore.testing import clean_environ, watch

from .support import GENERATED, REPO, install_standins

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("deepspeed-accelerators")]
deepspeed = pytest.importorskip("deepspeed")

GUIDE = REPO / "docs" / "guides" / "deepspeed-accelerators.md"
JOB = Path(__file__).with_name("deepspeed_job.py")
STAGES = (1, 2, 3)

#: The made-up device's extension, for the guide's spec: the test device renamed 'boreal', its
#: backend 'bccl' (as the stand-ins of real extensions, ``standins/standin_devices.py``).
TORCH_BOREAL = '''"""Stand-in for torch_boreal, the extension of the guide's made-up device."""

import standin_devices

standin_devices.load_device("boreal", "bccl", "STANDIN_BOREAL_COUNT", "BOREAL_VISIBLE_DEVICES")


def is_available():
    return device_count() > 0


def device_count():
    return standin_devices.visible_count("STANDIN_BOREAL_COUNT", "BOREAL_VISIBLE_DEVICES")


def set_device(device):
    standin_devices.set_device(device)


def is_bf16_supported():
    return True
'''


def guide_spec() -> str:
    """The spec of the guide's section 'A new device, end to end', as written there."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split("## A new device, end to end", 1)[1]
    match = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert match, "the guide's new-device section has no YAML spec"
    return match.group(1)


@dataclass(frozen=True)
class Device:
    """A device of the jobs: its package, generated DeepSpeed accelerator and strategy, and how
    to stand it in."""

    package: str
    accelerator: str
    strategy: str
    backend: str
    standins: tuple[str, ...]


DEVICES = {
    "musa": Device(
        "stratlib", "MUSADeepSpeedAccelerator", "musa_deepspeed", "mccl", ("torch_musa",)
    ),
    "boreal": Device("boreallib", "BorealDeepSpeedAccelerator", "boreal_deepspeed", "bccl", ()),
}


def boreal_project(root: Path) -> Path:
    """The guide's spec in a project of its own, generated with the deepspeed target; the
    folder to put on the PYTHONPATH."""
    (root / "specs").mkdir(parents=True)
    (root / "specs" / "boreal.yaml").write_text(guide_spec(), encoding="utf-8")
    (root / "pyproject.toml").write_text(
        '[tool.stratgen]\npackage = "boreallib"\noutput = "src"\ntests = "src/tests"\n'
        'targets = ["stratlib", "deepspeed"]\n',
        encoding="utf-8",
    )
    done = watch.run([sys.executable, "-m", "stratgen", "generate", "--project", str(root)])
    assert done.returncode == 0, done.stdout + done.stderr
    return root / "src"


@dataclass
class JobRun:
    """A finished job: rank 0's cases by name, its output and the stand-ins' call log."""

    cases: dict[str, dict[str, Any]]
    output: str
    events: list[dict[str, Any]]


def start(name: str, folder: Path, extra_path: list[Path]) -> tuple[watch.Job, Path]:
    device = DEVICES[name]
    site = install_standins(folder, device.standins, devices=True)
    if name == "boreal":
        (site / "torch_boreal.py").write_text(TORCH_BOREAL, encoding="utf-8")
    events = folder / "events.jsonl"
    environ = clean_environ(
        {
            "PYTHONPATH": os.pathsep.join(
                map(str, [site, *extra_path, REPO / "tests" / "support" / "job_modules"])
            ),
            "STANDIN_EVENTS": str(events),
        }
    )
    environ.pop("DS_ACCELERATOR", None)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", "2", str(JOB), device.package, device.accelerator]
    return watch.Job([*command, device.strategy], cwd=folder, env=environ), events


def finish(job: watch.Job, events: Path) -> JobRun:
    done = job.finish()
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    cases = {}
    for line in done.stdout.splitlines():
        if line.startswith("CASE "):
            _, case, outcome = line.split(" ", 2)
            cases[case] = json.loads(outcome)
    logged = events.read_text(encoding="utf-8").splitlines() if events.is_file() else []
    return JobRun(cases, output, [json.loads(line) for line in logged if line])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, JobRun]:
    """Both devices' jobs, run at the same time, once for the module."""
    boreal_src = boreal_project(tmp_path_factory.mktemp("boreal-project"))
    started = {
        "musa": start("musa", tmp_path_factory.mktemp("musa"), [GENERATED]),
        "boreal": start("boreal", tmp_path_factory.mktemp("boreal"), [boreal_src]),
    }
    return {name: finish(job, events) for name, (job, events) in started.items()}


def _cases() -> list[Any]:
    params = []
    for name, device in DEVICES.items():
        for stage in STAGES:
            for case in (f"by_hand_stage_{stage}", f"{device.strategy}_stage_{stage}"):
                params.append(pytest.param(name, case, id=f"{name}-{case}"))
    return params


@pytest.mark.parametrize(("device", "case"), _cases())
def test_zero_stage_trains_like_one_process(
    device: str, case: str, runs: dict[str, JobRun]
) -> None:
    outcome = runs[device].cases.get(case)
    assert outcome is not None, runs[device].output[-4000:]
    assert "error" not in outcome, outcome.get("error")
    testing.assert_parameters_close(outcome["result"], testing.reference_parameters(steps=3))


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_deepspeed_ran_on_the_generated_accelerator(device: str, runs: dict[str, JobRun]) -> None:
    run = runs[device]
    facts = run.cases["facts"]
    assert "error" not in facts, facts.get("error")
    assert facts["result"] == {
        "accelerator": DEVICES[device].accelerator,
        "device_name": f"{device}:0",  # rank 0's device
        "backend": DEVICES[device].backend,
        # installed before DeepSpeed was imported: the op builders it bound are the generated
        # accelerator's, which report themselves unavailable
        "fused_adam_builder": "stratcore.wrappers.deepspeed.accelerator.install",
    }
    # Both ranks selected their device through the vendor's function (the spec's set_device).
    selecting = {e["pid"] for e in run.events if e["event"] == "set_device"}
    assert len(selecting) == 2, run.events
