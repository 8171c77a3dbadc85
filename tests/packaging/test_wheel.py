"""The wheel: what it contains, and every command working from an installation of it, in a
folder far from this checkout."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from this checkout."""
    out = tmp_path_factory.mktemp("dist")
    if importlib.util.find_spec("hatchling") and importlib.util.find_spec("build"):
        command = [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(out),
            str(ROOT),
        ]
    else:  # pip builds it in an isolated environment, fetching hatchling
        command = [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--wheel-dir",
            str(out),
            str(ROOT),
        ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (built,) = out.glob("stratgen-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment with the wheel installed (without its dependencies).

    The dependencies (torch, jinja2, black, copier, ...) come from the environment running the
    tests, through a path file: plain paths, so that no path file of that environment (an
    editable install of this checkout, for one) takes effect in the new one.
    """
    folder = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120
    )
    python = folder / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    outer = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(purelib, "outer_dependencies.pth").write_text("\n".join(sorted(outer)) + "\n")
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return folder


def test_wheel_contents(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "stratgen = stratgen.cli:main" in archive.read(entry_points).decode()
    for spec in (ROOT / "specs").glob("*.yaml"):
        assert f"stratgen/specs/{spec.name}" in names
    for template in (ROOT / "templates").rglob("*"):
        if template.is_file() and "__pycache__" not in template.parts:
            assert f"stratgen/{template.relative_to(ROOT).as_posix()}" in names, template
    assert "stratgen/templates/project/copier.yml" in names
    assert "stratgen/templates/project/.gitignore.jinja" in names
    assert "stratgen/templates/project/.github/workflows/ci.yml" in names
    for module in (
        "__init__.py",
        "py.typed",
        "registry.py",
        "core/strategy.py",
        "strategies/ddp.py",
    ):
        assert f"stratlib/{module}" in names
    assert "stratgen/cli.py" in names and "stratgen/scaffold.py" in names
    assert not any(n.startswith(("tests/", "generated/", "examples/")) for n in names)


def run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_installed_commands_work_from_any_folder(venv: Path, tmp_path: Path) -> None:
    stratgen = str(venv / "bin" / "stratgen")
    where = run(
        venv,
        str(venv / "bin" / "python"),
        "-c",
        "import stratgen, stratlib; from stratgen.project import resource_dir; "
        "print(stratgen.__file__); print(stratlib.__file__); print(resource_dir('specs'))",
        cwd=tmp_path,
    )
    assert where.returncode == 0, where.stderr
    for line in where.stdout.splitlines():
        assert line.startswith(str(venv)), f"{line} is not from the installed wheel"

    help_ = run(venv, stratgen, "--help", cwd=tmp_path)
    assert help_.returncode == 0 and "generate" in help_.stdout and "init" in help_.stdout
    listing = run(venv, stratgen, "list", cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert "DDPStrategy" in listing.stdout and "yes (cpu)" in listing.stdout
    schema = run(venv, stratgen, "schema", cwd=tmp_path)
    assert schema.returncode == 0, schema.stderr
    assert json.loads(schema.stdout)["title"] == "stratgen spec file"

    made = run(
        venv, stratgen, "init", "proj", "--defaults", "--package", "wheel_strategies", cwd=tmp_path
    )
    assert made.returncode == 0, made.stderr
    project = tmp_path / "proj"
    generated = run(venv, stratgen, "generate", cwd=project)
    assert generated.returncode == 0, generated.stderr
    assert (project / "src" / "wheel_strategies" / "strategies" / "toy_ddp.py").is_file()
    checked = run(venv, stratgen, "check", cwd=project)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    validated = run(venv, stratgen, "validate", "specs/toy.yaml", cwd=project)
    assert validated.returncode == 0, validated.stderr
    added = run(
        venv, stratgen, "new", "wheel_ddp", "--defaults", "--accelerator", "toy", cwd=project
    )
    assert added.returncode == 0, added.stderr
    assert run(venv, stratgen, "check", cwd=project).returncode == 0

    # The user's package imports with the installed environment and builds its strategies.
    used = run(
        venv,
        str(venv / "bin" / "python"),
        "-c",
        "import wheel_strategies as w; s = w.get_strategy('wheel_ddp', devices=2); "
        "print(type(s).__name__, s.accelerator.accelerator_name, len(s.parallel_devices))",
        cwd=project / "src",
    )
    assert used.returncode == 0, used.stderr
    assert used.stdout.split() == ["WheelDdpStrategy", "toy", "2"]

    # Mistakes outside a project are clean errors, not tracebacks.
    outside = run(venv, stratgen, "check", cwd=tmp_path)
    assert outside.returncode == 2 and "Traceback" not in outside.stderr
