"""Template upgrades reach existing projects: `copier update` from a tagged template
repository brings the template's changes and keeps the user's edits."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from stratcore.testing import watch

from tests.support.user_projects import ROOT, stratgen

copier = pytest.importorskip("copier")

if shutil.which("git") is None:  # pragma: no cover - git is part of the development setup
    pytest.skip("copier update needs git", allow_module_level=True)


def git(*args: str, cwd: Path) -> str:
    return watch.run(["git", *args], cwd=cwd, check=True).stdout


@pytest.fixture(autouse=True)
def _git_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "Test")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "test@example.com")


def commit_all(folder: Path, message: str) -> None:
    git("add", "-A", cwd=folder)
    git("commit", "-q", "-m", message, cwd=folder)


def test_update_brings_template_changes_and_keeps_user_edits(tmp_path: Path) -> None:
    # The template, published as a git repository with a release tag.
    template = tmp_path / "template"
    shutil.copytree(ROOT / "generator" / "stratgen" / "commands" / "project_template", template)
    git("init", "-q", cwd=template)
    commit_all(template, "template 1.0.0")
    git("tag", "v1.0.0", cwd=template)

    # A project made from it, generated and committed.
    project = tmp_path / "acme"
    made = stratgen("init", project, "--defaults", "--package", "acme", "--template", template)
    assert made.code == 0, made.err
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["_commit"] == "v1.0.0"
    assert stratgen("generate", "--project", project).code == 0
    git("init", "-q", cwd=project)
    commit_all(project, "start from the template")

    # The user's own work: a strategy added to the spec, a section added to the README.
    spec = project / "specs" / "toy.yaml"
    user_strategy = (
        "\n  - name: toy_spawn\n    class_name: ToySpawnStrategy\n    extends: ddp_spawn\n"
        "    accelerators: [toy]\n"
    )
    spec.write_text(spec.read_text() + user_strategy)
    readme = project / "README.md"
    readme.write_text(readme.read_text() + "\n## Our notes\n\nKept across template updates.\n")
    assert stratgen("generate", "--project", project).code == 0
    commit_all(project, "our strategy")

    # The template moves on: a new development tool, a new file, a changed paragraph.
    pyproject = template / "pyproject.toml.jinja"
    pyproject.write_text(
        pyproject.read_text().replace('"pytest>=8",', '"pytest>=8",\n    "pytest-xdist>=3.5",')
    )
    (template / ".editorconfig").write_text("root = true\n\n[*]\nindent_style = space\n")
    readme_template = template / "README.md.jinja"
    readme_template.write_text(
        readme_template.read_text().replace(
            "## Working on it", "## Working on it\n\nRun everything below from the project folder."
        )
    )
    commit_all(template, "template 1.1.0")
    git("tag", "v1.1.0", cwd=template)

    copier.run_update(project, defaults=True, overwrite=True, unsafe=False, quiet=True)

    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["_commit"] == "v1.1.0"
    assert '"pytest-xdist>=3.5"' in (project / "pyproject.toml").read_text()
    assert (project / ".editorconfig").read_text().startswith("root = true")
    updated_readme = readme.read_text()
    assert "Run everything below from the project folder." in updated_readme
    assert "## Our notes\n\nKept across template updates." in updated_readme
    assert spec.read_text().endswith(user_strategy)
    for path in (readme, spec, project / "pyproject.toml"):
        assert "<<<<<<<" not in path.read_text(), path
    # The update touched no generated file: they still match the specs.
    check = stratgen("check", "--project", project)
    assert check.code == 0, check.out + check.err
