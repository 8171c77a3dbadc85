"""`stratgen new NAME`: a few questions (or flags and --defaults), a commented spec, rendered."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from stratcore.testing import watch

from stratgen.cli import Console, build_parser
from stratgen.commands.handlers import config_from
from stratgen.commands.new_spec import new_spec
from stratgen.project import Project
from tests.support.user_projects import PACKAGE, source_env, stratgen, stratgen_process


class Answers:
    """Stands in for ``input``: gives the answers in order and records the prompts."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if not self.answers:
            raise EOFError
        return self.answers.pop(0)


def run_new(project: Path, *argv: str, ask: Answers) -> tuple[int, str]:
    args = build_parser().parse_args(["new", *argv, "--project", str(project)])
    out = io.StringIO()
    code = new_spec(args, Project(config_from(args)), Console(out, out, color=False), ask=ask)
    return code, out.getvalue()


def spec_of(project: Path, name: str) -> dict:
    return yaml.safe_load((project / "specs" / f"{name}.yaml").read_text())


def test_questions_write_a_spec_and_render_it(new_project: Path) -> None:
    ask = Answers("fastnet", "", "spawn", "", "bf17", "bf16")
    code, output = run_new(new_project, "fast_ddp", ask=ask)
    assert code == 0, output
    assert [p.split(" (")[0].split(":")[0] for p in ask.prompts] == [
        "Accelerator it runs on",
        "Kind of strategy",
        "How processes start",
        "Collective backend",
        "Default precision",
        "Default precision",  # asked again after a wrong answer
    ]
    assert "precision 'bf17' is not one of" in output
    spec = spec_of(new_project, "fast_ddp")
    assert spec["accelerator"]["name"] == "fastnet"
    assert spec["accelerator"]["class_name"] == "FastnetAccelerator"
    (strategy,) = spec["strategies"]
    assert strategy == {
        "name": "fast_ddp",
        "class_name": "FastDdpStrategy",
        "extends": "ddp",
        "launcher": "spawn",
        "backend": "auto",
        "accelerators": ["fastnet"],
        "precision": {"default": "bf16-mixed"},
        "description": strategy["description"],
    }
    text = (new_project / "specs" / "fast_ddp.yaml").read_text()
    assert "# " in text.split("strategies:")[1]  # commented for whoever edits it next
    package = new_project / "src" / PACKAGE
    assert (package / "strategies" / "fast_ddp.py").is_file()
    assert (package / "accelerators" / "fastnet.py").is_file()
    assert "created tests/generated/test_fast_ddp.py" in output
    assert stratgen("check", "--project", new_project).code == 0


def test_single_device_skips_launcher_and_backend(new_project: Path) -> None:
    ask = Answers("cpu", "single_device", "64")
    code, output = run_new(new_project, "solo", ask=ask)
    assert code == 0, output
    assert len(ask.prompts) == 3
    (strategy,) = spec_of(new_project, "solo")["strategies"]
    assert strategy["base"] == "single_device"
    assert strategy["precision"] == {"default": "64-true"}
    assert "launcher" not in strategy and "backend" not in strategy
    assert "accelerator" not in spec_of(new_project, "solo")  # cpu exists already


def test_flags_answer_their_questions(new_project: Path) -> None:
    ask = Answers("32-true")
    code, output = run_new(
        new_project,
        "gloo_ddp",
        "--accelerator",
        "toy",
        "--base",
        "parallel",
        "--launcher",
        "fork",
        "--backend",
        "gloo",
        ask=ask,
    )
    assert code == 0, output
    assert len(ask.prompts) == 1 and ask.prompts[0].startswith("Default precision")
    # toy's spec limits its precisions; the question lists only those.
    assert "(32-true, bf16-mixed, bf16-true)" in ask.prompts[0]
    (strategy,) = spec_of(new_project, "gloo_ddp")["strategies"]
    assert (strategy["launcher"], strategy["backend"], strategy["accelerators"]) == (
        "fork",
        "gloo",
        ["toy"],
    )


def test_end_of_input_writes_nothing(new_project: Path) -> None:
    with pytest.raises(Exception, match="no answer to"):
        run_new(new_project, "halfway", ask=Answers("cpu"))
    assert not (new_project / "specs" / "halfway.yaml").exists()


def test_defaults_without_a_terminal(new_project: Path) -> None:
    result = stratgen_process(
        "new", "quiet_ddp", "--defaults", "--precision", "bf16-mixed", "--project", new_project
    )
    assert result.returncode == 0, result.stderr
    (strategy,) = spec_of(new_project, "quiet_ddp")["strategies"]
    assert strategy["extends"] == "ddp"
    assert strategy["launcher"] == "popen"
    assert strategy["accelerators"] == ["cpu"]
    assert strategy["precision"] == {"default": "bf16-mixed"}
    assert (new_project / "src" / PACKAGE / "strategies" / "quiet_ddp.py").is_file()


def test_no_terminal_and_no_defaults_is_refused(new_project: Path) -> None:
    result = stratgen_process("new", "asked", "--project", new_project)
    assert result.returncode == 2
    assert "no terminal" in result.stderr and "--defaults" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (new_project / "specs" / "asked.yaml").exists()
    assert not (new_project / "src").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["Bad-Name", "--defaults"], "NAME 'Bad-Name' must be a lower_snake_case name"),
        (["x", "--defaults", "--precision", "fp8"], "--precision: precision 'fp8' is not one of"),
        (
            ["x", "--defaults", "--accelerator", "toy", "--precision", "16-mixed"],
            "is not supported by accelerator 'toy'",
        ),
        (
            ["x", "--defaults", "--base", "single_device", "--launcher", "spawn"],
            "--launcher applies to parallel",
        ),
        (["x", "--defaults", "--backend", "nccl2"], "backend 'nccl2' is not one of"),
        (["toy", "--defaults"], "specs/toy.yaml already exists"),
        (["x", "--from", "other.yaml"], "either a NAME or --from FILE"),
        ([], "stratgen new needs a NAME"),
    ],
)
def test_bad_answers_are_clear_errors(new_project: Path, argv: list[str], message: str) -> None:
    before = sorted(p.name for p in (new_project / "specs").iterdir())
    result = stratgen("new", *argv, "--project", new_project)
    assert result.code == 2
    assert message in result.err
    assert sorted(p.name for p in (new_project / "specs").iterdir()) == before


def test_force_replaces_a_spec(generated_project: Path) -> None:
    result = stratgen(
        "new",
        "toy",
        "--defaults",
        "--accelerator",
        "toy",
        "--force",
        "--project",
        generated_project,
    )
    assert result.code == 0, result.err
    assert spec_of(generated_project, "toy")["strategies"][0]["name"] == "toy"


def converse(command: list[str], answers: list[str], cwd: Path) -> tuple[int, str]:
    """Run ``command`` on a pseudo-terminal, typing an answer after each prompt. It fails if
    the command writes nothing for ``watch.STALL`` seconds (the prompts come within moments)."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=source_env(),
        stdin=follower,
        stdout=follower,
        stderr=follower,
        close_fds=True,
    )
    os.close(follower)
    transcript = b""
    pending = list(answers)
    last_output = time.monotonic()
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 0.2)
            assert time.monotonic() - last_output < watch.STALL, (
                f"no output for {watch.STALL:g} s, waiting for a prompt or the end:\n"
                + transcript.decode(errors="replace")
            )
            if ready:
                last_output = time.monotonic()
                try:
                    chunk = os.read(leader, 4096)
                except OSError:  # the process closed the terminal
                    break
                if not chunk:
                    break
                transcript += chunk
                if transcript.rstrip().endswith(b"]:") and pending:
                    os.write(leader, pending.pop(0).encode() + b"\n")
            elif process.poll() is not None:
                break
        code = process.wait()  # it closed the terminal: it is ending
    finally:
        if process.poll() is None:
            process.kill()
        os.close(leader)
    return code, transcript.decode(errors="replace").replace("\r\n", "\n")


def test_questions_on_a_real_terminal(new_project: Path) -> None:
    code, transcript = converse(
        [sys.executable, "-m", "stratgen", "new", "term_ddp"],
        ["toy", "parallel", "external", "auto", "bf16-true"],
        cwd=new_project,
    )
    assert code == 0, transcript
    offered = re.search(r"Accelerator it runs on \(([^)]*)\)", transcript)
    assert offered is not None, transcript
    assert {"cpu", "cuda", "toy"} <= set(offered.group(1).split(", "))
    assert "added   specs/term_ddp.yaml" in transcript
    (strategy,) = spec_of(new_project, "term_ddp")["strategies"]
    assert strategy["launcher"] == "external"
    assert strategy["precision"] == {"default": "bf16-true"}

    # The generated tests of the new spec that need no training run check it through the
    # runtime: its registry name, options and precisions.
    env = {k: v for k, v in source_env().items() if k != "PYTHONPATH"}
    facts = watch.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/generated/test_term_ddp.py",
            "-m",
            "not slow",
        ],
        cwd=new_project,
        env=env,
    )
    assert facts.returncode == 0, facts.stdout[-3000:]
    assert " passed" in facts.stdout
