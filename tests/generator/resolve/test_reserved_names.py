"""Reserved names cannot go stale: they are compared with the core classes of the generated
package and with what generated modules import."""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from pathlib import Path

import pytest
from stratcore import contract

from stratgen.resolve.checks import RESERVED_CLASS_NAMES, reserved_option_names
from stratgen.resolve.reserved_names import CONSTRUCTOR_NAMES, REGISTRY_MODULE_NAMES
from tests.support.generator import REPO, STRATEGY_SPEC, make_project, run_cli

RESERVED_OPTION_NAMES = reserved_option_names()
#: Options the core reads on purpose: mixins declare them as class-level defaults.
CORE_READ_OPTIONS = contract.core_read_options()


def _core_strategy_classes() -> list[type]:
    """StrategyBase, the topology mixins and every wrapper mixin of the runtime."""
    classes = []
    for module, name in [
        contract.STRATEGY_ROOT,
        *contract.BASES.values(),
        *(w.base for w in contract.WRAPPERS.values() if w.base is not None),
    ]:
        classes.append(getattr(importlib.import_module(module), name))
    return classes


def _instance_attributes(cls: type) -> set[str]:
    """Public attributes that methods of ``cls`` (and its core bases) assign on ``self``."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("stratcore."):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                targets = [node.target]
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                    and not target.attr.startswith("_")
                ):
                    names.add(target.attr)
    return names


def test_every_public_core_attribute_is_a_reserved_option_name() -> None:
    classes = _core_strategy_classes()
    names = {"StrategyBase", "ParallelStrategyBase", "SingleDeviceStrategyBase", "DDPStrategyBase"}
    assert names <= {c.__name__ for c in classes}
    unreserved = {}
    for cls in classes:
        public = {n for n in dir(cls) if not n.startswith("_")} | _instance_attributes(cls)
        missing = public - RESERVED_OPTION_NAMES - CORE_READ_OPTIONS
        if missing:
            unreserved[cls.__name__] = sorted(missing)
    # The generator reads these names from the core's source (stratgen.resolve.runtime_facts).
    assert not unreserved, f"the generator does not see these core attributes: {unreserved}"


def test_get_strategy_arguments_are_reserved() -> None:
    factory = importlib.import_module("stratcore.factory")
    parameters = inspect.signature(factory.StrategyFactory.get_strategy).parameters
    named = {
        n
        for n, p in parameters.items()
        if p.kind is not inspect.Parameter.VAR_KEYWORD and n != "self"
    }
    assert named <= RESERVED_OPTION_NAMES


def test_names_generated_modules_import_are_reserved_class_names() -> None:
    # The names the contract gives for runtime classes are all reserved
    # (stratgen.resolve.reserved_names derives the set from them); here: whatever the checked-in
    # generated modules import besides generated classes must be among them.
    names: set[str] = set()
    package = REPO / "generated" / "stratlib"
    generated_classes = set()
    imported = set()
    for path in package.rglob("*.py"):
        if {"core", "hooks"} & set(path.relative_to(package).parts):  # written by hand
            continue
        # The Lightning target's modules are checked by stratgen.targets.lightning.
        if path.relative_to(package).parts[0] == "lightning":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                generated_classes.add(node.name)
            if isinstance(node, ast.ImportFrom):
                imported |= {a.name for a in node.names if a.name[0].isupper()}
    backend_constants = {n for n in imported if n.isupper()}  # checked against the catalog
    names |= imported - generated_classes - backend_constants
    assert names - RESERVED_CLASS_NAMES == set()


@pytest.mark.parametrize("name", ["model", "launch", "reduce", "root_device", "accelerator"])
def test_a_reserved_option_name_is_refused(tmp_path: Path, name: str) -> None:
    spec = STRATEGY_SPEC.replace("      level:", f"      {name}:").replace("{level: 3}", "{}")
    root = make_project(tmp_path, {"mine.yaml": spec})
    result = run_cli("generate", "--project", root)
    assert result.code == 2
    assert f"strategies[0].options.{name}: {name!r} is reserved" in result.err
    assert not (root / "out").exists()


@pytest.mark.parametrize("name", ["CheckpointIO", "Literal", "DDPStrategyBase", "GLOO"])
def test_a_reserved_class_name_is_refused(tmp_path: Path, name: str) -> None:
    spec = STRATEGY_SPEC.replace("MyStrategy", name)
    root = make_project(tmp_path, {"mine.yaml": spec})
    result = run_cli("validate", "--project", root, root / "specs" / "mine.yaml")
    assert result.code == 2
    assert f"strategies[0].class_name: {name!r} is reserved" in result.err


def test_what_the_registry_module_defines_is_reserved() -> None:
    tree = ast.parse((REPO / "generated" / "stratlib" / "registry.py").read_text())
    defined = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name) and not target.id.startswith("_")
    }
    assert defined == REGISTRY_MODULE_NAMES


def test_what_a_generated_constructor_uses_is_reserved() -> None:
    """Every name a generated __init__ binds or reads besides its options: its own parameters
    and the builtins it calls (the core's option names are checked above)."""
    used: set[str] = set()
    for path in (REPO / "generated" / "stratlib" / "strategies").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.FunctionDef) and node.name == "__init__"):
                continue
            arguments = node.args
            options = {a.arg for a in arguments.kwonlyargs}
            used |= {a.arg for a in arguments.args}
            used |= {a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None}
            used |= {
                name.id
                for statement in node.body
                for name in ast.walk(statement)
                if isinstance(name, ast.Name) and name.id not in options
            }
    assert used and used <= CONSTRUCTOR_NAMES, used - CONSTRUCTOR_NAMES


@pytest.mark.parametrize("name", ["args", "kwargs", "super", "self"])
def test_an_option_named_like_the_constructors_own_names_is_refused(
    tmp_path: Path, name: str
) -> None:
    spec = STRATEGY_SPEC.replace("      level:", f"      {name}:").replace("{level: 3}", "{}")
    root = make_project(tmp_path, {"mine.yaml": spec})
    for argv in (("validate", root / "specs" / "mine.yaml"), ("generate",), ("check",)):
        command = argv[0]
        result = run_cli(*argv, "--project", root)
        assert result.code == 2, (command, result.err)
        assert "specs/mine.yaml:9:" in result.err
        assert f"strategies[0].options.{name}: {name!r} is reserved" in result.err
    assert not (root / "out").exists()


@pytest.mark.parametrize("name", ["REGISTRY", "ValueError", "Exception", "StrategyFactory"])
def test_a_class_name_of_the_registry_module_or_a_builtin_is_refused(
    tmp_path: Path, name: str
) -> None:
    spec = STRATEGY_SPEC.replace("MyStrategy", name)
    root = make_project(tmp_path, {"mine.yaml": spec})
    result = run_cli("generate", "--project", root)
    assert result.code == 2
    assert f"specs/mine.yaml:4:17: strategies[0].class_name: {name!r} is reserved" in result.err
    assert not (root / "out").exists()


@pytest.mark.parametrize("package", ["os", "json", "typing", "torch", "stratcore"])
def test_a_package_name_of_the_standard_library_or_the_runtime_is_refused(
    tmp_path: Path, package: str
) -> None:
    root = make_project(tmp_path, {"mine.yaml": STRATEGY_SPEC}, package=package)
    result = run_cli("generate", "--project", root)
    assert result.code == 2 and result.err.count("\n") == 1, result.err
    assert f"package name {package!r} is taken" in result.err
    assert not (root / "out").exists()


LIGHTNING = 'targets = ["stratlib", "lightning"]\n'
#: A strategy the Lightning target renders a plugin of (a ddp strategy Lightning lacks).
PLUGGED = STRATEGY_SPEC.replace(
    "    base: parallel\n", "    base: parallel\n    wrapper: ddp\n    launcher: popen\n"
)


@pytest.mark.parametrize("stem", ["9lives", "class", "__init__"])
def test_a_spec_file_no_plugin_module_can_be_named_after_is_refused(
    tmp_path: Path, stem: str
) -> None:
    root = make_project(tmp_path, {f"{stem}.yaml": PLUGGED}, config=LIGHTNING)
    result = run_cli("generate", "--project", root)
    assert result.code == 2, result.err
    assert result.err.startswith(f"error: specs/{stem}.yaml: spec file name '{stem}.yaml'")
    assert not (root / "out").exists()
    # Without the Lightning target the name becomes no module: the spec is fine.
    (root / "pyproject.toml").write_text(
        (root / "pyproject.toml").read_text().replace(LIGHTNING, "")
    )
    assert run_cli("generate", "--project", root).code == 0


ENVIRONMENT = """\
version: 1
cluster_environments:
  - name: myenv
    class_name: ClusterEnvironment
    extends: lightning
    detect: {all_set: [MY_JOB]}
"""


def test_a_class_name_that_would_shadow_lightnings_is_refused_at_its_location(
    tmp_path: Path,
) -> None:
    plugged = PLUGGED.replace("MyStrategy", "StrategyAdapter")
    root = make_project(tmp_path / "strategy", {"mine.yaml": plugged}, config=LIGHTNING)
    result = run_cli("generate", "--project", root)
    assert result.code == 2, result.err
    assert (
        "specs/mine.yaml:4:17: strategies[0].class_name: class 'StrategyAdapter' would"
        in result.err
    )
    specs = {"mine.yaml": PLUGGED.replace("[lightning]", "[myenv]"), "env.yaml": ENVIRONMENT}
    root = make_project(tmp_path / "environment", specs, config=LIGHTNING)
    result = run_cli("generate", "--project", root)
    assert result.code == 2, result.err
    assert (
        "specs/env.yaml:4:17: cluster_environments[0].class_name: class 'ClusterEnvironment'"
        in result.err
    )
    assert not (root / "out").exists()
