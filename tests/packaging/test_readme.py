"""README.md: generated sections are current, and its two commands are what CI runs."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from stratcore import watch

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _gen_readme() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_readme", ROOT / "scripts" / "gen_readme.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_sections_are_current() -> None:
    gen = _gen_readme()
    text = README.read_text(encoding="utf-8")
    assert gen.render(text) == text, "README.md is stale: run `python scripts/gen_readme.py`"


def test_a_stale_section_is_caught(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gen = _gen_readme()
    stale = tmp_path / "README.md"
    text = README.read_text(encoding="utf-8")
    stale.write_text(text.replace("| `ddp` |", "| `ddp_renamed` |", 1), encoding="utf-8")
    assert gen.main(["--check", "--readme", str(stale)]) == 1
    assert "generated sections are stale" in capsys.readouterr().out
    assert gen.main(["--readme", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == text


def test_every_spec_key_is_documented() -> None:
    from stratgen.jsonschema import spec_schema

    text = README.read_text(encoding="utf-8")
    reference = text.split("<!-- BEGIN GENERATED: spec-reference -->")[1]
    for name, definition in spec_schema()["$defs"].items():
        assert f"#### {name}\n" in reference
        for key in definition["properties"]:
            assert f"| `{key}` |" in reference, f"{name}.{key}"


def test_the_two_commands_are_the_ci_scripts() -> None:
    text = README.read_text(encoding="utf-8")
    commands = re.findall(r"^bash (\.ci/\w+)", text, re.M)
    assert commands[:2] == [".ci/main", ".ci/run"]
    run = (ROOT / ".ci" / "run").read_text()
    assert "bash .ci/setup" in run and "bash .ci/test" in run
    setup = (ROOT / ".ci" / "setup").read_text()
    # torch first, alone, then the runtime, stratlib and the generator with its extras.
    installs = 'pip_install -e runtime -e generated -e ".[$EXTRAS]"'
    assert setup.index("pip_install $TORCH_INSTALL") < setup.index(installs)
    assert 'TORCH_INSTALL="${TORCH_INSTALL:-torch==2.13.0}"' in setup
    for script in ("setup", "test", "run", "main"):
        path = ROOT / ".ci" / script
        assert os.access(path, os.X_OK), f".ci/{script} is not executable"
        syntax = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert syntax.returncode == 0, syntax.stderr


@pytest.mark.slow
def test_the_training_snippet_runs(tmp_path: Path) -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("### Train with a generated strategy", 1)[1]
    snippet = section.split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "snippet.py"
    script.write_text(snippet, encoding="utf-8")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MASTER_", "LOCAL_RANK", "WORLD_SIZE"))
    }
    env["PYTHONPATH"] = str(ROOT / "generated")
    result = watch.run([sys.executable, str(script)], cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    # Both ranks ran the script; only rank 0 printed.
    assert len(re.findall(r"^mean loss over both ranks: -?[0-9.]+$", result.stdout, re.M)) == 1
    assert (tmp_path / "ckpt" / "last.ckpt").is_file()
