"""Files that wire stratgen into other tools: the pre-commit hook this repository provides,
the CI and pre-commit examples for projects, and the attributes marking generated files."""

from __future__ import annotations

import re

import yaml

from tests.support.generator import REPO


def test_pre_commit_hook_runs_check_on_relevant_changes() -> None:
    (hook,) = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "stratgen-check"
    assert hook["entry"] == "stratgen check"
    assert hook["pass_filenames"] is False
    assert hook["language"] == "python"
    files = re.compile(hook["files"])
    for path in (
        "specs/ddp.yaml",
        "templates/package/module.py.j2",
        "generated/stratlib/registry.py",
    ):
        assert files.search(path), path
    for path in ("README.md", "generator/stratgen/cli.py", "tests/generator/commands/test_cli.py"):
        assert not files.search(path), path


def test_pre_commit_config_example_uses_the_hook() -> None:
    config = yaml.safe_load((REPO / "examples" / "ci" / "pre-commit-config.yaml").read_text())
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    assert {hook["id"] for hook in hooks} == {"stratgen-check"}
    local = next(repo for repo in config["repos"] if repo["repo"] == "local")["hooks"][0]
    assert local["entry"] == "stratgen check" and local["pass_filenames"] is False


def test_ci_example_installs_the_project_and_runs_check() -> None:
    workflow = yaml.safe_load((REPO / "examples" / "ci" / "stratgen-check.yml").read_text())
    (job,) = workflow["jobs"].values()
    runs = [step.get("run", "") for step in job["steps"]]
    assert any("pip install ." in run for run in runs)
    assert runs[-1] == "stratgen check"
    assert any(step.get("uses", "").startswith("actions/checkout") for step in job["steps"])


def test_generated_files_are_marked_as_generated() -> None:
    attributes = (REPO / ".gitattributes").read_text().splitlines()
    assert "generated/** linguist-generated=true" in attributes
    assert "tests/generator/golden/** linguist-generated=true" in attributes
