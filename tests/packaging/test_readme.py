"""README.md: generated sections are current, and its two commands are what CI runs."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

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
    # torch first, alone, then the project with its extras.
    assert setup.index("pip_install $TORCH_INSTALL") < setup.index('pip_install -e ".[$EXTRAS]"')
    assert 'TORCH_INSTALL="${TORCH_INSTALL:-torch==2.13.0}"' in setup
    for script in ("setup", "test", "run", "main"):
        path = ROOT / ".ci" / script
        assert os.access(path, os.X_OK), f".ci/{script} is not executable"
        syntax = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert syntax.returncode == 0, syntax.stderr
