"""The generator's folders are its stages, and the generator's tests mirror them.

``generator/stratgen`` holds its entry points and pipeline (``ENTRY_MODULES``) beside one
folder per stage (the layers of ``test_generator_layers``), whose ``__init__`` says what the
stage does and what it may import, and the jinja2 templates, which the wheel ships as files of
the package; ``tests/generator`` has a folder of tests for each stage that has tests of its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.architecture.test_generator_layers import LAYERS

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "generator" / "stratgen"
TESTS = REPO / "tests" / "generator"
#: The modules at the top of the package: the version, the command line, the pipeline.
ENTRY_MODULES = {"__init__.py", "__main__.py", "cli.py", "project.py"}
#: The folders of stratgen's own jinja2 templates, by what they render.
TEMPLATE_FOLDERS = {"package", "tests", "docs"}
#: What the generator's tests keep beside their folders: the data they compare against.
TEST_DATA = {"fixtures", "golden"}


def _stage_folders() -> set[str]:
    return {
        prefix.split(".")[1]
        for _, prefixes in LAYERS
        for prefix in prefixes
        if prefix.count(".") == 1
    } & {path.name for path in PACKAGE.iterdir() if path.is_dir()}


def _folders(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if p.is_dir() and p.name != "__pycache__"}


def test_the_package_top_holds_the_entry_points_the_stages_and_the_templates() -> None:
    modules = {p.name for p in PACKAGE.glob("*.py")}
    assert modules == ENTRY_MODULES
    assert _folders(PACKAGE) == _stage_folders() | {"templates"}
    assert {"spec", "resolve", "codegen", "targets", "output", "commands"} <= _stage_folders()


def test_every_stage_says_what_it_does_and_what_it_may_import() -> None:
    for stage in sorted(_stage_folders()):
        doc = ast.get_docstring(ast.parse((PACKAGE / stage / "__init__.py").read_text()))
        assert doc and "Imports:" in doc, f"stratgen/{stage}/__init__.py: say what it may import"


def test_the_templates_are_jinja2_templates_of_the_package() -> None:
    templates = PACKAGE / "templates"
    assert _folders(templates) == TEMPLATE_FOLDERS
    files = [p for p in templates.rglob("*") if p.is_file()]
    assert files and all(p.suffix == ".j2" for p in files), "copier templates live elsewhere"


def test_the_generators_tests_mirror_its_stages() -> None:
    folders = _folders(TESTS) - TEST_DATA
    assert folders <= _stage_folders(), folders - _stage_folders()
    for folder in folders:
        assert (TESTS / folder / "__init__.py").is_file(), folder
