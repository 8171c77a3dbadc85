"""Property-based tests: random valid specs render to code that compiles and imports, and any
text in descriptions and option docs comes back verbatim from the generated docstrings.

Each example is rendered in memory, written to a folder of its own and imported under a
package name of its own, so examples never see each other's modules.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import json
import keyword
import sys
from pathlib import Path
from typing import Any

import black
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stratcore.contract import core_read_options

from stratgen.codegen.formatting import LINE_LENGTH, Formatter
from stratgen.project import Project, load_config
from stratgen.resolve.checks import RESERVED_CLASS_NAMES, reserved_option_names
from tests.support.generator import MINIMAL_BASE, args_section, indented, option_text


class PackageFormatter(Formatter):
    """stratgen's formatting for the package's modules, each checked to be what black makes of
    it (stratgen's templates write black's layout and leave black only the statements it is to
    lay out: ``stratgen.codegen.formatting``); the generated tests (not under test here, and the slowest files
    to format) are left as rendered."""

    def format_all(self, items: list[tuple[str, str]]) -> list[str]:
        package = [index for index, (_, name) in enumerate(items) if "/tests/" not in name]
        formatted = super().format_all([items[index] for index in package])
        results = [source for source, _ in items]
        for index, text in zip(package, formatted, strict=True):
            assert black.format_str(text, mode=BLACK) == text, f"not black's layout: {text}"
            results[index] = text
        return results


BLACK = black.Mode(line_length=LINE_LENGTH, target_versions={black.TargetVersion.PY311})
_counter = itertools.count()

TAKEN_NAMES = {"strategy", "single_device", "parallel"}
TAKEN_CLASSES = {
    "Strategy",
    "SingleDeviceStrategy",
    "ParallelStrategy",
    "CPUAccelerator",
    "PrecisionPlugin",
    "LightningEnvironment",
    "GLOO",
}
CORE_OPTIONS = core_read_options()

names = st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True).filter(
    lambda n: not keyword.iskeyword(n)
    and not keyword.issoftkeyword(n)
    and n not in reserved_option_names()
    and n not in TAKEN_NAMES
    and n not in CORE_OPTIONS
)
class_names = st.from_regex(r"[A-Z][A-Za-z0-9]{0,15}", fullmatch=True).filter(
    lambda n: not keyword.iskeyword(n) and n not in RESERVED_CLASS_NAMES | TAKEN_CLASSES
)
# Any text a YAML file can carry (lone surrogates are not characters, so no spec holds one).
texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=120)
prose = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=240)


@st.composite
def options(draw: Any) -> dict[str, dict[str, Any]]:
    result = {}
    for name in draw(st.lists(names, max_size=4, unique=True)):
        kind = draw(st.sampled_from(["bool", "int", "float", "str", "path", "mapping", "any"]))
        value = {
            "bool": st.booleans(),
            "int": st.integers(-(10**12), 10**12),
            "float": st.floats(allow_nan=False, allow_infinity=False, width=64),
            "str": texts,
            "path": st.none() | texts,
            "mapping": st.none(),
            "any": st.none() | st.integers() | texts,
        }[kind]
        option: dict[str, Any] = {"type": kind, "default": draw(value)}
        if kind in ("str", "int") and draw(st.booleans()):
            extra = draw(st.lists(value, max_size=3))
            option["choices"] = list(dict.fromkeys([option["default"], *extra]))
        if draw(st.booleans()):
            option["doc"] = draw(prose)
        result[name] = option
    return result


@st.composite
def specs(draw: Any) -> dict[str, Any]:
    parallel = draw(st.booleans())
    strategy: dict[str, Any] = {
        "name": draw(names),
        "class_name": draw(class_names),
        "base": "parallel" if parallel else "single_device",
        "description": draw(prose),
        "options": draw(options()),
    }
    if parallel:
        strategy["cluster"] = ["lightning"]
        strategy["launcher"] = draw(st.sampled_from(["popen", "spawn", "fork", "external", "none"]))
    aliases = {}
    for alias in draw(st.lists(names, max_size=2, unique=True)):
        if alias == strategy["name"]:
            continue
        preset = {}
        for option, declared in strategy["options"].items():
            if draw(st.booleans()):
                preset[option] = declared.get("choices", [declared["default"]])[-1]
        aliases[alias] = preset
    strategy["aliases"] = aliases
    environment = {
        "name": "env_" + strategy["name"],
        "class_name": strategy["class_name"] + "Env",
        "extends": "lightning",
        "description": draw(prose),
    }
    return {"version": 1, "strategies": [strategy], "cluster_environments": [environment]}


def to_yaml(spec: dict[str, Any]) -> str:
    """JSON is YAML 1.2; characters YAML refuses in a file are written as escapes."""
    text = json.dumps(spec, ensure_ascii=False, allow_nan=False)
    return "".join(
        c if c.isprintable() or c in " \t" else f"\\u{ord(c):04x}" if ord(c) < 0x10000 else c
        for c in text
    )


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("properties")


def render_and_import(workspace: Path, spec: dict[str, Any]) -> Any:
    number = next(_counter)
    root = workspace / f"p{number}"
    (root / "specs").mkdir(parents=True)
    (root / "specs" / "base.yaml").write_text(MINIMAL_BASE, encoding="utf-8")
    (root / "specs" / "prop.yaml").write_text(to_yaml(spec), encoding="utf-8")
    package = f"proplib{number}"
    config = load_config(
        root, {"package": package, "output": "out", "tests": "out/tests", "builtin_specs": False}
    )
    plan = Project(config, PackageFormatter()).plan()
    for path, data in plan.files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        if path.endswith(".py"):
            compile(data, path, "exec")
    sys.path.insert(0, str(root / "out"))
    try:
        return importlib.import_module(f"{package}.registry"), importlib.import_module(package)
    finally:
        sys.path.remove(str(root / "out"))


def forget(package: Any) -> None:
    prefix = package.__name__
    for name in [m for m in sys.modules if m == prefix or m.startswith(prefix + ".")]:
        del sys.modules[name]


@settings(max_examples=25)
@given(spec=specs())
def test_random_valid_specs_render_to_importable_code(
    workspace: Path, spec: dict[str, Any]
) -> None:
    registry, package = render_and_import(workspace, spec)
    try:
        strategy = spec["strategies"][0]
        cls = getattr(package, strategy["class_name"])
        assert registry.REGISTRY.strategies[strategy["name"]].cls is cls
        for alias, preset in strategy["aliases"].items():
            assert registry.REGISTRY.strategies[alias].preset == preset
        parameters = inspect.signature(cls).parameters
        for name, option in strategy["options"].items():
            assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
            assert parameters[name].default == option["default"]
        env = spec["cluster_environments"][0]
        assert registry.REGISTRY.cluster_environments[env["name"]].__name__ == env["class_name"]
    finally:
        forget(package)


@settings(max_examples=40)
@given(description=prose, doc=prose, env_description=prose)
def test_descriptions_and_option_docs_round_trip_verbatim(
    workspace: Path, description: str, doc: str, env_description: str
) -> None:
    spec = {
        "strategies": [
            {
                "name": "texty",
                "class_name": "TextyStrategy",
                "base": "single_device",
                "description": description,
                "options": {"knob": {"type": "bool", "default": False, "doc": doc}},
            }
        ],
        "cluster_environments": [
            {
                "name": "texty_env",
                "class_name": "TextyEnvironment",
                "extends": "lightning",
                "description": env_description,
            }
        ],
    }
    _, package = render_and_import(workspace, spec)
    try:
        # The generator adds only indentation to continuation lines, then its own sections.
        strategy_doc = package.TextyStrategy.__doc__
        assert strategy_doc.startswith(indented(description, "    ") + "\n\n    Registry name:")
        assert option_text(args_section(strategy_doc)["knob"], doc) == doc
        # A multi-line docstring closes on a line of its own (indented like the class body).
        env_doc = package.TextyEnvironment.__doc__
        expected = indented(env_description, "    ")
        assert env_doc in (expected, expected + "\n    ")
    finally:
        forget(package)
