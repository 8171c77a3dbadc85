"""The generated tests of the hardware specs, run here against the stand-ins.

generated/tests/test_<spec>.py of HPU, TPU/XLA, IPU, Horovod and Bagua skip on a machine
without that hardware. Here they run in a fresh pytest process whose PYTHONPATH holds the
stand-in packages (tests/hardware/standins: CPU-only packages with the names and functions
of the real ones, backed by gloo) and ``standins/sitecustomize.py``, which gives the
processes of the stand-in accelerators the CPU. The generated tests are not changed for
this: they find their device present and run.

What only the real hardware can check, the runs below deselect or leave to it: where tensors
live (the devices' type), what the device computes and how fast, and the vendor's own
collectives (here gloo underneath the declared backend's rules).
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from stratcore import watch
from stratcore.testing import clean_environ

from .support import GENERATED, REPO, install_standins


@dataclass(frozen=True)
class StandIn:
    """How to run one spec's generated tests against its stand-ins."""

    packages: tuple[str, ...]
    #: Accelerators whose processes get the CPU ('cuda:2': also present, with 2 devices).
    on_cpu: tuple[str, ...] = ()
    environ: dict[str, str] = field(default_factory=dict)
    #: Generated tests left to the hardware (a pytest -k expression), and why.
    hardware_only: tuple[str, ...] = ()
    #: Tests that must skip here, by name: the stand-in makes the device present.
    expected_skips: tuple[str, ...] = ()
    #: Only the tests without real runs (pytest -m "not slow"), and why.
    without_runs: str | None = None


STANDINS = {
    "hpu": StandIn(
        packages=("habana_frameworks",),
        on_cpu=("hpu",),
        environ={"STANDIN_HPU_COUNT": "2"},
        hardware_only=("gives_processes",),
        expected_skips=("test_accelerator[hpu-absent_is_a_clear_error]",),
    ),
    "xla": StandIn(
        packages=("torch_xla",),
        on_cpu=("tpu",),
        environ={"STANDIN_TPU_DEVICES": "2"},
        hardware_only=("gives_processes",),
        expected_skips=(
            "test_accelerator[tpu-absent_is_a_clear_error]",
            # xla_fsdp's setup takes the module alone (XlaFullyShardedDataParallel flattens
            # the parameters), and the shared training scenarios set up a model and its
            # optimizer together.
            "test_real_run[xla_fsdp-checkpoint_round_trip]",
            "test_real_run[xla_fsdp-strategy_api_and_collectives]",
            "test_real_run[xla_fsdp-trains_in_another_precision]",
            "test_real_run[xla_fsdp-trains_like_one_process]",
        ),
    ),
    "ipu": StandIn(
        packages=("poptorch",),
        environ={"STANDIN_IPUS": "4"},
        expected_skips=("test_accelerator[ipu-absent_is_a_clear_error]",),
        without_runs=(
            "PopTorch compiles forward, loss, backward and step into one graph whose forward "
            "returns the loss; the generic training scenarios call the model for predictions "
            "(tests/hardware/test_ipu.py trains through the hooks instead)"
        ),
    ),
    "horovod": StandIn(
        packages=("horovod",),
        without_runs=(
            "horovodrun starts Horovod's processes, and the stand-in is a job of one process "
            "(tests/hardware/test_horovod.py runs the strategy against it)"
        ),
    ),
    "bagua": StandIn(
        packages=("bagua",),
        on_cpu=("cuda:2",),
        without_runs=(
            "Bagua runs on CUDA over NCCL, which no CPU stand-in provides "
            "(tests/hardware/test_bagua.py trains through the wrapper with the CPU accelerator)"
        ),
    ),
}


def _junit_outcomes(report: Path) -> dict[str, str]:
    """Each test's outcome ('passed', 'failed', 'error', 'skipped') from pytest's JUnit XML."""
    outcomes = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        name = case.get("name", "")
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
        outcomes[name] = outcome
    return outcomes


def _run_on_standins(
    spec: str, test_file: str, tmp_path: Path, extra: list[str]
) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """Run one generated test module in a fresh pytest process on ``spec``'s stand-ins."""
    standin = STANDINS[spec]
    site = install_standins(tmp_path, standin.packages)
    (site / "sitecustomize.py").write_bytes(
        (Path(__file__).parent / "standins" / "sitecustomize.py").read_bytes()
    )
    environ = clean_environ(standin.environ)
    environ["PYTHONPATH"] = os.pathsep.join([str(site), str(GENERATED)])
    environ["STANDIN_ON_CPU"] = ",".join(standin.on_cpu)
    report = tmp_path / "report.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += [f"--junitxml={report}", str(GENERATED / "tests" / test_file), *extra]
    process = watch.run(command, cwd=REPO, env=environ)
    return process, _junit_outcomes(report) if report.is_file() else {}


@pytest.mark.slow
def test_lightning_plugins_of_the_hpu_spec_train_on_its_standins(tmp_path: Path) -> None:
    """The Lightning target's tests of specs/hpu.yaml, with HPUs standing in on the CPU: the
    Trainer and Fabric plugins register, and train on one and on two processes (over the
    stand-in HCCL, with its emulated reductions) like one process."""
    pytest.importorskip("lightning")
    process, outcomes = _run_on_standins("hpu", "test_lightning_hpu.py", tmp_path, [])
    assert process.returncode == 0, process.stdout[-6000:] + process.stderr[-2000:]
    assert len(outcomes) == 6 and set(outcomes.values()) == {"passed"}, outcomes


@pytest.mark.slow
@pytest.mark.parametrize("spec", list(STANDINS))
def test_generated_tests_of_the_spec_pass_on_its_standins(spec: str, tmp_path: Path) -> None:
    standin = STANDINS[spec]
    site = install_standins(tmp_path, standin.packages)
    (site / "sitecustomize.py").write_bytes(
        (Path(__file__).parent / "standins" / "sitecustomize.py").read_bytes()
    )
    environ = clean_environ(standin.environ)
    environ["PYTHONPATH"] = os.pathsep.join([str(site), str(GENERATED)])
    environ["STANDIN_ON_CPU"] = ",".join(standin.on_cpu)
    report = tmp_path / "report.xml"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
        str(GENERATED / "tests" / f"test_{spec}.py"),
    ]
    if standin.hardware_only:
        command += ["-k", " and ".join(f"not {name}" for name in standin.hardware_only)]
    if standin.without_runs:
        command += ["-m", "not slow"]
    process = watch.run(command, cwd=REPO, env=environ)
    outcomes = _junit_outcomes(report) if report.is_file() else {}
    assert process.returncode == 0, (
        f"the generated tests of specs/{spec}.yaml failed on the stand-ins:\n"
        + process.stdout[-6000:]
        + process.stderr[-2000:]
    )
    skipped = sorted(name for name, outcome in outcomes.items() if outcome == "skipped")
    assert skipped == sorted(standin.expected_skips), (
        f"expected only {list(standin.expected_skips)} to skip on the stand-ins, "
        f"skipped: {skipped}"
    )
    assert outcomes, "no generated test ran"
