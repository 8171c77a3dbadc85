"""The wheel: what it contains, and every command working from an installation of it, in a
folder far from this checkout."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from stratcore.testing import watch

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


#: Distribution -> the folder holding its pyproject.toml.
DISTRIBUTIONS = {"stratgen": ROOT, "stratcore": ROOT / "runtime", "stratlib": ROOT / "generated"}


def _build(source: Path, out: Path) -> None:
    if importlib.util.find_spec("hatchling") and importlib.util.find_spec("build"):
        command = [sys.executable, "-m", "build", "--wheel", "--no-isolation"]
        command += ["--outdir", str(out), str(source)]
    else:  # pip builds it in an isolated environment, fetching hatchling
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps"]
        command += ["--wheel-dir", str(out), str(source)]
    result = watch.run(command)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The three wheels built from this checkout: the generator, the runtime, stratlib."""
    out = tmp_path_factory.mktemp("dist")
    for source in DISTRIBUTIONS.values():
        _build(source, out)
    return {name: next(out.glob(f"{name}-*.whl")) for name in DISTRIBUTIONS}


def _venv(folder: Path, wheels: list[Path]) -> Path:
    """A new virtual environment with ``wheels`` installed (without their dependencies).

    The dependencies (torch, jinja2, black, copier, ...) come from the environment running the
    tests, through a path file: plain paths, so that no path file of that environment (an
    editable install of this checkout, for one) takes effect in the new one.
    """
    watch.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    outer = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    # The test device is installed editable there, and torch imports its entry point at
    # `import torch` (backend autoload): its source folder goes along, or every process fails.
    device = importlib.util.find_spec("stratgen_testdevice")
    if device is not None and device.origin is not None:
        outer.add(str(Path(device.origin).parents[1]))
    Path(purelib, "outer_dependencies.pth").write_text("\n".join(sorted(outer)) + "\n")
    installed = watch.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            *map(str, wheels),
        ]
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return folder


@pytest.fixture(scope="module")
def venv(wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generator, the runtime and stratlib installed from their wheels."""
    return _venv(tmp_path_factory.mktemp("venv") / "env", list(wheels.values()))


def _requires(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(metadata).decode().splitlines()
    return [line.split(": ", 1)[1] for line in lines if line.startswith("Requires-Dist: ")]


def _names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def test_each_distribution_needs_only_what_it_uses(wheels: dict[str, Path]) -> None:
    """The generator needs no torch; the runtime and stratlib need nothing of the generator."""

    def required(name: str) -> set[str]:
        return {
            re.split(r"[ ;<>=!~\[]", req, maxsplit=1)[0].lower()
            for req in _requires(wheels[name])
            if "extra ==" not in req
        }

    assert required("stratgen") == {"jinja2", "pyyaml", "black", "copier", "stratcore"}
    assert required("stratcore") == set()
    assert required("stratlib") == {"stratcore", "torch"}
    torch_extra = [r for r in _requires(wheels["stratcore"]) if r.startswith("torch")]
    assert torch_extra and all("extra == 'torch'" in r.replace('"', "'") for r in torch_extra)


def test_wheel_contents(wheels: dict[str, Path]) -> None:
    wheel = wheels["stratgen"]
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "stratgen = stratgen.__main__:main" in archive.read(entry_points).decode()
    for spec in (ROOT / "specs").glob("*.yaml"):
        assert f"stratgen/specs/{spec.name}" in names
    package = ROOT / "generator" / "stratgen"
    for folder in ("templates", "commands/project_template"):
        for template in (package / folder).rglob("*"):
            if template.is_file() and "__pycache__" not in template.parts:
                assert f"stratgen/{template.relative_to(package).as_posix()}" in names, template
    assert "stratgen/commands/project_template/copier.yml" in names
    assert "stratgen/commands/project_template/.gitignore.jinja" in names
    assert "stratgen/commands/project_template/.github/workflows/ci.yml" in names
    assert "stratgen/cli.py" in names and "stratgen/commands/new_spec.py" in names
    assert not any(
        n.startswith(("tests/", "generated/", "examples/", "stratlib/", "stratcore/"))
        for n in names
    )
    runtime = _names(wheels["stratcore"])
    for module in (
        "__init__.py",
        "contract/__init__.py",
        "strategy.py",
        "registry.py",
        "version.py",
    ):
        assert f"stratcore/{module}" in runtime, module
    assert not any(n.startswith(("stratgen/", "stratlib/")) for n in runtime)
    package = _names(wheels["stratlib"])
    for module in ("__init__.py", "py.typed", "registry.py", "strategies/ddp.py"):
        assert f"stratlib/{module}" in package, module
    assert not any(n.startswith(("stratgen/", "stratcore/", "stratlib/core/")) for n in package)


def run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return watch.run(list(args), cwd=cwd, env=env)


def test_installed_commands_work_from_any_folder(venv: Path, tmp_path: Path) -> None:
    stratgen = str(venv / "bin" / "stratgen")
    where = run(
        venv,
        str(venv / "bin" / "python"),
        "-c",
        "import stratgen, stratlib; from stratgen.project import builtin_specs_dir; "
        "print(stratgen.__file__); print(stratlib.__file__); print(builtin_specs_dir())",
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
        "print(type(s).__name__, s.accelerator.name, len(s.parallel_devices))",
        cwd=project / "src",
    )
    assert used.returncode == 0, used.stderr
    assert used.stdout.split() == ["WheelDdpStrategy", "toy", "2"]

    # Mistakes outside a project are clean errors, not tracebacks.
    outside = run(venv, stratgen, "check", cwd=tmp_path)
    assert outside.returncode == 2 and "Traceback" not in outside.stderr


def test_wheel_installed_stratgen_checks_its_own_tree(venv: Path) -> None:
    """In stratgen's own checkout the specs are the built-ins: an installed stratgen must not
    load them twice."""
    checked = run(venv, str(venv / "bin" / "stratgen"), "check", cwd=ROOT)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "match the specs" in checked.stdout


def test_training_needs_the_runtime_and_torch_only(
    wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """With only the runtime's and stratlib's wheels installed, stratlib builds a strategy and
    nothing of the generator is imported (or even installed)."""
    folder = _venv(
        tmp_path_factory.mktemp("train-venv") / "env", [wheels["stratcore"], wheels["stratlib"]]
    )
    code = (
        "import importlib.util, sys, stratlib\n"
        "s = stratlib.get_strategy('ddp', accelerator='cpu', devices=2)\n"
        "print(type(s).__name__, len(s.parallel_devices))\n"
        "print(sorted(m for m in ('jinja2', 'yaml', 'black', 'copier', 'stratgen') "
        "if m in sys.modules))\n"
        "print(importlib.util.find_spec('stratgen.cli') is None)\n"
    )
    used = run(folder, str(folder / "bin" / "python"), "-c", code, cwd=folder)
    assert used.returncode == 0, used.stderr
    assert used.stdout.splitlines() == ["DDPStrategy 2", "[]", "True"]
