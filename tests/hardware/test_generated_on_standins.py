"""The generated tests of the hardware specs, run here against the stand-ins.

generated/tests/test_<spec>.py of HPU, TPU/XLA, IPU, Horovod, Bagua, Intel XPU, Ascend NPU,
Cambricon MLU, Moore Threads MUSA, AMD ROCm and the generic torch.accelerator device skip on a
machine without that hardware. Here they run in a fresh pytest process whose PYTHONPATH holds
the stand-in packages (tests/hardware/standins: CPU-only packages with the names and functions
of the real ones, backed by gloo) and ``standins/sitecustomize.py``, which gives the
processes of the stand-in accelerators the CPU and stands in for the parts of torch's device
builds the specs name (``standins/standin_torch.py``). The generated tests are not changed for
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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from stratcore.testing import clean_environ, watch
from stratcore.wrappers.deepspeed.config import cpu_has_fp16_kernels

from .support import GENERATED, REPO, install_standins


@dataclass(frozen=True)
class StandIn:
    """How to run one spec's generated tests against its stand-ins."""

    packages: tuple[str, ...]
    #: Accelerators whose processes get the CPU ('cuda:2': also present, with 2 devices).
    on_cpu: tuple[str, ...] = ()
    #: Parts of torch's device builds to stand in for (``standins/standin_torch.py``).
    torch: tuple[str, ...] = ()
    environ: dict[str, str] = field(default_factory=dict)
    #: Generated tests left to the hardware (a pytest -k expression), and why.
    hardware_only: tuple[str, ...] = ()
    #: Tests that must skip here, by name: the stand-in makes the device present.
    expected_skips: tuple[str, ...] = ()
    #: Only the tests without real runs (pytest -m "not slow"), and why.
    without_runs: str | None = None
    #: Tests that skip where this machine's CPU has no float16 kernels (DeepSpeed's CPU
    #: accelerator, which the stand-in devices' DeepSpeed runs on, trains in float16 only there).
    skipped_without_cpu_fp16: tuple[str, ...] = ()


#: Where the FSDP and DeepSpeed strategies of today's accelerators (``LIGHTNING``) train on
#: stand-ins. What is the device's own in them (its accelerator, its collective backend, its
#: precisions) is what its single-device and DDP strategies train through on every device; FSDP
#: and DeepSpeed add the same wrapping on every one. They train on two devices that cover the two
#: kinds of DeepSpeed accelerator (DeepSpeed's own for XPU, one generated from the spec for MUSA),
#: and DeepSpeed on MLU too, whose devices train in float16 where the others train in bfloat16.
#: Their registry names, options and precisions are checked on every device.
TRAINED_ON = {"fsdp": ("xpu", "musa"), "deepspeed": ("xpu", "musa", "mlu")}

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
            "test_real_run[xla_fsdp-trains_after_moves_that_replace_parameters]",
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
    # Horovod runs here for real on the CPU (tests/runtime/wrappers/horovod, and the spec's generated tests in
    # the suite): what is left to stand-ins is the spec on CUDA devices.
    "horovod": StandIn(
        packages=("horovod",),
        on_cpu=("cuda:2",),
        without_runs=(
            "the stand-in only makes horovod.torch importable; Horovod's runs are tested on the "
            "real package, on the CPU"
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
    # The devices of today's accelerators: their processes get the CPU, so where tensors live
    # ('gives_processes') is left to the hardware.
    "xpu": StandIn(
        packages=(),
        on_cpu=("xpu",),
        torch=("xpu", "xccl"),
        hardware_only=("gives_processes",),
        expected_skips=("test_accelerator[xpu-absent_is_a_clear_error]",),
    ),
    "npu": StandIn(
        packages=("torch_npu",),
        on_cpu=("npu",),
        hardware_only=("gives_processes",),
        expected_skips=("test_accelerator[npu-absent_is_a_clear_error]",),
    ),
    # MLU370 devices have no bfloat16: the stand-in's probe says so, and bfloat16 is refused.
    # float16 is then the other precision DeepSpeed can train in.
    "mlu": StandIn(
        packages=("torch_mlu",),
        on_cpu=("mlu",),
        environ={"STANDIN_MLU_BF16": "0"},
        hardware_only=("gives_processes",),
        expected_skips=("test_accelerator[mlu-absent_is_a_clear_error]",),
        skipped_without_cpu_fp16=("test_real_run[mlu_deepspeed-trains_in_another_precision]",),
    ),
    "musa": StandIn(
        packages=("torch_musa",),
        on_cpu=("musa",),
        hardware_only=("gives_processes",),
        expected_skips=("test_accelerator[musa-absent_is_a_clear_error]",),
    ),
    # A ROCm build drives torch's 'cuda' devices, which a CPU build cannot pretend to have:
    # the stand-in makes the accelerator present with 2 devices and the build a ROCm one.
    "rocm": StandIn(
        packages=(),
        on_cpu=("rocm:2",),
        torch=("hip", "nccl"),
        hardware_only=("gives_processes",),
        expected_skips=("test_accelerator[rocm-absent_is_a_clear_error]",),
    ),
    "generic": StandIn(
        packages=(),
        on_cpu=("generic",),
        torch=("accelerator",),
        hardware_only=("gives_processes",),
        expected_skips=("test_accelerator[generic-absent_is_a_clear_error]",),
    ),
}


def _junit_outcomes(report: Path) -> dict[str, dict[str, str]]:
    """Each test's outcome ('passed', 'failed', 'error', 'skipped') from pytest's JUnit XML,
    by test module (its file's stem)."""
    outcomes: dict[str, dict[str, str]] = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        # 'generated.tests.test_npu.TestStrategies': the module is the part named test_*.
        parts = case.get("classname", "").split(".")
        module = next((part for part in parts if part.startswith("test_")), "")
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
        outcomes.setdefault(module, {})[case.get("name", "")] = outcome
    return outcomes


#: Specs whose devices have Lightning plugins (Lightning 2.6 has none of these devices).
LIGHTNING = ("hpu", "xpu", "npu", "mlu", "musa", "rocm", "generic")

#: Where the Lightning plugins train on stand-ins (Trainer and Fabric, one and two processes).
#: A plugin is Lightning's strategy with the spec's generated classes behind it
#: (``stratcore.lightning``): what is the device's own (its accelerator, backend, precisions)
#: is what the spec's generated strategies train through on every device above. The plugins
#: train on a device of each kind: HPU for the devices of a vendor's package (NPU, MLU and MUSA
#: are such devices too), XPU for a device of torch's own build, ROCm for one that drives torch's
#: 'cuda' devices, and the generic torch.accelerator device. The registrations of every device's
#: plugins need no device: the suite checks them (generated/tests/test_lightning_<spec>.py).
LIGHTNING_TRAINED_ON = ("hpu", "xpu", "rocm", "generic")


@dataclass(frozen=True)
class StandInRun:
    """One pytest process running a spec's generated test modules on its stand-ins."""

    process: subprocess.CompletedProcess[str]
    outcomes: dict[str, dict[str, str]]

    def of(self, module: str) -> dict[str, str]:
        """The outcomes of one test module, asserting that it ran and nothing of it failed."""
        outcomes = self.outcomes.get(module, {})
        output = self.process.stdout[-6000:] + self.process.stderr[-2000:]
        assert self.process.returncode in (0, 1), f"pytest could not run {module}:\n{output}"
        assert outcomes, f"no test of {module} ran:\n{output}"
        failed = sorted(n for n, o in outcomes.items() if o not in ("passed", "skipped"))
        assert not failed, f"{module} failed on the stand-ins: {failed}\n{output}"
        return outcomes


def _run_on_standins(spec: str, folder: Path) -> StandInRun:
    """Run the generated test modules of ``spec`` (the Lightning target's too, for the specs of
    ``LIGHTNING_TRAINED_ON``) in one fresh pytest process on its stand-ins."""
    standin = STANDINS[spec]
    site = install_standins(folder, standin.packages, devices=True)
    environ = clean_environ(standin.environ)
    environ["PYTHONPATH"] = os.pathsep.join([str(site), str(GENERATED)])
    environ["STANDIN_ON_CPU"] = ",".join(standin.on_cpu)
    environ["STANDIN_TORCH"] = ",".join(standin.torch)
    modules = [f"test_{spec}.py"]
    if spec in LIGHTNING_TRAINED_ON:
        modules.append(f"test_lightning_{spec}.py")
    report = folder / "report.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += [f"--junitxml={report}", *(str(GENERATED / "tests" / m) for m in modules)]
    deselected = [*standin.hardware_only]
    if spec in LIGHTNING:
        deselected += [
            f"(test_real_run and {spec}_{kind}-)"
            for kind, devices in TRAINED_ON.items()
            if spec not in devices
        ]
    if deselected:
        command += ["-k", " and ".join(f"not {name}" for name in deselected)]
    if standin.without_runs:
        command += ["-m", "not slow"]
    process = watch.run(command, cwd=REPO, env=environ)
    return StandInRun(process, _junit_outcomes(report) if report.is_file() else {})


@pytest.fixture(scope="module")
def standin_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], StandInRun]:
    """The stand-in run of a spec, made once for both tests that read it (they are in one
    xdist group): starting pytest, torch and Lightning costs more than many of its tests."""
    runs: dict[str, StandInRun] = {}

    def run(spec: str) -> StandInRun:
        if spec not in runs:
            runs[spec] = _run_on_standins(spec, tmp_path_factory.mktemp(f"standins-{spec}"))
        return runs[spec]

    return run


def _grouped(specs: Iterable[str]) -> list[Any]:
    return [pytest.param(spec, marks=pytest.mark.xdist_group(f"standins-{spec}")) for spec in specs]


@pytest.mark.slow
@pytest.mark.parametrize("spec", _grouped(LIGHTNING_TRAINED_ON))
def test_lightning_plugins_of_the_spec_train_on_its_standins(
    spec: str, standin_run: Callable[[str], StandInRun]
) -> None:
    """The Lightning target's tests of the spec, with its devices standing in on the CPU: the
    Trainer and Fabric plugins register under the spec's names, and a Trainer (built with
    ``accelerator="<device>", strategy="<name>"`` after ``import stratlib.lightning.pytorch``)
    and a Fabric loop train on one and on two processes, over the stand-in backend with the
    spec's emulated reductions, like one process. The FSDP and DeepSpeed plugins skip: Lightning's
    FSDPStrategy wraps the model in torch's FSDP1, which needs a device other than the CPU, and
    its DeepSpeedStrategy needs device indices, which the CPU's devices lack."""
    pytest.importorskip("lightning")
    outcomes = standin_run(spec).of(f"test_lightning_{spec}")
    skipped = sorted(name for name, outcome in outcomes.items() if outcome == "skipped")
    refused = [
        n
        for n in outcomes
        if "trains_like_one_process" in n and ("_fsdp" in n or "_deepspeed" in n)
    ]
    assert skipped == sorted(refused), outcomes
    trained = [n for n, o in outcomes.items() if o == "passed" and "trains_like_one_process" in n]
    assert len(trained) >= 4, outcomes  # Trainer and Fabric, one and two processes


@pytest.mark.slow
@pytest.mark.parametrize("spec", _grouped(STANDINS))
def test_generated_tests_of_the_spec_pass_on_its_standins(
    spec: str, standin_run: Callable[[str], StandInRun]
) -> None:
    standin = STANDINS[spec]
    outcomes = standin_run(spec).of(f"test_{spec}")
    skipped = sorted(name for name, outcome in outcomes.items() if outcome == "skipped")
    expected = list(standin.expected_skips)
    if not cpu_has_fp16_kernels():
        expected += standin.skipped_without_cpu_fp16
    assert skipped == sorted(
        expected
    ), f"expected only {expected} to skip on the stand-ins, skipped: {skipped}"
    for kind, devices in TRAINED_ON.items():
        runs = [n for n in outcomes if n.startswith(f"test_real_run[{spec}_{kind}-")]
        if spec in devices:
            # (their skips, if any, are among the expected ones above)
            assert any(outcomes[n] == "passed" for n in runs), (kind, outcomes)
        elif spec in LIGHTNING:
            assert not runs, f"{kind} trains on the stand-ins of {devices} only: {runs}"
