"""The generated tests of the hardware specs, run here against the stand-ins.

generated/tests/test_<spec>.py of HPU, TPU/XLA, IPU, Horovod, Bagua, Intel XPU, Ascend NPU,
Cambricon MLU, Moore Threads MUSA, AMD ROCm and the generic torch.accelerator device skip on a
machine without that hardware. Here they run in a fresh pytest process whose PYTHONPATH holds
the stand-in packages (tests/hardware/standins: packages with the names and functions of the
real ones) and ``standins/sitecustomize.py``. The generated tests are not changed for this: they
find their device present and run.

Two kinds of device:

- On the test device (``ON_THE_TEST_DEVICE``): NPU, MLU and MUSA, whose stand-in packages load
  the project's real non-CPU test device (tests/support/testdevice) under the vendor's device
  type and backend name, as the real PrivateUse1 extensions do, and the generic device, which
  torch loads at start (backend autoload). Tensors live on ``npu:1``, collectives run the
  backend registered for the device, autocast and the GradScaler work on its type.
- On the CPU: HPU, TPU/XLA, IPU, Horovod's and Bagua's CUDA, XPU and ROCm, devices of torch's own
  builds or of packages that are no PrivateUse1 extension. ``sitecustomize`` gives their
  processes the CPU and stands in for the parts of torch's device builds the specs name
  (``standins/standin_torch.py``); where tensors live (the devices' type) is left to the
  hardware.

What only the real hardware can check either way: what the device computes and how fast, and the
vendor's own kernels and collectives (here the test device's host kernels and gloo underneath the
declared backend's rules).
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


#: The specs whose devices are real here: the project's test device (tests/support/testdevice)
#: under the vendor's device type (the stand-in packages of the PrivateUse1 extensions load it),
#: or as torch finds it (generic). Everything of theirs trains on it, nothing is left to the
#: hardware but speed and the vendor's own kernels and collectives.
ON_THE_TEST_DEVICE = ("npu", "mlu", "musa", "generic")

#: Where the FSDP and DeepSpeed strategies of today's accelerators (``LIGHTNING``) train here:
#: on every device that is real here, and, among those whose processes get the CPU, on XPU
#: (DeepSpeed's own accelerator class, where the others' are generated from their specs). What
#: is the device's own in them (its accelerator, backend, precisions) is what its single-device
#: and DDP strategies train through on every device; FSDP and DeepSpeed add the same wrapping on
#: every one. Their registry names, options and precisions are checked on every device.
TRAINED_ON = {
    "fsdp": ("xpu", *ON_THE_TEST_DEVICE),
    "deepspeed": ("xpu", *ON_THE_TEST_DEVICE),
}

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
    # The devices of the PrivateUse1 extensions are real here: each stand-in package renames the
    # project's test device to the vendor's device type and registers the vendor's backend name
    # for it, as the real extension does, so tensors live on npu:N, mlu:N, musa:N.
    "npu": StandIn(
        packages=("torch_npu",),
        # DeepSpeed's NPU accelerator reads the CANN toolkit's folder when it hands out an op
        # builder (deepspeed/ops/op_builder/npu/builder.py: installed_cann_path raises KeyError
        # where ASCEND_HOME_PATH is unset); CANN's default folder, which this machine lacks.
        # torch_npu declares the entry point `torch.backends: torch_npu = torch_npu:_autoload`
        # (its setup.py), so `import torch` loads it in every process, spawned ranks included,
        # before they unpickle an 'npu' device: the test device's own entry point does that here.
        environ={
            "ASCEND_HOME_PATH": "/usr/local/Ascend/ascend-toolkit/latest",
            "STRATGEN_TESTDEVICE": "npu:hccl",
        },
        expected_skips=("test_accelerator[npu-absent_is_a_clear_error]",),
    ),
    # MLU370 devices have no bfloat16: the stand-in's probe says so, and bfloat16 is refused.
    # float16 is then the other precision DeepSpeed trains in, on DeepSpeed's MLU accelerator.
    "mlu": StandIn(
        packages=("torch_mlu",),
        environ={"STANDIN_MLU_BF16": "0"},
        expected_skips=("test_accelerator[mlu-absent_is_a_clear_error]",),
    ),
    "musa": StandIn(
        packages=("torch_musa",),
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
    # The generic device is the project's test device as torch finds it: torch's backend
    # autoload loads it at `import torch` (its 'torch.backends' entry point, as a vendor's
    # extension is loaded), and torch.accelerator reports it.
    "generic": StandIn(
        packages=(),
        environ={"STRATGEN_TESTDEVICE": "testdev"},
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

#: Where the Lightning plugins train here (Trainer and Fabric, one and two processes, every
#: strategy the spec has). A plugin is Lightning's strategy with the spec's generated classes
#: behind it (``stratcore.lightning``): what is the device's own (its accelerator, backend,
#: precisions) is what the spec's generated strategies train through on every device above. The
#: plugins train on a device of each kind: on the test device as NPU (a vendor's PrivateUse1
#: extension, as MLU and MUSA are too) and as the generic torch.accelerator device, and, with
#: their processes on the CPU, on HPU (a vendor's package that is no PrivateUse1 extension),
#: XPU (a device of torch's own build) and ROCm (one that drives torch's 'cuda' devices). The
#: registrations of every device's plugins need no device: the suite checks them
#: (generated/tests/test_lightning_<spec>.py).
LIGHTNING_TRAINED_ON = ("npu", "generic", "hpu", "xpu", "rocm")


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
    """The Lightning target's tests of the spec: the Trainer and Fabric plugins register under
    the spec's names, and a Trainer (built with ``accelerator="<device>", strategy="<name>"``
    after ``import stratlib.lightning.pytorch``) and a Fabric loop train on one and on two
    processes, over the spec's backend with its emulated reductions, like one process. On the
    test device every plugin trains. Where the device's processes get the CPU, the FSDP and
    DeepSpeed plugins skip: Lightning's FSDPStrategy wraps the model in torch's FSDP1, which
    needs a device other than the CPU, and its DeepSpeedStrategy needs device indices, which the
    CPU's devices lack."""
    pytest.importorskip("lightning")
    outcomes = standin_run(spec).of(f"test_lightning_{spec}")
    skipped = sorted(name for name, outcome in outcomes.items() if outcome == "skipped")
    refused = [
        n
        for n in outcomes
        if "trains_like_one_process" in n and ("_fsdp" in n or "_deepspeed" in n)
    ]
    assert skipped == ([] if spec in ON_THE_TEST_DEVICE else sorted(refused)), outcomes
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
