"""`stratgen init`: a new project from the copier template in generator/stratgen/commands/project_template."""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

import pytest
import stratcore
import yaml
from stratcore.testing import watch

from tests.support.user_projects import PACKAGE, init_project, stratgen, stratgen_process

# Before 1.0 each minor release of the runtime is a series of its own: a package generated now
# needs this minor release of stratcore, from its first patch release on.
_MAJOR, _MINOR = (int(n) for n in stratcore.__version__.split(".")[:2])
RUNTIME_REQUIREMENT = f"stratcore>={_MAJOR}.{_MINOR},<{_MAJOR}.{_MINOR + 1}"


def test_init_lays_out_a_project(new_project: Path) -> None:
    files = sorted(
        p.relative_to(new_project).as_posix() for p in new_project.rglob("*") if p.is_file()
    )
    assert files == [
        ".copier-answers.yml",
        ".github/workflows/ci.yml",
        ".gitignore",
        ".pre-commit-config.yaml",
        "README.md",
        "pyproject.toml",
        "specs/toy.yaml",
    ]
    pyproject = tomllib.loads((new_project / "pyproject.toml").read_text())
    assert pyproject["tool"]["stratgen"] == {
        "package": PACKAGE,
        "specs": "specs",
        "output": "src",
        "tests": "tests/generated",
    }
    assert pyproject["project"]["name"] == "acme"
    # The package needs its runtime and torch, never the generator.
    assert pyproject["project"]["dependencies"] == [RUNTIME_REQUIREMENT, "torch>=2.4"]
    assert pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == [f"src/{PACKAGE}"]

    answers = yaml.safe_load((new_project / ".copier-answers.yml").read_text())
    assert answers["package"] == PACKAGE
    assert answers["project_name"] == "acme"
    assert Path(answers["_src_path"]).name == "project_template"

    spec = yaml.safe_load((new_project / "specs" / "toy.yaml").read_text())
    assert spec["accelerator"]["name"] == "toy"
    assert spec["accelerator"]["device_type"] == "cpu"
    by_name = {s["name"]: s for s in spec["strategies"]}
    assert by_name["toy_ddp"]["extends"] == "ddp"  # a built-in spec
    assert by_name["toy_single"]["base"] == "single_device"

    workflow = yaml.safe_load((new_project / ".github/workflows/ci.yml").read_text())
    commands = [step.get("run", "") for step in workflow["jobs"]["test"]["steps"]]
    assert "stratgen check" in commands
    assert any(c.startswith("python -m pytest") for c in commands)
    hooks = yaml.safe_load((new_project / ".pre-commit-config.yaml").read_text())
    entries = [h["entry"] for repo in hooks["repos"] for h in repo["hooks"]]
    assert any(e.startswith("stratgen check") for e in entries)
    assert f"import {PACKAGE}" in (new_project / "README.md").read_text()


def test_generate_then_check_in_the_new_project(new_project: Path) -> None:
    assert stratgen("check", "--project", new_project).code == 1  # nothing generated yet
    generated = stratgen("generate", "--project", new_project)
    assert generated.code == 0, generated.err
    package = new_project / "src" / PACKAGE
    assert (package / "strategies" / "toy_ddp.py").is_file()
    assert (package / "accelerators" / "toy.py").is_file()
    # The built-in specs the project's specs extend come along; unrelated ones do not.
    assert (package / "strategies" / "ddp.py").is_file()
    assert not (package / "strategies" / "ddp_spawn.py").exists()
    assert (new_project / "tests" / "generated" / "test_toy.py").is_file()
    check = stratgen("check", "--project", new_project)
    assert check.code == 0, check.out + check.err
    listing = stratgen("list", "--project", new_project, "--no-probe")
    assert listing.code == 0, listing.err
    assert "toy_ddp" in listing.out and "ToyDDPStrategy" in listing.out


def test_init_with_lightning_renders_plugins_that_lightning_finds_by_name(tmp_path: Path) -> None:
    """--lightning: the project renders the Lightning target too, declares Lightning as an
    extra, and its README's example (import, then name the accelerator and strategy) works."""
    pytest.importorskip("lightning", reason="the Lightning target needs lightning>=2.6,<2.7")
    project = tmp_path / "acme"
    made = stratgen("init", project, "--defaults", "--package", PACKAGE, "--lightning")
    assert made.code == 0, made.err
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    assert pyproject["tool"]["stratgen"]["targets"] == ["stratlib", "lightning"]
    assert pyproject["project"]["optional-dependencies"]["lightning"] == ["lightning>=2.6,<2.7"]
    assert pyproject["project"]["dependencies"] == [RUNTIME_REQUIREMENT, "torch>=2.4"]
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["lightning"] is True

    generated = stratgen("generate", "--project", project)
    assert generated.code == 0, generated.err
    package = project / "src" / PACKAGE
    assert (package / "lightning" / "pytorch" / "toy.py").is_file()
    assert (package / "lightning" / "fabric" / "toy.py").is_file()
    assert (project / "tests" / "generated" / "test_lightning_toy.py").is_file()
    assert stratgen("check", "--project", project).code == 0

    example = (
        "import lightning as L\n"
        f"import {PACKAGE}.lightning.pytorch\n"
        'trainer = L.Trainer(accelerator="toy", strategy="toy_ddp", devices=2,'
        " logger=False, enable_checkpointing=False, enable_progress_bar=False)\n"
        "print(type(trainer.strategy).__name__, type(trainer.accelerator).__name__)\n"
    )
    assert "import acme_strategies.lightning.pytorch" in (project / "README.md").read_text()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(project / "src"), *sys.path])}
    run = watch.run([sys.executable, "-c", example], env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["ToyDDPStrategy", "ToyAccelerator"]


def test_init_without_lightning_renders_no_plugins(shared_project: Path) -> None:
    pyproject = tomllib.loads((shared_project / "pyproject.toml").read_text())
    assert "targets" not in pyproject["tool"]["stratgen"]
    assert "lightning" not in pyproject["project"]["optional-dependencies"]
    assert not (shared_project / "src" / PACKAGE / "lightning").exists()


def test_the_folder_name_is_the_default_project_and_package_name(tmp_path: Path) -> None:
    result = stratgen("init", tmp_path / "vision-strategies", "--defaults")
    assert result.code == 0, result.err
    answers = yaml.safe_load((tmp_path / "vision-strategies" / ".copier-answers.yml").read_text())
    assert answers["project_name"] == "vision-strategies"
    assert answers["package"] == "vision_strategies"


def test_init_refuses_a_folder_that_is_not_empty(tmp_path: Path) -> None:
    target = tmp_path / "busy"
    target.mkdir()
    (target / "notes.txt").write_text("mine\n")
    result = stratgen("init", target, "--defaults")
    assert result.code == 2
    assert "is not empty" in result.err
    assert [p.name for p in target.iterdir()] == ["notes.txt"]


def test_init_accepts_an_empty_folder(tmp_path: Path) -> None:
    target = tmp_path / "empty"
    target.mkdir()
    result = stratgen("init", target, "--defaults", "--package", "empty_ok")
    assert result.code == 0, result.err
    assert (target / "specs" / "toy.yaml").is_file()


def test_init_refuses_a_bad_package_name(tmp_path: Path) -> None:
    result = stratgen("init", tmp_path / "p", "--defaults", "--package", "Not-A-Name")
    assert result.code == 2
    assert "--package 'Not-A-Name' is not allowed" in result.err
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize(
    ("name", "why"),
    [("zlib", "taken by the standard library"), ("class", "not a keyword"), ("os", "taken")],
)
def test_init_refuses_a_package_name_that_generate_would_refuse(
    tmp_path: Path, name: str, why: str
) -> None:
    """A name every later command refuses (a keyword, the standard library's) is refused by
    init itself, before anything is written."""
    result = stratgen("init", tmp_path / "p", "--defaults", "--package", name)
    assert result.code == 2
    assert f"--package {name!r} is not allowed" in result.err and why in result.err
    assert not (tmp_path / "p").exists()


def test_init_does_not_derive_a_package_name_generate_would_refuse(tmp_path: Path) -> None:
    result = stratgen("init", tmp_path / "json", "--defaults")
    assert result.code == 2
    assert "'json'" in result.err and "pass --package NAME" in result.err
    assert not (tmp_path / "json").exists()


def test_init_asks_for_a_package_name_it_cannot_derive(tmp_path: Path) -> None:
    result = stratgen("init", tmp_path / "2024", "--defaults")
    assert result.code == 2
    assert "pass --package NAME" in result.err
    assert not (tmp_path / "2024").exists()


def test_init_without_a_terminal_needs_defaults(tmp_path: Path) -> None:
    result = stratgen_process("init", tmp_path / "p")
    assert result.returncode == 2
    assert "no terminal" in result.stderr and "--defaults" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "p").exists()


def test_init_reports_a_template_it_cannot_read(tmp_path: Path) -> None:
    result = stratgen(
        "init", tmp_path / "p", "--defaults", "--template", tmp_path / "no-such-template"
    )
    assert result.code == 2
    assert result.err.startswith("error: stratgen init:")
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("folder", ['we"ird', "a b\\c", "née", "-dash-"])
def test_a_folder_name_of_any_characters_makes_a_valid_pyproject(
    tmp_path: Path, folder: str
) -> None:
    target = init_project(tmp_path / folder)
    pyproject = tomllib.loads((target / "pyproject.toml").read_text())  # valid TOML
    name = pyproject["project"]["name"]
    # A distribution name: ASCII letters and digits, '.', '_' or '-' between them.
    assert name[0].isalnum() and name[-1].isalnum(), name
    assert all(c.isascii() and (c.isalnum() or c in "._-") for c in name), name
    readme = (target / "README.md").read_text()
    assert readme.startswith(f"# {name}\n")


def test_every_place_that_installs_the_runtime_asks_for_this_series() -> None:
    """The runtime requirement is written in three files that are not Python: this checkout's
    generated package, the project's own dependencies, and the copier template's default."""
    root = Path(__file__).resolve().parents[4]
    generated = tomllib.loads((root / "generated" / "pyproject.toml").read_text())
    assert RUNTIME_REQUIREMENT in generated["project"]["dependencies"]
    own = tomllib.loads((root / "pyproject.toml").read_text())
    assert RUNTIME_REQUIREMENT in own["project"]["dependencies"]
    copier = yaml.safe_load(
        (root / "generator/stratgen/commands/project_template/copier.yml").read_text()
    )
    assert copier["runtime_requirement"]["default"] == RUNTIME_REQUIREMENT
