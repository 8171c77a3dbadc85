"""Golden records: fixture projects rendered and compared file by file with checked-in trees.

A difference is either a regression or an intended change in what stratgen generates; for the
latter, regenerate the expected trees with `python tests/generator/update_goldens.py` and review
the diff.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import inspect
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stratcore
import yaml
from stratcore.version import RUNTIME_SERIES

from stratgen.project import Project, load_config
from tests.support.generator import (
    GOLDEN_FIXTURES,
    UPDATE_COMMAND,
    args_section,
    golden_cases,
    golden_render,
    golden_stored,
    indented,
    option_text,
)


def _first_difference(expected: dict[str, bytes], actual: dict[str, bytes]) -> str:
    for path in sorted(set(expected) | set(actual)):
        if expected.get(path) != actual.get(path):
            diff = difflib.unified_diff(
                expected.get(path, b"").decode("utf-8", "replace").splitlines(keepends=True),
                actual.get(path, b"").decode("utf-8", "replace").splitlines(keepends=True),
                f"golden/{path}",
                f"rendered/{path}",
            )
            return "".join(list(diff)[:60])
    return ""


def test_there_are_golden_cases() -> None:
    assert {"minimal", "extends_builtin", "hostile"} <= set(golden_cases())


@pytest.mark.parametrize("case", golden_cases())
def test_rendering_matches_the_golden_tree(case: str) -> None:
    rendered = golden_render(case)
    stored = golden_stored(case)
    missing = sorted(set(rendered) - set(stored))
    extra = sorted(set(stored) - set(rendered))
    changed = sorted(p for p in set(rendered) & set(stored) if rendered[p] != stored[p])
    if missing or extra or changed:
        pytest.fail(
            f"generated output of tests/generator/fixtures/golden/{case} differs from "
            f"tests/generator/golden/{case}: "
            f"{len(changed)} changed {changed[:5]}, {len(missing)} new {missing[:5]}, "
            f"{len(extra)} gone {extra[:5]}. If the change is intended, run `{UPDATE_COMMAND}` "
            f"and review the diff.\n{_first_difference(stored, rendered)}"
        )


@pytest.mark.parametrize("case", golden_cases())
def test_packages_import_the_runtime_and_carry_no_copy_of_it(case: str) -> None:
    """The runtime is a dependency: no module of it is rendered, the generated root strategy
    builds on ``stratcore``'s, and the package checks the runtime's series first."""
    project = Project(load_config(GOLDEN_FIXTURES / case))
    plan = project.plan()
    package_dir = project.config.package_dir
    runtime_sources = [
        p.read_bytes() for p in Path(stratcore.__file__).parent.rglob("*.py") if p.stat().st_size
    ]
    rendered = [path for path in plan.files if path.startswith(f"{package_dir}/")]
    assert not [p for p in rendered if "/core/" in p]
    for path in rendered:
        assert not any(source in plan.files[path] for source in runtime_sources), path
    init = plan.files[f"{package_dir}/__init__.py"].decode("utf-8")
    first_import = next(line for line in init.splitlines() if line.startswith(("from ", "import ")))
    assert first_import == "from stratcore.version import check_runtime_version"
    assert f'check_runtime_version("{RUNTIME_SERIES}", "{project.config.package}")' in init
    root = plan.files[f"{package_dir}/strategies/strategy.py"].decode("utf-8")
    assert "from stratcore.strategy import StrategyBase" in root


# --- the generated packages work --------------------------------------------------------------


@pytest.fixture
def import_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Generate a golden fixture project into a temporary folder and import its package."""
    imported: list[str] = []

    def load(case: str) -> tuple[Any, Project]:
        project = Project(load_config(GOLDEN_FIXTURES / case))
        plan = project.plan()
        for path, data in plan.files.items():
            target = tmp_path / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        monkeypatch.syspath_prepend(str(tmp_path / project.config.output))
        monkeypatch.chdir(tmp_path)
        imported.append(project.config.package)
        importlib.import_module(f"{project.config.package}.registry")
        return importlib.import_module(project.config.package), project

    yield load
    for package in imported:
        for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
            del sys.modules[name]


def test_extends_builtin_package_holds_the_chain_and_nothing_unrelated(import_project: Any) -> None:
    package, project = import_project("extends_builtin")
    catalog = project.plan().catalog
    chain = []
    current = catalog.strategies["acme_ddp"]
    while current is not None:
        chain.append(current.name)
        current = current.parent
    chain_classes = {catalog.strategies[n].class_name for n in chain}
    assert chain[1] == "ddp" and chain[-1] == "strategy"

    registry = package.registry.REGISTRY.strategies
    assert registry["acme_ddp"].cls is package.AcmeDDPStrategy
    assert registry["acme_ddp_static"].preset == {
        "static_graph": True,
        "find_unused_parameters": False,
    }
    # Every registered strategy is on the chain or a base kind; other built-ins stay out.
    for entry in registry.values():
        assert entry.cls.__name__ in chain_classes | {"SingleDeviceStrategy"}
    assert issubclass(package.AcmeDDPStrategy, package.strategies.ddp.DDPStrategy)
    assert package.AcmeDDPStrategy.__module__ == "acme_strategies.strategies.acme_ddp"
    # Option defaults: the child's own default wins over the parent's.
    signature = inspect.signature(package.AcmeDDPStrategy)
    assert signature.parameters["find_unused_parameters"].default is True
    assert signature.parameters["warmup_steps"].default == 10
    strategy = package.get_strategy("acme_ddp_static", accelerator="cpu", devices=2)
    assert strategy.static_graph is True and strategy.find_unused_parameters is False
    assert strategy.warmup_steps == 10


def _hostile_spec() -> dict[str, Any]:
    text = (GOLDEN_FIXTURES / "hostile" / "specs" / "hostile.yaml").read_text("utf-8")
    return yaml.safe_load(text)


def test_hostile_text_comes_out_verbatim(import_project: Any, tmp_path: Path) -> None:
    spec = _hostile_spec()
    package, _ = import_project("hostile")
    assert not (tmp_path / "OWNED").exists()

    hostile, indented_spec = spec["strategies"]
    doc = package.HostileStrategy.__doc__
    assert doc.startswith(indented(hostile["description"], "    ") + "\n\n    Registry names:")
    docs = args_section(doc)
    for name, option in hostile["options"].items():
        assert option_text(docs[name], option["doc"]) == option["doc"]
    assert inspect.signature(package.HostileStrategy).parameters["level"].default == (
        hostile["options"]["level"]["default"]
    )
    assert (
        package.registry.REGISTRY.strategies["hostile_quoted"].preset
        == hostile["aliases"]["hostile_quoted"]
    )
    alias_line = (
        f"- ``\"hostile_quoted\"``: level={hostile['aliases']['hostile_quoted']['level']!r}"
    )
    assert alias_line in doc

    child_doc = package.HostileIndentedStrategy.__doc__
    assert child_doc.startswith(indented(indented_spec["description"], "    ") + "\n\n")

    env = spec["cluster_environments"][0]
    assert package.HostileEnvironment.__doc__ == indented(env["description"], "    ") + "\n    "
    assert package.HostileEnvironment.detect_condition.not_equal == {
        k: tuple(v) for k, v in env["detect"]["not_equal"].items()
    }
    assert package.registry.REGISTRY.backends["evil"].name == "evil"


def test_hostile_backend_description_stays_in_comments() -> None:
    backends = golden_stored("hostile")["out/hostilelib/backends.py"].decode("utf-8")
    tree = ast.parse(backends)
    kinds = {type(node).__name__ for node in tree.body}
    assert kinds <= {"Expr", "ImportFrom", "Assign"}
    assert not any(isinstance(n, ast.Import) for n in ast.walk(tree))
    assert [n for n in tree.body if isinstance(n, ast.Expr)] == tree.body[:1]  # the docstring
    assert "#: import os; os.system('echo owned')  # a second line\\r\n" in backends
