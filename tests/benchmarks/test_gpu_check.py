"""The GPU check (``python -m benchmarks.gpu``) without a GPU, so that it cannot rot between runs
on GPU machines; and the parts of its harness that decide what runs and what the report says.

The dry run on the project's test device (``--device accelerator``: the generic spec's
strategies and plugins, the device's own backend, GradScaler and autocast on the device, its
memory counted by its device module) runs every check, small, and each must pass: the
strategies' and plugins' results equal the hand-written loops' within the precisions'
tolerances, the process groups run over the device's backend, the checkpoints resume. On the
CPU run only the checks whose path there is not the test device's: '16-mixed' without a
GradScaler, the model_parallel strategy and Lightning plugins with the built-in and Lightning's
own accelerators (the classes a GPU run uses), and the generic plugins' skipping.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from stratcore.testing import clean_environ, watch

ROOT = Path(__file__).resolve().parents[2]
# The checkout's `benchmarks` package, not fairscale's of the same name.
sys.path.insert(0, str(ROOT))

from benchmarks.gpu import plan, report, run, wheels  # noqa: E402
from benchmarks.gpu.report import Outcome  # noqa: E402

#: The test device, as torch finds it at start (backend autoload): one is all a check uses.
TEST_DEVICE = {"STRATGEN_TESTDEVICE": "testdev", "STRATGEN_TESTDEVICE_COUNT": "1"}
#: The checks the CPU run keeps (``--only``): see the module's notes.
ON_THE_CPU = ("single_device 16", "model_parallel", "generic")


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _dry_run(
    folder: Path, environ: dict[str, str], *options: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], dict[str, dict[str, Any]]]:
    """``python -m benchmarks.gpu OPTIONS``: the finished process, the JSON report and its
    checks by name."""
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "benchmarks.gpu", *options, "--out", str(folder)]
    done = watch.run(
        [*command, "--commit", "0123abc", "--wheels", str(folder / "no-wheels")],
        what=f"python -m benchmarks.gpu {' '.join(options)}",
        cwd=ROOT,
        env=environ,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    document = json.loads((folder / report.JSON).read_text(encoding="utf-8"))
    assert document["summary"]["counts"]["fail"] == 0
    assert document["machine"]["commit"] == "0123abc"
    assert document["machine"]["torch"].split("+")[0] in done.stdout
    return done, document, {c["name"]: c for c in document["checks"]}


def _expect_passed(found: dict[str, Any], check: plan.Check, device: str) -> bool:
    """Whether ``found`` passed, as it must unless the check is skipped here (which it must be
    for the reason the plan gives, a missing package's, or on the CPU the accelerator's)."""
    reasons = [plan.NEEDS[n] for n in check.needs if n == "accelerator" and device == "cpu"]
    reasons += [plan.NEEDS[n] for n in check.needs if n != "accelerator" and not _installed(n)]
    if reasons:
        assert (found["status"], found["figure"]) == ("skip", reasons[0]), found
        return False
    assert found["status"] == "pass", json.dumps(found, indent=1)[-4000:]
    assert found["conditions"] and all(c["ok"] for c in found["conditions"])
    assert found["seconds"] > 0
    return True


def _met(found: dict[str, Any]) -> set[str]:
    return {c["what"] for c in found["conditions"] if c["ok"]}


@pytest.mark.slow
def test_every_check_passes_on_the_test_device(tmp_path: Path) -> None:
    """Every check, through the generic spec, on the test device: its backend, its memory,
    GradScaler and autocast on it; no check skipped for want of an accelerator."""
    options = ("--device", "accelerator", "--size", "small")
    _, document, checks = _dry_run(tmp_path, clean_environ(TEST_DEVICE), *options)
    assert list(checks) == [c.name for c in plan.CHECKS]
    memory = "setup put the parameters in the device's memory"
    for check in plan.CHECKS:
        found = checks[check.name]
        if not _expect_passed(found, check, "accelerator"):
            continue
        details, met = found["details"], _met(found)
        if check.worker == "single":
            assert details["strategy"] == "generic_single"
            assert details["root_device"] == "testdev:0"
            assert {"trains on testdev", memory} <= met, met
            assert 0 < details["memory"]["parameter_bytes"] <= details["memory"]["peak_bytes"]
        elif check.worker == "parallel":
            assert details["strategy"] == "generic_" + check.args[1]
            assert details["backend"] == "testccl"
            assert {"a process group over testccl", "parameters on testdev", memory} <= met, met
            assert details["collectives"]["all_reduce"][1] == "testdev"
        else:
            assert details["strategy"].rsplit(".", 1)[-1].startswith("Generic")
            assert details["backend"] == "testccl"
            assert details["param_devices"] == ["testdev"]
    if checks["single_device 16-mixed"]["status"] == "pass":
        assert "a GradScaler on testdev" in _met(checks["single_device 16-mixed"])
    if checks["deepspeed_stage_2"]["status"] == "pass":
        assert checks["deepspeed_stage_2"]["details"]["zero"]["accelerator"] == "testdev"
    assert "compiled with aot_eager" in checks["ddp + torch.compile"]["figure"]
    machine = document["machine"]
    assert machine["checked on"] == "accelerator"
    assert machine["device name"] == "stratgen test device 0"
    assert (machine["size"], machine["collective backend"]) == ("small", "testccl")
    text = (tmp_path / report.MARKDOWN).read_text(encoding="utf-8")
    assert text.startswith("# GPU check on stratgen test device 0\n")
    for check in plan.CHECKS:
        assert f"| {check.name} | " in text
    assert "- commit: 0123abc" in text and "- date: " in text


@pytest.mark.slow
def test_the_checks_whose_path_differs_on_the_cpu_pass_there(tmp_path: Path) -> None:
    environ = clean_environ()
    environ.pop("STRATGEN_TESTDEVICE", None)
    only = [arg for text in ON_THE_CPU for arg in ("--only", text)]
    _, document, checks = _dry_run(tmp_path, environ, "--device", "cpu", *only)
    expected = [c for c in plan.CHECKS if any(text in c.name for text in ON_THE_CPU)]
    assert list(checks) == [c.name for c in expected]
    assert {c.name for c in expected} >= {"single_device 16-mixed", "Trainer model_parallel"}
    for check in expected:
        found = checks[check.name]
        if not _expect_passed(found, check, "cpu"):
            continue
        if check.worker != "single":
            assert "a process group over gloo" in _met(found)
        if check.worker == "lightning":  # the classes a GPU run uses, on Lightning's accelerator
            assert found["details"]["strategy"].endswith(".ModelParallelStrategy")
    single = checks["single_device 16-mixed"]
    assert "no GradScaler" in _met(single) and " step time x" in single["figure"]
    assert document["machine"]["checked on"] == "cpu"
    text = (tmp_path / report.MARKDOWN).read_text(encoding="utf-8")
    assert text.startswith("# GPU check on the CPU\n")


def _broken(name: str) -> plan.Check:
    return plan.Check(name, "no_such_worker", (), "nothing", 1.0)


def test_a_failing_check_fails_its_row_and_the_next_one_runs() -> None:
    env = run.worker_env()
    outcomes = run.run_checks(
        [_broken("first"), _broken("second")], "cpu", {"packages": {}}, (env, env), None
    )
    assert [o.status for o in outcomes] == ["fail", "fail"]
    for outcome in outcomes:
        assert outcome.figure == "the worker exited with 1 and wrote no result"
        assert "No module named benchmarks.gpu.workers.no_such_worker" in outcome.error
        assert outcome.seconds is not None


def test_a_failed_check_fails_the_exit_code_and_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plan, "CHECKS", (_broken("broken"),))
    code = run.main(["--device", "cpu", "--out", str(tmp_path), "--wheels", str(tmp_path)])
    assert code == 1
    text = (tmp_path / report.MARKDOWN).read_text(encoding="utf-8")
    assert "| broken | FAIL | the worker exited with 1 and wrote no result |" in text
    assert "## Failures\n\n### broken\n" in text
    assert "0 passed, 1 failed, 0 skipped, 0 left out" in text


def test_the_budget_leaves_out_what_it_cannot_fit() -> None:
    env = run.worker_env()
    checks = [plan.Check("long", "no_such_worker", (), "nothing", 30.0)]
    (outcome,) = run.run_checks(checks, "cuda", {"packages": {}}, (env, env), budget=10.0)
    assert outcome.status == "left out"
    assert outcome.seconds is None  # never started
    assert "had 10 s left; this check expects 30 s" in outcome.figure


def test_what_is_skipped_and_why() -> None:
    generic = next(c for c in plan.CHECKS if c.name == "Trainer generic_ddp")
    zero = next(c for c in plan.CHECKS if c.name == "deepspeed_stage_2")
    everything = {"packages": {"lightning": "2.6.6", "deepspeed": "0.19.8"}}
    assert run.skip_reason(generic, "cpu", everything) == plan.NEEDS["accelerator"]
    assert run.skip_reason(generic, "cuda", everything) is None
    assert run.skip_reason(zero, "cuda", everything) is None
    assert (
        run.skip_reason(zero, "cuda", {"packages": {"deepspeed": None}}) == plan.NEEDS["deepspeed"]
    )


def _devices(*kinds: str) -> dict[str, Any]:
    return {"devices": {kind: {"name": kind, "description": kind} for kind in kinds}}


def test_which_device_auto_chooses() -> None:
    """CUDA where torch sees a GPU (what a GPU report records), else the device
    torch.accelerator reports, else the CPU; and the size of the model for each."""
    assert run.choose_device("auto", _devices("cuda", "accelerator", "cpu")) == "cuda"
    assert run.choose_device("auto", _devices("accelerator", "cpu")) == "accelerator"
    assert run.choose_device("auto", _devices("cpu")) == "cpu"
    assert run.choose_device("accelerator", _devices("cuda", "accelerator", "cpu")) == "accelerator"
    assert run.choose_device("cpu", _devices("cuda", "cpu")) == "cpu"
    with pytest.raises(ValueError, match="--device cuda, but torch sees no CUDA device here"):
        run.choose_device("cuda", _devices("accelerator", "cpu"))
    with pytest.raises(ValueError, match=r"torch sees no device in torch\.accelerator here"):
        run.choose_device("accelerator", _devices("cpu"))
    assert [run.default_size(d) for d in run.DEVICES] == ["full", "full", "small"]


def test_a_device_that_is_not_here_is_a_mistake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The probe, in a process of its own, finds no accelerator without the test device (and
    with no GPU visible)."""
    monkeypatch.delenv("STRATGEN_TESTDEVICE", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    argv = ["--device", "accelerator", "--out", str(tmp_path / "out"), "--wheels", str(tmp_path)]
    assert run.main(argv) == 2
    assert "--device accelerator, but torch sees no device" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_checks_fit_the_budget() -> None:
    assert plan.gpu_seconds() <= plan.GPU_BUDGET
    assert len({c.name for c in plan.CHECKS}) == len(plan.CHECKS)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--budget", "0"], "--budget must be a positive number of seconds"),
        (["--device", "tpu"], "invalid choice: 'tpu'"),
    ],
)
def test_mistakes_on_the_command_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as raised:
        run.main(argv)
    assert raised.value.code == 2
    assert message in capsys.readouterr().err


def test_no_check_matching_only_is_a_mistake(capsys: pytest.CaptureFixture[str]) -> None:
    assert run.main(["--only", "nothing like it"]) == 2
    assert "no check's name contains nothing like it" in capsys.readouterr().err


# -- the commit, without git ----------------------------------------------------------------


def _git_folder(path: Path, head: str, refs: dict[str, str], packed: str = "") -> Path:
    path.mkdir(parents=True)
    (path / "HEAD").write_text(head + "\n")
    for ref, sha in refs.items():
        (path / ref).parent.mkdir(parents=True, exist_ok=True)
        (path / ref).write_text(sha + "\n")
    if packed:
        (path / "packed-refs").write_text(packed)
    return path


def test_the_commit_is_read_from_the_git_folder(tmp_path: Path) -> None:
    loose = _git_folder(tmp_path / "a", "ref: refs/heads/main", {"refs/heads/main": "a" * 40})
    assert report.read_git_head(loose) == "a" * 40
    packed = _git_folder(
        tmp_path / "b",
        "ref: refs/heads/gpu",
        {},
        f"# pack-refs with: peeled fully-peeled sorted\n{'b' * 40} refs/heads/gpu\n",
    )
    assert report.read_git_head(packed) == "b" * 40
    detached = _git_folder(tmp_path / "c", "c" * 40, {})
    assert report.read_git_head(detached) == "c" * 40


def test_the_commit_of_a_worktree(tmp_path: Path) -> None:
    common = _git_folder(tmp_path / "repo.git", "ref: refs/heads/main", {"refs/heads/x": "d" * 40})
    own = _git_folder(common / "worktrees" / "x", "ref: refs/heads/x", {})
    (own / "commondir").write_text("../..\n")
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / ".git").write_text(f"gitdir: {own}\n")
    assert report.read_git_head(checkout / ".git") == "d" * 40


def test_no_commit_where_nothing_tells(tmp_path: Path) -> None:
    assert report.read_git_head(tmp_path / ".git") is None
    (tmp_path / ".git").write_text("gitdir: /nowhere\n")
    assert report.read_git_head(tmp_path / ".git") is None
    assert report.commit(tmp_path, "given") == "given"


# -- the carried wheels ---------------------------------------------------------------------


def _wheel(folder: Path, name: str, version: str, *requires: str) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    lines = [f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}-{version}.dist-info/METADATA", "\n".join(lines) + "\n")
    return path


def test_the_wheels_carry_every_requirement(tmp_path: Path) -> None:
    carried = [
        _wheel(tmp_path, "deepspeed", "0.19.8", "hjson", "torch>=2.0.0", 'wandb; extra == "dev"'),
        _wheel(tmp_path, "hjson", "3.1.0"),
    ]
    assert wheels.missing(carried) == []
    carried.append(_wheel(tmp_path, "pydantic", "2.14.4", "pydantic-core==2.50.5"))
    assert wheels.missing(carried) == [
        "pydantic-2.14.4-py3-none-any.whl needs pydantic-core==2.50.5, which is neither "
        "carried nor there"
    ]
    carried.append(_wheel(tmp_path, "pydantic_core", "2.41.0"))
    assert wheels.missing(carried) == [
        "pydantic-2.14.4-py3-none-any.whl needs pydantic-core==2.50.5; 2.41.0 is carried"
    ]


def test_the_report_marks_failures() -> None:
    outcomes = [
        Outcome("a", "pass", "identical", "x", 1.0, 2.0),
        Outcome(
            "b",
            "fail",
            "off",
            "y|z",
            conditions=[{"what": "equal", "ok": False, "found": 0.5}],
            error="Traceback",
        ),
    ]
    text = report.markdown(outcomes, {"device name": "the CPU"}, {"verdict": "1 passed"})
    assert "| a | pass | identical | 1.0 (2) | x |" in text
    assert "| b | FAIL | off | - | y\\|z |" in text
    assert "- not met: equal (found: 0.5)" in text
